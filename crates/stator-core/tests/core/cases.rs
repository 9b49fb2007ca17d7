//! A table of frames through `Forwarder::process`, one or more per case class of
//! docs/forwarding.md, with the expected action, counters and output bytes: frames that are
//! forwarded (every encapsulation and family, VLANs, redirects, FIB failures, counters). Frames
//! passed or dropped before selection are in `core/cases_drops.rs`, ICMP in `core/cases_icmp.rs`. Expected
//! frames are assembled independently of the core: stator-testkit for inner packets,
//! `stator_testkit::expect::encapsulated` (written from §5) or literal bytes for outer headers.

#[allow(unused_imports)]
use crate::common;

use std::net::Ipv4Addr;

use crate::common::*;
use stator_core::{
    Action, BackendSpec, Cause, Counter, DropReason, Encap, FibError, Insert, PacketBuf, Proto,
    RealId, SnapshotBuilder, StaticFib, VecPacketBuf, VipFlags, VipId, VipKey,
};
use stator_testkit::expect::encapsulated;
use stator_testkit::{Packet, arp_frame, tcp_flags};

/// The one fully literal golden: a TCP SYN to 10.0.0.10:80, GRE to 10.1.0.1 from 10.9.9.9.
/// Outer checksum by hand: 4500+0040+0000+4000+402f+0000+0a09+0909+0a01+0001 = e283 → 1d7c.
#[test]
fn golden_gre_v4_syn() {
    let snap = compile(&world());
    let mut fwd = forwarder();
    let p = syn4(40000);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!((v.vip, v.real), (Some(VipId(0)), Some(RealId(0))));
    let mut want = vec![
        0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa, 0x08, 0x00, // Ethernet
        0x45, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x00, 0x40, 0x2f, 0x1d, 0x7c, // IPv4
        10, 9, 9, 9, 10, 1, 0, 1, //
        0x00, 0x00, 0x08, 0x00, // GRE
    ];
    want.extend_from_slice(&p.ip_bytes());
    assert_eq!(out, want);
    let hash = hash4(40000, 80, 6);
    assert_eq!(v.hash, Some(hash));
    let sel = v.selection.unwrap();
    assert_eq!((sel.cause, sel.insert), (Cause::Syn, Insert::Inserted));
    assert_eq!(sel.slot, Some(hash % 13));
}

#[test]
fn tcp_and_udp_over_v4_and_v6() {
    let snap = compile(&world());
    let cases = [
        (syn4(1000), be4(1), hash4(1000, 80, 6), 0),
        (
            Packet::udp(v4(CLIENT4), 1001, v4(VIP4), 53),
            be4(2),
            hash4(1001, 53, 17),
            1,
        ),
        (
            Packet::tcp(v6(CLIENT6), 1002, v6(VIP6), 80, tcp_flags::ACK),
            be6(1),
            hash6(1002, 80, 6),
            2,
        ),
        (
            Packet::udp(v6(CLIENT6), 1003, v6(VIP6), 53),
            be6(2),
            hash6(1003, 53, 17),
            3,
        ),
    ];
    for (p, real, hash, id) in cases {
        let mut fwd = forwarder();
        let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
        assert_eq!(v.action, Action::Tx, "{p:?}");
        assert_eq!(v.real, Some(RealId(id)));
        assert_eq!(v.hash, Some(hash));
        let inner = p.ip_bytes();
        let df = p.dst.is_ipv6() || p.df;
        let want = encapsulated(&outer_to(real, Encap::Gre, 0, df, hash), &inner, 0);
        assert_eq!(out, want, "{p:?}");
        let c = fwd.counters(0);
        assert_eq!(c.vip(VipId(id)).bytes, p.frame().len() as u64);
        assert_eq!(c.real(RealId(id)).packets, 1);
    }
}

/// Every encapsulation, to backends of both families, from VIPs of both families.
#[test]
fn every_encapsulation_and_family_mix() {
    for encap in [Encap::Gre, Encap::Ipip, Encap::Gue] {
        for real in [be4(7), be6(7)] {
            for vip in [v4(VIP4), v6(VIP6)] {
                let snap = SnapshotBuilder::new(node())
                    .vip(
                        vip,
                        443,
                        Proto::Tcp,
                        7,
                        vec![BackendSpec::new(real).encap(encap)],
                    )
                    .build()
                    .unwrap();
                let snap = compile(&snap);
                let client = if vip.is_ipv4() {
                    v4(CLIENT4)
                } else {
                    v6(CLIENT6)
                };
                let mut p =
                    Packet::tcp(client, 5555, vip, 443, tcp_flags::ACK).with_payload(b"hello");
                p.tos = 0xb9; // DSCP 46 + ECN 01
                p.flow_label = 0x12345;
                let hash = if vip.is_ipv4() {
                    hash4(5555, 443, 6)
                } else {
                    hash6(5555, 443, 6)
                };
                let mut fwd = forwarder();
                let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
                assert_eq!(v.action, Action::Tx, "{encap:?} {real} {vip}");
                let want = encapsulated(&outer_to(real, encap, 0xb9, true, hash), &p.ip_bytes(), 0);
                assert_eq!(out, want, "{encap:?} {real} {vip}");
            }
        }
    }
}

/// DF is copied from an IPv4 inner packet (and always set for IPv6 inner), TOS is copied, and
/// IPv4 options stay in the untouched inner packet.
#[test]
fn ipv4_options_df_and_tos() {
    let snap = compile(&world());
    let mut p = ack4(7);
    p.df = false;
    p.tos = 0x28;
    p.ipv4_options = vec![0x07, 0x07, 0x04, 0, 0, 0, 0]; // record route, 7 bytes
    let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Tx);
    let want = encapsulated(
        &outer_to(be4(1), Encap::Gre, 0x28, false, hash4(7, 80, 6)),
        &p.ip_bytes(),
        0,
    );
    assert_eq!(out, want);
    assert_eq!(out[14 + 6], 0, "no DF in the outer header");
}

/// A VLAN tag is consumed (the new Ethernet header has none); padding after the IP packet stays.
#[test]
fn vlan_consumed_and_padding_kept() {
    let snap = compile(&world());
    let mut p = Packet::udp(v4(CLIENT4), 9, v4(VIP4), 53).with_payload(b"");
    p.vlan = Some(0x2064);
    p.padding = 10;
    let frame = p.frame();
    assert_eq!(frame.len(), 18 + 28 + 10);
    let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &frame);
    assert_eq!(v.action, Action::Tx);
    let want = encapsulated(
        &outer_to(be4(2), Encap::Gre, 0, true, hash4(9, 53, 17)),
        &p.ip_bytes(),
        10,
    );
    assert_eq!(out, want);
    // Per-VIP bytes count the frame as received, tag and padding included.
    let mut fwd = forwarder();
    run(&mut fwd, &snap, &fib_tx(), T0, &frame);
    assert_eq!(fwd.counters(0).vip(VipId(1)).bytes, 56);
    assert_eq!(fwd.counters(0).real(RealId(1)).bytes, 56);
}

#[test]
fn port_zero_vip_matches_any_port_after_exact() {
    let snap = SnapshotBuilder::new(node())
        .vip(v4(VIP4), 0, Proto::Tcp, 7, vec![BackendSpec::new(be4(1))]) // vip 0
        .vip(v4(VIP4), 22, Proto::Tcp, 7, vec![BackendSpec::new(be4(2))]) // vip 1
        .vip(v4(VIP4), 0, Proto::Udp, 7, vec![BackendSpec::new(be4(3))]) // vip 2
        .build()
        .unwrap();
    let snap = compile(&snap);
    for (dport, vip, real) in [(22, 1, 1), (80, 0, 0), (0, 0, 0), (65535, 0, 0)] {
        let p = Packet::tcp(v4(CLIENT4), 1, v4(VIP4), dport, tcp_flags::SYN);
        let (v, _) = run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame());
        assert_eq!(
            (v.vip, v.real),
            (Some(VipId(vip)), Some(RealId(real))),
            "port {dport}"
        );
    }
    let p = Packet::udp(v4(CLIENT4), 1, v4(VIP4), 4789);
    let (v, _) = run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.vip, Some(VipId(2)));
    let t = forwarder().explain(
        &snap,
        T0,
        0,
        &stator_core::Flow {
            src: v4(CLIENT4),
            dst: v4(VIP4),
            sport: 1,
            dport: 80,
            proto: 6,
        },
        true,
    );
    assert!(t.vip.unwrap().wildcard);
}

#[test]
fn tx_redirect_and_tx_port() {
    let snap = compile(&world());
    let frame = ack4(3).frame();
    let out_fib = StaticFib::new().default_route(be4(0), Ok(hop(OUT_IF)));
    // Egress elsewhere, not in the devmap: dropped after the rewrite, real still counted.
    let mut fwd = forwarder();
    let (v, out) = run(&mut fwd, &snap, &out_fib, T0, &frame);
    assert_eq!(v.action, Action::Drop(DropReason::TxPort));
    assert_ne!(out, frame, "the tx_port drop happens after the rewrite");
    assert_eq!(fwd.counters(0).real(RealId(0)).packets, 1);
    assert_eq!(fwd.counters(0).drops(DropReason::TxPort), 1);
    // In the devmap: redirect.
    let (v, out2) = run(
        &mut forwarder(),
        &snap,
        &out_fib.clone().tx_port(OUT_IF),
        T0,
        &frame,
    );
    assert_eq!(v.action, Action::Redirect { ifindex: OUT_IF });
    assert_eq!(out, out2);
}

#[test]
fn fib_failures_and_headroom_leave_the_frame_alone() {
    let snap = compile(&world());
    let frame = ack4(3).frame(); // 54 bytes; outer IPv4 length 20 + 4 + 40 = 64
    let mut small = hop(IN_IF);
    small.mtu = 63;
    let mut exact = hop(IN_IF);
    exact.mtu = 64;
    let cases = [
        (StaticFib::new(), Some(DropReason::Fib)),
        (
            StaticFib::new().default_route(be4(0), Err(FibError::NoNeigh)),
            Some(DropReason::NoNeigh),
        ),
        (
            StaticFib::new().default_route(be4(0), Err(FibError::FragNeeded)),
            Some(DropReason::Mtu),
        ),
        (
            StaticFib::new().default_route(be4(0), Err(FibError::ForwardingDisabled)),
            Some(DropReason::Fib),
        ),
        (
            StaticFib::new().default_route(be4(0), Ok(small)),
            Some(DropReason::Mtu),
        ),
        (StaticFib::new().default_route(be4(0), Ok(exact)), None),
    ];
    for (fib, drop) in cases {
        let mut fwd = forwarder();
        let (v, out) = run(&mut fwd, &snap, &fib, T0, &frame);
        match drop {
            Some(r) => {
                assert_eq!(v.action, Action::Drop(r));
                assert_eq!(out, frame);
                assert_eq!(fwd.counters(0).real(RealId(0)).packets, 0);
                assert_eq!(fwd.counters(0).vip(VipId(0)).packets, 1);
                assert_eq!(v.real, Some(RealId(0)), "the choice is still reported");
            }
            None => assert_eq!(v.action, Action::Tx),
        }
    }
    // 38 bytes of headroom are needed (14 + 20 + 4 − 14 + … = 24 + 14); 23 are not enough.
    let mut fwd = forwarder();
    let mut buf = VecPacketBuf::new(&frame, 23);
    let v = fwd.process(&snap, T0, 0, IN_IF, &fib_tx(), &mut buf);
    assert_eq!(v.action, Action::Drop(DropReason::Adjust));
    assert_eq!(buf.to_vec(), frame);
    let mut buf = VecPacketBuf::new(&frame, 24);
    let v = fwd.process(&snap, T0, 0, IN_IF, &fib_tx(), &mut buf);
    assert_eq!(v.action, Action::Tx);
    assert_eq!(buf.headroom(), 0);
}

#[test]
fn no_ct_vip_never_touches_the_table() {
    let snap = SnapshotBuilder::new(node())
        .vip_with_flags(
            VipKey {
                addr: v4(VIP4),
                port: 80,
                proto: Proto::Tcp,
            },
            VipFlags {
                no_conntrack: true,
                ..VipFlags::default()
            },
            13,
            (1..=3).map(|n| BackendSpec::new(be4(n))).collect(),
        )
        .build()
        .unwrap();
    let snap = compile(&snap);
    let mut fwd = forwarder();
    for (i, p) in [syn4(1), ack4(1), ack4(2)].iter().enumerate() {
        let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0 + i as u64, &p.frame());
        assert_eq!(v.action, Action::Tx);
        let sel = v.selection.unwrap();
        assert_eq!((sel.cause, sel.insert), (Cause::NoCt, Insert::NotAttempted));
        assert_eq!(sel.slot, Some(v.hash.unwrap() % 13));
    }
    assert!(fwd.conn_table(0).is_empty());
    let c = fwd.counters(0);
    for k in [
        Counter::CtHit,
        Counter::CtMiss,
        Counter::CtInsert,
        Counter::CtReselect,
    ] {
        assert_eq!(c.get(k), 0);
    }
}

#[test]
fn counters_add_up_over_a_mixed_bag() {
    let snap = compile(&world());
    let mut fwd = forwarder();
    let frames = [
        arp_frame(),
        syn4(1).frame(),
        ack4(1).frame(),
        Packet::udp(v6(CLIENT6), 2, v6(VIP6), 53).frame(),
        Packet::tcp(v4(CLIENT4), 1, v4(Ipv4Addr::new(1, 2, 3, 4)), 80, 0).frame(),
        Packet::icmp(v4(CLIENT4), v4(VIP4), 8, 0, [0; 4], vec![]).frame(),
        vec![0; 20],
        {
            let mut p = ack4(1);
            p.mf = true;
            p.frame()
        },
    ];
    let mut bytes_vip0 = 0;
    for (i, f) in frames.iter().enumerate() {
        let v = fwd.process(
            &snap,
            T0,
            i % 2,
            IN_IF,
            &fib_tx(),
            &mut VecPacketBuf::with_xdp_headroom(f),
        );
        if v.vip == Some(VipId(0)) {
            bytes_vip0 += f.len() as u64;
        }
    }
    let t = fwd.totals();
    assert_eq!(t.packets(), frames.len() as u64);
    assert_eq!(t.get(Counter::ActPass), 3);
    assert_eq!(t.get(Counter::ActTx), 4);
    assert_eq!(t.get(Counter::ActDrop), 1);
    assert_eq!(t.drops(DropReason::Fragment), 1);
    assert_eq!(
        t.drops(DropReason::MalformedL3),
        0,
        "20 zero bytes are not IP"
    );
    assert_eq!(t.get(Counter::NonIp), 2);
    assert_eq!(t.get(Counter::NonVip), 1);
    assert_eq!(t.vip(VipId(0)).bytes, bytes_vip0);
    assert_eq!(
        t.vip(VipId(0)).packets,
        2,
        "the fragment is not matched to a VIP"
    );
    assert_eq!(t.real(RealId(0)).packets, 2);
    assert_eq!(t.real(RealId(3)).packets, 1);
    assert_eq!(
        fwd.counters(0).packets() + fwd.counters(1).packets(),
        frames.len() as u64
    );
}
