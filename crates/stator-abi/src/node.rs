//! The node's control word and per-generation configuration (`stator_ctl`, `stator_cfg`).

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_ctl` — `stator_ctl[0]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ctl {
    /// Generation packets use (0 or 1).
    pub active_gen: u32,
    /// Next-hop cache lifetime in µs; 0 = a FIB lookup for every packet.
    pub fib_cache_us: u32,
    /// Test clock; 0 = use the kernel clock.
    pub test_clock_ns: u64,
}
assert_layout!(Ctl, SIZEOF_stator_ctl,
    active_gen => OFFSETOF_stator_ctl_active_gen,
    fib_cache_us => OFFSETOF_stator_ctl_fib_cache_us,
    test_clock_ns => OFFSETOF_stator_ctl_test_clock_ns);

/// `struct stator_beat` — `stator_beat[0]`: the controller's heartbeat (docs/forwarding.md
/// §3.2).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beat {
    /// `now` (CLOCK_MONOTONIC_COARSE, ns) of the controller's last refresh.
    pub refreshed_ns: u64,
    /// How long the tables are trusted after a refresh; 0 = always (the check is off).
    pub stale_after_ns: u64,
}
assert_layout!(Beat, SIZEOF_stator_beat,
    refreshed_ns => OFFSETOF_stator_beat_refreshed_ns,
    stale_after_ns => OFFSETOF_stator_beat_stale_after_ns);

impl Beat {
    /// Whether tables refreshed by this beat are stale at `now_ns`: the check is on and more
    /// than `stale_after_ns` has passed since the refresh. A refresh "in the future" (a clock
    /// read on another CPU a tick ahead) is fresh.
    #[inline]
    pub fn stale(&self, now_ns: u64) -> bool {
        self.stale_after_ns != 0
            && now_ns > self.refreshed_ns
            && now_ns - self.refreshed_ns > self.stale_after_ns
    }
}

/// `struct stator_node_cfg` — `stator_cfg[gen]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCfg {
    /// Outer source for IPv4 backends (network order); zero = none.
    pub src_v4: [u8; 4],
    /// Outer source for IPv6 backends; all-zero = none.
    pub src_v6: [u8; 16],
    /// `STATOR_NODE_F_*`.
    pub flags: u32,
    /// Idle timeout of TCP connection-table entries.
    pub tcp_timeout_ns: u64,
    /// Idle timeout of UDP connection-table entries.
    pub udp_timeout_ns: u64,
    /// SYN-flood guard: max inserts per second per CPU; 0 = unlimited.
    pub flood_new_per_sec: u32,
    /// GUE destination port, network order.
    pub gue_port: [u8; 2],
    /// Outer TTL / hop limit.
    pub outer_ttl: u8,
    /// Padding.
    pub _pad0: u8,
    /// `Snapshot::generation` of this half (status and self-test only).
    pub config_generation: u64,
    /// Seed of [`vtab_hash`] for this half's `stator_vtab`.
    pub vtab_seed: u32,
    /// Tracer reports per second for the node; 0 = none.
    pub trace_per_sec: u32,
    /// Absolute index of the fragment peers' Maglev table in `stator_slots`.
    pub peer_table_off: u32,
    /// Its size (prime); 0 = every fragment is decided where it arrives.
    pub peer_table_size: u32,
    /// How long a `stator_frag` record stays fresh.
    pub frag_timeout_ns: u64,
}
assert_layout!(NodeCfg, SIZEOF_stator_node_cfg,
    src_v4 => OFFSETOF_stator_node_cfg_src_v4,
    src_v6 => OFFSETOF_stator_node_cfg_src_v6,
    flags => OFFSETOF_stator_node_cfg_flags,
    tcp_timeout_ns => OFFSETOF_stator_node_cfg_tcp_timeout_ns,
    udp_timeout_ns => OFFSETOF_stator_node_cfg_udp_timeout_ns,
    flood_new_per_sec => OFFSETOF_stator_node_cfg_flood_new_per_sec,
    gue_port => OFFSETOF_stator_node_cfg_gue_port,
    outer_ttl => OFFSETOF_stator_node_cfg_outer_ttl,
    config_generation => OFFSETOF_stator_node_cfg_config_generation,
    vtab_seed => OFFSETOF_stator_node_cfg_vtab_seed,
    trace_per_sec => OFFSETOF_stator_node_cfg_trace_per_sec,
    peer_table_off => OFFSETOF_stator_node_cfg_peer_table_off,
    peer_table_size => OFFSETOF_stator_node_cfg_peer_table_size,
    frag_timeout_ns => OFFSETOF_stator_node_cfg_frag_timeout_ns);
