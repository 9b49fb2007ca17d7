//! The frames the forwarder must emit (docs/forwarding.md §5), assembled byte by byte and
//! independently of the C program, of stator-core and of stator-wire: the oracle of stator-core's
//! case tests and of stator-xdp's fixtures.

use std::net::IpAddr;

use crate::{inet_checksum, proto};

/// The tunnel of an expected frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel {
    /// GRE: 4 bytes, no key, protocol type of the inner packet.
    Gre,
    /// IPIP / IPv6-in-IPv6 / 4in6 / 6in4: no header.
    Ipip,
    /// GUE variant 1 (direct IP) in UDP to this destination port; source port from the hash.
    Gue {
        /// The UDP destination port.
        port: u16,
    },
    /// GUE variant 0 with a second chance (docs/forwarding.md §12.3): private data "SC", the
    /// previous backend's family, hop 0, its address.
    GueSc {
        /// The UDP destination port.
        port: u16,
        /// The previous backend.
        prev: IpAddr,
    },
}

/// Everything §5 needs besides the inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outer {
    /// Destination MAC (the next hop).
    pub dmac: [u8; 6],
    /// Source MAC (the egress interface).
    pub smac: [u8; 6],
    /// Outer source address.
    pub src: IpAddr,
    /// Outer destination address (the backend).
    pub dst: IpAddr,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// The tunnel.
    pub tunnel: Tunnel,
    /// The flow hash (IPv6 flow label, GUE source port).
    pub hash: u32,
    /// Outer TOS / traffic class; `None`: copied from the inner packet, as §5 says.
    pub tos: Option<u8>,
    /// Outer DF; `None`: the inner packet's (always set for an inner IPv6 packet), as §5 says.
    pub df: Option<bool>,
}

/// The encapsulated frame for `inner` (an IP packet) followed by `padding` zero bytes.
pub fn encapsulated(o: &Outer, inner: &[u8], padding: usize) -> Vec<u8> {
    let inner_v6 = inner[0] >> 4 == 6;
    let tos = o.tos.unwrap_or(if inner_v6 {
        (inner[0] << 4) | (inner[1] >> 4)
    } else {
        inner[1]
    });
    let df = o.df.unwrap_or(inner_v6 || inner[6] & 0x40 != 0);
    let ip_in_ip = if inner_v6 { 41 } else { 4 };
    let (e, outer_proto): (Vec<u8>, u8) = match o.tunnel {
        Tunnel::Gre => {
            let mut e = vec![0, 0];
            e.extend_from_slice(if inner_v6 {
                &[0x86, 0xdd]
            } else {
                &[0x08, 0x00]
            });
            (e, proto::GRE)
        }
        Tunnel::Ipip => (Vec::new(), ip_in_ip),
        Tunnel::Gue { port } => {
            let mut e = Vec::new();
            e.extend_from_slice(&(0xC000u16 | (o.hash & 0x3fff) as u16).to_be_bytes());
            e.extend_from_slice(&port.to_be_bytes());
            e.extend_from_slice(&((8 + 4 + inner.len()) as u16).to_be_bytes());
            e.extend_from_slice(&[0, 0]);
            e.extend_from_slice(&[0, ip_in_ip, 0, 0]);
            (e, proto::UDP)
        }
        Tunnel::GueSc { port, prev } => {
            let (family, addr) = match prev {
                IpAddr::V4(a) => (4u8, a.octets().to_vec()),
                IpAddr::V6(a) => (6u8, a.octets().to_vec()),
            };
            let private = [&[0x53, 0x43, family, 0][..], &addr].concat();
            let mut e = Vec::new();
            e.extend_from_slice(&(0xC000u16 | (o.hash & 0x3fff) as u16).to_be_bytes());
            e.extend_from_slice(&port.to_be_bytes());
            e.extend_from_slice(&((8 + 4 + private.len() + inner.len()) as u16).to_be_bytes());
            e.extend_from_slice(&[0, 0]);
            e.extend_from_slice(&[(private.len() / 4) as u8, ip_in_ip, 0, 0]);
            e.extend_from_slice(&private);
            (e, proto::UDP)
        }
    };
    let mut f = Vec::new();
    f.extend_from_slice(&o.dmac);
    f.extend_from_slice(&o.smac);
    match (o.src, o.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let mut h = vec![0x45, tos];
            h.extend_from_slice(&((20 + e.len() + inner.len()) as u16).to_be_bytes());
            h.extend_from_slice(&[0, 0]);
            h.extend_from_slice(if df { &[0x40, 0] } else { &[0, 0] });
            h.extend_from_slice(&[o.ttl, outer_proto, 0, 0]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            let c = inet_checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&h);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let word = (6u32 << 28) | (u32::from(tos) << 20) | (o.hash & 0xfffff);
            f.extend_from_slice(&word.to_be_bytes());
            f.extend_from_slice(&((e.len() + inner.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[outer_proto, o.ttl]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => panic!("testkit: outer source and destination families differ"),
    }
    f.extend_from_slice(&e);
    f.extend_from_slice(inner);
    f.extend(std::iter::repeat_n(0u8, padding));
    f
}
