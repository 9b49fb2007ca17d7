//! Fixture tests of Maglev §4.2–4.4 in the XDP forwarder (docs/forwarding.md §3.1, §9–§11),
//! through BPF_PROG_TEST_RUN in the fixture lab: fragments (record, hit, hold — and the holder
//! thread running a held fragment again once its first arrives), redirects received, failover,
//! a group VIP matched by suffix in a cluster the node was never told about, and a traced
//! packet's report in `stator_trace`. Expected bytes are assembled by hand (tests/common).
//! Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use stator_abi::{Encap, STATOR_TRACE_MAGIC, TraceKind, TraceMark};
use stator_core::{BackendSpec, FragKey, HoldLimits, Proto, Snapshot, SnapshotBuilder};
use stator_testkit::{L4, Packet, tcp_flags};
use stator_xdp::{ConntrackMode, HoldRing, Holder, TraceRing};

use crate::common::expect;
use crate::common::{GW_MAC, SRC_V4, v4};
use crate::fixtures::*;
use stator_testkit::expect::{Outer, encapsulated};

/// The fixture snapshot plus: fragments on udp4, a failover address on empty4, and a group
/// VIP 10.100.1.1:80/tcp (class 1 = 10.100.0.0/16, an 8-bit suffix) over 10.20.0.9.
/// The tracer key the §4 snapshot's node holds.
const TRACE_KEY: [u8; 16] = *b"xdp-sec4-tracer!";

fn sec4_snapshot() -> Snapshot {
    let base = snapshot();
    let group_vip = key(v4(10, 100, 1, 1), 80, Proto::Tcp);
    let mut node = base.node;
    node.trace_keys = stator_abi::TraceKeys::from_keys(&[TRACE_KEY]);
    let mut b = SnapshotBuilder::new(node)
        .generation(2)
        .class(v4(10, 100, 0, 0), 16, 1)
        .failover(vips::empty4(), v4(10, 20, 0, 88))
        .group(group_vip, 1, 8);
    // the fixture's VIPs and reals, in the same order so that their ids stay
    for (k, v) in &base.vips {
        let reals: Vec<BackendSpec> = base
            .reals
            .values()
            .filter(|r| r.vip == v.id)
            .map(|r| BackendSpec::new(r.addr).encap(r.encap))
            .collect();
        let mut flags = v.flags;
        flags.fragments = *k == vips::udp4();
        b = b.vip_with_flags(*k, flags, v.table.len().max(7) as u32, reals);
    }
    b = b.vip(
        group_vip.addr,
        80,
        Proto::Tcp,
        7,
        vec![BackendSpec::new(v4(10, 20, 0, 9))],
    );
    b.build().expect("snapshot")
}

fn frag_key(src: IpAddr, id: u16) -> FragKey {
    let mut k = FragKey {
        id: u32::from(id).to_be_bytes(),
        proto: 17,
        family: 4,
        ..FragKey::default()
    };
    let IpAddr::V4(s) = src else { panic!() };
    k.src[..4].copy_from_slice(&s.octets());
    k.dst[..4].copy_from_slice(&[10, 0, 0, 10]);
    k
}

fn first(sport: u16, id: u16) -> Packet {
    let mut p = udp(client4(), sport, &vips::udp4()).with_payload(&[5; 24]);
    p.df = false;
    p.mf = true;
    p.ip_id = id;
    p
}

fn later(id: u16) -> Packet {
    let mut p = udp(client4(), 1, &vips::udp4());
    p.df = false;
    p.ip_id = id;
    p.frag_offset = 4;
    p.l4 = L4::Raw {
        proto: 17,
        bytes: vec![6; 40],
    };
    p
}

/// GRE with recursion control 1 from another node to `dst`, around `inner`.
fn redirect_frame(dst: IpAddr, inner: &Packet) -> Vec<u8> {
    let mut bytes = vec![1, 0, 0x08, 0x00];
    bytes.extend_from_slice(&inner.ip_bytes());
    let mut outer = Packet::udp(v4(10, 20, 0, 77), 1, dst, 1);
    outer.l4 = L4::Raw { proto: 47, bytes };
    outer.frame()
}

#[test]
fn fragments_redirects_groups_and_reports_in_xdp() {
    with_world("sec4", ConntrackMode::PerCpu, |w| {
        let snap = sec4_snapshot();
        w.fwd.commit(&common::valid(&snap)).expect("commit");
        w.snap = snap;
        let pins = w.fwd.options().pin_path.clone();
        let mut holds = HoldRing::open(&pins).expect("stator_hold");
        let mut traces = TraceRing::open(&pins).expect("stator_trace");
        let udp4 = vips::udp4();

        // §9: a first fragment is decided and recorded, the rest follow the record
        let p = first(7001, 0x4242);
        let h = hash_of(&p);
        let real = expect::maglev(&w.snap, &udp4, h);
        let out = w.forwarded(&p, &p.ip_bytes(), real, h);
        w.check(&case(
            "first fragment",
            p.frame(),
            TX,
            Out::Bytes(out),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
                (Stat::C(Counter::FragRecord), 1),
            ],
        ));
        let rec = w
            .fwd
            .maps()
            .frag_lookup(&frag_key(client4(), 0x4242))
            .unwrap()
            .expect("a record");
        assert_eq!((rec.real_id, rec.reason, rec.hash), (real.0, 0, h));
        let l = later(0x4242);
        let out = w.forwarded(&l, &l.ip_bytes(), real, h);
        w.check(&case(
            "later fragment",
            l.frame(),
            TX,
            Out::Bytes(out),
            &[(Stat::C(Counter::ActTx), 1), (Stat::C(Counter::FragHit), 1)],
        ));

        // an early fragment goes to stator_hold, as received
        let early = later(0x4343).frame();
        w.check(&case(
            "early fragment",
            early.clone(),
            DROP,
            Out::Same,
            &[(Stat::C(Counter::ActHold), 1)],
        ));
        let (hdr, frame) = holds.next_frame().expect("a held frame");
        assert_eq!(hdr.key, frag_key(client4(), 0x4343));
        assert_eq!(hdr.ingress_ifindex, w.lbin);
        assert_eq!(frame, early);
        assert!(holds.next_frame().is_none());

        // the holder takes the next one and runs it again once its first arrives
        let holder = Holder::start(
            pins.clone(),
            w.fwd.program_fd_owned().unwrap(),
            HoldLimits::default(),
        )
        .expect("start the holder");
        w.check(&case(
            "early fragment, holder running",
            later(0x4444).frame(),
            DROP,
            Out::Same,
            &[(Stat::C(Counter::ActHold), 1)],
        ));
        let deadline = Instant::now() + Duration::from_secs(5);
        while holder.stats().holding == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(holder.stats().holding, 1, "held: {:?}", holder.stats());
        let before = w.fwd.maps().counters().unwrap();
        w.fwd
            .test_run(
                &first(7002, 0x4444).frame(),
                stator_xdp::testrun::TestRunOpts {
                    ingress_ifindex: w.lbin,
                    ..Default::default()
                },
            )
            .unwrap();
        while holder.stats().queue.released == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let s = holder.stats();
        assert_eq!(
            (s.queue.released, s.holding, s.rerun_errors),
            (1, 0, 0),
            "{s:?}"
        );
        let d = w.fwd.maps().counters().unwrap().since(&before);
        let hit = stator_abi::Counter::FragHit;
        assert_eq!(
            d.get(hit),
            1,
            "the held fragment followed the record: {:?}",
            d.nonzero()
        );
        assert_eq!(d.get(stator_abi::Counter::ActTx), 2, "{:?}", d.nonzero());
        holder.stop();

        // §10.2: a redirect to a VIP address and to the node's own address
        let syn = tcp(client4(), 7003, &vips::tcp4(), tcp_flags::SYN);
        let (_, out) = w.via_maglev(&syn, &vips::tcp4());
        for dst in [v4(10, 0, 0, 10), IpAddr::V4(SRC_V4)] {
            w.check(&case(
                format!("redirect to {dst}"),
                redirect_frame(dst, &syn),
                TX,
                Out::Bytes(out.clone()),
                &[
                    (Stat::C(Counter::ActTx), 1),
                    (Stat::C(Counter::RedirectRx), 1),
                    (Stat::C(Counter::CtMiss), 1),
                    (Stat::C(Counter::CtInsert), 1),
                ],
            ));
        }

        // §10.1: a VIP without backend fails over, GRE with recursion control 1
        let syn = tcp(client4(), 7004, &vips::empty4(), tcp_flags::SYN);
        let mut out = encapsulated(
            &Outer {
                dmac: GW_MAC,
                smac: w.macs.lbin,
                src: IpAddr::V4(SRC_V4),
                dst: v4(10, 20, 0, 88),
                ttl: w.snap.node.outer_ttl,
                tunnel: expect::tunnel(Encap::Gre, w.snap.node.gue_port),
                hash: hash_of(&syn),
                tos: None,
                df: None,
            },
            &syn.ip_bytes(),
            0,
        );
        out[34] = 1;
        w.check(&case(
            "failover",
            syn.frame(),
            TX,
            Out::Bytes(out),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::Failover), 1),
            ],
        ));

        // §3.1: 10.100.5.1 is not configured anywhere; its suffix is the group VIP's
        let syn = Packet::tcp(client4(), 7005, v4(10, 100, 5, 1), 80, tcp_flags::SYN);
        let group_vip = w.snap.vips[&key(v4(10, 100, 1, 1), 80, Proto::Tcp)].id;
        let group_real = *w
            .snap
            .reals
            .iter()
            .find(|(_, r)| r.vip == group_vip)
            .map(|(id, _)| id)
            .expect("the group VIP's real");
        let out = w.forwarded(&syn, &syn.ip_bytes(), group_real, hash_of(&syn));
        w.check(&case(
            "group",
            syn.frame(),
            TX,
            Out::Bytes(out),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
                (Stat::C(Counter::GroupMatch), 1),
            ],
        ));
        let other = Packet::tcp(client4(), 7005, v4(10, 100, 5, 2), 80, tcp_flags::SYN);
        w.check(&case(
            "group, other suffix",
            other.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));

        // §11: a traced packet is forwarded as usual and reported
        let mut m = TraceMark {
            magic: STATOR_TRACE_MAGIC,
            receiver_family: 4,
            receiver_port: 9999u16.to_be_bytes(),
            trace_id: 77,
            ..TraceMark::default()
        };
        m.receiver[..4].copy_from_slice(&[192, 0, 2, 9]);
        let sealed = |m: &TraceMark, key: &[u8; 16], sport: u16| {
            let mut m = *m;
            m.mac = stator_core::trace_seal(&m, key, client4(), udp4.addr, sport, udp4.port, 17);
            let mut b = m.to_bytes().to_vec();
            b.resize(1200, 0);
            b
        };
        // an outsider's mark (a key the node does not hold): ordinary traffic, counted
        let forged =
            udp(client4(), 7007, &udp4).with_payload(&sealed(&m, b"an-outsiders-key", 7007));
        let (_, out) = w.via_maglev(&forged, &udp4);
        w.check(&case(
            "forged mark",
            forged.frame(),
            TX,
            Out::Bytes(out),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
                (Stat::C(Counter::TraceUnauth), 1),
            ],
        ));
        assert!(traces.next_event().is_none(), "no report for a forged mark");
        let p = udp(client4(), 7006, &udp4).with_payload(&sealed(&m, &TRACE_KEY, 7006));
        let (real, out) = w.via_maglev(&p, &udp4);
        w.check(&case(
            "traced",
            p.frame(),
            TX,
            Out::Bytes(out),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtMiss), 1),
                (Stat::C(Counter::CtInsert), 1),
                (Stat::C(Counter::TraceReport), 1),
            ],
        ));
        let e = traces.next_event().expect("a report");
        assert_eq!(e.kind(), Some(TraceKind::Forward));
        assert_eq!((e.trace_id, e.hop, e.real_id), (77, 1, real.0));
        assert_eq!(e.receiver[..4], [192, 0, 2, 9]);
        assert_eq!(e.receiver_port, 9999u16.to_be_bytes());
        assert_eq!(e.slot, hash_of(&p) % w.snap.vips[&udp4].table.len() as u32);
    });
}
