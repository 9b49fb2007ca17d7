//! The backend-side decapsulator (`stator decap`): its address key, settings and counters.

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_decap_addr` — key of `stator_daddrs`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DecapAddr {
    /// Address, network order; IPv4 in the first 4 bytes, rest zero.
    pub addr: [u8; 16],
    /// `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// Padding.
    pub _pad0: [u8; 3],
}
assert_layout!(DecapAddr, SIZEOF_stator_decap_addr,
    addr => OFFSETOF_stator_decap_addr_addr,
    family => OFFSETOF_stator_decap_addr_family);

/// `struct stator_decap_cfg` — `stator_dcfg[0]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecapCfg {
    /// GUE destination port, network order; zero = GUE is not decapsulated.
    pub gue_port: [u8; 2],
    /// `STATOR_DECAP_F_*`.
    pub flags: u16,
    /// Outer source of a packet passed on over IPv4 (second chance), network order; zero =
    /// none.
    pub src_v4: [u8; 4],
    /// Outer source of a packet passed on over IPv6, network order; zero = none.
    pub src_v6: [u8; 16],
}
assert_layout!(DecapCfg, SIZEOF_stator_decap_cfg,
    gue_port => OFFSETOF_stator_decap_cfg_gue_port,
    flags => OFFSETOF_stator_decap_cfg_flags,
    src_v4 => OFFSETOF_stator_decap_cfg_src_v4,
    src_v6 => OFFSETOF_stator_decap_cfg_src_v6);

/// `struct stator_decap_prefix` — key of the `stator_dscfrom` LPM trie: an outer source
/// allowed to ask for a second chance.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DecapPrefix {
    /// 32 + the prefix length (the family and padding bytes are matched first).
    pub prefixlen: u32,
    /// `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// Padding (zero).
    pub _pad0: [u8; 3],
    /// Address, network order; IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
}
assert_layout!(DecapPrefix, SIZEOF_stator_decap_prefix,
    prefixlen => OFFSETOF_stator_decap_prefix_prefixlen,
    family => OFFSETOF_stator_decap_prefix_family,
    addr => OFFSETOF_stator_decap_prefix_addr);

/// Index of a decap counter (`enum stator_decap_counter`): outcomes (every packet ends in
/// exactly one), reasons of `rejected` (every rejected packet is counted in exactly one), and
/// details of second chances delivered here (see [`DecapCounter::kind`]).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum DecapCounter {
    Gre = STATOR_DECAP_CNT_GRE,
    Ipip = STATOR_DECAP_CNT_IPIP,
    Gue = STATOR_DECAP_CNT_GUE,
    Pass = STATOR_DECAP_CNT_PASS,
    NotOurs = STATOR_DECAP_CNT_NOT_OURS,
    Rejected = STATOR_DECAP_CNT_REJECTED,
    BadOuter = STATOR_DECAP_CNT_BAD_OUTER,
    Fragment = STATOR_DECAP_CNT_FRAGMENT,
    GreUnsupported = STATOR_DECAP_CNT_GRE_UNSUPPORTED,
    GueUnsupported = STATOR_DECAP_CNT_GUE_UNSUPPORTED,
    BadInner = STATOR_DECAP_CNT_BAD_INNER,
    Adjust = STATOR_DECAP_CNT_ADJUST,
    ScForwarded = STATOR_DECAP_CNT_SC_FORWARDED,
    ScFib = STATOR_DECAP_CNT_SC_FIB,
    ScMtu = STATOR_DECAP_CNT_SC_MTU,
    ScLocal = STATOR_DECAP_CNT_SC_LOCAL,
    ScDelivered = STATOR_DECAP_CNT_SC_DELIVERED,
    ScOrphan = STATOR_DECAP_CNT_SC_ORPHAN,
    ScNotTcp = STATOR_DECAP_CNT_SC_NOT_TCP,
    ScRefused = STATOR_DECAP_CNT_SC_REFUSED,
    ScNoSource = STATOR_DECAP_CNT_SC_NO_SOURCE,
    ScMalformed = STATOR_DECAP_CNT_SC_MALFORMED,
}

/// What a decap counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecapCounterKind {
    /// Every packet ends in exactly one outcome.
    Outcome,
    /// Every rejected packet is counted in exactly one reason.
    Reason,
    /// A detail of a delivered GUE packet (second chance), beside its outcome.
    Detail,
}

impl DecapCounter {
    /// Every counter, in index order.
    pub const ALL: [DecapCounter; STATOR_DECAP_CNT_MAX as usize] = [
        Self::Gre,
        Self::Ipip,
        Self::Gue,
        Self::Pass,
        Self::NotOurs,
        Self::Rejected,
        Self::BadOuter,
        Self::Fragment,
        Self::GreUnsupported,
        Self::GueUnsupported,
        Self::BadInner,
        Self::Adjust,
        Self::ScForwarded,
        Self::ScFib,
        Self::ScMtu,
        Self::ScLocal,
        Self::ScDelivered,
        Self::ScOrphan,
        Self::ScNotTcp,
        Self::ScRefused,
        Self::ScNoSource,
        Self::ScMalformed,
    ];

    /// The index in the `stator_dcnt` per-CPU array.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The metric label, e.g. `"not_ours"`.
    pub fn label(self) -> &'static str {
        DECAP_COUNTER_NAMES[self as usize]
    }

    /// Outcome, reason or detail.
    pub fn kind(self) -> DecapCounterKind {
        match self {
            Self::ScForwarded => DecapCounterKind::Outcome,
            Self::ScFib | Self::ScMtu => DecapCounterKind::Reason,
            c if c.index() < STATOR_DECAP_CNT_FIRST_REASON => DecapCounterKind::Outcome,
            c if c.index() < STATOR_DECAP_CNT_FIRST_DETAIL => DecapCounterKind::Reason,
            _ => DecapCounterKind::Detail,
        }
    }

    /// True for the outcomes (every packet ends in exactly one).
    pub fn is_outcome(self) -> bool {
        self.kind() == DecapCounterKind::Outcome
    }

    /// True for the reasons of `rejected` (every rejected packet is counted in exactly one).
    pub fn is_reason(self) -> bool {
        self.kind() == DecapCounterKind::Reason
    }

    /// The counter with this label.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.label() == label)
    }
}
