//! Flows: the connection-table key ([`FlowKey`], the ABI's `struct stator_flow_key`), its flow
//! hash, and [`Flow`], the same thing with ordinary addresses for callers such as the tracer.

use std::net::IpAddr;

use stator_abi::{FlowKey, STATOR_FAMILY_V4, STATOR_FAMILY_V6};
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
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(key_v4(
                s.octets(),
                d.octets(),
                self.sport,
                self.dport,
                self.proto,
            )),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(key_v6(
                s.octets(),
                d.octets(),
                self.sport,
                self.dport,
                self.proto,
            )),
            _ => None,
        }
    }
}

/// The key of an IPv4 flow.
#[inline]
pub(crate) fn key_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> FlowKey {
    let mut k = FlowKey {
        sport: sport.to_be_bytes(),
        dport: dport.to_be_bytes(),
        proto,
        family: STATOR_FAMILY_V4 as u8,
        ..FlowKey::default()
    };
    k.src[..4].copy_from_slice(&src);
    k.dst[..4].copy_from_slice(&dst);
    k
}

/// The key of an IPv6 flow.
#[inline]
pub(crate) fn key_v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> FlowKey {
    FlowKey {
        src,
        dst,
        sport: sport.to_be_bytes(),
        dport: dport.to_be_bytes(),
        proto,
        family: STATOR_FAMILY_V6 as u8,
        _pad0: [0; 2],
    }
}

/// The flow hash of a key (`flow_hash_v4` / `flow_hash_v6` over its 5-tuple).
#[inline]
pub(crate) fn hash_key(k: &FlowKey) -> u32 {
    let (sport, dport) = (u16::from_be_bytes(k.sport), u16::from_be_bytes(k.dport));
    if u32::from(k.family) == STATOR_FAMILY_V4 {
        let s = [k.src[0], k.src[1], k.src[2], k.src[3]];
        let d = [k.dst[0], k.dst[1], k.dst[2], k.dst[3]];
        flow_hash_v4(s, d, sport, dport, k.proto)
    } else {
        flow_hash_v6(k.src, k.dst, sport, dport, k.proto)
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
        assert_eq!(
            hash_key(&k),
            flow_hash_v4([192, 0, 2, 1], [10, 0, 0, 10], 40000, 80, 6)
        );
        let g = Flow {
            src: IpAddr::V6(Ipv6Addr::LOCALHOST),
            dst: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            ..f
        };
        let k6 = g.key().unwrap();
        assert_eq!(k6.family, 6);
        assert_eq!(
            hash_key(&k6),
            flow_hash_v6(Ipv6Addr::LOCALHOST.octets(), [0; 16], 40000, 80, 6)
        );
        let mixed = Flow {
            dst: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..f
        };
        assert_eq!(mixed.key(), None);
    }
}
