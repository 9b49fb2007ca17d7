//! Fixtures shared by the integration tests: a small world (node, VIPs, backends, FIB), the
//! packets and flow hashes of its client, and the outer headers ([`outer_to`]) for
//! stator-testkit's oracle of the bytes the forwarder must emit (docs/forwarding.md §5).
#![allow(dead_code)] // each test binary uses a different part

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use stator_core::{
    Action, BackendSpec, CompiledSnapshot, Encap, Forwarder, ForwarderConfig, NextHop, NodeParams,
    Proto, Snapshot, SnapshotBuilder, StaticFib, VecPacketBuf, Verdict,
};
use stator_hash::{flow_hash_v4, flow_hash_v6};
use stator_testkit::expect::{Outer, Tunnel};
use stator_testkit::{Packet, tcp_flags};

pub const SRC4: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 9);
pub const SRC6: Ipv6Addr = Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 9);
pub const VIP4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
pub const CLIENT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
pub const IN_IF: u32 = 2;
pub const OUT_IF: u32 = 3;
pub const HOP_SMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
pub const HOP_DMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xbb];
pub const SEC: u64 = 1_000_000_000;
/// A time well after boot, so windows and timeouts are not at their edges.
pub const T0: u64 = 10_000 * SEC;

pub fn v4(a: Ipv4Addr) -> IpAddr {
    IpAddr::V4(a)
}

pub fn v6(a: Ipv6Addr) -> IpAddr {
    IpAddr::V6(a)
}

/// The n-th IPv4 backend, 10.1.0.n.
pub fn be4(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 1, 0, n))
}

/// The n-th IPv6 backend, fd00:1::n.
pub fn be6(n: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, n))
}

/// The tests' tracer key (every test node holds it).
pub const TRACE_KEY: [u8; 16] = *b"stator-tests-key";

pub fn node() -> NodeParams {
    NodeParams {
        src_v4: Some(SRC4),
        src_v6: Some(SRC6),
        trace_keys: stator_abi::TraceKeys::from_keys(&[TRACE_KEY]),
        ..NodeParams::default()
    }
}

/// `p` with a trace mark as its payload, naming `receiver:port` and trace `id`, sealed with
/// `key` for `p`'s flow (docs/forwarding.md §11.1), padded to 1,200 bytes as `stator trace
/// --send` pads it.
pub fn traced_with(
    p: Packet,
    receiver: std::net::Ipv4Addr,
    port: u16,
    id: u32,
    key: &[u8; 16],
) -> Packet {
    let (sport, dport, proto) = match &p.l4 {
        stator_testkit::L4::Udp { sport, dport, .. } => (*sport, *dport, 17),
        stator_testkit::L4::Tcp { sport, dport, .. } => (*sport, *dport, 6),
        _ => panic!("a trace mark rides on TCP or UDP"),
    };
    let mut m = stator_core::TraceMark {
        magic: stator_abi::STATOR_TRACE_MAGIC,
        trace_id: id,
        receiver_family: 4,
        receiver_port: port.to_be_bytes(),
        ..Default::default()
    };
    m.receiver[..4].copy_from_slice(&receiver.octets());
    m.mac = stator_core::trace_seal(&m, key, p.src, p.dst, sport, dport, proto);
    let mut payload = m.to_bytes().to_vec();
    payload.resize(1200, 0);
    p.with_payload(&payload)
}

/// [`traced_with`] the tests' key.
pub fn traced(p: Packet, receiver: std::net::Ipv4Addr, port: u16, id: u32) -> Packet {
    traced_with(p, receiver, port, id, &TRACE_KEY)
}

pub fn hop(ifindex: u32) -> NextHop {
    NextHop {
        ifindex,
        src_mac: HOP_SMAC,
        dst_mac: HOP_DMAC,
        mtu: 1500,
    }
}

/// Every backend reachable back out of the ingress interface (TX).
pub fn fib_tx() -> StaticFib {
    StaticFib::new()
        .default_route(be4(0), Ok(hop(IN_IF)))
        .default_route(be6(0), Ok(hop(IN_IF)))
}

/// One backend per encapsulation and family, on the four VIPs (v4/v6 × tcp/udp, port 80 / 53),
/// plus port-0 VIPs on 10.0.0.11 and 2001:db8::11. Table size 13.
pub fn world() -> Snapshot {
    let one = |addr: IpAddr, encap| vec![BackendSpec::new(addr).encap(encap)];
    SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 13, one(be4(1), Encap::Gre)) // vip 0, real 0
        .vip(v4(VIP4), 53, Proto::Udp, 13, one(be4(2), Encap::Gre)) // vip 1, real 1
        .vip(v6(VIP6), 80, Proto::Tcp, 13, one(be6(1), Encap::Gre)) // vip 2, real 2
        .vip(v6(VIP6), 53, Proto::Udp, 13, one(be6(2), Encap::Gre)) // vip 3, real 3
        .build()
        .expect("world builds")
}

pub fn compile(s: &Snapshot) -> CompiledSnapshot {
    CompiledSnapshot::new(&s.clone().validated().expect("snapshot is valid"))
}

pub fn forwarder() -> Forwarder {
    Forwarder::new(ForwarderConfig {
        cpus: 2,
        ct_capacity: 1024,
        ..ForwarderConfig::default()
    })
}

/// Runs one frame with XDP headroom; returns the verdict and the frame after.
pub fn run(
    fwd: &mut Forwarder,
    snap: &CompiledSnapshot,
    fib: &StaticFib,
    now: u64,
    frame: &[u8],
) -> (Verdict, Vec<u8>) {
    let mut buf = VecPacketBuf::with_xdp_headroom(frame);
    let v = fwd.process(snap, now, 0, IN_IF, fib, &mut buf);
    (v, buf.to_vec())
}

/// The outer headers (stator-testkit's §5 oracle, shared with stator-xdp's fixtures) a packet
/// to `real` gets under the fixtures' node parameters: from the node's source address of
/// `real`'s family, TTL 64, GUE to port 6080, through the next hop of [`hop`].
pub fn outer_to(real: IpAddr, encap: Encap, tos: u8, df: bool, hash: u32) -> Outer {
    Outer {
        dmac: HOP_DMAC,
        smac: HOP_SMAC,
        src: match real {
            IpAddr::V4(_) => v4(SRC4),
            IpAddr::V6(_) => v6(SRC6),
        },
        dst: real,
        ttl: 64,
        tunnel: match encap {
            Encap::Gre => Tunnel::Gre,
            Encap::Ipip => Tunnel::Ipip,
            Encap::Gue => Tunnel::Gue { port: 6080 },
        },
        hash,
        tos: Some(tos),
        df: Some(df),
    }
}

/// Asserts the action and the counters' basic bookkeeping.
pub fn assert_action(v: &Verdict, action: Action) {
    assert_eq!(v.action, action, "verdict {v:?}");
}

/// A TCP SYN from the client to VIP4:80.
pub fn syn4(sport: u16) -> Packet {
    Packet::tcp(v4(CLIENT4), sport, v4(VIP4), 80, tcp_flags::SYN)
}

/// A TCP ACK from the client to VIP4:80.
pub fn ack4(sport: u16) -> Packet {
    Packet::tcp(v4(CLIENT4), sport, v4(VIP4), 80, tcp_flags::ACK)
}

/// The flow hash of client → VIP4.
pub fn hash4(sport: u16, dport: u16, proto: u8) -> u32 {
    flow_hash_v4(CLIENT4.octets(), VIP4.octets(), sport, dport, proto)
}

/// The flow hash of client → VIP6.
pub fn hash6(sport: u16, dport: u16, proto: u8) -> u32 {
    flow_hash_v6(CLIENT6.octets(), VIP6.octets(), sport, dport, proto)
}
