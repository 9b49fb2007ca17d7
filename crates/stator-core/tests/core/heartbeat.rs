//! The controller's heartbeat (docs/forwarding.md §3.2): while `stator_beat` says the tables
//! are stale, TCP and UDP to a VIP are passed to the kernel, counted `stale_pass`, and nothing
//! is decided, inserted or refreshed; other traffic is untouched; a refresh restores
//! forwarding, with the connection table as it was.

#[allow(unused_imports)]
use crate::common;

use crate::common::*;
use stator_abi::{Beat, Counter};
use stator_core::Action;
use stator_testkit::Packet;

const S: u64 = 1_000_000_000;

fn beat(refreshed_s: u64, stale_after_s: u64) -> Beat {
    Beat {
        refreshed_ns: refreshed_s * S,
        stale_after_ns: stale_after_s * S,
    }
}

#[test]
fn stale_tables_pass_vip_traffic_and_a_refresh_restores_forwarding() {
    let snap = compile(&world());
    let fib = fib_tx();
    let mut fwd = forwarder();
    fwd.set_beat(beat(10, 3));
    let syn = syn4(4000).frame();

    // fresh: decided and recorded
    let (v, _) = run(&mut fwd, &snap, &fib, 12 * S, &syn);
    assert_action(&v, Action::Tx);
    assert_eq!(fwd.conn_table(0).len(), 1);
    // exactly the bound: still fresh
    let (v, _) = run(&mut fwd, &snap, &fib, 13 * S, &ack4(4000).frame());
    assert_action(&v, Action::Tx);

    // past it: passed, counted, the frame untouched, the table untouched
    let ack = ack4(4000).frame();
    let (v, out) = run(&mut fwd, &snap, &fib, 13 * S + 1, &ack);
    assert_action(&v, Action::Pass);
    assert_eq!(out, ack, "a passed frame is not rewritten");
    let udp = Packet::udp(v4(CLIENT4), 5000, v4(VIP4), 53).frame();
    let (v, _) = run(&mut fwd, &snap, &fib, 20 * S, &udp);
    assert_action(&v, Action::Pass);
    let c = fwd.counters(0);
    assert_eq!(c.get(Counter::StalePass), 2);
    assert_eq!(c.get(Counter::ActPass), 2);
    assert_eq!(c.get(Counter::CtMiss), 1, "nothing decided while stale");
    assert_eq!(fwd.conn_table(0).len(), 1, "nothing inserted while stale");

    // not VIP traffic: passed as ever, not counted stale
    let other = Packet::tcp(v4(CLIENT4), 4000, v4(CLIENT4), 80, 0x10).frame();
    let (v, _) = run(&mut fwd, &snap, &fib, 20 * S, &other);
    assert_action(&v, Action::Pass);
    assert_eq!(fwd.counters(0).get(Counter::StalePass), 2);
    assert_eq!(fwd.counters(0).get(Counter::NonVip), 1);

    // refreshed: forwarding again, the connection's entry still there (a hit)
    fwd.set_beat(beat(20, 3));
    let (v, _) = run(&mut fwd, &snap, &fib, 21 * S, &ack);
    assert_action(&v, Action::Tx);
    assert_eq!(fwd.counters(0).get(Counter::CtHit), 2);
}

#[test]
fn the_check_is_off_at_zero_and_a_refresh_ahead_of_now_is_fresh() {
    let snap = compile(&world());
    let fib = fib_tx();
    let mut fwd = forwarder();
    // off (the default, and stale_after 0): never stale, however old the refresh
    let (v, _) = run(&mut fwd, &snap, &fib, 1_000 * S, &syn4(4001).frame());
    assert_action(&v, Action::Tx);
    fwd.set_beat(beat(1, 0));
    let (v, _) = run(&mut fwd, &snap, &fib, 1_000 * S, &syn4(4002).frame());
    assert_action(&v, Action::Tx);
    // refreshed "later" than now (read on another CPU, a tick ahead): fresh
    fwd.set_beat(beat(2_000, 1));
    let (v, _) = run(&mut fwd, &snap, &fib, 1_000 * S, &syn4(4003).frame());
    assert_action(&v, Action::Tx);
    assert_eq!(fwd.counters(0).get(Counter::StalePass), 0);
}

#[test]
fn beat_stale_is_strictly_past_the_bound() {
    let b = beat(10, 3);
    assert!(!b.stale(0));
    assert!(!b.stale(13 * S));
    assert!(b.stale(13 * S + 1));
    assert!(!Beat::default().stale(u64::MAX));
}
