//! Helpers of the upgrade tests (`stator_cli/upgrade_node.rs`, unprivileged, and
//! `netns/upgrade_steering.rs`, root): a node started from a configuration file, `stator
//! upgrade`, backends, and the load — kept-alive and new-connection HTTP clients, long-lived TCP
//! streams — that must see no failure across upgrades.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stator_api::client::ApiClient;
use stator_testkit::scratch::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_stator");
pub const WAIT: Duration = Duration::from_secs(20);
pub const IO: Duration = Duration::from_secs(10);

/// A process (the node, or a successor found by its pid) ended when dropped.
pub struct Proc {
    pub child: Option<Child>,
    pub pid: u32,
}

impl Proc {
    pub fn kill(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.pid.to_string()])
            .status();
        if let Some(c) = self.child.as_mut() {
            let _ = c.wait();
        }
    }

    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().unwrap().is_none(),
            None => Path::new(&format!("/proc/{}", self.pid)).exists(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill("-KILL");
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A keep-alive HTTP backend answering `ok`; a thread per connection (bounded in count and
/// by read timeouts).
pub fn http_backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(20_000) {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(IO));
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let mut line = String::new();
                loop {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => {
                            if w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                                .is_err()
                            {
                                return;
                            }
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    port
}

/// A TCP echo backend; a thread per connection.
pub fn echo_backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(1_000) {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                let mut w = s.try_clone().unwrap();
                let _ = std::io::copy(&mut s, &mut w);
                let _ = w.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

/// A proxy-only node's configuration: an HTTP listener on `http` and a TCP one on `tcp`, each
/// with `listener` added to its table (`steering = "source"`, …), and `extra` at the end.
pub fn config(
    dir: &Path,
    (http, tcp): (u16, u16),
    (http_up, echo_up): (u16, u16),
    listener: &str,
    extra: &str,
) -> String {
    format!(
        r#"
[node]
name = "upgraded"
[dataplane]
mode = "none"
[api]
socket = "{dir}/api.sock"
[upgrade]
drain = "60s"
start_timeout = "20s"
[[pool]]
name = "web"
[pool.health]
method = "none"
[[pool.backend]]
address = "127.0.0.1"
port = {http_up}
[[pool]]
name = "echo"
[pool.health]
method = "none"
[[pool.backend]]
address = "127.0.0.1"
port = {echo_up}
[[listener]]
name = "web"
address = "127.0.0.1:{http}"
protocol = "http"
pool = "web"
{listener}
[[listener]]
name = "stream"
address = "127.0.0.1:{tcp}"
protocol = "tcp"
pool = "echo"
{listener}
{extra}"#,
        dir = dir.display()
    )
}

/// The node, started, running, and accepting on `ports` (its listeners start just after
/// the API says `running`).
pub fn start(dir: &Path, conf: &Path, ports: &[u16]) -> Proc {
    let out = std::fs::File::create(dir.join("stator.out")).unwrap();
    let child = Command::new(BIN)
        .args(["run", "-c"])
        .arg(conf)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let mut node = Proc {
        pid: child.id(),
        child: Some(child),
    };
    let api = ApiClient::unix(dir.join("api.sock")).with_timeout(Duration::from_secs(5));
    let started = Instant::now();
    while !api
        .get_json("/v1/status")
        .is_ok_and(|s| s["phase"] == "running")
    {
        assert!(node.alive(), "stator run exited: {}", log(dir));
        assert!(started.elapsed() < WAIT, "not ready: {}", log(dir));
        std::thread::sleep(Duration::from_millis(50));
    }
    for &port in ports {
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(node.alive(), "stator run exited: {}", log(dir));
            assert!(
                started.elapsed() < WAIT,
                "port {port} not listening: {}",
                log(dir)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    node
}

pub fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stator.out")).unwrap_or_default()
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `stator upgrade`: the successor's pid, or the output of a failure.
pub fn upgrade(conf: &Path) -> Result<u32, String> {
    let out = Command::new(BIN)
        .args(["upgrade", "-c"])
        .arg(conf)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let said = text(&out);
    if !out.status.success() {
        return Err(said);
    }
    let pid = said
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok());
    pid.ok_or(said)
}

/// Reads one response, `ok`; whether the server said it closes.
pub fn response(r: &mut BufReader<TcpStream>) -> std::io::Result<bool> {
    let (close, body) = response_body(r)?;
    if body != b"ok" {
        return Err(std::io::Error::other(format!("body {body:?}")));
    }
    Ok(close)
}

/// Reads one `200` response (`Content-Length` framing): whether the server said it closes,
/// and the body.
pub fn response_body(r: &mut BufReader<TcpStream>) -> std::io::Result<(bool, Vec<u8>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if !line.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!("status line {line:?}")));
    }
    let (mut len, mut close) = (0, false);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("closed in the head"));
        }
        let l = line.to_ascii_lowercase();
        if l == "\r\n" {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        close |= l.starts_with("connection:") && l.contains("close");
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok((close, body))
}

/// What a load thread saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub ok: u64,
    pub failures: Vec<String>,
}

/// HTTP requests until `stop`: on one kept-alive connection (opened again when the proxy
/// says it closes), or a new connection per request.
pub fn http_load(port: u16, keep: bool, stop: Arc<AtomicBool>) -> JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        let mut conn: Option<BufReader<TcpStream>> = None;
        while !stop.load(Ordering::Relaxed) {
            let r = (|| -> std::io::Result<bool> {
                if conn.is_none() {
                    let s = TcpStream::connect(("127.0.0.1", port))?;
                    s.set_read_timeout(Some(IO))?;
                    conn = Some(BufReader::new(s));
                }
                let c = conn.as_mut().expect("connected");
                let req: &[u8] = if keep {
                    b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
                } else {
                    b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                };
                c.get_mut().write_all(req)?;
                response(c)
            })();
            match r {
                Ok(close) => {
                    seen.ok += 1;
                    if close || !keep {
                        conn = None;
                    }
                }
                Err(e) => {
                    seen.failures.push(e.to_string());
                    conn = None;
                }
            }
        }
        seen
    })
}

/// A TCP stream through the proxy sending 512 bytes every 20 ms for `span` and reading each
/// back; ends with a half-close and the echo's end. `Ok(bytes)` or the error that broke it.
pub fn stream(
    port: u16,
    span: Duration,
    first: Option<std::sync::mpsc::Sender<()>>,
) -> JoinHandle<Result<usize, String>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(IO)).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let (mut sent, mut i) = (0usize, 0u8);
        let mut back = [0u8; 512];
        while started.elapsed() < span {
            let chunk = [i; 512];
            s.write_all(&chunk)
                .map_err(|e| format!("write after {sent} bytes: {e}"))?;
            s.read_exact(&mut back)
                .map_err(|e| format!("read after {sent} bytes: {e}"))?;
            if back != chunk {
                return Err(format!("echo differs after {sent} bytes"));
            }
            sent += 512;
            i = i.wrapping_add(1);
            if let Some(tx) = &first
                && sent == 512
            {
                let _ = tx.send(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        s.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        let mut rest = Vec::new();
        match s.read_to_end(&mut rest) {
            Ok(0) => Ok(sent),
            Ok(n) => Err(format!("{n} bytes after the end")),
            Err(e) => Err(format!("closing after {sent} bytes: {e}")),
        }
    })
}

/// Three upgrades under load (the scenario of `upgrade_node`), the listeners' tables with
/// `listener` added: no request fails, no stream breaks, every replaced process exits.
pub fn three_upgrades(tag: &str, listener: &str) {
    let dir = TempDir::new(tag);
    let (http, tcp) = (free_port(), free_port());
    let conf = dir.join("stator.toml");
    std::fs::write(
        &conf,
        config(
            dir.path(),
            (http, tcp),
            (http_backend(), echo_backend()),
            listener,
            "",
        ),
    )
    .unwrap();
    let first = start(dir.path(), &conf, &[http, tcp]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut load: Vec<_> = (0..3)
        .map(|_| http_load(http, true, Arc::clone(&stop)))
        .collect();
    load.push(http_load(http, false, Arc::clone(&stop)));
    // streams that outlive every upgrade: the first process serves them through its drain
    let streams: Vec<_> = (0..4)
        .map(|_| stream(tcp, Duration::from_secs(7), None))
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let mut pids = vec![first.pid];
    let mut successors = Vec::new();
    for round in 1..=3 {
        let pid =
            upgrade(&conf).unwrap_or_else(|e| panic!("upgrade {round}: {e}\n{}", log(dir.path())));
        assert!(
            !pids.contains(&pid),
            "a new process each time: {pids:?} then {pid}"
        );
        pids.push(pid);
        successors.push(Proc { child: None, pid });
        // a stream opened between upgrades, served by this successor and drained by it
        std::thread::sleep(Duration::from_millis(1500));
    }
    let late = stream(tcp, Duration::from_secs(1), None);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let mut ok = 0;
    for t in load {
        let seen = t.join().unwrap();
        assert!(
            seen.failures.is_empty(),
            "failed requests across the upgrades: {:?} ({} ok)\n{}",
            seen.failures,
            seen.ok,
            log(dir.path())
        );
        ok += seen.ok;
    }
    assert!(ok > 0);
    for s in streams.into_iter().chain([late]) {
        let bytes = s.join().unwrap().unwrap_or_else(|e| {
            panic!(
                "a stream broke across the upgrades: {e}\n{}",
                log(dir.path())
            )
        });
        assert!(bytes > 0);
    }
    // the last successor serves, with the API on the same socket; every earlier process is gone
    let api = ApiClient::unix(dir.join("api.sock")).with_timeout(Duration::from_secs(5));
    assert_eq!(api.get_json("/v1/status").unwrap()["phase"], "running");
    let started = Instant::now();
    let mut gone = vec![first];
    gone.extend(successors.drain(..2));
    while gone.iter_mut().any(Proc::alive) {
        assert!(
            started.elapsed() < WAIT,
            "a replaced process did not exit after its drain"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("{ok} requests and 5 streams across 3 upgrades, none failed");
    drop(successors);
}
