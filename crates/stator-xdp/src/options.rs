//! How the forwarder is loaded and attached.

use std::path::PathBuf;
use std::str::FromStr;

use stator_abi::{
    STATOR_DEFAULT_CT_ENTRIES, STATOR_DEFAULT_FRAG_ENTRIES, STATOR_DEFAULT_HOLD_RING,
    STATOR_DEFAULT_SLOTS_PER_GEN, STATOR_MAX_TABLE_SIZE,
};

use crate::error::{Result, XdpError};

/// Largest `slots_per_gen` accepted (2 GiB of slots per generation).
pub const MAX_SLOTS_PER_GEN: u32 = 1 << 28;

/// Default pin directory of the forwarder's maps and links.
pub const DEFAULT_PIN_PATH: &str = "/sys/fs/bpf/stator";

/// Which connection table the forwarder is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConntrackMode {
    /// `LRU_PERCPU_HASH` (`stator_fwd.o`): one LRU and one value per CPU, nothing shared. Right
    /// when RSS keeps each flow on one CPU (real NICs).
    #[default]
    PerCpu,
    /// `LRU_HASH` with `BPF_F_NO_COMMON_LRU` (`stator_fwd_shared.o`): one entry per flow seen by
    /// every CPU, per-CPU LRU lists. For veth, virtio without RSS, or anything where a flow's
    /// receiving CPU is not stable.
    Shared,
}

impl ConntrackMode {
    /// `percpu` / `shared`.
    pub fn name(self) -> &'static str {
        match self {
            Self::PerCpu => "percpu",
            Self::Shared => "shared",
        }
    }
}

impl FromStr for ConntrackMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "percpu" => Ok(Self::PerCpu),
            "shared" => Ok(Self::Shared),
            other => Err(format!(
                "unknown conntrack mode `{other}` (percpu | shared)"
            )),
        }
    }
}

/// How the program is attached to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// Native (driver) mode, falling back to generic mode with a warning.
    #[default]
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode: works on any interface, much slower.
    Generic,
}

impl AttachMode {
    /// `auto` / `native` / `generic`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::Generic => "generic",
        }
    }
}

impl FromStr for AttachMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "native" | "drv" => Ok(Self::Native),
            "generic" | "skb" => Ok(Self::Generic),
            other => Err(format!(
                "unknown attach mode `{other}` (auto | native | generic)"
            )),
        }
    }
}

/// Options of [`Forwarder::load`](crate::Forwarder::load).
/// The default next-hop cache lifetime: a route or neighbour change applies within a second,
/// and `bpf_fib_lookup` (≈ 55 ns for IPv4, ≈ 160 ns for IPv6 on the development VM) is asked at
/// most once a second per CPU and backend instead of for every packet.
pub const DEFAULT_FIB_CACHE: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpOptions {
    /// Directory under a bpffs mount where maps (by name) and links (`link_<ifname>`) are
    /// pinned. A later load with the same directory reuses the maps.
    pub pin_path: PathBuf,
    /// Connection-table flavour.
    pub conntrack: ConntrackMode,
    /// Connection-table capacity (entries). For the per-CPU build's IPv4 table (`stator_ct4`)
    /// it is the flows each CPU holds at half load: [`buckets_per_cpu`](crate::buckets_per_cpu)
    /// 4-way buckets of 128 bytes on every CPU.
    pub ct_entries: u32,
    /// Per-CPU build: IPv4 flows in `stator_ct4`, Stator's own table (the default), or, when
    /// false, in the kernel's `stator_ct` with IPv6 (as builds before it did: for comparison in
    /// benchmarks and for the upgrade tests). Ignored by the shared build.
    pub v4_table: bool,
    /// Maglev slots per generation (`stator_slots` has twice as many).
    pub slots_per_gen: u32,
    /// Attach mode used by [`Forwarder::attach`](crate::Forwarder::attach).
    pub attach_mode: AttachMode,
    /// Next-hop cache lifetime (docs/forwarding.md §5.4): `Some(d)` (the default,
    /// [`DEFAULT_FIB_CACHE`]) reuses a successful `bpf_fib_lookup` answer per CPU and real for
    /// `d` — route and neighbour changes then apply within `d`; failures are never cached,
    /// longer packets are looked up again; `None` asks `bpf_fib_lookup` for every packet.
    pub fib_cache: Option<std::time::Duration>,
    /// Fragment-table capacity (`stator_frag` entries, docs/forwarding.md §9).
    pub frag_entries: u32,
    /// Size in bytes of the `stator_hold` ring buffer, where fragments that came before their
    /// first wait for the holder (a power of two, at least a page).
    pub hold_ring: u32,
}

impl Default for XdpOptions {
    fn default() -> Self {
        Self {
            pin_path: PathBuf::from(DEFAULT_PIN_PATH),
            conntrack: ConntrackMode::default(),
            ct_entries: STATOR_DEFAULT_CT_ENTRIES,
            v4_table: true,
            slots_per_gen: STATOR_DEFAULT_SLOTS_PER_GEN,
            attach_mode: AttachMode::default(),
            fib_cache: Some(DEFAULT_FIB_CACHE),
            frag_entries: STATOR_DEFAULT_FRAG_ENTRIES,
            hold_ring: STATOR_DEFAULT_HOLD_RING,
        }
    }
}

impl XdpOptions {
    /// Options with another pin directory.
    pub fn with_pin_path(pin_path: impl Into<PathBuf>) -> Self {
        Self {
            pin_path: pin_path.into(),
            ..Self::default()
        }
    }

    /// Checks the sizes against what the maps and the program can hold.
    pub fn validate(&self) -> Result<()> {
        if self.ct_entries == 0 {
            return Err(XdpError::InvalidOptions {
                reason: "ct_entries must be at least 1".into(),
            });
        }
        if self.frag_entries == 0 {
            return Err(XdpError::InvalidOptions {
                reason: "frag_entries must be at least 1".into(),
            });
        }
        if !self.hold_ring.is_power_of_two() || (self.hold_ring as usize) < crate::sys::page_size()
        {
            return Err(XdpError::InvalidOptions {
                reason: format!(
                    "hold_ring {} must be a power of two of at least a page ({} bytes)",
                    self.hold_ring,
                    crate::sys::page_size()
                ),
            });
        }
        if let Some(d) = self.fib_cache
            && (d.is_zero() || d.as_micros() > u128::from(u32::MAX))
        {
            return Err(XdpError::InvalidOptions {
                reason: format!("fib_cache {d:?} out of range (1 µs ..= ~71 min)"),
            });
        }
        // stator_slots has 2 * slots_per_gen elements of 8 bytes (the array stride) and table
        // offsets are u32; a table larger than a generation is rejected at commit.
        if self.slots_per_gen == 0 || self.slots_per_gen > MAX_SLOTS_PER_GEN {
            return Err(XdpError::InvalidOptions {
                reason: format!(
                    "slots_per_gen {} out of range (1 ..= {MAX_SLOTS_PER_GEN}; one VIP needs up \
                     to {STATOR_MAX_TABLE_SIZE})",
                    self.slots_per_gen
                ),
            });
        }
        Ok(())
    }
}
