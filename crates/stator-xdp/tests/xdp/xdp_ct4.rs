//! The per-CPU build's IPv4 connection table of Stator's own, `stator_ct4`: its bucket rules (a
//! free way, else an expired one, else the least recently seen), what its readers show, and
//! the upgrade path from a pinned table where a build before it kept IPv4 flows (`stator_ct`).
//! Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use std::collections::HashMap;

use stator_core::{RealId, RealState, Snapshot};
use stator_testkit::Packet;
use stator_xdp::{ConntrackMode, Forwarder, XdpOptions};

use crate::common::{Lab, PinDir, require_root};
use crate::fixtures::*;

const SEC: u64 = 1_000_000_000;

/// The real CPU 0's entry of `p` names, if CPU 0 has one.
fn entry_on_cpu0(w: &World, p: &Packet) -> Option<stator_abi::CtEntry> {
    let v = w.fwd.maps().conntrack_lookup(&flow_key(p)).unwrap();
    v.first().copied().filter(|e| e.last_seen_ns != 0)
}

/// Five TCP flows and one UDP flow of the fixture VIPs that share a bucket of `buckets`.
fn one_bucket(buckets: u32) -> (Vec<Packet>, Packet) {
    let bucket = |p: &Packet| hash_of(p) & (buckets - 1);
    let mut by_bucket: HashMap<u32, Vec<Packet>> = HashMap::new();
    for sport in 1024..u16::MAX {
        let p = tcp(client4(), sport, &vips::tcp4(), SYN);
        by_bucket.entry(bucket(&p)).or_default().push(p);
    }
    for sport in 1024..u16::MAX {
        let u = udp(client4(), sport, &vips::udp4());
        if let Some(t) = by_bucket.get(&bucket(&u))
            && t.len() >= 5
        {
            return (t[..5].to_vec(), u);
        }
    }
    panic!("no bucket of {buckets} holds five TCP flows and a UDP flow of the fixtures");
}

#[test]
fn a_full_bucket_gives_up_an_expired_flow_first_then_the_least_recently_seen() {
    with_world("ct4-bucket", ConntrackMode::PerCpu, |w| {
        let buckets = w.fwd.maps().ct4_buckets().expect("stator_ct4 in use");
        assert_eq!(buckets, stator_xdp::buckets_per_cpu(65_536) as u32);
        let (t, u) = one_bucket(buckets);
        let tcp_to = w.snap.node.tcp_timeout_ns;
        let udp_to = w.snap.node.udp_timeout_ns;
        assert!(
            udp_to + 10 * SEC < tcp_to,
            "the fixture's UDP timeout is the shorter"
        );
        let t0 = 10_000 * SEC;
        let at = |w: &World, ns: u64| w.fwd.set_test_clock(Some(ns));

        // four flows fill the bucket's four ways, free ways first
        for (i, p) in t[..3].iter().enumerate() {
            at(w, t0 + i as u64 * SEC);
            w.check(&w.miss_tx(&format!("SYN of T{}", i + 1), p, &vips::tcp4()));
        }
        at(w, t0 + 3 * SEC);
        w.check(&w.miss_tx("U1", &u, &vips::udp4()));
        for p in t[..3].iter().chain([&u]) {
            assert!(entry_on_cpu0(w, p).is_some(), "{p:?} is in the table");
        }
        let occ = w.fwd.maps().ct4_occupancy().expect("stator_ct4 in use");
        assert_eq!((occ.used, occ.full_buckets), (4, 1));
        assert_eq!(
            occ.ways % (4 * u64::from(buckets)),
            0,
            "4 ways per bucket on every CPU"
        );

        // U1 is idle past the UDP timeout; T1..T3 are older but alive: T4 takes U1's way
        let t1 = t0 + 3 * SEC + udp_to + 1;
        at(w, t1);
        w.check(&w.miss_tx("SYN of T4", &t[3], &vips::tcp4()));
        assert!(
            entry_on_cpu0(w, &u).is_none(),
            "the expired flow gave its way up"
        );
        for p in &t[..4] {
            assert!(entry_on_cpu0(w, p).is_some(), "{p:?} is kept");
        }

        // T1 is seen again (a hit ≥ 1 s stale refreshes it): T2 is now the least recently seen
        let ack1 = with_flags(&t[0], ACK);
        let (real1, _) = w.via_maglev(&ack1, &vips::tcp4());
        w.check(&case(
            "ACK of T1: hit",
            ack1.frame(),
            TX,
            to_real(w, &ack1, real1),
            HIT_TX,
        ));
        assert_eq!(entry_on_cpu0(w, &t[0]).unwrap().last_seen_ns, t1);
        w.check(&w.miss_tx("SYN of T5", &t[4], &vips::tcp4()));
        assert!(
            entry_on_cpu0(w, &t[1]).is_none(),
            "T5 evicted the least recently seen, T2"
        );
        for p in [&t[0], &t[2], &t[3], &t[4]] {
            assert!(entry_on_cpu0(w, p).is_some(), "{p:?} is kept");
        }

        // T2's next packet misses and asks Maglev again (the same real while the table holds),
        // and takes the way of the least recently seen, T3
        let ack2 = with_flags(&t[1], ACK);
        w.check(&w.miss_tx("ACK of evicted T2: Maglev again", &ack2, &vips::tcp4()));
        assert!(entry_on_cpu0(w, &t[2]).is_none(), "T3 gave its way to T2");

        // the walk sees each flow once, with CPU 0's entry
        let mut walked = Vec::new();
        w.fwd
            .maps()
            .conntrack_scan(usize::MAX, |k, e| walked.push((*k, e[0])))
            .unwrap();
        assert_eq!(walked.len(), 4, "{walked:?}");
        for p in [&t[0], &t[1], &t[3], &t[4]] {
            let k = flow_key(p);
            let (_, e) = walked.iter().find(|(w, _)| *w == k).expect("walked");
            assert_eq!(Some(*e), entry_on_cpu0(w, p));
        }
        w.fwd.set_test_clock(None);
    });
}

#[test]
fn ipv4_flows_of_a_build_before_stator_ct4_survive_the_upgrade() {
    require_root();
    let lab = Lab::new("ct4-upgrade");
    let pins = PinDir::new("ct4-upgrade");
    let lru = XdpOptions {
        v4_table: false,
        ..pins.options(ConntrackMode::PerCpu)
    };
    let own = pins.options(ConntrackMode::PerCpu);
    let pin_path = pins.path().to_path_buf();
    let (lbin, macs) = (
        lab.lbin,
        LabMacs {
            lbin: lab.lbin_mac,
            lbout: lab.lbout_mac,
        },
    );
    lab.run(move || {
        let snap = snapshot();
        let world = |opts: XdpOptions, snap: &Snapshot, commit: bool| {
            let mut fwd = Forwarder::load(&opts).expect("load the forwarder");
            if commit {
                fwd.commit(&common::valid(snap)).expect("commit");
            }
            World {
                fwd,
                snap: snap.clone(),
                lbin,
                macs,
            }
        };
        // the build before: IPv4 flows in stator_ct, on the kernel's clock
        let w = world(lru, &snap, true);
        assert_eq!(w.fwd.maps().ct4_buckets(), None, "stator_ct4 unused");
        // the two backends of tcp4, and a flow Maglev gives the first
        let (real, other) = (RealId(0), RealId(1));
        let syn = (31_001..u16::MAX)
            .map(|sport| tcp(client4(), sport, &vips::tcp4(), SYN))
            .find(|p| w.via_maglev(p, &vips::tcp4()).0 == real)
            .expect("a port Maglev maps to the first backend");
        w.check(&w.miss_tx("SYN before the upgrade", &syn, &vips::tcp4()));
        let old = entry_on_cpu0(&w, &syn).expect("in stator_ct");
        assert_eq!(old.real_id, real.0);
        drop(w);
        // what a build before stator_ct4 leaves pinned: no stator_ct4
        std::fs::remove_file(pin_path.join("stator_ct4")).unwrap();

        // the upgrade; then the flow's real drains, so Maglev would choose another
        let mut drained = snap.clone();
        drained.reals.get_mut(&real).unwrap().state = RealState::Draining;
        drained.generation = 2;
        let vip = drained.vips.get_mut(&vips::tcp4()).unwrap();
        vip.table = vec![other.0; vip.table.len()].into();
        let w = world(own.clone(), &drained, true);
        assert!(w.fwd.maps().ct4_buckets().is_some(), "stator_ct4 in use");
        let ack = with_flags(&syn, ACK);
        w.check(&case(
            "ACK after the upgrade: the old table's entry, moved",
            ack.frame(),
            TX,
            to_real(&w, &ack, real),
            HIT_TX,
        ));
        let moved = entry_on_cpu0(&w, &ack).expect("in stator_ct4");
        assert_eq!((moved.real_id, moved.hash), (real.0, hash_of(&ack)));
        let mut seen = 0;
        w.fwd
            .maps()
            .conntrack_scan(usize::MAX, |k, e| {
                if *k == flow_key(&ack) {
                    seen += e.iter().filter(|e| e.last_seen_ns != 0).count();
                }
            })
            .unwrap();
        assert_eq!(seen, 1, "moved, not copied: stator_ct's entry is cleared");
        let fresh = tcp(client4(), 41_002, &vips::tcp4(), ACK);
        w.check(&case(
            "a flow neither table holds: Maglev (the draining real is out)",
            fresh.frame(),
            TX,
            to_real(&w, &fresh, other),
            MISS_TX,
        ));
        drop(w);

        // a later restart finds stator_ct4 pinned: no window, the table is reused as it is
        let w = world(own, &drained, false);
        let again = entry_on_cpu0(&w, &ack).expect("still in stator_ct4");
        assert_eq!(again.real_id, real.0);
        w.check(&case(
            "ACK after a restart: hit",
            ack.frame(),
            TX,
            to_real(&w, &ack, real),
            HIT_TX,
        ));
    });
}
