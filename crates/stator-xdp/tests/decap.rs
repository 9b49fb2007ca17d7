//! Fixture tests of the decap program (docs/decap.md) through BPF_PROG_TEST_RUN: every
//! encapsulation and family combination with its exact output bytes, GRE and GUE options,
//! rejections with one reason each, traffic that must pass untouched, the address filter,
//! every cut length of every header, and the attach/detach life cycle. Every case also checks
//! the exact counter deltas: one outcome per packet, one reason per rejection. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

mod tunnel;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use stator_abi::DecapCounter as C;
use stator_lab::netns::{self, Netns};
use stator_testkit::{Ext, L4, Packet, arp_frame, inet_checksum, tcp_flags};
use stator_xdp::testrun::TestRunOpts;
use stator_xdp::{AttachMode, Decap, DecapConfig, DecapCounters, DecapOptions, XdpError, XdpMode};

use tunnel::{GRE_C, GRE_K, GRE_R, GRE_S, GUE_PORT, Spec, Tunnel};

const DROP: u32 = 1;
const PASS: u32 = 2;

fn require_root() {
    assert!(
        stator_xdp::is_root(),
        "this test loads BPF programs: it needs root (CAP_BPF, CAP_NET_ADMIN); run `cargo test` \
         as root"
    );
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn pin_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/sys/fs/bpf/stator-test-{}-{}-{tag}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A loaded decap program with its own pin directory, removed on drop.
struct Fixture {
    decap: Decap,
    pin: PathBuf,
}

/// What one run did.
#[derive(Debug)]
struct Run {
    action: u32,
    data: Vec<u8>,
    delta: DecapCounters,
}

impl Fixture {
    fn new(tag: &str, cfg: &DecapConfig) -> Self {
        require_root();
        let pin = pin_dir(tag);
        let mut decap = Decap::load(&DecapOptions::with_pin_path(&pin)).expect("load stator_decap");
        decap.configure(cfg).expect("configure");
        Self { decap, pin }
    }

    fn any() -> Self {
        Self::new("any", &DecapConfig::default())
    }

    fn run(&self, frame: &[u8]) -> Run {
        let before = self.decap.counters().unwrap();
        let out = self
            .decap
            .test_run(frame, TestRunOpts::default())
            .expect("BPF_PROG_TEST_RUN");
        let delta = self.decap.counters().unwrap().since(&before);
        assert_eq!(
            delta.packets(),
            1,
            "exactly one outcome: {:?}",
            delta.nonzero()
        );
        let reasons: u64 = delta
            .iter()
            .filter(|(c, _)| !c.is_outcome())
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            reasons,
            delta.get(C::Rejected),
            "one reason per rejection: {:?}",
            delta.nonzero()
        );
        Run {
            action: out.action,
            data: out.data,
            delta,
        }
    }

    fn expect_decap(&self, name: &str, spec: &Spec, kind: C) {
        let r = self.run(&spec.frame());
        assert_eq!(r.action, PASS, "{name}: action ({:?})", r.delta.nonzero());
        assert_eq!(
            r.delta.nonzero(),
            vec![(kind.label(), 1)],
            "{name}: counters"
        );
        assert_eq!(hex(&r.data), hex(&spec.expected()), "{name}: output");
    }

    fn expect_reject(&self, name: &str, frame: &[u8], reason: C) {
        let r = self.run(frame);
        assert_eq!(r.action, DROP, "{name}: action ({:?})", r.delta.nonzero());
        assert_eq!(
            r.delta.nonzero(),
            vec![("rejected", 1), (reason.label(), 1)],
            "{name}: counters"
        );
    }

    fn expect_pass(&self, name: &str, frame: &[u8], why: C) {
        let r = self.run(frame);
        assert_eq!(r.action, PASS, "{name}: action ({:?})", r.delta.nonzero());
        assert_eq!(
            r.delta.nonzero(),
            vec![(why.label(), 1)],
            "{name}: counters"
        );
        assert_eq!(hex(&r.data), hex(frame), "{name}: must pass untouched");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.pin);
        let _ = stator_xdp::decap_purge(&self.pin);
    }
}

/// An error and its sources, as an operator reads them.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}
fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
}

/// The load balancer (outer source) and this backend (outer destination).
fn lb(v6_: bool) -> IpAddr {
    if v6_ { v6("fd10::1") } else { v4(10, 10, 0, 1) }
}
fn backend(v6_: bool) -> IpAddr {
    if v6_ { v6("fd20::1") } else { v4(10, 20, 0, 1) }
}

/// Inner packets: a TCP SYN with data from a client to the VIP, v4 or v6.
fn inner(v6_: bool) -> Vec<u8> {
    if v6_ {
        Packet::udp(v6("2001:db8::7"), 40000, v6("fd00::10"), 53)
            .with_payload(b"query")
            .ip_bytes()
    } else {
        Packet::tcp(
            v4(198, 51, 100, 7),
            40000,
            v4(10, 0, 0, 10),
            80,
            tcp_flags::SYN,
        )
        .with_payload(b"hello")
        .ip_bytes()
    }
}

fn spec(outer_v6: bool, tunnel: Tunnel, inner_v6: bool) -> Spec {
    Spec::new(lb(outer_v6), backend(outer_v6), tunnel, inner(inner_v6))
}

fn kind_of(t: &Tunnel) -> C {
    match t {
        Tunnel::Gre { .. } => C::Gre,
        Tunnel::Ipip { .. } => C::Ipip,
        _ => C::Gue,
    }
}

/// Every tunnel variant that must decapsulate.
fn good_tunnels() -> Vec<(&'static str, Tunnel)> {
    let gre = |flags: u16, opt: Vec<u32>| Tunnel::Gre {
        flags,
        ptype: None,
        opt,
    };
    vec![
        ("GRE", Tunnel::gre()),
        ("GRE + key", gre(GRE_K, vec![0xdead_beef])),
        ("GRE + sequence", gre(GRE_S, vec![7])),
        (
            "GRE + checksum (not verified)",
            gre(GRE_C, vec![0x1234_0000]),
        ),
        (
            "GRE + checksum + key + sequence",
            gre(GRE_C | GRE_K | GRE_S, vec![0x1234_0000, 42, 43]),
        ),
        (
            "GRE with strict-route, recursion and flag bits (ignored)",
            gre(0x0800 | 0x0700 | 0x00f8, vec![]),
        ),
        ("IPIP", Tunnel::ipip()),
        ("GUE variant 0", Tunnel::gue0()),
        (
            "GUE variant 0, 3 words of extension fields",
            Tunnel::Gue0 {
                ctl: false,
                hlen: 3,
                proto: None,
                flags: 0x8000,
            },
        ),
        ("GUE variant 1 (direct IP)", Tunnel::Gue1),
    ]
}

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

/// Patches `frame` at `off` with `bytes`.
fn patched(frame: &[u8], off: usize, bytes: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[off..off + bytes.len()].copy_from_slice(bytes);
    f
}

/// Recomputes the outer IPv4 header checksum (20-byte header at 14).
fn fix_ipv4_csum(mut f: Vec<u8>) -> Vec<u8> {
    f[24..26].copy_from_slice(&[0, 0]);
    let c = inet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn tunnel_packets_it_cannot_deliver_are_rejected_with_one_reason() {
    let fx = Fixture::any();
    let gre = |flags: u16, ptype: Option<u16>| Tunnel::Gre {
        flags,
        ptype,
        opt: vec![],
    };
    let raw = |b: &[u8]| Tunnel::GueRaw(b.to_vec());
    let mut cases: Vec<(String, Vec<u8>, C)> = Vec::new();
    for ov6 in [false, true] {
        let o = if ov6 { "v6" } else { "v4" };
        let f = |t: Tunnel, inner_v6: bool| spec(ov6, t, inner_v6).frame();
        cases.push((
            format!("{o}: GRE version 1 (PPTP)"),
            f(gre(1, None), false),
            C::GreUnsupported,
        ));
        cases.push((
            format!("{o}: GRE routing present"),
            f(gre(GRE_R, None), false),
            C::GreUnsupported,
        ));
        cases.push((
            format!("{o}: GRE carrying Ethernet (0x6558)"),
            f(gre(0, Some(0x6558)), false),
            C::GreUnsupported,
        ));
        cases.push((
            format!("{o}: GRE says IPv4, inner is IPv6"),
            f(gre(0, Some(0x0800)), true),
            C::BadInner,
        ));
        cases.push((
            format!("{o}: GRE says IPv6, inner is IPv4"),
            f(gre(0, Some(0x86dd)), false),
            C::BadInner,
        ));
        cases.push((
            format!("{o}: protocol 4, inner is IPv6"),
            f(Tunnel::Ipip { proto: Some(4) }, true),
            C::BadInner,
        ));
        cases.push((
            format!("{o}: protocol 41, inner is IPv4"),
            f(Tunnel::Ipip { proto: Some(41) }, false),
            C::BadInner,
        ));
        cases.push((
            format!("{o}: GUE control message"),
            f(
                Tunnel::Gue0 {
                    ctl: true,
                    hlen: 0,
                    proto: Some(0),
                    flags: 0,
                },
                false,
            ),
            C::GueUnsupported,
        ));
        cases.push((
            format!("{o}: GUE version 2"),
            f(raw(&[0x80, 4, 0, 0]), false),
            C::GueUnsupported,
        ));
        cases.push((
            format!("{o}: GUE version 3"),
            f(raw(&[0xc0, 4, 0, 0]), false),
            C::GueUnsupported,
        ));
        cases.push((
            format!("{o}: GUE carrying UDP"),
            f(
                Tunnel::Gue0 {
                    ctl: false,
                    hlen: 0,
                    proto: Some(17),
                    flags: 0,
                },
                false,
            ),
            C::GueUnsupported,
        ));
        cases.push((
            format!("{o}: GUE Hlen beyond the packet"),
            f(raw(&[0x1f, 4, 0, 0]), false),
            C::BadOuter,
        ));
        cases.push((
            format!("{o}: GUE says IPv6, inner is IPv4"),
            f(
                Tunnel::Gue0 {
                    ctl: false,
                    hlen: 0,
                    proto: Some(41),
                    flags: 0,
                },
                false,
            ),
            C::BadInner,
        ));
        // GUE variant 1 whose "IP version" is 5
        let mut s = spec(ov6, Tunnel::Gue1, false);
        s.inner[0] = 0x55;
        cases.push((
            format!("{o}: GUE variant 1, IP version 5"),
            s.frame(),
            C::GueUnsupported,
        ));
        // UDP length: too short for any payload, longer than the IP packet
        let s = spec(ov6, Tunnel::gue0(), false);
        let ulen = s.l4() + 4;
        cases.push((
            format!("{o}: UDP length 8"),
            patched(&s.frame(), ulen, &[0, 8]),
            C::BadOuter,
        ));
        cases.push((
            format!("{o}: UDP length beyond the IP packet"),
            patched(&s.frame(), ulen, &[0x10, 0]),
            C::BadOuter,
        ));
        // inner IPv4 header broken: IHL 4, total length beyond the tunnel payload
        let s = spec(ov6, Tunnel::gre(), false);
        let il3 = s.l4() + 4;
        cases.push((
            format!("{o}: inner IHL 4"),
            patched(&s.frame(), il3, &[0x44]),
            C::BadInner,
        ));
        cases.push((
            format!("{o}: inner total length too long"),
            patched(&s.frame(), il3 + 2, &[0x04, 0]),
            C::BadInner,
        ));
        cases.push((
            format!("{o}: inner total length below IHL"),
            patched(&s.frame(), il3 + 2, &[0, 16]),
            C::BadInner,
        ));
        let s = spec(ov6, Tunnel::gre(), true);
        let il3 = s.l4() + 4;
        cases.push((
            format!("{o}: inner IPv6 payload length too long"),
            patched(&s.frame(), il3 + 4, &[0x04, 0]),
            C::BadInner,
        ));
    }
    // outer IPv4 header problems (checksum recomputed unless it is the problem)
    let s = spec(false, Tunnel::gre(), false);
    let f = s.frame();
    cases.push((
        "outer v4: more fragments".into(),
        fix_ipv4_csum(patched(&f, 20, &[0x20, 0])),
        C::Fragment,
    ));
    cases.push((
        "outer v4: fragment offset".into(),
        fix_ipv4_csum(patched(&f, 20, &[0, 1])),
        C::Fragment,
    ));
    cases.push((
        "outer v4: bad header checksum".into(),
        patched(&f, 24, &[0x12, 0x34]),
        C::BadOuter,
    ));
    cases.push((
        "outer v4: IHL 4".into(),
        fix_ipv4_csum(patched(&f, 14, &[0x44])),
        C::BadOuter,
    ));
    cases.push((
        "outer v4: version 6".into(),
        fix_ipv4_csum(patched(&f, 14, &[0x65])),
        C::BadOuter,
    ));
    cases.push((
        "outer v4: total length < IHL".into(),
        fix_ipv4_csum(patched(&f, 16, &[0, 16])),
        C::BadOuter,
    ));
    let mut s = spec(false, Tunnel::ipip(), false);
    s.ipv4_options = vec![1, 1, 1, 0];
    cases.push((
        "outer v4: bad checksum over the options".into(),
        patched(&s.frame(), 34, &[7]),
        C::BadOuter,
    ));
    let s = spec(true, Tunnel::gre(), false);
    cases.push((
        "outer v6: version 4".into(),
        patched(&s.frame(), 14, &[0x40]),
        C::BadOuter,
    ));

    for (name, frame, reason) in &cases {
        fx.expect_reject(name, frame, *reason);
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

/// What a frame cut inside its outer payload must give (docs/decap.md): the payload of `n`
/// bytes (of `full`) with consistent lengths.
fn consistent_cut_outcome(s: &Spec, n: usize) -> C {
    let (_, hdr) = s.tunnel_header();
    let h = hdr.len();
    match &s.tunnel {
        t if t.is_udp() => {
            if n < 4 {
                C::Pass // the destination port cannot be read
            } else if n < h || n < 9 {
                C::BadOuter
            } else {
                C::BadInner
            }
        }
        Tunnel::Ipip { .. } if n == 0 && s.outer_dst.is_ipv6() => C::BadOuter, // payload length 0
        _ if n < h || (n == 0 && s.outer_dst.is_ipv6()) => C::BadOuter,
        _ => C::BadInner,
    }
}

#[test]
fn every_cut_length_is_passed_or_rejected_never_decapsulated() {
    let fx = Fixture::any();
    let mut checked = 0;
    let mut specs = Vec::new();
    for (name, t) in good_tunnels() {
        for ov6 in [false, true] {
            for iv6 in [false, true] {
                specs.push((name, spec(ov6, t.clone(), iv6)));
            }
        }
    }
    let mut tagged = spec(false, Tunnel::gue0(), true);
    tagged.vlan = Some(7);
    specs.push(("GUE behind 802.1Q", tagged));

    for (name, s) in &specs {
        let full = s.frame();
        let l3 = s.l3();
        let fixed = if s.outer_dst.is_ipv6() { 40 } else { 20 };
        // 1. the frame cut short, lengths as they were: the outer IP length no longer fits
        for cut in 14..full.len() {
            let f = &full[..cut];
            let r = fx.run(f);
            let unreadable = cut < l3 + fixed || (s.tunnel.is_udp() && cut < s.l4() + 4);
            if unreadable {
                assert_eq!(r.action, PASS, "{name} cut at {cut}");
                assert_eq!(r.delta.nonzero(), vec![("pass", 1)], "{name} cut at {cut}");
                assert_eq!(r.data, f, "{name} cut at {cut}: untouched");
            } else {
                assert_eq!(r.action, DROP, "{name} cut at {cut}");
                assert_eq!(
                    r.delta.nonzero(),
                    vec![("rejected", 1), ("bad_outer", 1)],
                    "{name} cut at {cut}"
                );
            }
            checked += 1;
        }
        // 2. the outer payload cut, every length field consistent with the cut
        let payload_len = s.payload().len();
        for n in 0..payload_len {
            let f = s.consistent_cut(n);
            let want = consistent_cut_outcome(s, n);
            let r = fx.run(&f);
            if want == C::Pass {
                assert_eq!(r.action, PASS, "{name} payload cut to {n}");
                assert_eq!(r.data, f, "{name} payload cut to {n}: untouched");
                assert_eq!(
                    r.delta.nonzero(),
                    vec![("pass", 1)],
                    "{name} payload cut to {n}"
                );
            } else {
                assert_eq!(r.action, DROP, "{name} payload cut to {n}");
                assert_eq!(
                    r.delta.nonzero(),
                    vec![("rejected", 1), (want.label(), 1)],
                    "{name} payload cut to {n}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 5000, "{checked} frames");
}

/// Attach, re-attach (the program is swapped into the pinned link), status, detach, purge —
/// on a veth pair in a namespace of its own.
/// Deletes a namespace and a decap pin directory when dropped, also when the test panics.
struct Cleanup {
    ns: Netns,
    pin: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.pin);
        let _ = stator_xdp::decap_purge(&self.pin);
        let _ = self.ns.clone().delete();
    }
}

#[test]
fn attach_reattach_status_detach() {
    require_root();
    let ns = Netns::create(&format!("stdc{}", std::process::id())).unwrap();
    let guard = Cleanup {
        ns: ns.clone(),
        pin: pin_dir("attach"),
    };
    netns::veth(&ns, "dca", &ns, "dcb").unwrap();
    ns.ip(["link", "add", "dcbr", "type", "bridge"]).unwrap();
    let p = guard.pin.clone();
    ns.run_in(move || {
        let cfg = DecapConfig {
            addrs: [v4(10, 20, 0, 1)].into_iter().collect(),
            gue_port: Some(6080),
        };
        let mut d = Decap::load(&DecapOptions::with_pin_path(&p)).unwrap();
        d.configure(&cfg).unwrap();
        let a = d.attach("dca").unwrap();
        assert_eq!(a.mode, XdpMode::Native, "veth supports native XDP");
        assert!(!a.replaced);
        let first_prog = a.prog_id;

        // a second run (e.g. an upgrade) reuses the maps and swaps its program into the link
        let mut d2 = Decap::load(&DecapOptions::with_pin_path(&p)).unwrap();
        assert_eq!(
            d2.config().unwrap(),
            cfg,
            "the configuration survives in the pinned maps"
        );
        let b = d2.attach("dca").unwrap();
        assert!(b.replaced, "re-attach uses the pinned link");
        assert_ne!(b.prog_id, first_prog);

        // generic mode on the other end
        let mut g = Decap::load(&DecapOptions {
            pin_path: p.clone(),
            attach_mode: AttachMode::Generic,
        })
        .unwrap();
        assert_eq!(g.attach("dcb").unwrap().mode, XdpMode::Generic);

        let st = stator_xdp::decap_status(&p).unwrap();
        let ifaces: Vec<_> = st.attachments.iter().map(|a| a.iface.as_str()).collect();
        assert_eq!(ifaces, ["dca", "dcb"]);
        assert_eq!(st.config, cfg);

        match g.attach("nosuchdev") {
            Err(XdpError::InterfaceMissing { iface }) => assert_eq!(iface, "nosuchdev"),
            other => panic!("expected InterfaceMissing, got {other:?}"),
        }
        // a bridge has no native XDP: `native` insists and says so
        let mut n = Decap::load(&DecapOptions {
            pin_path: p.clone(),
            attach_mode: AttachMode::Native,
        })
        .unwrap();
        match n.attach("dcbr") {
            Err(e @ XdpError::XdpUnsupported { .. }) => {
                assert!(e.to_string().contains("native mode"), "{e}");
            }
            other => panic!("expected XdpUnsupported, got {other:?}"),
        }
        let purge = chain(&stator_xdp::decap_purge(&p).unwrap_err());
        assert!(purge.contains("still attached to dca, dcb"), "{purge}");
        drop((d, d2, g, n));

        // the links outlive the loader objects
        assert_eq!(stator_xdp::decap_status(&p).unwrap().attachments.len(), 2);
        assert_eq!(stator_xdp::detach_all(&p).unwrap(), ["dca", "dcb"]);
        stator_xdp::decap_purge(&p).unwrap();
        assert!(!p.exists(), "purge removes the pin directory");
    })
    .unwrap();
    drop(guard);
}

#[test]
fn a_pin_path_outside_bpffs_gets_a_bpffs_mounted_there() {
    require_root();
    let dir = std::env::temp_dir().join(format!("stator-decap-nobpffs-{}", std::process::id()));
    let pins = dir.join("pins");
    let fs_type = |p: &std::path::Path| {
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(p)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    std::fs::create_dir_all(&dir).unwrap();
    assert_ne!(fs_type(&dir), "bpf_fs");
    let decap = Decap::load(&DecapOptions::with_pin_path(&pins));
    let mounted = fs_type(&pins);
    let loaded = decap.as_ref().map(|_| ()).map_err(ToString::to_string);
    // Unmount before asserting, so a failure leaves nothing behind.
    drop(decap);
    let _ = std::process::Command::new("umount").arg(&pins).status();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(loaded, Ok(()));
    assert_eq!(
        mounted, "bpf_fs",
        "the loader mounts a bpffs at the pin path itself"
    );
}
