//! Fragments (docs/forwarding.md §9): the fragment table's key and value, and the header of a
//! held frame in the `stator_hold` ring buffer.

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_frag_key` — one datagram: `(src, dst, id, proto, family)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FragKey {
    /// Source address, network order (IPv4 in the first 4 bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Identification, network order: IPv4's 16 bits zero-extended (`00 00 hi lo`), IPv6's 32.
    pub id: [u8; 4],
    /// IPv4 protocol / the IPv6 fragment header's next header.
    pub proto: u8,
    /// `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// Padding (zero).
    pub _pad0: [u8; 2],
}
assert_layout!(FragKey, SIZEOF_stator_frag_key,
    src => OFFSETOF_stator_frag_key_src,
    dst => OFFSETOF_stator_frag_key_dst,
    id => OFFSETOF_stator_frag_key_id,
    proto => OFFSETOF_stator_frag_key_proto,
    family => OFFSETOF_stator_frag_key_family);

impl FragKey {
    /// The key as its bytes in memory (what the map and the ring hold).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_frag_key] {
        let mut b = [0u8; SIZEOF_stator_frag_key];
        b[..16].copy_from_slice(&self.src);
        b[16..32].copy_from_slice(&self.dst);
        b[32..36].copy_from_slice(&self.id);
        b[36] = self.proto;
        b[37] = self.family;
        b
    }

    /// The key from its bytes (`None` when too short).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.first_chunk::<SIZEOF_stator_frag_key>()?;
        let mut k = Self::default();
        k.src.copy_from_slice(&b[..16]);
        k.dst.copy_from_slice(&b[16..32]);
        k.id.copy_from_slice(&b[32..36]);
        k.proto = b[36];
        k.family = b[37];
        k._pad0 = [b[38], b[39]];
        Some(k)
    }
}

/// `struct stator_frag_entry` — what a datagram's first fragment decided.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FragEntry {
    /// The real the datagram goes to; `STATOR_NO_REAL` when refused.
    pub real_id: u32,
    /// The VIP it matched.
    pub vip_id: u32,
    /// `now` of the first fragment (never 0).
    pub created_ns: u64,
    /// 0: forward to `real_id`; else the drop reason of every other fragment.
    pub reason: u32,
    /// The first fragment's flow hash: the others get the same outer entropy.
    pub hash: u32,
}
assert_layout!(FragEntry, SIZEOF_stator_frag_entry,
    real_id => OFFSETOF_stator_frag_entry_real_id,
    vip_id => OFFSETOF_stator_frag_entry_vip_id,
    created_ns => OFFSETOF_stator_frag_entry_created_ns,
    reason => OFFSETOF_stator_frag_entry_reason,
    hash => OFFSETOF_stator_frag_entry_hash);

/// `struct stator_hold_hdr` — the header of a `stator_hold` record; `len` bytes of the frame as
/// received follow it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldHdr {
    /// The datagram.
    pub key: FragKey,
    /// The interface it arrived on.
    pub ingress_ifindex: u32,
    /// Bytes of frame after the header.
    pub len: u32,
    /// `now` when it was held.
    pub now_ns: u64,
}
assert_layout!(HoldHdr, SIZEOF_stator_hold_hdr,
    key => OFFSETOF_stator_hold_hdr_key,
    ingress_ifindex => OFFSETOF_stator_hold_hdr_ingress_ifindex,
    len => OFFSETOF_stator_hold_hdr_len,
    now_ns => OFFSETOF_stator_hold_hdr_now_ns);

impl HoldHdr {
    /// Splits a `stator_hold` record into its header and its frame; `None` when the record is
    /// shorter than its header says.
    pub fn parse(record: &[u8]) -> Option<(Self, &[u8])> {
        let (h, rest) = record.split_at_checked(SIZEOF_stator_hold_hdr)?;
        let u32_at = |o: usize| u32::from_ne_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let mut now = [0u8; 8];
        now.copy_from_slice(&h[OFFSETOF_stator_hold_hdr_now_ns..][..8]);
        let hdr = Self {
            key: FragKey::from_bytes(h)?,
            ingress_ifindex: u32_at(OFFSETOF_stator_hold_hdr_ingress_ifindex),
            len: u32_at(OFFSETOF_stator_hold_hdr_len),
            now_ns: u64::from_ne_bytes(now),
        };
        let frame = rest.get(..hdr.len as usize)?;
        Some((hdr, frame))
    }

    /// The header followed by `frame`, as the program writes a record.
    pub fn record(&self, frame: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(SIZEOF_stator_hold_hdr + frame.len());
        b.extend_from_slice(&self.key.to_bytes());
        b.extend_from_slice(&self.ingress_ifindex.to_ne_bytes());
        b.extend_from_slice(&self.len.to_ne_bytes());
        b.extend_from_slice(&self.now_ns.to_ne_bytes());
        b.extend_from_slice(frame);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_records_round_trip() {
        let hdr = HoldHdr {
            key: FragKey {
                src: [1; 16],
                dst: [2; 16],
                id: [0, 0, 0x12, 0x34],
                proto: 17,
                family: STATOR_FAMILY_V4 as u8,
                _pad0: [0; 2],
            },
            ingress_ifindex: 7,
            len: 3,
            now_ns: 99,
        };
        let rec = hdr.record(&[9, 8, 7]);
        assert_eq!(HoldHdr::parse(&rec), Some((hdr, &[9u8, 8, 7][..])));
        assert_eq!(HoldHdr::parse(&rec[..rec.len() - 1]), None);
        assert_eq!(FragKey::from_bytes(&hdr.key.to_bytes()), Some(hdr.key));
    }
}
