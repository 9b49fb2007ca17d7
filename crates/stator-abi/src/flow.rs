//! Per-flow state: the connection table's key and value, the cached next hop and the SYN-flood
//! guard's window.

use core::mem::{offset_of, size_of};

use crate::generated::*;

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

/// `struct stator_ct4_entry` — one way of a bucket of the per-CPU build's IPv4 connection
/// table (`stator_ct4`, docs/forwarding.md §4).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ct4Entry {
    /// Source address, network order.
    pub src: [u8; 4],
    /// Destination address, network order.
    pub dst: [u8; 4],
    /// Source port, network order.
    pub sport: [u8; 2],
    /// Destination port, network order.
    pub dport: [u8; 2],
    /// IP protocol number.
    pub proto: u8,
    /// Padding (zero).
    pub _pad0: [u8; 3],
    /// The real this flow uses.
    pub real_id: u32,
    /// The flow hash (the bucket's and the encapsulation's).
    pub hash: u32,
    /// Last time the entry was refreshed; 0 = free.
    pub last_seen_ns: u64,
}
assert_layout!(Ct4Entry, SIZEOF_stator_ct4_entry,
    src => OFFSETOF_stator_ct4_entry_src,
    dst => OFFSETOF_stator_ct4_entry_dst,
    sport => OFFSETOF_stator_ct4_entry_sport,
    dport => OFFSETOF_stator_ct4_entry_dport,
    proto => OFFSETOF_stator_ct4_entry_proto,
    real_id => OFFSETOF_stator_ct4_entry_real_id,
    hash => OFFSETOF_stator_ct4_entry_hash,
    last_seen_ns => OFFSETOF_stator_ct4_entry_last_seen_ns);

impl Ct4Entry {
    /// Whether this way holds `flow` (an IPv4 flow key).
    pub fn holds(&self, flow: &FlowKey) -> bool {
        self.last_seen_ns != 0
            && flow.family == STATOR_FAMILY_V4 as u8
            && self.src == flow.src[..4]
            && self.dst == flow.dst[..4]
            && self.sport == flow.sport
            && self.dport == flow.dport
            && self.proto == flow.proto
    }

    /// The flow this way holds (an IPv4 flow key).
    pub fn flow(&self) -> FlowKey {
        let mut k = FlowKey {
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            family: STATOR_FAMILY_V4 as u8,
            ..FlowKey::default()
        };
        k.src[..4].copy_from_slice(&self.src);
        k.dst[..4].copy_from_slice(&self.dst);
        k
    }

    /// The connection-table value this way stands for.
    pub fn entry(&self) -> CtEntry {
        CtEntry {
            real_id: self.real_id,
            hash: self.hash,
            last_seen_ns: self.last_seen_ns,
        }
    }
}

/// `struct stator_ct4_bucket` — `STATOR_CT4_WAYS` entries, two cache lines.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ct4Bucket {
    /// The ways.
    pub e: [Ct4Entry; STATOR_CT4_WAYS as usize],
}
const _: () = assert!(size_of::<Ct4Bucket>() == SIZEOF_stator_ct4_bucket);

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
