//! Fixture tests of the XDP forwarder through BPF_PROG_TEST_RUN: every case of
//! docs/forwarding.md with its expected action, output bytes (assembled by hand) and counter
//! deltas. Needs root; runs inside a network namespace where bpf_fib_lookup has routes and
//! static neighbours (tests/common).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

mod common;
mod fixtures;

use stator_testkit::{Ext, L4, Packet, arp_frame};
use stator_xdp::ConntrackMode;

use common::{v4, v6};
use fixtures::*;

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
            &[
                (Stat::C(Counter::ActDrop), 1),
                (Stat::D(DropReason::NoNeigh), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
        ));
        let p = tcp(c4, next(), &vips::noroute4(), SYN);
        cases.push(case(
            "no route to the backend",
            p.frame(),
            DROP,
            Out::Same,
            &[
                (Stat::C(Counter::ActDrop), 1),
                (Stat::D(DropReason::Fib), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
        ));
        let p = tcp(c4, next(), &vips::mtu4(), SYN).with_payload(&[0u8; 160]);
        cases.push(case(
            "encapsulated packet above the route MTU",
            p.frame(),
            DROP,
            Out::Same,
            &[
                (Stat::C(Counter::ActDrop), 1),
                (Stat::D(DropReason::Mtu), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
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
            &[
                (Stat::C(Counter::ActDrop), 1),
                (Stat::D(DropReason::TxPort), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
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

/// An ICMP error from a router on the path, quoting `quoted` (a packet a backend sent).
fn icmp_error(quoted: &Packet, ty: u8, code: u8) -> Packet {
    let router = if quoted.src.is_ipv4() {
        v4(10, 99, 0, 1)
    } else {
        v6("fd99::1")
    };
    Packet::icmp(
        router,
        quoted.src,
        ty,
        code,
        [0, 0, 0x05, 0xdc],
        quoted.ip_bytes(),
    )
}

/// The reply §6 makes of an echo request: addresses swapped, TTL 64, type 0/129.
fn echo_reply(req: &Packet) -> Packet {
    let mut r = req.clone();
    r.src = req.dst;
    r.dst = req.src;
    r.dst_mac = req.src_mac;
    r.src_mac = req.dst_mac;
    r.ttl = 64;
    if let L4::Icmp { ty, .. } = &mut r.l4 {
        *ty = if req.dst.is_ipv4() { 0 } else { 129 };
    }
    r
}

#[test]
fn icmp_messages() {
    with_world("icmp", ConntrackMode::PerCpu, |w| {
        let c4 = client4();
        let c6 = client6();
        let mut cases = Vec::new();
        const ERR_MISS: &[(Stat, u64)] = &[
            (Stat::C(Counter::ActTx), 1),
            (Stat::C(Counter::CtMiss), 1),
            (Stat::C(Counter::IcmpErrorFwd), 1),
        ];
        const ECHO: &[(Stat, u64)] = &[
            (Stat::C(Counter::ActTx), 1),
            (Stat::C(Counter::IcmpEchoReply), 1),
        ];

        // echo requests are answered (the default)
        let mut req = Packet::icmp(
            c4,
            v4(10, 0, 0, 10),
            8,
            0,
            [0x12, 0x34, 0, 1],
            b"ping".to_vec(),
        );
        req.ttl = 50;
        cases.push(case(
            "echo request v4",
            req.frame(),
            TX,
            Out::Bytes(echo_reply(&req).frame()),
            ECHO,
        ));
        let mut req = Packet::icmp(c4, v4(10, 0, 0, 11), 8, 0, [0, 7, 0, 9], vec![0xab; 33]);
        req.ipv4_options = vec![1, 1, 1, 1, 1, 1, 1, 0];
        req.vlan = Some(42);
        req.tos = 0x10;
        cases.push(case(
            "echo request v4 with options and a VLAN tag",
            req.frame(),
            TX,
            Out::Bytes(echo_reply(&req).frame()),
            ECHO,
        ));
        let mut req = Packet::icmp(
            c6,
            v6("fd00::10"),
            128,
            0,
            [0x12, 0x34, 0, 1],
            b"ping6".to_vec(),
        );
        req.ttl = 3;
        cases.push(case(
            "echo request v6",
            req.frame(),
            TX,
            Out::Bytes(echo_reply(&req).frame()),
            ECHO,
        ));

        // frag-needed / packet-too-big go to the backend of the quoted flow, reversed
        for (vip, client, sport) in [
            (vips::tcp4(), c4, 5555u16),
            (vips::udp4(), c4, 5556),
            (vips::tcp6(), c6, 5557),
            (vips::udp6(), c6, 5558),
            (vips::to6(), c4, 5559),
        ] {
            let quoted = if vip.proto == stator_core::Proto::Tcp {
                Packet::tcp(vip.addr, vip.port, client, sport, ACK)
            } else {
                Packet::udp(vip.addr, vip.port, client, sport)
            };
            let (ty, code) = if vip.addr.is_ipv4() { (3, 4) } else { (2, 0) };
            let msg = icmp_error(&quoted, ty, code);
            let proto = if vip.proto == stator_core::Proto::Tcp {
                6
            } else {
                17
            };
            let h = common::expect::flow_hash(client, vip.addr, sport, vip.port, proto);
            let real = common::expect::maglev(&w.snap, &vip, h);
            let out = w.forwarded(&msg, &msg.ip_bytes(), real, h);
            cases.push(case(
                format!("ICMP error about {vip:?}"),
                msg.frame(),
                TX,
                Out::Bytes(out),
                ERR_MISS,
            ));
        }

        // errors we cannot route, and other ICMP
        let quoted = Packet::tcp(v4(10, 0, 0, 10), 81, c4, 1, ACK);
        cases.push(case(
            "frag-needed quoting a non-VIP port",
            icmp_error(&quoted, 3, 4).frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Icmp),
        ));
        let quoted = Packet::icmp(v4(10, 0, 0, 10), c4, 0, 0, [0; 4], vec![]);
        cases.push(case(
            "frag-needed quoting ICMP",
            icmp_error(&quoted, 3, 4).frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Icmp),
        ));
        let quoted = Packet::tcp(v6("fd00::10"), 80, c6, 1, ACK);
        let mut q = quoted.ip_bytes();
        q[0] = 0x40 | (q[0] & 0x0f); // says IPv4 inside ICMPv6
        let msg = Packet::icmp(v6("fd99::1"), v6("fd00::10"), 2, 0, [0, 0, 5, 0xdc], q);
        cases.push(case(
            "packet-too-big quoting a non-IPv6 header",
            msg.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::MalformedL4),
        ));
        let quoted = Packet::tcp(v4(10, 0, 0, 10), 80, c4, 1, ACK);
        cases.push(case(
            "host unreachable (3/1)",
            icmp_error(&quoted, 3, 1).frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Icmp),
        ));
        let ts = Packet::icmp(c4, v4(10, 0, 0, 10), 13, 0, [0; 4], vec![0; 12]);
        cases.push(case(
            "timestamp request",
            ts.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Icmp),
        ));
        let du6 = Packet::icmp(c6, v6("fd00::10"), 1, 4, [0; 4], vec![]);
        cases.push(case(
            "ICMPv6 destination unreachable",
            du6.frame(),
            DROP,
            Out::Same,
            &dropped(DropReason::Icmp),
        ));
        for ty in 133..=137u8 {
            let nd = Packet::icmp(c6, v6("fd00::10"), ty, 0, [0; 4], vec![0; 16]);
            cases.push(case(
                format!("ICMPv6 neighbour discovery type {ty}"),
                nd.frame(),
                PASS,
                Out::Same,
                NON_VIP,
            ));
        }
        for c in &cases {
            w.check(c);
        }

        // without the node flag, echo requests go to the kernel
        let mut snap = w.snap.clone();
        snap.node.icmp_echo = false;
        snap.generation += 1;
        w.fwd.commit(&common::valid(&snap)).unwrap();
        let req = Packet::icmp(c4, v4(10, 0, 0, 10), 8, 0, [1, 2, 3, 4], vec![]);
        w.check(&case(
            "echo request, echo disabled",
            req.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        let req = Packet::icmp(c6, v6("fd00::10"), 128, 0, [1, 2, 3, 4], vec![]);
        w.check(&case(
            "echo request v6, echo disabled",
            req.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));
        println!("{} ICMP cases passed", cases.len() + 2);
    });
}

/// The IP packet of `p` with its upper layer replaced by the first `k` bytes of it, lengths
/// consistent: the headers say the packet ends there.
fn cut_l4(p: &Packet, k: usize) -> Packet {
    let ip = p.ip_bytes();
    let hdr = if p.dst.is_ipv4() {
        usize::from(ip[0] & 0x0f) * 4
    } else {
        40
    };
    let proto = if p.dst.is_ipv4() { ip[9] } else { ip[6] };
    let mut q = p.clone();
    q.l4 = L4::Raw {
        proto,
        bytes: ip[hdr..hdr + k].to_vec(),
    };
    q
}

#[test]
fn truncated_headers_at_every_length() {
    with_world("cut", ConntrackMode::PerCpu, |w| {
        let c4 = client4();
        let c6 = client6();
        let mut n = 0;

        // 1. The frame cut at every length: lengths in the IP header now exceed the frame.
        let mut vlan = tcp(c4, 7001, &vips::tcp4(), SYN);
        vlan.vlan = Some(5);
        let mut ext6 = tcp(c6, 7002, &vips::tcp6(), SYN);
        ext6.ext = vec![Ext::HopByHop(1), Ext::DstOpts(0)];
        let quoted4 = Packet::tcp(v4(10, 0, 0, 10), 80, c4, 7003, ACK);
        let quoted6 = Packet::tcp(v6("fd00::10"), 80, c6, 7004, ACK);
        let frames = [
            ("tcp v4", tcp(c4, 7000, &vips::tcp4(), SYN), true),
            ("tcp v4 vlan", vlan, true),
            ("udp v4", udp(c4, 7005, &vips::udp4()), true),
            ("tcp v6 + ext", ext6, true),
            ("udp v6", udp(c6, 7006, &vips::udp6()), true),
            ("frag-needed", icmp_error(&quoted4, 3, 4), true),
            ("packet-too-big", icmp_error(&quoted6, 2, 0), true),
            (
                "non-VIP v4",
                Packet::tcp(c4, 7007, v4(10, 0, 0, 200), 80, SYN),
                false,
            ),
            (
                "non-VIP v6",
                Packet::tcp(c6, 7008, v6("fd00::200"), 80, SYN),
                false,
            ),
        ];
        for (name, p, ours) in &frames {
            let full = p.frame();
            let l3 = if p.vlan.is_some() { 18 } else { 14 };
            let fixed = if p.dst.is_ipv4() { 20 } else { 40 };
            for cut in 14..full.len() {
                let f = full[..cut].to_vec();
                let c = if cut < l3 {
                    case(format!("{name} cut at {cut}"), f, PASS, Out::Same, NON_IP)
                } else if cut < l3 + fixed || *ours {
                    case(
                        format!("{name} cut at {cut}"),
                        f,
                        DROP,
                        Out::Same,
                        &dropped(DropReason::MalformedL3),
                    )
                } else {
                    case(format!("{name} cut at {cut}"), f, PASS, Out::Same, NON_VIP)
                };
                w.check(&c);
                n += 1;
            }
        }

        // 2. Every upper-layer header cut at every length, with consistent IP lengths.
        let mut port = 7100u16;
        let l4s = [
            ("tcp v4", tcp(c4, 0, &vips::tcp4(), SYN), 20),
            ("udp v4", udp(c4, 0, &vips::udp4()), 8),
            ("tcp v6", tcp(c6, 0, &vips::tcp6(), SYN), 20),
            ("udp v6", udp(c6, 0, &vips::udp6()), 8),
        ];
        for (name, p, hlen) in &l4s {
            for k in 0..*hlen {
                let q = cut_l4(p, k);
                // IPv6 payload length 0 means a jumbogram: an L3 error (§2)
                let reason = if k == 0 && p.dst.is_ipv6() {
                    DropReason::MalformedL3
                } else {
                    DropReason::MalformedL4
                };
                w.check(&case(
                    format!("{name} header cut at {k}"),
                    q.frame(),
                    DROP,
                    Out::Same,
                    &dropped(reason),
                ));
                n += 1;
            }
            let mut p = p.clone();
            port += 1;
            if let L4::Tcp { sport, .. } | L4::Udp { sport, .. } = &mut p.l4 {
                *sport = port;
            }
            let whole = cut_l4(&p, *hlen);
            let vip = if name.starts_with("tcp v4") {
                vips::tcp4()
            } else if name.starts_with("udp v4") {
                vips::udp4()
            } else if name.starts_with("tcp v6") {
                vips::tcp6()
            } else {
                vips::udp6()
            };
            // the whole header and nothing else: forwarded (Maglev on the same ports)
            let h = hash_of(&p);
            let real = common::expect::maglev(&w.snap, &vip, h);
            let out = w.forwarded(&whole, &whole.ip_bytes(), real, h);
            w.check(&case(
                format!("{name} header complete"),
                whole.frame(),
                TX,
                Out::Bytes(out),
                MISS_TX,
            ));
            n += 1;
        }
        for (name, p) in [
            (
                "icmp v4",
                Packet::icmp(c4, v4(10, 0, 0, 10), 8, 0, [0; 4], vec![]),
            ),
            (
                "icmp v6",
                Packet::icmp(c6, v6("fd00::10"), 128, 0, [0; 4], vec![]),
            ),
        ] {
            for k in 0..8 {
                let reason = if k == 0 && p.dst.is_ipv6() {
                    DropReason::MalformedL3
                } else {
                    DropReason::MalformedL4
                };
                w.check(&case(
                    format!("{name} header cut at {k}"),
                    cut_l4(&p, k).frame(),
                    DROP,
                    Out::Same,
                    &dropped(reason),
                ));
                n += 1;
            }
        }
        // the quoted header of an ICMP error, cut at every length short of header + 8
        for (name, quoted, need) in [
            ("frag-needed", &quoted4, 28usize),
            ("packet-too-big", &quoted6, 48),
        ] {
            let full = icmp_error(
                quoted,
                if need == 28 { 3 } else { 2 },
                if need == 28 { 4 } else { 0 },
            );
            for k in 0..need {
                let q = cut_l4(&full, 8 + k);
                w.check(&case(
                    format!("{name} quote cut at {k}"),
                    q.frame(),
                    DROP,
                    Out::Same,
                    &dropped(DropReason::MalformedL4),
                ));
                n += 1;
            }
        }
        // an IPv6 extension header cut at every length (hop-by-hop of 16 bytes)
        let mut p = tcp(c6, 7200, &vips::tcp6(), SYN);
        p.ext = vec![Ext::HopByHop(1)];
        let ip = p.ip_bytes();
        for k in 0..16 {
            let mut q = p.clone();
            q.ext = Vec::new();
            q.l4 = L4::Raw {
                proto: 0,
                bytes: ip[40..40 + k].to_vec(),
            };
            w.check(&case(
                format!("hop-by-hop cut at {k}"),
                q.frame(),
                DROP,
                Out::Same,
                &dropped(DropReason::MalformedL3),
            ));
            n += 1;
        }
        // IPv4 options cut: IHL says more than the packet holds
        let mut p = tcp(c4, 7201, &vips::tcp4(), SYN);
        p.ipv4_options = vec![1; 8];
        let full = p.frame();
        for tot in 20..28u16 {
            let mut f = full[..14 + usize::from(tot)].to_vec();
            f[16..18].copy_from_slice(&tot.to_be_bytes());
            w.check(&case(
                format!("IPv4 options cut at {}", tot - 20),
                f,
                DROP,
                Out::Same,
                &dropped(DropReason::MalformedL3),
            ));
            n += 1;
        }
        // padding may be cut anywhere: the IP packet is whole
        let mut p = udp(c4, 7202, &vips::udp4());
        p.padding = 6;
        for pad in 0..=6 {
            let mut q = p.clone();
            q.padding = pad;
            let (_, out) = w.via_maglev(&q, &vips::udp4());
            let counters: &[(Stat, u64)] = if pad == 0 {
                MISS_TX
            } else {
                &[(Stat::C(Counter::ActTx), 1), (Stat::C(Counter::CtHit), 1)]
            };
            w.check(&case(
                format!("padding cut to {pad}"),
                q.frame(),
                TX,
                Out::Bytes(out),
                counters,
            ));
            n += 1;
        }
        println!("{n} truncation cases passed");
    });
}

/// xorshift64*: a small deterministic generator for the mutation test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn mutated_frames_always_end_in_exactly_one_action() {
    with_world("mutate", ConntrackMode::PerCpu, |w| {
        let c4 = client4();
        let c6 = client6();
        let mut v6ext = tcp(c6, 1, &vips::tcp6(), SYN);
        v6ext.ext = vec![
            Ext::HopByHop(0),
            Ext::Fragment {
                offset: 0,
                more: false,
                id: 3,
            },
        ];
        let mut opts4 = udp(c4, 2, &vips::udp4());
        opts4.ipv4_options = vec![1, 1, 1, 1];
        opts4.vlan = Some(9);
        let seeds: Vec<Vec<u8>> = vec![
            tcp(c4, 3, &vips::tcp4(), ACK).frame(),
            opts4.frame(),
            v6ext.frame(),
            tcp(c4, 4, &vips::gue4(), SYN).frame(),
            udp(c6, 5, &vips::udp6()).frame(),
            icmp_error(&Packet::tcp(v4(10, 0, 0, 10), 80, c4, 6, ACK), 3, 4).frame(),
            icmp_error(&Packet::udp(v6("fd00::10"), 53, c6, 7), 2, 0).frame(),
            Packet::icmp(c4, v4(10, 0, 0, 10), 8, 0, [0; 4], vec![1; 9]).frame(),
        ];
        let mut rng = Rng(0x5eed_5ca1_ab1e);
        let before = w.fwd.maps().counters().unwrap();
        let n = 20_000;
        let mut actions = [0u64; 5];
        for _ in 0..n {
            let mut f = seeds[rng.below(seeds.len())].clone();
            for _ in 0..1 + rng.below(4) {
                match rng.below(4) {
                    0 => {
                        let i = rng.below(f.len().min(80));
                        f[i] = rng.next() as u8;
                    }
                    1 => {
                        let i = 12 + rng.below(f.len().min(80) - 12);
                        f[i] ^= 1 << rng.below(8);
                    }
                    2 => {
                        let cut = 14 + rng.below(f.len() - 13);
                        f.truncate(cut.max(14));
                    }
                    _ => f.extend((0..rng.below(16)).map(|_| rng.next() as u8)),
                }
            }
            let out = w
                .fwd
                .test_run(
                    &f,
                    stator_xdp::testrun::TestRunOpts {
                        ingress_ifindex: w.lbin,
                        ..Default::default()
                    },
                )
                .unwrap();
            assert!(
                (1..=4).contains(&out.action),
                "action {} for {}",
                out.action,
                hex(&f)
            );
            actions[out.action as usize] += 1;
        }
        let d = w.fwd.maps().counters().unwrap().since(&before);
        use stator_abi::Counter::*;
        let acts = [ActDrop, ActPass, ActTx, ActRedirect].map(|c| d.get(c));
        assert_eq!(acts.iter().sum::<u64>(), n, "one action counter per packet");
        assert_eq!(
            acts,
            [actions[1], actions[2], actions[3], actions[4]],
            "counters = verdicts"
        );
        assert_eq!(d.get(ActAborted), 0);
        let drops: u64 = d.iter_drops().map(|(_, v)| v).sum();
        assert_eq!(drops, d.get(ActDrop), "one drop reason per drop");
        println!(
            "{n} mutated frames: drop {} pass {} tx {} redirect {}; {:?}",
            actions[1],
            actions[2],
            actions[3],
            actions[4],
            d.nonzero()
        );
    });
}
