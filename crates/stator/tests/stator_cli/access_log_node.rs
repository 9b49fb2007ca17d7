//! The access log of a running node (`stator run`, proxy-only): an HTTP request through a
//! listener is one text line in the file `[access_log]` names; after logrotate-style moving
//! of the file, `SIGUSR1` makes the node write to a new file of the same name; a
//! configuration put through the API that names another file for the log is refused with its
//! field path (files come from the configuration file only) and that file is not created; the
//! lines are counted in `/metrics`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stator_api::client::ApiClient;
use stator_testkit::scratch::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_stator");
const WAIT: Duration = Duration::from_secs(20);

/// `stator run`; killed when dropped.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP backend answering `ok` to every request, one connection at a time (bounded: the
/// test makes a handful).
fn backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(1000) {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    port
}

fn config(dir: &Path, listen: u16, backend: u16, log: &Path) -> String {
    format!(
        r#"
[node]
name = "logged"
[dataplane]
mode = "none"
[api]
socket = "{dir}/api.sock"
[[pool]]
name = "web"
[pool.health]
method = "none"
[[pool.backend]]
address = "127.0.0.1"
port = {backend}
[[listener]]
name = "web"
address = "127.0.0.1:{listen}"
protocol = "http"
pool = "web"
[access_log]
path = "{log}"
format = "text"
"#,
        dir = dir.display(),
        log = log.display()
    )
}

fn get(port: u16, path: &str) -> String {
    // the listener's workers bind once the node runs; on a busy machine the first request can
    // come before them (refused): retried, within WAIT
    let started = Instant::now();
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && started.elapsed() < WAIT =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("connecting to the listener on port {port}: {e}"),
        }
    };
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Waits until `file` has a line containing `needle`; the file's text.
fn line_with(file: &Path, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.lines().any(|l| l.contains(needle)) {
            return text;
        }
        assert!(
            started.elapsed() < WAIT,
            "no line with {needle:?} in {}: {text:?}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_logs_requests_reopens_on_sigusr1_and_keeps_the_path_from_the_api() {
    let dir = TempDir::new("stator-access-node");
    let (listen, up) = (free_port(), backend());
    let log = dir.join("access.log");
    let conf = dir.join("stator.toml");
    std::fs::write(&conf, config(dir.path(), listen, up, &log)).unwrap();
    let out = std::fs::File::create(dir.join("stator.out")).unwrap();
    let mut run = Run(Command::new(BIN)
        .args(["run", "-c"])
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap());
    let api = ApiClient::unix(dir.join("api.sock")).with_timeout(Duration::from_secs(5));
    let started = Instant::now();
    while !api
        .get_json("/v1/status")
        .is_ok_and(|s| s["phase"] == "running")
    {
        assert!(
            run.0.try_wait().unwrap().is_none(),
            "stator run exited: {}",
            std::fs::read_to_string(dir.join("stator.out")).unwrap_or_default()
        );
        assert!(started.elapsed() < WAIT, "not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    // a request is one text line: time kind listener worker client upstream status outcome …
    assert!(get(listen, "/one").ends_with("ok"));
    let text = line_with(&log, "\"GET /one\"");
    let line = text.lines().find(|l| l.contains("/one")).unwrap();
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[1..3], ["http", "web"], "{line}");
    assert!(
        fields[3].parse::<usize>().is_ok(),
        "a worker number: {line}"
    );
    assert!(fields[4].starts_with("127.0.0.1:"), "{line}");
    assert_eq!(fields[5], format!("127.0.0.1:{up}"), "{line}");
    assert_eq!(fields[6..8], ["200", "ok"], "{line}");
    assert_eq!(fields[9], "2", "two bytes of body to the client: {line}");
    // logrotate moves the file; SIGUSR1 opens a new one by the same name
    let moved = dir.join("access.log.1");
    std::fs::rename(&log, &moved).unwrap();
    let killed = Command::new("kill")
        .args(["-USR1", &run.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    while !log.exists() {
        assert!(started.elapsed() < WAIT, "SIGUSR1 did not reopen the log");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(get(listen, "/two").ends_with("ok"));
    line_with(&log, "\"GET /two\"");
    let old = std::fs::read_to_string(&moved).unwrap();
    assert!(old.contains("/one") && !old.contains("/two"), "{old}");
    // the API may not name another file for the node to write
    let elsewhere = dir.join("elsewhere.log");
    let r = api
        .request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/toml")],
            config(dir.path(), listen, up, &elsewhere).as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json().unwrap()["field"], "access_log.path");
    assert!(!elsewhere.exists(), "the file the caller named was created");
    // counted
    let metrics = api.request("GET", "/metrics", &[], b"").unwrap().text();
    let written: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("stator_access_log_lines_total{result=\"written\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no written count in {metrics}"));
    assert!(written >= 2.0, "{written}");
}
