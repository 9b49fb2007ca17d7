//! docs/forwarding.md §11: the packet tracer's mark, its per-node report window and the report
//! itself ([`TraceEvent`], the same record the XDP program writes to `stator_trace`).

use stator_abi::{
    FlowKey, STATOR_NO_REAL, STATOR_NO_SLOT, STATOR_NO_VIP, STATOR_TRACE_MAGIC, TraceCause,
    TraceEvent, TraceKind, TraceMark,
};

use crate::compiled::{Addr, IPPROTO_TCP};
use crate::parse::Ip;
use crate::verdict::Cause;

const NSEC_PER_SEC: u64 = 1_000_000_000;

/// §11.1: the mark at `l4 + 20` (TCP) or `l4 + 8` (UDP), when its 32 bytes lie within the IP
/// packet and start with the magic. One bounds test and one 8-byte compare; the rest is read
/// only on a match.
#[inline]
pub(crate) fn mark_of(data: &[u8], ip: &Ip, proto: u8) -> Option<TraceMark> {
    let m = ip.l4 + if proto == IPPROTO_TCP { 20 } else { 8 };
    let bytes = data.get(m..ip.ip_end)?;
    let magic = bytes.first_chunk::<8>()?;
    if bytes.len() < 32 || u64::from_ne_bytes(*magic) != STATOR_TRACE_MAGIC {
        return None;
    }
    trace_mark(bytes)
}

#[cold]
fn trace_mark(bytes: &[u8]) -> Option<TraceMark> {
    TraceMark::from_bytes(bytes)
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
    mark: &TraceMark,
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
        _pad0: [0; 7],
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
