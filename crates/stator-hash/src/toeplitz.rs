//! The Toeplitz hash used by NICs for receive-side scaling (RSS).
//!
//! Stator does not need it to forward packets, but it needs it to *predict* them: which receive
//! queue (and so which core and which AF_XDP socket) a NIC will put a flow on, and to build test
//! traffic that lands on a chosen queue.

/// Microsoft's default RSS key, used by the published verification vectors and by many NICs.
pub const RSS_DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// A Toeplitz hasher with a 40-byte secret key.
///
/// `hash(input)` follows Microsoft's definition: for every input bit from the most significant bit
/// of `input[0]` onwards, if the bit is set XOR the result with the leftmost 32 bits of the key,
/// then shift the key left by one bit (zeros enter from the right, so a 40-byte key fully covers
/// inputs of up to 36 bytes, the IPv6 4-tuple).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toeplitz {
    key: [u8; 40],
}

impl Default for Toeplitz {
    /// A hasher with [`RSS_DEFAULT_KEY`].
    fn default() -> Self {
        Self::new(RSS_DEFAULT_KEY)
    }
}

impl Toeplitz {
    /// A hasher with the given key.
    pub const fn new(key: [u8; 40]) -> Self {
        Self { key }
    }

    /// The key.
    pub fn key(&self) -> &[u8; 40] {
        &self.key
    }

    /// Toeplitz hash of an arbitrary byte string (fields in network byte order).
    pub fn hash(&self, input: &[u8]) -> u32 {
        let mut result = 0u32;
        // The next 64 key bits, most significant first; the top 32 are the current window.
        let mut window = u64::from_be_bytes([
            self.key[0],
            self.key[1],
            self.key[2],
            self.key[3],
            self.key[4],
            self.key[5],
            self.key[6],
            self.key[7],
        ]);
        let mut refill = self.key.iter().skip(8).copied();
        for &byte in input {
            for bit in (0..8).rev() {
                // All-ones when the bit is set: branch-free XOR of the window.
                let mask = 0u32.wrapping_sub(u32::from((byte >> bit) & 1));
                result ^= (window >> 32) as u32 & mask;
                window <<= 1;
            }
            window |= u64::from(refill.next().unwrap_or(0));
        }
        result
    }

    /// Hash of an IPv4 2-tuple (RSS type "IPv4"): `src || dst`.
    pub fn hash_v4(&self, src: [u8; 4], dst: [u8; 4]) -> u32 {
        let mut input = [0u8; 8];
        input[..4].copy_from_slice(&src);
        input[4..].copy_from_slice(&dst);
        self.hash(&input)
    }

    /// Hash of an IPv4 4-tuple (RSS type "TCP/IPv4", also used for UDP): `src || dst || sport ||
    /// dport`, ports as host-order numbers.
    pub fn hash_v4_ports(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
        let mut input = [0u8; 12];
        input[..4].copy_from_slice(&src);
        input[4..8].copy_from_slice(&dst);
        input[8..10].copy_from_slice(&sport.to_be_bytes());
        input[10..].copy_from_slice(&dport.to_be_bytes());
        self.hash(&input)
    }

    /// Hash of an IPv6 2-tuple (RSS type "IPv6"): `src || dst`.
    pub fn hash_v6(&self, src: [u8; 16], dst: [u8; 16]) -> u32 {
        let mut input = [0u8; 32];
        input[..16].copy_from_slice(&src);
        input[16..].copy_from_slice(&dst);
        self.hash(&input)
    }

    /// Hash of an IPv6 4-tuple (RSS type "TCP/IPv6"): `src || dst || sport || dport`.
    pub fn hash_v6_ports(&self, src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16) -> u32 {
        let mut input = [0u8; 36];
        input[..16].copy_from_slice(&src);
        input[16..32].copy_from_slice(&dst);
        input[32..34].copy_from_slice(&sport.to_be_bytes());
        input[34..].copy_from_slice(&dport.to_be_bytes());
        self.hash(&input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    // Source: Microsoft, "Verifying the RSS Hash Calculation" (Windows Driver Kit documentation,
    // learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation),
    // with the default key above. The same suite appears in Intel's 82599 datasheet §7.1.2.8.3 and
    // DPDK's app/test/test_thash.c. Columns: destination, destination port, source, source port,
    // hash without ports, hash with ports. Note the tables list the *destination* first while the
    // hash input starts with the *source*.
    const V4: [(&str, u16, &str, u16, u32, u32); 5] = [
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];
    const V6: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc1_8cd5,
            0x4020_7d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c_461c,
            0xdde5_1bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61_e985,
            0x02d1_feef,
        ),
    ];

    #[test]
    fn microsoft_ipv4_vectors() {
        let toeplitz = Toeplitz::default();
        for (dst, dport, src, sport, without_ports, with_ports) in V4 {
            let dst = dst.parse::<Ipv4Addr>().unwrap().octets();
            let src = src.parse::<Ipv4Addr>().unwrap().octets();
            assert_eq!(toeplitz.hash_v4(src, dst), without_ports, "{src:?}");
            assert_eq!(toeplitz.hash_v4_ports(src, dst, sport, dport), with_ports);
        }
    }

    #[test]
    fn microsoft_ipv6_vectors() {
        let toeplitz = Toeplitz::default();
        for (dst, dport, src, sport, without_ports, with_ports) in V6 {
            let dst = dst.parse::<Ipv6Addr>().unwrap().octets();
            let src = src.parse::<Ipv6Addr>().unwrap().octets();
            assert_eq!(toeplitz.hash_v6(src, dst), without_ports, "{src:?}");
            assert_eq!(toeplitz.hash_v6_ports(src, dst, sport, dport), with_ports);
        }
    }

    /// A literal bit-by-bit transcription of Microsoft's pseudocode, for arbitrary keys and
    /// lengths (including inputs longer than the key covers).
    fn reference(key: &[u8; 40], input: &[u8]) -> u32 {
        let key_bit = |i: usize| key.get(i / 8).is_some_and(|b| (b >> (7 - i % 8)) & 1 == 1);
        let mut result = 0u32;
        for i in 0..input.len() * 8 {
            if (input[i / 8] >> (7 - i % 8)) & 1 == 1 {
                let window = (0..32).fold(0u32, |w, j| (w << 1) | u32::from(key_bit(i + j)));
                result ^= window;
            }
        }
        result
    }

    #[test]
    fn configurable_key_matches_the_pseudocode() {
        let key: [u8; 40] = std::array::from_fn(|i| (i as u8).wrapping_mul(151).wrapping_add(7));
        let toeplitz = Toeplitz::new(key);
        assert_eq!(toeplitz.key(), &key);
        for len in 0..=44 {
            let input: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(73) ^ 0x5a)
                .collect();
            assert_eq!(
                toeplitz.hash(&input),
                reference(&key, &input),
                "length {len}"
            );
        }
    }

    #[test]
    fn is_linear_in_the_input() {
        let toeplitz = Toeplitz::default();
        let a = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0];
        let b = [0xffu8, 0x00, 0x0f, 0xf0, 0x55, 0xaa, 0x01, 0x80];
        let x: Vec<u8> = a.iter().zip(&b).map(|(p, q)| p ^ q).collect();
        assert_eq!(toeplitz.hash(&x), toeplitz.hash(&a) ^ toeplitz.hash(&b));
    }
}
