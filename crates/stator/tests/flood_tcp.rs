//! A TCP connection flood does not take the node down: a `stator run` process with its
//! descriptor limit at 4,096 (`prlimit`), a TCP listener with 2 workers and every other
//! setting at its default, in front of a real echo backend health-checked by TCP every
//! 200 ms; 20,000 connections opened and held — 10,000 from one address (127.0.0.1, where
//! `max_connections_per_source` applies) and 10,000 from as many addresses (127.20.0.0
//! onwards, where the descriptor budget does) — while a client connected before keeps
//! echoing. Before the budget, two descriptors per connection and 16,384 connections per
//! worker ran the process out of descriptors: health probes and API accepts failed.
//!
//! Asserted throughout and after: the backend is never anything but up; the admin API
//! answers every request (latencies printed; the bound asserted is what this 2-core machine
//! reliably does); the established client gets ≥ 99% of its echoes; the process's open
//! descriptors stay under its limit and what the proxy holds under its budget; every
//! connection accepted is either served or refused under a reason (`source_limit`,
//! `descriptors`, `rejected`), both of the first two are there, and the connections the
//! clients still hold are the ones served.
//!
//! tier: root (20,000 held sockets need a raised limit; a process under prlimit;
//! scripts/test-tier.sh)
//! lane: alone (scripts/test-tier.sh: its premise is a node with the CPU to itself)

mod flood;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flood::{LIMIT, Monitor, Node, free_port, metric};

/// Connections from 127.0.0.1, then from as many distinct addresses.
const FROM_ONE: u32 = 10_000;
const FROM_MANY: u32 = 10_000;

/// Raises this process's own descriptor limit: to `to` where it may (root with
/// `CAP_SYS_RESOURCE`), else the soft limit to the hard one. Returns the limit now.
fn raise_own_limit(to: u64) -> u64 {
    use stator_sys::limits::{NofileLimit, nofile, raise_nofile, set_nofile};
    let wanted = NofileLimit {
        soft: Some(to),
        hard: Some(to),
    };
    if set_nofile(wanted).is_err() {
        raise_nofile().expect("raising the descriptor limit to the hard one");
    }
    nofile().soft.unwrap_or(to)
}

/// What the helper process is asked to do: `<listener port>:<connections>`.
const HELPER: &str = "STATOR_FLOOD_TCP_HELPER";

/// Not a test of its own: the flood test runs this binary again with [`HELPER`] set to hold
/// the flood's connections from many addresses in a second process — a container without
/// `CAP_SYS_RESOURCE` keeps a process at its hard limit (20,000 here), and one process
/// cannot hold 20,000 connections and the backend's. Without the variable it does nothing.
/// Protocol on its standard output: `FLOOD opened N` once connected, then, on each line read
/// from its standard input, `FLOOD standing OPEN CLOSED FAILED`; it exits when its input
/// closes (or after 60 s).
#[test]
fn flood_helper_holds_connections_from_many_addresses() {
    let Ok(job) = std::env::var(HELPER) else {
        return;
    };
    let (port, n) = job.split_once(':').unwrap();
    let (port, n): (u16, u32) = (port.parse().unwrap(), n.parse().unwrap());
    raise_own_limit(65_536);
    let held = open_many(port, n, |i| {
        Some(Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 20, 0, 0)) + i))
    });
    println!("FLOOD opened {}", held.len());
    std::io::stdout().flush().unwrap();
    let stdin = std::io::stdin();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut line = String::new();
    while Instant::now() < deadline {
        line.clear();
        if stdin.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let (open, closed, failed) = standing(&held);
        println!("FLOOD standing {open} {closed} {failed}");
        std::io::stdout().flush().unwrap();
    }
}

/// The helper process holding the flood's connections from many addresses.
struct Helper {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Helper {
    /// Starts it and waits until its `n` connections to `listener` are opened.
    fn start(listener: u16, n: u32) -> (Self, usize) {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "flood_helper_holds_connections_from_many_addresses",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER, format!("{listener}:{n}"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut h = Self { child, out };
        let opened = h.expect("FLOOD opened ")[0];
        (h, opened)
    }

    /// The numbers of the next line that starts with `prefix`.
    fn expect(&mut self, prefix: &str) -> Vec<usize> {
        use std::io::BufRead as _;
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "the helper ended"
            );
            // libtest may have written the test's name on the same line first
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..]
                    .split_whitespace()
                    .map(|n| n.parse().unwrap())
                    .collect();
            }
        }
    }

    /// How its connections stand: (open, closed by the peer, failed).
    fn standing(&mut self) -> (usize, usize, usize) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"count\n").unwrap();
        stdin.flush().unwrap();
        let v = self.expect("FLOOD standing ");
        (v[0], v[1], v[2])
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP echo server on 127.0.0.1 (its own runtime on a thread; stops with the flag).
fn echo_backend(stop: Arc<AtomicBool>) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < deadline {
                let Ok(Ok((mut s, _))) =
                    tokio::time::timeout(Duration::from_millis(100), l.accept()).await
                else {
                    continue;
                };
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
    });
    port
}

fn config(backend: u16, listener: u16) -> String {
    format!(
        r#"
[node]
name = "flood"
[dataplane]
mode = "none"
[api]
socket = "{{dir}}/api.sock"
[[pool]]
name = "echo"
[pool.health]
method = "tcp"
interval = "200ms"
timeout = "150ms"
[[pool.backend]]
address = "127.0.0.1"
port = {backend}
id = "echo"
[[listener]]
name = "tcp"
address = "127.0.0.1:{listener}"
protocol = "tcp"
pool = "echo"
workers = 2
"#
    )
}

/// An established client that echoes a line and waits for it (300 ms at most), until
/// stopped: (asked, answered).
fn talking_client(listener: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    let mut s = TcpStream::connect(("127.0.0.1", listener)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s.set_nodelay(true).unwrap();
    std::thread::spawn(move || {
        let (mut asked, mut answered) = (0u64, 0u64);
        let mut buf = Vec::new();
        let mut chunk = [0u8; 256];
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            asked += 1;
            let q = format!("talk {asked:08}\n");
            if s.write_all(q.as_bytes()).is_err() {
                break; // closed: every later question counts as unanswered
            }
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until && buf.len() < q.len() {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            if buf.len() >= q.len() {
                if buf[..q.len()] == *q.as_bytes() {
                    answered += 1;
                }
                buf.drain(..q.len());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (asked, answered)
    })
}

/// Opens `n` connections to the listener from `source(i)`, non-blocking, and keeps them:
/// the sockets and the time it took.
fn open_many(
    listener: u16,
    n: u32,
    source: impl Fn(u32) -> Option<Ipv4Addr>,
) -> Vec<socket2::Socket> {
    let to: socket2::SockAddr = SocketAddr::from((Ipv4Addr::LOCALHOST, listener)).into();
    (0..n)
        .filter_map(|i| {
            let s = socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )
            .unwrap();
            if let Some(src) = source(i) {
                s.bind(&SocketAddr::from((src, 0)).into()).unwrap();
            }
            s.set_nonblocking(true).unwrap();
            match s.connect(&to) {
                Ok(()) => Some(s),
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Some(s),
                Err(_) => None,
            }
        })
        .collect()
}

/// How the held connections stand: (open, closed by the peer, failed).
fn standing(socks: &[socket2::Socket]) -> (usize, usize, usize) {
    let (mut open, mut closed, mut failed) = (0, 0, 0);
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    for s in socks {
        match s.peek(&mut buf) {
            Ok(0) => closed += 1,
            Ok(_) => open += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => open += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            Err(_) => failed += 1,
        }
    }
    (open, closed, failed)
}

#[test]
fn a_flood_of_20000_tcp_connections_does_not_take_the_node_down() {
    assert!(
        stator_lab::netns::is_root(),
        "needs root (run with scripts/test-tier.sh root)"
    );
    let own = raise_own_limit(65_536);
    let stop = Arc::new(AtomicBool::new(false));
    let backend = echo_backend(Arc::clone(&stop));
    let listener = free_port(false);
    let mut node = Node::start(&config(backend, listener), "echo");
    let client = talking_client(listener, Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(500));
    let monitor = Monitor::start(&node, "echo");
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let held = open_many(listener, FROM_ONE, |_| None);
    let from_one = held.len();
    let one_took = started.elapsed();
    let (mut helper, many) = Helper::start(listener, FROM_MANY);
    let took = started.elapsed();
    // hold them while the node settles
    std::thread::sleep(Duration::from_millis(2000));
    let (o1, c1, f1) = standing(&held);
    let (o2, c2, f2) = helper.standing();
    let (open, closed, failed) = (o1 + o2, c1 + c2, f1 + f2);
    let seen = monitor.finish();
    stop.store(true, Ordering::Relaxed);
    let (asked, answered) = client.join().unwrap();
    let metrics = node.metrics();
    let listeners = node.api.get_json("/v1/listeners").unwrap();
    let log = node.log();
    drop(held);
    drop(helper);
    node.stop();

    let m = |name: &str, labels: &[(&str, &str)]| metric(&metrics, name, labels);
    let err = |kind: &str| {
        m(
            "stator_proxy_client_errors_total",
            &[("listener", "tcp"), ("kind", kind)],
        )
    };
    let accepted = m("stator_proxy_connections_total", &[("listener", "tcp")]);
    let active = m("stator_proxy_connections_active", &[("listener", "tcp")]);
    let refused: Vec<(&str, f64)> = ["source_limit", "descriptors", "rejected"]
        .into_iter()
        .map(|k| (k, err(k)))
        .collect();
    let refused_total: f64 = refused.iter().map(|(_, n)| n).sum();
    let budget = m("stator_proxy_descriptors", &[("kind", "budget")]);
    let peak = m("stator_proxy_descriptors", &[("kind", "peak")]);
    let reserved = m("stator_descriptors", &[("kind", "reserved")]);
    let downs = m(
        "stator_backend_transitions_total",
        &[("backend", "echo"), ("to", "down")],
    );
    let ratio = answered as f64 / asked.max(1) as f64;
    let sent = (from_one + many) as u32;
    println!(
        "flood: {sent} connections opened in {:.2} s ({} from 127.0.0.1 in {:.2} s, {many} from \
         as many addresses by a second process; this one's limit {own}); the clients hold \
         {open}, {closed} closed by the node, {failed} failed",
        took.as_secs_f64(),
        from_one,
        one_took.as_secs_f64()
    );
    println!(
        "node: accepted {accepted}, served {active}, refused {refused:?}; descriptors: limit \
         {LIMIT}, reserved {reserved}, budget {budget}, proxy peak {peak}; process peak {} \
         ({} looks at /proc/PID/fd)",
        seen.peak_fds, seen.fd_looks
    );
    println!("admin API during the flood: {}", seen.distribution());
    println!(
        "established client: {answered} of {asked} echoed ({:.2}%)",
        ratio * 100.0
    );
    println!("descriptors in /v1/listeners: {}", listeners["descriptors"]);

    assert_eq!(sent, FROM_ONE + FROM_MANY, "every connect started");
    flood::assert_the_node_held(&seen, &log, downs, (answered, asked), budget, peak);
    // every connection accepted was served or refused under a reason; the talking client's
    // was served and may or may not be closed by the time /metrics is read (one CI run read
    // it still open), so it is counted in `active` or not at all
    let unaccounted = accepted - active - refused_total;
    assert!(
        unaccounted == 0.0 || unaccounted == 1.0,
        "accepted {accepted} = active {active} + refused {refused_total} + {unaccounted}: \
         {refused:?}"
    );
    assert!(
        accepted >= f64::from(sent) * 0.99,
        "{accepted} accepted of {sent}"
    );
    assert!(
        err("source_limit") > 0.0 && err("descriptors") > 0.0,
        "{refused:?}"
    );
    // what the clients still hold is what the node serves — and, as above, the talking
    // client's connection, closed just before /metrics was read, may still be counted (one CI
    // run read 1,810 served beside 1,809 held)
    let extra = active - open as f64;
    assert!(
        extra == 0.0 || extra == 1.0,
        "the clients hold {open}, the node serves {active}"
    );
    assert_eq!(
        listeners["listeners"][0]["client_errors"]["descriptors"].as_f64(),
        Some(err("descriptors")),
        "/v1/listeners and /metrics agree"
    );
}
