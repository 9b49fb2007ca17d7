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
    /// Padding.
    pub _pad0: u32,
}
assert_layout!(DecapCfg, SIZEOF_stator_decap_cfg,
    gue_port => OFFSETOF_stator_decap_cfg_gue_port,
    flags => OFFSETOF_stator_decap_cfg_flags);

/// Index of a decap counter (`enum stator_decap_counter`): the first six are outcomes (every
/// packet ends in exactly one), the rest are the reasons of `rejected` (every rejected packet
/// is counted in exactly one).
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
    ];

    /// The index in the `stator_dcnt` per-CPU array.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The metric label, e.g. `"not_ours"`.
    pub fn label(self) -> &'static str {
        DECAP_COUNTER_NAMES[self as usize]
    }

    /// True for the outcomes (every packet ends in exactly one), false for reject reasons.
    pub fn is_outcome(self) -> bool {
        self.index() < STATOR_DECAP_CNT_FIRST_REASON
    }

    /// The counter with this label.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.label() == label)
    }
}
