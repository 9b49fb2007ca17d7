//! `stator bench tcp`: Stator's TCP listener (`protocol = "tcp"`: bytes both ways, no HTTP)
//! against HAProxy `mode tcp` and nginx `stream`, in front of the same local backend, in the
//! same run — issue 22's "TCP listener ≥ 1.2× HAProxy `mode tcp` and nginx `stream`". Figures
//! and ratios, never pass/fail; every load is bounded (`wrk -d`).
//!
//! Two cases, both driven by `wrk` speaking HTTP/1.1 *through* the TCP proxies (which forward
//! bytes and never read the HTTP):
//! - **bulk**: 8 kept-alive connections each fetching a large answer (1 MiB by default,
//!   `--body`) over and over: bytes per second, the proxy's copy loop;
//! - **short connections**: 64 connections each sending one small request with `Connection:
//!   close`; the backend answers (13 bytes, `connection: close`) and closes, wrk opens the next:
//!   connections per second, the proxy's accept, connect and teardown.
//!
//! A fourth row, `direct`, is wrk against the backend itself, no proxy: what the load and the
//! backend can do on their CPU alone. A proxied figure far below it means the proxy was the
//! limit, not the backend (issue 22 asks how a benchmark made sure of that).
//!
//! Fairness: the three proxies get the same settings as in `stator bench proxy` — 2 workers
//! (nginx) or threads (HAProxy) or worker threads (Stator), `SO_REUSEPORT` listeners where the
//! proxy has them, connect timeout 5 s, idle 60 s, no per-source limit, no log — each
//! configured as its documentation's minimal TCP proxy, nothing tuned: HAProxy without
//! `option splice-*` (off by default), nginx `stream` as shipped (it has no splice). The same
//! two modes as `stator bench proxy`, *pinned* (proxies on CPU 0, wrk and the backend on CPU 1)
//! and *unpinned*; rounds with the order rotated, medians reported.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::json;

use crate::error::BenchError;
use crate::load::{Backends, Run, RunOptions, gone, medians, timed_wrk, wait_port, wrk};
use crate::rivals::{
    self, Proc, failed, free_port, nginx_globals, nginx_prefix, spawn_haproxy, spawn_nginx,
    spawn_stator, stator_pool_config, tempdir, which,
};

type Result<T> = std::result::Result<T, BenchError>;

/// Where Debian's `libnginx-mod-stream` puts nginx's `stream` module.
const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// Options of `stator bench tcp`.
#[derive(Debug, clap::Args)]
pub struct BenchTcpArgs {
    #[command(flatten)]
    run: RunOptions,
    /// Bytes of each answer in the bulk case.
    #[arg(long, default_value_t = 1 << 20)]
    body: usize,
    /// Concurrent connections of the bulk case.
    #[arg(long, default_value_t = 8)]
    bulk_connections: u32,
    /// Concurrent connections of the short-connection case.
    #[arg(long, default_value_t = 64)]
    connections: u32,
}

const BULK: &str = "bulk";
const SHORT: &str = "short connections";
const DIRECT: &str = "direct";
const PROXIES: [&str; 4] = ["stator", "nginx", "haproxy", DIRECT];

/// Runs the benchmark; `stator` is the binary whose `stator run` serves the listener.
pub fn run(args: &BenchTcpArgs, stator: &Path) -> Result<()> {
    for tool in ["wrk", "nginx", "haproxy", "taskset"] {
        if which(tool).is_none() {
            return Err(failed(format!(
                "`{tool}` is not installed: `make test-deps` installs wrk, nginx-light, \
                 libnginx-mod-stream and haproxy"
            )));
        }
    }
    if !Path::new(NGINX_STREAM_MODULE).exists() {
        return Err(failed(format!(
            "nginx's stream module is not at {NGINX_STREAM_MODULE}: `make test-deps` installs \
             libnginx-mod-stream"
        )));
    }
    if args.body == 0 {
        return Err(failed("--body must be at least 1 byte"));
    }
    let secs = args.run.seconds();
    let n_rounds = args.run.rounds();
    let modes = args.run.modes();
    let dir = tempdir()?;
    let small = Backends::start(1)?;
    let large = Backends::serving(1, args.body)?;
    let mut rounds = Vec::new();
    let measured = (|| -> Result<()> {
        for &pin in &modes {
            rivals::set_pinning(pin);
            for round in 0..n_rounds {
                for (case, backend, conns, close) in [
                    (BULK, large.addrs[0], args.bulk_connections, false),
                    (SHORT, small.addrs[0], args.connections, true),
                ] {
                    let mut order = PROXIES;
                    order.rotate_left(round % PROXIES.len());
                    for kind in order {
                        let mut r = measure(kind, stator, &dir, backend, secs, conns, close, pin)?;
                        r.proxy = kind.into();
                        r.case = case.into();
                        r.pinning = if pin { "pinned" } else { "unpinned" }.into();
                        r.round = round;
                        rounds.push(r);
                    }
                }
            }
        }
        Ok(())
    })();
    rivals::set_pinning(true);
    let _ = std::fs::remove_dir_all(&dir);
    measured?;
    report(&medians(&rounds), &rounds, secs, args);
    Ok(())
}

/// One wrk run against `kind` (a proxy started for it and stopped after, or the backend
/// itself).
#[allow(clippy::too_many_arguments)]
fn measure(
    kind: &str,
    stator: &Path,
    dir: &Path,
    backend: SocketAddr,
    secs: u64,
    conns: u32,
    close: bool,
    pin: bool,
) -> Result<Run> {
    if kind == DIRECT {
        return wrk(backend.port(), secs, conns, close, pin);
    }
    let port = free_port()?;
    let mut p = match kind {
        "stator" => start_stator(stator, dir, port, backend)?,
        "nginx" => start_nginx(dir, port, backend)?,
        _ => start_haproxy(dir, port, backend)?,
    };
    if let Err(e) = wait_port(port) {
        return Err(failed(format!("{kind}: {}", gone(&mut p, e))));
    }
    let r = timed_wrk(p.0.id(), port, secs, conns, close, pin);
    p.stop();
    r
}

fn start_stator(stator: &Path, dir: &Path, port: u16, backend: SocketAddr) -> Result<Proc> {
    let mut t = stator_pool_config(&[backend], &dir.join(format!("stator-{port}.sock")))?;
    t += &format!(
        "[[listener]]\nname = \"bench\"\naddress = \"127.0.0.1:{port}\"\nprotocol = \"tcp\"\n\
         pool = \"b\"\nworkers = 2\nmax_connections_per_source = 0\n[listener.timeouts]\n\
         connect = \"5s\"\nidle = \"60s\"\n"
    );
    spawn_stator(stator, &dir.join(format!("stator-{port}.toml")), &t)
}

fn start_nginx(dir: &Path, port: u16, backend: SocketAddr) -> Result<Proc> {
    let prefix = nginx_prefix(dir, &format!("nginx-{port}"))?;
    let conf = format!(
        "load_module {NGINX_STREAM_MODULE};\n{globals}stream {{\n\
         upstream b {{ server {backend}; }}\n\
         server {{\n  listen 127.0.0.1:{port} reuseport;\n  proxy_pass b;\n\
           proxy_connect_timeout 5s;\n  proxy_timeout 60s;\n }}\n}}\n",
        globals = nginx_globals(&prefix),
    );
    spawn_nginx(&prefix, &conf)
}

fn start_haproxy(dir: &Path, port: u16, backend: SocketAddr) -> Result<Proc> {
    let conf = format!(
        "global\n  nbthread 2\n  maxconn 8000\n\ndefaults\n  mode tcp\n  timeout connect 5s\n\
         timeout client 60s\n  timeout server 60s\n\n\
         frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n\n\
         backend b\n  server s0 {backend}\n"
    );
    spawn_haproxy(&dir.join(format!("haproxy-tcp-{port}.cfg")), &conf)
}

/// The figure a case is judged by: bytes/s for bulk, connections/s for short connections.
fn figure(r: &Run) -> f64 {
    if r.case == BULK {
        r.bytes_per_second
    } else {
        r.requests_per_second
    }
}

/// The proxy's CPU per unit of the case's figure: seconds per GB for bulk, microseconds per
/// connection for short connections.
fn cpu_per(r: &Run) -> f64 {
    if r.case == BULK {
        r.cpu_s_per_gb()
    } else {
        r.cpu_us_per_request()
    }
}

fn report(runs: &[Run], rounds: &[Run], secs: u64, args: &BenchTcpArgs) {
    let find = |p: &str, c: &str, pin: &str| {
        runs.iter()
            .find(|r| r.proxy == p && r.case == c && r.pinning == pin)
    };
    let mut ratios = Vec::new();
    for pin in ["pinned", "unpinned"] {
        for case in [BULK, SHORT] {
            if let (Some(s), Some(n), Some(h), Some(d)) = (
                find("stator", case, pin),
                find("nginx", case, pin),
                find("haproxy", case, pin),
                find(DIRECT, case, pin),
            ) {
                ratios.push(json!({
                    "case": case,
                    "pinning": pin,
                    "stator_over_nginx": figure(s) / figure(n),
                    "stator_over_haproxy": figure(s) / figure(h),
                    "p99_stator_over_nginx": s.p99_ms / n.p99_ms,
                    "p99_stator_over_haproxy": s.p99_ms / h.p99_ms,
                    "stator_over_direct": figure(s) / figure(d),
                    "cpu_stator_over_nginx": cpu_per(s) / cpu_per(n),
                    "cpu_stator_over_haproxy": cpu_per(s) / cpu_per(h),
                }));
            }
        }
    }
    if args.run.json {
        let v = json!({
            "seconds_per_run": secs,
            "body_bytes": args.body,
            "bulk_connections": args.bulk_connections,
            "short_connections": args.connections,
            "pinning": "pinned: proxies taskset -c 0 (2 workers/threads), wrk and the backend \
                        on CPU 1; unpinned: proxies and wrk anywhere, the backend on CPU 1",
            "runs": runs,
            "rounds": rounds,
            "ratios": ratios,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    let n_rounds = runs.first().map_or(0, |r| r.round);
    println!(
        "stator bench tcp: TCP proxies (Stator protocol = \"tcp\", HAProxy mode tcp, nginx \
         stream), 2 workers/threads each; wrk -t1 -d{secs}s through them; bulk: {} connections \
         fetching {} bytes each time; short: {} connections, one 13-byte answer each, then \
         closed; pinned: proxies on CPU 0, wrk and the backend on CPU 1; medians of {n_rounds} \
         round(s), the order rotated each round",
        args.bulk_connections, args.body, args.connections
    );
    println!(
        "{:<9} {:<18} {:<8} {:>10} {:>11} {:>8} {:>6} {:>16}",
        "mode", "case", "proxy", "MB/s", "conn|req/s", "p99 ms", "errors", "CPU s/GB|us/conn"
    );
    for r in runs {
        println!(
            "{:<9} {:<18} {:<8} {:>10.1} {:>11.0} {:>8.2} {:>6} {:>16.2}",
            r.pinning,
            r.case,
            r.proxy,
            r.bytes_per_second / 1e6,
            r.requests_per_second,
            r.p99_ms,
            r.errors,
            cpu_per(r)
        );
    }
    for r in &ratios {
        let unit = if r["case"] == BULK {
            "bytes/s"
        } else {
            "connections/s"
        };
        println!(
            "{}, {}: stator/nginx {:.2}x {unit} ({:.2}x p99, {:.2}x CPU), stator/haproxy {:.2}x \
             ({:.2}x p99, {:.2}x CPU), stator/direct {:.2}x (goal >= 1.2x both rivals)",
            r["pinning"].as_str().unwrap_or(""),
            r["case"].as_str().unwrap_or(""),
            r["stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["p99_stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["cpu_stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["stator_over_haproxy"].as_f64().unwrap_or(0.0),
            r["p99_stator_over_haproxy"].as_f64().unwrap_or(0.0),
            r["cpu_stator_over_haproxy"].as_f64().unwrap_or(0.0),
            r["stator_over_direct"].as_f64().unwrap_or(0.0),
        );
    }
    println!(
        "CPU: user and system time of the proxy's processes during the run, per GB moved \
         (bulk) or per connection (short); `direct` has no proxy"
    );
}
