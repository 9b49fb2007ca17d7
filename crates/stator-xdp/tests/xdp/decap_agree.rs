//! The two ends agree: whatever the real forwarder program (and `stator-core`, the Rust model of
//! the same decision) sends to a backend, the decap program turns back into the client's packet,
//! byte for byte, for every encapsulation and every combination of inner and outer family.
//! Needs root: the forwarder runs in a namespace where `bpf_fib_lookup` answers (tests/common).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::net::IpAddr;

use stator_abi::{DecapCounter, Encap};
use stator_core::{
    Action, BackendSpec, CompiledSnapshot, Forwarder as CoreForwarder, ForwarderConfig, NextHop,
    NodeParams, PacketBuf, Proto, Snapshot, SnapshotBuilder, StaticFib, VecPacketBuf,
};
use stator_testkit::{Packet, tcp_flags};
use stator_xdp::testrun::TestRunOpts;
use stator_xdp::{ConntrackMode, Decap, DecapConfig, DecapOptions, Forwarder};

use crate::common::{GW_MAC, Lab, PinDir, SRC_V4, src_v6, v4, v6};

const PASS: u32 = 2;
const TX: u32 = 3;

/// (VIP, backend, encapsulation): every encapsulation, to a backend of each family, from a
/// VIP of each family.
fn routes() -> Vec<(IpAddr, IpAddr, Encap)> {
    let mut r = Vec::new();
    let encaps = [Encap::Gre, Encap::Ipip, Encap::Gue];
    for (i, e) in encaps.iter().enumerate() {
        let i = i as u8;
        r.push((v4(10, 0, 0, 10 + i), v4(10, 20, 0, 1 + i), *e)); // 4 in 4
        r.push((v4(10, 0, 0, 20 + i), v6(&format!("fd20::{}", 1 + i)), *e)); // 4 in 6
        r.push((
            v6(&format!("fd00::{:x}", 0x10 + i)),
            v6(&format!("fd20::{:x}", 0x11 + i)),
            *e,
        )); // 6 in 6
        r.push((
            v6(&format!("fd00::{:x}", 0x20 + i)),
            v4(10, 20, 0, 11 + i),
            *e,
        )); // 6 in 4
    }
    r
}

fn snapshot() -> Snapshot {
    let node = NodeParams {
        src_v4: Some(SRC_V4),
        src_v6: Some(src_v6()),
        ..NodeParams::default()
    };
    let mut s = SnapshotBuilder::new(node).generation(1);
    for (vip, backend, encap) in routes() {
        s = s.vip(
            vip,
            80,
            Proto::Tcp,
            7,
            vec![BackendSpec::new(backend).encap(encap)],
        );
        s = s.vip(
            vip,
            53,
            Proto::Udp,
            7,
            vec![BackendSpec::new(backend).encap(encap)],
        );
    }
    s.build().unwrap()
}

/// Client packets to every VIP: TCP SYN with data, TCP ACK with ECN and padding, UDP.
fn client_packets() -> Vec<(Packet, Encap)> {
    let mut out = Vec::new();
    for (i, (vip, _, encap)) in routes().into_iter().enumerate() {
        let client = if vip.is_ipv6() {
            v6("2001:db8::7")
        } else {
            v4(198, 51, 100, 7)
        };
        let port = 40_000 + i as u16;
        out.push((
            Packet::tcp(client, port, vip, 80, tcp_flags::SYN).with_payload(b"GET / HTTP/1.0\r\n"),
            encap,
        ));
        let mut p = Packet::tcp(client, port + 100, vip, 80, tcp_flags::ACK);
        p.tos = 0x2a; // DSCP 10, ECT(0)
        p.padding = 6;
        out.push((p, encap));
        out.push((Packet::udp(client, port + 200, vip, 53), encap));
    }
    out
}

fn kind(e: Encap) -> DecapCounter {
    match e {
        Encap::Gre => DecapCounter::Gre,
        Encap::Ipip => DecapCounter::Ipip,
        Encap::Gue => DecapCounter::Gue,
    }
}

/// Runs `encapsulated` through the decap program and checks that it gives back the client's
/// packet behind the encapsulated frame's own MAC addresses.
fn check_round_trip(decap: &Decap, what: &str, client: &Packet, encapsulated: &[u8], e: Encap) {
    let before = decap.counters().unwrap();
    let out = decap
        .test_run(encapsulated, TestRunOpts::default())
        .unwrap();
    let delta = decap.counters().unwrap().since(&before);
    assert_eq!(out.action, PASS, "{what}: {:?}", delta.nonzero());
    assert_eq!(delta.nonzero(), vec![(kind(e).label(), 1)], "{what}");
    let mut want = encapsulated[..12].to_vec();
    want.extend_from_slice(if client.dst.is_ipv6() {
        &[0x86, 0xdd]
    } else {
        &[0x08, 0x00]
    });
    want.extend_from_slice(&client.ip_bytes());
    want.extend(std::iter::repeat_n(0, client.padding));
    assert_eq!(
        out.data, want,
        "{what}: the decapsulated frame is the client's packet"
    );
}

/// A decap pin directory, purged on drop (PinDir purges the forwarder's maps only).
struct DecapPin(PinDir);

impl Drop for DecapPin {
    fn drop(&mut self) {
        let _ = stator_xdp::decap_purge(self.0.path());
    }
}

/// A decap program that accepts exactly the backends of the snapshot.
fn decap(pin: &DecapPin) -> Decap {
    let mut d = Decap::load(&DecapOptions::with_pin_path(pin.0.path())).unwrap();
    d.configure(&DecapConfig {
        addrs: routes().into_iter().map(|(_, b, _)| b).collect(),
        ..DecapConfig::default()
    })
    .unwrap();
    d
}

#[test]
fn what_the_xdp_forwarder_sends_decapsulates_to_the_clients_packet() {
    let lab = Lab::new("agree");
    let fwd_pin = PinDir::new("agree-fwd");
    let dec_pin = DecapPin(PinDir::new("agree-dec"));
    let opts = fwd_pin.options(ConntrackMode::PerCpu);
    let (ifindex, lbin_mac) = (lab.lbin, lab.lbin_mac);
    let decap = decap(&dec_pin);
    let outputs = lab.run(move || {
        let mut fwd = Forwarder::load(&opts).unwrap();
        fwd.commit(&common::valid(&snapshot())).unwrap();
        client_packets()
            .into_iter()
            .map(|(p, e)| {
                let out = fwd
                    .test_run(
                        &p.frame(),
                        TestRunOpts {
                            ingress_ifindex: ifindex,
                            ..TestRunOpts::default()
                        },
                    )
                    .unwrap();
                (p, e, out)
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(outputs.len(), 36);
    for (p, e, out) in outputs {
        let what = format!("{e:?}, {} → {} (xdp)", p.src, p.dst);
        assert_eq!(out.action, TX, "{what}: the forwarder transmits");
        assert_eq!(&out.data[..6], &GW_MAC, "{what}");
        assert_eq!(&out.data[6..12], &lbin_mac, "{what}");
        check_round_trip(&decap, &what, &p, &out.data, e);
    }
}

#[test]
fn what_stator_core_sends_decapsulates_to_the_clients_packet() {
    common::require_root();
    let dec_pin = DecapPin(PinDir::new("agree-core"));
    let decap = decap(&dec_pin);
    let snap = CompiledSnapshot::new(&common::valid(&snapshot()));
    let hop = NextHop {
        ifindex: 2,
        src_mac: [0x02, 0, 0, 0, 0, 0x0a],
        dst_mac: [0x02, 0, 0, 0, 0, 0x0b],
        mtu: 1500,
    };
    let fib = StaticFib::new()
        .default_route(v4(0, 0, 0, 0), Ok(hop))
        .default_route(v6("::"), Ok(hop));
    let mut fwd = CoreForwarder::new(ForwarderConfig::default());
    for (i, (p, e)) in client_packets().into_iter().enumerate() {
        let mut frame = VecPacketBuf::with_xdp_headroom(&p.frame());
        let v = fwd.process(&snap, 1_000_000_000 + i as u64, 0, 2, &fib, &mut frame);
        let what = format!("{e:?}, {} → {} (core)", p.src, p.dst);
        assert_eq!(v.action, Action::Tx, "{what}");
        check_round_trip(&decap, &what, &p, frame.data(), e);
    }
}
