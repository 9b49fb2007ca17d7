//! Second chance on the backend (docs/decap.md §7): the decap program, run by
//! BPF_PROG_TEST_RUN on an interface of a namespace that holds real TCP sockets, delivers a
//! second-chance packet whose connection a socket here owns, passes one that no socket owns on
//! to the previous backend named in its GUE private data (rewritten byte for byte as the
//! contract says, XDP_TX or XDP_REDIRECT by the FIB's answer), delivers a packet already passed
//! on whatever the lookup says, and counts every step — for IPv4 and IPv6.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};

use stator_abi::DecapCounter as C;
use stator_testkit::{Packet, inet_checksum, tcp_flags};
use stator_xdp::testrun::TestRunOpts;
use stator_xdp::{DecapConfig, DecapCounters, SecondChance};

use crate::common::{GW_MAC, GW2_MAC, Lab, SRC_V4, src_v6, v4, v6};
use crate::decap_fixture::{DROP, Fixture, PASS};
use crate::tunnel::{Spec, Tunnel};

const TX: u32 = 3;
const REDIRECT: u32 = 4;
const VIP_PORT: u16 = 8080;

/// GUE variant 0 with a second chance naming `prev` at `hop` (docs/forwarding.md §12.3).
fn sc_header(prev: IpAddr, hop: u8) -> Vec<u8> {
    let (family, hlen, addr) = match prev {
        IpAddr::V4(a) => (4u8, 2u8, a.octets().to_vec()),
        IpAddr::V6(a) => (6u8, 5u8, a.octets().to_vec()),
    };
    sc_raw(hlen, family, hop, &addr)
}

fn sc_raw(hlen: u8, family: u8, hop: u8, addr: &[u8]) -> Vec<u8> {
    let mut g = vec![hlen, 0, 0, 0]; // protocol filled in by `frame`
    g.extend_from_slice(&[0x53, 0x43, family, hop]);
    g.extend_from_slice(addr);
    g
}

/// A tunnel frame from `outer_src` to this backend carrying `inner` behind GUE header `gue`.
fn frame(outer_src: IpAddr, gue: &[u8], inner: &Packet) -> Spec {
    let inner = inner.ip_bytes();
    let mut gue = gue.to_vec();
    gue[1] = if inner[0] >> 4 == 6 { 41 } else { 4 };
    let outer_dst = if outer_src.is_ipv6() {
        IpAddr::V6(src_v6())
    } else {
        IpAddr::V4(SRC_V4)
    };
    Spec::new(outer_src, outer_dst, Tunnel::GueRaw(gue), inner)
}

struct Run {
    action: u32,
    data: Vec<u8>,
    delta: DecapCounters,
}

fn run(fx: &Fixture, ifindex: u32, spec: &Spec) -> Run {
    let before = fx.decap.counters().unwrap();
    let out = fx
        .decap
        .test_run(
            &spec.frame(),
            TestRunOpts {
                ingress_ifindex: ifindex,
                ..TestRunOpts::default()
            },
        )
        .expect("BPF_PROG_TEST_RUN");
    let delta = fx.decap.counters().unwrap().since(&before);
    assert_eq!(delta.packets(), 1, "one outcome: {:?}", delta.nonzero());
    Run {
        action: out.action,
        data: out.data,
        delta,
    }
}

/// Delivered here, decapsulated, counted `gue` and `detail` (or nothing more).
fn expect_here(fx: &Fixture, ifindex: u32, name: &str, spec: &Spec, detail: Option<C>) {
    let r = run(fx, ifindex, spec);
    assert_eq!(r.action, PASS, "{name}: action ({:?})", r.delta.nonzero());
    let mut want = vec![(C::Gue.label(), 1)];
    want.extend(detail.map(|d| (d.label(), 1)));
    want.sort();
    let mut got = r.delta.nonzero();
    got.sort();
    assert_eq!(got, want, "{name}: counters");
    assert_eq!(
        r.data,
        spec.expected(),
        "{name}: the inner packet, decapsulated"
    );
}

/// Passed on to `prev`: `action` with these MAC addresses, the frame rewritten exactly as §7
/// says.
fn expect_passed_on(
    fx: &Fixture,
    ifindex: u32,
    name: &str,
    spec: &Spec,
    prev: IpAddr,
    (action, dmac, smac): (u32, [u8; 6], [u8; 6]),
) {
    let r = run(fx, ifindex, spec);
    assert_eq!(r.action, action, "{name}: action ({:?})", r.delta.nonzero());
    assert_eq!(
        r.delta.nonzero(),
        vec![(C::ScForwarded.label(), 1)],
        "{name}"
    );
    let mut want = spec.frame();
    want[..6].copy_from_slice(&dmac);
    want[6..12].copy_from_slice(&smac);
    let (l3, l4) = (spec.l3(), spec.l4());
    match prev {
        IpAddr::V4(p) => {
            want[l3 + 8] = 64; // TTL
            want[l3 + 12..l3 + 16].copy_from_slice(&SRC_V4.octets());
            want[l3 + 16..l3 + 20].copy_from_slice(&p.octets());
            want[l3 + 10..l3 + 12].fill(0);
            let c = inet_checksum(&want[l3..l3 + 20]);
            want[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        IpAddr::V6(p) => {
            want[l3 + 7] = 64; // hop limit
            want[l3 + 8..l3 + 24].copy_from_slice(&src_v6().octets());
            want[l3 + 24..l3 + 40].copy_from_slice(&p.octets());
        }
    }
    want[l4 + 6..l4 + 8].fill(0); // UDP checksum
    want[l4 + 8 + 4 + 3] = 1; // hop
    assert_eq!(r.data, want, "{name}: the frame passed on");
}

fn expect_rejected(fx: &Fixture, ifindex: u32, name: &str, spec: &Spec, reason: C) {
    let r = run(fx, ifindex, spec);
    assert_eq!(r.action, DROP, "{name}: action ({:?})", r.delta.nonzero());
    let mut got = r.delta.nonzero();
    got.sort();
    let mut want = vec![(C::Rejected.label(), 1), (reason.label(), 1)];
    want.sort();
    assert_eq!(got, want, "{name}: counters");
}

/// A TCP connection to `vip` on this namespace's `lo`, from `vip` itself (the source the
/// kernel picks): the listener and both ends (kept open), and the client's port.
fn connection(vip: IpAddr) -> (TcpListener, TcpStream, TcpStream, u16) {
    let listener = TcpListener::bind(SocketAddr::new(vip, VIP_PORT)).unwrap();
    let c = TcpStream::connect(SocketAddr::new(vip, VIP_PORT)).unwrap();
    assert_eq!(c.local_addr().unwrap().ip(), vip);
    let (s, _) = listener.accept().unwrap();
    let port = c.local_addr().unwrap().port();
    (listener, c, s, port)
}

#[test]
fn second_chance_delivers_what_is_here_and_passes_on_what_is_not() {
    let lab = Lab::new("dsc");
    let (lbin, lbin_mac, lbout_mac) = (lab.lbin, lab.lbin_mac, lab.lbout_mac);
    let ns = lab.ns.clone();
    for a in ["10.0.0.10/32", "fd00::10/128"] {
        ns.addr_add("lo", a).unwrap();
    }
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    lab.run(move || {
        let cfg = DecapConfig {
            second_chance: Some(SecondChance {
                from: [
                    "10.10.0.0/24".parse().unwrap(),
                    "fd10::/64".parse().unwrap(),
                ]
                .into_iter()
                .collect(),
                source_v4: Some(SRC_V4),
                source_v6: Some(src_v6()),
            }),
            ..DecapConfig::default()
        };
        let fx = Fixture::new("second-chance", &cfg);
        assert_eq!(fx.decap.config().unwrap(), cfg, "read back from the maps");
        let lb = lbin;
        let here = |name: &str, s: &Spec, d: Option<C>| expect_here(&fx, lb, name, s, d);
        let on = |name: &str, s: &Spec, prev: IpAddr, act: (u32, [u8; 6], [u8; 6])| {
            expect_passed_on(&fx, lb, name, s, prev, act)
        };
        let rejected = |name: &str, s: &Spec, reason: C| expect_rejected(&fx, lb, name, s, reason);

        for v6fam in [false, true] {
            let (vip, lbsrc, stranger) = if v6fam {
                (v6("fd00::10"), v6("fd10::2"), v6("fd30::2"))
            } else {
                (v4(10, 0, 0, 10), v4(10, 10, 0, 2), v4(10, 30, 0, 2))
            };
            let client = vip;
            let (prev, prev_out, prev_unrouted) = if v6fam {
                (v6("fd20::7"), v6("fd40::7"), v6("fd99::7"))
            } else {
                (v4(10, 20, 0, 7), v4(10, 40, 0, 7), v4(192, 0, 2, 7))
            };
            let (_l, _c, _s, port) = connection(vip);
            let ack = |sport: u16| Packet::tcp(client, sport, vip, VIP_PORT, tcp_flags::ACK);
            let other = port.wrapping_add(1).max(1024);
            let sc = |p: &Packet, hop: u8| frame(lbsrc, &sc_header(prev, hop), p);
            let tag = if v6fam { "v6" } else { "v4" };

            here(
                &format!("{tag} owned here"),
                &sc(&ack(port), 0),
                Some(C::ScLocal),
            );
            on(
                &format!("{tag} only a listener: passed on, egress = ingress"),
                &sc(&ack(other), 0),
                prev,
                (TX, GW_MAC, lbin_mac),
            );
            on(
                &format!("{tag} passed on through another interface"),
                &frame(lbsrc, &sc_header(prev_out, 0), &ack(other)),
                prev_out,
                (REDIRECT, GW2_MAC, lbout_mac),
            );
            rejected(
                &format!("{tag} no route to the previous backend"),
                &frame(lbsrc, &sc_header(prev_unrouted, 0), &ack(other)),
                C::ScFib,
            );
            here(
                &format!("{tag} hop 1, owned"),
                &sc(&ack(port), 1),
                Some(C::ScDelivered),
            );
            here(
                &format!("{tag} hop 1, nobody: never bounced back"),
                &sc(&ack(other), 1),
                Some(C::ScOrphan),
            );
            here(
                &format!("{tag} a SYN follows the new table"),
                &sc(
                    &Packet::tcp(client, other, vip, VIP_PORT, tcp_flags::SYN),
                    0,
                ),
                Some(C::ScNotTcp),
            );
            here(
                &format!("{tag} UDP is delivered"),
                &sc(&Packet::udp(client, other, vip, VIP_PORT), 0),
                Some(C::ScNotTcp),
            );
            here(
                &format!("{tag} from a source not allowed"),
                &frame(stranger, &sc_header(prev, 0), &ack(other)),
                Some(C::ScRefused),
            );
            here(
                &format!("{tag} hop 1 from another backend: delivered, whatever its source"),
                &frame(stranger, &sc_header(prev, 1), &ack(other)),
                Some(C::ScOrphan),
            );
            let wrong_family = if v6fam {
                sc_raw(5, 4, 0, &[0; 16])
            } else {
                sc_raw(2, 6, 0, &[10, 20, 0, 7])
            };
            here(
                &format!("{tag} family and length disagree"),
                &frame(lbsrc, &wrong_family, &ack(other)),
                Some(C::ScMalformed),
            );
            let mut not_sc = sc_header(prev, 0);
            not_sc[4] = 0x99; // other private data: skipped, as ever
            here(
                &format!("{tag} other private data"),
                &frame(lbsrc, &not_sc, &ack(other)),
                None,
            );
        }

        // too big for the route to 10.60/16 (MTU 200): rejected, not fragmented
        let big = Packet::tcp(
            v4(10, 0, 0, 10),
            999,
            v4(10, 0, 0, 10),
            VIP_PORT,
            tcp_flags::ACK,
        )
        .with_payload(&[0x5a; 300]);
        rejected(
            "too big for the way",
            &frame(v4(10, 10, 0, 2), &sc_header(v4(10, 60, 0, 7), 0), &big),
            C::ScMtu,
        );
        // an IPv6 backend named over an IPv4 tunnel cannot be reached in place
        let mixed = frame(
            v4(10, 10, 0, 2),
            &sc_header(v6("fd20::7"), 0),
            &Packet::tcp(
                v4(10, 0, 0, 10),
                999,
                v4(10, 0, 0, 10),
                VIP_PORT,
                tcp_flags::ACK,
            ),
        );
        here(
            "outer family differs from the previous backend's",
            &mixed,
            Some(C::ScMalformed),
        );

        // second chance off: every second chance is delivered here, counted refused
        let mut off = cfg.clone();
        off.second_chance = None;
        let mut fx = fx;
        fx.decap.configure(&off).unwrap();
        let orphan = frame(
            v4(10, 10, 0, 2),
            &sc_header(v4(10, 20, 0, 7), 0),
            &Packet::tcp(
                v4(10, 0, 0, 10),
                999,
                v4(10, 0, 0, 10),
                VIP_PORT,
                tcp_flags::ACK,
            ),
        );
        expect_here(&fx, lbin, "second chance off", &orphan, Some(C::ScRefused));
        // without a source of the family, a packet that would be passed on is delivered
        let mut no_v4 = cfg.clone();
        no_v4.second_chance.as_mut().unwrap().source_v4 = None;
        fx.decap.configure(&no_v4).unwrap();
        expect_here(&fx, lbin, "no IPv4 source", &orphan, Some(C::ScNoSource));
    });
}
