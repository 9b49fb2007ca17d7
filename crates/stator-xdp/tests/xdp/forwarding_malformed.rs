//! Malformed frames through the XDP forwarder by BPF_PROG_TEST_RUN: every header cut at every
//! length (lengths consistent) and randomly mutated frames, each ending in exactly one action
//! with its counters. Needs root; runs inside a network namespace where bpf_fib_lookup has
//! routes and static neighbours (tests/common).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use stator_testkit::{Ext, L4, Packet};
use stator_xdp::ConntrackMode;

use crate::common::{v4, v6};
use crate::fixtures::*;

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
