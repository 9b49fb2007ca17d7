//! ICMP through the XDP forwarder (docs/forwarding.md §6) by BPF_PROG_TEST_RUN: echo replies
//! to VIPs, errors about a flow reaching its backend, and the ones passed or dropped, each with
//! its action, output bytes and counter deltas. Needs root; runs inside a network namespace
//! where bpf_fib_lookup has routes and static neighbours (tests/common).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use stator_testkit::{L4, Packet};
use stator_xdp::ConntrackMode;

use crate::common::{v4, v6};
use crate::fixtures::*;

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
        // all zero but the type: RFC 1624 eqn. 3 alone gives 0x0000, only 0xffff verifies
        let req = Packet::icmp(c4, v4(10, 0, 0, 10), 8, 0, [0; 4], Vec::new());
        cases.push(case(
            "echo request v4, all zero",
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
