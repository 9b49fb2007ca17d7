//! The Internet checksum (RFC 1071): full sums, pseudo-headers and incremental updates (RFC 1624).
//!
//! Vocabulary used throughout:
//! - a **sum** is the 16-bit one's-complement sum of some bytes, folded but *not* complemented;
//!   sums of disjoint parts are joined with [`combine`];
//! - a **checksum** is the complement of the sum over everything it covers, computed with the
//!   checksum field itself set to zero. That is the value stored on the wire. A packet verifies
//!   when the sum over everything, checksum field included, is `0xffff`.
//!
//! Sums treat the data as big-endian 16-bit words; an odd trailing byte is padded with a zero byte
//! on its right, as RFC 1071 says. Because one's-complement addition is associative and
//! commutative, [`sum`] adds 64-bit words with an end-around carry and folds at the end; it gives
//! the same value as a word-by-word loop, only faster.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::ip::IpProtocol;

/// Folds a wide one's-complement accumulator down to 16 bits.
#[inline]
const fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    // The loop leaves acc <= 0xffff, so the cast keeps every bit.
    acc as u16
}

/// Adds `b` to the one's-complement accumulator `a` with an end-around carry.
#[inline]
const fn add64(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u64
}

/// The one's-complement sum of `data` (folded, not complemented).
#[must_use]
pub fn sum(data: &[u8]) -> u16 {
    let (chunks, rest) = data.as_chunks::<8>();
    let mut acc = 0u64;
    for chunk in chunks {
        acc = add64(acc, u64::from_be_bytes(*chunk));
    }
    let (pairs, last) = rest.as_chunks::<2>();
    for pair in pairs {
        acc = add64(acc, u64::from(u16::from_be_bytes(*pair)));
    }
    if let [byte] = last {
        acc = add64(acc, u64::from(*byte) << 8);
    }
    fold(acc)
}

/// Joins partial sums into one (one's-complement addition).
#[must_use]
pub fn combine(sums: &[u16]) -> u16 {
    let mut acc = 0u64;
    for s in sums {
        acc += u64::from(*s);
    }
    fold(acc)
}

/// The Internet checksum of `data`: the complement of its sum, as stored on the wire.
///
/// RFC 1071's example, `00 01 f2 03 f4 f5 f6 f7`, sums to `0xddf2` and so has checksum `0x220d`.
#[must_use]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// The sum of the IPv4 pseudo-header (RFC 793, RFC 768): source, destination, zero byte and
/// protocol, and the transport length.
///
/// `length` is the transport segment length (header and data). IPv4 lengths fit 16 bits; the
/// parameter is 32 bits wide so one formula serves both families (for a length below 65536 the
/// high half adds zero).
#[must_use]
pub fn pseudo_header_v4(src: &Ipv4Addr, dst: &Ipv4Addr, protocol: IpProtocol, length: u32) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    let acc = u64::from(u16::from_be_bytes([s[0], s[1]]))
        + u64::from(u16::from_be_bytes([s[2], s[3]]))
        + u64::from(u16::from_be_bytes([d[0], d[1]]))
        + u64::from(u16::from_be_bytes([d[2], d[3]]))
        + u64::from(protocol.0)
        + u64::from(length >> 16)
        + u64::from(length & 0xffff);
    fold(acc)
}

/// The sum of the IPv6 pseudo-header (RFC 8200 §8.1): source, destination, 32-bit upper-layer
/// length, three zero bytes and the next-header value of the upper-layer protocol.
#[must_use]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, protocol: IpProtocol, length: u32) -> u16 {
    let mut acc = 0u64;
    for half in [src.octets(), dst.octets()] {
        let (words, _) = half.as_chunks::<8>();
        for w in words {
            acc = add64(acc, u64::from_be_bytes(*w));
        }
    }
    acc = add64(
        acc,
        u64::from(protocol.0) + u64::from(length >> 16) + u64::from(length & 0xffff),
    );
    fold(acc)
}

/// Incrementally updates checksum `hc` after one 16-bit word of the covered data changed from
/// `old` to `new`: RFC 1624 equation 3, `HC' = ~(~HC + ~m + m')`.
///
/// Equation 3 rather than equation 2 (`HC - m - m'`) because it never produces the `-0`
/// (`0xffff`) that a full recomputation of non-zero data cannot produce. The result equals a full
/// recomputation whenever the new data is not all zeros (only then may a full recomputation
/// give `0xffff`); RFC 1624's own example, `HC = 0xdd2f`, `m = 0x5555`, `m' = 0x3285`, gives
/// `0x0000`.
#[must_use]
pub const fn update(hc: u16, old: u16, new: u16) -> u16 {
    !fold(!hc as u64 + !old as u64 + new as u64)
}

/// Incrementally updates checksum `hc` after a 32-bit field, aligned on a 16-bit boundary of the
/// covered data, changed from `old` to `new`.
#[must_use]
pub const fn update_u32(hc: u16, old: u32, new: u32) -> u16 {
    let acc = !hc as u64
        + (!(old >> 16) & 0xffff) as u64
        + (!old & 0xffff) as u64
        + (new >> 16) as u64
        + (new & 0xffff) as u64;
    !fold(acc)
}

/// Incrementally updates checksum `hc` after a field of `N` bytes (an address, say), starting on
/// a 16-bit boundary of the covered data, changed from `old` to `new`.
///
/// An odd `N` is handled as RFC 1071 pads: the last byte is the high half of a word whose low
/// half did not change.
#[must_use]
pub fn update_bytes<const N: usize>(hc: u16, old: &[u8; N], new: &[u8; N]) -> u16 {
    let removed = !sum(old);
    let added = sum(new);
    !fold(u64::from(!hc) + u64::from(removed) + u64::from(added))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn odd_length_pads_right() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn wide_sum_matches_word_sum() {
        // 0xff bytes everywhere force carries out of every 64-bit add.
        let data = [0xffu8; 37];
        let mut acc = 0u32;
        for w in data.chunks(2) {
            let word = if w.len() == 2 {
                u16::from_be_bytes([w[0], w[1]])
            } else {
                u16::from(w[0]) << 8
            };
            acc += u32::from(word);
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        assert_eq!(u32::from(sum(&data)), acc);
    }

    #[test]
    fn rfc1624_example() {
        assert_eq!(update(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn ipv4_header_checksum_wikipedia() {
        // The classic example header: checksum 0xb861.
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
        hdr[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(sum(&hdr), 0xffff);
    }

    #[test]
    fn incremental_ttl_decrement() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let old = u16::from_be_bytes([hdr[8], hdr[9]]);
        hdr[8] -= 1;
        let new = u16::from_be_bytes([hdr[8], hdr[9]]);
        let hc = update(0xb861, old, new);
        hdr[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(hc, checksum(&hdr));
    }

    #[test]
    fn incremental_address_rewrite() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let old = [0xc0, 0xa8, 0x00, 0xc7];
        let new = [10, 1, 2, 3];
        hdr[16..20].copy_from_slice(&new);
        let by_bytes = update_bytes(0xb861, &old, &new);
        let by_u32 = update_u32(0xb861, u32::from_be_bytes(old), u32::from_be_bytes(new));
        hdr[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(by_bytes, checksum(&hdr));
        assert_eq!(by_u32, checksum(&hdr));
    }

    #[test]
    fn pseudo_header_v4_by_hand() {
        let src = Ipv4Addr::new(192, 168, 0, 1);
        let dst = Ipv4Addr::new(192, 168, 0, 199);
        let bytes = [192, 168, 0, 1, 192, 168, 0, 199, 0, 17, 0x00, 0x5f];
        assert_eq!(
            pseudo_header_v4(&src, &dst, IpProtocol::UDP, 0x5f),
            sum(&bytes)
        );
    }

    #[test]
    fn pseudo_header_v6_by_hand() {
        let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::ffff:2".parse().unwrap();
        let mut bytes = [0u8; 40];
        bytes[..16].copy_from_slice(&src.octets());
        bytes[16..32].copy_from_slice(&dst.octets());
        bytes[32..36].copy_from_slice(&0x0001_0203u32.to_be_bytes());
        bytes[39] = 58;
        assert_eq!(
            pseudo_header_v6(&src, &dst, IpProtocol::ICMPV6, 0x0001_0203),
            sum(&bytes)
        );
    }
}
