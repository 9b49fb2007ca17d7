//! Fixture tests of the XDP forwarder through BPF_PROG_TEST_RUN: every case of
//! docs/forwarding.md with its expected action, output bytes (assembled by hand) and counter
//! deltas, and the devmap redirect. ICMP is in `xdp/forwarding_icmp.rs`, cut and mutated frames in
//! `xdp/forwarding_malformed.rs`. Needs root; runs inside a network namespace where
//! bpf_fib_lookup has routes and static neighbours (tests/common).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use stator_testkit::{Ext, L4, Packet, arp_frame};
use stator_xdp::ConntrackMode;

use crate::common::{v4, v6};
use crate::fixtures::*;

/// Independent cases: each uses its own flow, so their order does not matter.
fn table(w: &World) -> Vec<Case> {
    let c4 = client4();
    let c6 = client6();
    let mut cases = Vec::new();
    let mut port = 10_000u16;
    let mut next = || {
        port += 1;
        port
    };

    // ---- forwarding: protocols, families, encapsulations -------------------------------------
    cases.push(w.miss_tx(
        "tcp v4 syn → GRE",
        &tcp(c4, next(), &vips::tcp4(), SYN),
        &vips::tcp4(),
    ));
    cases.push(w.miss_tx(
        "tcp v4 ack, new flow → GRE",
        &tcp(c4, next(), &vips::tcp4(), ACK),
        &vips::tcp4(),
    ));
    cases.push(w.miss_tx(
        "udp v4 → IPIP",
        &udp(c4, next(), &vips::udp4()),
        &vips::udp4(),
    ));
    cases.push(w.miss_tx(
        "tcp v4 → GUE",
        &tcp(c4, next(), &vips::gue4(), SYN),
        &vips::gue4(),
    ));
    cases.push(w.miss_tx(
        "tcp v6 syn → GRE",
        &tcp(c6, next(), &vips::tcp6(), SYN),
        &vips::tcp6(),
    ));
    cases.push(w.miss_tx(
        "udp v6 → IPIP (6in6)",
        &udp(c6, next(), &vips::udp6()),
        &vips::udp6(),
    ));
    cases.push(w.miss_tx(
        "tcp v6 → GUE",
        &tcp(c6, next(), &vips::gue6(), ACK),
        &vips::gue6(),
    ));
    cases.push(w.miss_tx(
        "v4 VIP → v6 backend (GRE, outer v6)",
        &tcp(c4, next(), &vips::to6(), SYN),
        &vips::to6(),
    ));
    cases.push(w.miss_tx(
        "v6 VIP → v4 backend (IPIP 6in4)",
        &tcp(c6, next(), &vips::to4(), SYN),
        &vips::to4(),
    ));
    cases.push(w.miss_tx(
        "port-0 VIP matches any port",
        &tcp(c4, next(), &vips::any4(), SYN),
        &vips::any4(),
    ));
    cases.push(w.miss_tx(
        "exact port wins over port 0",
        &tcp(c4, next(), &vips::exact4(), SYN),
        &vips::exact4(),
    ));
    {
        let p = tcp(c4, next(), &vips::noct4(), ACK);
        let (_, out) = w.via_maglev(&p, &vips::noct4());
        cases.push(case(
            "NO_CT VIP: Maglev only, no table",
            p.frame(),
            TX,
            Out::Bytes(out),
            &[(Stat::C(Counter::ActTx), 1)],
        ));
    }

    // ---- header variants ------------------------------------------------------------------------
    {
        let mut p = tcp(c4, next(), &vips::tcp4(), SYN);
        p.vlan = Some(100);
        cases.push(w.miss_tx("802.1Q tag is consumed", &p, &vips::tcp4()));
        let mut p = tcp(c4, next(), &vips::tcp4(), ACK);
        p.ipv4_options = vec![1, 1, 1, 1, 7, 7, 4, 0]; // NOPs + an (empty) record route
        cases.push(w.miss_tx(
            "IPv4 options are parsed (IHL 7) and kept",
            &p,
            &vips::tcp4(),
        ));
        let mut p = udp(c4, next(), &vips::udp4()).with_payload(b"x");
        p.padding = 13;
        cases.push(w.miss_tx(
            "Ethernet padding stays after the inner packet",
            &p,
            &vips::udp4(),
        ));
        let mut p = tcp(c4, next(), &vips::tcp4(), ACK);
        p.tos = 0xb9; // EF + ECT(1)
        p.df = false;
        cases.push(w.miss_tx(
            "TOS copied, no DF on a non-DF inner packet",
            &p,
            &vips::tcp4(),
        ));
        let mut p = tcp(c6, next(), &vips::tcp6(), ACK);
        p.tos = 0x2e;
        p.flow_label = 0x12345;
        cases.push(w.miss_tx("IPv6 traffic class copied", &p, &vips::tcp6()));
        let mut p = tcp(c6, next(), &vips::tcp6(), SYN);
        p.ext = vec![
            Ext::HopByHop(0),
            Ext::DstOpts(1),
            Ext::Routing(0),
            Ext::Ah(4),
        ];
        cases.push(w.miss_tx("four IPv6 extension headers are walked", &p, &vips::tcp6()));
        let mut p = tcp(c6, next(), &vips::tcp6(), SYN);
        p.ext = vec![Ext::Fragment {
            offset: 0,
            more: false,
            id: 9,
        }];
        cases.push(w.miss_tx("IPv6 atomic fragment is forwarded", &p, &vips::tcp6()));
        let mut p = tcp(c6, next(), &vips::tcp6(), SYN);
        p.ext = vec![
            Ext::HopByHop(0),
            Ext::DstOpts(0),
            Ext::Routing(0),
            Ext::DstOpts(0),
            Ext::DstOpts(0),
        ];
        cases.push(case(
            "five IPv6 extension headers",
            p.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Ipv6ExtLimit),
        ));
    }

    // ---- not ours: passed untouched -------------------------------------------------------------
    {
        let p = Packet::tcp(c4, next(), v4(10, 0, 0, 200), 80, SYN);
        cases.push(case(
            "non-VIP IPv4 address",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let p = Packet::tcp(c6, next(), v6("fd00::200"), 80, SYN);
        cases.push(case(
            "non-VIP IPv6 address",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let p = Packet::tcp(c4, next(), v4(10, 0, 0, 10), 81, SYN);
        cases.push(case(
            "VIP address, other port",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let p = Packet::udp(c4, next(), v4(10, 0, 0, 12), 9999);
        cases.push(case(
            "port-0 TCP VIP, UDP packet",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let mut p = Packet::tcp(c4, 1, v4(10, 0, 0, 10), 80, SYN);
        p.l4 = L4::Raw {
            proto: 47,
            bytes: vec![0; 24],
        };
        cases.push(case(
            "VIP address, GRE",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let mut p = Packet::tcp(c6, 1, v6("fd00::10"), 80, SYN);
        p.l4 = L4::Raw {
            proto: 1,
            bytes: vec![8, 0, 0, 0, 0, 0, 0, 0],
        };
        cases.push(case(
            "ICMP (v4) in IPv6 to a VIP",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let mut p = Packet::tcp(c4, next(), v4(10, 0, 0, 200), 80, SYN);
        p.mf = true;
        cases.push(case(
            "non-VIP fragment",
            p.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let mut f = Packet::tcp(c4, next(), v4(10, 0, 0, 200), 80, SYN).frame();
        f[14] = 0x44; // IHL 4 — not ours, the kernel judges it
        cases.push(case("non-VIP bad IHL", f, PASS, Out::Same, NON_VIP));
        cases.push(case("ARP", arp_frame(), PASS, Out::Same, NON_IP));
        // (frames under 14 bytes — §1.1 — cannot be tested: BPF_PROG_TEST_RUN refuses them)
        cases.push(case(
            "14 bytes, IPv4 ethertype",
            {
                let mut f = tcp(c4, next(), &vips::tcp4(), SYN).frame();
                f.truncate(14);
                f
            },
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = tcp(c4, next(), &vips::tcp4(), SYN).frame();
        f[12..14].copy_from_slice(&[0x88, 0xa8]);
        cases.push(case(
            "802.1ad outer tag is not parsed",
            f,
            PASS,
            Out::Same,
            NON_IP,
        ));
        let mut p = tcp(c4, next(), &vips::tcp4(), SYN);
        p.vlan = Some(7);
        let mut f = p.frame();
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[16..18].copy_from_slice(&[0x81, 0x00]);
        cases.push(case(
            "double 802.1Q tag is not parsed",
            f,
            PASS,
            Out::Same,
            NON_IP,
        ));
        let mut f = tcp(c4, next(), &vips::tcp4(), SYN).frame();
        f.truncate(16);
        cases.push(case(
            "VLAN ethertype, 16 bytes",
            {
                f[12] = 0x81;
                f[13] = 0;
                f
            },
            PASS,
            Out::Same,
            NON_IP,
        ));
    }

    // ---- malformed VIP traffic ------------------------------------------------------------------
    {
        let base = tcp(c4, next(), &vips::tcp4(), SYN).frame();
        let mut f = base.clone();
        f[14] = 0x44;
        cases.push(case(
            "IHL 4",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = base.clone();
        f[14] = 0x55;
        cases.push(case(
            "IPv4 version 5",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = base.clone();
        f[14] = 0x4f; // IHL 15 = 60 bytes > total length 40
        cases.push(case(
            "IHL 15 beyond total length",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = base.clone();
        f[16..18].copy_from_slice(&41u16.to_be_bytes());
        cases.push(case(
            "total length beyond the frame",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = base.clone();
        f[16..18].copy_from_slice(&16u16.to_be_bytes());
        cases.push(case(
            "total length below IHL",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = base.clone();
        f.truncate(30);
        cases.push(case(
            "IPv4 header cut (dst unreadable)",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = Packet::tcp(c4, 1, v4(10, 0, 0, 200), 80, SYN).frame();
        f.truncate(33);
        cases.push(case(
            "non-VIP, IPv4 header cut",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let b6 = tcp(c6, next(), &vips::tcp6(), SYN).frame();
        let mut f = b6.clone();
        f[14] = 0x50 | (f[14] & 0x0f);
        cases.push(case(
            "IPv6 version 5",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = b6.clone();
        f[18..20].copy_from_slice(&[0, 0]);
        cases.push(case(
            "IPv6 payload length 0 (jumbogram)",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
        let mut f = b6.clone();
        f[18..20].copy_from_slice(&21u16.to_be_bytes());
        cases.push(case(
            "IPv6 payload length beyond the frame",
            f,
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL3),
        ));
    }

    // ---- fragments ------------------------------------------------------------------------------
    {
        let mut p = tcp(c4, next(), &vips::tcp4(), SYN);
        p.mf = true;
        cases.push(case(
            "IPv4 first fragment (MF)",
            p.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Fragment),
        ));
        let mut p = tcp(c4, next(), &vips::tcp4(), SYN);
        p.frag_offset = 185;
        cases.push(case(
            "IPv4 later fragment",
            p.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Fragment),
        ));
        let mut p = tcp(c6, next(), &vips::tcp6(), SYN);
        p.ext = vec![Ext::Fragment {
            offset: 0,
            more: true,
            id: 1,
        }];
        cases.push(case(
            "IPv6 first fragment",
            p.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Fragment),
        ));
        let mut p = tcp(c6, next(), &vips::tcp6(), SYN);
        p.ext = vec![
            Ext::HopByHop(0),
            Ext::Fragment {
                offset: 100,
                more: false,
                id: 1,
            },
        ];
        cases.push(case(
            "IPv6 last fragment behind hop-by-hop",
            p.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Fragment),
        ));
    }

    // ---- next hop and backends ------------------------------------------------------------------
    {
        let p = tcp(c4, next(), &vips::noneigh4(), SYN);
        cases.push(case(
            "no neighbour entry",
            p.frame(),
            DROP,
            Out::Same,
            &dropped_after_insert(DropReason::NoNeigh),
        ));
        let p = tcp(c4, next(), &vips::noroute4(), SYN);
        cases.push(case(
            "no route to the backend",
            p.frame(),
            DROP,
            Out::Same,
            &dropped_after_insert(DropReason::Fib),
        ));
        let p = tcp(c4, next(), &vips::mtu4(), SYN).with_payload(&[0u8; 160]);
        cases.push(case(
            "encapsulated packet above the route MTU",
            p.frame(),
            DROP,
            Out::Same,
            &dropped_after_insert(DropReason::Mtu),
        ));
        let p = tcp(c4, next(), &vips::mtu4(), SYN).with_payload(&[0u8; 100]);
        cases.push(w.miss_tx("encapsulated packet below the route MTU", &p, &vips::mtu4()));
        let p = tcp(c4, next(), &vips::empty4(), SYN);
        cases.push(case(
            "VIP without backends",
            p.frame(),
            DROP,
            Out::Same,
            &[
                (Stat::C(Counter::ActDrop), 1),
                (Stat::D(DropReason::NoBackend), 1),
                (Stat::C(Counter::CtMiss), 1),
            ],
        ));
        let p = tcp(c4, next(), &vips::redirect4(), SYN);
        let (_, out) = w.via_maglev(&p, &vips::redirect4());
        cases.push(case(
            "egress ≠ ingress, not a tx port (frame already rewritten)",
            p.frame(),
            DROP,
            Out::Bytes(out),
            &dropped_after_insert(DropReason::TxPort),
        ));
    }
    cases
}

#[test]
fn fixture_table() {
    with_world("table", ConntrackMode::PerCpu, |w| {
        let cases = table(w);
        for c in &cases {
            w.check(c);
        }
        println!("{} fixture cases passed", cases.len());
    });
}

#[test]
fn redirect_through_the_devmap() {
    with_world("redir", ConntrackMode::PerCpu, |w| {
        let lbout = stator_xdp::ifindex("lbout").expect("lbout in the lab");
        w.fwd.add_tx_port(lbout).unwrap();
        assert_eq!(w.fwd.maps().tx_ports().unwrap(), vec![lbout]);
        for (vip, client, name) in [
            (vips::redirect4(), client4(), "v4 backend behind lbout"),
            (vips::redirect6(), client6(), "v6 backend behind lbout"),
        ] {
            let p = tcp(client, 4242, &vip, SYN);
            let (_, out) = w.via_maglev(&p, &vip);
            w.check(&case(
                name,
                p.frame(),
                REDIRECT,
                Out::Bytes(out),
                &[
                    (Stat::C(Counter::ActRedirect), 1),
                    (Stat::C(Counter::CtMiss), 1),
                    (Stat::C(Counter::CtInsert), 1),
                ],
            ));
        }
    });
}
