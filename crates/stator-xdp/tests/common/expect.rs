//! Expected forwarder outputs, assembled byte by byte from the contract in
//! docs/forwarding.md §5 and §6 — independently of the C program and of stator-wire: the frame
//! from stator-testkit's oracle (`stator_testkit::expect`), the flow hash from stator-hash (the
//! reference the C header is tested against).

use std::net::IpAddr;

use stator_abi::Encap;
use stator_core::{RealId, Snapshot, VipKey};
use stator_testkit::expect::{self, Tunnel};

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

/// The encapsulated frame for `inner` (an IP packet) followed by `padding` zero bytes: TOS and
/// DF from the inner packet (stator-testkit's oracle, shared with stator-core's tests).
pub fn encap(o: &Outer, inner: &[u8], padding: usize) -> Vec<u8> {
    let tunnel = match o.encap {
        Encap::Gre => Tunnel::Gre,
        Encap::Ipip => Tunnel::Ipip,
        Encap::Gue => Tunnel::Gue { port: o.gue_port },
    };
    let outer = expect::Outer {
        dmac: o.dmac,
        smac: o.smac,
        src: o.src,
        dst: o.dst,
        ttl: o.ttl,
        tunnel,
        hash: o.hash,
        tos: None,
        df: None,
    };
    expect::encapsulated(&outer, inner, padding)
}
