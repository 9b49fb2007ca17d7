//! The differential test (docs/forwarding.md): the same seeded stream of random, adversarial
//! and stateful frames, snapshot commits and clock moves through the XDP program
//! (BPF_PROG_TEST_RUN in a namespace whose FIB answers for real) and through
//! `stator_core::Forwarder`; every frame must give the same action, redirect interface, real,
//! output bytes, counter deltas (global, drops, per VIP, per real), connection-table entry and
//! flood-guard window — and, for Maglev §4.2–4.4, fragment-table records, held frames and
//! tracer reports. Needs root.
//!
//! Replay and soak:
//! - `STATOR_DIFF_SEED=0x…` runs that seed (decimal or 0x-hex) instead of the default one;
//! - `STATOR_DIFF_SEEDS=n` runs n more seeds after it (seed, seed+1, …);
//! - `STATOR_DIFF_FRAMES=n` compares n frames per seed with the per-CPU connection table
//!   (default 12,000) and n/2 with the shared one;
//! - `STATOR_DIFF_KEEP_GOING=1` reports every mismatch at the end instead of the first.
//!
//! A mismatch prints the seed, the frame (hex), both outcomes, the differences, the last steps
//! and the command that replays it.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::diff;

use std::collections::BTreeMap;

use stator_abi::{Counter, DropReason};
use stator_core::CtMode;
use stator_xdp::{ConntrackMode, Forwarder};

use crate::common::{PinDir, require_root};
use crate::diff::lab::Topo;
use crate::diff::run::{Report, Run, RunOpts};
use crate::diff::world::Universe;

/// The seed `cargo test` runs; any other replays with `STATOR_DIFF_SEED`.
const DEFAULT_SEED: u64 = 0x5747_0001;
const DEFAULT_FRAMES: usize = 12_000;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// The CPUs this thread may run on, highest first.
fn allowed_cpus() -> Vec<usize> {
    let mut cpus = stator_sys::cpu::allowed_cpus().expect("sched_getaffinity");
    cpus.reverse();
    cpus
}

fn print_report(seed: u64, mode: CtMode, r: &Report) {
    let total: usize = r.by_class.values().sum();
    println!(
        "differential seed {seed:#x} ({mode:?}): {total} frames compared — {}; {} commits",
        r.by_class
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.commits
    );
    println!("  frames per CPU: {:?}", r.per_cpu);
    let mut by_class: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((class, kind), n) in &r.by_kind {
        by_class
            .entry(class)
            .or_default()
            .push(format!("{kind} {n}"));
    }
    for (class, kinds) in by_class {
        println!("  {class}: {}", kinds.join(", "));
    }
    println!(
        "  actions: {}",
        r.actions
            .iter()
            .map(|(a, n)| format!("{a} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let nonzero = |m: &BTreeMap<&str, u64>| {
        m.iter()
            .filter(|(_, n)| **n != 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  drops: {}", nonzero(&r.drops));
    println!("  counters: {}", nonzero(&r.events));
}

/// Every outcome the stream is meant to reach was reached (a generator that silently stopped
/// producing some kind of frame would otherwise pass).
fn assert_coverage(r: &Report) {
    for a in ["DROP", "PASS", "TX", "REDIRECT"] {
        assert!(
            r.actions.get(a).copied().unwrap_or(0) > 0,
            "no frame ended in {a}"
        );
    }
    // `adjust` and `bad_config` cannot happen with a valid commit and the test run's headroom.
    for d in [
        DropReason::MalformedL3,
        DropReason::MalformedL4,
        DropReason::Fragment,
        DropReason::Ipv6ExtLimit,
        DropReason::NoBackend,
        DropReason::NoSource,
        DropReason::Fib,
        DropReason::NoNeigh,
        DropReason::TxPort,
        DropReason::Icmp,
        DropReason::Mtu,
        DropReason::Redirect,
    ] {
        assert!(
            r.drops.get(d.label()).copied().unwrap_or(0) > 0,
            "no frame dropped {}",
            d.label()
        );
    }
    for c in [
        Counter::CtHit,
        Counter::CtMiss,
        Counter::CtReselect,
        Counter::CtInsert,
        Counter::CtExpired,
        Counter::CtGuard,
        Counter::IcmpErrorFwd,
        Counter::IcmpEchoReply,
        Counter::NonVip,
        Counter::NonIp,
        Counter::FragRedirect,
        Counter::FragRecord,
        Counter::FragHit,
        Counter::ActHold,
        Counter::Failover,
        Counter::RedirectRx,
        Counter::RedirectAgain,
        Counter::GroupMatch,
        Counter::TraceReport,
        Counter::TraceLimited,
        Counter::StalePass,
        Counter::ScSent,
        Counter::ScUnsupported,
    ] {
        assert!(
            r.events.get(c.label()).copied().unwrap_or(0) > 0,
            "counter {} never moved",
            c.label()
        );
    }
}

#[test]
fn xdp_and_core_agree_frame_by_frame() {
    require_root();
    let first = env_u64("STATOR_DIFF_SEED").unwrap_or(DEFAULT_SEED);
    let more = env_u64("STATOR_DIFF_SEEDS").unwrap_or(0);
    let frames = env_u64("STATOR_DIFF_FRAMES").map_or(DEFAULT_FRAMES, |n| n as usize);
    let keep_going = std::env::var_os("STATOR_DIFF_KEEP_GOING").is_some();
    let replaying = std::env::var_os("STATOR_DIFF_SEED").is_some();

    let topo = Topo::new("diff");
    let ifaces = topo.ifaces.clone();
    let u = Universe::new();
    let fib = topo.fib(&u);
    let started = std::time::Instant::now();
    let reports = topo
        .ns()
        .run_in(move || {
            let allowed = allowed_cpus();
            let cpus = aya::util::nr_cpus().expect("number of CPUs");
            let mut reports = Vec::new();
            for seed in first..=first + more {
                // the per-CPU build in full, the shared one on a shorter stream
                for (mode, ct_mode, n) in [
                    (ConntrackMode::PerCpu, CtMode::PerCpu, frames),
                    (ConntrackMode::Shared, CtMode::Shared, frames / 2),
                ] {
                    let pins = PinDir::new("diff");
                    let mut fwd = Forwarder::load(&pins.options(mode)).expect("load the forwarder");
                    for i in ifaces.iter().filter(|i| i.tx_port) {
                        fwd.add_tx_port(i.ifindex).unwrap();
                    }
                    let opts = RunOpts {
                        seed,
                        frames: n,
                        ct_mode,
                        keep_going,
                    };
                    println!(
                        "differential: seed {seed:#x}, {ct_mode:?} connection table, {n} frames, \
                         CPUs {allowed:?} of {cpus}{}",
                        if replaying { " (replay)" } else { "" }
                    );
                    let run = Run::new(opts, &u, &ifaces, &fib, fwd, allowed.clone(), cpus);
                    reports.push((seed, ct_mode, run.run()));
                }
            }
            reports
        })
        .expect("enter the lab namespace");
    let mut failed = Vec::new();
    for (seed, mode, r) in &reports {
        print_report(*seed, *mode, r);
        for m in &r.mismatches {
            failed.push(m.clone());
        }
    }
    println!("differential: {:.1} s", started.elapsed().as_secs_f64());
    if !failed.is_empty() {
        for m in failed.iter().take(20) {
            eprintln!("{m}");
        }
        panic!("{} frames differ (first 20 shown above)", failed.len());
    }
    let (_, _, main) = &reports[0];
    if frames >= 10_000 {
        assert!(
            main.by_class.values().sum::<usize>() >= 10_000,
            "fewer than 10,000 frames compared"
        );
        assert_coverage(main);
    }
}
