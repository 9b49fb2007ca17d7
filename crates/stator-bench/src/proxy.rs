//! `stator bench proxy`: `wrk` against Stator's HTTP listener, nginx and HAProxy, proxying to
//! the same local backends, in the same run; then Tengine's experiment (20 vs 2,000 backends,
//! VNSWRR vs SWRR), each measured twice on the same proxy: cold (the run opens the upstream
//! connections) and warm (pools full). Figures and ratios, never pass/fail; every load is bounded (`wrk -d`).
//!
//! Fairness: the three proxies get the same settings — 2 workers/threads, upstream keep-alive
//! (32 idle connections), `SO_REUSEPORT` listeners, no access log, the same timeouts — and
//! the same CPU: each runs under `taskset -c 0`, while `wrk` and the backends share CPU 1. The
//! backends are Stator's own: a small HTTP/1.1 responder (tokio, one thread, pinned to CPU 1)
//! answering every request with 13 bytes, kept alive.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::error::BenchError;
use crate::rivals::{
    Proc, failed, free_port, io, nginx_globals, nginx_prefix, pinned, spawn_backend_thread,
    spawn_nginx, spawn_stator, stator_pool_config, tempdir, which,
};

type Result<T> = std::result::Result<T, BenchError>;

/// Options of `stator bench proxy`.
#[derive(Debug, clap::Args)]
pub struct BenchProxyArgs {
    /// Short runs (2 s each) for smoke tests.
    #[arg(long)]
    quick: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds per wrk run (default 8, 2 with --quick).
    #[arg(long)]
    seconds: Option<u64>,
    /// Concurrent client connections of wrk.
    #[arg(long, default_value_t = 64)]
    connections: u32,
    /// Skip Tengine's 20 vs 2,000 backends experiment.
    #[arg(long)]
    no_scale: bool,
}

/// One wrk run.
#[derive(Debug, Clone, serde::Serialize)]
struct Run {
    proxy: String,
    case: String,
    requests_per_second: f64,
    p99_ms: f64,
    errors: u64,
}

/// Runs the benchmark; `stator` is the binary whose `stator run` serves the listener.
pub fn run(args: &BenchProxyArgs, stator: &Path) -> Result<()> {
    for tool in ["wrk", "nginx", "haproxy", "taskset"] {
        if which(tool).is_none() {
            return Err(failed(format!(
                "`{tool}` is not installed: `make test-deps` installs wrk, nginx-light and haproxy"
            )));
        }
    }
    let secs = args.seconds.unwrap_or(if args.quick { 2 } else { 8 });
    let dir = tempdir()?;
    let backends = Backends::start(if args.no_scale { 1 } else { 2000 })?;
    let mut runs = Vec::new();
    let one = &backends.addrs[..1];
    for (case, close) in [("keep-alive", false), ("new connection per request", true)] {
        for kind in [ACCESS_LOG, "stator", "nginx", "haproxy"] {
            let port = free_port()?;
            let log = dir.join(format!("access-{port}.log"));
            let mut p = match kind {
                "stator" => start_stator(stator, &dir, port, one, "vnswrr", None)?,
                ACCESS_LOG => start_stator(stator, &dir, port, one, "vnswrr", Some(&log))?,
                "nginx" => start_nginx(&dir, port, one)?,
                _ => start_haproxy(&dir, port, one)?,
            };
            wait_port(port)?;
            let r = wrk(port, secs, args.connections, close);
            p.stop();
            let _ = std::fs::remove_file(&log);
            let mut r = r?;
            r.proxy = kind.into();
            r.case = case.into();
            runs.push(r);
        }
    }
    let mut scale = Vec::new();
    if !args.no_scale {
        for n in [20usize, 2000] {
            for sched in ["vnswrr", "swrr"] {
                let port = free_port()?;
                let mut p = start_stator(stator, &dir, port, &backends.addrs[..n], sched, None)?;
                wait_port(port)?;
                // Cold: the first run opens each worker's upstream connections (2,000
                // backends: up to 2 × 2,000 connects before one is reused). Warm: the same
                // proxy again, its pools full — the scheduler and the proxy path alone.
                for phase in ["cold", "warm"] {
                    let r = wrk(port, secs, args.connections, false);
                    let mut r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            p.stop();
                            return Err(e);
                        }
                    };
                    r.proxy = format!("stator {sched}");
                    r.case = format!("{n} backends, {phase}");
                    scale.push(r);
                }
                p.stop();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    report(&runs, &scale, secs, args.connections, args.json);
    Ok(())
}

fn report(runs: &[Run], scale: &[Run], secs: u64, conns: u32, json: bool) {
    let find = |p: &str, c: &str| runs.iter().find(|r| r.proxy == p && r.case == c);
    let mut ratios = Vec::new();
    for case in ["keep-alive", "new connection per request"] {
        if let (Some(s), Some(n), Some(h)) = (
            find("stator", case),
            find("nginx", case),
            find("haproxy", case),
        ) {
            let logged = find(ACCESS_LOG, case);
            ratios.push(json!({
                "case": case,
                "access_log_on_over_off": logged.map(|l| l.requests_per_second / s.requests_per_second),
                "p99_access_log_on_over_off": logged.map(|l| l.p99_ms / s.p99_ms),
                "stator_over_nginx": s.requests_per_second / n.requests_per_second,
                "stator_over_haproxy": s.requests_per_second / h.requests_per_second,
                "p99_stator_over_nginx": s.p99_ms / n.p99_ms,
                "p99_stator_over_haproxy": s.p99_ms / h.p99_ms,
            }));
        }
    }
    if json {
        let v = json!({
            "seconds_per_run": secs,
            "connections": conns,
            "pinning": "proxies: taskset -c 0 (2 workers/threads); wrk and backends: CPU 1",
            "runs": runs,
            "ratios": ratios,
            "scale": scale,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!(
        "stator bench proxy: wrk -t1 -c{conns} -d{secs}s, 13-byte responses; proxies pinned to CPU 0 \
         (2 workers/threads each), wrk and backends to CPU 1"
    );
    println!(
        "{:<28} {:<18} {:>12} {:>9} {:>7}",
        "case", "proxy", "req/s", "p99 ms", "errors"
    );
    for r in runs {
        println!(
            "{:<28} {:<18} {:>12.0} {:>9.2} {:>7}",
            r.case, r.proxy, r.requests_per_second, r.p99_ms, r.errors
        );
    }
    for r in &ratios {
        if let (Some(on), Some(p99)) = (
            r["access_log_on_over_off"].as_f64(),
            r["p99_access_log_on_over_off"].as_f64(),
        ) {
            println!(
                "{}: access log on / off {on:.2}x req/s ({p99:.2}x p99)",
                r["case"].as_str().unwrap_or("")
            );
        }
        println!(
            "{}: stator/nginx {:.2}x req/s ({:.2}x p99), stator/haproxy {:.2}x req/s ({:.2}x p99) \
             (goal >= 1.0x req/s, <= 1.0x p99)",
            r["case"].as_str().unwrap_or(""),
            r["stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["p99_stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["stator_over_haproxy"].as_f64().unwrap_or(0.0),
            r["p99_stator_over_haproxy"].as_f64().unwrap_or(0.0),
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
}

/// The row of Stator with its access log on (JSON, every request, to a file): the log's cost
/// is this row beside `stator`'s. It runs first of the two: on the loaded development machine
/// the row run first was at times slower for reasons of its own (in two runs the plain row,
/// run first, was 0.53–0.59× the logged one in new connections), so any such bias counts
/// against the log, never for it.
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
         pool = \"b\"\nworkers = 2\nscheduler = \"{scheduler}\"\n[listener.timeouts]\n\
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

fn start_haproxy(dir: &Path, port: u16, backends: &[SocketAddr]) -> Result<Proc> {
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  server s{i} {a}\n"))
        .collect();
    let conf = format!(
        "global\n  nbthread 2\n  maxconn 8000\n\ndefaults\n  mode http\n  timeout connect 5s\n\
         timeout client 60s\n  timeout server 60s\n  timeout http-request 60s\n\
         timeout http-keep-alive 60s\n  option http-keep-alive\n\n\
         frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n\n\
         backend b\n  balance roundrobin\n  http-reuse always\n{servers}"
    );
    let path = dir.join(format!("haproxy-{port}.cfg"));
    std::fs::write(&path, conf).map_err(io("writing haproxy.cfg"))?;
    let child = pinned("0", Path::new("haproxy"))
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .spawn()
        .map_err(io("starting haproxy"))?;
    Ok(Proc(child, "haproxy"))
}

/// Runs wrk (pinned to CPU 1) and parses its report.
fn wrk(port: u16, secs: u64, conns: u32, close: bool) -> Result<Run> {
    let mut c = Command::new("taskset");
    c.args(["-c", "1", "wrk", "-t1"])
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"))
        .arg("--latency")
        .arg("--timeout")
        .arg("5s");
    if close {
        c.args(["-H", "Connection: close"]);
    }
    c.arg(format!("http://127.0.0.1:{port}/"));
    let out = c.stdin(Stdio::null()).output().map_err(io("running wrk"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rps = None;
    let mut p99 = None;
    let mut errors = 0;
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Requests/sec:") {
            rps = v.trim().parse::<f64>().ok();
        } else if let Some(v) = l.strip_prefix("99%") {
            p99 = parse_latency_ms(v.trim());
        } else if let Some(v) = l.strip_prefix("Non-2xx or 3xx responses:") {
            errors += v.trim().parse::<u64>().unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("Socket errors:") {
            errors += v
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    match (rps, p99) {
        (Some(r), Some(p)) => Ok(Run {
            proxy: String::new(),
            case: String::new(),
            requests_per_second: r,
            p99_ms: p,
            errors,
        }),
        _ => Err(failed(format!("could not read wrk's report:\n{text}"))),
    }
}

/// `1.23ms`, `456.00us`, `1.02s` → milliseconds.
fn parse_latency_ms(v: &str) -> Option<f64> {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

/// Stator's own backends: `n` listening ports on 127.0.0.1 served by one thread pinned to
/// CPU 1, answering every request with `200 OK` and 13 bytes, keeping connections alive.
struct Backends {
    addrs: Vec<SocketAddr>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Backends {
    fn start(n: usize) -> Result<Self> {
        let mut listeners = Vec::with_capacity(n);
        for _ in 0..n {
            let l = TcpListener::bind("127.0.0.1:0").map_err(io("binding a backend"))?;
            l.set_nonblocking(true).map_err(io("binding a backend"))?;
            listeners.push(l);
        }
        let addrs = listeners
            .iter()
            .map(TcpListener::local_addr)
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(io("binding a backend"))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = std::sync::Arc::clone(&stop);
        spawn_backend_thread("bench-backends", move || async move {
            for l in listeners {
                let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                    continue;
                };
                tokio::spawn(async move {
                    while let Ok((c, _)) = l.accept().await {
                        let _ = c.set_nodelay(true);
                        tokio::spawn(serve_backend(c));
                    }
                });
            }
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .map_err(io("starting the backends' thread"))?;
        Ok(Self { addrs, stop })
    }
}

const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\ncontent-type: text/plain\r\n\r\nhello, world\n";

async fn serve_backend(mut c: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16384];
    let mut have = 0usize;
    loop {
        let Ok(n) = c.read(&mut buf[have..]).await else {
            return;
        };
        if n == 0 {
            return;
        }
        have += n;
        // Answer every complete head (requests have no body here); keep the rest.
        let mut answered = 0;
        let mut close = false;
        while let Some(end) = buf[answered..have]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
        {
            let head = &buf[answered..answered + end];
            close |= head
                .split(|&b| b == b'\n')
                .any(|l| l.eq_ignore_ascii_case(b"connection: close\r"));
            answered += end + 4;
            if c.write_all(ANSWER).await.is_err() {
                return;
            }
        }
        buf.copy_within(answered..have, 0);
        have -= answered;
        if close || have == buf.len() {
            return;
        }
    }
}

fn wait_port(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            // The proxy accepts; give its workers a moment to be all up.
            std::thread::sleep(Duration::from_millis(200));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(failed(format!(
        "nothing listens on 127.0.0.1:{port} after 10 s"
    )))
}
