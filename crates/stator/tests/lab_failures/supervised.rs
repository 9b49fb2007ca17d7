//! Tests 7 to 10 of `lab_failures`: nodes supervised as the systemd unit does
//! ([`stator_lab::supervise`]) — a controller killed or hung, one that cannot start again, a
//! clean restart (issue 28). A module of the same binary: the lab helpers above are shared.

use super::*;

/// The unit's supervision as the lab runs it ([`stator_lab::supervise`]): the packaged
/// unit's behaviour with shorter bounds, so that a test takes seconds (WatchdogSec=3s,
/// TimeoutAbortSec=1s, RestartSec=1s).
fn lab_unit() -> UnitTiming {
    UnitTiming {
        watchdog: Some(Duration::from_secs(3)),
        abort_timeout: Duration::from_secs(1),
        restart: Duration::from_secs(1),
        stop_timeout: Duration::from_secs(20),
        start_timeout: Duration::from_secs(60),
        withdraw_timeout: Duration::from_secs(5),
    }
}

fn supervisor(d: &Deployment, j: usize) -> &Supervisor {
    d.nodes[j]
        .run
        .supervisor()
        .expect("the lab supervises its nodes")
}

/// Waits for the first event after `skip` that `want` accepts, panicking with the node's
/// log on a timeout.
fn step(
    d: &Deployment,
    j: usize,
    skip: usize,
    timeout: Duration,
    what: &str,
    want: impl Fn(&SupEvent) -> bool,
) -> (usize, Record) {
    supervisor(d, j)
        .wait_event(skip, timeout, want)
        .unwrap_or_else(|e| panic!("n{j}: {what}: {e}\nlog:\n{}", d.nodes[j].run.log_tail(40)))
}

/// `n` new HTTP connections over IPv4 and IPv6 from every client address: each family's
/// tally.
fn http_both(d: &Deployment, n: usize) -> [Tally; 2] {
    let client = d.client().ns.clone();
    [false, true].map(|v6| {
        http_batch(
            &client,
            &d.client().addrs(v6),
            http(v6),
            n,
            4,
            Duration::from_secs(60),
        )
        .unwrap()
    })
}

/// How a node's controller goes away in [`controller_gone`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// `kill -9`: a crash.
    Killed,
    /// SIGSTOP: a hang (the process is there; nothing in it runs).
    Hung,
}

/// Node 0's controller is killed or hung while backend b0's servers freeze; the live nodes
/// take b0 out. Within the watchdog bound plus a restart, node 0 is withdrawn by
/// `stator withdraw` (ExecStopPost) and back, checking health; after that, no request
/// reaches b0. Every step's time is printed.
fn controller_gone(prefix: &str, subnet: u8, how: Gone) {
    const NODE: usize = 0;
    const FROZEN: usize = 0;
    let unit = lab_unit();
    let watchdog = unit.watchdog.unwrap_or_default();
    let mut lab = Lab::up(prefix, subnet, |s| s.supervise = Some(lab_unit()));
    let d = lab.d();
    let timing = health_timing(d);
    let health_bound = timing.interval * timing.fall + Duration::from_secs(1);
    for t in http_both(d, 128) {
        assert_eq!(t.failed, 0, "before: {:?}", t.first_error);
    }
    let skip = supervisor(d, NODE).events().len();
    let pid = supervisor(d, NODE).pid().expect("n0 runs");

    let t0 = Instant::now();
    match how {
        Gone::Killed => d.node_kill(NODE),
        Gone::Hung => supervisor(d, NODE).signal(libc::SIGSTOP),
    }
    d.backend_freeze(FROZEN);
    let frozen = format!("b{FROZEN}");

    // The live nodes take b0 out; n0's router entry goes and comes back; n0's supervisor
    // goes through its steps. All polled together, each time noted once.
    let mut live_out: Option<Duration> = None;
    let mut unrouted: Option<Duration> = None;
    let mut rerouted: Option<Duration> = None;
    let bound = match how {
        Gone::Killed => Duration::ZERO,
        Gone::Hung => watchdog + unit.abort_timeout,
    } + unit.withdraw_timeout
        + unit.restart
        + Duration::from_secs(30);
    let mut ready: Option<Duration> = None;
    while t0.elapsed() < bound && (ready.is_none() || rerouted.is_none() || live_out.is_none()) {
        if live_out.is_none()
            && (1..3).all(|j| {
                plan(d, j, &format!("{frozen}-v4"), "http4").as_deref() != Some("usable")
                    && plan(d, j, &format!("{frozen}-v6"), "http6").as_deref() != Some("usable")
            })
        {
            live_out = Some(t0.elapsed());
        }
        let routed = d.routed_nodes(false).unwrap();
        if unrouted.is_none() && !routed.contains(&NODE) {
            unrouted = Some(t0.elapsed());
        }
        if unrouted.is_some() && rerouted.is_none() && routed.contains(&NODE) {
            rerouted = Some(t0.elapsed());
        }
        if ready.is_none()
            && let Ok((_, r)) =
                supervisor(d, NODE).wait_event(skip, Duration::ZERO, |e| *e == SupEvent::Ready)
        {
            ready = Some(r.at.duration_since(t0));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let at = |r: &Record| r.at.duration_since(t0);
    let detected = match how {
        Gone::Killed => None,
        Gone::Hung => Some(step(
            d,
            NODE,
            skip,
            Duration::ZERO,
            "watchdog timeout",
            |e| *e == SupEvent::WatchdogTimeout,
        )),
    };
    let (i, exited) = step(d, NODE, skip, Duration::ZERO, "exit", |e| {
        matches!(e, SupEvent::Exited { .. })
    });
    let (i, post) = step(d, NODE, i, Duration::ZERO, "stator withdraw", |e| {
        matches!(e, SupEvent::StopPost { .. })
    });
    let (i, started) = step(d, NODE, i, Duration::ZERO, "restart", |e| {
        matches!(e, SupEvent::Started { .. })
    });
    let (_, back) = step(d, NODE, i, Duration::ZERO, "READY=1", |e| {
        *e == SupEvent::Ready
    });
    println!(
        "{prefix}: n0's controller (pid {pid}) {}, b{FROZEN}'s servers frozen at 0 s; watchdog \
         {watchdog:?}, abort {:?}, restart {:?}, health bound {health_bound:?}",
        match how {
            Gone::Killed => "killed (SIGKILL)",
            Gone::Hung => "hung (SIGSTOP)",
        },
        unit.abort_timeout,
        unit.restart,
    );
    if let Some((_, r)) = &detected {
        println!("  watchdog missed (SIGABRT sent):  {:>8.3?}", at(r));
    }
    println!(
        "  exit seen by the supervisor:     {:>8.3?}  {:?}",
        at(&exited),
        exited.event
    );
    println!("  stator withdraw confirmed:       {:>8.3?}", at(&post));
    println!("  router dropped n0:               {:>8.3?}", unrouted);
    println!(
        "  live nodes took b{FROZEN} out:         {:>8.3?}",
        live_out
    );
    println!("  n0 started again:                {:>8.3?}", at(&started));
    println!("  n0 ready (READY=1):              {:>8.3?}", at(&back));
    println!("  router routes n0 again:          {:>8.3?}", rerouted);

    let SupEvent::Exited { result, .. } = &exited.event else {
        unreachable!()
    };
    assert_eq!(
        result,
        match how {
            Gone::Killed => "signal",
            Gone::Hung => "watchdog",
        }
    );
    let SupEvent::StopPost { ok, output } = &post.event else {
        unreachable!()
    };
    assert!(ok, "stator withdraw failed:\n{output}");
    assert!(
        output.contains("BIRD confirmed: every VIP withdrawn"),
        "{output}"
    );
    // Withdrawn within the watchdog bound (for a hang) plus the withdrawal's own bound.
    let withdraw_bound = match how {
        Gone::Killed => Duration::ZERO,
        Gone::Hung => watchdog + unit.abort_timeout + Duration::from_secs(1),
    } + unit.withdraw_timeout;
    assert!(
        at(&post) <= withdraw_bound,
        "withdrawn after {:?} > {withdraw_bound:?}",
        at(&post)
    );
    assert!(unrouted.is_some(), "the router never dropped n0");
    assert!(live_out.is_some(), "the live nodes kept b{FROZEN}");
    assert!(rerouted.is_some(), "n0 never came back in the router");
    // Back and checking health: b0 is not usable on n0 either.
    assert_ne!(
        plan(d, NODE, &format!("{frozen}-v4"), "http4").as_deref(),
        Some("usable"),
        "n0 uses the frozen backend after its restart"
    );
    // After the bound: not one request reaches the backend the live nodes took out.
    let after = http_both(d, 256);
    for (t, f) in after.iter().zip(["IPv4", "IPv6"]) {
        println!(
            "  after: 256 new HTTP connections over {f}: {} answered ({}), {} failed ({:?})",
            t.answered(),
            per_backend_text(&t.per_backend),
            t.failed,
            t.first_error
        );
        assert_eq!(t.failed, 0, "{f}: {:?}", t.first_error);
        assert_eq!(t.per_backend.get(&frozen), None, "{f}");
    }
    d.backend_thaw(FROZEN);
    lab.finish();
}

/// 7. Node 0's `stator run` is killed (`kill -9`) while a backend freezes: the supervisor
///    (as systemd would) runs `stator withdraw`, restarts the node; after that, no request
///    reaches the backend the live nodes took out.
#[test]
fn supervised_controller_killed_is_withdrawn_and_restarted() {
    controller_gone("stf7-", 207, Gone::Killed);
}

/// 8. Node 0's `stator run` hangs (SIGSTOP) while a backend freezes: its watchdog pings stop,
///    the supervisor kills it (SIGABRT, then SIGKILL), withdraws and restarts it; after that,
///    no request reaches the backend the live nodes took out.
#[test]
fn supervised_controller_hung_is_killed_by_the_watchdog_withdrawn_and_restarted() {
    controller_gone("stf8-", 208, Gone::Hung);
}

/// 9. Node 0's configuration is gone when its controller dies: `stator withdraw` cannot read
///    it and disables Stator's VIP protocols in BIRD directly; every restart fails
///    (`stator check`), the node stays withdrawn and the router routes around it.
#[test]
fn supervised_controller_that_cannot_start_stays_withdrawn() {
    const NODE: usize = 0;
    let mut lab = Lab::up("stf9-", 209, |s| s.supervise = Some(lab_unit()));
    let d = lab.d();
    let skip = supervisor(d, NODE).events().len();
    std::fs::remove_file(d.nodes[NODE].run.config_path()).unwrap();
    let t0 = Instant::now();
    d.node_kill(NODE);
    let (i, post) = step(
        d,
        NODE,
        skip,
        Duration::from_secs(15),
        "stator withdraw",
        |e| matches!(e, SupEvent::StopPost { .. }),
    );
    let SupEvent::StopPost { ok, output } = &post.event else {
        unreachable!()
    };
    assert!(ok, "stator withdraw failed:\n{output}");
    assert!(output.contains("configuration unusable"), "{output}");
    let routed_out = [false, true].map(|v6| {
        d.wait_routed(v6, &[1, 2], Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"))
    });
    let (i, refused) = step(
        d,
        NODE,
        i,
        Duration::from_secs(15),
        "a refused start",
        |e| matches!(e, SupEvent::StartRefused { .. }),
    );
    let (_, post2) = step(d, NODE, i, Duration::from_secs(15), "withdraw again", |e| {
        matches!(e, SupEvent::StopPost { .. })
    });
    println!(
        "stf9-: config removed, n0 killed at 0 s; withdrawn (BIRD confirmed) {:.3?}; router \
         routes around n0 after {:.3?} (v4), {:.3?} (v6) from the call; first refused restart \
         {:.3?}; withdrawn again {:.3?}",
        post.at.duration_since(t0),
        routed_out[0],
        routed_out[1],
        refused.at.duration_since(t0),
        post2.at.duration_since(t0)
    );
    // It stays withdrawn: for five more seconds (several refused restarts), the router never
    // routes n0 again, and requests only reach the other nodes' backends, all answered.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(5) {
        for v6 in [false, true] {
            let routed = d.routed_nodes(v6).unwrap();
            assert!(!routed.contains(&NODE), "n0 routed again: {routed:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let refusals = supervisor(d, NODE)
        .events()
        .iter()
        .filter(|r| matches!(r.event, SupEvent::StartRefused { .. }))
        .count();
    assert!(refusals >= 2, "{refusals} refused starts");
    for (t, f) in http_both(d, 128).iter().zip(["IPv4", "IPv6"]) {
        println!(
            "  {f}: 128 new HTTP connections: {} answered, {} failed; {refusals} refused starts",
            t.answered(),
            t.failed
        );
        assert_eq!(t.failed, 0, "{f}: {:?}", t.first_error);
    }
    lab.finish();
}

/// 10. A clean restart (`systemctl restart`: SIGTERM, then a start at once) keeps today's
///     hitless path: the controller withdraws itself and exits 0, `stator withdraw
///     --unless-clean` does nothing, the XDP program stays attached (`on_exit = "keep"`), and
///     requests made throughout all succeed.
#[test]
fn supervised_clean_restart_keeps_forwarding_without_a_withdrawal() {
    const NODE: usize = 1;
    let mut lab = Lab::up("stfa-", 210, |s| s.supervise = Some(lab_unit()));
    let d = lab.d();
    let skip = supervisor(d, NODE).events().len();
    let client = d.client().ns.clone();
    let addrs = d.client().addrs(false);
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut total = Tally::default();
            while !stop.load(Ordering::SeqCst) {
                let t = http_batch(&client, &addrs, http(false), 64, 4, Duration::from_secs(30))
                    .unwrap();
                for (b, n) in t.per_backend {
                    *total.per_backend.entry(b).or_default() += n;
                }
                total.failed += t.failed;
                total.first_error = total.first_error.or(t.first_error);
            }
            total
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(xdp_attached(d, NODE));
    let t0 = Instant::now();
    supervisor(d, NODE).restart();
    let mut detached = false;
    let mut back = None;
    while t0.elapsed() < Duration::from_secs(60) && back.is_none() {
        detached |= !xdp_attached(d, NODE);
        back = supervisor(d, NODE)
            .wait_event(skip, Duration::ZERO, |e| *e == SupEvent::Ready)
            .ok();
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, back) = back.expect("n1 ready again within 60 s");
    let (i, exited) = step(d, NODE, skip, Duration::ZERO, "exit", |e| {
        matches!(e, SupEvent::Exited { .. })
    });
    let (_, post) = step(d, NODE, i, Duration::ZERO, "ExecStopPost", |e| {
        matches!(e, SupEvent::StopPost { .. })
    });
    let routed = d.wait_routed(false, &[0, 1, 2], Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let total = load.join().unwrap();
    println!(
        "stfa-: clean restart of n1: exited {:.3?} ({:?}), ExecStopPost {:.3?}, ready again \
         {:.3?}, routed again {:?}; XDP detached at some point: {detached}; requests \
         throughout: {} answered ({}), {} failed",
        exited.at.duration_since(t0),
        exited.event,
        post.at.duration_since(t0),
        back.at.duration_since(t0),
        routed,
        total.answered(),
        per_backend_text(&total.per_backend),
        total.failed
    );
    let SupEvent::Exited { result, .. } = &exited.event else {
        unreachable!()
    };
    assert_eq!(result, "success");
    let SupEvent::StopPost { ok, output } = &post.event else {
        unreachable!()
    };
    assert!(ok, "{output}");
    assert!(
        output.contains("clean stop: nothing to withdraw"),
        "{output}"
    );
    assert!(
        !detached,
        "the XDP program was detached during a clean restart"
    );
    routed.unwrap();
    assert_eq!(total.failed, 0, "{:?}", total.first_error);
    lab.finish();
}
