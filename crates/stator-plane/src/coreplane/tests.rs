//! The core plane on its own: commits, frames through it, what its reader reads back.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use stator_core::{
    Action, BackendSpec, Counter, CtMode, NextHop, NodeParams, Proto, RealState, Snapshot,
    SnapshotBuilder, StaticFib, VecPacketBuf,
};
use stator_testkit::{Packet, tcp_flags};

use super::*;

const VIP: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));

fn backend(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, n))
}

fn snapshot(generation: u64, backends: &[u8]) -> Snapshot {
    let mut s = SnapshotBuilder::new(NodeParams {
        src_v4: Some(Ipv4Addr::new(203, 0, 113, 1)),
        ..NodeParams::default()
    })
    .vip(
        VIP,
        80,
        Proto::Tcp,
        251,
        backends
            .iter()
            .map(|&b| BackendSpec::new(backend(b)))
            .collect(),
    )
    .build()
    .unwrap();
    s.generation = generation;
    s
}

fn valid(s: Snapshot) -> ValidSnapshot {
    s.validated().unwrap()
}

fn fib() -> StaticFib {
    let hop = NextHop {
        ifindex: 2,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        mtu: 1500,
    };
    StaticFib::new().default_route(backend(1), Ok(hop))
}

fn syn(sport: u16) -> VecPacketBuf {
    let client = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1));
    VecPacketBuf::with_xdp_headroom(&Packet::tcp(client, sport, VIP, 80, tcp_flags::SYN).frame())
}

fn plane(opts: CoreOptions) -> (CorePlane, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let state = CoreState::new(opts, Arc::clone(&clock) as Arc<dyn Clock>);
    (CorePlane::new(state), clock)
}

#[test]
fn a_new_plane_holds_the_empty_snapshot_and_passes_its_check() {
    let (p, _) = plane(CoreOptions::default());
    assert_eq!(p.active_snapshot().unwrap(), Some(Snapshot::default()));
    p.check().unwrap();
    assert_eq!(p.kind(), "core");
}

#[test]
fn frames_follow_the_committed_snapshot_and_the_reader_sees_their_effects() {
    for mode in [CtMode::PerCpu, CtMode::Shared] {
        let (mut p, clock) = plane(CoreOptions {
            threads: 3,
            ct_mode: mode,
            ..CoreOptions::default()
        });
        let info = p.commit(&valid(snapshot(7, &[1, 2]))).unwrap();
        assert_eq!(info.grace, Duration::ZERO);
        assert_eq!(p.active_snapshot().unwrap().unwrap().generation, 7);
        p.check().unwrap();
        let state = Arc::clone(p.state());
        let reader = p.reader().unwrap();

        let mut frame = syn(40_000);
        let v = state.process(1, 2, &fib(), &mut frame);
        assert_eq!(v.action, Action::Tx, "{mode:?}");
        let real = v.real.unwrap();
        let counters = reader.counters().unwrap();
        assert_eq!(counters.get(Counter::ActTx), 1);
        assert_eq!(counters.get(Counter::CtInsert), 1);
        assert_eq!(reader.real_traffic(real).unwrap().packets, 1);
        assert_eq!(reader.vip_traffic(v.vip.unwrap()).unwrap().packets, 1);

        let key = v.flow.unwrap();
        let entries = reader.conntrack_lookup(&key).unwrap();
        let stamped: Vec<usize> = (0..entries.len())
            .filter(|&i| entries[i].last_seen_ns != 0)
            .collect();
        match mode {
            CtMode::PerCpu => {
                assert_eq!(entries.len(), 3, "one per thread");
                assert_eq!(stamped, vec![1], "on the thread that saw it");
            }
            CtMode::Shared => assert_eq!((entries.len(), stamped.len()), (1, 1)),
        }
        let e = entries[stamped[0]];
        assert_eq!((e.real_id, e.last_seen_ns), (real.0, clock.now_ns()));
        assert_eq!(reader.clock_ns(), clock.now_ns());

        let mut walked = Vec::new();
        let n = reader
            .conntrack_scan(10, &mut |k, e| walked.push((*k, e.to_vec())))
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(walked, vec![(key, entries.clone())]);

        // Another flow on another thread: the walk sees both, the limit bounds it.
        let mut frame = syn(40_001);
        state.process(2, 2, &fib(), &mut frame);
        assert_eq!(reader.conntrack_scan(10, &mut |_, _| {}).unwrap(), 2);
        assert_eq!(reader.conntrack_scan(1, &mut |_, _| {}).unwrap(), 1);
        let absent = stator_core::Flow {
            src: backend(9),
            dst: VIP,
            sport: 1,
            dport: 80,
            proto: 6,
        };
        assert!(
            reader
                .conntrack_lookup(&absent.key().unwrap())
                .unwrap()
                .is_empty()
        );
    }
}

#[test]
fn a_draining_real_keeps_its_flows_and_the_timeout_runs_on_the_plane_clock() {
    let (mut p, clock) = plane(CoreOptions::default());
    p.commit(&valid(snapshot(1, &[1, 2]))).unwrap();
    let state = Arc::clone(p.state());
    let first = state.process(0, 2, &fib(), &mut syn(40_000));
    let real = first.real.unwrap();
    // Drain that real: no slot names it any more, its flow keeps it.
    let mut s = snapshot(2, &[1, 2]);
    let other = *s.reals.keys().find(|r| **r != real).unwrap();
    s.reals.get_mut(&real).unwrap().state = RealState::Draining;
    let vip = s.vips.values_mut().next().unwrap();
    vip.table = Arc::from(vec![other.0; vip.table.len()]);
    p.commit(&valid(s)).unwrap();
    let ack = {
        let client = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1));
        let f = Packet::tcp(client, 40_000, VIP, 80, tcp_flags::ACK).frame();
        move || VecPacketBuf::with_xdp_headroom(&f)
    };
    clock.advance(Duration::from_secs(899));
    assert_eq!(state.process(0, 2, &fib(), &mut ack()).real, Some(real));
    // Idle past the TCP timeout (900 s): Maglev decides again.
    clock.advance(Duration::from_secs(901));
    assert_eq!(state.process(0, 2, &fib(), &mut ack()).real, Some(other));
}

#[test]
fn a_commit_beyond_the_capacity_is_refused_and_changes_nothing() {
    let (mut p, _) = plane(CoreOptions {
        slots_per_gen: 300,
        ..CoreOptions::default()
    });
    p.commit(&valid(snapshot(1, &[1]))).unwrap();
    let two = SnapshotBuilder::new(snapshot(2, &[1]).node)
        .vip(VIP, 80, Proto::Tcp, 251, vec![BackendSpec::new(backend(1))])
        .vip(
            backend(200),
            80,
            Proto::Tcp,
            251,
            vec![BackendSpec::new(backend(2))],
        )
        .build()
        .unwrap();
    let err = p.commit(&valid(two)).unwrap_err().to_string();
    assert!(err.contains("commit") && err.contains("slots"), "{err}");
    assert_eq!(p.active_snapshot().unwrap().unwrap().generation, 1);
}

#[test]
fn a_restart_keeps_the_state_and_a_purge_forgets_it() {
    let (mut p, _) = plane(CoreOptions::default());
    p.commit(&valid(snapshot(4, &[1]))).unwrap();
    let state = Arc::clone(p.state());
    state.process(0, 2, &fib(), &mut syn(40_000));
    drop(p);
    let mut again = CorePlane::new(Arc::clone(&state));
    assert_eq!(again.active_snapshot().unwrap().unwrap().generation, 4);
    let reader = again.reader().unwrap();
    assert_eq!(reader.counters().unwrap().get(Counter::ActTx), 1);
    again.detach(false).unwrap();
    assert_eq!(reader.counters().unwrap().get(Counter::ActTx), 1, "keep");
    again.detach(true).unwrap();
    assert_eq!(again.active_snapshot().unwrap(), Some(Snapshot::default()));
    assert_eq!(reader.counters().unwrap().get(Counter::ActTx), 0);
    assert_eq!(reader.conntrack_scan(10, &mut |_, _| {}).unwrap(), 0);
}

#[test]
fn the_check_fails_while_a_fault_is_set() {
    let (mut p, _) = plane(CoreOptions::default());
    p.commit(&valid(snapshot(1, &[1]))).unwrap();
    p.check().unwrap();
    p.state().set_fault(Some("stopped answering".into()));
    let err = p.check().unwrap_err();
    assert!(
        matches!(&err, PlaneError::Unhealthy { reason } if reason == "stopped answering"),
        "{err}"
    );
    p.state().set_fault(None);
    p.check().unwrap();
}
