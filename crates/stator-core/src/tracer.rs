//! docs/forwarding.md §11: the packet tracer's mark and its MAC, the per-node report window and
//! the report itself ([`TraceEvent`], the same record the XDP program writes to
//! `stator_trace`).

use stator_abi::{
    FlowKey, SIZEOF_stator_trace_mark, STATOR_NO_REAL, STATOR_NO_SLOT, STATOR_NO_VIP,
    STATOR_TRACE_MAGIC, TraceCause, TraceEvent, TraceKeys, TraceKind, TraceMark,
};

use crate::compiled::{Addr, IPPROTO_TCP};
use crate::parse::Ip;
use crate::verdict::Cause;

const NSEC_PER_SEC: u64 = 1_000_000_000;

/// A packet's trace mark (its magic matched), the length of the IP packet that carried it (no
/// report may be longer), and the message its MAC covers — checked only where a report would be
/// made, once the node's window admits it, as the XDP program does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Traced {
    pub mark: TraceMark,
    pub ip_len: u16,
    pub msg: [u8; 64],
}

impl Traced {
    /// Whether one of `keys` verifies the mark's MAC (docs/forwarding.md §11.1).
    pub(crate) fn authentic(&self, keys: &TraceKeys) -> bool {
        keys.k[..(keys.count as usize).min(keys.k.len())]
            .iter()
            .any(|&[k0, k1]| mac(k0, k1, &self.msg) == self.mark.mac)
    }
}

/// §11.1: the mark at `l4 + 20` (TCP) or `l4 + 8` (UDP), when its 40 bytes lie within the IP
/// packet and start with the magic. One bounds test and one 8-byte compare; the rest is read
/// only on a match.
#[inline]
pub(crate) fn mark_of(data: &[u8], ip: &Ip, proto: u8) -> Option<Traced> {
    let m = ip.l4 + if proto == IPPROTO_TCP { 20 } else { 8 };
    let bytes = data.get(m..ip.ip_end)?;
    let magic = bytes.first_chunk::<8>()?;
    if bytes.len() < SIZEOF_stator_trace_mark || u64::from_ne_bytes(*magic) != STATOR_TRACE_MAGIC {
        return None;
    }
    traced(data, ip, bytes)
}

#[cold]
fn traced(data: &[u8], ip: &Ip, bytes: &[u8]) -> Option<Traced> {
    let mark = TraceMark::from_bytes(bytes)?;
    let ports = data.get(ip.l4..ip.l4 + 4)?.first_chunk::<4>()?;
    Some(Traced {
        mark,
        ip_len: u16::try_from(ip.ip_end - ip.l3).unwrap_or(u16::MAX),
        msg: mac_message(&mark, ip.src, ip.dst, *ports, ip.proto),
    })
}

/// The 64-byte message a mark's MAC covers (docs/forwarding.md §11.1): the mark's bytes 8–31,
/// the source and destination addresses (as big-endian numbers of their flow-key field: IPv4 in
/// the top 32 bits), the first 4 bytes of the TCP/UDP header, the protocol.
pub fn mac_message(mark: &TraceMark, src: u128, dst: u128, ports: [u8; 4], proto: u8) -> [u8; 64] {
    let mut msg = [0u8; 64];
    msg[..24].copy_from_slice(&mark.to_bytes()[8..32]);
    msg[24..40].copy_from_slice(&src.to_be_bytes());
    msg[40..56].copy_from_slice(&dst.to_be_bytes());
    msg[56..60].copy_from_slice(&ports);
    msg[60] = proto;
    msg
}

/// The MAC `stator trace --send` puts in a mark (`mark.mac` is ignored) for a packet from
/// `src:sport` to `dst:dport` over `proto`, under the 16-byte `key` (docs/forwarding.md §11.1).
pub fn seal(
    mark: &TraceMark,
    key: &[u8; 16],
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    sport: u16,
    dport: u16,
    proto: u8,
) -> u64 {
    let field = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V4(a) => u128::from(a.to_bits()) << 96,
        std::net::IpAddr::V6(a) => a.to_bits(),
    };
    let mut ports = [0u8; 4];
    ports[..2].copy_from_slice(&sport.to_be_bytes());
    ports[2..].copy_from_slice(&dport.to_be_bytes());
    let msg = mac_message(mark, field(src), field(dst), ports, proto);
    let keys = TraceKeys::from_keys(&[*key]);
    mac(keys.k[0][0], keys.k[0][1], &msg)
}

/// SipHash-2-4 of `msg` under the key `(k0, k1)` (the key's 16 bytes read as two little-endian
/// words, as `struct stator_trace_keys` holds them).
pub fn mac(k0: u64, k1: u64, msg: &[u8; 64]) -> u64 {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&k0.to_le_bytes());
    key[8..].copy_from_slice(&k1.to_le_bytes());
    stator_hash::siphash24(key, msg)
}

/// The report window (`stator_trl[0]`): one for the node, reset as the flood guard's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReportWindow {
    start_ns: u64,
    count: u64,
}

impl ReportWindow {
    /// Whether a report may go out now under `limit` per second; counts it if so.
    pub(crate) fn admit(&mut self, now: u64, limit: u32) -> bool {
        if now < self.start_ns || now - self.start_ns >= NSEC_PER_SEC {
            self.start_ns = now;
            self.count = 0;
        }
        if self.count >= u64::from(limit) {
            return false;
        }
        self.count += 1;
        true
    }
}

/// What a report says besides the mark: how the packet was decided.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decision {
    pub kind: TraceKind,
    pub cause: Option<Cause>,
    pub reason: u8,
    pub fragment: bool,
    pub vip_id: Option<u32>,
    pub real_id: Option<u32>,
    pub slot: Option<u32>,
    pub target: Option<Addr>,
}

impl Decision {
    /// A decision of `kind` with nothing else known yet.
    pub(crate) fn new(kind: TraceKind) -> Self {
        Self {
            kind,
            cause: None,
            reason: 0,
            fragment: false,
            vip_id: None,
            real_id: None,
            slot: None,
            target: None,
        }
    }
}

fn cause_code(c: Option<Cause>) -> u8 {
    (match c {
        None => TraceCause::None,
        Some(Cause::NoCt) => TraceCause::NoCt,
        Some(Cause::Syn) => TraceCause::Syn,
        Some(Cause::CtHit) => TraceCause::CtHit,
        Some(Cause::CtMiss) => TraceCause::CtMiss,
        Some(Cause::CtExpired) => TraceCause::CtExpired,
        Some(Cause::CtReselect) => TraceCause::CtReselect,
    }) as u8
}

/// The `struct stator_trace_event` of a traced packet.
pub(crate) fn event(
    traced: &Traced,
    redirected: bool,
    flow: FlowKey,
    now: u64,
    d: &Decision,
) -> TraceEvent {
    let (target, target_family) = match d.target {
        Some(Addr::V4(a)) => {
            let mut t = [0u8; 16];
            t[..4].copy_from_slice(&a);
            (t, stator_abi::STATOR_FAMILY_V4 as u8)
        }
        Some(Addr::V6(a)) => (a, stator_abi::STATOR_FAMILY_V6 as u8),
        None => ([0; 16], 0),
    };
    let mark = &traced.mark;
    TraceEvent {
        receiver: mark.receiver,
        receiver_port: mark.receiver_port,
        receiver_family: mark.receiver_family,
        hop: if redirected { 2 } else { 1 },
        trace_id: mark.trace_id,
        kind: d.kind as u8,
        cause: cause_code(d.cause),
        reason: d.reason,
        flags: if d.fragment {
            stator_abi::STATOR_TRACE_F_FRAGMENT as u8
        } else {
            0
        },
        vip_id: d.vip_id.unwrap_or(STATOR_NO_VIP),
        real_id: d.real_id.unwrap_or(STATOR_NO_REAL),
        slot: d.slot.unwrap_or(STATOR_NO_SLOT),
        target,
        target_family,
        _pad0: 0,
        ip_len: traced.ip_len,
        _pad1: [0; 4],
        flow,
        now_ns: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_admits_limit_reports_a_second() {
        let mut w = ReportWindow::default();
        let s = NSEC_PER_SEC;
        assert!(w.admit(10 * s, 2));
        assert!(w.admit(10 * s + 1, 2));
        assert!(!w.admit(10 * s + 2, 2));
        assert!(w.admit(11 * s, 2), "a new window");
        assert!(!w.admit(5, 0), "limit 0 never admits");
    }
}
