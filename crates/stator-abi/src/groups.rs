//! Prefix groups, suffixes, fragment peers and failover addresses (docs/forwarding.md §3.1, §9,
//! §10): the records of `stator_classes`, `stator_sfx`, `stator_peers` and `stator_failover`.

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_addr` — an address with its family (`stator_failover`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AddrRec {
    /// Network order; IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
    /// `STATOR_FAMILY_*`; NONE = unset.
    pub family: u8,
    /// Padding.
    pub _pad0: [u8; 3],
}
assert_layout!(AddrRec, SIZEOF_stator_addr,
    addr => OFFSETOF_stator_addr_addr,
    family => OFFSETOF_stator_addr_family);

/// `struct stator_prev` — `stator_prev[gen * STATOR_MAX_VIPS + vip_id]`: the VIP's previous
/// Maglev table (second chance); `table_size` 0 = none.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PrevRec {
    /// Absolute index of slot 0 in `stator_slots`.
    pub table_off: u32,
    /// M; 0 = no previous table.
    pub table_size: u32,
}
assert_layout!(PrevRec, SIZEOF_stator_prev,
    table_off => OFFSETOF_stator_prev_table_off,
    table_size => OFFSETOF_stator_prev_table_size);

/// `struct stator_peer` — a Stator node of `fragments.peers`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Peer {
    /// Network order; IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
    /// `STATOR_FAMILY_*`.
    pub family: u8,
    /// `STATOR_PEER_F_*`.
    pub flags: u8,
    /// Padding.
    pub _pad0: [u8; 2],
}
assert_layout!(Peer, SIZEOF_stator_peer,
    addr => OFFSETOF_stator_peer_addr,
    family => OFFSETOF_stator_peer_family,
    flags => OFFSETOF_stator_peer_flags);

/// `struct stator_class_key` — key of the `stator_classes` LPM trie.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClassKey {
    /// 32 + the prefix length.
    pub prefixlen: u32,
    /// Generation (0 or 1).
    pub generation: u8,
    /// `STATOR_FAMILY_*`.
    pub family: u8,
    /// Zero.
    pub _pad0: [u8; 2],
    /// The prefix, network order (IPv4 in the first 4 bytes), host bits zero.
    pub addr: [u8; 16],
}
assert_layout!(ClassKey, SIZEOF_stator_class_key,
    prefixlen => OFFSETOF_stator_class_key_prefixlen,
    generation => OFFSETOF_stator_class_key_generation,
    family => OFFSETOF_stator_class_key_family,
    addr => OFFSETOF_stator_class_key_addr);

/// `struct stator_class` — value of `stator_classes`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Class {
    /// The class.
    pub class_id: u16,
    /// Suffix lengths in `lens`.
    pub nlens: u8,
    /// `STATOR_CLASS_F_*`.
    pub flags: u8,
    /// The class's suffix lengths of this family, longest first.
    pub lens: [u8; STATOR_MAX_SUFFIX_LENS as usize],
}
assert_layout!(Class, SIZEOF_stator_class,
    class_id => OFFSETOF_stator_class_class_id,
    nlens => OFFSETOF_stator_class_nlens,
    flags => OFFSETOF_stator_class_flags,
    lens => OFFSETOF_stator_class_lens);

/// `struct stator_sfx_key` — a group VIP's suffix entry in `stator_sfx`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SfxKey {
    /// The low `bits` bits of the address, the rest zero (IPv4 in the first 4 bytes).
    pub suffix: [u8; 16],
    /// Port, network order; 0 = any.
    pub port: [u8; 2],
    /// IP protocol.
    pub proto: u8,
    /// `STATOR_FAMILY_*`.
    pub family: u8,
    /// The class.
    pub class_id: u16,
    /// Suffix length.
    pub bits: u8,
    /// Generation (0 or 1).
    pub generation: u8,
}
assert_layout!(SfxKey, SIZEOF_stator_sfx_key,
    suffix => OFFSETOF_stator_sfx_key_suffix,
    port => OFFSETOF_stator_sfx_key_port,
    proto => OFFSETOF_stator_sfx_key_proto,
    family => OFFSETOF_stator_sfx_key_family,
    class_id => OFFSETOF_stator_sfx_key_class_id,
    bits => OFFSETOF_stator_sfx_key_bits,
    generation => OFFSETOF_stator_sfx_key_generation);

/// The low `bits` bits of a key-form address (`addr` network order, IPv4 in the first 4 bytes,
/// `width` = 32 or 128), every other bit zero: the suffix of docs/forwarding.md §3.1.
pub fn low_bits(addr: &[u8; 16], width: u32, bits: u32) -> [u8; 16] {
    let bits = bits.min(width);
    let n = width as usize / 8;
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // bit position of this byte's lowest bit, counted from the low end of the address
        let from_low = (n - 1 - i) * 8;
        let keep = (bits as usize).saturating_sub(from_low).min(8);
        let mask = if keep == 8 {
            0xff
        } else {
            (1u16 << keep) as u8 - 1
        };
        *o = addr[i] & mask;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_bits_keep_the_suffix() {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 100, 1, 0x81]);
        assert_eq!(low_bits(&a, 32, 8)[..4], [0, 0, 0, 0x81]);
        assert_eq!(low_bits(&a, 32, 4)[..4], [0, 0, 0, 0x1]);
        assert_eq!(low_bits(&a, 32, 12)[..4], [0, 0, 1, 0x81]);
        assert_eq!(low_bits(&a, 32, 32)[..4], [10, 100, 1, 0x81]);
        assert_eq!(low_bits(&a, 32, 0), [0; 16]);
        let b = [0xffu8; 16];
        let l = low_bits(&b, 128, 64);
        assert_eq!(l[..8], [0; 8]);
        assert_eq!(l[8..], [0xff; 8]);
        assert_eq!(low_bits(&b, 32, 8)[4..], [0; 12]);
    }
}
