//! Connection-table behaviour through `process` (docs/forwarding.md §4): hit, miss, SYN,
//! expiry, refresh, reselect, draining, the flood guard, table modes, and `explain`.

#[allow(unused_imports)]
use crate::common;

use crate::common::*;
use stator_core::{
    Action, BackendSpec, Cause, CompiledSnapshot, CtEntry, CtMode, Flow, Forwarder,
    ForwarderConfig, Insert, Proto, RealId, RealState, Snapshot, SnapshotBuilder, TraceOutcome,
    ValidSnapshot, VecPacketBuf, Verdict, VipId,
};
use stator_hash::{MaglevBackend, MaglevTable};
use stator_testkit::{Packet, tcp_flags};

/// VIP 0 = 10.0.0.10:80/tcp over reals 0..=2; VIP 1 = 10.0.0.10:53/udp over reals 3..=5.
fn three() -> Snapshot {
    let be = |r: std::ops::RangeInclusive<u8>| r.map(|n| BackendSpec::new(be4(n))).collect();
    SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 13, be(1..=3))
        .vip(v4(VIP4), 53, Proto::Udp, 13, be(4..=6))
        .build()
        .unwrap()
}

/// Rebuilds the Maglev table of `vip` from its usable reals, keeping every id.
fn rebuild(s: &mut Snapshot, vip: VipId) {
    let names: Vec<(String, u32)> = s
        .reals
        .iter()
        .filter(|(_, r)| r.vip == vip && r.state == RealState::Usable)
        .map(|(id, r)| (r.addr.to_string(), id.0))
        .collect();
    let members: Vec<_> = names
        .iter()
        .map(|(n, id)| MaglevBackend::new(n, 1, *id))
        .collect();
    let table = MaglevTable::build(&members, 13).unwrap();
    for v in s.vips.values_mut().filter(|v| v.id == vip) {
        v.table = if table.is_empty() {
            Vec::new().into()
        } else {
            table.slots().into()
        };
    }
}

fn without(s: &Snapshot, real: u32) -> Snapshot {
    let mut s = s.clone();
    let vip = s.reals.remove(&RealId(real)).unwrap().vip;
    rebuild(&mut s, vip);
    s
}

fn draining(s: &Snapshot, real: u32) -> Snapshot {
    let mut s = s.clone();
    let r = s.reals.get_mut(&RealId(real)).unwrap();
    r.state = RealState::Draining;
    let vip = r.vip;
    rebuild(&mut s, vip);
    s
}

fn tcp(sport: u16, flags: u8) -> Vec<u8> {
    Packet::tcp(v4(CLIENT4), sport, v4(VIP4), 80, flags).frame()
}

fn udp(sport: u16) -> Vec<u8> {
    Packet::udp(v4(CLIENT4), sport, v4(VIP4), 53).frame()
}

fn go(fwd: &mut Forwarder, snap: &CompiledSnapshot, now: u64, cpu: usize, f: &[u8]) -> Verdict {
    let mut buf = VecPacketBuf::with_xdp_headroom(f);
    let v = fwd.process(snap, now, cpu, IN_IF, &fib_tx(), &mut buf);
    assert_eq!(v.action, Action::Tx, "{v:?}");
    v
}

fn cause(v: &Verdict) -> (Cause, Insert) {
    let s = v.selection.unwrap();
    (s.cause, s.insert)
}

/// A source port whose flow Maglev sends to `real` under `snap`.
fn port_for(snap: &CompiledSnapshot, real: u32) -> u16 {
    let fwd = forwarder();
    (1000..)
        .find(|&p| {
            let t = fwd.explain(snap, T0, 0, &flow(p, 80, 6), true);
            t.outcome == TraceOutcome::Real(RealId(real))
        })
        .unwrap()
}

fn flow(sport: u16, dport: u16, proto: u8) -> Flow {
    Flow {
        src: v4(CLIENT4),
        dst: v4(VIP4),
        sport,
        dport,
        proto,
    }
}

fn entry(fwd: &Forwarder, cpu: usize, sport: u16, dport: u16, proto: u8) -> Option<CtEntry> {
    fwd.conn_table(cpu)
        .get(&flow(sport, dport, proto).key().unwrap())
}

#[test]
fn miss_inserts_then_hits_refreshing_only_when_stale() {
    let snap = compile(&three());
    let mut fwd = forwarder();
    let a = go(&mut fwd, &snap, T0, 0, &tcp(7, tcp_flags::ACK));
    assert_eq!(cause(&a), (Cause::CtMiss, Insert::Inserted));
    let real = a.real.unwrap().0;
    assert_eq!(
        entry(&fwd, 0, 7, 80, 6).map(|e| (e.real_id, e.last_seen_ns)),
        Some((real, T0))
    );
    let b = go(&mut fwd, &snap, T0 + SEC / 2, 0, &tcp(7, tcp_flags::ACK));
    assert_eq!(cause(&b), (Cause::CtHit, Insert::NotAttempted));
    assert_eq!(b.selection.unwrap().slot, None);
    assert_eq!(b.real, a.real);
    assert_eq!(
        entry(&fwd, 0, 7, 80, 6).unwrap().last_seen_ns,
        T0,
        "not stale yet"
    );
    go(
        &mut fwd,
        &snap,
        T0 + SEC,
        0,
        &tcp(7, tcp_flags::ACK | tcp_flags::PSH),
    );
    assert_eq!(
        entry(&fwd, 0, 7, 80, 6).unwrap().last_seen_ns,
        T0 + SEC,
        "refreshed"
    );
    let c = fwd.counters(0);
    assert_eq!(
        (
            c.get(stator_core::Counter::CtMiss),
            c.get(stator_core::Counter::CtHit)
        ),
        (1, 2)
    );
    assert_eq!(c.get(stator_core::Counter::CtInsert), 1);
}

#[test]
fn syn_follows_the_table_of_the_moment_and_overwrites() {
    let snap = compile(&three());
    let mut fwd = forwarder();
    let maglev = go(&mut fwd, &snap, T0, 0, &tcp(9, tcp_flags::SYN))
        .real
        .unwrap()
        .0;
    let other = (0..3).find(|&r| r != maglev).unwrap();
    let key = flow(9, 80, 6).key().unwrap();
    fwd.conn_table_mut(0).insert(
        key,
        CtEntry {
            real_id: other,
            hash: 0,
            last_seen_ns: T0,
        },
    );
    // Established packets (and a SYN-ACK) use the table...
    for flags in [tcp_flags::ACK, tcp_flags::SYN | tcp_flags::ACK, 0] {
        let v = go(&mut fwd, &snap, T0, 0, &tcp(9, flags));
        assert_eq!(
            (v.real, cause(&v).0),
            (Some(RealId(other)), Cause::CtHit),
            "{flags:#x}"
        );
    }
    // ...a SYN does not, and its insert overwrites the entry.
    let v = go(&mut fwd, &snap, T0, 0, &tcp(9, tcp_flags::SYN));
    assert_eq!(
        (v.real, cause(&v)),
        (Some(RealId(maglev)), (Cause::Syn, Insert::Inserted))
    );
    assert_eq!(fwd.conn_table(0).get(&key).unwrap().real_id, maglev);
}

#[test]
fn expiry_by_protocol_timeout() {
    let snap = compile(&three());
    let tcp_timeout = snap.node().tcp_timeout_ns;
    let udp_timeout = snap.node().udp_timeout_ns;
    for (frame, timeout, dport, proto) in [
        (tcp(5, tcp_flags::ACK), tcp_timeout, 80, 6),
        (udp(5), udp_timeout, 53, 17),
    ] {
        let mut fwd = forwarder();
        go(&mut fwd, &snap, T0, 0, &frame);
        let v = go(&mut fwd.clone(), &snap, T0 + timeout, 0, &frame);
        assert_eq!(
            cause(&v).0,
            Cause::CtHit,
            "idle exactly the timeout: still valid"
        );
        let v = go(&mut fwd, &snap, T0 + timeout + 1, 0, &frame);
        assert_eq!(cause(&v), (Cause::CtExpired, Insert::Inserted));
        assert_eq!(
            entry(&fwd, 0, 5, dport, proto).unwrap().last_seen_ns,
            T0 + timeout + 1
        );
        assert_eq!(fwd.counters(0).get(stator_core::Counter::CtExpired), 1);
    }
}

#[test]
fn a_clock_going_backwards_neither_expires_nor_keeps_a_future_last_seen() {
    let snap = compile(&three());
    let mut fwd = forwarder();
    go(&mut fwd, &snap, T0 + 5 * SEC, 0, &tcp(5, tcp_flags::ACK));
    let v = go(&mut fwd, &snap, T0, 0, &tcp(5, tcp_flags::ACK));
    assert_eq!(cause(&v).0, Cause::CtHit);
    // `now - last_seen` wraps (unsigned, as in C), which is ≥ the refresh interval.
    assert_eq!(entry(&fwd, 0, 5, 80, 6).unwrap().last_seen_ns, T0);
}

#[test]
fn reselect_after_the_backend_is_removed() {
    let s = three();
    let snap = compile(&s);
    let mut fwd = forwarder();
    let port = port_for(&snap, 1);
    let a = go(&mut fwd, &snap, T0, 0, &tcp(port, tcp_flags::ACK));
    assert_eq!(a.real, Some(RealId(1)));
    let after = compile(&without(&s, 1));
    let b = go(&mut fwd, &after, T0 + 1, 0, &tcp(port, tcp_flags::ACK));
    assert_eq!(cause(&b), (Cause::CtReselect, Insert::Inserted));
    assert_ne!(b.real, Some(RealId(1)));
    let c = go(&mut fwd, &after, T0 + 2, 0, &tcp(port, tcp_flags::ACK));
    assert_eq!((cause(&c).0, c.real), (Cause::CtHit, b.real));
    // Connections on other backends keep theirs through the same change.
    let port0 = port_for(&snap, 0);
    let mut fwd = forwarder();
    go(&mut fwd, &snap, T0, 0, &tcp(port0, tcp_flags::ACK));
    let v = go(&mut fwd, &after, T0, 0, &tcp(port0, tcp_flags::ACK));
    assert_eq!((cause(&v).0, v.real), (Cause::CtHit, Some(RealId(0))));
}

#[test]
fn reselect_when_the_real_id_now_belongs_to_another_vip() {
    let s = three();
    let snap = compile(&s);
    let mut fwd = forwarder();
    let port = port_for(&snap, 2);
    go(&mut fwd, &snap, T0, 0, &tcp(port, tcp_flags::ACK));
    // Real id 2 is reassigned to the UDP VIP (ids are reused once a pair is gone).
    let mut moved = without(&s, 2);
    let mut r = s.reals[&RealId(2)];
    r.vip = VipId(1);
    moved.reals.insert(RealId(2), r);
    let moved = CompiledSnapshot::new(&ValidSnapshot::new_lenient(moved.clone()).unwrap());
    let v = go(&mut fwd, &moved, T0, 0, &tcp(port, tcp_flags::ACK));
    assert_eq!(cause(&v).0, Cause::CtReselect);
    assert_ne!(v.real, Some(RealId(2)));
}

#[test]
fn draining_keeps_established_flows_and_gets_no_new_ones() {
    let s = three();
    let snap = compile(&s);
    let port = port_for(&snap, 0);
    let mut fwd = forwarder();
    go(&mut fwd, &snap, T0, 0, &tcp(port, tcp_flags::ACK));
    let drained = compile(&draining(&s, 0));
    let v = go(
        &mut fwd,
        &drained,
        T0 + 2 * SEC,
        0,
        &tcp(port, tcp_flags::ACK),
    );
    assert_eq!((cause(&v).0, v.real), (Cause::CtHit, Some(RealId(0))));
    for p in 1000..1200 {
        let v = go(&mut fwd, &drained, T0, 0, &tcp(p, tcp_flags::SYN));
        assert_ne!(
            v.real,
            Some(RealId(0)),
            "a draining real gets no new connection"
        );
    }
    // Even the established flow's retransmitted SYN follows the table of the moment.
    let v = go(&mut fwd, &drained, T0, 0, &tcp(port, tcp_flags::SYN));
    assert_ne!(v.real, Some(RealId(0)));
}

#[test]
fn flood_guard_allows_exactly_the_limit_per_window_per_cpu() {
    let mut s = three();
    s.node.flood_new_per_sec = 3;
    let snap = compile(&s);
    let mut fwd = forwarder();
    let mut inserted = 0;
    for p in 0..5 {
        let v = go(
            &mut fwd,
            &snap,
            T0 + p,
            0,
            &tcp(2000 + p as u16, tcp_flags::SYN),
        );
        match cause(&v).1 {
            Insert::Inserted => inserted += 1,
            Insert::GuardHeld => assert!(p >= 3),
            Insert::NotAttempted => panic!("a SYN always asks to insert"),
        }
    }
    assert_eq!(inserted, 3);
    let c = fwd.counters(0);
    assert_eq!(c.get(stator_core::Counter::CtInsert), 3);
    assert_eq!(c.get(stator_core::Counter::CtGuard), 2);
    assert_eq!(
        c.get(stator_core::Counter::ActTx),
        5,
        "held flows are still forwarded"
    );
    assert_eq!(fwd.conn_table(0).len(), 3);
    // Misses of non-SYN packets are guarded too; CPU 1 has its own window.
    let v = go(&mut fwd, &snap, T0 + 10, 0, &tcp(3000, tcp_flags::ACK));
    assert_eq!(cause(&v), (Cause::CtMiss, Insert::GuardHeld));
    let v = go(&mut fwd, &snap, T0 + 10, 1, &tcp(3000, tcp_flags::ACK));
    assert_eq!(cause(&v), (Cause::CtMiss, Insert::Inserted));
    // One second after the window opened, a new one.
    let v = go(&mut fwd, &snap, T0 + SEC, 0, &tcp(3001, tcp_flags::SYN));
    assert_eq!(cause(&v).1, Insert::Inserted);
    assert_eq!(fwd.flood_guard(0).state().window_start_ns, T0 + SEC);
}

#[test]
fn per_cpu_and_shared_tables() {
    let snap = compile(&three());
    let mut per_cpu = forwarder();
    go(&mut per_cpu, &snap, T0, 0, &tcp(5, tcp_flags::ACK));
    let v = go(&mut per_cpu, &snap, T0, 1, &tcp(5, tcp_flags::ACK));
    assert_eq!(cause(&v).0, Cause::CtMiss, "CPU 1 has its own table");
    let mut shared = Forwarder::new(ForwarderConfig {
        cpus: 2,
        ct_mode: CtMode::Shared,
        ct_capacity: 16,
        ct_seed: 3,
        ..ForwarderConfig::default()
    });
    assert_eq!(shared.ct_mode(), CtMode::Shared);
    go(&mut shared, &snap, T0, 0, &tcp(5, tcp_flags::ACK));
    let v = go(&mut shared, &snap, T0, 1, &tcp(5, tcp_flags::ACK));
    assert_eq!(cause(&v).0, Cause::CtHit, "one table for every CPU");
    assert_eq!(shared.counters(1).get(stator_core::Counter::CtHit), 1);
    // CPU indexes wrap.
    let v = go(&mut shared, &snap, T0, 7, &tcp(5, tcp_flags::ACK));
    assert_eq!(cause(&v).0, Cause::CtHit);
    assert_eq!(shared.counters(1).get(stator_core::Counter::CtHit), 2);
}

#[test]
fn a_full_table_evicts_the_least_recently_used() {
    let snap = compile(&three());
    let mut fwd = Forwarder::new(ForwarderConfig {
        cpus: 1,
        ct_capacity: 2,
        ..ForwarderConfig::default()
    });
    go(&mut fwd, &snap, T0, 0, &tcp(1, tcp_flags::ACK));
    go(&mut fwd, &snap, T0, 0, &tcp(2, tcp_flags::ACK));
    go(&mut fwd, &snap, T0, 0, &tcp(1, tcp_flags::ACK)); // 1 is now the most recent
    go(&mut fwd, &snap, T0, 0, &tcp(3, tcp_flags::ACK)); // evicts 2
    assert_eq!(
        cause(&go(&mut fwd, &snap, T0, 0, &tcp(1, tcp_flags::ACK))).0,
        Cause::CtHit
    );
    assert_eq!(
        cause(&go(&mut fwd, &snap, T0, 0, &tcp(2, tcp_flags::ACK))).0,
        Cause::CtMiss
    );
}

#[test]
fn explain_predicts_process_and_changes_nothing() {
    let mut s = three();
    s.node.flood_new_per_sec = 2;
    let snap = compile(&s);
    let gone = compile(&without(&s, 1));
    let mut fwd = forwarder();
    let steps: Vec<(&CompiledSnapshot, u64, u16, u8)> = vec![
        (&snap, T0, 10, tcp_flags::SYN),
        (&snap, T0, 10, tcp_flags::ACK),
        (&snap, T0 + 2 * SEC, 10, tcp_flags::ACK),
        (&snap, T0, 11, tcp_flags::ACK),
        (&snap, T0, 12, tcp_flags::ACK),
        (&snap, T0, 13, tcp_flags::SYN),
        (&gone, T0 + 3 * SEC, 10, tcp_flags::ACK),
        (&gone, T0 + 3 * SEC, 11, tcp_flags::ACK),
        (&snap, T0 + 2000 * SEC, 12, tcp_flags::ACK),
    ];
    for (i, (snap, now, sport, flags)) in steps.into_iter().enumerate() {
        let before = (fwd.totals(), fwd.conn_table(0).iter().collect::<Vec<_>>());
        let t = fwd.explain(snap, now, 0, &flow(sport, 80, 6), flags == tcp_flags::SYN);
        let after = (fwd.totals(), fwd.conn_table(0).iter().collect::<Vec<_>>());
        assert_eq!(before, after, "step {i}: explain changed state");
        let v = go(&mut fwd, snap, now, 0, &tcp(sport, flags));
        assert_eq!(t.selection, v.selection, "step {i}");
        assert_eq!(t.outcome, TraceOutcome::Real(v.real.unwrap()), "step {i}");
        assert_eq!((t.flow, Some(t.hash)), (v.flow, v.hash), "step {i}");
        assert_eq!(t.vip.map(|m| m.id), v.vip, "step {i}");
    }
    // A flow to no VIP, and one with mixed families.
    let t = fwd.explain(&snap, T0, 0, &flow(1, 81, 6), false);
    assert_eq!((t.vip, t.outcome), (None, TraceOutcome::NotVip));
    let mut mixed = flow(1, 80, 6);
    mixed.dst = v6(VIP6);
    assert_eq!(fwd.explain(&snap, T0, 0, &mixed, false).flow, None);
}

/// Data planes share a compiled snapshot between threads and move forwarders into them.
#[test]
fn thread_safety_of_the_api() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CompiledSnapshot>();
    send_sync::<Forwarder>();
    send_sync::<stator_core::StaticFib>();
}
