//! Fixture tests of the decap program (docs/decap.md) through BPF_PROG_TEST_RUN: every
//! encapsulation and family combination with its exact output bytes, GRE and GUE options,
//! traffic that must pass untouched and the address filter. Every case also checks the exact
//! counter deltas: one outcome per packet. Rejections and cut lengths are in
//! `xdp/decap_rejects.rs`, the attach/detach life cycle in `xdp/decap_attach.rs`. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::decap_fixture;
#[allow(unused_imports)]
use crate::tunnel;

use stator_abi::DecapCounter as C;
use stator_testkit::{Ext, L4, Packet, arp_frame, inet_checksum, tcp_flags};
use stator_xdp::DecapConfig;

use crate::decap_fixture::*;
use crate::tunnel::{GUE_PORT, Spec, Tunnel};

#[test]
fn decapsulates_every_tunnel_and_family() {
    let fx = Fixture::any();
    let mut n = 0;
    for (name, t) in good_tunnels() {
        for outer_v6 in [false, true] {
            for inner_v6 in [false, true] {
                let s = spec(outer_v6, t.clone(), inner_v6);
                let label = format!(
                    "{name}, {} in {}",
                    if inner_v6 { "IPv6" } else { "IPv4" },
                    if outer_v6 { "IPv6" } else { "IPv4" }
                );
                fx.expect_decap(&label, &s, kind_of(&t));
                n += 1;
            }
        }
    }
    assert_eq!(n, 40);
}

#[test]
fn header_variants_keep_what_they_should() {
    let fx = Fixture::any();
    // an 802.1Q tag stays in front of the inner ethertype
    let mut s = spec(false, Tunnel::gre(), false);
    s.vlan = Some(0x0064);
    fx.expect_decap("802.1Q tag kept", &s, C::Gre);
    let mut s = spec(true, Tunnel::gue0(), true);
    s.vlan = Some(0x2123);
    fx.expect_decap("802.1Q tag kept, GUE over IPv6", &s, C::Gue);
    // outer IPv4 options are skipped (and covered by the header checksum)
    let mut s = spec(false, Tunnel::ipip(), false);
    s.ipv4_options = vec![1, 1, 1, 0];
    fx.expect_decap("outer IPv4 options", &s, C::Ipip);
    // Ethernet padding after the outer packet stays at the end (the kernel trims it)
    let mut s = spec(false, Tunnel::gre(), false);
    s.padding = 9;
    fx.expect_decap("Ethernet padding stays", &s, C::Gre);
    // any UDP checksum is accepted (not verified), zero also over IPv6 (RFC 6935)
    for outer_v6 in [false, true] {
        let mut s = spec(outer_v6, Tunnel::gue0(), false);
        s.udp_csum = 0xbeef;
        fx.expect_decap("non-zero UDP checksum", &s, C::Gue);
    }
    // a GUE port of the configuration, not a fixed one
    let other = Fixture::new(
        "port",
        &DecapConfig {
            gue_port: Some(5555),
            ..DecapConfig::default()
        },
    );
    let mut s = spec(false, Tunnel::gue0(), true);
    s.udp_dport = 5555;
    other.expect_decap("GUE on port 5555", &s, C::Gue);
    s.udp_dport = GUE_PORT;
    other.expect_pass("6080 is not GUE there", &s.frame(), C::Pass);
    // bytes after the UDP end but inside the outer IP packet stay after the inner packet
    let s = spec(false, Tunnel::gue0(), false);
    let mut payload = s.payload();
    payload.extend_from_slice(&[0xaa; 5]);
    let frame = s.frame_with_payload(&payload);
    let r = fx.run(&frame);
    assert_eq!(r.action, PASS);
    let mut want = s.expected();
    want.extend_from_slice(&[0xaa; 5]);
    assert_eq!(hex(&r.data), hex(&want), "trailing bytes after the UDP end");
}

/// RFC 6040 §4.2: an outer CE mark reaches an ECN-capable inner header (IPv4 checksum fixed).
#[test]
fn ce_mark_is_copied_into_ecn_capable_inner_packets() {
    let fx = Fixture::any();
    for (outer_ecn, inner_ecn, want) in
        [(3u8, 2u8, 3u8), (3, 1, 3), (3, 0, 0), (2, 1, 1), (0, 2, 2)]
    {
        for inner_v6 in [false, true] {
            let mut p = if inner_v6 {
                Packet::udp(v6("2001:db8::7"), 1, v6("fd00::10"), 2)
            } else {
                Packet::udp(v4(198, 51, 100, 7), 1, v4(10, 0, 0, 10), 2)
            };
            p.tos = 0xb8 | inner_ecn;
            let mut s = Spec::new(lb(false), backend(false), Tunnel::gre(), p.ip_bytes());
            s.tos = outer_ecn;
            p.tos = 0xb8 | want;
            let mut expected = s.expected();
            let fresh = p.ip_bytes();
            let l3 = 14;
            expected[l3..l3 + fresh.len()].copy_from_slice(&fresh);
            let r = fx.run(&s.frame());
            assert_eq!(r.action, PASS);
            assert_eq!(
                hex(&r.data),
                hex(&expected),
                "outer ECN {outer_ecn}, inner {inner_ecn} (v6 {inner_v6})"
            );
            if !inner_v6 {
                assert_eq!(inet_checksum(&r.data[14..34]), 0, "inner IPv4 checksum");
            }
        }
    }
}

#[test]
fn everything_else_passes_untouched() {
    let fx = Fixture::any();
    let c4 = v4(198, 51, 100, 7);
    let c6 = v6("2001:db8::7");
    let b4 = backend(false);
    let b6 = backend(true);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "TCP to the backend",
            Packet::tcp(c4, 1, b4, 22, tcp_flags::SYN).frame(),
        ),
        ("UDP to another port", Packet::udp(c4, 1, b4, 53).frame()),
        (
            "UDP from the GUE port",
            Packet::udp(c4, GUE_PORT, b4, 53).frame(),
        ),
        ("IPv6 UDP", Packet::udp(c6, 1, b6, 53).frame()),
        (
            "ICMP echo",
            Packet::icmp(c4, b4, 8, 0, [0, 1, 0, 1], vec![0; 8]).frame(),
        ),
        (
            "ICMPv6 echo",
            Packet::icmp(c6, b6, 128, 0, [0, 1, 0, 1], vec![0; 8]).frame(),
        ),
        ("ARP", arp_frame()),
    ];
    // raw protocols that are not tunnels (SCTP, ESP)
    for proto in [132u8, 50] {
        let mut p = Packet::udp(c4, 1, b4, 2);
        p.l4 = L4::Raw {
            proto,
            bytes: vec![0; 24],
        };
        cases.push(("SCTP / ESP", p.frame()));
    }
    // an outer IPv6 extension header in front of GRE is not walked: the kernel decides
    let mut p = Packet::udp(lb(true), 1, b6, 2);
    p.ext = vec![Ext::HopByHop(0)];
    p.l4 = L4::Raw {
        proto: 47,
        bytes: spec(true, Tunnel::gre(), false).payload(),
    };
    cases.push(("IPv6 hop-by-hop, then GRE", p.frame()));
    // an IPv4 header cut short cannot be classified
    let f = spec(false, Tunnel::gre(), false).frame();
    cases.push(("IPv4 header of 19 bytes", f[..14 + 19].to_vec()));
    // a second VLAN tag (QinQ) is not parsed
    let mut f = spec(false, Tunnel::gre(), false).frame();
    f.splice(12..12, [0x88, 0xa8, 0, 5]);
    cases.push(("802.1ad outer tag", f));
    for (name, frame) in &cases {
        fx.expect_pass(name, frame, C::Pass);
    }

    // GUE turned off: UDP to 6080 is just UDP
    let off = Fixture::new(
        "nogue",
        &DecapConfig {
            gue_port: None,
            ..DecapConfig::default()
        },
    );
    off.expect_pass(
        "GUE off",
        &spec(false, Tunnel::gue0(), false).frame(),
        C::Pass,
    );
    off.expect_decap("GRE still on", &spec(false, Tunnel::gre(), false), C::Gre);
}

#[test]
fn configured_addresses_decide_what_is_ours() {
    let ours = DecapConfig {
        addrs: [backend(false), backend(true)].into_iter().collect(),
        ..DecapConfig::default()
    };
    let mut fx = Fixture::new("addrs", &ours);
    assert_eq!(fx.decap.config().unwrap(), ours, "read back");
    let other4 = v4(10, 20, 0, 99);
    let other6 = v6("fd20::99");
    for (name, t) in good_tunnels() {
        for ov6 in [false, true] {
            fx.expect_decap(name, &spec(ov6, t.clone(), false), kind_of(&t));
            let other = if ov6 { other6 } else { other4 };
            let s = Spec::new(lb(ov6), other, t.clone(), inner(ov6));
            fx.expect_pass(name, &s.frame(), C::NotOurs);
        }
    }
    // a broken tunnel packet to someone else is theirs to judge, not rejected
    let bad = Spec::new(
        lb(false),
        other4,
        Tunnel::Gre {
            flags: 1,
            ptype: None,
            opt: vec![],
        },
        inner(false),
    );
    fx.expect_pass("GRE version 1 to another address", &bad.frame(), C::NotOurs);
    // non-tunnel traffic to another address is plain `pass`
    fx.expect_pass(
        "TCP to another address",
        &Packet::tcp(v4(198, 51, 100, 7), 1, other4, 22, tcp_flags::SYN).frame(),
        C::Pass,
    );

    // a new set: the common address stays, the old one goes, the new one comes
    let next = DecapConfig {
        addrs: [backend(false), other4].into_iter().collect(),
        gue_port: Some(7000),
        second_chance: None,
    };
    fx.decap.configure(&next).unwrap();
    assert_eq!(fx.decap.config().unwrap(), next);
    fx.expect_pass(
        "v6 backend no longer ours",
        &spec(true, Tunnel::gre(), true).frame(),
        C::NotOurs,
    );
    fx.expect_decap(
        "the added address",
        &Spec::new(lb(false), other4, Tunnel::ipip(), inner(false)),
        C::Ipip,
    );

    // back to any address
    fx.decap.configure(&DecapConfig::default()).unwrap();
    assert_eq!(fx.decap.config().unwrap(), DecapConfig::default());
    fx.expect_decap(
        "any address",
        &Spec::new(lb(true), other6, Tunnel::gre(), inner(true)),
        C::Gre,
    );
}
