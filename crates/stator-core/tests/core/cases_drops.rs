//! Frames through `Forwarder::process` that are passed or dropped before (or instead of)
//! selection — early drops, configuration drops, bad header lengths, truncation at every
//! length, fragments and the IPv6 extension-header limit — with their action, counters and,
//! where one is forwarded, its expected bytes (docs/forwarding.md §§1–2, §9).

#[allow(unused_imports)]
use crate::common;

use std::net::Ipv4Addr;

use crate::common::*;
use stator_core::{
    Action, BackendSpec, CompiledSnapshot, Counter, DropReason, Encap, Proto, SnapshotBuilder,
    ValidSnapshot, VipKey,
};
use stator_testkit::expect::encapsulated;
use stator_testkit::{Ext, Packet, arp_frame, tcp_flags};

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
    let lenient = CompiledSnapshot::new(&ValidSnapshot::new_lenient(s.clone()).unwrap());
    let (v, _) = run(&mut forwarder(), &lenient, &fib_tx(), T0, &syn4(1).frame());
    assert_eq!(v.action, Action::Drop(DropReason::BadConfig));
    // no_source: an IPv6 backend on a node without an IPv6 address.
    let mut s = SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 7, vec![BackendSpec::new(be6(1))])
        .build()
        .unwrap();
    s.node.src_v6 = None;
    assert!(ValidSnapshot::new(s.clone()).is_err());
    let lenient = CompiledSnapshot::new(&ValidSnapshot::new_lenient(s.clone()).unwrap());
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
    let want = encapsulated(
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
