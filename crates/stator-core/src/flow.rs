//! Flows: [`Flow`] with ordinary addresses for callers such as the tracer, and the internal
//! [`Tuple`] the data path carries — the connection-table key ([`FlowKey`], the ABI's `struct
//! stator_flow_key`) as integers.
//!
//! Why integers: the data path builds a flow from packet fields and immediately hashes it twice
//! (the flow hash, the connection table's hash) and compares it with table entries. Built as a
//! byte struct, that means narrow stores (2-byte ports, 4 bytes of a 16-byte address) read back
//! by wider loads, which defeats store forwarding and stalls the pipeline; profiling showed it
//! as a large share of a connection-table hit. As integers the tuple stays in registers, and
//! the hashes and the key's words are computed from the values.

use std::net::IpAddr;

use stator_abi::{Family, FlowKey};
use stator_hash::{flow_hash_v4, flow_hash_v6};

/// A 5-tuple, as a person would write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Source address (the client).
    pub src: IpAddr,
    /// Destination address (the VIP).
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number (6 TCP, 17 UDP).
    pub proto: u8,
}

impl Flow {
    /// The connection-table key: addresses and ports in network order, unused bytes zero;
    /// `None` when the two addresses are of different families.
    pub fn key(&self) -> Option<FlowKey> {
        self.tuple().map(|t| t.key())
    }

    pub(crate) fn tuple(&self) -> Option<Tuple> {
        let (src, dst, family) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (v4(s.to_bits()), v4(d.to_bits()), Family::V4),
            (IpAddr::V6(s), IpAddr::V6(d)) => (s.to_bits(), d.to_bits(), Family::V6),
            _ => return None,
        };
        Some(Tuple {
            src,
            dst,
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            family,
        })
    }
}

/// An IPv4 address as the first 4 bytes of a 16-byte key field, read as a big-endian number.
#[inline]
pub(crate) fn v4(addr: u32) -> u128 {
    u128::from(addr) << 96
}

/// The IPv4 address in a key field made by [`v4`].
#[inline]
pub(crate) fn v4_of(addr: u128) -> u32 {
    // The top 32 bits, by construction.
    (addr >> 96) as u32
}

/// A flow as the data path carries it: addresses as big-endian numbers of their 16-byte key
/// fields (so IPv4 sits in the top 32 bits), ports as numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tuple {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: Family,
}

impl Tuple {
    /// The connection-table key.
    #[inline]
    pub fn key(&self) -> FlowKey {
        FlowKey {
            src: self.src.to_be_bytes(),
            dst: self.dst.to_be_bytes(),
            sport: self.sport.to_be_bytes(),
            dport: self.dport.to_be_bytes(),
            proto: self.proto,
            family: self.family as u8,
            _pad0: [0; 2],
        }
    }

    /// The flow hash (`flow_hash_v4` / `flow_hash_v6` over the 5-tuple).
    #[inline]
    pub fn flow_hash(&self) -> u32 {
        match self.family {
            Family::V4 => flow_hash_v4(
                v4_of(self.src).to_be_bytes(),
                v4_of(self.dst).to_be_bytes(),
                self.sport,
                self.dport,
                self.proto,
            ),
            Family::V6 => flow_hash_v6(
                self.src.to_be_bytes(),
                self.dst.to_be_bytes(),
                self.sport,
                self.dport,
                self.proto,
            ),
        }
    }

    /// The key's 40 bytes as five big-endian words (the connection table's form of the key).
    #[inline]
    pub fn words(&self) -> [u64; 5] {
        let tail = (u64::from(self.sport) << 48)
            | (u64::from(self.dport) << 32)
            | (u64::from(self.proto) << 24)
            | (u64::from(self.family as u8) << 16);
        // Truncations take the low and high halves.
        [
            (self.src >> 64) as u64,
            self.src as u64,
            (self.dst >> 64) as u64,
            self.dst as u64,
            tail,
        ]
    }
}

/// The five big-endian words of a key's 40 bytes (padding included), as [`Tuple::words`].
pub(crate) fn key_words(k: &FlowKey) -> [u64; 5] {
    let tail = [
        k.sport[0], k.sport[1], k.dport[0], k.dport[1], k.proto, k.family, k._pad0[0], k._pad0[1],
    ];
    let src = u128::from_be_bytes(k.src);
    let dst = u128::from_be_bytes(k.dst);
    [
        (src >> 64) as u64,
        src as u64,
        (dst >> 64) as u64,
        dst as u64,
        u64::from_be_bytes(tail),
    ]
}

/// The key of five words made by [`key_words`] or [`Tuple::words`].
pub(crate) fn words_key(w: &[u64; 5]) -> FlowKey {
    let src = (u128::from(w[0]) << 64) | u128::from(w[1]);
    let dst = (u128::from(w[2]) << 64) | u128::from(w[3]);
    let t = w[4].to_be_bytes();
    FlowKey {
        src: src.to_be_bytes(),
        dst: dst.to_be_bytes(),
        sport: [t[0], t[1]],
        dport: [t[2], t[3]],
        proto: t[4],
        family: t[5],
        _pad0: [t[6], t[7]],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn keys_follow_the_abi_layout() {
        let f = Flow {
            src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10)),
            sport: 40000,
            dport: 80,
            proto: 6,
        };
        let k = f.key().unwrap();
        assert_eq!(k.src, [192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(k.sport, [0x9c, 0x40]);
        assert_eq!(k.dport, [0, 80]);
        assert_eq!((k.proto, k.family), (6, 4));
        let t = f.tuple().unwrap();
        assert_eq!(
            t.flow_hash(),
            flow_hash_v4([192, 0, 2, 1], [10, 0, 0, 10], 40000, 80, 6)
        );
        assert_eq!(key_words(&k), t.words());
        assert_eq!(words_key(&t.words()), k);
        let g = Flow {
            src: IpAddr::V6(Ipv6Addr::LOCALHOST),
            dst: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            ..f
        };
        let k6 = g.key().unwrap();
        assert_eq!(k6.family, 6);
        let t6 = g.tuple().unwrap();
        assert_eq!(
            t6.flow_hash(),
            flow_hash_v6(Ipv6Addr::LOCALHOST.octets(), [0; 16], 40000, 80, 6)
        );
        assert_eq!(key_words(&k6), t6.words());
        let mixed = Flow {
            dst: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..f
        };
        assert_eq!(mixed.key(), None);
    }
}
