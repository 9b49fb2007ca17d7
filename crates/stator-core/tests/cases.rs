//! A table of frames through `Forwarder::process`, one or more per case class of
//! docs/forwarding.md, with the expected action, counters and output bytes. Expected frames are
//! assembled independently of the core: stator-testkit for inner packets, `common::expected_frame`
//! (written from §5) or literal bytes for outer headers.

mod common;

use std::net::Ipv4Addr;

use common::*;
use stator_core::{
    Action, BackendSpec, Cause, CompiledSnapshot, Counter, DropReason, Encap, FibError, Insert,
    PacketBuf, Proto, RealId, SnapshotBuilder, StaticFib, VecPacketBuf, VipFlags, VipId, VipKey,
};
use stator_hash::{flow_hash_v4, flow_hash_v6};
use stator_testkit::{Ext, Packet, arp_frame, tcp_flags};

fn syn4(sport: u16) -> Packet {
    Packet::tcp(v4(CLIENT4), sport, v4(VIP4), 80, tcp_flags::SYN)
}

fn ack4(sport: u16) -> Packet {
    Packet::tcp(v4(CLIENT4), sport, v4(VIP4), 80, tcp_flags::ACK)
}

fn hash4(sport: u16, dport: u16, proto: u8) -> u32 {
    flow_hash_v4(CLIENT4.octets(), VIP4.octets(), sport, dport, proto)
}

fn hash6(sport: u16, dport: u16, proto: u8) -> u32 {
    flow_hash_v6(CLIENT6.octets(), VIP6.octets(), sport, dport, proto)
}

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

/// Frames that must leave unmodified, with their action and counter.
#[test]
fn pass_and_early_drop_table() {
    let snap = compile(&world());
    let other = v4(Ipv4Addr::new(10, 0, 0, 99));
    let mut cases: Vec<(&str, Vec<u8>, Action, Counter)> = vec![
        ("empty", vec![], Action::Pass, Counter::NonIp),
        ("13 bytes", vec![0; 13], Action::Pass, Counter::NonIp),
        ("arp", arp_frame(), Action::Pass, Counter::NonIp),
        (
            "non-VIP v4",
            Packet::tcp(v4(CLIENT4), 1, other, 80, 0).frame(),
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "non-VIP v6",
            Packet::udp(v6(CLIENT6), 1, be6(9), 53).frame(),
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "VIP address, port without VIP",
            Packet::tcp(v4(CLIENT4), 1, v4(VIP4), 81, 0).frame(),
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "VIP address, UDP port of a TCP VIP",
            Packet::udp(v4(CLIENT4), 1, v4(VIP4), 80).frame(),
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "GRE to a VIP address",
            {
                let mut p = ack4(1);
                p.l4 = stator_testkit::L4::Raw {
                    proto: 47,
                    bytes: vec![0; 8],
                };
                p.frame()
            },
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "ICMPv6 number in IPv4",
            {
                let mut p = ack4(1);
                p.l4 = stator_testkit::L4::Raw {
                    proto: 58,
                    bytes: vec![128, 0, 0, 0, 0, 0, 0, 0],
                };
                p.frame()
            },
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "neighbour solicitation to a VIP",
            Packet::icmp(v6(CLIENT6), v6(VIP6), 135, 0, [0; 4], vec![0; 16]).frame(),
            Action::Pass,
            Counter::NonVip,
        ),
        (
            "QinQ is not IP",
            {
                let mut f = ack4(1).frame();
                f.splice(12..12, [0x88, 0xa8, 0, 5]);
                f
            },
            Action::Pass,
            Counter::NonIp,
        ),
        (
            "two 802.1Q tags are not IP",
            {
                let mut p = ack4(1);
                p.vlan = Some(5);
                let mut f = p.frame();
                f.splice(12..12, [0x81, 0x00, 0, 6]);
                f
            },
            Action::Pass,
            Counter::NonIp,
        ),
        (
            "tagged, 17 bytes",
            vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0, 0, 1, 0x08],
            Action::Pass,
            Counter::NonIp,
        ),
        (
            "ICMP redirect to a VIP",
            Packet::icmp(v4(CLIENT4), v4(VIP4), 5, 1, [0; 4], vec![0; 28]).frame(),
            Action::Drop(DropReason::Icmp),
            Counter::ActDrop,
        ),
        (
            "ICMP port unreachable (not frag-needed)",
            Packet::icmp(v4(CLIENT4), v4(VIP4), 3, 3, [0; 4], vec![0; 28]).frame(),
            Action::Drop(DropReason::Icmp),
            Counter::ActDrop,
        ),
    ];
    // A malformed header to a non-VIP address is the kernel's business.
    let mut f = Packet::tcp(v4(CLIENT4), 1, other, 80, 0).frame();
    f[14] = 0x44;
    cases.push(("bad IHL, not a VIP", f, Action::Pass, Counter::NonVip));
    for (name, frame, action, counter) in cases {
        let mut fwd = forwarder();
        let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &frame);
        assert_eq!(v.action, action, "{name}");
        assert_eq!(out, frame, "{name}: frame must be untouched");
        let c = fwd.counters(0);
        assert_eq!(c.get(counter), 1, "{name}: counter {counter:?}");
        assert_eq!(c.packets(), 1, "{name}: exactly one action");
        assert_eq!(c.get(action.counter()), 1, "{name}");
        if let Action::Drop(r) = action {
            assert_eq!(c.drops(r), 1, "{name}");
        }
    }
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
        let want = expected_frame(&outer_to(real, Encap::Gre, 0, df, hash), &inner, 0);
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
                let want =
                    expected_frame(&outer_to(real, encap, 0xb9, true, hash), &p.ip_bytes(), 0);
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
    let want = expected_frame(
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
    let want = expected_frame(
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
fn configuration_drops() {
    // no_backend: an empty table, and an empty slot.
    let mut s = SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 7, vec![])
        .build()
        .unwrap();
    let snap = compile(&s);
    let (v, _) = run(&mut forwarder(), &snap, &fib_tx(), T0, &syn4(1).frame());
    assert_eq!(v.action, Action::Drop(DropReason::NoBackend));
    assert_eq!(v.selection.unwrap().slot, None);
    let key = VipKey {
        addr: v4(VIP4),
        port: 80,
        proto: Proto::Tcp,
    };
    s.vips.get_mut(&key).unwrap().table = vec![u32::MAX; 7].into();
    let mut fwd = forwarder();
    let (v, _) = run(&mut fwd, &compile(&s), &fib_tx(), T0, &syn4(1).frame());
    assert_eq!(v.action, Action::Drop(DropReason::NoBackend));
    assert_eq!(v.selection.unwrap().slot, Some(hash4(1, 80, 6) % 7));
    assert_eq!(
        fwd.counters(0).get(Counter::CtMiss),
        1,
        "counted before Maglev"
    );
    assert_eq!(fwd.counters(0).get(Counter::CtInsert), 0);
    // bad_config: a slot naming a real that does not exist.
    s.vips.get_mut(&key).unwrap().table = vec![42; 7].into();
    let lenient = CompiledSnapshot::new_lenient(&s).unwrap();
    let (v, _) = run(&mut forwarder(), &lenient, &fib_tx(), T0, &syn4(1).frame());
    assert_eq!(v.action, Action::Drop(DropReason::BadConfig));
    // no_source: an IPv6 backend on a node without an IPv6 address.
    let mut s = SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 7, vec![BackendSpec::new(be6(1))])
        .build()
        .unwrap();
    s.node.src_v6 = None;
    assert!(CompiledSnapshot::new(&s).is_err());
    let lenient = CompiledSnapshot::new_lenient(&s).unwrap();
    let mut fwd = forwarder();
    let frame = syn4(1).frame();
    let (v, out) = run(&mut fwd, &lenient, &fib_tx(), T0, &frame);
    assert_eq!(v.action, Action::Drop(DropReason::NoSource));
    assert_eq!(out, frame);
    assert_eq!(
        fwd.counters(0).get(Counter::CtInsert),
        1,
        "inserted before §5"
    );
}

#[test]
fn bad_ihl_and_lengths() {
    let snap = compile(&world());
    let base = ack4(1).frame();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for ihl in [0u8, 1, 4, 11, 15] {
        let mut f = base.clone();
        f[14] = 0x40 | ihl;
        cases.push((format!("IHL {ihl}"), f));
    }
    // IHL 6 fits the 40-byte packet but leaves 16 bytes for TCP: that is layer 4's problem.
    let mut f = base.clone();
    f[14] = 0x46;
    let (v, _) = run(&mut forwarder(), &snap, &fib_tx(), T0, &f);
    assert_eq!(v.action, Action::Drop(DropReason::MalformedL4));
    let mut f = base.clone();
    f[14] = 0x65;
    cases.push(("version 6 in an IPv4 ethertype".into(), f));
    let mut f = base.clone();
    f[16..18].copy_from_slice(&19u16.to_be_bytes());
    cases.push(("total length below IHL".into(), f));
    let mut f = base.clone();
    f[16..18].copy_from_slice(&41u16.to_be_bytes());
    cases.push(("total length beyond the frame".into(), f));
    let mut f6 = Packet::tcp(v6(CLIENT6), 1, v6(VIP6), 80, 0).frame();
    f6[18..20].copy_from_slice(&0u16.to_be_bytes());
    cases.push(("IPv6 payload length 0".into(), f6.clone()));
    f6[18..20].copy_from_slice(&21u16.to_be_bytes());
    cases.push(("IPv6 payload beyond the frame".into(), f6.clone()));
    f6[18..20].copy_from_slice(&20u16.to_be_bytes());
    f6[14] = 0x45;
    cases.push(("version 4 in an IPv6 ethertype".into(), f6));
    for (name, f) in cases {
        let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &f);
        assert_eq!(v.action, Action::Drop(DropReason::MalformedL3), "{name}");
        assert_eq!(out, f, "{name}");
    }
}

/// Every frame cut at every length; every header cut (lengths adjusted) at every length.
#[test]
fn truncation_at_every_length() {
    let snap = compile(&world());
    let mut v6ext = Packet::tcp(v6(CLIENT6), 1, v6(VIP6), 80, tcp_flags::ACK);
    v6ext.ext = vec![Ext::HopByHop(1), Ext::DstOpts(0)];
    let mut tagged = ack4(1);
    tagged.vlan = Some(3);
    tagged.ipv4_options = vec![1; 4];
    let frames = [
        tagged.frame(),
        Packet::udp(v4(CLIENT4), 1, v4(VIP4), 53).frame(),
        v6ext.frame(),
        Packet::icmp(v4(CLIENT4), v4(VIP4), 8, 0, [0, 1, 0, 1], vec![]).frame(),
    ];
    for full in &frames {
        let l3 = if full[12] == 0x81 { 18 } else { 14 };
        for cut in 0..full.len() {
            let f = &full[..cut];
            let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, f);
            assert_eq!(out, f, "cut at {cut}");
            let want = if cut < l3 {
                Action::Pass
            } else {
                Action::Drop(DropReason::MalformedL3)
            };
            assert_eq!(v.action, want, "cut at {cut} of {full:02x?}");
        }
    }
    // Now shorten the IP length so the packet ends inside its own headers.
    let mut l4_cuts = 0;
    for full in &frames {
        let l3 = if full[12] == 0x81 { 18 } else { 14 };
        let v6 = full[l3] >> 4 == 6;
        let (fixed, l4) = if v6 {
            (40, l3 + 40 + 8 + 16)
        } else {
            (
                usize::from(full[l3] & 15) * 4,
                l3 + usize::from(full[l3] & 15) * 4,
            )
        };
        // Only the IPv6 frame has extension headers, and it carries TCP.
        let proto = if v6 { 6 } else { full[l3 + 9] };
        let l4_need = if proto == 6 { 20 } else { 8 };
        for ip_len in 0..full.len() - l3 {
            let mut f = full.clone();
            if v6 {
                if ip_len < 40 {
                    continue;
                }
                f[l3 + 4..l3 + 6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
            } else {
                f[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            }
            let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &f);
            let want = if ip_len < fixed || (v6 && ip_len == 40) || l3 + ip_len < l4 {
                DropReason::MalformedL3
            } else if l3 + ip_len < l4 + l4_need {
                l4_cuts += 1;
                DropReason::MalformedL4
            } else {
                continue;
            };
            assert_eq!(
                v.action,
                Action::Drop(want),
                "IP length {ip_len} of {full:02x?}"
            );
            assert_eq!(out, f);
        }
    }
    assert_eq!(
        l4_cuts,
        20 + 8 + 20 + 8,
        "every layer-4 header cut at every length"
    );
}

#[test]
fn fragments() {
    let snap = compile(&world());
    let drop = Action::Drop(DropReason::Fragment);
    let mut p = ack4(1);
    p.mf = true;
    assert_eq!(
        run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame())
            .0
            .action,
        drop
    );
    p.mf = false;
    p.frag_offset = 1;
    assert_eq!(
        run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame())
            .0
            .action,
        drop
    );
    // The reserved flag bit alone is not a fragment.
    let mut f = ack4(1).frame();
    f[20] |= 0x80;
    assert_eq!(
        run(&mut forwarder(), &snap, &fib_tx(), T0, &f).0.action,
        Action::Tx
    );
    let frag = |offset, more| Ext::Fragment {
        offset,
        more,
        id: 9,
    };
    for (ext, want) in [
        (vec![frag(0, true)], drop),
        (vec![frag(5, false)], drop),
        (vec![Ext::HopByHop(0), frag(1, true)], drop),
    ] {
        let mut p = Packet::udp(v6(CLIENT6), 1, v6(VIP6), 53);
        p.ext = ext;
        assert_eq!(
            run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame())
                .0
                .action,
            want
        );
    }
    // An atomic fragment is walked over and forwarded, inner bytes untouched.
    let mut p = Packet::udp(v6(CLIENT6), 1, v6(VIP6), 53);
    p.ext = vec![frag(0, false)];
    let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Tx);
    let want = expected_frame(
        &outer_to(be6(2), Encap::Gre, 0, true, hash6(1, 53, 17)),
        &p.ip_bytes(),
        0,
    );
    assert_eq!(out, want);
    // The fragment header's reserved bits are ignored.
    let mut f = p.frame();
    f[14 + 40 + 3] |= 0x06;
    assert_eq!(
        run(&mut forwarder(), &snap, &fib_tx(), T0, &f).0.action,
        Action::Tx
    );
}

#[test]
fn ipv6_extension_limit() {
    let snap = compile(&world());
    let mut p = Packet::tcp(v6(CLIENT6), 1, v6(VIP6), 80, tcp_flags::SYN);
    p.ext = vec![
        Ext::HopByHop(0),
        Ext::Routing(0),
        Ext::Ah(1),
        Ext::DstOpts(0),
    ];
    assert_eq!(
        run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame())
            .0
            .action,
        Action::Tx
    );
    p.ext.push(Ext::DstOpts(0));
    let (v, out) = run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Drop(DropReason::Ipv6ExtLimit));
    assert_eq!(out, p.frame());
    // Four headers then "no next header" (59): not VIP traffic, passed.
    let mut p = Packet::udp(v6(CLIENT6), 1, v6(VIP6), 53);
    p.ext = vec![Ext::DstOpts(0); 4];
    p.l4 = stator_testkit::L4::Raw {
        proto: 59,
        bytes: vec![],
    };
    let (v, _) = run(&mut forwarder(), &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Pass);
}

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
    let want = expected_frame(
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
    let want = expected_frame(
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
