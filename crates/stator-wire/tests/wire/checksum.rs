//! The checksum functions against a naive RFC 1071 loop, and RFC 1624 incremental updates against
//! full recomputation.

use core::net::Ipv4Addr;

use proptest::collection::vec;
use proptest::prelude::*;
use stator_wire::checksum::{self, checksum, sum, update, update_bytes, update_u32};
use stator_wire::{IpProtocol, Ipv4Packet, Ipv4Repr};

/// RFC 1071, word by word, the obvious way.
fn naive_sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    for pair in data.chunks(2) {
        let word = if pair.len() == 2 {
            u16::from_be_bytes([pair[0], pair[1]])
        } else {
            u16::from(pair[0]) << 8
        };
        acc += u64::from(word);
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

fn word(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

/// Even-length data that is not all zeros (all-zero data is the one case where a full
/// recomputation gives 0xffff and RFC 1624 eqn. 3 gives 0x0000; no real header is all zeros).
fn data() -> impl Strategy<Value = Vec<u8>> {
    (1usize..64).prop_flat_map(|words| vec(any::<u8>(), words * 2))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn sum_matches_naive(data in vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(sum(&data), naive_sum(&data));
    }

    #[test]
    fn combine_is_sum_of_parts(data in vec(any::<u8>(), 0..300), split in any::<usize>()) {
        // Split on an even boundary: sums of parts starting at odd offsets would be byte-swapped.
        let split = (split % (data.len() + 1)) & !1;
        let (a, b) = data.split_at(split);
        prop_assert_eq!(checksum::combine(&[sum(a), sum(b)]), naive_sum(&data));
    }

    #[test]
    fn incremental_word_equals_full(mut data in data(), index in any::<usize>(), new in any::<u16>()) {
        let at = (index % (data.len() / 2)) * 2;
        let hc = checksum(&data);
        let old = word(&data, at);
        data[at..at + 2].copy_from_slice(&new.to_be_bytes());
        prop_assume!(data.iter().any(|&b| b != 0));
        prop_assert_eq!(update(hc, old, new), checksum(&data));
    }

    #[test]
    fn incremental_u32_equals_full(mut data in data(), index in any::<usize>(), new in any::<u32>()) {
        prop_assume!(data.len() >= 4);
        let at = (index % (data.len() / 2 - 1)) * 2;
        let hc = checksum(&data);
        let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        data[at..at + 4].copy_from_slice(&new.to_be_bytes());
        prop_assume!(data.iter().any(|&b| b != 0));
        prop_assert_eq!(update_u32(hc, old, new), checksum(&data));
    }

    #[test]
    fn incremental_address_equals_full(mut data in data(), index in any::<usize>(), new in any::<[u8; 16]>()) {
        prop_assume!(data.len() >= 16);
        let at = (index % ((data.len() - 16) / 2 + 1)) * 2;
        let hc = checksum(&data);
        let mut old = [0u8; 16];
        old.copy_from_slice(&data[at..at + 16]);
        data[at..at + 16].copy_from_slice(&new);
        prop_assume!(data.iter().any(|&b| b != 0));
        prop_assert_eq!(update_bytes(hc, &old, &new), checksum(&data));
    }

    /// What a forwarder does: rewrite the destination and decrement the TTL of an IPv4 header,
    /// patching the checksum incrementally; it must equal a fresh fill.
    #[test]
    fn ipv4_rewrite(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), new_dst in any::<[u8; 4]>(), ttl in 1u8.., ident in any::<u16>(), tos in any::<u8>()) {
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::from(src), dst_addr: Ipv4Addr::from(dst), protocol: IpProtocol::UDP,
            payload_len: 0, ttl, tos, ident, dont_frag: true, more_frags: false, frag_offset: 0,
        };
        let mut buf = [0u8; 20];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])).unwrap();
        let mut packet = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        let mut hc = packet.checksum();
        let old_word = u16::from_be_bytes([ttl, IpProtocol::UDP.0]);
        packet.set_ttl(ttl - 1);
        hc = update(hc, old_word, u16::from_be_bytes([ttl - 1, IpProtocol::UDP.0]));
        packet.set_dst_addr(Ipv4Addr::from(new_dst));
        hc = update_bytes(hc, &dst, &new_dst);
        packet.fill_checksum();
        prop_assert_eq!(hc, packet.checksum());
        prop_assert!(packet.verify_checksum());
    }
}
