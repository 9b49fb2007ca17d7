//! Prometheus for real: a lab deployment (`stator_lab::deploy`, 3 nodes with BIRD, BFD and
//! XDP — the last node on the AF_XDP plane — 4 backends, an HTTP listener on each node) with Debian's `prometheus` in the router's
//! namespace scraping every node's `/metrics` each second and evaluating
//! `examples/stator-alerts.yml`. Under HTTP and UDP traffic from the client to the VIPs, and
//! HTTP traffic through node 0's listener:
//! - Prometheus's HTTP API gives per-node, per-backend packet rates (every node, every IPv4
//!   backend, all above zero), node 0's listener's 2xx responses per second and requests per
//!   backend (every IPv4 backend above zero), and every target is up;
//! - the `/metrics` of node 0 (XDP, its listener carrying traffic) and node 2 (AF_XDP) pass
//!   `promtool check metrics`, and every `stator_*` metric the alerts and the Grafana
//!   dashboard use has samples on one of them;
//! - every expression of the dashboard (its variables set to match everything) is accepted by
//!   Prometheus, and every alerting rule is evaluated without error; no alert fires in a
//!   healthy lab.
//!
//! Needs root, BIRD, XDP and prometheus (`make test-deps`).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use crate::common::peer_xdp;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use stator_lab::deploy::{DeploySpec, Deployment, HTTP_PORT, LISTENER_PORT, UDP_PORT};
use stator_lab::netns::is_root;
use stator_lab::traffic::{http_batch, udp_batch};
use stator_testkit::prometheus::{
    self, ExprSource, examples_dir as examples, metric_names, promtool,
};

/// (panel title, expression) of every dashboard target and annotation (the variables' queries
/// are Grafana's, not PromQL).
fn dashboard_exprs() -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(examples().join("grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    prometheus::dashboard_exprs(&d)
        .into_iter()
        .filter_map(|(source, e)| match source {
            ExprSource::Panel(title) => Some((title, e)),
            ExprSource::Annotation => Some(("annotation".into(), e)),
            ExprSource::Variable => None,
        })
        .collect()
}

fn alert_exprs() -> Vec<String> {
    prometheus::alert_exprs(&std::fs::read_to_string(examples().join("stator-alerts.yml")).unwrap())
}

/// Grafana's variables, set to match everything.
fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5s")
        .replace("$node", ".*")
        .replace("$vip", ".*")
        .replace("$listener", ".*")
}

fn query(d: &Deployment, promql: &str) -> Value {
    let p = d.prometheus().expect("the lab runs Prometheus");
    let body = p.query(promql).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["status"], "success", "{promql}: {v}");
    v
}

fn rows(v: &Value) -> Vec<(Value, f64)> {
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["metric"].clone(),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn prometheus_scrapes_every_node_and_the_examples_hold() {
    assert!(
        is_root(),
        "this test builds a lab deployment (namespaces, BIRD, XDP): run it as root"
    );
    let prefix = format!("lpm{}-", std::process::id() % 100_000);
    let dir =
        PathBuf::from("/run/stator-lab").join(format!("test-{}", prefix.trim_end_matches('-')));
    let mut spec = DeploySpec::new(&prefix, 61, &dir, Path::new(env!("CARGO_BIN_EXE_stator")));
    spec.prometheus = true;
    spec.bfd_nodes = vec![0, 1, 2];
    spec.afxdp_nodes = 1;
    let t = Instant::now();
    let d = Deployment::up(&spec, &peer_xdp).unwrap_or_else(|e| panic!("lab up: {e}"));
    println!(
        "deployment with Prometheus up in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    // Traffic for about 8 s, bounded in count and time.
    let client = d.client().ns.clone();
    let srcs = d.client().addrs(false);
    let vip = Deployment::vip(false);
    let listener = SocketAddr::new(IpAddr::V4(d.lab().lbs[0].v4[0]), LISTENER_PORT);
    let started = Instant::now();
    let (mut http, mut udp, mut proxied) = (0, 0, 0);
    while started.elapsed() < Duration::from_secs(8) {
        let h = http_batch(
            &client,
            &srcs,
            SocketAddr::new(vip, HTTP_PORT),
            64,
            8,
            Duration::from_secs(10),
        )
        .unwrap();
        let u = udp_batch(
            &client,
            &srcs,
            SocketAddr::new(vip, UDP_PORT),
            64,
            4,
            Duration::from_secs(10),
        )
        .unwrap();
        let p = http_batch(&client, &srcs, listener, 32, 4, Duration::from_secs(10)).unwrap();
        assert_eq!(
            (h.failed, u.failed, p.failed),
            (0, 0, 0),
            "{:?}",
            p.first_error
        );
        http += h.answered();
        udp += u.answered();
        proxied += p.answered();
    }
    println!(
        "traffic: {http} HTTP requests, {udp} UDP requests answered; {proxied} HTTP requests \
         through n0's listener {listener}"
    );

    // Every target up; per-node, per-backend rates.
    let (_, targets) = d.prometheus().unwrap().get("/api/v1/targets").unwrap();
    let targets: Value = serde_json::from_str(&targets).unwrap();
    let active = targets["data"]["activeTargets"].as_array().unwrap();
    assert_eq!(active.len(), 3, "{targets}");
    for t in active {
        assert_eq!(t["health"], "up", "{t}");
    }
    let rates = rows(&query(
        &d,
        "sum by (node, backend) (rate(stator_backend_packets_total{backend=~\".*-v4\"}[5s]))",
    ));
    let mut table: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (m, v) in &rates {
        table.insert(
            (
                m["node"].as_str().unwrap().to_owned(),
                m["backend"].as_str().unwrap().to_owned(),
            ),
            *v,
        );
    }
    println!("packets/s per node and backend, from Prometheus:");
    for ((node, backend), v) in &table {
        println!("  {node} {backend}: {v:.1}");
    }
    for j in 0..3 {
        for k in 0..4 {
            let v = table
                .get(&(format!("n{j}"), format!("b{k}-v4")))
                .copied()
                .unwrap_or(0.0);
            assert!(v > 0.0, "n{j} -> b{k}-v4: {v} ({table:?})");
        }
    }
    let per_node = rows(&query(
        &d,
        "sum by (node) (rate(stator_packets_total{action=~\"tx|redirect\"}[5s]))",
    ));
    println!("forwarded packets/s per node: {per_node:?}");
    assert_eq!(per_node.len(), 3);

    // The proxy tier: node 0's listener answered, and spread its requests over the backends.
    let ok = rows(&query(
        &d,
        "sum by (node) (rate(stator_proxy_responses_total{listener=\"web4\", code=\"2xx\"}[5s]))",
    ));
    println!("listener web4, 2xx responses/s per node: {ok:?}");
    let n0 = ok
        .iter()
        .find(|(m, _)| m["node"] == "n0")
        .map_or(0.0, |(_, v)| *v);
    assert!(n0 > 0.0, "{ok:?}");
    let per_backend = rows(&query(
        &d,
        "sum by (backend) (rate(stator_proxy_backend_requests_total{node=\"n0\", listener=\"web4\"}[5s]))",
    ));
    println!("listener web4 of n0, requests/s per backend: {per_backend:?}");
    for k in 0..4 {
        let v = per_backend
            .iter()
            .find(|(m, _)| m["backend"] == format!("b{k}-v4").as_str())
            .map_or(0.0, |(_, v)| *v);
        assert!(v > 0.0, "b{k}-v4: {per_backend:?}");
    }

    // A node's /metrics: promtool accepts it; every name the examples use has samples.
    let mut sampled: BTreeSet<String> = BTreeSet::new();
    for j in [0, 2] {
        let metrics = d.api(j, "GET", "/metrics").unwrap();
        assert_eq!(metrics.status, 200);
        let (ok, out) = promtool(&["check", "metrics"], Some(&metrics.body));
        assert!(ok, "n{j}: promtool check metrics:\n{out}");
        sampled.extend(
            metrics
                .body
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .map(|l| l.split(['{', ' ']).next().unwrap().to_owned()),
        );
    }
    let dashboard = dashboard_exprs();
    let alerts = alert_exprs();
    let mut used = BTreeSet::new();
    for e in dashboard.iter().map(|(_, e)| e).chain(&alerts) {
        used.extend(metric_names(e));
    }
    let missing: Vec<&String> = used.iter().filter(|n| !sampled.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "no samples in n0's or n2's /metrics: {missing:?}"
    );
    println!(
        "{} metric names of the alerts and the dashboard all have samples",
        used.len()
    );

    // Every dashboard expression runs; those about traffic, health and BGP return series.
    let mut empty = Vec::new();
    for (title, e) in &dashboard {
        let v = query(&d, &grafana_to_promql(e));
        if rows(&v).is_empty() {
            empty.push(format!("{title}: {e}"));
        }
    }
    println!(
        "{} dashboard expressions evaluated; empty now (a healthy lab has nothing to show): {empty:#?}",
        dashboard.len()
    );
    for (title, e) in &dashboard {
        if [
            "by VIP",
            "by backend",
            "by node",
            "BGP sessions",
            "Backend health",
            "Configuration generation",
            "by listener",
            "Listener backends usable",
            "AF_XDP packets per second by thread",
        ]
        .iter()
        .any(|w| title.contains(w))
        {
            assert!(
                !rows(&query(&d, &grafana_to_promql(e))).is_empty(),
                "{title}: {e}"
            );
        }
    }

    // The alerting rules were loaded and evaluate without error; nothing fires.
    let (_, rules) = d.prometheus().unwrap().get("/api/v1/rules").unwrap();
    let rules: Value = serde_json::from_str(&rules).unwrap();
    let loaded: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(loaded.len(), alerts.len(), "{rules}");
    for r in &loaded {
        assert_eq!(r["health"], "ok", "{r}");
        assert_eq!(r["state"], "inactive", "{r}");
    }
    println!("{} alerting rules evaluated, none firing", loaded.len());
    let firing = rows(&query(&d, "ALERTS"));
    assert!(firing.is_empty(), "{firing:?}");
    drop(d);
    assert!(!dir.exists(), "the lab's state directory is gone");
}
