//! `stator bench udp --proxy`: datagrams per second through Stator's UDP listener and through
//! nginx's `stream` UDP proxy, to the same echo backend, in the same run.
//!
//! Fairness: both proxies get 2 workers with `SO_REUSEPORT` sockets on 127.0.0.1, no logs, a
//! session per client address and port that lives until a 60 s idle timeout, and the same CPU:
//! each runs under `taskset -c 0`, while the clients and the backend share CPU 1. The backend
//! is one thread reading with `recvmmsg` (quinn-udp) and answering with `sendmmsg`.
//!
//! Two cases, each bounded in time (`--seconds`) and in count (a window per client socket):
//! - **request/response**: 64 client sockets, each keeping 4 requests of 32 bytes in flight (a
//!   request unanswered for 200 ms is written off as lost and replaced); the figure is
//!   replies received per second;
//! - **one-way**: the same sockets send 32-byte datagrams as fast as their thread can for the
//!   same time, the backend only counts; the figure is datagrams that reached the backend per
//!   second, and the loss is the share of those sent that never did.

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd as _;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quinn_udp::{BATCH_SIZE, RecvMeta, UdpSocketState};
use serde_json::json;
use stator_proxy::udp::outbox::Outbox;
use tokio::io::Interest;

use super::UdpArgs;
use crate::BenchError;
use crate::rivals::{
    Proc, failed, free_port, io, nginx_globals, nginx_prefix, spawn_backend_thread, spawn_nginx,
    spawn_stator, stator_pool_config, tempdir, which,
};

type Result<T> = std::result::Result<T, BenchError>;

/// Client sockets (source ports).
const CLIENTS: usize = 64;
/// Requests in flight per client socket (request/response).
const WINDOW: usize = 4;
/// Payload bytes of every datagram.
const PAYLOAD: usize = 32;
/// A request unanswered this long is counted lost and replaced.
const LOST_AFTER: Duration = Duration::from_millis(200);

/// One measured run.
#[derive(Debug, Clone, serde::Serialize)]
struct Run {
    proxy: &'static str,
    case: &'static str,
    sent: u64,
    delivered: u64,
    pps: f64,
    loss: f64,
}

/// Runs the proxy comparison and prints its report.
pub fn run(args: &UdpArgs) -> Result<()> {
    for tool in ["nginx", "taskset"] {
        if which(tool).is_none() {
            return Err(failed(format!(
                "`{tool}` is not installed: `make test-deps` installs nginx-light and \
                 libnginx-mod-stream"
            )));
        }
    }
    let module = Path::new("/usr/lib/nginx/modules/ngx_stream_module.so");
    if !module.exists() {
        return Err(failed(
            "nginx's stream module is missing: `make test-deps` installs libnginx-mod-stream",
        ));
    }
    let stator = std::env::current_exe().map_err(io("finding the stator binary"))?;
    let secs = if args.quick { 1 } else { args.seconds.max(1) };
    let dir = tempdir()?;
    let backend = Backend::start()?;
    let mut runs = Vec::new();
    for (case, echo) in [("request/response", true), ("one-way", false)] {
        backend.echo.store(echo, Ordering::SeqCst);
        for proxy in ["stator", "nginx"] {
            let port = free_udp_port()?;
            let mut p = match proxy {
                "stator" => start_stator(&stator, &dir, port, backend.addr)?,
                _ => start_nginx(&dir, port, backend.addr, module, echo)?,
            };
            let to = SocketAddr::from(([127, 0, 0, 1], port));
            let ready = wait_ready(to, &backend);
            let r = ready.and_then(|()| load(to, &backend, echo, Duration::from_secs(secs.into())));
            p.stop();
            let (sent, delivered) = r?;
            runs.push(Run {
                proxy,
                case,
                sent,
                delivered,
                pps: delivered as f64 / f64::from(secs),
                loss: if sent == 0 {
                    0.0
                } else {
                    1.0 - delivered as f64 / sent as f64
                },
            });
        }
    }
    drop(backend);
    let _ = std::fs::remove_dir_all(&dir);
    report(&runs, secs, args.json);
    Ok(())
}

fn report(runs: &[Run], secs: u32, json: bool) {
    let find = |p: &str, c: &str| runs.iter().find(|r| r.proxy == p && r.case == c);
    let ratios: Vec<serde_json::Value> = ["request/response", "one-way"]
        .iter()
        .filter_map(|case| {
            let (s, n) = (find("stator", case)?, find("nginx", case)?);
            Some(json!({
                "case": case,
                "stator_over_nginx": s.pps / n.pps.max(1.0),
                "loss_stator": s.loss,
                "loss_nginx": n.loss,
            }))
        })
        .collect();
    if json {
        let v = json!({
            "seconds_per_run": secs,
            "clients": CLIENTS,
            "window": WINDOW,
            "payload_bytes": PAYLOAD,
            "pinning": "proxies: taskset -c 0 (2 workers each, reuseport); clients and echo backend: CPU 1",
            "runs": runs,
            "ratios": ratios,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!(
        "stator bench udp --proxy: {CLIENTS} client sockets, {PAYLOAD}-byte datagrams, {secs} s \
         per run; proxies pinned to CPU 0 (2 workers each, reuseport), clients and the echo \
         backend to CPU 1; request/response keeps {WINDOW} requests in flight per socket"
    );
    println!(
        "{:<18} {:<7} {:>12} {:>12} {:>10} {:>7}",
        "case", "proxy", "sent", "delivered", "pps", "loss"
    );
    for r in runs {
        println!(
            "{:<18} {:<7} {:>12} {:>12} {:>9.3}M {:>6.2}%",
            r.case,
            r.proxy,
            r.sent,
            r.delivered,
            r.pps / 1e6,
            r.loss * 100.0
        );
    }
    for r in &ratios {
        println!(
            "{}: stator/nginx {:.2}x pps, loss {:.2}% vs {:.2}% (goal >= 1.5x at equal or lower loss)",
            r["case"].as_str().unwrap_or(""),
            r["stator_over_nginx"].as_f64().unwrap_or(0.0),
            r["loss_stator"].as_f64().unwrap_or(0.0) * 100.0,
            r["loss_nginx"].as_f64().unwrap_or(0.0) * 100.0,
        );
    }
}

fn free_udp_port() -> Result<u16> {
    // a port free for TCP and UDP both (stator's API takes a TCP one)
    for _ in 0..100 {
        let port = free_port()?;
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(failed("no free UDP port on 127.0.0.1"))
}

fn start_stator(stator: &Path, dir: &Path, port: u16, backend: SocketAddr) -> Result<Proc> {
    let mut t = stator_pool_config(&[backend], &dir.join(format!("stator-udp-{port}.sock")))?;
    t += &format!(
        "[[listener]]\nname = \"bench\"\naddress = \"127.0.0.1:{port}\"\nprotocol = \"udp\"\n\
         pool = \"b\"\nworkers = 2\n[listener.timeouts]\nidle = \"60s\"\n"
    );
    spawn_stator(stator, &dir.join(format!("stator-udp-{port}.toml")), &t)
}

fn start_nginx(
    dir: &Path,
    port: u16,
    backend: SocketAddr,
    module: &Path,
    echo: bool,
) -> Result<Proc> {
    let prefix = nginx_prefix(dir, &format!("nginx-udp-{port}"))?;
    // one-way: nginx's proxy_responses 0 (no reply expected); request/response: the default
    // (sessions live until proxy_timeout), as Stator without `responses`
    let responses = if echo { "" } else { "  proxy_responses 0;\n" };
    let conf = format!(
        "load_module {m};\n{globals}\
         stream {{\n upstream b {{ server {backend}; }}\n\
          server {{\n  listen 127.0.0.1:{port} udp reuseport;\n  proxy_pass b;\n\
          proxy_timeout 60s;\n{responses} }}\n}}\n",
        m = module.display(),
        globals = nginx_globals(&prefix),
    );
    spawn_nginx(&prefix, &conf)
}

/// Sends a probe every 50 ms until the backend counts it (the proxy is up), for at most 10 s;
/// then waits for the probes' sessions to go quiet.
fn wait_ready(to: SocketAddr, backend: &Backend) -> Result<()> {
    let probe = UdpSocket::bind("127.0.0.1:0").map_err(io("binding a probe"))?;
    let before = backend.received.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let _ = probe.send_to(b"probe", to);
        std::thread::sleep(Duration::from_millis(50));
        if backend.received.load(Ordering::SeqCst) > before {
            std::thread::sleep(Duration::from_millis(100));
            return Ok(());
        }
    }
    Err(failed(format!("the proxy on {to} never forwarded a probe")))
}

/// Drives the load from a thread pinned to CPU 1: `(sent, delivered)` — delivered are replies
/// received (request/response) or datagrams the backend counted (one-way).
fn load(to: SocketAddr, backend: &Backend, echo: bool, time: Duration) -> Result<(u64, u64)> {
    let at_backend = Arc::clone(&backend.received);
    std::thread::Builder::new()
        .name("bench-udp-clients".into())
        .spawn(move || -> Result<(u64, u64)> {
            crate::pin::pin_to_cpu(1);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(io("building the clients' runtime"))?;
            rt.block_on(async move {
                let tasks = tokio::task::LocalSet::new();
                let sent = Rc::new(std::cell::Cell::new(0u64));
                let got = Rc::new(std::cell::Cell::new(0u64));
                let base = at_backend.load(Ordering::SeqCst);
                let deadline = tokio::time::Instant::now() + time;
                for _ in 0..CLIENTS {
                    let std = UdpSocket::bind("127.0.0.1:0").map_err(io("binding a client"))?;
                    std.connect(to).map_err(io("connecting a client"))?;
                    std.set_nonblocking(true).map_err(io("a client socket"))?;
                    let sock =
                        tokio::net::UdpSocket::from_std(std).map_err(io("a client socket"))?;
                    let (s, g) = (Rc::clone(&sent), Rc::clone(&got));
                    if echo {
                        tasks.spawn_local(ask_loop(sock, s, g, deadline));
                    } else {
                        tasks.spawn_local(blast_loop(sock, s, deadline));
                    }
                }
                tasks.await;
                if echo {
                    Ok((sent.get(), got.get()))
                } else {
                    // what is still in flight arrives within a moment
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok((sent.get(), at_backend.load(Ordering::SeqCst) - base))
                }
            })
        })
        .map_err(io("starting the clients"))?
        .join()
        .map_err(|_| failed("the clients' thread panicked"))?
}

/// Keeps [`WINDOW`] requests in flight until `deadline`, counting replies.
async fn ask_loop(
    sock: tokio::net::UdpSocket,
    sent: Rc<std::cell::Cell<u64>>,
    got: Rc<std::cell::Cell<u64>>,
    deadline: tokio::time::Instant,
) {
    let payload = [0x5au8; PAYLOAD];
    let mut buf = [0u8; 2048];
    let mut in_flight = 0;
    while tokio::time::Instant::now() < deadline {
        while in_flight < WINDOW {
            if sock.try_send(&payload).is_err() {
                break;
            }
            sent.set(sent.get() + 1);
            in_flight += 1;
        }
        match tokio::time::timeout(LOST_AFTER, sock.recv(&mut buf)).await {
            Ok(Ok(_)) => {
                got.set(got.get() + 1);
                in_flight -= 1;
                // take every reply already queued before sending more
                while sock.try_recv(&mut buf).is_ok() {
                    got.set(got.get() + 1);
                    in_flight = in_flight.saturating_sub(1);
                }
            }
            // lost (or refused): write the window off and start again
            Ok(Err(_)) | Err(_) => in_flight = 0,
        }
    }
}

/// Sends as fast as the socket takes datagrams until `deadline`.
async fn blast_loop(
    sock: tokio::net::UdpSocket,
    sent: Rc<std::cell::Cell<u64>>,
    deadline: tokio::time::Instant,
) {
    let payload = [0xa5u8; PAYLOAD];
    while tokio::time::Instant::now() < deadline {
        for _ in 0..32 {
            match sock.try_send(&payload) {
                Ok(_) => sent.set(sent.get() + 1),
                Err(_) => break,
            }
        }
        tokio::task::yield_now().await;
    }
}

/// The echo backend: one thread pinned to CPU 1, `recvmmsg` in, `sendmmsg` out (or count
/// only).
struct Backend {
    addr: SocketAddr,
    received: Arc<AtomicU64>,
    echo: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Backend {
    fn start() -> Result<Self> {
        let std = UdpSocket::bind("127.0.0.1:0").map_err(io("binding the backend"))?;
        std.set_nonblocking(true)
            .map_err(io("binding the backend"))?;
        let addr = std.local_addr().map_err(io("binding the backend"))?;
        let received = Arc::new(AtomicU64::new(0));
        let echo = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, e, s) = (Arc::clone(&received), Arc::clone(&echo), Arc::clone(&stop));
        spawn_backend_thread("bench-udp-echo", move || async move {
            echo_loop(std, &r, &e, &s).await;
        })
        .map_err(io("starting the backend"))?;
        Ok(Self {
            addr,
            received,
            echo,
            stop,
        })
    }
}

async fn echo_loop(std: UdpSocket, received: &AtomicU64, echo: &AtomicBool, stop: &AtomicBool) {
    let Ok(sock) = tokio::net::UdpSocket::from_std(std) else {
        return;
    };
    let Ok(state) = UdpSocketState::new((&sock).into()) else {
        return;
    };
    const SLOT: usize = 2048;
    let mut bufs = vec![0u8; SLOT * BATCH_SIZE];
    let mut meta = [RecvMeta::default(); BATCH_SIZE];
    let mut outbox = Outbox::new(4096, 4 << 20);
    while !stop.load(Ordering::Relaxed) {
        if tokio::time::timeout(Duration::from_millis(100), sock.readable())
            .await
            .is_err()
        {
            continue;
        }
        loop {
            let mut slices: Vec<IoSliceMut<'_>> =
                bufs.chunks_mut(SLOT).map(IoSliceMut::new).collect();
            let r = sock.try_io(Interest::READABLE, || {
                state.recv((&sock).into(), &mut slices, &mut meta)
            });
            drop(slices);
            let Ok(n) = r else { break };
            let reply = echo.load(Ordering::Relaxed);
            for (m, buf) in meta[..n].iter().zip(bufs.chunks(SLOT)) {
                let len = m.len.min(SLOT);
                let stride = if m.stride == 0 { len.max(1) } else { m.stride };
                for d in buf[..len].chunks(stride) {
                    received.fetch_add(1, Ordering::Relaxed);
                    if reply && !outbox.push(m.addr, d) {
                        break;
                    }
                }
            }
            if outbox.len() >= 1024 {
                outbox.flush(sock.as_fd());
            }
        }
        outbox.flush(sock.as_fd());
    }
}
