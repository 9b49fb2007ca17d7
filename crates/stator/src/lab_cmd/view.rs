//! What `stator lab status` prints and the demo redraws every second: per node, whether the
//! router routes the VIPs to it, its phase, its connection-table entries and packets; per
//! backend, its health (as the nodes see it) and what its servers answered.
//!
//! Everything is read from outside — the router's kernel table, each node's admin API, the
//! backends' counters files, the lab's Prometheus when it runs one — so it works for a lab
//! another process brought up.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::Value;
use stator_lab::deploy::{self, Deployment, LabState, NODE_API, Served, read_served, served_path};
use stator_lab::prometheus;
use stator_lab::stator::api_request;

/// One node's row.
#[derive(Debug, Clone, Default)]
pub struct NodeRow {
    /// The router routes the IPv4 VIP to it.
    pub routed_v4: bool,
    /// The router routes the IPv6 VIP to it.
    pub routed_v6: bool,
    /// `stator run`'s phase, `down` when its API does not answer.
    pub phase: String,
    /// VIPs it announces.
    pub announced: usize,
    /// Connection-table entries of its VIPs (not idle).
    pub conns: u64,
    /// Packets that matched its VIPs.
    pub packets: u64,
}

/// One backend's row.
#[derive(Debug, Clone, Default)]
pub struct BackendRow {
    /// Health as the first answering node sees it.
    pub health: String,
    /// What its servers answered.
    pub served: Served,
}

/// Everything on one screen.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// Nodes.
    pub nodes: Vec<NodeRow>,
    /// Backends.
    pub backends: Vec<BackendRow>,
}

fn json(dir: &Path, j: usize, path: &str) -> Option<Value> {
    let a = api_request(&deploy::node_socket(dir, j), "GET", path).ok()?;
    (a.status == 200)
        .then(|| serde_json::from_str(&a.body).ok())
        .flatten()
}

/// Reads the lab once.
pub fn sample(state: &LabState, dir: &Path) -> Sample {
    let (r4, r6) = (state.routed_nodes(false), state.routed_nodes(true));
    let mut health: Vec<Option<String>> = vec![None; state.backends];
    let mut nodes = Vec::new();
    for j in 0..state.nodes {
        let mut row = NodeRow {
            routed_v4: r4.contains(&j),
            routed_v6: r6.contains(&j),
            phase: "down".into(),
            ..NodeRow::default()
        };
        if let Some(st) = json(dir, j, "/v1/status") {
            row.phase = st["phase"].as_str().unwrap_or("?").to_owned();
            row.announced = st["bgp"]["announced"].as_array().map_or(0, Vec::len);
        }
        if let Some(v) = json(dir, j, "/v1/vips") {
            row.packets = v["vips"].as_array().map_or(0, |vips| {
                vips.iter()
                    .map(|x| x["traffic"]["packets"].as_u64().unwrap_or(0))
                    .sum()
            });
        }
        if let Some(b) = json(dir, j, "/v1/backends") {
            for be in b["backends"].as_array().into_iter().flatten() {
                let conns: u64 = be["vips"].as_array().map_or(0, |v| {
                    v.iter()
                        .map(|x| x["connections"].as_u64().unwrap_or(0))
                        .sum()
                });
                row.conns += conns;
                let id = be["id"].as_str().unwrap_or("");
                if let Some(k) = id
                    .strip_prefix('b')
                    .and_then(|r| r.strip_suffix("-v4"))
                    .and_then(|k| k.parse::<usize>().ok())
                    && k < health.len()
                    && health[k].is_none()
                {
                    health[k] = be["health"].as_str().map(str::to_owned);
                }
            }
        }
        nodes.push(row);
    }
    let backends = (0..state.backends)
        .map(|k| BackendRow {
            health: health[k].clone().unwrap_or_else(|| "unlisted".into()),
            served: read_served(&served_path(dir, k)),
        })
        .collect();
    Sample {
        at: Instant::now(),
        nodes,
        backends,
    }
}

/// Per-second rate of a counter between two samples.
fn rate(now: u64, before: Option<u64>, secs: f64) -> String {
    match before {
        Some(b) if secs > 0.0 => format!("{:.0}", now.saturating_sub(b) as f64 / secs),
        _ => "-".into(),
    }
}

/// The table: nodes, then backends; rates against `prev` when given. `long_lived[k]` adds a
/// column of the demo's long-lived connections per backend.
pub fn render(prev: Option<&Sample>, cur: &Sample, long_lived: Option<&[usize]>) -> String {
    let secs = prev.map_or(0.0, |p| cur.at.duration_since(p.at).as_secs_f64());
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  node  routed v4/v6  phase     announced  conntrack  packets/s"
    );
    for (j, n) in cur.nodes.iter().enumerate() {
        let before = prev.and_then(|p| p.nodes.get(j)).map(|p| p.packets);
        let yn = |b: bool| if b { "yes" } else { "no" };
        let _ = writeln!(
            s,
            "  l{j:<3} {:>6}/{:<6} {:<9} {:>9}  {:>9}  {:>9}",
            yn(n.routed_v4),
            yn(n.routed_v6),
            n.phase,
            n.announced,
            n.conns,
            rate(n.packets, before, secs),
        );
    }
    let _ = writeln!(
        s,
        "  backend  health    http/s  echo/s  udp/s  answers{}",
        if long_lived.is_some() {
            "  long-lived"
        } else {
            ""
        }
    );
    for (k, b) in cur.backends.iter().enumerate() {
        let p = prev.and_then(|p| p.backends.get(k)).map(|p| p.served);
        let total = b.served.http + b.served.echo + b.served.udp;
        let _ = write!(
            s,
            "  b{k:<7} {:<9} {:>6}  {:>6}  {:>5}  {:>7}",
            b.health,
            rate(b.served.http, p.map(|x| x.http), secs),
            rate(b.served.echo, p.map(|x| x.echo), secs),
            rate(b.served.udp, p.map(|x| x.udp), secs),
            total,
        );
        if let Some(ll) = long_lived {
            let _ = write!(s, "  {:>10}", ll.get(k).copied().unwrap_or(0));
        }
        s.push('\n');
    }
    s
}

/// The rows of a Prometheus instant-vector answer: (labels, value).
fn prom_rows(state: &LabState, promql: &str) -> Option<Vec<(Value, f64)>> {
    let path = format!("/api/v1/query?query={}", prometheus::encode(promql));
    let (status, body) = prometheus::get(&state.router_ns(), &path).ok()?;
    let v: Value = serde_json::from_str(&body).ok()?;
    if status != 200 || v["status"] != "success" {
        return None;
    }
    Some(
        v["data"]["result"]
            .as_array()?
            .iter()
            .map(|r| {
                let value = r["value"][1]
                    .as_str()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(f64::NAN);
                (r["metric"].clone(), value)
            })
            .collect(),
    )
}

/// What the lab's Prometheus says: packets per second per node and per backend over the last
/// 10 s, and the alerts firing. Empty when the lab runs no Prometheus.
pub fn prometheus_summary(state: &LabState) -> String {
    let mut s = String::new();
    let Some(by_node_backend) = prom_rows(
        state,
        "sum by (node, backend) (rate(stator_backend_packets_total[10s]))",
    ) else {
        return "  Prometheus does not answer\n".into();
    };
    let label = |m: &Value, k: &str| m[k].as_str().unwrap_or("?").to_owned();
    let mut backends: Vec<String> = by_node_backend
        .iter()
        .map(|(m, _)| label(m, "backend"))
        .collect();
    backends.sort();
    backends.dedup();
    let mut nodes: Vec<String> = by_node_backend
        .iter()
        .map(|(m, _)| label(m, "node"))
        .collect();
    nodes.sort();
    nodes.dedup();
    let _ = write!(s, "  packets/s  ");
    for b in &backends {
        let _ = write!(s, "{b:>8}");
    }
    s.push('\n');
    for n in &nodes {
        let _ = write!(s, "  {n:<10} ");
        for b in &backends {
            let v = by_node_backend
                .iter()
                .find(|(m, _)| label(m, "node") == *n && label(m, "backend") == *b)
                .map_or(0.0, |x| x.1);
            let _ = write!(s, "{v:>8.0}");
        }
        s.push('\n');
    }
    let firing = prom_rows(state, "ALERTS{alertstate=\"firing\"}").unwrap_or_default();
    if firing.is_empty() {
        let _ = writeln!(s, "  alerts firing: none");
    } else {
        for (m, _) in firing {
            let _ = writeln!(
                s,
                "  alert firing: {} {}",
                label(&m, "alertname"),
                ["node", "vip", "backend", "neighbor"]
                    .iter()
                    .filter_map(|k| m[*k].as_str().map(|v| format!("{k}={v}")))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    s
}

fn runs_prometheus(dir: &Path) -> bool {
    dir.join("prometheus.pid").exists()
}

/// `stator lab status`.
pub fn status(prefix: &str, dir: &Path) -> Result<()> {
    let Some(state) = deploy::read_state(dir) else {
        bail!(
            "no lab with prefix {prefix} is up (no state in {}); start one with `stator lab up`",
            dir.display()
        );
    };
    let s = sample(&state, dir);
    println!(
        "lab {} ({} nodes, {} backends), state in {}",
        state.prefix,
        state.nodes,
        state.backends,
        dir.display()
    );
    print!("{}", render(None, &s, None));
    if runs_prometheus(dir) {
        println!("Prometheus (router namespace, {}):", prometheus::LISTEN);
        print!("{}", prometheus_summary(&state));
    }
    Ok(())
}

/// What to type next, after `up`.
pub fn print_guide(d: &Deployment) {
    let p = &d.spec().prefix;
    println!(
        "  VIPs {} and {}: HTTP on port {}, TCP echo on {}, UDP echo on {}",
        deploy::VIP_V4,
        deploy::VIP_V6,
        deploy::HTTP_PORT,
        deploy::ECHO_PORT,
        deploy::UDP_PORT
    );
    println!(
        "  try:  ip netns exec {p}c0 curl -s http://{}/",
        deploy::VIP_V4
    );
    let dir = d.spec().dir.display();
    println!(
        "        stator status --socket {}      (node n0's admin API)",
        deploy::node_socket(&d.spec().dir, 0).display()
    );
    println!(
        "        ip netns exec {p}r ip route show {}",
        deploy::VIP_V4
    );
    println!(
        "        nsenter --net=/run/netns/{p}l0 curl -s -H \"Authorization: Bearer $(cat \
         {dir}/{})\" http://127.0.0.1:{}/v1/status   (its TCP endpoint; the status page is \
         http://127.0.0.1:{}/#token=… there)",
        deploy::READ_TOKEN_FILE,
        NODE_API.port(),
        NODE_API.port()
    );
    if d.prometheus().is_some() {
        println!(
            "        nsenter --net=/run/netns/{p}r curl -s 'http://{}/api/v1/query?query=up'",
            prometheus::LISTEN
        );
    }
    println!("        stator lab status --prefix {p}");
    println!("        stator lab down --prefix {p}");
}
