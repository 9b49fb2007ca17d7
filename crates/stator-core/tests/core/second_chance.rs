//! Second chance on the node (docs/forwarding.md §12.2–§12.3) through `process`: a packet that
//! misses the connection table and whose previous table names another live backend goes to the
//! new backend with the previous one named in GUE private data, and is never inserted; SYNs,
//! hits, agreeing tables, GRE and mixed families take the ordinary path — each counted.

#[allow(unused_imports)]
use crate::common;

use std::net::IpAddr;
use std::sync::Arc;

use crate::common::*;
use stator_abi::Counter;
use stator_core::{
    Action, BackendSpec, Cause, Encap, Insert, Proto, RealId, RealState, Snapshot, SnapshotBuilder,
};
use stator_testkit::expect::{Tunnel, encapsulated};

/// VIP 10.0.0.10:80/tcp over reals 0..=3 (`addrs`), `encap`, table 13: the previous table;
/// then the current one, with real 3 gone from the table and kept only as a previous backend.
fn changed_over(encap: Encap, addrs: [IpAddr; 4]) -> (Snapshot, Arc<[u32]>) {
    let be = |a: IpAddr| BackendSpec::new(a).encap(encap);
    let build = |n: usize| {
        SnapshotBuilder::new(node())
            .vip(
                v4(VIP4),
                80,
                Proto::Tcp,
                13,
                addrs[..n].iter().map(|a| be(*a)).collect(),
            )
            .build()
            .unwrap()
    };
    let before = build(4);
    let old = before.vips.values().next().unwrap().table.clone();
    // the ids the builder gives the first three are the same (insertion order); real 3 stays
    let mut now = build(3);
    let mut r3 = before.reals[&RealId(3)];
    r3.state = RealState::Previous;
    now.reals.insert(RealId(3), r3);
    now.vips.values_mut().next().unwrap().previous = Some(old.clone());
    (now, old)
}

fn changed(encap: Encap, last: IpAddr) -> (Snapshot, Arc<[u32]>) {
    changed_over(encap, [be4(1), be4(2), be4(3), last])
}

fn ports_where(
    snap: &Snapshot,
    old: &[u32],
    want_change: bool,
) -> impl Iterator<Item = (u16, u32, u32)> {
    let new = snap.vips.values().next().unwrap().table.clone();
    let old = old.to_vec();
    (1024u16..4096).filter_map(move |sport| {
        let h = hash4(sport, 80, 6);
        let (a, p) = (new[h as usize % 13], old[h as usize % 13]);
        ((a != p) == want_change).then_some((sport, a, p))
    })
}

fn counter(fwd: &stator_core::Forwarder, c: Counter) -> u64 {
    fwd.totals().get(c)
}

#[test]
fn a_moved_connection_goes_with_a_second_chance_and_is_never_inserted() {
    let (snap, old) = changed(Encap::Gue, be4(4));
    let c = compile(&snap);
    let mut fwd = forwarder();
    let moved: Vec<_> = ports_where(&snap, &old, true).take(20).collect();
    assert!(moved.len() >= 10, "the change moves some slots: {moved:?}");
    for &(sport, a, p) in &moved {
        let prev = snap.reals[&RealId(p)].addr;
        let real = snap.reals[&RealId(a)].addr;
        let pkt = ack4(sport);
        for round in 0..2 {
            let (v, out) = run(&mut fwd, &c, &fib_tx(), 1_000 + round, &pkt.frame());
            assert_action(&v, Action::Tx);
            assert_eq!(v.real, Some(RealId(a)), "the new table decides");
            let sel = v.selection.unwrap();
            assert_eq!(
                (sel.cause, sel.insert),
                (Cause::CtMiss, Insert::NotAttempted)
            );
            let mut o = outer_to(real, Encap::Gue, 0, true, hash4(sport, 80, 6));
            o.tunnel = Tunnel::GueSc { port: 6080, prev };
            assert_eq!(out, encapsulated(&o, &pkt.ip_bytes(), 0), "sport {sport}");
        }
    }
    assert_eq!(counter(&fwd, Counter::ScSent), 2 * moved.len() as u64);
    assert_eq!(counter(&fwd, Counter::CtInsert), 0, "never inserted");

    // a SYN always follows the new table alone, and is inserted
    let (sport, a, _) = moved[0];
    let (v, out) = run(&mut fwd, &c, &fib_tx(), 2_000, &syn4(sport).frame());
    assert_eq!(v.real, Some(RealId(a)));
    let o = outer_to(
        snap.reals[&RealId(a)].addr,
        Encap::Gue,
        0,
        true,
        hash4(sport, 80, 6),
    );
    assert_eq!(out, encapsulated(&o, &syn4(sport).ip_bytes(), 0));
    // ... after which the flow hits its entry: no second chance any more
    let (v, _) = run(&mut fwd, &c, &fib_tx(), 2_001, &ack4(sport).frame());
    assert_eq!(v.selection.unwrap().cause, Cause::CtHit);
    assert_eq!(counter(&fwd, Counter::ScSent), 2 * moved.len() as u64);

    // where both tables agree, the ordinary path: inserted, no private data
    let (sport, a, _) = ports_where(&snap, &old, false).next().unwrap();
    let (v, out) = run(&mut fwd, &c, &fib_tx(), 3_000, &ack4(sport).frame());
    assert_eq!(v.selection.unwrap().insert, Insert::Inserted);
    let o = outer_to(
        snap.reals[&RealId(a)].addr,
        Encap::Gue,
        0,
        true,
        hash4(sport, 80, 6),
    );
    assert_eq!(out, encapsulated(&o, &ack4(sport).ip_bytes(), 0));
}

#[test]
fn an_ipv6_previous_backend_is_named_in_twenty_bytes() {
    // all four backends IPv6 over an IPv4 VIP
    let (snap, old) = changed_over(Encap::Gue, [be6(1), be6(2), be6(3), be6(4)]);
    let c = compile(&snap);
    let mut fwd = forwarder();
    let (sport, a, p) = ports_where(&snap, &old, true).next().unwrap();
    let (v, out) = run(&mut fwd, &c, &fib_tx(), 1, &ack4(sport).frame());
    assert_eq!(v.real, Some(RealId(a)));
    let mut o = outer_to(
        snap.reals[&RealId(a)].addr,
        Encap::Gue,
        0,
        true,
        hash4(sport, 80, 6),
    );
    o.tunnel = Tunnel::GueSc {
        port: 6080,
        prev: snap.reals[&RealId(p)].addr,
    };
    assert_eq!(out, encapsulated(&o, &ack4(sport).ip_bytes(), 0));
}

#[test]
fn gre_and_mixed_families_take_the_ordinary_path_counted_unsupported() {
    for (encap, last) in [(Encap::Gre, be4(4)), (Encap::Gue, be6(4))] {
        let (snap, old) = changed(encap, last);
        let c = compile(&snap);
        let mut fwd = forwarder();
        // a moved flow whose previous backend is real 3 (the one that left)
        let Some((sport, a, _)) = ports_where(&snap, &old, true).find(|&(_, _, p)| p == 3) else {
            panic!("no slot moved away from real 3");
        };
        let (v, out) = run(&mut fwd, &c, &fib_tx(), 1, &ack4(sport).frame());
        assert_eq!(v.real, Some(RealId(a)));
        assert_eq!(v.selection.unwrap().insert, Insert::Inserted, "{encap:?}");
        let o = outer_to(
            snap.reals[&RealId(a)].addr,
            encap,
            0,
            true,
            hash4(sport, 80, 6),
        );
        assert_eq!(out, encapsulated(&o, &ack4(sport).ip_bytes(), 0));
        assert_eq!(counter(&fwd, Counter::ScUnsupported), 1, "{encap:?}");
        assert_eq!(counter(&fwd, Counter::ScSent), 0);
    }
}

#[test]
fn a_previous_backend_that_is_gone_is_not_named() {
    let (mut snap, old) = changed(Encap::Gue, be4(4));
    snap.reals.remove(&RealId(3));
    let c = compile(&snap);
    let mut fwd = forwarder();
    let (sport, _, _) = ports_where(&snap, &old, true)
        .find(|&(_, _, p)| p == 3)
        .unwrap();
    let (v, _) = run(&mut fwd, &c, &fib_tx(), 1, &ack4(sport).frame());
    assert_eq!(v.selection.unwrap().insert, Insert::Inserted);
    assert_eq!(counter(&fwd, Counter::ScSent), 0);
}

#[test]
fn a_previous_real_in_a_current_table_is_refused() {
    let (mut snap, _) = changed(Encap::Gue, be4(4));
    let t: Vec<u32> = vec![3; 13];
    snap.vips.values_mut().next().unwrap().table = t.into();
    let e = snap.validated().unwrap_err().to_string();
    assert!(e.contains("previous backend"), "{e}");
}

#[test]
fn the_same_backend_under_another_id_is_not_named() {
    // real 3 (previous only) has real 0's address: removed and added again under a new id
    let (mut snap, old) = changed(Encap::Gue, be4(4));
    let same = snap.reals[&RealId(0)].addr;
    snap.reals.get_mut(&RealId(3)).unwrap().addr = same;
    let c = compile(&snap);
    let mut fwd = forwarder();
    let (sport, a, _) = ports_where(&snap, &old, true)
        .find(|&(_, a, p)| p == 3 && a == 0)
        .expect("a slot that moved from real 3 to real 0");
    let (v, _) = run(&mut fwd, &c, &fib_tx(), 1, &ack4(sport).frame());
    assert_eq!(v.real, Some(RealId(a)));
    assert_eq!(v.selection.unwrap().insert, Insert::Inserted);
    assert_eq!(counter(&fwd, Counter::ScSent), 0);
}
