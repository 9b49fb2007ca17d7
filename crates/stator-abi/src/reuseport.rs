//! The reuseport steering program of the proxy tier: its settings and counters.

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_rp_cfg` — `stator_rp_cfg[0]` of the reuseport steering program.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpCfg {
    /// Toeplitz key, most significant bit first.
    pub key: [u8; STATOR_RSS_KEY_LEN as usize],
    /// Table size M (prime); 0 = not configured (every socket is the kernel's choice).
    pub table_size: u32,
    /// `STATOR_RP_F_*`.
    pub flags: u32,
    /// Entries of `stator_rp_socks`: worker ids at or above it are empty.
    pub workers: u32,
    /// Padding.
    pub _pad0: u32,
}
assert_layout!(RpCfg, SIZEOF_stator_rp_cfg,
    key => OFFSETOF_stator_rp_cfg_key,
    table_size => OFFSETOF_stator_rp_cfg_table_size,
    flags => OFFSETOF_stator_rp_cfg_flags,
    workers => OFFSETOF_stator_rp_cfg_workers);

/// Index of a steering counter (`enum stator_rp_counter`): every run of the reuseport program
/// ends in exactly one.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum RpCounter {
    SelectOwn = STATOR_RP_CNT_SELECT_OWN,
    SelectProbe = STATOR_RP_CNT_SELECT_PROBE,
    SelectKernel = STATOR_RP_CNT_SELECT_KERNEL,
    MigrateOwn = STATOR_RP_CNT_MIGRATE_OWN,
    MigrateProbe = STATOR_RP_CNT_MIGRATE_PROBE,
    MigrateKernel = STATOR_RP_CNT_MIGRATE_KERNEL,
    NoAddress = STATOR_RP_CNT_NO_ADDRESS,
    NotConfigured = STATOR_RP_CNT_NOT_CONFIGURED,
    CpuLocal = STATOR_RP_CNT_CPU_LOCAL,
    CpuRemote = STATOR_RP_CNT_CPU_REMOTE,
}

impl RpCounter {
    /// Every counter, in index order.
    pub const ALL: [RpCounter; STATOR_RP_CNT_MAX as usize] = [
        Self::SelectOwn,
        Self::SelectProbe,
        Self::SelectKernel,
        Self::MigrateOwn,
        Self::MigrateProbe,
        Self::MigrateKernel,
        Self::NoAddress,
        Self::NotConfigured,
        Self::CpuLocal,
        Self::CpuRemote,
    ];

    /// Whether it is an outcome (every run ends in exactly one), not one of the locality
    /// counters `steering = "cpu"` adds beside them.
    pub fn is_outcome(self) -> bool {
        self.index() < STATOR_RP_CNT_OUTCOMES
    }

    /// The index in the `stator_rp_cnt` per-CPU array.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The metric label, e.g. `"select_probe"`.
    pub fn label(self) -> &'static str {
        RP_COUNTER_NAMES[self as usize]
    }

    /// The counter with this label.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.label() == label)
    }
}

/// Index of a receive-steering counter (`enum stator_rss_counter`): every run of the
/// `stator_rss` XDP program ends in exactly one.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum RssCounter {
    Local = STATOR_RSS_CNT_LOCAL,
    Redirected = STATOR_RSS_CNT_REDIRECTED,
    NoCpu = STATOR_RSS_CNT_NO_CPU,
    Other = STATOR_RSS_CNT_OTHER,
    Malformed = STATOR_RSS_CNT_MALFORMED,
}

impl RssCounter {
    /// Every counter, in index order.
    pub const ALL: [RssCounter; STATOR_RSS_CNT_MAX as usize] = [
        Self::Local,
        Self::Redirected,
        Self::NoCpu,
        Self::Other,
        Self::Malformed,
    ];

    /// The index in the `stator_rss_cnt` per-CPU array.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The metric label, e.g. `"redirected"`.
    pub fn label(self) -> &'static str {
        RSS_COUNTER_NAMES[self as usize]
    }
}
