//! The load both proxy benchmarks drive (`stator bench proxy`, `stator bench tcp`): `wrk` runs
//! and their medians over rounds, the local backends every proxy forwards to, and waiting for a
//! proxy to listen.

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::rivals::{Proc, failed, io, spawn_backend_thread};

type Result<T> = std::result::Result<T, BenchError>;

/// The options both proxy benchmarks take, and what they come to.
#[derive(Debug, clap::Args)]
pub struct RunOptions {
    /// Short runs (2 s each, one round) for smoke tests.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds per wrk run (default 8, 2 with --quick).
    #[arg(long)]
    seconds: Option<u64>,
    /// Rounds of every (mode, case), the proxies' order rotated each round; medians are
    /// reported (default 3, 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Only the pinned mode (proxies on CPU 0, wrk on CPU 1), or only the unpinned one
    /// (default: both).
    #[arg(long, value_parser = ["pinned", "unpinned"])]
    only: Option<String>,
}

impl RunOptions {
    /// Seconds per run.
    pub(crate) fn seconds(&self) -> u64 {
        self.seconds.unwrap_or(if self.quick { 2 } else { 8 })
    }

    /// Rounds of every (mode, case), at least one.
    pub(crate) fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 1 } else { 3 }).max(1)
    }

    /// The pinning modes to measure: `true` pinned, `false` unpinned.
    pub(crate) fn modes(&self) -> Vec<bool> {
        match self.only.as_deref() {
            Some("pinned") => vec![true],
            Some(_) => vec![false],
            None => vec![true, false],
        }
    }
}

/// One wrk run (or the median of a mode and case's rounds).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Run {
    pub(crate) proxy: String,
    pub(crate) case: String,
    /// `pinned` or `unpinned`.
    pub(crate) pinning: String,
    /// The round (0-based); in medians, the number of rounds.
    pub(crate) round: usize,
    pub(crate) requests_per_second: f64,
    /// wrk's `Transfer/sec`: bytes read by the client per second (heads and bodies).
    pub(crate) bytes_per_second: f64,
    pub(crate) p99_ms: f64,
    pub(crate) errors: u64,
    /// CPU time (user and system) of the proxy's processes during the run, seconds; 0 where
    /// no proxy ran.
    pub(crate) cpu_seconds: f64,
    /// The run's length, seconds.
    pub(crate) seconds: f64,
}

impl Run {
    /// The proxy's CPU per request, microseconds.
    pub(crate) fn cpu_us_per_request(&self) -> f64 {
        self.cpu_seconds * 1e6 / (self.requests_per_second * self.seconds).max(1.0)
    }

    /// The proxy's CPU per gigabyte moved to the client, seconds.
    pub(crate) fn cpu_s_per_gb(&self) -> f64 {
        self.cpu_seconds * 1e9 / (self.bytes_per_second * self.seconds).max(1.0)
    }
}

/// The median of the rounds of each (mode, case, proxy).
pub(crate) fn medians(rounds: &[Run]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for r in rounds {
        if out
            .iter()
            .any(|m| m.pinning == r.pinning && m.case == r.case && m.proxy == r.proxy)
        {
            continue;
        }
        let same: Vec<&Run> = rounds
            .iter()
            .filter(|x| x.pinning == r.pinning && x.case == r.case && x.proxy == r.proxy)
            .collect();
        let median = |f: fn(&Run) -> f64| {
            let mut v: Vec<f64> = same.iter().map(|x| f(x)).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        };
        out.push(Run {
            proxy: r.proxy.clone(),
            case: r.case.clone(),
            pinning: r.pinning.clone(),
            round: same.len(),
            requests_per_second: median(|x| x.requests_per_second),
            bytes_per_second: median(|x| x.bytes_per_second),
            p99_ms: median(|x| x.p99_ms),
            cpu_seconds: median(|x| x.cpu_seconds),
            seconds: median(|x| x.seconds),
            errors: same.iter().map(|x| x.errors).sum(),
        });
    }
    out
}

/// Runs wrk (pinned to CPU 1) and parses its report.
pub(crate) fn wrk(port: u16, secs: u64, conns: u32, close: bool, pin: bool) -> Result<Run> {
    let mut c = if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "1", "wrk"]);
        c
    } else {
        Command::new("wrk")
    };
    c.arg("-t1")
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
    let mut transfer = 0.0;
    let mut errors = 0;
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Requests/sec:") {
            rps = v.trim().parse::<f64>().ok();
        } else if let Some(v) = l.strip_prefix("Transfer/sec:") {
            transfer = parse_bytes(v.trim()).unwrap_or(0.0);
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
            pinning: String::new(),
            round: 0,
            requests_per_second: r,
            bytes_per_second: transfer,
            p99_ms: p,
            errors,
            cpu_seconds: 0.0,
            seconds: secs as f64,
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

/// [`wrk`] against the proxy whose process is `pid`, with the CPU its processes used meanwhile.
pub(crate) fn timed_wrk(
    pid: u32,
    port: u16,
    secs: u64,
    conns: u32,
    close: bool,
    pin: bool,
) -> Result<Run> {
    let before = tree_cpu_seconds(pid);
    let mut r = wrk(port, secs, conns, close, pin)?;
    r.cpu_seconds = (tree_cpu_seconds(pid) - before).max(0.0);
    Ok(r)
}

/// Process `pid` and all its descendants (`/proc`): nginx's master and its workers.
pub(crate) fn tree(pid: u32) -> Vec<u32> {
    let mut children = std::collections::HashMap::<u32, Vec<u32>>::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // the parent is the second field after the command's closing parenthesis
            let Some(ppid) = stat_fields(p).and_then(|f| f.get(1)?.parse::<u32>().ok()) else {
                continue;
            };
            children.entry(ppid).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        out.push(p);
        todo.extend(children.get(&p).into_iter().flatten());
    }
    out
}

/// The fields of `/proc/pid/stat` after the command's closing parenthesis (state first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// User and system CPU time of `pid` and its descendants, seconds (`/proc`'s clock ticks are
/// USER_HZ, 100 per second on Linux whatever the kernel's own tick).
fn tree_cpu_seconds(pid: u32) -> f64 {
    let ticks: u64 = tree(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| {
            // utime and stime: fields 14 and 15 of stat(5), 11 and 12 after the command
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            t(11) + t(12)
        })
        .sum();
    ticks as f64 / 100.0
}

/// wrk's sizes, `812.50KB`, `1.02GB`, `123.00B` → bytes (wrk's units are powers of 1024).
fn parse_bytes(v: &str) -> Option<f64> {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    let k = match unit {
        "B" => 1.0,
        "KB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        "TB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(n * k)
}

/// Stator's own backends: `n` listening ports on 127.0.0.1 served by one thread pinned to
/// CPU 1, answering every request with `200 OK` and a body of the size asked for (`hello,
/// world\n`, 13 bytes, for the request-rate runs), keeping connections alive unless the request
/// says `Connection: close` — then the answer says it too and the backend closes, so that a
/// client behind a TCP proxy (which does not rewrite heads) knows to open a new connection.
pub(crate) struct Backends {
    pub(crate) addrs: Vec<SocketAddr>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The body of the request-rate runs.
const HELLO: &[u8] = b"hello, world\n";

impl Backends {
    /// `n` backends answering 13 bytes.
    pub(crate) fn start(n: usize) -> Result<Self> {
        Self::serving(n, HELLO.len())
    }

    /// `n` backends answering `body` bytes.
    pub(crate) fn serving(n: usize, body: usize) -> Result<Self> {
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
        let answers = Arc::new(Answers::new(body));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = Arc::clone(&stop);
        spawn_backend_thread("bench-backends", move || async move {
            for l in listeners {
                let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                    continue;
                };
                let answers = Arc::clone(&answers);
                tokio::spawn(async move {
                    while let Ok((c, _)) = l.accept().await {
                        let _ = c.set_nodelay(true);
                        tokio::spawn(serve_backend(c, Arc::clone(&answers)));
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

/// A backend's two answers, whole: kept alive, and closing.
struct Answers {
    keep: Vec<u8>,
    close: Vec<u8>,
}

impl Answers {
    fn new(body: usize) -> Self {
        let payload: Vec<u8> = if body == HELLO.len() {
            HELLO.to_vec()
        } else {
            HELLO.iter().copied().cycle().take(body).collect()
        };
        let head = |extra: &str| {
            let mut a = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {body}\r\ncontent-type: text/plain\r\n{extra}\r\n"
            )
            .into_bytes();
            a.extend_from_slice(&payload);
            a
        };
        Self {
            keep: head(""),
            close: head("connection: close\r\n"),
        }
    }
}

async fn serve_backend(mut c: tokio::net::TcpStream, answers: Arc<Answers>) {
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
        while let Some(end) = buf[answered..have]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
        {
            let head = &buf[answered..answered + end];
            let close = head
                .split(|&b| b == b'\n')
                .any(|l| l.trim_ascii().eq_ignore_ascii_case(b"connection: close"));
            answered += end + 4;
            let answer = if close { &answers.close } else { &answers.keep };
            if c.write_all(answer).await.is_err() || close {
                return;
            }
        }
        buf.copy_within(answered..have, 0);
        have -= answered;
        if have == buf.len() {
            return;
        }
    }
}

/// `e`, with how `p` ended if it did (else it is stopped).
pub(crate) fn gone(p: &mut Proc, e: BenchError) -> String {
    match p.0.try_wait() {
        Ok(Some(status)) => format!("{e} (it exited: {status})"),
        _ => {
            p.stop();
            format!("{e} (still running)")
        }
    }
}

pub(crate) fn wait_port(port: u16) -> Result<()> {
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

/// What [`churn`] measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Churned {
    pub(crate) connections: u64,
    pub(crate) connections_per_second: f64,
    /// Requests answered (`requests` per connection), and per second.
    pub(crate) requests: u64,
    pub(crate) requests_per_second: f64,
    /// Connect to the last byte of the answer, 99th percentile.
    pub(crate) p99_ms: f64,
    pub(crate) errors: u64,
}

/// Connections from many client addresses, which `wrk` cannot do (it connects from
/// 127.0.0.1 alone): `concurrency` clients on one thread (pinned to CPU 1 when `pin`), each
/// connecting from the next of `addresses` loopback addresses (127.1.0.1, 127.1.0.2, …: all of
/// 127/8 is the loopback interface's), sending `requests` `GET /` on the connection (the last
/// with `Connection: close`) and reading each answer to its end, then the next connection, for
/// `secs` seconds. `requests = 1` is new connections per second; more is requests per second
/// over kept-alive connections. Bounded: by time, and each connection by 5 s.
pub(crate) fn churn(
    port: u16,
    addresses: u32,
    concurrency: usize,
    secs: u64,
    pin: bool,
    requests: u32,
) -> Result<Churned> {
    use std::sync::atomic::{AtomicU32, Ordering};
    let worker = std::thread::Builder::new()
        .name("bench-churn".into())
        .spawn(move || -> std::io::Result<Churned> {
            if pin {
                crate::pin::pin_to_cpu(1);
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let next = Arc::new(AtomicU32::new(0));
                let start = tokio::time::Instant::now();
                let end = start + Duration::from_secs(secs);
                let mut tasks = Vec::with_capacity(concurrency);
                for _ in 0..concurrency {
                    let next = Arc::clone(&next);
                    tasks.push(tokio::spawn(async move {
                        let mut micros = Vec::new();
                        let mut errors = 0u64;
                        while tokio::time::Instant::now() < end {
                            let k = next.fetch_add(1, Ordering::Relaxed) % addresses.max(1);
                            let src = std::net::Ipv4Addr::from(0x7f01_0001 + k);
                            let t = Instant::now();
                            let conn = one(src, port, requests);
                            match tokio::time::timeout(Duration::from_secs(5), conn).await {
                                Ok(Ok(())) => micros.push(t.elapsed().as_micros() as u64),
                                _ => errors += 1,
                            }
                        }
                        (micros, errors)
                    }));
                }
                let mut all = Vec::new();
                let mut errors = 0;
                for t in tasks {
                    if let Ok((m, e)) = t.await {
                        all.extend(m);
                        errors += e;
                    }
                }
                let elapsed = start.elapsed().as_secs_f64();
                all.sort_unstable();
                let p99 = all
                    .get((all.len() * 99 / 100).min(all.len().saturating_sub(1)))
                    .map_or(0.0, |&m| m as f64 / 1000.0);
                let done = all.len() as u64;
                Ok(Churned {
                    connections: done,
                    connections_per_second: done as f64 / elapsed,
                    requests: done * u64::from(requests),
                    requests_per_second: (done * u64::from(requests)) as f64 / elapsed,
                    p99_ms: p99,
                    errors,
                })
            })
        })
        .map_err(io("starting the connection load"))?;
    worker
        .join()
        .map_err(|_| failed("the connection load's thread panicked"))?
        .map_err(io("running the connection load"))
}

/// One connection of [`churn`]: from `src`, `requests` requests, each answer read whole (the
/// last one to the connection's end, after its `Connection: close`).
async fn one(src: std::net::Ipv4Addr, port: u16, requests: u32) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = tokio::net::TcpSocket::new_v4()?;
    s.bind(SocketAddr::from((src, 0)))?;
    let mut c = s.connect(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    let mut buf = Vec::with_capacity(4096);
    for i in 1..=requests.max(1) {
        let last = i >= requests;
        let req: &[u8] = if last {
            b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
        } else {
            b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
        };
        c.write_all(req).await?;
        // the head, then Content-Length bytes of body (the bench backends always send one)
        buf.clear();
        let mut chunk = [0u8; 4096];
        let (head, length) = loop {
            let n = c.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                if !head.starts_with("http/1.1 200") {
                    return Err(std::io::Error::other("not a 200 answer"));
                }
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| std::io::Error::other("an answer without Content-Length"))?;
                break (end + 4, length);
            }
            if buf.len() > 64 * 1024 {
                return Err(std::io::Error::other("an answer head over 64 KiB"));
            }
        };
        let mut have = buf.len() - head;
        while have < length {
            let n = c.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            have += n;
        }
    }
    Ok(())
}
