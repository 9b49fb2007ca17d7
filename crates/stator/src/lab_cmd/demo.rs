//! `stator lab demo`: bring the lab up, drive traffic, and show what happens when a node dies
//! and when a backend fails — live, about once a second — then tear everything down.
//!
//! Traffic, bounded in count and time: short HTTP connections from the client's 64 addresses
//! (about 150 a second), UDP requests (about 50 a second) and 120 long-lived TCP echo connections, each answering a line every
//! second or so. Phases: steady traffic; node l0's uplink cut (the router withdraws it when
//! BFD notices, about 0.3 s — or, with `--no-bfd`, when the BGP hold time expires — and its
//! flows move to nodes that have no state for them, yet every long-lived connection keeps its
//! backend); l0 back; backend b3's servers stopped (health checks take it out of every node's
//! Maglev table); b3 back. With `--prometheus`, the end shows what Prometheus saw.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use stator_lab::deploy::{Deployment, ECHO_PORT, HTTP_PORT, LabState, UDP_PORT};
use stator_lab::traffic::{LongLived, http_batch, udp_batch};

use super::view::{Sample, render, sample};
use super::{DemoArgs, peer_xdp, spec};

/// Long-lived connections the demo keeps open.
const LONG_LIVED: usize = 120;
/// The longest the traffic threads run, whatever happens.
const TRAFFIC_LIMIT: Duration = Duration::from_secs(240);

/// What happened to the client's traffic in one phase.
#[derive(Debug, Clone, Default)]
struct PhaseStats {
    http_ok: usize,
    http_failed: usize,
    udp_ok: usize,
    udp_failed: usize,
    rounds: usize,
    exchanges: usize,
    moved: usize,
    broken: usize,
}

/// The client side, shared with the traffic threads.
struct Traffic {
    stop: AtomicBool,
    phase: AtomicUsize,
    stats: Mutex<Vec<PhaseStats>>,
    long_lived: Mutex<Vec<(String, bool)>>,
}

impl Traffic {
    fn with_phase(&self, f: impl FnOnce(&mut PhaseStats)) {
        let p = self.phase.load(Ordering::Relaxed);
        if let Ok(mut s) = self.stats.lock() {
            if s.len() <= p {
                s.resize(p + 1, PhaseStats::default());
            }
            f(&mut s[p]);
        }
    }
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<()> {
    let spec = spec(&args.lab, args.subnet, 3, 4, &args.extras)?;
    println!(
        "stator lab demo: building the deployment ({} nodes, {} backends, {}{}, prefix {}) …",
        spec.nodes,
        spec.backends,
        if spec.bfd_nodes.is_empty() {
            "BGP hold timers only"
        } else {
            "BFD between router and nodes"
        },
        if spec.prometheus { ", Prometheus" } else { "" },
        spec.prefix
    );
    let t0 = Instant::now();
    let mut d = Deployment::up(&spec, &peer_xdp).context("bringing the lab up")?;
    println!(
        "up in {:.1}s: the router routes the VIPs over all {} nodes",
        t0.elapsed().as_secs_f64(),
        spec.nodes
    );
    let result = drive(&mut d);
    if args.keep {
        println!(
            "--keep: the lab stays up; look around (`stator lab status --prefix {p}`), then \
             `stator lab down --prefix {p}`",
            p = spec.prefix
        );
        d.persist();
    } else {
        let t = Instant::now();
        drop(d);
        println!(
            "torn down in {:.1}s (namespaces, processes, pins removed)",
            t.elapsed().as_secs_f64()
        );
    }
    result
}

fn drive(d: &mut Deployment) -> Result<()> {
    let state = d.state();
    let dir = d.spec().dir.clone();
    let client = d.client().ns.clone();
    let srcs = d.client().addrs(false);
    let vip = Deployment::vip(false);
    let mut ll = LongLived::open(
        &client,
        &srcs,
        SocketAddr::new(vip, ECHO_PORT),
        LONG_LIVED,
        8,
        Duration::from_secs(5),
    )?
    .map_err(|e| anyhow!("opening the long-lived connections: {e}"))?;
    let traffic = Arc::new(Traffic {
        stop: AtomicBool::new(false),
        phase: AtomicUsize::new(0),
        stats: Mutex::new(Vec::new()),
        long_lived: Mutex::new(ll.conns.iter().map(|c| (c.backend.clone(), true)).collect()),
    });
    let started = Instant::now();
    let http = {
        let (t, client, srcs) = (Arc::clone(&traffic), client.clone(), srcs.clone());
        std::thread::spawn(move || {
            while !t.stop.load(Ordering::Relaxed) && started.elapsed() < TRAFFIC_LIMIT {
                let tick = Instant::now();
                if let Ok(r) = http_batch(
                    &client,
                    &srcs,
                    SocketAddr::new(vip, HTTP_PORT),
                    30,
                    6,
                    Duration::from_secs(10),
                ) {
                    t.with_phase(|s| {
                        s.http_ok += r.answered();
                        s.http_failed += r.failed;
                    });
                }
                if let Ok(r) = udp_batch(
                    &client,
                    &srcs,
                    SocketAddr::new(vip, UDP_PORT),
                    10,
                    2,
                    Duration::from_secs(5),
                ) {
                    t.with_phase(|s| {
                        s.udp_ok += r.answered();
                        s.udp_failed += r.failed;
                    });
                }
                std::thread::sleep(Duration::from_millis(200).saturating_sub(tick.elapsed()));
            }
        })
    };
    let pinger = {
        let t = Arc::clone(&traffic);
        std::thread::spawn(move || {
            let mut n = 0;
            while !t.stop.load(Ordering::Relaxed) && started.elapsed() < TRAFFIC_LIMIT {
                let tick = Instant::now();
                n += 1;
                let r = ll.round(&format!("ping {n}"), 8, Duration::from_secs(20));
                t.with_phase(|s| {
                    s.rounds += 1;
                    s.exchanges += r.same_backend;
                    s.moved += r.other_backend;
                    s.broken += r.failed;
                });
                if let Ok(mut l) = t.long_lived.lock() {
                    *l = ll
                        .conns
                        .iter()
                        .map(|c| (c.backend.clone(), c.alive))
                        .collect();
                }
                std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
            }
        })
    };

    let bfd = !d.spec().bfd_nodes.is_empty();
    let mut screen = Screen::new(state.clone(), dir.clone(), Arc::clone(&traffic));
    let phases = [
        "steady traffic: ECMP spreads flows over the nodes, Maglev over the backends",
        if bfd {
            "node l0 dies (its uplink is cut): the router withdraws it when BFD notices \
             (300 ms); its flows move to l1/l2, which have no state for them"
        } else {
            "node l0 dies (its uplink is cut): the router withdraws it when the BGP hold time \
             expires; its flows move to l1/l2, which have no state for them"
        },
        "node l0 is back: the router spreads over it again",
        "backend b3 fails (its servers stop): health checks take it out of every node's table",
        "backend b3 is back",
    ];
    let mut notes = Vec::new();
    // 1. steady
    screen.phase(0, phases[0]);
    screen.show(Duration::from_secs(10), |_| false);
    // 2. node l0 dies
    screen.phase(1, phases[1]);
    // The router's table is polled every 10 ms beside the screen, for a precise figure.
    let watcher = {
        let state = state.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                if !state.routed_nodes(false).contains(&0) {
                    return Some(t.elapsed());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        })
    };
    d.cut(0)?;
    screen.show(Duration::from_secs(20), |s| !s.routed(0));
    notes.push(match watcher.join().ok().flatten() {
        Some(took) => format!(
            "l0's uplink cut: the router withdrew l0 after {:.2}s ({})",
            took.as_secs_f64(),
            if bfd {
                "BFD, 100 ms x 3"
            } else {
                "BGP hold time 3 s"
            }
        ),
        None => "l0's uplink cut: the router did not withdraw l0 within 20s".into(),
    });
    screen.show(Duration::from_secs(6), |_| false);
    // 3. l0 back
    screen.phase(2, phases[2]);
    d.restore(0)?;
    let t = Instant::now();
    let back = screen.show(Duration::from_secs(20), |s| s.routed(0));
    notes.push(match back {
        Some(_) => format!(
            "l0 restored: routed again after {:.1}s",
            t.elapsed().as_secs_f64()
        ),
        None => "l0 restored: not routed again within 20s".into(),
    });
    screen.show(Duration::from_secs(4), |_| false);
    // 4. backend b3 fails
    screen.phase(3, phases[3]);
    d.backend_stop(3);
    let t = Instant::now();
    let down = screen.show(Duration::from_secs(15), |s| s.health(3) == "down");
    notes.push(match down {
        Some(_) => format!(
            "b3 stopped: marked down after {:.1}s; its long-lived connections broke with it",
            t.elapsed().as_secs_f64()
        ),
        None => "b3 stopped: not marked down within 15s".into(),
    });
    screen.show(Duration::from_secs(5), |_| false);
    // 5. b3 back
    screen.phase(4, phases[4]);
    d.backend_start(3)?;
    let t = Instant::now();
    let up = screen.show(Duration::from_secs(15), |s| s.health(3) == "up");
    notes.push(match up {
        Some(_) => format!("b3 restarted: up after {:.1}s", t.elapsed().as_secs_f64()),
        None => "b3 restarted: not up within 15s".into(),
    });
    screen.show(Duration::from_secs(3), |_| false);

    traffic.stop.store(true, Ordering::Relaxed);
    let _ = http.join();
    let _ = pinger.join();
    summary(&traffic, &phases, &notes, bfd);
    if d.prometheus().is_some() {
        println!("\nPrometheus (in the router's namespace, scraping every node each second):");
        print!("{}", super::view::prometheus_summary(&state));
    }
    Ok(())
}

/// The live view: redrawn every second on a terminal, printed every few seconds otherwise.
struct Screen {
    state: LabState,
    dir: std::path::PathBuf,
    traffic: Arc<Traffic>,
    tty: bool,
    prev: Option<Sample>,
    last_print: Option<Instant>,
    phase: (usize, &'static str),
    phase_start: Instant,
    start: Instant,
}

impl Screen {
    fn new(state: LabState, dir: std::path::PathBuf, traffic: Arc<Traffic>) -> Self {
        Self {
            state,
            dir,
            traffic,
            tty: std::io::stdout().is_terminal(),
            prev: None,
            last_print: None,
            phase: (0, ""),
            phase_start: Instant::now(),
            start: Instant::now(),
        }
    }

    fn phase(&mut self, i: usize, what: &'static str) {
        self.traffic.phase.store(i, Ordering::Relaxed);
        self.phase = (i, what);
        self.phase_start = Instant::now();
        if !self.tty {
            println!("\n== phase {}/5: {what}", i + 1);
        }
    }

    /// Redraws about once a second for at most `limit`, or until `done` holds for a sample
    /// (then returns how long that took).
    fn show(&mut self, limit: Duration, done: impl Fn(&Seen<'_>) -> bool) -> Option<Duration> {
        let start = Instant::now();
        loop {
            let tick = Instant::now();
            let cur = sample(&self.state, &self.dir);
            self.draw(&cur);
            let finished = done(&Seen(&cur));
            self.prev = Some(cur);
            if finished {
                return Some(start.elapsed());
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
        }
    }

    fn draw(&mut self, cur: &Sample) {
        let every = if self.tty { 0 } else { 3 };
        if self
            .last_print
            .is_some_and(|t| t.elapsed() < Duration::from_secs(every))
        {
            return;
        }
        self.last_print = Some(Instant::now());
        let ll: Vec<(String, bool)> = self
            .traffic
            .long_lived
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        let mut per_backend = vec![0usize; self.state.backends];
        for (b, alive) in &ll {
            if let Some(k) = b.strip_prefix('b').and_then(|k| k.parse::<usize>().ok())
                && *alive
                && k < per_backend.len()
            {
                per_backend[k] += 1;
            }
        }
        let stats = self
            .traffic
            .stats
            .lock()
            .ok()
            .and_then(|s| s.get(self.phase.0).cloned())
            .unwrap_or_default();
        let routes = |v6: bool| {
            let r = self.state.routed_nodes(v6);
            if r.is_empty() {
                "nothing".to_owned()
            } else {
                r.iter()
                    .map(|j| format!("l{j}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        };
        let mut out = String::new();
        if self.tty {
            out.push_str("\x1b[H\x1b[2J");
        }
        out.push_str(&format!(
            "stator lab demo  t={:>3}s  phase {}/5 ({:.0}s): {}\n",
            self.start.elapsed().as_secs(),
            self.phase.0 + 1,
            self.phase_start.elapsed().as_secs_f64(),
            self.phase.1
        ));
        out.push_str(&format!(
            "  router: {} via {}   {} via {}\n",
            stator_lab::deploy::VIP_V4,
            routes(false),
            stator_lab::deploy::VIP_V6,
            routes(true)
        ));
        out.push_str(&render(self.prev.as_ref(), cur, Some(&per_backend)));
        out.push_str(&format!(
            "  client, this phase: HTTP {} answered, {} failed; UDP {} answered, {} failed; \
             long-lived {} alive of {}, {} exchanges kept their backend, {} moved, {} broke\n",
            stats.http_ok,
            stats.http_failed,
            stats.udp_ok,
            stats.udp_failed,
            ll.iter().filter(|x| x.1).count(),
            ll.len(),
            stats.exchanges,
            stats.moved,
            stats.broken
        ));
        print!("{out}");
    }
}

/// A sample as the phase conditions read it.
struct Seen<'a>(&'a Sample);

impl Seen<'_> {
    fn routed(&self, j: usize) -> bool {
        self.0.nodes.get(j).is_some_and(|n| n.routed_v4)
    }

    fn health(&self, k: usize) -> &str {
        self.0.backends.get(k).map_or("", |b| b.health.as_str())
    }
}

fn summary(traffic: &Traffic, phases: &[&str], notes: &[String], bfd: bool) {
    println!("\nsummary");
    let stats = traffic.stats.lock().map(|s| s.clone()).unwrap_or_default();
    for (i, what) in phases.iter().enumerate() {
        let s = stats.get(i).cloned().unwrap_or_default();
        let short = what.split(':').next().unwrap_or(what);
        println!(
            "  {}. {short}: HTTP {} ok / {} failed; UDP {} ok / {} failed; long-lived: {} \
             exchanges on the same backend, {} on another, {} connections broke",
            i + 1,
            s.http_ok,
            s.http_failed,
            s.udp_ok,
            s.udp_failed,
            s.exchanges,
            s.moved,
            s.broken
        );
    }
    for n in notes {
        println!("  {n}");
    }
    println!(
        "  (while l0 was cut, what the router still sent to it was lost until {}; TCP \
         retransmitted it to l1 or l2, whose Maglev tables pick the same backend. b3's \
         connections broke because its server process died.)",
        if bfd {
            "BFD declared it dead"
        } else {
            "the hold time expired"
        }
    );
}
