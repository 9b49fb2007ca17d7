//! Stateful behaviour through BPF_PROG_TEST_RUN: the connection table (hit, miss, SYN bypass,
//! reselect after a backend drains or goes away), idle timeouts and the SYN-flood guard driven
//! by the test clock, the program's own clock (jiffies, measured by the loader), per-CPU versus
//! shared tables, per-VIP and per-real counters, node parameters, and the self-test probe.
//! Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use stator_abi::Encap;
use stator_core::{RealId, RealState, Snapshot};
use stator_testkit::Packet;
use stator_xdp::{ClockProbe, ConntrackMode, ProgramClock};

use crate::common::expect::maglev;
use crate::common::pin_to_cpu;
use crate::fixtures::*;

const SEC: u64 = 1_000_000_000;

/// A TCP packet from client4 to the tcp4 VIP whose Maglev choice in `snap` is `real`.
fn flow_to(snap: &Snapshot, real: RealId, flags: u8, from_port: u16) -> Packet {
    (from_port..u16::MAX)
        .map(|sport| tcp(client4(), sport, &vips::tcp4(), flags))
        .find(|p| maglev(snap, &vips::tcp4(), hash_of(p)) == real)
        .expect("some port maps to every real")
}

#[test]
fn hits_misses_and_syns_bypassing_the_table() {
    with_world("ct-hit", ConntrackMode::PerCpu, |w| {
        let syn = tcp(client4(), 20_001, &vips::tcp4(), SYN);
        let (real, out) = w.via_maglev(&syn, &vips::tcp4());
        w.check(&case(
            "SYN: miss, Maglev, insert",
            syn.frame(),
            TX,
            Out::Bytes(out.clone()),
            MISS_TX,
        ));
        let ack = with_flags(&syn, ACK);
        w.check(&case(
            "ACK: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        w.check(&case(
            "ACK again: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        w.check(&case(
            "retransmitted SYN: the table is not consulted",
            syn.frame(),
            TX,
            Out::Bytes(out),
            MISS_TX,
        ));
        let e = w.fwd.maps().conntrack_lookup(&flow_key(&syn)).unwrap();
        assert_eq!(e[0].real_id, real.0, "CPU 0 holds the entry");
        assert_eq!(
            e[0].hash,
            hash_of(&syn),
            "the entry keeps the flow hash, so its hits need not recompute it"
        );
        let udp = udp(client4(), 20_002, &vips::udp4());
        let (ureal, uout) = w.via_maglev(&udp, &vips::udp4());
        w.check(&case(
            "UDP: miss",
            udp.frame(),
            TX,
            Out::Bytes(uout),
            MISS_TX,
        ));
        w.check(&case(
            "UDP: hit",
            udp.frame(),
            TX,
            to_real(w, &udp, ureal),
            HIT_TX,
        ));
    });
}

/// HZ from the running kernel's config, when it publishes one.
fn config_hz() -> Option<u64> {
    let text = std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .or_else(|| {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
            std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()
        })?;
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_loader_measures_the_kernels_tick_and_the_programs_clock_follows_the_coarse_clock() {
    common::require_root();
    let started = std::time::Instant::now();
    let clock = ProgramClock::probe().expect("measure the tick");
    let took = started.elapsed();
    let hz = clock.hz().expect("a jiffies clock");
    match config_hz() {
        Some(k) => assert_eq!(hz, k, "measured HZ {hz}, the kernel's config says {k}"),
        None => assert!(
            [100, 250, 300, 1000].contains(&hz),
            "measured HZ {hz}; this kernel publishes no config to compare with"
        ),
    }
    let probe = ClockProbe::load().unwrap();
    let tick = clock.tick_ns() as i128;
    let mut worst = 0i128;
    for _ in 0..50 {
        let s = probe.sample().unwrap();
        let off = clock.at(s.jiffies).unwrap() as i128 - s.coarse_ns as i128;
        worst = worst.max(off.abs());
        assert!(
            off.abs() <= 2 * tick,
            "the program's clock is {off} ns from CLOCK_MONOTONIC_COARSE (tick {tick} ns)"
        );
        std::thread::sleep(std::time::Duration::from_micros(1_300));
    }
    println!(
        "HZ {hz}: the probe took {took:?} (probe object load included); the program's clock \
         within {worst} ns of the coarse clock in 50 samples"
    );
}

#[test]
fn entries_are_stamped_with_the_clock_the_program_was_loaded_with() {
    common::require_root();
    let measured = ProgramClock::probe().expect("measure the tick");
    const HOUR: u64 = 3_600 * SEC;
    let ahead = ProgramClock::jiffies(measured.tick_ns(), measured.base_ns().wrapping_add(HOUR));
    let slack = 2 * measured.tick_ns() as i128 + 50_000_000;
    for (name, clock, expect_ahead) in [
        ("measured at load", None, 0),
        ("an hour ahead", Some(ahead), HOUR),
        ("the helper", Some(ProgramClock::HELPER), 0),
    ] {
        let (jiffies, stamp, now) =
            with_world_clock("ct-clock", ConntrackMode::PerCpu, clock, |w| {
                let syn = tcp(client4(), 20_077, &vips::tcp4(), SYN);
                let (_, out) = w.via_maglev(&syn, &vips::tcp4());
                w.check(&case("SYN", syn.frame(), TX, Out::Bytes(out), MISS_TX));
                let e = w.fwd.maps().conntrack_lookup(&flow_key(&syn)).unwrap();
                (
                    w.fwd.clock().hz(),
                    e[0].last_seen_ns,
                    w.fwd.maps().clock_ns(),
                )
            });
        let off = stamp as i128 - now as i128 - expect_ahead as i128;
        println!(
            "{name}: HZ {jiffies:?}, last_seen − CLOCK_MONOTONIC_COARSE − expected = {off} ns"
        );
        assert!(
            off.abs() <= slack,
            "{name}: last_seen {stamp} is {off} ns from where the clock puts it"
        );
        let is_jiffies = !matches!(clock, Some(ProgramClock::HELPER));
        assert_eq!(
            jiffies.is_some(),
            is_jiffies,
            "{name}: which clock the forwarder reports"
        );
    }
}

#[test]
fn reselect_after_a_backend_drains_and_goes_away() {
    with_world("ct-resel", ConntrackMode::PerCpu, |w| {
        let (a, b) = (RealId(0), RealId(1)); // the two backends of tcp4
        let on_a = flow_to(&w.snap, a, SYN, 21_000);
        let on_b = flow_to(&w.snap, b, SYN, 21_000);
        w.check(&case(
            "SYN to A",
            on_a.frame(),
            TX,
            to_real(w, &on_a, a),
            MISS_TX,
        ));
        w.check(&case(
            "SYN to B",
            on_b.frame(),
            TX,
            to_real(w, &on_b, b),
            MISS_TX,
        ));

        // A drains: out of the Maglev table, established flows stay
        let mut drained = fixtures_with(w, |s| {
            s.reals.get_mut(&a).unwrap().state = RealState::Draining;
        });
        drained.generation = 2;
        let vip = drained.vips.get_mut(&vips::tcp4()).unwrap();
        vip.table = vec![b.0; vip.table.len()].into();
        w.fwd.commit(&common::valid(&drained)).unwrap();
        let ack_a = with_flags(&on_a, ACK);
        w.check(&case(
            "draining A keeps its flow",
            ack_a.frame(),
            TX,
            to_real(w, &ack_a, a),
            HIT_TX,
        ));
        let new_a = flow_to(&w.snap, a, SYN, 22_000); // would have gone to A before
        w.check(&case(
            "new flow avoids draining A",
            new_a.frame(),
            TX,
            to_real(w, &new_a, b),
            MISS_TX,
        ));

        // A is removed: its flows are reselected (and re-inserted) onto B
        let mut removed = drained.clone();
        removed.reals.remove(&a);
        removed.generation = 3;
        w.fwd.commit(&common::valid(&removed)).unwrap();
        w.check(&case(
            "flow of removed A: reselect",
            ack_a.frame(),
            TX,
            to_real(w, &ack_a, b),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtReselect), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
        ));
        w.check(&case(
            "then a hit on B",
            ack_a.frame(),
            TX,
            to_real(w, &ack_a, b),
            HIT_TX,
        ));
        let ack_b = with_flags(&on_b, ACK);
        w.check(&case(
            "flow of B untouched",
            ack_b.frame(),
            TX,
            to_real(w, &ack_b, b),
            HIT_TX,
        ));

        // A comes back under the same id but as another VIP's real: still not usable here
        let mut moved = removed.clone();
        let mut real_a = w.snap.reals[&a];
        real_a.vip = w.snap.vips[&vips::udp4()].id;
        moved.reals.insert(a, real_a);
        moved.generation = 4;
        w.fwd.commit(&common::valid(&moved)).unwrap();
        let late = flow_to(&w.snap, a, ACK, 23_000);
        w.fwd.commit(&common::valid(&w.snap)).unwrap(); // back to the original: A usable for tcp4
        w.check(&case(
            "insert on A",
            late.frame(),
            TX,
            to_real(w, &late, a),
            MISS_TX,
        ));
        w.fwd.commit(&common::valid(&moved)).unwrap();
        w.check(&case(
            "A now belongs to another VIP: reselect",
            late.frame(),
            TX,
            to_real(w, &late, b),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtReselect), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
        ));
    });
}

/// A copy of the world's snapshot, changed by `f`.
fn fixtures_with(w: &World, f: impl FnOnce(&mut Snapshot)) -> Snapshot {
    let mut s = w.snap.clone();
    f(&mut s);
    s
}

#[test]
fn idle_timeouts_follow_the_test_clock() {
    with_world("ct-time", ConntrackMode::PerCpu, |w| {
        let t0 = 5_000 * SEC;
        let tcp_to = w.snap.node.tcp_timeout_ns;
        let udp_to = w.snap.node.udp_timeout_ns;
        w.fwd.set_test_clock(Some(t0));
        let syn = tcp(client4(), 24_001, &vips::tcp4(), SYN);
        let (real, out) = w.via_maglev(&syn, &vips::tcp4());
        w.check(&case(
            "SYN at t0",
            syn.frame(),
            TX,
            Out::Bytes(out.clone()),
            MISS_TX,
        ));
        let ack = with_flags(&syn, ACK);
        let key = flow_key(&ack);
        let seen = |w: &World| w.fwd.maps().conntrack_lookup(&key).unwrap()[0].last_seen_ns;
        assert_eq!(seen(w), t0);

        w.fwd.set_test_clock(Some(t0 + SEC / 2));
        w.check(&case(
            "hit 0.5 s later",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        assert_eq!(seen(w), t0, "no refresh while less than 1 s stale");
        w.fwd.set_test_clock(Some(t0 + 2 * SEC));
        w.check(&case(
            "hit 2 s later",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        assert_eq!(seen(w), t0 + 2 * SEC, "refreshed when ≥ 1 s stale");
        w.fwd.set_test_clock(Some(t0 + SEC));
        w.check(&case(
            "clock behind last_seen: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        assert_eq!(
            seen(w),
            t0 + SEC,
            "unsigned difference (§4): a last_seen in the future refreshes too"
        );
        w.fwd.set_test_clock(Some(t0 + SEC + tcp_to));
        w.check(&case(
            "idle exactly the timeout: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        let last = t0 + SEC + tcp_to;
        assert_eq!(seen(w), last);
        w.fwd.set_test_clock(Some(last + tcp_to + 1));
        w.check(&case(
            "idle past the timeout: expired",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtExpired), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
        ));
        assert_eq!(seen(w), last + tcp_to + 1, "re-inserted now");

        // UDP uses its own (shorter) timeout
        let t1 = last + tcp_to + 1;
        let u = udp(client4(), 24_002, &vips::udp4());
        let (ureal, uout) = w.via_maglev(&u, &vips::udp4());
        w.check(&case("UDP miss", u.frame(), TX, Out::Bytes(uout), MISS_TX));
        w.fwd.set_test_clock(Some(t1 + udp_to + 1));
        w.check(&case(
            "UDP past its timeout",
            u.frame(),
            TX,
            to_real(w, &u, ureal),
            &[
                (Stat::C(Counter::ActTx), 1),
                (Stat::C(Counter::CtExpired), 1),
                (Stat::C(Counter::CtInsert), 1),
            ],
        ));
        assert!(udp_to < tcp_to);
        w.fwd.set_test_clock(None);
    });
}

/// The controller's heartbeat (docs/forwarding.md §3.2), written as `stator run` writes it
/// (`BeatWriter` on the pinned map, the kernel's coarse clock) and read by the program under
/// the test clock: fresh → forwarded; stale → passed, counted `stale_pass`, nothing decided;
/// off → forwarded however old; refreshed → forwarded with the connection's entry intact.
#[test]
fn a_stale_heartbeat_passes_vip_traffic() {
    with_world("ct-beat", ConntrackMode::PerCpu, |w| {
        let beat =
            stator_xdp::BeatWriter::open(&w.fwd.options().pin_path).expect("open stator_beat");
        assert_eq!(beat.read().stale_after_ns, 0, "off after load");
        beat.refresh(std::time::Duration::from_secs(3));
        let b = beat.read();
        assert_eq!(b.stale_after_ns, 3 * SEC);
        assert_eq!(
            w.fwd.beat(),
            Some(b),
            "the forwarder reads what the writer wrote"
        );
        let at = b.refreshed_ns;

        w.fwd.set_test_clock(Some(at + SEC));
        let syn = tcp(client4(), 24_101, &vips::tcp4(), SYN);
        let (real, out) = w.via_maglev(&syn, &vips::tcp4());
        w.check(&case(
            "fresh: forwarded",
            syn.frame(),
            TX,
            Out::Bytes(out),
            MISS_TX,
        ));
        let ack = with_flags(&syn, ACK);
        w.fwd.set_test_clock(Some(at + 3 * SEC));
        w.check(&case(
            "exactly the bound: forwarded",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        w.fwd.set_test_clock(Some(at + 3 * SEC + 1));
        let stale: &[(Stat, u64)] = &[
            (Stat::C(Counter::ActPass), 1),
            (Stat::C(Counter::StalePass), 1),
        ];
        w.check(&case(
            "past the bound: passed",
            ack.frame(),
            PASS,
            Out::Same,
            stale,
        ));
        let u = udp(client4(), 24_102, &vips::udp4());
        w.check(&case(
            "a new UDP flow: passed",
            u.frame(),
            PASS,
            Out::Same,
            stale,
        ));
        let other = Packet::tcp(client4(), 24_103, common::v4(10, 0, 0, 200), 80, SYN);
        w.check(&case(
            "not VIP traffic: as ever",
            other.frame(),
            PASS,
            Out::Same,
            NON_VIP,
        ));

        beat.off();
        w.fwd.set_test_clock(Some(at + 100 * SEC));
        w.check(&case(
            "off: forwarded however old",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));

        beat.refresh(std::time::Duration::from_secs(3));
        w.fwd.set_test_clock(Some(beat.read().refreshed_ns + SEC));
        w.check(&case(
            "refreshed: the entry still there",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        w.fwd.set_test_clock(None);
    });
}

#[test]
fn flood_guard_follows_the_test_clock() {
    with_world("ct-flood", ConntrackMode::PerCpu, |w| {
        let mut s = w.snap.clone();
        s.node.flood_new_per_sec = 2;
        s.generation = 2;
        w.fwd.commit(&common::valid(&s)).unwrap();
        let t0 = 7_000 * SEC;
        w.fwd.set_test_clock(Some(t0));
        const GUARD: &[(Stat, u64)] = &[
            (Stat::C(Counter::ActTx), 1),
            (Stat::C(Counter::CtMiss), 1),
            (Stat::C(Counter::CtGuard), 1),
        ];
        let syns: Vec<Packet> = (0..4)
            .map(|i| tcp(client4(), 25_000 + i, &vips::tcp4(), SYN))
            .collect();
        for (i, p) in syns.iter().enumerate() {
            let (_, out) = w.via_maglev(p, &vips::tcp4());
            let counters = if i < 2 { MISS_TX } else { GUARD };
            w.check(&case(
                format!("SYN {i} in the first second"),
                p.frame(),
                TX,
                Out::Bytes(out),
                counters,
            ));
        }
        let ack = with_flags(&syns[2], ACK);
        let (_, out) = w.via_maglev(&ack, &vips::tcp4());
        w.check(&case(
            "ACK of a guarded SYN: not in the table, still guarded",
            ack.frame(),
            TX,
            Out::Bytes(out.clone()),
            GUARD,
        ));
        let hit = with_flags(&syns[0], ACK);
        let (_, hout) = w.via_maglev(&hit, &vips::tcp4());
        w.check(&case(
            "ACK of an inserted SYN: hit",
            hit.frame(),
            TX,
            Out::Bytes(hout),
            HIT_TX,
        ));
        let win = w.fwd.maps().flood_windows().unwrap();
        assert_eq!((win[0].window_start_ns, win[0].inserts), (t0, 2));

        w.fwd.set_test_clock(Some(t0 + SEC - 1));
        w.check(&case(
            "still the same window",
            ack.frame(),
            TX,
            Out::Bytes(out.clone()),
            GUARD,
        ));
        w.fwd.set_test_clock(Some(t0 + SEC));
        w.check(&case(
            "a new second: inserts again",
            ack.frame(),
            TX,
            Out::Bytes(out),
            MISS_TX,
        ));
        let win = w.fwd.maps().flood_windows().unwrap();
        assert_eq!((win[0].window_start_ns, win[0].inserts), (t0 + SEC, 1));
        w.fwd.set_test_clock(None);
    });
}

fn two_cpus() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        n >= 2,
        "this test needs two CPUs to compare per-CPU and shared tables ({n} here)"
    );
}

#[test]
fn per_cpu_table_entries_are_invisible_to_other_cpus() {
    two_cpus();
    with_world("ct-percpu", ConntrackMode::PerCpu, |w| {
        let syn = tcp(client4(), 26_001, &vips::tcp4(), SYN);
        let (real, out) = w.via_maglev(&syn, &vips::tcp4());
        w.check(&case(
            "SYN on CPU 0",
            syn.frame(),
            TX,
            Out::Bytes(out),
            MISS_TX,
        ));
        let ack = with_flags(&syn, ACK);
        pin_to_cpu(1);
        // CPU 1 sees the key with a zero value: a miss, not a hit on real 0
        w.check(&case(
            "ACK on CPU 1: miss",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            MISS_TX,
        ));
        w.check(&case(
            "ACK on CPU 1 again: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        pin_to_cpu(0);
        w.check(&case(
            "ACK on CPU 0: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        let per_cpu = w.fwd.maps().conntrack_lookup(&flow_key(&ack)).unwrap();
        assert!(per_cpu.len() >= 2 && per_cpu[..2].iter().all(|e| e.real_id == real.0));
    });
}

#[test]
fn shared_table_entries_are_seen_by_every_cpu() {
    two_cpus();
    with_world("ct-shared", ConntrackMode::Shared, |w| {
        let syn = tcp(client4(), 26_002, &vips::tcp4(), SYN);
        let (real, out) = w.via_maglev(&syn, &vips::tcp4());
        w.check(&case(
            "SYN on CPU 0",
            syn.frame(),
            TX,
            Out::Bytes(out),
            MISS_TX,
        ));
        pin_to_cpu(1);
        let ack = with_flags(&syn, ACK);
        w.check(&case(
            "ACK on CPU 1: hit",
            ack.frame(),
            TX,
            to_real(w, &ack, real),
            HIT_TX,
        ));
        pin_to_cpu(0);
        assert_eq!(
            w.fwd
                .maps()
                .conntrack_lookup(&flow_key(&ack))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(w.fwd.maps().conntrack(), ConntrackMode::Shared);
    });
}

#[test]
fn per_vip_and_per_real_traffic() {
    with_world("ct-traffic", ConntrackMode::PerCpu, |w| {
        let vip_id = w.snap.vips[&vips::tcp4()].id.0;
        let p = tcp(client4(), 27_001, &vips::tcp4(), SYN).with_payload(&[1; 50]);
        let (real, _) = w.via_maglev(&p, &vips::tcp4());
        let mut bytes = 0;
        for i in 0..3 {
            let q = with_flags(&p, if i == 0 { SYN } else { ACK });
            bytes += q.frame().len() as u64;
            w.fwd.test_run(&q.frame(), run_opts(w)).unwrap();
        }
        let vt = w.fwd.maps().vip_traffic(vip_id).unwrap();
        let rt = w.fwd.maps().real_traffic(real.0).unwrap();
        assert_eq!((vt.packets, vt.bytes), (3, bytes), "VIP traffic");
        assert_eq!((rt.packets, rt.bytes), (3, bytes), "real traffic");

        // a VIP packet dropped before encapsulation counts for the VIP, not for a real
        let empty_id = w.snap.vips[&vips::empty4()].id.0;
        let e = tcp(client4(), 27_002, &vips::empty4(), SYN);
        w.fwd.test_run(&e.frame(), run_opts(w)).unwrap();
        assert_eq!(w.fwd.maps().vip_traffic(empty_id).unwrap().packets, 1);
        // a fragment is dropped before the VIP is matched
        let mut f = tcp(client4(), 27_003, &vips::tcp4(), SYN);
        f.mf = true;
        w.fwd.test_run(&f.frame(), run_opts(w)).unwrap();
        assert_eq!(w.fwd.maps().vip_traffic(vip_id).unwrap().packets, 3);
    });
}

fn run_opts(w: &World) -> stator_xdp::testrun::TestRunOpts {
    stator_xdp::testrun::TestRunOpts {
        ingress_ifindex: w.lbin,
        ..Default::default()
    }
}

#[test]
fn node_parameters_shape_the_outer_header() {
    with_world("ct-node", ConntrackMode::PerCpu, |w| {
        let mut s = w.snap.clone();
        s.node.outer_ttl = 7;
        s.node.gue_port = 5555;
        s.generation = 2;
        w.fwd.commit(&common::valid(&s)).unwrap();
        w.snap = s.clone();
        let p = tcp(client4(), 28_001, &vips::gue4(), SYN);
        w.check(&w.miss_tx("outer TTL 7, GUE port 5555", &p, &vips::gue4()));
        let p = tcp(client6(), 28_002, &vips::tcp6(), SYN);
        w.check(&w.miss_tx("hop limit 7", &p, &vips::tcp6()));
        assert_eq!(w.snap.reals[&RealId(0)].encap, Encap::Gre);

        // without an IPv6 source, IPv6 backends cannot be reached; IPv4 ones still can
        s.node.src_v6 = None;
        s.generation = 3;
        w.fwd.commit(&common::lenient(&s)).unwrap();
        let p = tcp(client6(), 28_003, &vips::tcp6(), SYN);
        w.check(&case(
            "no IPv6 source",
            p.frame(),
            DROP,
            Out::Same,
            &dropped_after_insert(DropReason::NoSource),
        ));
        let p = tcp(client4(), 28_004, &vips::to6(), SYN);
        w.check(&case(
            "v4 VIP, v6 backend, no IPv6 source",
            p.frame(),
            DROP,
            Out::Same,
            &dropped_after_insert(DropReason::NoSource),
        ));
        let p = tcp(client6(), 28_005, &vips::to4(), SYN);
        w.check(&w.miss_tx("v6 VIP, v4 backend still fine", &p, &vips::to4()));
    });
}

#[test]
fn self_test_answers_from_the_active_generation_without_counting_traffic() {
    with_world("selftest", ConntrackMode::PerCpu, |w| {
        let before = w.fwd.maps().counters().unwrap();
        let st = w.fwd.self_test().expect("self-test");
        assert_eq!(st.active_gen, w.fwd.active_generation());
        assert_eq!(st.config_generation, 1);
        assert!(st.vaddr_checked);
        let delta = w.fwd.maps().counters().unwrap().since(&before);
        assert_eq!(
            delta.nonzero(),
            labels(&[
                (Stat::C(Counter::ActPass), 1),
                (Stat::C(Counter::SelfTest), 1)
            ])
        );

        let mut s = w.snap.clone();
        s.generation = 9;
        let report = w.fwd.commit(&common::valid(&s)).unwrap();
        let st = w.fwd.self_test().unwrap();
        assert_eq!(
            (st.active_gen, st.config_generation),
            (report.active_gen, 9)
        );

        // a frame of the probe ethertype without the magic is just non-IP traffic
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        w.check(&case(
            "0x88B5 without the magic",
            f,
            PASS,
            Out::Same,
            NON_IP,
        ));

        // an empty snapshot: nothing to probe in stator_vtab, still answered
        w.fwd
            .commit(&common::valid(&Snapshot {
                generation: 10,
                ..Snapshot::default()
            }))
            .unwrap();
        let st = w.fwd.self_test().unwrap();
        assert!(!st.vaddr_checked);
        assert_eq!(st.config_generation, 10);
    });
}
