//! Expected forwarder outputs, assembled byte by byte from the contract in
//! docs/forwarding.md §5 and §6 — independently of the C program and of stator-wire: the frame
//! from stator-testkit's oracle (`stator_testkit::expect`), the flow hash from stator-hash (the
//! reference the C header is tested against).

use std::net::IpAddr;

use stator_abi::Encap;
use stator_core::{RealId, Snapshot, VipKey};
use stator_testkit::expect::Tunnel;

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

/// The tunnel of a backend with `encap`, GUE to the node's `gue_port`.
pub fn tunnel(encap: Encap, gue_port: u16) -> Tunnel {
    match encap {
        Encap::Gre => Tunnel::Gre,
        Encap::Ipip => Tunnel::Ipip,
        Encap::Gue => Tunnel::Gue { port: gue_port },
    }
}
