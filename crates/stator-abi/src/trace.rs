//! The packet tracer (docs/forwarding.md §11): the mark a traced packet carries and the event
//! the forwarder writes to `stator_trace` for it.

use core::mem::{offset_of, size_of};

use crate::generated::*;
use crate::{DropReason, FlowKey};

/// `struct stator_trace_mark` — the start of a traced packet's TCP/UDP payload.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceMark {
    /// `STATOR_TRACE_MAGIC`.
    pub magic: u64,
    /// Where reports go, network order (IPv4 in the first 4 bytes).
    pub receiver: [u8; 16],
    /// Its port, network order.
    pub receiver_port: [u8; 2],
    /// `STATOR_FAMILY_*` of the receiver.
    pub receiver_family: u8,
    /// Padding.
    pub _pad0: u8,
    /// The sender's id of this trace, echoed in every report.
    pub trace_id: u32,
    /// SipHash-2-4 of docs/forwarding.md §11.1's message under a tracer key.
    pub mac: u64,
}
assert_layout!(TraceMark, SIZEOF_stator_trace_mark,
    magic => OFFSETOF_stator_trace_mark_magic,
    receiver => OFFSETOF_stator_trace_mark_receiver,
    receiver_port => OFFSETOF_stator_trace_mark_receiver_port,
    receiver_family => OFFSETOF_stator_trace_mark_receiver_family,
    trace_id => OFFSETOF_stator_trace_mark_trace_id,
    mac => OFFSETOF_stator_trace_mark_mac);

/// `struct stator_trace_keys` — `stator_trkeys[0]`: the keys a mark's MAC is checked with.
/// Its `Debug` shows how many keys it holds, never the keys.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceKeys {
    /// Each key's two halves (its 16 bytes read as two little-endian words).
    pub k: [[u64; 2]; STATOR_TRACE_KEYS as usize],
    /// How many of `k` are keys.
    pub count: u32,
    /// Padding.
    pub _pad0: u32,
}
assert_layout!(TraceKeys, SIZEOF_stator_trace_keys,
    k => OFFSETOF_stator_trace_keys_k,
    count => OFFSETOF_stator_trace_keys_count);

impl core::fmt::Debug for TraceKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TraceKeys({} key(s), redacted)", self.count)
    }
}

impl TraceKeys {
    /// The record of `keys` (at most [`STATOR_TRACE_KEYS`]; more are ignored).
    pub fn from_keys(keys: &[[u8; 16]]) -> Self {
        let mut out = Self::default();
        for (slot, key) in out.k.iter_mut().zip(keys) {
            let (a, b) = key.split_at(8);
            let word = |x: &[u8]| u64::from_le_bytes(x.try_into().unwrap_or([0; 8]));
            *slot = [word(a), word(b)];
        }
        out.count = keys.len().min(STATOR_TRACE_KEYS as usize) as u32;
        out
    }

    /// The map value's bytes (host order).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_trace_keys] {
        let mut b = [0u8; SIZEOF_stator_trace_keys];
        for (i, [k0, k1]) in self.k.iter().enumerate() {
            b[i * 16..i * 16 + 8].copy_from_slice(&k0.to_ne_bytes());
            b[i * 16 + 8..i * 16 + 16].copy_from_slice(&k1.to_ne_bytes());
        }
        let c = OFFSETOF_stator_trace_keys_count;
        b[c..c + 4].copy_from_slice(&self.count.to_ne_bytes());
        b
    }
}

impl TraceMark {
    /// The mark's bytes as the sender puts them in the payload (host-order integers, as the
    /// program reads them on the same host).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_trace_mark] {
        let mut b = [0u8; SIZEOF_stator_trace_mark];
        b[..8].copy_from_slice(&self.magic.to_ne_bytes());
        b[8..24].copy_from_slice(&self.receiver);
        b[24..26].copy_from_slice(&self.receiver_port);
        b[26] = self.receiver_family;
        b[28..32].copy_from_slice(&self.trace_id.to_ne_bytes());
        b[32..40].copy_from_slice(&self.mac.to_ne_bytes());
        b
    }

    /// The mark at the start of `payload`, if it has the magic.
    pub fn from_bytes(payload: &[u8]) -> Option<Self> {
        let b = payload.first_chunk::<SIZEOF_stator_trace_mark>()?;
        let mut m = [0u8; 8];
        m.copy_from_slice(&b[..8]);
        if u64::from_ne_bytes(m) != STATOR_TRACE_MAGIC {
            return None;
        }
        let mut receiver = [0u8; 16];
        receiver.copy_from_slice(&b[8..24]);
        Some(Self {
            magic: STATOR_TRACE_MAGIC,
            receiver,
            receiver_port: [b[24], b[25]],
            receiver_family: b[26],
            _pad0: b[27],
            trace_id: u32::from_ne_bytes([b[28], b[29], b[30], b[31]]),
            mac: u64::from_ne_bytes([b[32], b[33], b[34], b[35], b[36], b[37], b[38], b[39]]),
        })
    }
}

/// What a node did with a traced packet (`enum stator_trace_kind`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// Encapsulated toward a real.
    Forward = STATOR_TRACE_FORWARD as u8,
    /// Sent to the fragment's 3-tuple owner.
    FragRedirect = STATOR_TRACE_FRAG_REDIRECT as u8,
    /// Sent to the VIP's failover address.
    Failover = STATOR_TRACE_FAILOVER as u8,
    /// Dropped in selection.
    Drop = STATOR_TRACE_DROP as u8,
}

impl TraceKind {
    /// The kind with this code.
    pub fn from_code(c: u8) -> Option<Self> {
        [
            Self::Forward,
            Self::FragRedirect,
            Self::Failover,
            Self::Drop,
        ]
        .into_iter()
        .find(|k| *k as u8 == c)
    }

    /// `forward`, `frag_redirect`, `failover`, `drop`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::FragRedirect => "frag_redirect",
            Self::Failover => "failover",
            Self::Drop => "drop",
        }
    }
}

/// How the real was chosen (`enum stator_trace_cause`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceCause {
    /// Not a forward.
    None = STATOR_TRACE_C_NONE as u8,
    /// `NO_CT` VIP: Maglev alone.
    NoCt = STATOR_TRACE_C_NO_CT as u8,
    /// A SYN: Maglev.
    Syn = STATOR_TRACE_C_SYN as u8,
    /// Connection-table hit.
    CtHit = STATOR_TRACE_C_CT_HIT as u8,
    /// No entry: Maglev.
    CtMiss = STATOR_TRACE_C_CT_MISS as u8,
    /// Expired entry: Maglev.
    CtExpired = STATOR_TRACE_C_CT_EXPIRED as u8,
    /// Entry of an unusable real: Maglev.
    CtReselect = STATOR_TRACE_C_CT_RESELECT as u8,
}

impl TraceCause {
    /// The cause with this code.
    pub fn from_code(c: u8) -> Option<Self> {
        [
            Self::None,
            Self::NoCt,
            Self::Syn,
            Self::CtHit,
            Self::CtMiss,
            Self::CtExpired,
            Self::CtReselect,
        ]
        .into_iter()
        .find(|k| *k as u8 == c)
    }

    /// `none`, `no_ct`, `syn`, `ct_hit`, `ct_miss`, `ct_expired`, `ct_reselect`.
    pub fn label(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::NoCt => "no_ct",
            Self::Syn => "syn",
            Self::CtHit => "ct_hit",
            Self::CtMiss => "ct_miss",
            Self::CtExpired => "ct_expired",
            Self::CtReselect => "ct_reselect",
        }
    }
}

/// `struct stator_trace_event` — one report, as the program writes it to `stator_trace`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceEvent {
    /// Where the report goes.
    pub receiver: [u8; 16],
    /// Its port, network order.
    pub receiver_port: [u8; 2],
    /// Its family.
    pub receiver_family: u8,
    /// 1; 2 for the inner packet of a redirect.
    pub hop: u8,
    /// The sender's trace id.
    pub trace_id: u32,
    /// [`TraceKind`] code.
    pub kind: u8,
    /// [`TraceCause`] code.
    pub cause: u8,
    /// Drop reason code (kind drop).
    pub reason: u8,
    /// `STATOR_TRACE_F_*`.
    pub flags: u8,
    /// VIP id, `STATOR_NO_VIP` when none.
    pub vip_id: u32,
    /// Real id, `STATOR_NO_REAL` when none.
    pub real_id: u32,
    /// Maglev slot, `STATOR_NO_SLOT` when Maglev did not decide.
    pub slot: u32,
    /// Redirect target, network order.
    pub target: [u8; 16],
    /// Its family.
    pub target_family: u8,
    /// Padding.
    pub _pad0: u8,
    /// The traced IP packet's length: no report to the receiver may be longer.
    pub ip_len: u16,
    /// Padding.
    pub _pad1: [u8; 4],
    /// The flow decided on.
    pub flow: FlowKey,
    /// `now` of the decision.
    pub now_ns: u64,
}
assert_layout!(TraceEvent, SIZEOF_stator_trace_event,
    receiver => OFFSETOF_stator_trace_event_receiver,
    receiver_port => OFFSETOF_stator_trace_event_receiver_port,
    receiver_family => OFFSETOF_stator_trace_event_receiver_family,
    hop => OFFSETOF_stator_trace_event_hop,
    trace_id => OFFSETOF_stator_trace_event_trace_id,
    kind => OFFSETOF_stator_trace_event_kind,
    cause => OFFSETOF_stator_trace_event_cause,
    reason => OFFSETOF_stator_trace_event_reason,
    flags => OFFSETOF_stator_trace_event_flags,
    vip_id => OFFSETOF_stator_trace_event_vip_id,
    real_id => OFFSETOF_stator_trace_event_real_id,
    slot => OFFSETOF_stator_trace_event_slot,
    target => OFFSETOF_stator_trace_event_target,
    target_family => OFFSETOF_stator_trace_event_target_family,
    ip_len => OFFSETOF_stator_trace_event_ip_len,
    flow => OFFSETOF_stator_trace_event_flow,
    now_ns => OFFSETOF_stator_trace_event_now_ns);

impl TraceEvent {
    /// The event's bytes in memory, as the program writes them.
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_trace_event] {
        let mut b = [0u8; SIZEOF_stator_trace_event];
        let f = &self.flow;
        b[..16].copy_from_slice(&self.receiver);
        b[16..18].copy_from_slice(&self.receiver_port);
        b[18] = self.receiver_family;
        b[19] = self.hop;
        b[20..24].copy_from_slice(&self.trace_id.to_ne_bytes());
        b[24..28].copy_from_slice(&[self.kind, self.cause, self.reason, self.flags]);
        b[28..32].copy_from_slice(&self.vip_id.to_ne_bytes());
        b[32..36].copy_from_slice(&self.real_id.to_ne_bytes());
        b[36..40].copy_from_slice(&self.slot.to_ne_bytes());
        b[40..56].copy_from_slice(&self.target);
        b[56] = self.target_family;
        let l = OFFSETOF_stator_trace_event_ip_len;
        b[l..l + 2].copy_from_slice(&self.ip_len.to_ne_bytes());
        let o = OFFSETOF_stator_trace_event_flow;
        b[o..o + 16].copy_from_slice(&f.src);
        b[o + 16..o + 32].copy_from_slice(&f.dst);
        b[o + 32..o + 34].copy_from_slice(&f.sport);
        b[o + 34..o + 36].copy_from_slice(&f.dport);
        b[o + 36] = f.proto;
        b[o + 37] = f.family;
        b[OFFSETOF_stator_trace_event_now_ns..].copy_from_slice(&self.now_ns.to_ne_bytes());
        b
    }

    /// The event from a `stator_trace` record (`None` when too short).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.first_chunk::<SIZEOF_stator_trace_event>()?;
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let a16 = |o: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[o..o + 16]);
            a
        };
        let o = OFFSETOF_stator_trace_event_flow;
        let mut now = [0u8; 8];
        now.copy_from_slice(&b[OFFSETOF_stator_trace_event_now_ns..]);
        Some(Self {
            receiver: a16(0),
            receiver_port: [b[16], b[17]],
            receiver_family: b[18],
            hop: b[19],
            trace_id: u32_at(20),
            kind: b[24],
            cause: b[25],
            reason: b[26],
            flags: b[27],
            vip_id: u32_at(28),
            real_id: u32_at(32),
            slot: u32_at(36),
            target: a16(40),
            target_family: b[56],
            _pad0: 0,
            ip_len: u16::from_ne_bytes([
                b[OFFSETOF_stator_trace_event_ip_len],
                b[OFFSETOF_stator_trace_event_ip_len + 1],
            ]),
            _pad1: [0; 4],
            flow: FlowKey {
                src: a16(o),
                dst: a16(o + 16),
                sport: [b[o + 32], b[o + 33]],
                dport: [b[o + 34], b[o + 35]],
                proto: b[o + 36],
                family: b[o + 37],
                _pad0: [0; 2],
            },
            now_ns: u64::from_ne_bytes(now),
        })
    }

    /// The kind, if the code is known.
    pub fn kind(&self) -> Option<TraceKind> {
        TraceKind::from_code(self.kind)
    }

    /// The cause, if the code is known.
    pub fn cause(&self) -> Option<TraceCause> {
        TraceCause::from_code(self.cause)
    }

    /// The drop reason (kind drop).
    pub fn drop_reason(&self) -> Option<DropReason> {
        DropReason::from_code(u32::from(self.reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_magic_spells_statort1_and_records_round_trip() {
        assert_eq!(&STATOR_TRACE_MAGIC.to_le_bytes(), b"STATORT1");
        let m = TraceMark {
            magic: STATOR_TRACE_MAGIC,
            receiver: [7; 16],
            receiver_port: [0x12, 0x34],
            receiver_family: 6,
            _pad0: 0,
            trace_id: 0xdead_beef,
            mac: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(TraceMark::from_bytes(&m.to_bytes()), Some(m));
        assert_eq!(TraceMark::from_bytes(&[0u8; 40]), None);
        let e = TraceEvent {
            receiver: [1; 16],
            receiver_port: [0, 9],
            receiver_family: 4,
            hop: 2,
            trace_id: 77,
            kind: TraceKind::Forward as u8,
            cause: TraceCause::CtHit as u8,
            reason: 0,
            flags: STATOR_TRACE_F_FRAGMENT as u8,
            vip_id: 3,
            real_id: 101,
            slot: STATOR_NO_SLOT,
            target: [0; 16],
            target_family: 0,
            _pad0: 0,
            ip_len: 1240,
            _pad1: [0; 4],
            flow: FlowKey {
                src: [2; 16],
                dst: [3; 16],
                sport: [1, 2],
                dport: [0, 80],
                proto: 17,
                family: 4,
                _pad0: [0; 2],
            },
            now_ns: 5,
        };
        assert_eq!(TraceEvent::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(e.kind(), Some(TraceKind::Forward));
        assert_eq!(e.cause(), Some(TraceCause::CtHit));
        let keys = TraceKeys::from_keys(&[[1; 16], [2; 16], [3; 16]]);
        assert_eq!(keys.count, 2, "at most STATOR_TRACE_KEYS");
        assert_eq!(keys.k[1], [0x0202_0202_0202_0202; 2]);
    }
}
