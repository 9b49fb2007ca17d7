//! Services: the VIP table's key and value, the VIP-address table (`stator_vtab`) and its hash,
//! the reals, and the per-VIP / per-real traffic counters.

use core::mem::{offset_of, size_of};

use crate::generated::*;

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
