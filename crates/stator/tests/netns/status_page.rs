//! The status page in a real browser: `stator run` on a veth in a network namespace (XDP
//! attached, two backends behind TCP health checks, UDP traffic through the forwarder) and
//! Debian's headless `chromium` in the same namespace, driven over the DevTools protocol.
//! The page must show the node, both VIPs, both backends up, and the node's HTTP listener
//! with both backends usable as its upstreams; when a backend's server goes away, the page
//! must show it down (and the event, and the listener's upstream no longer usable) within two
//! of its polls after the API does. Screenshots of the page at desktop and phone widths are saved to
//! `target/status-page/` for a person to look at. The browser reaches the TCP endpoint with
//! the `read` token in the URL's fragment (never sent to the server); without a token, the
//! page's files are served (they hold no node data) and its data are not. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::cdp;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use stator_lab::netns::{Netns, cleanup, is_root, veth};
use stator_lab::stator::{BpfFs, StatorRun};
use stator_lab::wait::wait_until;

const NET: u8 = 83;
const POLL_SECONDS: u64 = 1;

/// The `read` token the browser is given.
const READ_TOKEN: &str = "status-page-read-token";

fn config(pins: &Path, dir: &Path) -> String {
    format!(
        r#"
[node]
name = "page-demo"
address_v4 = "10.{NET}.0.1"
[dataplane]
interfaces = ["eth0"]
pin_path = "{pins}"
conntrack = "shared"
conntrack_entries = 4096
slots_per_generation = 65536
[api]
socket = "{dir}/api.sock"
listen = "0.0.0.0:9180"
read_token_file = "{dir}/read-token"
[[pool]]
name = "web"
[pool.health]
interval = "200ms"
timeout = "100ms"
rise = 1
fall = 1
[[pool.backend]]
id = "web-a"
address = "10.{NET}.0.2"
port = 8080
weight = 2
[[pool.backend]]
id = "web-b"
address = "10.{NET}.0.3"
port = 8080
[[vip]]
name = "www"
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = 251
[[vip]]
name = "dns"
address = "192.0.2.10"
port = 53
protocol = "udp"
pools = ["web"]
table_size = 251
[[listener]]
name = "web-proxy"
address = "10.{NET}.0.1:8081"
protocol = "http"
pool = "web"
workers = 1
"#,
        pins = pins.display(),
        dir = dir.display(),
    )
}

/// The target directory (`CARGO_TARGET_TMPDIR` is `<target>/tmp`).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// What the page shows, read from its DOM.
const DOM: &str = r##"JSON.stringify({
  state: document.body.dataset.state,
  polls: Number(document.body.dataset.polls),
  node: document.getElementById("node").textContent,
  vips: [...document.querySelectorAll("#vips tr[data-vip]")].map(r => r.dataset.vip),
  backends: Object.fromEntries([...document.querySelectorAll("#backends tr[data-backend]")]
    .map(r => [r.dataset.backend, r.dataset.health])),
  events: [...document.querySelectorAll("#events li[data-kind]")]
    .map(l => l.dataset.kind + " " + l.querySelector(".msg").textContent),
  plane: document.getElementById("plane-health").textContent,
  listeners_shown: !document.getElementById("listeners-section").hidden,
  listeners: [...document.querySelectorAll("#listeners tr[data-listener]")].map(r => r.dataset.listener),
  upstreams: Object.fromEntries([...document.querySelectorAll("#listeners tr[data-upstream]")]
    .map(r => [r.dataset.upstream, r.dataset.state])),
})"##;

fn dom(browser: &mut cdp::Browser, tab: &cdp::Tab) -> Value {
    let text = browser.eval(tab, DOM);
    serde_json::from_str(text.as_str().unwrap()).unwrap()
}

fn api_json(run: &StatorRun, path: &str) -> Value {
    let a = run.api("GET", path).unwrap();
    assert_eq!(a.status, 200, "{path}: {}", a.body);
    serde_json::from_str(&a.body).unwrap()
}

fn backend_health(run: &StatorRun, id: &str) -> String {
    let b = api_json(run, "/v1/backends");
    b["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id)
        .map(|b| b["health"].as_str().unwrap().to_owned())
        .unwrap()
}

/// Removes the namespaces (and what runs in them) and the state directory, also when the test
/// fails half-way; declared first, so dropped after everything else.
struct Cleanup(String, PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = cleanup(&self.0);
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[test]
fn the_status_page_in_chromium() {
    assert!(
        is_root(),
        "this test runs stator run and chromium in a network namespace: run it as root"
    );
    let tag = std::process::id() % 100_000;
    let prefix = format!("stp{tag}-");
    cleanup(&prefix).unwrap();
    let dir = std::env::temp_dir().join(format!("stator-status-page-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Cleanup(prefix.clone(), dir.clone());
    let node = Netns::create(&format!("{prefix}n")).unwrap();
    let backends = Netns::create(&format!("{prefix}b")).unwrap();
    veth(&node, "eth0", &backends, "eth0").unwrap();
    node.addr_add("eth0", &format!("10.{NET}.0.1/24")).unwrap();
    backends
        .addr_add("eth0", &format!("10.{NET}.0.2/24"))
        .unwrap();
    backends
        .addr_add("eth0", &format!("10.{NET}.0.3/24"))
        .unwrap();
    node.sysctl("net.ipv4.conf.eth0.forwarding", "1").unwrap();
    backends
        .ip([
            "route",
            "add",
            "192.0.2.0/24",
            "via",
            &format!("10.{NET}.0.1"),
        ])
        .unwrap();
    let pins = BpfFs::mount(&dir.join("pins")).unwrap();
    stator_lab::stator::write_private(&dir.join("read-token"), READ_TOKEN).unwrap();

    // The backends' servers: the health checks only need them to accept.
    let server = |host: u8| {
        let addr: SocketAddr = format!("10.{NET}.0.{host}:8080").parse().unwrap();
        backends
            .run_in(move || TcpListener::bind(addr).unwrap())
            .unwrap()
    };
    let web_a = server(2);
    let web_b = server(3);

    let mut run = StatorRun::start(
        &node,
        Path::new(env!("CARGO_BIN_EXE_stator")),
        &dir,
        "node",
        &config(pins.path(), &dir),
        &dir.join("api.sock"),
    )
    .unwrap();
    run.wait_ready(Duration::from_secs(30)).unwrap();
    wait_until(
        "both backends up",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || backend_health(&run, "web-a") == "up" && backend_health(&run, "web-b") == "up",
    )
    .unwrap();

    // Traffic through the forwarder, so that rates and graphs move: UDP to the VIP from the
    // backends' side (bounded in count and time; the backends drop what they receive).
    let stop = Arc::new(AtomicBool::new(false));
    let stop_traffic = Arc::clone(&stop);
    let traffic = backends
        .spawn_thread(move || {
            let sock = UdpSocket::bind(format!("10.{NET}.0.2:0")).unwrap();
            let mut sent = 0u64;
            let started = std::time::Instant::now();
            while !stop_traffic.load(Ordering::Relaxed)
                && sent < 2_000_000
                && started.elapsed() < Duration::from_secs(120)
            {
                for _ in 0..20 {
                    let _ = sock.send_to(b"stator status page test", ("192.0.2.10", 53));
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            sent
        })
        .unwrap();

    // Without the token, from the node's own veth address: the page's files (no node data),
    // not its data.
    let get = |path: &'static str| {
        node.run_in(move || {
            let mut s = TcpStream::connect(format!("10.{NET}.0.1:9180")).unwrap();
            s.write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: 10.{NET}.0.1:9180\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
        .unwrap()
    };
    let page = get("/");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let data = get("/v1/status");
    assert!(data.starts_with("HTTP/1.1 401"), "{data}");

    let mut browser = cdp::Browser::start(&node, &dir);
    let tab = browser.open(&format!(
        "http://127.0.0.1:9180/?interval={POLL_SECONDS}#token={READ_TOKEN}"
    ));
    browser.viewport(&tab, 1280, 900, false);
    let took = browser.wait_for(
        &tab,
        "the page's first poll",
        "document.body && document.body.dataset.state === 'ok'",
        Duration::from_secs(30),
    );
    println!("page rendered its first poll after {took:?}");
    let first = dom(&mut browser, &tab);
    println!("{first:#}");
    assert_eq!(first["node"], "page-demo");
    assert_eq!(first["vips"], serde_json::json!(["www", "dns"]));
    assert_eq!(first["backends"]["web-a"], "up");
    assert_eq!(first["backends"]["web-b"], "up");
    assert_eq!(first["listeners_shown"], true, "{first}");
    assert_eq!(first["listeners"], serde_json::json!(["web-proxy"]));
    assert_eq!(first["upstreams"]["web-proxy/web-a"], "usable", "{first}");
    assert_eq!(first["upstreams"]["web-proxy/web-b"], "usable", "{first}");
    assert!(
        first["plane"].as_str().unwrap().contains("healthy"),
        "{first}"
    );
    assert!(
        first["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("start")),
        "{first}"
    );
    // A few polls so the graphs have a history, then the desktop screenshot.
    let polls = first["polls"].as_u64().unwrap();
    browser.wait_for(
        &tab,
        "five more polls",
        &format!("Number(document.body.dataset.polls) >= {}", polls + 5),
        Duration::from_secs(30),
    );
    let shots = target_dir().join("status-page");
    browser.screenshot(&tab, &shots.join("desktop.png"));

    // web-b's server goes away: the API says down, then the page within two polls.
    drop(web_b);
    let api_down = wait_until(
        "the API to show web-b down",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || backend_health(&run, "web-b") == "down",
    )
    .unwrap();
    let polls_at_api = dom(&mut browser, &tab)["polls"].as_u64().unwrap();
    let page_down = browser.wait_for(
        &tab,
        "the page to show web-b down",
        "document.querySelector('#backends tr[data-backend=\"web-b\"]').dataset.health === 'down'",
        Duration::from_secs(10 * POLL_SECONDS),
    );
    let after = dom(&mut browser, &tab);
    let polls_at_page = after["polls"].as_u64().unwrap();
    println!(
        "web-b down: API after {api_down:?}, page {page_down:?} later, at poll {polls_at_page} \
         (the API showed it at poll {polls_at_api})"
    );
    assert!(
        polls_at_page <= polls_at_api + 2,
        "the page showed the change at poll {polls_at_page}, more than two polls after {polls_at_api}"
    );
    assert_eq!(after["backends"]["web-a"], "up");
    // The listener follows the same health state: its upstream web-b is no longer usable.
    let upstream_down = browser.wait_for(
        &tab,
        "the page to show the listener's upstream web-b not usable",
        "document.querySelector('#listeners tr[data-upstream=\"web-proxy/web-b\"]').dataset.state === 'absent'",
        Duration::from_secs(3 * POLL_SECONDS),
    );
    println!("the listener's upstream web-b shown absent {upstream_down:?} after the backend");
    let after = dom(&mut browser, &tab);
    assert_eq!(after["upstreams"]["web-proxy/web-a"], "usable", "{after}");
    assert!(
        after["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("backend_down web-b down")),
        "{after}"
    );
    browser.screenshot(&tab, &shots.join("backend-down.png"));
    browser.viewport(&tab, 390, 844, true);
    std::thread::sleep(Duration::from_millis(300));
    browser.screenshot(&tab, &shots.join("phone.png"));
    println!("screenshots in {}", shots.display());

    drop(browser);
    stop.store(true, Ordering::Relaxed);
    let sent = traffic.join().unwrap();
    println!("{sent} UDP datagrams sent to the VIP");
    let exit = run.terminate(Duration::from_secs(15)).unwrap();
    assert!(exit.success(), "{exit}: {}", run.log_tail(20));
    drop(web_a);
    drop(pins);
}
