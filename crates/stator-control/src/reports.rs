//! The packet tracer's reports (docs/forwarding.md §11.2, docs/operations.md "Tracing a
//! packet"): a thread reads the events the data plane reports — the XDP program's
//! `stator_trace` ring, or the AF_XDP packet threads' queue ([`TraceSource`]) — names what
//! they name from the running configuration (the node, the VIP, the backend), and sends each
//! one as a UDP datagram of JSON to the receiver the traced packet named.
//!
//! The data path reports only authentic marks (their MAC verifies under the cluster's key,
//! docs/forwarding.md §11.1) and limits reports per node (`tracer.reports_per_sec`, counted
//! `trace_limited`). This thread sends a report only
//! - to a receiver inside `tracer.receivers` (else counted `receiver_refused`), and
//! - when it is not longer than the traced packet (`ip_len`; else `oversize`): whoever a mark
//!   names, no sender gets more bytes out of a node than it put in.
//!
//! Events that name no usable receiver (a family other than 4 or 6, port 0) are counted and not
//! sent. A report says what the node decided, so it goes out even when the packet itself was
//! later dropped by §5 (no route, …): what happened to the packet after the decision is the
//! forwarder's counters' business.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use stator_abi::{STATOR_NO_REAL, STATOR_NO_SLOT, STATOR_NO_VIP, TraceEvent, TraceKind};
use tokio::sync::watch;

use crate::error::ControlError;
use crate::view::View;

pub use stator_plane::TraceSource;

/// What the reporter has done.
#[derive(Debug, Default)]
pub struct ReporterStats {
    /// Reports sent.
    pub sent: AtomicU64,
    /// Events whose receiver was unusable.
    pub invalid: AtomicU64,
    /// Reports the socket refused.
    pub failed: AtomicU64,
    /// Events whose receiver is outside `tracer.receivers`.
    pub receiver_refused: AtomicU64,
    /// Reports that would have been longer than the packet that caused them.
    pub oversize: AtomicU64,
}

/// The reporter's thread; dropping it stops the thread.
#[derive(Debug)]
pub struct Reporter {
    stop: Arc<AtomicBool>,
    stats: Arc<ReporterStats>,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Starts reading `ring`, naming events from the latest `view`.
    ///
    /// # Errors
    /// The thread or the sockets cannot be created.
    pub fn start(
        mut ring: Box<dyn TraceSource>,
        view: watch::Receiver<Arc<View>>,
        stats: Arc<ReporterStats>,
    ) -> Result<Self, ControlError> {
        let v4 = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
            .map_err(|e| ControlError::io("binding the tracer's IPv4 socket", e))?;
        let v6 = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).ok();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&stop), Arc::clone(&stats));
        let thread = std::thread::Builder::new()
            .name("stator-tracer".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let mut any = false;
                    while let Some(e) = ring.next_event() {
                        any = true;
                        let v = Arc::clone(&view.borrow());
                        let body = report(&e, &v).to_string();
                        let to = match destination(&e, &v.config.tracer.receivers, body.len()) {
                            Ok(to) => to,
                            Err(Refused::Invalid) => {
                                st.invalid.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Err(Refused::Receiver) => {
                                st.receiver_refused.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Err(Refused::Oversize) => {
                                st.oversize.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        };
                        let sock = if to.is_ipv4() { Some(&v4) } else { v6.as_ref() };
                        match sock.map(|s| s.send_to(body.as_bytes(), to)) {
                            Some(Ok(_)) => st.sent.fetch_add(1, Ordering::Relaxed),
                            _ => st.failed.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                    if !any {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
            .map_err(|e| ControlError::io("starting the tracer thread", e))?;
        Ok(Self {
            stop,
            stats,
            thread: Some(thread),
        })
    }

    /// Its counts.
    pub fn stats(&self) -> &ReporterStats {
        &self.stats
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why a report is not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The mark named no usable receiver.
    Invalid,
    /// The receiver is outside `tracer.receivers`.
    Receiver,
    /// The report is longer than the packet that caused it.
    Oversize,
}

/// Where event `e`'s report of `len` bytes goes: its receiver, when usable, inside
/// `receivers`, and the report no longer than the traced packet.
pub fn destination(
    e: &TraceEvent,
    receivers: &[stator_core::Prefix],
    len: usize,
) -> Result<SocketAddr, Refused> {
    let to = receiver(e).ok_or(Refused::Invalid)?;
    if !receivers.iter().any(|p| p.contains(to.ip())) {
        return Err(Refused::Receiver);
    }
    if len > usize::from(e.ip_len) {
        return Err(Refused::Oversize);
    }
    Ok(to)
}

/// Where an event's report goes, when the mark named a usable receiver.
pub fn receiver(e: &TraceEvent) -> Option<SocketAddr> {
    let port = u16::from_be_bytes(e.receiver_port);
    let ip = addr(&e.receiver, e.receiver_family)?;
    (port != 0 && !ip.is_unspecified()).then_some(SocketAddr::new(ip, port))
}

fn addr(bytes: &[u8; 16], family: u8) -> Option<IpAddr> {
    match family {
        4 => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(*bytes))),
        _ => None,
    }
}

/// The JSON report of an event, with names from `view`.
pub fn report(e: &TraceEvent, view: &View) -> Value {
    let config = &view.config;
    let built = view.built.as_deref();
    let vip = (e.vip_id != STATOR_NO_VIP)
        .then(|| built?.vips.iter().position(|v| v.id.0 == e.vip_id))
        .flatten();
    let (backend, backend_addr) = match (vip, e.real_id) {
        (Some(i), r) if r != STATOR_NO_REAL => built
            .and_then(|b| b.vips[i].reals.iter().find(|x| x.id.0 == r))
            .map(|x| {
                let be = config.backend(x.backend);
                (Some(be.name.clone()), Some(be.address.to_string()))
            })
            .unwrap_or_default(),
        _ => (None, None),
    };
    let f = &e.flow;
    let family = f.family;
    let proto = stator_core::Proto::name_of(f.proto);
    json!({
        "trace_id": e.trace_id,
        "node": config.node.name,
        "hop": e.hop,
        "kind": e.kind().map_or("unknown", TraceKind::label),
        "vip": vip.and_then(|i| config.vips.get(i)).map(|v| v.name.clone()),
        "vip_id": (e.vip_id != STATOR_NO_VIP).then_some(e.vip_id),
        "backend": backend,
        "backend_addr": backend_addr,
        "real_id": (e.real_id != STATOR_NO_REAL).then_some(e.real_id),
        "cause": e.cause().map(|c| c.label()).filter(|c| *c != "none"),
        "slot": (e.slot != STATOR_NO_SLOT).then_some(e.slot),
        "fragment": e.flags & stator_abi::STATOR_TRACE_F_FRAGMENT as u8 != 0,
        "reason": e.drop_reason().map(|r| r.label()),
        "target": addr(&e.target, e.target_family).map(|a| a.to_string()),
        "flow": {
            "src": addr(&f.src, family).map(|a| a.to_string()),
            "dst": addr(&f.dst, family).map(|a| a.to_string()),
            "sport": u16::from_be_bytes(f.sport),
            "dport": u16::from_be_bytes(f.dport),
            "proto": proto,
        },
        "now_ns": e.now_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receivers_need_a_family_an_address_and_a_port() {
        let mut e = TraceEvent {
            receiver_family: 4,
            receiver_port: 9000u16.to_be_bytes(),
            ..TraceEvent::default()
        };
        e.receiver[..4].copy_from_slice(&[192, 0, 2, 1]);
        assert_eq!(receiver(&e), Some("192.0.2.1:9000".parse().unwrap()));
        e.receiver_port = [0, 0];
        assert_eq!(receiver(&e), None, "port 0");
        e.receiver_port = [0, 1];
        e.receiver_family = 5;
        assert_eq!(receiver(&e), None, "no such family");
        e.receiver_family = 6;
        e.receiver = [0; 16];
        assert_eq!(receiver(&e), None, "::");
        e.receiver[15] = 1;
        assert_eq!(receiver(&e), Some("[::1]:1".parse().unwrap()));
    }

    #[test]
    fn reports_go_only_inside_the_receivers_and_never_outgrow_their_packet() {
        let mut e = TraceEvent {
            receiver_family: 4,
            receiver_port: 9000u16.to_be_bytes(),
            ip_len: 1228,
            ..TraceEvent::default()
        };
        e.receiver[..4].copy_from_slice(&[10, 1, 2, 3]);
        let ops = [stator_core::Prefix::new("10.1.0.0".parse().unwrap(), 16).unwrap()];
        assert_eq!(
            destination(&e, &ops, 400),
            Ok("10.1.2.3:9000".parse().unwrap())
        );
        assert_eq!(destination(&e, &ops, 1228).map(|_| ()), Ok(()));
        assert_eq!(destination(&e, &ops, 1229), Err(Refused::Oversize));
        assert_eq!(destination(&e, &[], 400), Err(Refused::Receiver));
        e.receiver[..4].copy_from_slice(&[203, 0, 113, 9]);
        assert_eq!(destination(&e, &ops, 400), Err(Refused::Receiver));
        e.receiver_port = [0, 0];
        assert_eq!(destination(&e, &ops, 400), Err(Refused::Invalid));
    }
}
