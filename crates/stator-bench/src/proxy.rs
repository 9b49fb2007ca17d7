//! `stator bench proxy`: `wrk` against Stator's HTTP listener, nginx and HAProxy, proxying to
//! the same local backends, in the same run; then Tengine's experiment (20 vs 2,000 backends,
//! VNSWRR vs SWRR), each measured twice on the same proxy: cold (the run opens the upstream
//! connections) and warm (pools full); then memory per idle kept-alive connection; then the
//! 2014 paper's experiment, new connections per second with persistence on under `steering =
//! "kernel"` and `"source"` (from many client addresses, which wrk cannot do: [`churn`]).
//! Figures and ratios, never pass/fail; every load is bounded (`wrk -d`, the churn's seconds).
//!
//! Fairness: the three proxies get the same settings — 2 workers/threads, upstream keep-alive
//! (32 idle connections), `SO_REUSEPORT` listeners, no access log, the same timeouts, no
//! limit of connections per client address (Stator's `max_connections_per_source` is 0: the
//! rivals' configurations have none, and every client here is 127.0.0.1) — and
//! the same CPUs, in two modes, both measured in every run: *pinned* (each proxy under
//! `taskset -c 0`, `wrk` on CPU 1) and *unpinned* (proxies and `wrk` wherever the scheduler
//! puts them, as a user runs them). The backends are Stator's own: a small HTTP/1.1 responder
//! (tokio, one thread, pinned to CPU 1 in both modes) answering every request with 13 bytes,
//! kept alive.
//!
//! Rounds: every (mode, case) is measured `--rounds` times (3 by default), the order of the
//! proxies rotated by one each round, and the figures are the medians. On the loaded
//! development machine the proxy measured first in a case was at times far slower for reasons
//! of its own (0.53–0.59× the same binary measured second, new connections): one fixed order
//! would have charged that to one proxy.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::error::BenchError;
use crate::load::{
    Backends, Churned, Run, RunOptions, churn, gone, medians, timed_wrk, tree, wait_port, wrk,
};
use crate::rivals::{
    self, Proc, failed, free_port, io, nginx_globals, nginx_prefix, spawn_haproxy, spawn_nginx,
    spawn_stator, stator_pool_config, tempdir, which,
};

type Result<T> = std::result::Result<T, BenchError>;

/// Options of `stator bench proxy`.
#[derive(Debug, clap::Args)]
pub struct BenchProxyArgs {
    #[command(flatten)]
    run: RunOptions,
    /// Concurrent client connections of wrk.
    #[arg(long, default_value_t = 64)]
    connections: u32,
    /// Skip Tengine's 20 vs 2,000 backends experiment.
    #[arg(long)]
    no_scale: bool,
    /// Idle kept-alive client connections held open on each proxy to measure its memory per
    /// connection (default 10,000, 1,000 with --quick; 0 skips it; fewer when the descriptor
    /// limit cannot hold them, said on stderr).
    #[arg(long)]
    idle: Option<usize>,
    /// Skip the 2014 paper's experiment (new connections per second with persistence on,
    /// `steering = "kernel"` against `"source"`; needs root for the steering program).
    #[arg(long, conflicts_with = "steering_only")]
    no_steering: bool,
    /// Only the 2014 paper's experiment (needs root).
    #[arg(long)]
    steering_only: bool,
}

const CASES: [(&str, bool); 2] = [("keep-alive", false), ("new connection per request", true)];
const PROXIES: [&str; 4] = [ACCESS_LOG, "stator", "nginx", "haproxy"];

/// Runs the benchmark; `stator` is the binary whose `stator run` serves the listener.
pub fn run(args: &BenchProxyArgs, stator: &Path) -> Result<()> {
    for tool in ["wrk", "nginx", "haproxy", "taskset"] {
        if which(tool).is_none() {
            return Err(failed(format!(
                "`{tool}` is not installed: `make test-deps` installs wrk, nginx-light and haproxy"
            )));
        }
    }
    let secs = args.run.seconds();
    let dir = tempdir()?;
    let backends = Backends::start(if args.no_scale || args.steering_only {
        2
    } else {
        2000
    })?;
    let mut rounds = Vec::new();
    let one = &backends.addrs[..1];
    let n_rounds = args.run.rounds();
    let modes = args.run.modes();
    for &pin in modes.iter().filter(|_| !args.steering_only) {
        rivals::set_pinning(pin);
        for round in 0..n_rounds {
            for (case, close) in CASES {
                let mut order = PROXIES;
                order.rotate_left(round % PROXIES.len());
                for kind in order {
                    let port = free_port()?;
                    let log = dir.join(format!("access-{port}.log"));
                    let mut p = match kind {
                        "stator" => start_stator(stator, &dir, port, one, "vnswrr", None)?,
                        ACCESS_LOG => start_stator(stator, &dir, port, one, "vnswrr", Some(&log))?,
                        "nginx" => start_nginx(&dir, port, one)?,
                        _ => start_haproxy(&dir, port, one, 8000)?,
                    };
                    if let Err(e) = wait_port(port) {
                        return Err(failed(format!("{kind}: {}", gone(&mut p, e))));
                    }
                    let r = timed_wrk(p.0.id(), port, secs, args.connections, close, pin);
                    p.stop();
                    let _ = std::fs::remove_file(&log);
                    let mut r = r?;
                    r.proxy = kind.into();
                    r.case = case.into();
                    r.pinning = if pin { "pinned" } else { "unpinned" }.into();
                    r.round = round;
                    rounds.push(r);
                }
            }
        }
    }
    rivals::set_pinning(true);
    let idle_n = if args.steering_only {
        0
    } else {
        args.idle
            .unwrap_or(if args.run.quick { 1000 } else { 10_000 })
    };
    let mut idle = Vec::new();
    // HAProxy wants 2 × maxconn descriptors (maxconn = n + 1,000 here) and refuses to start
    // beyond the hard limit, which a container may not let even root raise: n is capped to fit
    let hard = stator_sys::limits::nofile().hard.unwrap_or(u64::MAX);
    let cap = usize::try_from(hard.saturating_sub(4000) / 2).unwrap_or(usize::MAX);
    if idle_n > cap {
        eprintln!(
            "idle connections: {idle_n} asked, {cap} measured (the descriptor limit is {hard})"
        );
    }
    let idle_n = idle_n.min(cap);
    if idle_n > 0 {
        for kind in ["stator", "nginx", "haproxy"] {
            idle.push(idle_memory(kind, stator, &dir, one, idle_n)?);
        }
    }
    let runs = medians(&rounds);
    let mut scale = Vec::new();
    if !args.no_scale && !args.steering_only {
        for n in [20usize, 2000] {
            for sched in ["vnswrr", "swrr"] {
                let port = free_port()?;
                let mut p = start_stator(stator, &dir, port, &backends.addrs[..n], sched, None)?;
                if let Err(e) = wait_port(port) {
                    return Err(failed(format!("stator {sched}: {}", gone(&mut p, e))));
                }
                // Cold: the first run opens each worker's upstream connections (2,000
                // backends: up to 2 × 2,000 connects before one is reused). Warm: the same
                // proxy again, its pools full — the scheduler and the proxy path alone.
                for phase in ["cold", "warm"] {
                    let r = wrk(port, secs, args.connections, false, true);
                    let mut r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            p.stop();
                            return Err(e);
                        }
                    };
                    r.proxy = format!("stator {sched}");
                    r.case = format!("{n} backends, {phase}");
                    r.pinning = "pinned".into();
                    scale.push(r);
                }
                p.stop();
            }
        }
    }
    let steering = if args.no_steering {
        Vec::new()
    } else if !stator_sys::users::is_root() {
        if args.steering_only {
            return Err(failed(
                "--steering-only: steering = \"source\" needs root for its BPF program",
            ));
        }
        eprintln!("steering: skipped (steering = \"source\" needs root for its BPF program)");
        Vec::new()
    } else {
        steering_runs(stator, &dir, &backends.addrs[..2], secs, n_rounds, &modes)?
    };
    let _ = std::fs::remove_dir_all(&dir);
    report(
        &runs,
        &rounds,
        &scale,
        &idle,
        &steering,
        secs,
        args.connections,
        args.run.json,
    );
    Ok(())
}

/// One run of the 2014 paper's experiment.
#[derive(Debug, Clone, serde::Serialize)]
struct Steered {
    steering: &'static str,
    pinning: &'static str,
    round: usize,
    load: Churned,
    /// The same clients on kept-alive connections ([`STEER_KEEPALIVE`] requests each).
    keepalive: Churned,
    /// The listener's counters after the run (`GET /v1/listeners`): client connections, and
    /// picks decided by a client's persistence entry.
    connections_total: u64,
    session_hits: u64,
    /// `steering = "cpu"`: selections that ran on their worker's CPU, and those that did not
    /// (the reuseport program's `cpu_local` / `cpu_remote`).
    cpu_local: u64,
    cpu_remote: u64,
    /// The one-minute load average when the run ended.
    load_average: f64,
}

/// Client addresses and concurrent clients of the steering runs.
const STEER_CLIENTS: u32 = 256;
const STEER_CONCURRENCY: usize = 64;
/// Requests per connection of the steering runs' second load (requests per second).
const STEER_KEEPALIVE: u32 = 100;

/// The 2014 paper's experiment (`seeds/kernel-session-persistence.zh.txt`): its kernel
/// affinity raised new connections per second by ~12% with session persistence on. Here: an
/// HTTP listener with 2 workers, `persistence = "10m"`, two backends, new connections with
/// `Connection: close` from 256 client addresses ([`churn`]), `steering = "kernel"` and
/// `"source"` alternated over the rounds — and, unpinned, `"cpu"`: the workers pinned one per
/// CPU (the first two the bench may use) and receive steering in generic XDP on `lo`, the
/// paper's locality (a pinned run keeps the listener on one CPU, which `"cpu"` cannot).
fn steering_runs(
    stator: &Path,
    dir: &Path,
    backends: &[SocketAddr],
    secs: u64,
    n_rounds: usize,
    modes: &[bool],
) -> Result<Vec<Steered>> {
    let mut out = Vec::new();
    let cpus = stator_sys::cpu::allowed_cpus().unwrap_or_default();
    for &pin in modes {
        rivals::set_pinning(pin);
        for round in 0..n_rounds {
            let mut order = vec!["kernel", "source"];
            if !pin && cpus.len() >= 2 {
                order.push("cpu");
            }
            let n = order.len();
            order.rotate_left(round % n);
            for steering in order {
                let port = free_port()?;
                let socket = dir.join(format!("stator-{port}.sock"));
                let mut t = stator_pool_config(backends, &socket)?;
                if steering == "cpu" {
                    t += &format!(
                        "[receive_steering]\ninterfaces = [\"lo\"]\ncpus = [{}, {}]\n",
                        cpus[0], cpus[1]
                    );
                }
                t += &format!(
                    "[[listener]]\nname = \"bench\"\naddress = \"127.0.0.1:{port}\"\n\
                     protocol = \"http\"\npool = \"b\"\nworkers = 2\nsteering = \"{steering}\"\n\
                     persistence = \"10m\"\nmax_connections_per_source = 0\n\
                     [listener.timeouts]\nconnect = \"5s\"\nheader_read = \"60s\"\n\
                     idle = \"60s\"\nresponse = \"60s\"\n[listener.http]\n\
                     keepalive_pool = 32\nforwarded_for = false\n"
                );
                let mut p = spawn_stator(stator, &dir.join(format!("stator-{port}.toml")), &t)?;
                if let Err(e) = wait_port(port) {
                    rivals::set_pinning(true);
                    return Err(failed(format!("stator {steering}: {}", gone(&mut p, e))));
                }
                let load = churn(port, STEER_CLIENTS, STEER_CONCURRENCY, secs, pin, 1);
                // the decisions counted so far are the new connections'
                let counters = listener_counters(&socket);
                let keepalive = churn(
                    port,
                    STEER_CLIENTS,
                    STEER_CONCURRENCY,
                    secs,
                    pin,
                    STEER_KEEPALIVE,
                );
                p.stop();
                let (load, keepalive) = match (load, keepalive) {
                    (Ok(l), Ok(k)) => (l, k),
                    (Err(e), _) | (_, Err(e)) => {
                        rivals::set_pinning(true);
                        return Err(e);
                    }
                };
                let c = counters.unwrap_or_default();
                out.push(Steered {
                    steering,
                    pinning: if pin { "pinned" } else { "unpinned" },
                    round,
                    load,
                    keepalive,
                    connections_total: c.connections,
                    session_hits: c.session_hits,
                    cpu_local: c.cpu_local,
                    cpu_remote: c.cpu_remote,
                    load_average: load_average(),
                });
            }
        }
    }
    rivals::set_pinning(true);
    Ok(out)
}

/// The one-minute load average (`/proc/loadavg`), NaN where unreadable.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// What the bench listener counted.
#[derive(Debug, Default)]
struct ListenerCounters {
    connections: u64,
    session_hits: u64,
    cpu_local: u64,
    cpu_remote: u64,
}

/// The bench listener's client connections, persistence hits and steering decisions, from
/// `GET /v1/listeners` on the node's API socket (the run's own; root is admitted).
fn listener_counters(socket: &Path) -> Option<ListenerCounters> {
    use std::io::{Read, Write};
    let mut c = std::os::unix::net::UnixStream::connect(socket).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(b"GET /v1/listeners HTTP/1.1\r\nHost: stator\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    let body = &text[text.find("\r\n\r\n")? + 4..];
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let l = v["listeners"].as_array()?.first()?;
    let decisions = &l["steering_decisions"];
    Some(ListenerCounters {
        connections: l["connections"]["total"].as_u64()?,
        session_hits: l["sessions"]["hits"].as_u64()?,
        cpu_local: decisions["cpu_local"].as_u64().unwrap_or(0),
        cpu_remote: decisions["cpu_remote"].as_u64().unwrap_or(0),
    })
}

fn report_steering(runs: &[Steered]) {
    if runs.is_empty() {
        return;
    }
    println!(
        "the 2014 paper's experiment (new connections, persistence on, 2 workers, 2 backends, \
         {STEER_CONCURRENCY} clients from {STEER_CLIENTS} addresses; paper: +12% connections/s \
         with its kernel affinity):"
    );
    println!(
        "  {:<9} {:<7} {:>5} {:>12} {:>9} {:>7} {:>12} {:>9} {:>10} {:>5}",
        "mode",
        "steering",
        "round",
        "conn/s",
        "p99 ms",
        "errors",
        "persistence",
        "on-CPU",
        "req/s",
        "load"
    );
    for r in runs {
        let local = if r.steering == "cpu" {
            format!(
                "{:.1}%",
                100.0 * r.cpu_local as f64 / (r.cpu_local + r.cpu_remote).max(1) as f64
            )
        } else {
            "-".into()
        };
        println!(
            "  {:<9} {:<7} {:>5} {:>12.0} {:>9.2} {:>7} {:>11.1}% {:>9} {:>10.0} {:>5.1}",
            r.pinning,
            r.steering,
            r.round,
            r.load.connections_per_second,
            r.load.p99_ms,
            r.load.errors + r.keepalive.errors,
            100.0 * r.session_hits as f64 / r.connections_total.max(1) as f64,
            local,
            r.keepalive.requests_per_second,
            r.load_average
        );
    }
    for pin in ["pinned", "unpinned"] {
        let med_of = |steering: &str, rate: fn(&Steered) -> f64| {
            let mut v: Vec<f64> = runs
                .iter()
                .filter(|r| r.pinning == pin && r.steering == steering)
                .map(rate)
                .collect();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => f64::NAN,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        let med = |steering: &str| med_of(steering, |r| r.load.connections_per_second);
        let req = |steering: &str| med_of(steering, |r| r.keepalive.requests_per_second);
        let (k, s, c) = (med("kernel"), med("source"), med("cpu"));
        if k.is_finite() && s.is_finite() {
            println!(
                "  {pin}: source / kernel {:.2}x connections/s (medians; the paper: ~1.12x)",
                s / k
            );
        }
        if k.is_finite() && c.is_finite() {
            println!(
                "  {pin}: cpu / kernel {:.2}x, cpu / source {:.2}x connections/s (medians; the \
                 paper: ~1.12x with its interrupt and process affinity)",
                c / k,
                c / s
            );
        }
        let (rk, rs, rc) = (req("kernel"), req("source"), req("cpu"));
        if rk.is_finite() && rs.is_finite() {
            print!(
                "  {pin}: requests/s over kept-alive connections ({STEER_KEEPALIVE} each): \
                 source / kernel {:.2}x",
                rs / rk
            );
            if rc.is_finite() {
                print!(", cpu / kernel {:.2}x", rc / rk);
            }
            println!(" (medians)");
        }
    }
    println!(
        "  persistence = picks decided by a client's entry / client connections (a client's \
         first connection to a worker always misses)"
    );
}

/// Memory a proxy holds per idle kept-alive client connection.
#[derive(Debug, Clone, serde::Serialize)]
struct Idle {
    proxy: String,
    connections: usize,
    /// Resident memory of the proxy's processes (all of them: nginx's master and workers),
    /// KiB, before the connections and with them open.
    rss_before_kib: u64,
    rss_after_kib: u64,
    bytes_per_connection: f64,
}

/// Starts `kind`, warms it (a few requests: lazy setup, upstream pools), then opens `n`
/// client connections, each sending one request and reading its answer, and keeps them open
/// and idle: the growth of the proxy's resident memory over `n` is its cost per idle
/// kept-alive connection (nginx frees a kept-alive connection's buffers while it waits).
fn idle_memory(
    kind: &str,
    stator: &Path,
    dir: &Path,
    backends: &[SocketAddr],
    n: usize,
) -> Result<Idle> {
    use std::io::{Read, Write};
    // every proxy needs a descriptor per connection, and the bench one more: the soft limit
    // raised to the hard one (`run` sized `n` to fit it)
    let _ = stator_sys::limits::raise_nofile();
    let port = free_port()?;
    let mut p = match kind {
        "stator" => start_stator(stator, dir, port, backends, "vnswrr", None)?,
        "nginx" => start_nginx(dir, port, backends)?,
        _ => start_haproxy(dir, port, backends, n + 1000)?,
    };
    let pid = p.0.id();
    if let Err(e) = wait_port(port) {
        return Err(failed(format!("{kind}: {}", gone(&mut p, e))));
    }
    let measured = (|| {
        let request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
        let exchange = |c: &mut std::net::TcpStream| -> std::io::Result<()> {
            c.write_all(request)?;
            // the head, then the 13-byte body every backend answer has
            let mut got = Vec::with_capacity(512);
            let mut b = [0u8; 512];
            loop {
                let k = c.read(&mut b)?;
                if k == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                got.extend_from_slice(&b[..k]);
                if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
                    && got.len() >= end + 4 + 13
                {
                    return Ok(());
                }
            }
        };
        let open = || -> std::io::Result<std::net::TcpStream> {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            exchange(&mut c)?;
            Ok(c)
        };
        let warm: Vec<_> = (0..64)
            .map(|_| open())
            .collect::<std::io::Result<_>>()
            .map_err(io("warming the proxy"))?;
        drop(warm);
        std::thread::sleep(Duration::from_millis(300));
        let before = tree_rss_kib(pid);
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(open().map_err(io("opening idle connections"))?);
        }
        // idle long enough for every proxy to have put its idle connections to rest (Stator
        // after 50 ms; nginx and HAProxy at once)
        std::thread::sleep(Duration::from_millis(1500));
        let after = tree_rss_kib(pid);
        drop(held);
        Ok(Idle {
            proxy: kind.into(),
            connections: n,
            rss_before_kib: before,
            rss_after_kib: after,
            bytes_per_connection: after.saturating_sub(before) as f64 * 1024.0 / n as f64,
        })
    })();
    p.stop();
    measured
}

/// Resident memory of process `pid` and all its descendants, KiB (`/proc`).
fn tree_rss_kib(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn report_idle(idle: &[Idle]) {
    if idle.is_empty() {
        return;
    }
    let n = idle[0].connections;
    println!(
        "memory per idle kept-alive client connection ({n} held open on each proxy, after one request each and 1.5 s idle; resident memory of all the proxy's processes):"
    );
    for i in idle {
        println!(
            "  {:<8} {:>8.0} bytes  (RSS {} -> {} KiB)",
            i.proxy, i.bytes_per_connection, i.rss_before_kib, i.rss_after_kib
        );
    }
    let per = |p: &str| {
        idle.iter()
            .find(|i| i.proxy == p)
            .map_or(f64::NAN, |i| i.bytes_per_connection)
    };
    println!(
        "  stator/nginx {:.2}x, stator/haproxy {:.2}x (goal <= 1.0x nginx)",
        per("stator") / per("nginx"),
        per("stator") / per("haproxy")
    );
}

#[allow(clippy::too_many_arguments)] // one per section of the report
fn report(
    runs: &[Run],
    rounds: &[Run],
    scale: &[Run],
    idle: &[Idle],
    steering: &[Steered],
    secs: u64,
    conns: u32,
    json: bool,
) {
    let find = |p: &str, c: &str, pin: &str| {
        runs.iter()
            .find(|r| r.proxy == p && r.case == c && r.pinning == pin)
    };
    let mut ratios = Vec::new();
    for (case, pin) in ["pinned", "unpinned"]
        .into_iter()
        .flat_map(|pin| CASES.map(|(c, _)| (c, pin)))
    {
        if let (Some(s), Some(n), Some(h)) = (
            find("stator", case, pin),
            find("nginx", case, pin),
            find("haproxy", case, pin),
        ) {
            let logged = find(ACCESS_LOG, case, pin);
            ratios.push(json!({
                "case": case,
                "pinning": pin,
                "access_log_on_over_off": logged.map(|l| l.requests_per_second / s.requests_per_second),
                "p99_access_log_on_over_off": logged.map(|l| l.p99_ms / s.p99_ms),
                "stator_over_nginx": s.requests_per_second / n.requests_per_second,
                "stator_over_haproxy": s.requests_per_second / h.requests_per_second,
                "p99_stator_over_nginx": s.p99_ms / n.p99_ms,
                "p99_stator_over_haproxy": s.p99_ms / h.p99_ms,
                "cpu_per_request_stator_over_nginx": s.cpu_us_per_request() / n.cpu_us_per_request(),
                "cpu_per_request_stator_over_haproxy": s.cpu_us_per_request() / h.cpu_us_per_request(),
            }));
        }
    }
    if json {
        let v = json!({
            "seconds_per_run": secs,
            "connections": conns,
            "pinning": "pinned: proxies taskset -c 0 (2 workers/threads), wrk CPU 1; unpinned: \
                        proxies and wrk anywhere; backends on CPU 1 in both",
            "runs": runs,
            "rounds": rounds,
            "ratios": ratios,
            "scale": scale,
            "idle_memory": idle,
            "steering": steering,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    if !runs.is_empty() {
        let n_rounds = runs.first().map_or(0, |r| r.round);
        println!(
            "stator bench proxy: wrk -t1 -c{conns} -d{secs}s, 13-byte responses, 2 workers/threads \
             per proxy; pinned: proxies on CPU 0, wrk on CPU 1; unpinned: anywhere; backends on CPU \
             1; medians of {n_rounds} round(s), the proxies' order rotated each round"
        );
        println!(
            "{:<9} {:<28} {:<18} {:>12} {:>9} {:>7} {:>10}",
            "mode", "case", "proxy", "req/s", "p99 ms", "errors", "CPU us/req"
        );
        for r in runs {
            println!(
                "{:<9} {:<28} {:<18} {:>12.0} {:>9.2} {:>7} {:>10.1}",
                r.pinning,
                r.case,
                r.proxy,
                r.requests_per_second,
                r.p99_ms,
                r.errors,
                r.cpu_us_per_request()
            );
        }
    }
    for r in &ratios {
        let label = format!(
            "{}, {}",
            r["pinning"].as_str().unwrap_or(""),
            r["case"].as_str().unwrap_or("")
        );
        if let (Some(on), Some(p99)) = (
            r["access_log_on_over_off"].as_f64(),
            r["p99_access_log_on_over_off"].as_f64(),
        ) {
            println!("{label}: access log on / off {on:.2}x req/s ({p99:.2}x p99)");
        }
        println!(
            "{label}: stator/nginx {:.2}x req/s ({:.2}x p99, {:.2}x CPU/req), stator/haproxy \
             {:.2}x req/s ({:.2}x p99, {:.2}x CPU/req) (goal >= 1.2x req/s, <= 1.0x p99)",
            r["stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["p99_stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["cpu_per_request_stator_over_nginx"]
                .as_f64()
                .unwrap_or(0.0),
            r["stator_over_haproxy"].as_f64().unwrap_or(0.0),
            r["p99_stator_over_haproxy"].as_f64().unwrap_or(0.0),
            r["cpu_per_request_stator_over_haproxy"]
                .as_f64()
                .unwrap_or(0.0),
        );
    }
    if !scale.is_empty() {
        println!("Tengine's experiment (keep-alive):");
        for r in scale {
            println!(
                "  {:<14} {:<14} {:>10.0} req/s  p99 {:.2} ms",
                r.proxy, r.case, r.requests_per_second, r.p99_ms
            );
        }
        let rate = |p: &str, c: &str| {
            scale
                .iter()
                .find(|r| r.proxy == p && r.case == c)
                .map_or(0.0, |r| r.requests_per_second)
        };
        for s in ["vnswrr", "swrr"] {
            let p = format!("stator {s}");
            for phase in ["cold", "warm"] {
                println!(
                    "  {s}, {phase}: 2000 / 20 backends = {:.2}x req/s",
                    rate(&p, &format!("2000 backends, {phase}"))
                        / rate(&p, &format!("20 backends, {phase}"))
                );
            }
        }
        println!(
            "  cold = the first {secs} s of a fresh proxy (connection setup to every backend \
             included); warm = the next {secs} s, upstream pools full (the scheduler and the \
             proxy path)"
        );
    }
    report_idle(idle);
    report_steering(steering);
}

/// The row of Stator with its access log on (JSON, every request, to a file): the log's cost
/// is this row beside `stator`'s (the rounds rotate the order, see the module documentation).
const ACCESS_LOG: &str = "stator, access log";

fn start_stator(
    stator: &Path,
    dir: &Path,
    port: u16,
    backends: &[SocketAddr],
    scheduler: &str,
    access_log: Option<&Path>,
) -> Result<Proc> {
    let mut t = stator_pool_config(backends, &dir.join(format!("stator-{port}.sock")))?;
    t += &format!(
        "[[listener]]\nname = \"bench\"\naddress = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         pool = \"b\"\nworkers = 2\nscheduler = \"{scheduler}\"\n\
         max_connections_per_source = 0\n[listener.timeouts]\n\
         connect = \"5s\"\nheader_read = \"60s\"\nidle = \"60s\"\nresponse = \"60s\"\n\
         [listener.http]\nkeepalive_pool = 32\nforwarded_for = false\n"
    );
    if let Some(log) = access_log {
        t += &format!("[access_log]\npath = \"{}\"\n", log.display());
    }
    spawn_stator(stator, &dir.join(format!("stator-{port}.toml")), &t)
}

fn start_nginx(dir: &Path, port: u16, backends: &[SocketAddr]) -> Result<Proc> {
    let servers: String = backends.iter().map(|a| format!("server {a};\n")).collect();
    let prefix = nginx_prefix(dir, &format!("nginx-{port}"))?;
    let conf = format!(
        "{globals}http {{\n access_log off;\n keepalive_timeout 60s;\n client_header_timeout 60s;\n\
         proxy_connect_timeout 5s;\n proxy_read_timeout 60s;\n\
         client_body_temp_path {p}/body;\n proxy_temp_path {p}/proxy;\n\
         upstream b {{\n{servers} keepalive 32;\n }}\n\
         server {{\n  listen 127.0.0.1:{port} reuseport;\n\
          location / {{ proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}\n }}\n}}\n",
        globals = nginx_globals(&prefix),
        p = prefix.display()
    );
    spawn_nginx(&prefix, &conf)
}

/// HAProxy with `maxconn` (8,000 for the throughput runs; the idle-memory run needs more).
fn start_haproxy(dir: &Path, port: u16, backends: &[SocketAddr], maxconn: usize) -> Result<Proc> {
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  server s{i} {a}\n"))
        .collect();
    let conf = format!(
        "global\n  nbthread 2\n  maxconn {maxconn}\n\ndefaults\n  mode http\n  timeout connect 5s\n\
         timeout client 60s\n  timeout server 60s\n  timeout http-request 60s\n\
         timeout http-keep-alive 60s\n  option http-keep-alive\n\n\
         frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n\n\
         backend b\n  balance roundrobin\n  http-reuse always\n{servers}"
    );
    spawn_haproxy(&dir.join(format!("haproxy-{port}.cfg")), &conf)
}
