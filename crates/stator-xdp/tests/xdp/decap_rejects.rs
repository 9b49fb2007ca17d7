//! The decap program's rejections through BPF_PROG_TEST_RUN (docs/decap.md): every tunnel
//! packet it cannot deliver is dropped with exactly one reason, and every cut length of every
//! header is passed or rejected, never decapsulated. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::decap_fixture;
#[allow(unused_imports)]
use crate::tunnel;

use stator_abi::DecapCounter as C;
use stator_testkit::inet_checksum;

use crate::decap_fixture::*;
use crate::tunnel::{GRE_R, Spec, Tunnel};

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
