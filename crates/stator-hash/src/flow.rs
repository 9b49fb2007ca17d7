//! The flow hash: Linux's `jhash2` (Bob Jenkins' lookup3 `hashword`) over the flow's fields.
//!
//! This is one function with two implementations: this file and `bpf/include/flow_hash.h`. Both
//! follow the definition in `docs/hashing.md`:
//!
//! - `initval = STATOR_FLOW_HASH_SEED ^ proto`;
//! - words are the numeric values of the network-order fields (`u32::from_be_bytes` of each 4-byte
//!   group of an address; `sport << 16 | dport` for the ports);
//! - 5-tuple: `[src, dst, ports]` (IPv4, 3 words) or `[src0..3, dst0..3, ports]` (IPv6, 9 words);
//!   3-tuple (fragments): the same without the ports word (2 or 8 words).
//!
//! ICMP errors need no function of their own: the caller hashes the embedded (inner) header with
//! source and destination swapped, which gives the hash of the flow the error is about.

/// Lookup3's arbitrary initial value, `JHASH_INITVAL` in Linux's `include/linux/jhash.h`.
pub const JHASH_INITVAL: u32 = 0xdead_beef;

/// Stator's flow hash seed; the hash's `initval` is this XOR the IP protocol number.
pub const STATOR_FLOW_HASH_SEED: u32 = 0x5ca1_ab1e;

/// `__jhash_mix`: mix three 32-bit values reversibly.
#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

/// `__jhash_final`: final mixing of three 32-bit values into `c`.
#[inline(always)]
fn final_mix(mut a: u32, mut b: u32, mut c: u32) -> u32 {
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c.wrapping_sub(b.rotate_left(24))
}

/// Linux's `jhash2(k, length, initval)`: lookup3 `hashword` over 32-bit words.
///
/// The length mixed into the initial state is `words.len()` as a `u32` (a slice longer than
/// `u32::MAX` words wraps, as the C `u32 length` would); Stator only hashes 2 to 9 words.
#[inline]
pub fn jhash2(words: &[u32], initval: u32) -> u32 {
    // Truncation is the C semantics of `u32 length`; see the doc comment.
    let length = words.len() as u32;
    let init = JHASH_INITVAL
        .wrapping_add(length.wrapping_shl(2))
        .wrapping_add(initval);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut k = words;
    while k.len() > 3 {
        a = a.wrapping_add(k[0]);
        b = b.wrapping_add(k[1]);
        c = c.wrapping_add(k[2]);
        mix(&mut a, &mut b, &mut c);
        k = &k[3..];
    }
    match *k {
        [k0, k1, k2] => final_mix(a.wrapping_add(k0), b.wrapping_add(k1), c.wrapping_add(k2)),
        [k0, k1] => final_mix(a.wrapping_add(k0), b.wrapping_add(k1), c),
        [k0] => final_mix(a.wrapping_add(k0), b, c),
        _ => c,
    }
}

/// The ports word: source port in the high half, destination port in the low half.
#[inline(always)]
fn ports_word(sport: u16, dport: u16) -> u32 {
    (u32::from(sport) << 16) | u32::from(dport)
}

/// The four words of an IPv6 address, each the big-endian value of 4 consecutive bytes.
#[inline(always)]
fn v6_words(addr: [u8; 16]) -> [u32; 4] {
    let word = |i: usize| u32::from_be_bytes([addr[i], addr[i + 1], addr[i + 2], addr[i + 3]]);
    [word(0), word(4), word(8), word(12)]
}

/// Flow hash of an IPv4 5-tuple: `jhash2([src, dst, sport << 16 | dport], SEED ^ proto)`.
///
/// Addresses are given as they sit in the packet (`Ipv4Addr::octets()`), ports as host-order
/// numbers.
#[inline]
pub fn flow_hash_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> u32 {
    let words = [
        u32::from_be_bytes(src),
        u32::from_be_bytes(dst),
        ports_word(sport, dport),
    ];
    jhash2(&words, STATOR_FLOW_HASH_SEED ^ u32::from(proto))
}

/// Flow hash of an IPv6 5-tuple: `jhash2([src0..3, dst0..3, sport << 16 | dport], SEED ^ proto)`.
#[inline]
pub fn flow_hash_v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> u32 {
    let s = v6_words(src);
    let d = v6_words(dst);
    let words = [
        s[0],
        s[1],
        s[2],
        s[3],
        d[0],
        d[1],
        d[2],
        d[3],
        ports_word(sport, dport),
    ];
    jhash2(&words, STATOR_FLOW_HASH_SEED ^ u32::from(proto))
}

/// Flow hash of an IPv4 3-tuple (fragments carry no ports): `jhash2([src, dst], SEED ^ proto)`.
#[inline]
pub fn flow_hash3_v4(src: [u8; 4], dst: [u8; 4], proto: u8) -> u32 {
    let words = [u32::from_be_bytes(src), u32::from_be_bytes(dst)];
    jhash2(&words, STATOR_FLOW_HASH_SEED ^ u32::from(proto))
}

/// Flow hash of an IPv6 3-tuple: `jhash2([src0..3, dst0..3], SEED ^ proto)`.
#[inline]
pub fn flow_hash3_v6(src: [u8; 16], dst: [u8; 16], proto: u8) -> u32 {
    let s = v6_words(src);
    let d = v6_words(dst);
    let words = [s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3]];
    jhash2(&words, STATOR_FLOW_HASH_SEED ^ u32::from(proto))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `jhash_2words`/`jhash_3words` (`__jhash_nwords`) must equal `jhash2` of the
    /// same words; this pins the tail handling of `jhash2` to the kernel's other entry points.
    fn jhash_nwords(a: u32, b: u32, c: u32, initval: u32) -> u32 {
        final_mix(
            a.wrapping_add(initval),
            b.wrapping_add(initval),
            c.wrapping_add(initval),
        )
    }

    #[test]
    fn jhash2_matches_kernel_fixed_word_forms() {
        let (a, b, c, iv) = (0x0102_0304, 0xa0b0_c0d0, 0xffff_0000, 0x5ca1_ab1e);
        let iv3 = JHASH_INITVAL.wrapping_add(3 << 2).wrapping_add(iv);
        let iv2 = JHASH_INITVAL.wrapping_add(2 << 2).wrapping_add(iv);
        let iv1 = JHASH_INITVAL.wrapping_add(1 << 2).wrapping_add(iv);
        assert_eq!(jhash2(&[a, b, c], iv), jhash_nwords(a, b, c, iv3));
        assert_eq!(jhash2(&[a, b], iv), jhash_nwords(a, b, 0, iv2));
        assert_eq!(jhash2(&[a], iv), jhash_nwords(a, 0, 0, iv1));
    }

    #[test]
    fn jhash2_of_nothing_is_the_initial_state() {
        assert_eq!(jhash2(&[], 0), JHASH_INITVAL);
        assert_eq!(jhash2(&[], 1), JHASH_INITVAL + 1);
    }

    #[test]
    fn jhash2_long_inputs_use_every_word() {
        let base: Vec<u32> = (0..10).collect();
        let h = jhash2(&base, 7);
        for i in 0..base.len() {
            let mut changed = base.clone();
            changed[i] ^= 1;
            assert_ne!(jhash2(&changed, 7), h, "word {i} ignored");
        }
    }

    #[test]
    fn fields_map_to_words_as_documented() {
        let (src, dst) = ([10, 0, 0, 1], [192, 168, 1, 2]);
        let words = [0x0a00_0001, 0xc0a8_0102, (1234 << 16) | 80];
        assert_eq!(
            flow_hash_v4(src, dst, 1234, 80, 6),
            jhash2(&words, STATOR_FLOW_HASH_SEED ^ 6)
        );
        assert_eq!(
            flow_hash3_v4(src, dst, 17),
            jhash2(&words[..2], STATOR_FLOW_HASH_SEED ^ 17)
        );
        let mut s6 = [0u8; 16];
        let mut d6 = [0u8; 16];
        s6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        s6[15] = 1;
        d6[0] = 0xfe;
        d6[15] = 2;
        let w6 = [
            0x2001_0db8,
            0,
            0,
            1,
            0xfe00_0000,
            0,
            0,
            2,
            (443 << 16) | 55_000,
        ];
        assert_eq!(
            flow_hash_v6(s6, d6, 443, 55_000, 6),
            jhash2(&w6, STATOR_FLOW_HASH_SEED ^ 6)
        );
        assert_eq!(
            flow_hash3_v6(s6, d6, 44),
            jhash2(&w6[..8], STATOR_FLOW_HASH_SEED ^ 44)
        );
    }

    #[test]
    fn protocol_changes_the_hash() {
        let h = |p| flow_hash_v4([1, 2, 3, 4], [5, 6, 7, 8], 1, 2, p);
        assert_ne!(h(6), h(17));
    }
}
