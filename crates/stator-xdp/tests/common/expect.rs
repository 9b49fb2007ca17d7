//! Expected forwarder outputs, assembled byte by byte from the contract in
//! docs/forwarding.md §5 and §6 — independently of the C program and of stator-wire. Checksums
//! come from stator-testkit's RFC 1071 implementation; the flow hash from stator-hash (the
//! reference the C header is tested against).

use std::net::IpAddr;

use stator_abi::Encap;
use stator_core::{RealId, Snapshot, VipKey};
use stator_testkit::inet_checksum;

/// The flow hash of a 5-tuple (addresses of one family).
pub fn flow_hash(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, proto: u8) -> u32 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            stator_hash::flow_hash_v4(s.octets(), d.octets(), sport, dport, proto)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            stator_hash::flow_hash_v6(s.octets(), d.octets(), sport, dport, proto)
        }
        _ => panic!("mixed families"),
    }
}

/// Maglev(vip): the real in slot `hash % M` of the snapshot's table.
pub fn maglev(snap: &Snapshot, vip: &VipKey, hash: u32) -> RealId {
    let table = &snap.vips[vip].table;
    RealId(table[(hash % table.len() as u32) as usize])
}

/// Everything §5 needs besides the inner packet.
#[derive(Debug, Clone, Copy)]
pub struct Outer {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    pub encap: Encap,
    pub hash: u32,
    pub gue_port: u16,
}

/// The encapsulated frame for `inner` (an IP packet) followed by `padding` zero bytes.
pub fn encap(o: &Outer, inner: &[u8], padding: usize) -> Vec<u8> {
    let inner_v6 = inner[0] >> 4 == 6;
    let tos = if inner_v6 {
        (inner[0] << 4) | (inner[1] >> 4)
    } else {
        inner[1]
    };
    let df = inner_v6 || inner[6] & 0x40 != 0;
    let (e, proto): (Vec<u8>, u8) = match o.encap {
        Encap::Gre => {
            let mut e = vec![0, 0];
            e.extend_from_slice(if inner_v6 {
                &[0x86, 0xdd]
            } else {
                &[0x08, 0x00]
            });
            (e, 47)
        }
        Encap::Ipip => (Vec::new(), if inner_v6 { 41 } else { 4 }),
        Encap::Gue => {
            let mut e = Vec::new();
            e.extend_from_slice(&(0xC000u16 | (o.hash & 0x3fff) as u16).to_be_bytes());
            e.extend_from_slice(&o.gue_port.to_be_bytes());
            e.extend_from_slice(&((8 + 4 + inner.len()) as u16).to_be_bytes());
            e.extend_from_slice(&[0, 0]);
            e.extend_from_slice(&[0, if inner_v6 { 41 } else { 4 }, 0, 0]);
            (e, 17)
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
            h.extend_from_slice(&[o.ttl, proto, 0, 0]);
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
            f.extend_from_slice(&[proto, o.ttl]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => panic!("outer source and destination families differ"),
    }
    f.extend_from_slice(&e);
    f.extend_from_slice(inner);
    f.extend(std::iter::repeat_n(0u8, padding));
    f
}
