//! The monitoring examples stay true to what a node exports (no root; needs `promtool`, from
//! Debian's `prometheus`, which `make test-deps` installs):
//! - `promtool check rules examples/stator-alerts.yml` and `promtool check config
//!   examples/prometheus.yml` pass;
//! - `examples/grafana-dashboard.json` has the structure of a Grafana dashboard (unique panel
//!   ids, grid positions inside 24 columns without overlap, every non-row panel with a
//!   Prometheus datasource and targets with a PromQL `expr` and unique `refId`s, the
//!   `datasource`, `node`, `vip` and `listener` variables; the proxy tier's panels);
//! - the `/metrics` of two running nodes pass `promtool check metrics`, and every `stator_*`
//!   metric the alerts and the dashboard use is a family one of them declares: a forwarding
//!   node (over the stator-core data plane, with `[bgp]` configured so the announcer's
//!   families are there) and a proxy-only node with an HTTP `[[listener]]` on loopback in
//!   front of a local backend, one request through it, for the proxy tier's families (the
//!   AF_XDP plane's `stator_afxdp_*` need root and a real interface: the lab test checks them).
//!
//! The same names are checked for samples on the lab's nodes (real BIRD, real traffic), and
//! every expression is evaluated by a real Prometheus, in `crates/stator/tests/labs/lab_prometheus.rs`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use stator_api::client::ApiClient;
use stator_node::{Node, NodeOptions};
use stator_plane::coreplane::{CoreOptions, CorePlane, CoreState, TokioClock};
use stator_testkit::prometheus::{
    alert_exprs, dashboard_exprs, examples_dir as examples, metric_names, promtool,
};

/// The families `/metrics` declares (`# TYPE name kind`), with the sample names a summary or
/// a histogram adds.
fn declared(metrics: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for l in metrics.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            let (name, kind) = (w.next().unwrap(), w.next().unwrap());
            out.insert(name.to_owned());
            if kind == "summary" || kind == "histogram" {
                out.insert(format!("{name}_sum"));
                out.insert(format!("{name}_count"));
            }
            if kind == "histogram" {
                out.insert(format!("{name}_bucket"));
            }
        }
    }
    out
}

/// A loopback HTTP backend answering `200 ok` to each of at most `n` connections (one
/// request each), for at most 60 s.
fn backend(n: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let (start, mut served) = (Instant::now(), 0);
        while served < n && start.elapsed() < Duration::from_secs(60) {
            let Ok((mut c, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            served += 1;
            c.set_nonblocking(false).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let (mut head, mut buf) = (Vec::new(), [0u8; 2048]);
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => head.extend_from_slice(&buf[..k]),
                }
            }
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
            );
        }
    });
    port
}

/// One `GET /` through the listener at `port`: the status line.
fn get(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return "connection refused".into();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: mon\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or("").to_owned()
}

#[test]
fn alert_rules_and_scrape_config_pass_promtool() {
    let (ok, text) = promtool(&["check", "rules", "stator-alerts.yml"], None);
    assert!(ok, "{text}");
    println!("{text}");
    // promtool checks that the read token's file exists: the example is checked as a host
    // would have it, with the token file in place (a copy in a directory of the test's own).
    let host = stator_testkit::scratch::TempDir::new("stator-prometheus-example");
    let token = host.join("stator-read.token");
    std::fs::write(&token, "read-token\n").unwrap();
    let example = std::fs::read_to_string(examples().join("prometheus.yml")).unwrap();
    assert!(
        example.contains("credentials_file: /etc/prometheus/stator-read.token"),
        "the example scrapes with the nodes' read token"
    );
    std::fs::write(
        host.join("prometheus.yml"),
        example.replace("/etc/prometheus/stator-read.token", token.to_str().unwrap()),
    )
    .unwrap();
    std::fs::copy(
        examples().join("stator-alerts.yml"),
        host.join("stator-alerts.yml"),
    )
    .unwrap();
    let config = host.join("prometheus.yml");
    let (ok, text) = promtool(&["check", "config", config.to_str().unwrap()], None);
    assert!(ok, "{text}");
    let alerts = std::fs::read_to_string(examples().join("stator-alerts.yml")).unwrap();
    let exprs = alert_exprs(&alerts);
    assert!(exprs.len() >= 10, "{exprs:?}");
    // The alerts docs/operations.md recommends are all there.
    for wanted in [
        "stator_forwarder_healthy == 0",
        "stator_vip_usable_backends == 0",
        "stator_passed_packets_total{reason=\"stale\"}",
        "stator_vip_announce != on(instance, job, node, vip) stator_vip_announced",
        "stator_drops_total{reason=~\"fib|no_neigh|mtu\"}",
        "increase(stator_config_reloads_total{result=\"failure\"}[1h]) > 0",
        "max by (instance, job, node, listener) (stator_proxy_backend_usable) == 0",
        "rate(stator_proxy_backend_errors_total[5m]))",
        "stator_proxy_client_errors_total{kind=\"rejected\"}",
    ] {
        assert!(exprs.iter().any(|e| e.contains(wanted)), "{wanted}");
    }
}

#[test]
fn the_dashboard_is_a_grafana_dashboard() {
    let text = std::fs::read_to_string(examples().join("grafana-dashboard.json")).unwrap();
    let d: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(d["title"], "Stator");
    assert!(
        d["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty() && u.len() <= 40)
    );
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36);
    assert!(d["time"]["from"].is_string() && d["time"]["to"].is_string());
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "node", "vip", "listener"]);
    let known = ["row", "timeseries", "stat", "state-timeline", "bargauge"];
    let mut ids = BTreeSet::new();
    let mut cells: Vec<(u64, u64, u64, u64, String)> = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap().to_owned();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        let kind = p["type"].as_str().unwrap();
        assert!(known.contains(&kind), "{title}: {kind}");
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(w >= 1 && h >= 1 && x + w <= 24, "{title}: {g}");
        for (cx, cy, cw, ch, other) in &cells {
            let apart = x + w <= *cx || cx + cw <= x || y + h <= *cy || cy + ch <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        cells.push((x, y, w, h, title.clone()));
        if kind == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["type"], "prometheus", "{title}");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        assert!(
            p["description"].as_str().is_some_and(|s| !s.is_empty()),
            "{title}"
        );
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(refs.insert(t["refId"].as_str().unwrap()), "{title}: refIds");
            let expr = t["expr"].as_str().unwrap();
            assert!(
                !metric_names(expr).is_empty() || expr.starts_with("count(up{"),
                "{title}: {expr}"
            );
        }
    }
    let titles: String = cells.iter().map(|c| c.4.clone() + "\n").collect();
    for wanted in [
        "by VIP",
        "by backend",
        "Drops by reason",
        "Backend health",
        "BGP sessions",
        "Reloads",
        "Connections per second by listener",
        "Requests per second by listener and status class",
        "Request duration p50 and p99",
        "Upstream errors by kind",
        "Listener backends usable",
        "Retries and persistence",
        "AF_XDP packets per second by thread",
        "AF_XDP kernel ring drops",
    ] {
        assert!(titles.contains(wanted), "a panel about {wanted}:\n{titles}");
    }
}

/// Starts a node on `text` (over `plane`, or none), sends one request through the listener
/// on `web` if given (until it answers 200, bounded), and returns its `/metrics`, which
/// `promtool check metrics` must accept.
fn live_metrics(text: String, plane: Option<CorePlane>, web: Option<u16>) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let node = rt
        .block_on(Node::start(
            text,
            "mon.toml".into(),
            NodeOptions {
                plane: plane.map(|p| Box::new(p) as _),
                no_attach: true,
                no_preflight: true,
                socket: Some(stator_testkit::scratch::unique_path("stator-api", ".sock")),
                ..NodeOptions::default()
            },
        ))
        .unwrap();
    let socket = node.api_socket().to_owned();
    let metrics = std::thread::spawn(move || {
        if let Some(web) = web {
            // The listener starts once the node has applied its first view: a few tries.
            let mut status = String::new();
            for _ in 0..50 {
                status = get(web);
                if status.starts_with("HTTP/1.1 200") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(
                status.starts_with("HTTP/1.1 200"),
                "through the listener: {status}"
            );
        }
        let client = ApiClient::unix(socket);
        client.request("GET", "/metrics", &[], &[]).unwrap().text()
    })
    .join()
    .unwrap();
    rt.block_on(node.shutdown()).ok();
    let (ok, out) = promtool(&["check", "metrics"], Some(&metrics));
    assert!(ok, "promtool check metrics:\n{out}");
    println!(
        "promtool check metrics: {}",
        if out.trim().is_empty() {
            "no complaint"
        } else {
            out.trim()
        }
    );
    metrics
}

#[test]
fn live_metrics_pass_promtool_and_declare_every_name_the_examples_use() {
    // A forwarding node: stator-core's data plane, BGP, a VIP.
    let text = "[node]\nname = \"mon\"\naddress_v4 = \"10.9.0.1\"\n[dataplane]\ninterfaces = [\"d0\"]\n\
                conntrack = \"shared\"\nconntrack_entries = 4096\nslots_per_generation = 4096\n\
                [bgp]\nbird_socket = \"/nonexistent/bird.ctl\"\nbird_config = \"/nonexistent/stator.conf\"\n\
                local_as = 65010\n[[bgp.neighbor]]\nname = \"tor\"\naddress = \"10.9.0.254\"\nremote_as = 65000\n\
                [[pool]]\nname = \"web\"\n[pool.health]\nmethod = \"none\"\n\
                [[pool.backend]]\nid = \"a\"\naddress = \"10.9.1.1\"\n\
                [[vip]]\nname = \"www\"\naddress = \"192.0.2.80\"\nport = 80\nprotocol = \"tcp\"\n\
                pools = [\"web\"]\ntable_size = 251\n";
    let state = CoreState::new(CoreOptions::default(), Arc::new(TokioClock::new()));
    let mut metrics = live_metrics(text.to_owned(), Some(CorePlane::new(state)), None);
    // A proxy-only node (a forwarding node refuses loopback backends): an HTTP listener on
    // loopback in front of a local backend, one request through it.
    let up = backend(64);
    let web = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "[node]\nname = \"mon-proxy\"\n[dataplane]\nmode = \"none\"\n\
         [[pool]]\nname = \"local\"\n[pool.health]\nmethod = \"none\"\n\
         [[pool.backend]]\nid = \"l1\"\naddress = \"127.0.0.1\"\nport = {up}\n\
         [[listener]]\nname = \"mon-web\"\naddress = \"127.0.0.1:{web}\"\nprotocol = \"http\"\n\
         pool = \"local\"\nworkers = 1\n"
    );
    let proxy = live_metrics(text, None, Some(web));
    assert!(proxy.contains("stator_proxy_requests_total{listener=\"mon-web\"} 1"));
    metrics += &proxy;

    let have = declared(&metrics);
    let alerts = std::fs::read_to_string(examples().join("stator-alerts.yml")).unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(examples().join("grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut used = BTreeSet::new();
    let dashboard = dashboard_exprs(&dashboard).into_iter().map(|(_, e)| e);
    for e in alert_exprs(&alerts).into_iter().chain(dashboard) {
        used.extend(metric_names(&e));
    }
    println!(
        "{} metric names used by the alerts and the dashboard",
        used.len()
    );
    // The AF_XDP plane's families exist only on a node running it (root, a real interface):
    // the lab test (crates/stator/tests/labs/lab_prometheus.rs) finds their samples on its AF_XDP
    // node; here they are only checked to be the plane's names.
    let afxdp: BTreeSet<&String> = used
        .iter()
        .filter(|n| n.starts_with("stator_afxdp_"))
        .collect();
    for n in &afxdp {
        assert!(
            [
                "stator_afxdp_xsk_total",
                "stator_afxdp_io_total",
                "stator_afxdp_thread_total"
            ]
            .contains(&n.as_str()),
            "{n}"
        );
    }
    let missing: Vec<&String> = used
        .iter()
        .filter(|n| !have.contains(*n) && !afxdp.contains(n))
        .collect();
    assert!(missing.is_empty(), "not in /metrics: {missing:?}");
    assert!(used.len() >= 25, "{used:?}");
}
