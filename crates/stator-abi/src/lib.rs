//! # stator-abi — the user-space mirror of `bpf/include/stator_abi.h`
//!
//! Layer: the bottom of the data-plane stack, beside `stator-wire`. Everything the BPF programs
//! and user space exchange through maps — keys, values, limits, flags, counter indices and drop
//! reasons — is defined once, in C, in `bpf/include/stator_abi.h`. This crate mirrors it:
//!
//! - [`generated`] is produced *from the header* by `gen/abi_gen.c` (`make abi`): every constant,
//!   every enum value with its metric label, every struct size and field offset. It is checked in
//!   (the build needs no C compiler) and the test `generated_is_fresh` fails if it is stale.
//! - The `#[repr(C)]` structs below are the hand-written Rust shapes; each is asserted at compile
//!   time against the generated size and offsets, so a drift between C and Rust does not build.
//! - [`DropReason`] and [`Counter`] take their discriminants from the generated constants.
//!
//! Contract: pure data, no I/O, no `unsafe`. Byte-order conventions follow the header: fields
//! named `addr`, `port`, `src`, `dst`, `gue_port` hold network-order bytes (`[u8; N]` here, so
//! nobody has to remember which integers are swapped).
#![forbid(unsafe_code)]

#[rustfmt::skip]
pub mod generated;

use core::mem::{offset_of, size_of};
pub use generated::*;

macro_rules! assert_layout {
    ($ty:ty, $size:expr, $( $field:ident => $off:expr ),* $(,)?) => {
        const _: () = assert!(size_of::<$ty>() == $size, concat!("size of ", stringify!($ty)));
        $( const _: () = assert!(offset_of!($ty, $field) == $off,
            concat!("offset of ", stringify!($ty), ".", stringify!($field))); )*
    };
}

mod frag;
mod groups;
mod trace;

pub use frag::{FragEntry, FragKey, HoldHdr};
pub use groups::{AddrRec, Class, ClassKey, Peer, SfxKey, low_bits};
pub use trace::{TraceCause, TraceEvent, TraceKind, TraceMark};

/// Address family tag of keys and reals (`enum stator_family`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4.
    V4 = STATOR_FAMILY_V4 as u8,
    /// IPv6.
    V6 = STATOR_FAMILY_V6 as u8,
}

/// Encapsulation toward a backend (`enum stator_encap`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Encap {
    /// Outer IP + 4-byte GRE header (RFC 2784); the paper's default.
    #[default]
    Gre = STATOR_ENCAP_GRE as u8,
    /// Outer IP only (IPIP, IP6IP6, or mixed 4-in-6 / 6-in-4).
    Ipip = STATOR_ENCAP_IPIP as u8,
    /// Outer IP + UDP + 4-byte GUE variant 0 header.
    Gue = STATOR_ENCAP_GUE as u8,
}

impl Encap {
    /// The encapsulation with this ABI code, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        match u32::from(code) {
            STATOR_ENCAP_GRE => Some(Self::Gre),
            STATOR_ENCAP_IPIP => Some(Self::Ipip),
            STATOR_ENCAP_GUE => Some(Self::Gue),
            _ => None,
        }
    }
}

/// Why the forwarder dropped a packet (`enum stator_drop_reason`). The codes double as metric
/// labels ([`DropReason::label`]) and never change once released.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum DropReason {
    MalformedL3 = STATOR_DROP_MALFORMED_L3 as u8,
    MalformedL4 = STATOR_DROP_MALFORMED_L4 as u8,
    Fragment = STATOR_DROP_FRAGMENT as u8,
    Ipv6ExtLimit = STATOR_DROP_IPV6_EXT_LIMIT as u8,
    NoBackend = STATOR_DROP_NO_BACKEND as u8,
    NoSource = STATOR_DROP_NO_SOURCE as u8,
    Fib = STATOR_DROP_FIB as u8,
    NoNeigh = STATOR_DROP_NO_NEIGH as u8,
    TxPort = STATOR_DROP_TX_PORT as u8,
    Adjust = STATOR_DROP_ADJUST as u8,
    Icmp = STATOR_DROP_ICMP as u8,
    BadConfig = STATOR_DROP_BAD_CONFIG as u8,
    Mtu = STATOR_DROP_MTU as u8,
    XskFrame = STATOR_DROP_XSK_FRAME as u8,
    XskSocket = STATOR_DROP_XSK_SOCKET as u8,
    FragHold = STATOR_DROP_FRAG_HOLD as u8,
    Redirect = STATOR_DROP_REDIRECT as u8,
}

impl DropReason {
    /// Every reason, in code order.
    pub const ALL: [DropReason; STATOR_DROP_MAX as usize - 1] = [
        Self::MalformedL3,
        Self::MalformedL4,
        Self::Fragment,
        Self::Ipv6ExtLimit,
        Self::NoBackend,
        Self::NoSource,
        Self::Fib,
        Self::NoNeigh,
        Self::TxPort,
        Self::Adjust,
        Self::Icmp,
        Self::BadConfig,
        Self::Mtu,
        Self::XskFrame,
        Self::XskSocket,
        Self::FragHold,
        Self::Redirect,
    ];

    /// The numeric code (index into the `stator_drops` per-CPU array).
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The reason with this code; `None` for 0 (no drop) and unknown codes.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.code() == code)
    }

    /// The metric label, e.g. `"no_backend"`.
    pub fn label(self) -> &'static str {
        DROP_REASON_NAMES[self as usize]
    }
}

/// Index of a global per-CPU counter (`enum stator_counter`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum Counter {
    ActAborted = STATOR_CNT_ACT_ABORTED,
    ActDrop = STATOR_CNT_ACT_DROP,
    ActPass = STATOR_CNT_ACT_PASS,
    ActTx = STATOR_CNT_ACT_TX,
    ActRedirect = STATOR_CNT_ACT_REDIRECT,
    CtHit = STATOR_CNT_CT_HIT,
    CtMiss = STATOR_CNT_CT_MISS,
    CtReselect = STATOR_CNT_CT_RESELECT,
    CtInsert = STATOR_CNT_CT_INSERT,
    CtExpired = STATOR_CNT_CT_EXPIRED,
    CtGuard = STATOR_CNT_CT_GUARD,
    IcmpErrorFwd = STATOR_CNT_ICMP_ERROR_FWD,
    IcmpEchoReply = STATOR_CNT_ICMP_ECHO_REPLY,
    NonVip = STATOR_CNT_NON_VIP,
    NonIp = STATOR_CNT_NON_IP,
    SelfTest = STATOR_CNT_SELF_TEST,
    FragRedirect = STATOR_CNT_FRAG_REDIRECT,
    FragRecord = STATOR_CNT_FRAG_RECORD,
    FragHit = STATOR_CNT_FRAG_HIT,
    ActHold = STATOR_CNT_ACT_HOLD,
    Failover = STATOR_CNT_FAILOVER,
    RedirectRx = STATOR_CNT_REDIRECT_RX,
    RedirectAgain = STATOR_CNT_REDIRECT_AGAIN,
    GroupMatch = STATOR_CNT_GROUP_MATCH,
    TraceReport = STATOR_CNT_TRACE_REPORT,
    TraceLimited = STATOR_CNT_TRACE_LIMITED,
    TraceLost = STATOR_CNT_TRACE_LOST,
}

impl Counter {
    /// Every counter, in index order.
    pub const ALL: [Counter; STATOR_CNT_MAX as usize] = [
        Self::ActAborted,
        Self::ActDrop,
        Self::ActPass,
        Self::ActTx,
        Self::ActRedirect,
        Self::CtHit,
        Self::CtMiss,
        Self::CtReselect,
        Self::CtInsert,
        Self::CtExpired,
        Self::CtGuard,
        Self::IcmpErrorFwd,
        Self::IcmpEchoReply,
        Self::NonVip,
        Self::NonIp,
        Self::SelfTest,
        Self::FragRedirect,
        Self::FragRecord,
        Self::FragHit,
        Self::ActHold,
        Self::Failover,
        Self::RedirectRx,
        Self::RedirectAgain,
        Self::GroupMatch,
        Self::TraceReport,
        Self::TraceLimited,
        Self::TraceLost,
    ];

    /// The index in the `stator_counters` per-CPU array.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The metric label, e.g. `"ct_hit"`.
    pub fn label(self) -> &'static str {
        COUNTER_NAMES[self as usize]
    }
}

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

/// `struct stator_vip_key` — key of `stator_vips`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    /// Address, network order; IPv4 in the first 4 bytes, rest zero.
    pub addr: [u8; 16],
    /// Port, network order; zero = any port.
    pub port: [u8; 2],
    /// IP protocol number.
    pub proto: u8,
    /// `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// Generation (0 or 1).
    pub generation: u8,
    /// Padding.
    pub _pad0: [u8; 3],
}
assert_layout!(VipKey, SIZEOF_stator_vip_key,
    addr => OFFSETOF_stator_vip_key_addr,
    port => OFFSETOF_stator_vip_key_port,
    proto => OFFSETOF_stator_vip_key_proto,
    family => OFFSETOF_stator_vip_key_family,
    generation => OFFSETOF_stator_vip_key_generation);

/// `struct stator_vip` — value of `stator_vips`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Vip {
    /// Stable id (< `STATOR_MAX_VIPS`), index of `stator_vip_stats`.
    pub vip_id: u32,
    /// `STATOR_VIP_F_*`.
    pub flags: u32,
    /// Absolute index of slot 0 of this VIP's Maglev table in `stator_slots`.
    pub table_off: u32,
    /// M (prime); 0 = no table.
    pub table_size: u32,
}
assert_layout!(Vip, SIZEOF_stator_vip,
    vip_id => OFFSETOF_stator_vip_vip_id,
    flags => OFFSETOF_stator_vip_flags,
    table_off => OFFSETOF_stator_vip_table_off,
    table_size => OFFSETOF_stator_vip_table_size);

/// `struct stator_vaddr_vip` — a VIP carried inline by a `stator_vtab` slot.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VaddrVip {
    /// Port, network order; zero = any port.
    pub port: [u8; 2],
    /// IP protocol number; 0 = unused entry.
    pub proto: u8,
    /// Padding.
    pub _pad0: u8,
    /// The VIP.
    pub vip: Vip,
}
assert_layout!(VaddrVip, SIZEOF_stator_vaddr_vip,
    port => OFFSETOF_stator_vaddr_vip_port,
    proto => OFFSETOF_stator_vaddr_vip_proto,
    vip => OFFSETOF_stator_vaddr_vip_vip);

/// `struct stator_vaddr` — a slot of `stator_vtab`, the VIP-address table.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Vaddr {
    /// Address, network order; IPv4 in the first 4 bytes, rest zero.
    pub addr: [u8; 16],
    /// `STATOR_FAMILY_V4` / `V6`; `STATOR_FAMILY_NONE` = empty slot.
    pub family: u8,
    /// Padding.
    pub _pad0: [u8; 3],
    /// `STATOR_VADDR_F_*`: which `stator_vips` lookups can match; `STATOR_VADDR_F_INLINE` when
    /// `vips` holds every VIP of the address.
    pub flags: u32,
    /// The address's VIPs, when they fit.
    pub vips: [VaddrVip; STATOR_VADDR_INLINE as usize],
}
assert_layout!(Vaddr, SIZEOF_stator_vaddr,
    addr => OFFSETOF_stator_vaddr_addr,
    family => OFFSETOF_stator_vaddr_family,
    flags => OFFSETOF_stator_vaddr_flags,
    vips => OFFSETOF_stator_vaddr_vips);

/// `stator_vtab_hash`: the home slot (within a generation's half of `stator_vtab`) of an
/// address, from its 32-bit words as they sit in memory — so it agrees with the programs on the
/// host it runs on. `addr` is the 16-byte key form (IPv4 in the first 4 bytes).
pub fn vtab_hash(addr: &[u8; 16], family: u8, seed: u32) -> u32 {
    let word = |i: usize| u32::from_ne_bytes([addr[i], addr[i + 1], addr[i + 2], addr[i + 3]]);
    let mut h = seed ^ word(0);
    if u32::from(family) == STATOR_FAMILY_V6 {
        for i in [4, 8, 12] {
            h = h.wrapping_mul(STATOR_VTAB_HASH_MUL) ^ word(i);
        }
    }
    h.wrapping_mul(STATOR_VTAB_HASH_MUL) >> (32 - STATOR_VTAB_SLOTS.trailing_zeros())
}

/// `struct stator_real` — `stator_reals[gen * STATOR_MAX_REALS + real_id]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Real {
    /// Backend address, network order; IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
    /// The VIP this real belongs to.
    pub vip_id: u32,
    /// `STATOR_REAL_F_*`; 0 = unused slot.
    pub flags: u16,
    /// `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// [`Encap`] code.
    pub encap: u8,
}
assert_layout!(Real, SIZEOF_stator_real,
    addr => OFFSETOF_stator_real_addr,
    vip_id => OFFSETOF_stator_real_vip_id,
    flags => OFFSETOF_stator_real_flags,
    family => OFFSETOF_stator_real_family,
    encap => OFFSETOF_stator_real_encap);

/// `struct stator_flow_key` — key of the connection table.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address, network order.
    pub src: [u8; 16],
    /// Destination address, network order.
    pub dst: [u8; 16],
    /// Source port, network order.
    pub sport: [u8; 2],
    /// Destination port, network order.
    pub dport: [u8; 2],
    /// IP protocol number.
    pub proto: u8,
    /// `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// Padding.
    pub _pad0: [u8; 2],
}
assert_layout!(FlowKey, SIZEOF_stator_flow_key,
    src => OFFSETOF_stator_flow_key_src,
    dst => OFFSETOF_stator_flow_key_dst,
    sport => OFFSETOF_stator_flow_key_sport,
    dport => OFFSETOF_stator_flow_key_dport,
    proto => OFFSETOF_stator_flow_key_proto,
    family => OFFSETOF_stator_flow_key_family);

/// `struct stator_ct_entry` — value of the connection table.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CtEntry {
    /// The real this flow uses.
    pub real_id: u32,
    /// The key's flow hash, stored by the insert so that a hit does not recompute it (the outer
    /// flow label and GUE source port need it); 0 = not stored (an entry of an older build).
    pub hash: u32,
    /// Last time the entry was refreshed.
    pub last_seen_ns: u64,
}
assert_layout!(CtEntry, SIZEOF_stator_ct_entry,
    real_id => OFFSETOF_stator_ct_entry_real_id,
    hash => OFFSETOF_stator_ct_entry_hash,
    last_seen_ns => OFFSETOF_stator_ct_entry_last_seen_ns);

/// `struct stator_nh` — a cached next hop (`stator_nh[real_id]`, per CPU).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nh {
    /// When the FIB answered; 0 = empty.
    pub stamp_ns: u64,
    /// Outer destination, network order.
    pub dst: [u8; 16],
    /// Ingress interface.
    pub in_ifindex: u32,
    /// Egress interface.
    pub out_ifindex: u32,
    /// Largest outer IP length accepted.
    pub ok_len: u16,
    /// Family of `dst`.
    pub family: u8,
    /// Padding.
    pub _pad0: u8,
    /// Next-hop MAC.
    pub dmac: [u8; 6],
    /// Egress MAC.
    pub smac: [u8; 6],
}
assert_layout!(Nh, SIZEOF_stator_nh,
    stamp_ns => OFFSETOF_stator_nh_stamp_ns,
    dst => OFFSETOF_stator_nh_dst,
    in_ifindex => OFFSETOF_stator_nh_in_ifindex,
    out_ifindex => OFFSETOF_stator_nh_out_ifindex,
    ok_len => OFFSETOF_stator_nh_ok_len,
    family => OFFSETOF_stator_nh_family,
    dmac => OFFSETOF_stator_nh_dmac,
    smac => OFFSETOF_stator_nh_smac);

/// `struct stator_flood` — the SYN-flood guard's per-CPU window.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flood {
    /// Start of the current one-second window.
    pub window_start_ns: u64,
    /// Inserts in the current window.
    pub inserts: u64,
}
assert_layout!(Flood, SIZEOF_stator_flood,
    window_start_ns => OFFSETOF_stator_flood_window_start_ns,
    inserts => OFFSETOF_stator_flood_inserts);

/// `struct stator_xsk_cfg` — the AF_XDP redirect program's settings (`stator_xskcfg[0]`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskCfg {
    /// Longest frame a UMEM frame holds; longer VIP packets are dropped `xsk_frame`.
    pub max_len: u32,
    /// Padding.
    pub _pad0: u32,
}
assert_layout!(XskCfg, SIZEOF_stator_xsk_cfg,
    max_len => OFFSETOF_stator_xsk_cfg_max_len);

/// `struct stator_fib_query` — a `bpf_fib_lookup` asked through `stator_fibq` (the AF_XDP
/// plane's next hops), as bytes after `STATOR_FIBQ_OFF` bytes of frame.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FibQueryRec {
    /// In: outer source, network order (IPv4 in the first four bytes).
    pub src: [u8; 16],
    /// In: outer destination.
    pub dst: [u8; 16],
    /// In: ingress interface; out: egress interface.
    pub ifindex: u32,
    /// In: outer IP length; out, on FRAG_NEEDED: the MTU.
    pub tot_len: u16,
    /// In: `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// In: the outer protocol.
    pub l4_protocol: u8,
    /// Out: `BPF_FIB_LKUP_RET_*`, or -1 when the program did not answer.
    pub rc: i32,
    /// Out: the egress interface's MAC.
    pub smac: [u8; 6],
    /// Out: the neighbour's MAC.
    pub dmac: [u8; 6],
}
assert_layout!(FibQueryRec, SIZEOF_stator_fib_query,
    src => OFFSETOF_stator_fib_query_src,
    dst => OFFSETOF_stator_fib_query_dst,
    ifindex => OFFSETOF_stator_fib_query_ifindex,
    tot_len => OFFSETOF_stator_fib_query_tot_len,
    family => OFFSETOF_stator_fib_query_family,
    l4_protocol => OFFSETOF_stator_fib_query_l4_protocol,
    rc => OFFSETOF_stator_fib_query_rc,
    smac => OFFSETOF_stator_fib_query_smac,
    dmac => OFFSETOF_stator_fib_query_dmac);

impl FibQueryRec {
    /// The record as bytes (host order for the integers, as the program reads them).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_fib_query] {
        let mut b = [0u8; SIZEOF_stator_fib_query];
        b[OFFSETOF_stator_fib_query_src..][..16].copy_from_slice(&self.src);
        b[OFFSETOF_stator_fib_query_dst..][..16].copy_from_slice(&self.dst);
        b[OFFSETOF_stator_fib_query_ifindex..][..4].copy_from_slice(&self.ifindex.to_ne_bytes());
        b[OFFSETOF_stator_fib_query_tot_len..][..2].copy_from_slice(&self.tot_len.to_ne_bytes());
        b[OFFSETOF_stator_fib_query_family] = self.family;
        b[OFFSETOF_stator_fib_query_l4_protocol] = self.l4_protocol;
        b[OFFSETOF_stator_fib_query_rc..][..4].copy_from_slice(&self.rc.to_ne_bytes());
        b[OFFSETOF_stator_fib_query_smac..][..6].copy_from_slice(&self.smac);
        b[OFFSETOF_stator_fib_query_dmac..][..6].copy_from_slice(&self.dmac);
        b
    }

    /// Parses the record back; `None` when `b` is too short.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..SIZEOF_stator_fib_query)?;
        let arr = |off: usize| -> [u8; 16] { b[off..off + 16].try_into().unwrap_or([0; 16]) };
        let mac = |off: usize| -> [u8; 6] { b[off..off + 6].try_into().unwrap_or([0; 6]) };
        let u32_at = |off: usize| u32::from_ne_bytes(b[off..off + 4].try_into().unwrap_or([0; 4]));
        Some(Self {
            src: arr(OFFSETOF_stator_fib_query_src),
            dst: arr(OFFSETOF_stator_fib_query_dst),
            ifindex: u32_at(OFFSETOF_stator_fib_query_ifindex),
            tot_len: u16::from_ne_bytes(
                b[OFFSETOF_stator_fib_query_tot_len..][..2]
                    .try_into()
                    .unwrap_or([0; 2]),
            ),
            family: b[OFFSETOF_stator_fib_query_family],
            l4_protocol: b[OFFSETOF_stator_fib_query_l4_protocol],
            rc: u32_at(OFFSETOF_stator_fib_query_rc) as i32,
            smac: mac(OFFSETOF_stator_fib_query_smac),
            dmac: mac(OFFSETOF_stator_fib_query_dmac),
        })
    }
}

/// `struct stator_traffic` — per-VIP and per-real packet/byte counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Packets.
    pub packets: u64,
    /// Bytes of the frames as received.
    pub bytes: u64,
}
assert_layout!(Traffic, SIZEOF_stator_traffic,
    packets => OFFSETOF_stator_traffic_packets,
    bytes => OFFSETOF_stator_traffic_bytes);

/// `struct stator_probe` — the payload of a self-test probe frame (ethertype
/// `STATOR_PROBE_ETHERTYPE`), filled in by the forwarder from the active generation.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probe {
    /// `STATOR_PROBE_MAGIC` (host order).
    pub magic: u64,
    /// Chosen by user space.
    pub nonce: u32,
    /// Written by the program: `!nonce`.
    pub answer: u32,
    /// Address to look up in `stator_vaddrs`, network order.
    pub addr: [u8; 16],
    /// Its family; `STATOR_FAMILY_NONE` = no lookup.
    pub family: u8,
    /// Padding.
    pub _pad0: [u8; 3],
    /// Written: the active generation.
    pub active_gen: u32,
    /// Written: `STATOR_PROBE_F_*`.
    pub result: u32,
    /// Written: the vaddr's flags when found.
    pub vaddr_flags: u32,
    /// Written: `stator_cfg[gen].config_generation`.
    pub config_generation: u64,
}
assert_layout!(Probe, SIZEOF_stator_probe,
    magic => OFFSETOF_stator_probe_magic,
    nonce => OFFSETOF_stator_probe_nonce,
    answer => OFFSETOF_stator_probe_answer,
    addr => OFFSETOF_stator_probe_addr,
    family => OFFSETOF_stator_probe_family,
    active_gen => OFFSETOF_stator_probe_active_gen,
    result => OFFSETOF_stator_probe_result,
    vaddr_flags => OFFSETOF_stator_probe_vaddr_flags,
    config_generation => OFFSETOF_stator_probe_config_generation);

impl Probe {
    /// The probe as bytes (host order, as the program reads it).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_probe] {
        let mut b = [0u8; SIZEOF_stator_probe];
        b[OFFSETOF_stator_probe_magic..][..8].copy_from_slice(&self.magic.to_ne_bytes());
        b[OFFSETOF_stator_probe_nonce..][..4].copy_from_slice(&self.nonce.to_ne_bytes());
        b[OFFSETOF_stator_probe_answer..][..4].copy_from_slice(&self.answer.to_ne_bytes());
        b[OFFSETOF_stator_probe_addr..][..16].copy_from_slice(&self.addr);
        b[OFFSETOF_stator_probe_family] = self.family;
        b[OFFSETOF_stator_probe_active_gen..][..4].copy_from_slice(&self.active_gen.to_ne_bytes());
        b[OFFSETOF_stator_probe_result..][..4].copy_from_slice(&self.result.to_ne_bytes());
        b[OFFSETOF_stator_probe_vaddr_flags..][..4]
            .copy_from_slice(&self.vaddr_flags.to_ne_bytes());
        b[OFFSETOF_stator_probe_config_generation..][..8]
            .copy_from_slice(&self.config_generation.to_ne_bytes());
        b
    }

    /// Reads a probe back from bytes (`None` if too short).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.first_chunk::<SIZEOF_stator_probe>()?;
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_ne_bytes(w)
        };
        let mut addr = [0u8; 16];
        addr.copy_from_slice(&b[OFFSETOF_stator_probe_addr..][..16]);
        Some(Self {
            magic: u64_at(OFFSETOF_stator_probe_magic),
            nonce: u32_at(OFFSETOF_stator_probe_nonce),
            answer: u32_at(OFFSETOF_stator_probe_answer),
            addr,
            family: b[OFFSETOF_stator_probe_family],
            _pad0: [0; 3],
            active_gen: u32_at(OFFSETOF_stator_probe_active_gen),
            result: u32_at(OFFSETOF_stator_probe_result),
            vaddr_flags: u32_at(OFFSETOF_stator_probe_vaddr_flags),
            config_generation: u64_at(OFFSETOF_stator_probe_config_generation),
        })
    }
}

/// `struct stator_bench_frame` — the benchmark wrapper's original frame.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchFrame {
    /// Frame length.
    pub len: u32,
    /// Distinct flows to cycle through (> 1 varies the word at `flow_off`).
    pub nflows: u32,
    /// Offset of the big-endian word the wrapper varies.
    pub flow_off: u32,
    /// Padding.
    pub _pad0: u32,
    /// The frame.
    pub bytes: [u8; STATOR_BENCH_FRAME_MAX as usize],
}
assert_layout!(BenchFrame, SIZEOF_stator_bench_frame,
    len => OFFSETOF_stator_bench_frame_len,
    nflows => OFFSETOF_stator_bench_frame_nflows,
    flow_off => OFFSETOF_stator_bench_frame_flow_off,
    bytes => OFFSETOF_stator_bench_frame_bytes);

impl Default for BenchFrame {
    fn default() -> Self {
        Self {
            len: 0,
            nflows: 0,
            flow_off: 0,
            _pad0: 0,
            bytes: [0; STATOR_BENCH_FRAME_MAX as usize],
        }
    }
}

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
    ];

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// `vtab_hash` gives the home slots the C header computed.
    #[test]
    #[cfg(target_endian = "little")] // the vectors were computed on a little-endian host
    fn vtab_hash_agrees_with_the_header() {
        for (words, family, seed, home) in VTAB_HASH_VECTORS {
            let mut addr = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                addr[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            assert_eq!(
                vtab_hash(&addr, family, seed),
                home,
                "{words:x?} {family} {seed:#x}"
            );
            assert!(home < STATOR_VTAB_SLOTS);
        }
    }

    /// Regenerates `generated.rs` from the C header and fails if the checked-in copy differs.
    /// Needs a host C compiler (`cc`); fails loudly, never skips, when there is none.
    #[test]
    fn generated_is_fresh() {
        let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let include = crate_dir.join("../../bpf/include");
        let out = std::env::temp_dir().join(format!("stator_abi_gen_{}", std::process::id()));
        let status = Command::new("cc")
            .args(["-Wall", "-Werror", "-I"])
            .arg(&include)
            .arg(crate_dir.join("gen/abi_gen.c"))
            .arg("-o")
            .arg(&out)
            .status()
            .expect("running `cc` (a host C compiler is needed to check the ABI mirror)");
        assert!(status.success(), "compiling gen/abi_gen.c failed");
        let fresh = Command::new(&out).output().expect("running abi_gen");
        let _ = std::fs::remove_file(&out);
        assert!(
            fresh.status.success(),
            "abi_gen failed: {}",
            String::from_utf8_lossy(&fresh.stderr)
        );
        let checked_in = std::fs::read_to_string(crate_dir.join("src/generated.rs")).unwrap();
        assert_eq!(
            String::from_utf8(fresh.stdout).unwrap(),
            checked_in,
            "crates/stator-abi/src/generated.rs is stale: run `make abi`"
        );
    }

    #[test]
    fn drop_reasons_round_trip_and_have_labels() {
        for r in DropReason::ALL {
            assert_eq!(DropReason::from_code(r.code()), Some(r));
            assert!(!r.label().is_empty());
        }
        assert_eq!(DropReason::from_code(0), None);
        assert_eq!(DropReason::ALL.len() + 1, STATOR_DROP_MAX as usize);
        assert_eq!(DropReason::NoBackend.label(), "no_backend");
    }

    #[test]
    fn counter_labels() {
        assert_eq!(Counter::CtHit.label(), "ct_hit");
        assert_eq!(Counter::SelfTest.label(), "self_test");
        assert_eq!(Counter::TraceLost as u32 + 1, STATOR_CNT_MAX);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index() as usize, i);
        }
    }

    #[test]
    fn decap_counters_are_outcomes_then_reasons() {
        for (i, c) in DecapCounter::ALL.iter().enumerate() {
            assert_eq!(c.index() as usize, i);
            assert_eq!(DecapCounter::from_label(c.label()), Some(*c));
        }
        assert!(DecapCounter::Rejected.is_outcome());
        for (i, c) in RpCounter::ALL.iter().enumerate() {
            assert_eq!(c.index() as usize, i);
            assert_eq!(RpCounter::from_label(c.label()), Some(*c));
        }
        assert!(!DecapCounter::BadOuter.is_outcome());
        assert_eq!(DecapCounter::NotOurs.label(), "not_ours");
    }

    #[test]
    fn probe_magic_spells_statorp1_and_round_trips() {
        assert_eq!(&STATOR_PROBE_MAGIC.to_le_bytes(), b"STATORP1");
        let p = Probe {
            magic: STATOR_PROBE_MAGIC,
            nonce: 7,
            answer: !7,
            addr: [1; 16],
            family: STATOR_FAMILY_V6 as u8,
            active_gen: 1,
            result: 3,
            vaddr_flags: 5,
            config_generation: 42,
            ..Probe::default()
        };
        assert_eq!(Probe::from_bytes(&p.to_bytes()), Some(p));
    }
}
