//! ICMP through `Forwarder::process` (docs/forwarding.md §6): echo replies to a VIP, errors
//! about a flow (fragmentation needed, packet too big) reaching the flow's backend, and the
//! errors that are rejected.

#[allow(unused_imports)]
use crate::common;

use std::net::Ipv4Addr;

use crate::common::*;
use stator_core::{
    Action, BackendSpec, Cause, Counter, DropReason, Encap, Insert, Proto, SnapshotBuilder, VipId,
};
use stator_testkit::expect::encapsulated;
use stator_testkit::{Ext, Packet, tcp_flags};

#[test]
fn echo_reply_v4_and_v6() {
    let snap = compile(&world());
    // IPv4 with options and a VLAN tag: the reply keeps both.
    let mut req = Packet::icmp(
        v4(CLIENT4),
        v4(VIP4),
        8,
        0,
        [0x12, 0x34, 0, 7],
        b"ping".to_vec(),
    );
    req.vlan = Some(42);
    req.ttl = 3;
    req.ipv4_options = vec![1, 1, 1, 1];
    req.padding = 4;
    let mut reply = Packet::icmp(
        v4(VIP4),
        v4(CLIENT4),
        0,
        0,
        [0x12, 0x34, 0, 7],
        b"ping".to_vec(),
    );
    reply.vlan = Some(42);
    reply.ttl = 64;
    reply.ipv4_options = vec![1, 1, 1, 1];
    reply.padding = 4;
    reply.src_mac = req.dst_mac;
    reply.dst_mac = req.src_mac;
    let mut fwd = forwarder();
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &req.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(out, reply.frame());
    assert_eq!(fwd.counters(0).get(Counter::IcmpEchoReply), 1);
    assert_eq!(fwd.counters(0).get(Counter::ActTx), 1);
    assert_eq!(fwd.counters(0).vips().count(), 0, "no VIP stats for echo");
    // An all-zero echo (identifier, sequence, no payload): the reply's data sums to +0 and only
    // 0xffff verifies (RFC 1624 eqn. 3 alone gives 0x0000; found by the core_process fuzz target)
    let req = Packet::icmp(v4(CLIENT4), v4(VIP4), 8, 0, [0; 4], Vec::new());
    let mut reply = Packet::icmp(v4(VIP4), v4(CLIENT4), 0, 0, [0; 4], Vec::new());
    reply.ttl = 64;
    reply.src_mac = req.dst_mac;
    reply.dst_mac = req.src_mac;
    let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &req.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(out, reply.frame(), "the all-zero echo reply");
    assert_eq!(
        out[14 + 20 + 2..14 + 20 + 4],
        [0xff, 0xff],
        "its ICMP checksum"
    );
    // IPv6.
    let mut req = Packet::icmp(v6(CLIENT6), v6(VIP6), 128, 0, [0, 1, 0, 2], vec![0xab; 33]);
    req.tos = 0x10;
    req.flow_label = 0xabcde;
    let mut reply = req.clone();
    reply.src = req.dst;
    reply.dst = req.src;
    reply.ttl = 64;
    reply.src_mac = req.dst_mac;
    reply.dst_mac = req.src_mac;
    reply.l4 = stator_testkit::L4::Icmp {
        ty: 129,
        code: 0,
        rest: [0, 1, 0, 2],
        body: vec![0xab; 33],
    };
    let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &req.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(out, reply.frame());
    // Without the node flag: passed, counted non_vip.
    let mut s = world();
    s.node.icmp_echo = false;
    let mut fwd = forwarder();
    let (v, out) = run(&mut fwd, &compile(&s), &fib_tx(), T0, &req.frame());
    assert_eq!((v.action, out), (Action::Pass, req.frame()));
    assert_eq!(fwd.counters(0).get(Counter::NonVip), 1);
    // ICMP header shorter than 8 bytes.
    let mut f = Packet::icmp(v4(CLIENT4), v4(VIP4), 8, 0, [0; 4], vec![]).frame();
    f.truncate(f.len() - 1);
    f[16..18].copy_from_slice(&27u16.to_be_bytes());
    let (v, _) = run(&mut forwarder(), &snap, &fib_tx(), T0, &f);
    assert_eq!(v.action, Action::Drop(DropReason::MalformedL4));
}

/// A backend's reply (VIP:80 → client) that did not fit, quoted in an ICMP error to the VIP.
fn too_big_v4(quoted_proto: u8) -> Packet {
    let reply = match quoted_proto {
        6 => Packet::tcp(v4(VIP4), 80, v4(CLIENT4), 40000, tcp_flags::ACK).with_payload(&[7; 100]),
        _ => Packet::udp(v4(VIP4), 5353, v4(CLIENT4), 40000),
    };
    let quoted = reply.ip_bytes()[..28].to_vec();
    Packet::icmp(
        v4(Ipv4Addr::new(198, 51, 100, 1)),
        v4(VIP4),
        3,
        4,
        [0, 0, 0x05, 0x78],
        quoted,
    )
}

#[test]
fn frag_needed_and_packet_too_big_reach_the_flows_backend() {
    // Three backends, so the choice means something.
    let snap = SnapshotBuilder::new(node())
        .vip(
            v4(VIP4),
            80,
            Proto::Tcp,
            13,
            (1..=3).map(|n| BackendSpec::new(be4(n))).collect(),
        )
        .vip(
            v6(VIP6),
            80,
            Proto::Tcp,
            13,
            (1..=3).map(|n| BackendSpec::new(be6(n))).collect(),
        )
        .build()
        .unwrap();
    let snap = compile(&snap);
    let mut fwd = forwarder();
    // The connection's own first packet picks and records the backend.
    let (first, _) = run(&mut fwd, &snap, &fib_tx(), T0, &ack4(40000).frame());
    let icmp = too_big_v4(6);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0 + 1, &icmp.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(v.real, first.real, "same backend as the connection");
    assert_eq!(v.flow, first.flow, "the quoted flow, reversed");
    assert_eq!(v.hash, first.hash);
    assert_eq!(v.selection.unwrap().cause, Cause::CtHit);
    let real = snap.real_addr(v.real.unwrap()).unwrap();
    let want = encapsulated(
        &outer_to(real, Encap::Gre, 0, true, first.hash.unwrap()),
        &icmp.ip_bytes(),
        0,
    );
    assert_eq!(out, want, "the whole ICMP packet is the inner packet");
    let c = fwd.counters(0);
    assert_eq!(c.get(Counter::IcmpErrorFwd), 1);
    assert_eq!(
        c.get(Counter::CtInsert),
        1,
        "only the connection's own insert"
    );
    assert_eq!(c.vip(VipId(0)).packets, 2);
    // Without an entry: Maglev decides, nothing is inserted.
    let mut fwd = forwarder();
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0, &icmp.frame());
    assert_eq!(v.selection.unwrap().cause, Cause::CtMiss);
    assert_eq!(v.selection.unwrap().insert, Insert::NotAttempted);
    assert_eq!(
        v.real, first.real,
        "Maglev agrees with the connection's choice"
    );
    assert!(fwd.conn_table(0).is_empty());
    // IPv6 packet too big.
    let reply = Packet::tcp(v6(VIP6), 80, v6(CLIENT6), 40000, tcp_flags::ACK);
    let ptb = Packet::icmp(
        v6(CLIENT6),
        v6(VIP6),
        2,
        0,
        [0, 0, 0x05, 0x00],
        reply.ip_bytes()[..48].to_vec(),
    );
    let mut fwd = forwarder();
    let own = Packet::tcp(v6(CLIENT6), 40000, v6(VIP6), 80, tcp_flags::ACK);
    let (first, _) = run(&mut fwd, &snap, &fib_tx(), T0, &own.frame());
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &ptb.frame());
    assert_eq!(
        (v.action, v.real, v.flow),
        (Action::Tx, first.real, first.flow)
    );
    let real = snap.real_addr(v.real.unwrap()).unwrap();
    let want = encapsulated(
        &outer_to(real, Encap::Gre, 0, true, first.hash.unwrap()),
        &ptb.ip_bytes(),
        0,
    );
    assert_eq!(out, want);
}

#[test]
fn icmp_error_rejections() {
    let snap = compile(&world());
    let cases: Vec<(&str, Vec<u8>, DropReason)> = vec![
        (
            "quoted UDP to no VIP",
            too_big_v4(17).frame(),
            DropReason::Icmp,
        ),
        (
            "quoted ICMP",
            {
                let q = Packet::icmp(v4(VIP4), v4(CLIENT4), 0, 0, [0; 4], vec![]).ip_bytes();
                Packet::icmp(v4(CLIENT4), v4(VIP4), 3, 4, [0; 4], q).frame()
            },
            DropReason::Icmp,
        ),
        (
            "quote of 27 bytes",
            {
                let mut p = too_big_v4(6);
                if let stator_testkit::L4::Icmp { body, .. } = &mut p.l4 {
                    body.truncate(27);
                }
                p.frame()
            },
            DropReason::MalformedL4,
        ),
        (
            "quoted IHL 4",
            {
                let mut p = too_big_v4(6);
                if let stator_testkit::L4::Icmp { body, .. } = &mut p.l4 {
                    body[0] = 0x44;
                }
                p.frame()
            },
            DropReason::MalformedL4,
        ),
        (
            "quoted IHL 6 leaves no ports",
            {
                let mut p = too_big_v4(6);
                if let stator_testkit::L4::Icmp { body, .. } = &mut p.l4 {
                    body[0] = 0x46;
                    body.truncate(31);
                }
                p.frame()
            },
            DropReason::MalformedL4,
        ),
        (
            "quoted IPv6 in IPv4",
            {
                let mut p = too_big_v4(6);
                if let stator_testkit::L4::Icmp { body, .. } = &mut p.l4 {
                    body[0] = 0x65;
                }
                p.frame()
            },
            DropReason::MalformedL4,
        ),
        (
            "PTB quoting 47 bytes",
            {
                let q = Packet::tcp(v6(VIP6), 80, v6(CLIENT6), 1, 0).ip_bytes()[..47].to_vec();
                Packet::icmp(v6(CLIENT6), v6(VIP6), 2, 0, [0; 4], q).frame()
            },
            DropReason::MalformedL4,
        ),
        (
            "PTB quoting an extension header",
            {
                let mut r = Packet::tcp(v6(VIP6), 80, v6(CLIENT6), 1, 0);
                r.ext = vec![Ext::DstOpts(0)];
                let q = r.ip_bytes()[..56].to_vec();
                Packet::icmp(v6(CLIENT6), v6(VIP6), 2, 0, [0; 4], q).frame()
            },
            DropReason::Icmp,
        ),
    ];
    for (name, frame, reason) in cases {
        let mut fwd = forwarder();
        let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &frame);
        assert_eq!(v.action, Action::Drop(reason), "{name}");
        assert_eq!(out, frame, "{name}");
        assert_eq!(fwd.counters(0).get(Counter::IcmpErrorFwd), 0, "{name}");
    }
}
