//! Reloads of `stator run` while long-lived TCP connections go through its XDP forwarder
//! (needs root): "established connections to backends still present survive a reload".
//!
//! The DSR lab (`stator_lab::topo`): one client namespace with 8 source addresses → router →
//! one LB node running `stator run` (XDP on its uplink, one-armed with XDP_TX, no BGP: the
//! VIP is routed to it statically) → router → 4 backends, each with `stator decap`, the VIP on
//! `lo` and an echo server (`Server::tcp_echo`: every line answered with the backend's name)
//! on the VIP and on its own address (the TCP health check).
//!
//! The node starts with backends b0–b2. The client opens [`CONNS`] connections through the VIP
//! and records which backend answers each. Then, with every connection kept open and each
//! exchanging one more line after every step:
//! 1. SIGHUP after rewriting the file with other weights;
//! 2. `PUT /v1/config` with `If-Match` adding b3 — new connections then reach b3 (and join
//!    the tracked set);
//! 3. `stator apply FILE` with another Maglev table size;
//! 4. refused changes: an invalid config by `PUT` (400 naming the field) and a stale
//!    `If-Match` (412) — nothing changes;
//! 5. `stator apply FILE --if-match` removing b1.
//!
//! After 1–4 every connection must still be open and answered by the same backend; after 5,
//! every connection to b0, b2 and b3 (those to b1 are counted, not asserted). Every applied
//! reload is exactly one commit: its config generation is the previous snapshot generation
//! plus one (health changes make snapshot generations of their own in between, see
//! docs/api.md); a refused one changes no generation. So that survival proves something,
//! the steps that move Maglev slots (1 and 3) must leave connections that Maglev alone would
//! now send elsewhere (`GET /v1/trace?syn=true`): only the connection table keeps those.
//! Figures are printed (`--nocapture`): survived/total per step, how many were kept by the
//! connection table, and how long each reload took to show in `GET /v1/status`.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use crate::common::{EchoLab, output_text, stator_in};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use stator_lab::netns::{is_root, list};
use stator_lab::serve::tcp_connect;
use stator_lab::stator::{BpfFs, StatorRun};
use stator_lab::topo::{DsrLab, DsrSpec};
use stator_lab::wait::wait_for;

const NET: u8 = 76;
const VIP: &str = "192.0.2.76";
/// Long-lived connections opened at the start.
const CONNS: usize = 240;
/// Connections opened after b3 joins (also kept open).
const NEW_CONNS: usize = 84;
/// Deadline of one round of connects or of line exchanges.
const ROUND: Duration = Duration::from_secs(10);
const SOON: Duration = Duration::from_secs(10);

/// What changes between the configurations of the test.
struct Shape {
    /// Backend index and weight.
    backends: Vec<(usize, u16)>,
    table_size: u32,
}

fn config(lab: &DsrLab, dir: &Path, pins: &Path, shape: &Shape) -> String {
    let mut backends = String::new();
    for &(k, weight) in &shape.backends {
        backends.push_str(&format!(
            "[[pool.backend]]\naddress = \"{}\"\nport = 80\nid = \"b{k}\"\nweight = {weight}\n",
            lab.backends[k].addr(false)
        ));
    }
    format!(
        r#"
[node]
name = "l0"
address_v4 = "{node}"

[dataplane]
interfaces = ["eth0"]
pin_path = "{pins}"
conntrack = "shared"
conntrack_entries = 16384
slots_per_generation = 65536

[api]
socket = "{socket}"

[[pool]]
name = "web"
[pool.health]
interval = "200ms"
timeout = "100ms"
rise = 1
fall = 2

{backends}
[[vip]]
name = "www"
address = "{VIP}"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = {table}
"#,
        node = lab.lbs[0].addr(false),
        pins = pins.display(),
        socket = dir.join("api.sock").display(),
        table = shape.table_size,
    )
}

/// One long-lived connection through the VIP and the backend that answered it first.
struct Conn {
    id: usize,
    src: IpAddr,
    sport: u16,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    backend: String,
}

/// Opens `n` connections from the client's addresses in turn (ids from `first`), inside the
/// client's namespace; the backends are learnt by the first [`exchange`].
fn open(lab: &DsrLab, first: usize, n: usize) -> Vec<Conn> {
    let srcs = lab.clients[0].addrs(false);
    let vip = SocketAddr::new(VIP.parse().unwrap(), 80);
    let started = Instant::now();
    let conns: Vec<Conn> = lab.clients[0]
        .ns
        .run_in(move || {
            (first..first + n)
                .map(|id| {
                    let src = srcs[id % srcs.len()];
                    let s = tcp_connect(Some(src), vip, Duration::from_secs(3))
                        .unwrap_or_else(|e| panic!("connection {id} from {src}: {e}"));
                    Conn {
                        id,
                        src,
                        sport: s.local_addr().unwrap().port(),
                        reader: BufReader::new(s.try_clone().unwrap()),
                        writer: s,
                        backend: String::new(),
                    }
                })
                .collect()
        })
        .unwrap();
    println!("opened {n} connections in {:?}", started.elapsed());
    conns
}

/// Sends one line on every connection, then reads every answer before one shared deadline
/// (so a round is bounded however many connections fail). Each result is the answering
/// backend's name, or what went wrong.
fn exchange(conns: &mut [Conn], step: &str) -> Vec<Result<String, String>> {
    let deadline = Instant::now() + ROUND;
    let sent: Vec<Result<(), String>> = conns
        .iter_mut()
        .map(|c| {
            c.writer
                .write_all(format!("c{} {step}\n", c.id).as_bytes())
                .map_err(|e| format!("send: {e}"))
        })
        .collect();
    conns
        .iter_mut()
        .zip(sent)
        .map(|(c, sent)| {
            sent?;
            let left = deadline.saturating_duration_since(Instant::now());
            c.writer
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| e.to_string())?;
            let mut line = String::new();
            match c.reader.read_line(&mut line) {
                Ok(0) => return Err("closed by the peer".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("receive: {e}")),
            }
            let (backend, echoed) = line
                .trim_end()
                .split_once(' ')
                .ok_or_else(|| format!("answer {line:?}"))?;
            if echoed != format!("c{} {step}", c.id) {
                return Err(format!("answer {line:?} to another line"));
            }
            Ok(backend.to_string())
        })
        .collect()
}

/// How many connections per backend.
fn spread<'a>(backends: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for b in backends {
        *m.entry(b.to_string()).or_insert(0) += 1;
    }
    m
}

/// Exchanges a line on every connection after `step`; every connection whose backend is not
/// in `gone` must be answered by the backend it had. Returns (survived, total, lost to `gone`).
fn check_survival(conns: &mut [Conn], step: &str, gone: &[&str]) -> (usize, usize, usize) {
    let results = exchange(conns, step);
    let (mut survived, mut total, mut lost) = (0, 0, 0);
    let mut failures = Vec::new();
    for (c, r) in conns.iter().zip(&results) {
        let expected_to_survive = !gone.contains(&c.backend.as_str());
        match r {
            Ok(b) if *b == c.backend => {
                if expected_to_survive {
                    survived += 1;
                    total += 1;
                }
            }
            other => {
                if expected_to_survive {
                    total += 1;
                    failures.push(format!(
                        "connection {} from {} (backend {}): {other:?}",
                        c.id, c.src, c.backend
                    ));
                } else {
                    lost += 1;
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{step}: {} of {total} connections did not survive; first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    (survived, total, lost)
}

/// How many of `conns` (those not on a backend in `gone`) Maglev alone would now send to
/// another backend than the one they have (`GET /v1/trace` with `syn=true`): the connections
/// that only the connection table keeps where they are.
fn moved(run: &StatorRun, conns: &[Conn], gone: &[&str]) -> usize {
    conns
        .iter()
        .filter(|c| !gone.contains(&c.backend.as_str()))
        .filter(|c| {
            let q = format!("/v1/trace?vip=www&src={}&sport={}&syn=true", c.src, c.sport);
            let a = run.api("GET", &q).unwrap();
            assert_eq!(a.status, 200, "{q}: {}", a.body);
            let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(v["decision"], "maglev", "{q}: {v}");
            v.pointer("/backend/id").and_then(serde_json::Value::as_str) != Some(c.backend.as_str())
        })
        .count()
}

/// The generations and reload counters in `GET /v1/status`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Gens {
    config: u64,
    snapshot: u64,
    reloads_ok: u64,
    reloads_failed: u64,
    /// The node's own measure of its last applied reload (request to commit), seconds.
    last_reload: f64,
}

fn gens(run: &StatorRun) -> Gens {
    let a = run.api("GET", "/v1/status").unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    let n = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| panic!("{p} in {v}"))
    };
    Gens {
        config: n("/config/generation"),
        snapshot: n("/snapshot/generation"),
        reloads_ok: n("/config/reloads_ok"),
        reloads_failed: n("/config/reloads_failed"),
        last_reload: v
            .pointer("/snapshot/last_reload_seconds")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN),
    }
}

/// Waits until `GET /v1/status` shows a config generation other than `before`'s; checks that
/// the reload was one commit and counted once. Returns the new generations and the time from
/// `since` (when the reload was asked for).
fn visible(run: &StatorRun, before: Gens, since: Instant, what: &str) -> (Gens, Duration) {
    let (now, _) = wait_for(
        &format!("{what} to show in /v1/status"),
        SOON,
        Duration::from_millis(2),
        || Some(gens(run)).filter(|g| g.config != before.config),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", run.log_tail(20)));
    let took = since.elapsed();
    assert_eq!(
        now.config,
        before.snapshot + 1,
        "{what}: one commit, the next generation ({before:?} -> {now:?})"
    );
    assert_eq!(now.reloads_ok, before.reloads_ok + 1, "{what}: {now:?}");
    assert_eq!(now.reloads_failed, before.reloads_failed, "{what}: {now:?}");
    (now, took)
}

/// The `www` VIP's entry of `GET /v1/vips`.
fn vip(run: &StatorRun) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&run.api("GET", "/v1/vips").unwrap().body).unwrap();
    v["vips"][0].clone()
}

/// Each backend's weight for `www` in `GET /v1/backends`.
fn weights(run: &StatorRun) -> BTreeMap<String, u64> {
    let v: serde_json::Value =
        serde_json::from_str(&run.api("GET", "/v1/backends").unwrap().body).unwrap();
    v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["id"].as_str().unwrap().to_string(),
                b["vips"][0]["weight"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn put_config(run: &StatorRun, body: &str, if_match: Option<u64>) -> (u16, serde_json::Value) {
    let tag = if_match.map(|g| format!("\"{g}\""));
    let mut headers = vec![("Content-Type", "application/toml")];
    if let Some(t) = &tag {
        headers.push(("If-Match", t.as_str()));
    }
    let a = run.request("PUT", "/v1/config", &headers, body).unwrap();
    (a.status, serde_json::from_str(&a.body).unwrap())
}

/// One step's figures.
struct Figure {
    what: &'static str,
    survived: usize,
    total: usize,
    /// Connections whose Maglev choice changed (kept by the connection table).
    moved: usize,
    /// Connections to a removed backend that broke.
    lost: usize,
    /// From the request to the new config generation in `GET /v1/status`.
    shown: Duration,
    /// The node's `last_reload_seconds`, or "-" when nothing was applied.
    node_took: String,
}

impl Figure {
    /// `applied`: the generations after an applied reload (the node's own time is shown).
    fn new(
        what: &'static str,
        (survived, total): (usize, usize),
        moved: usize,
        shown: Duration,
        applied: Option<Gens>,
    ) -> Self {
        Self {
            what,
            survived,
            total,
            moved,
            lost: 0,
            shown,
            node_took: applied
                .map_or_else(|| "-".into(), |g| format!("{:.1}ms", g.last_reload * 1e3)),
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn established_connections_survive_every_kind_of_reload() {
    assert!(
        is_root(),
        "this test builds network namespaces and runs stator run with XDP: run it as root"
    );
    let test_started = Instant::now();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_stator"));
    let tag = std::process::id() % 100_000;
    let prefix = format!("srl{tag}-");
    let dir = std::env::temp_dir().join(format!("stator-reload-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bpffs = BpfFs::mount(&dir.join("bpffs")).unwrap();
    let lb_pins = bpffs.path().join("l0");

    let mut spec = DsrSpec::new(&prefix, NET, 1, 1, 4);
    spec.addrs_per_client = 8;
    let echo = EchoLab::create(&spec, VIP.parse().unwrap(), bpffs.path());
    let lab = &echo.lab;

    let lb = &lab.lbs[0].ns;
    let shape0 = Shape {
        backends: vec![(0, 1), (1, 1), (2, 1)],
        table_size: 251,
    };
    let socket = dir.join("api.sock");
    let socket_arg = socket.to_str().unwrap().to_owned();
    let mut run = StatorRun::start(
        lb,
        &binary,
        &dir,
        "node",
        &config(lab, &dir, &lb_pins, &shape0),
        &socket,
    )
    .unwrap();
    let took = run.wait_ready(SOON).unwrap();
    let setup = test_started.elapsed();
    println!("lab built and stator run ready after {setup:?} (ready {took:?} after start)");
    assert_eq!(vip(&run)["backends"]["usable"], 3, "{}", run.log_tail(20));

    // The long-lived connections, and who answers each.
    let t0 = Instant::now();
    let mut conns = open(lab, 0, CONNS);
    let first = exchange(&mut conns, "start");
    for (c, r) in conns.iter_mut().zip(first) {
        c.backend = r.unwrap_or_else(|e| panic!("connection {} from {}: {e}", c.id, c.src));
    }
    let start_spread = spread(conns.iter().map(|c| c.backend.as_str()));
    println!(
        "{CONNS} connections open and answered in {:?}: {start_spread:?}",
        t0.elapsed()
    );
    assert_eq!(
        start_spread.keys().map(String::as_str).collect::<Vec<_>>(),
        ["b0", "b1", "b2"],
        "every configured backend and only those"
    );
    let mut g = gens(&run);
    let mut figures: Vec<Figure> = Vec::new();

    // 1. SIGHUP after rewriting the file: other weights.
    let shape1 = Shape {
        backends: vec![(0, 1), (1, 2), (2, 3)],
        table_size: 251,
    };
    std::fs::write(dir.join("node.toml"), config(lab, &dir, &lb_pins, &shape1)).unwrap();
    let t = Instant::now();
    let hup = Command::new("kill")
        .args(["-HUP", &run.pid().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let (g1, shown) = visible(&run, g, t, "the SIGHUP reload");
    assert_eq!(
        weights(&run),
        BTreeMap::from([("b0".into(), 1), ("b1".into(), 2), ("b2".into(), 3)])
    );
    let moved1 = moved(&run, &conns, &[]);
    // 1/1/1 -> 1/2/3 takes slots from b0 and b1: the connection table must be what keeps
    // those connections (otherwise this step would prove nothing)
    assert!(moved1 > 0, "no connection's Maglev choice changed");
    let (survived, total, _) = check_survival(&mut conns, "after-sighup", &[]);
    figures.push(Figure::new(
        "1 SIGHUP: weights 1/2/3",
        (survived, total),
        moved1,
        shown,
        Some(g1),
    ));
    g = g1;

    // 2. PUT /v1/config adding b3, conditional on the running generation.
    let shape2 = Shape {
        backends: vec![(0, 1), (1, 2), (2, 3), (3, 1)],
        table_size: 251,
    };
    let t = Instant::now();
    let (status, answer) = put_config(&run, &config(lab, &dir, &lb_pins, &shape2), Some(g.config));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["config_generation"], g.snapshot + 1, "{answer}");
    let (g2, shown) = visible(&run, g, t, "the PUT adding b3");
    // b3 is used once its first health probe succeeded
    let (_, usable_after) = wait_for("b3 usable", SOON, Duration::from_millis(5), || {
        (vip(&run)["backends"]["usable"] == 4).then_some(())
    })
    .unwrap();
    let moved2 = moved(&run, &conns, &[]);
    let (survived, total, _) = check_survival(&mut conns, "after-put", &[]);
    figures.push(Figure::new(
        "2 PUT /v1/config: b3 added",
        (survived, total),
        moved2,
        shown,
        Some(g2),
    ));
    let mut fresh = open(lab, CONNS, NEW_CONNS);
    let answers = exchange(&mut fresh, "new");
    for (c, r) in fresh.iter_mut().zip(answers) {
        c.backend = r.unwrap_or_else(|e| panic!("new connection {} from {}: {e}", c.id, c.src));
    }
    let new_spread = spread(fresh.iter().map(|c| c.backend.as_str()));
    println!(
        "b3 usable {usable_after:?} after the PUT showed in /v1/status; {NEW_CONNS} new \
         connections then: {new_spread:?}"
    );
    // weights 1/2/3/1: b3 should get about 1/7 of them; none at all has odds of ~2e-6
    assert!(
        new_spread.get("b3").copied().unwrap_or(0) > 0,
        "new connections reach the added backend: {new_spread:?}"
    );
    conns.extend(fresh);
    g = gens(&run);
    assert_eq!(g.config, g2.config, "a health change is not a reload");
    assert_eq!(
        g.snapshot,
        g2.snapshot + 1,
        "b3's first probe made one commit"
    );

    // 3. stator apply FILE: another table size.
    let shape3 = Shape {
        backends: shape2.backends.clone(),
        table_size: 509,
    };
    let file = dir.join("apply-509.toml");
    std::fs::write(&file, config(lab, &dir, &lb_pins, &shape3)).unwrap();
    let t = Instant::now();
    let out = stator_in(
        lb,
        &["apply", file.to_str().unwrap(), "--socket", &socket_arg],
    );
    assert!(
        out.status.success() && output_text(&out).contains("applied"),
        "{}",
        output_text(&out)
    );
    let (g3, shown) = visible(&run, g, t, "stator apply with table size 509");
    assert_eq!(vip(&run)["table_size"], 509);
    let moved3 = moved(&run, &conns, &[]);
    assert!(moved3 > 0, "a new table size moves Maglev choices");
    let (survived, total, _) = check_survival(&mut conns, "after-apply", &[]);
    figures.push(Figure::new(
        "3 stator apply: table 251 -> 509",
        (survived, total),
        moved3,
        shown,
        Some(g3),
    ));
    g = g3;

    // 4. Refused: an invalid config, and a stale If-Match. Nothing changes.
    let invalid =
        config(lab, &dir, &lb_pins, &shape3).replace("table_size = 509", "table_size = 508");
    let t = Instant::now();
    let (status, answer) = put_config(&run, &invalid, Some(g.config));
    let refused_in = t.elapsed();
    assert_eq!(status, 400, "{answer}");
    let reason = answer["error"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("vip[0].table_size: 508 is not prime"),
        "{answer}"
    );
    assert_eq!(answer["field"], "vip[0].table_size", "{answer}");
    let (stale, answer) = put_config(
        &run,
        &config(lab, &dir, &lb_pins, &shape3),
        Some(g.config - 1),
    );
    assert_eq!(stale, 412, "{answer}");
    assert_eq!(answer["generation"], g.config, "{answer}");
    let after = gens(&run);
    assert_eq!(
        after,
        Gens {
            reloads_failed: g.reloads_failed + 2,
            ..g
        },
        "refused reloads change no generation"
    );
    assert_eq!(vip(&run)["table_size"], 509);
    println!(
        "invalid config answered in {refused_in:?}: {status} {reason}; stale If-Match: {stale}"
    );
    let moved4 = moved(&run, &conns, &[]);
    let (survived, total, _) = check_survival(&mut conns, "after-refused", &[]);
    figures.push(Figure::new(
        "4 PUT invalid (400), stale If-Match (412)",
        (survived, total),
        moved4,
        refused_in,
        None,
    ));
    g = after;

    // 5. stator apply --if-match removing b1: its connections are lost, no other.
    let shape5 = Shape {
        backends: vec![(0, 1), (2, 3), (3, 1)],
        table_size: 509,
    };
    let file = dir.join("apply-no-b1.toml");
    std::fs::write(&file, config(lab, &dir, &lb_pins, &shape5)).unwrap();
    let t = Instant::now();
    let out = stator_in(
        lb,
        &[
            "apply",
            file.to_str().unwrap(),
            "--if-match",
            &g.config.to_string(),
            "--socket",
            &socket_arg,
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let (g5, shown) = visible(&run, g, t, "stator apply removing b1");
    assert_eq!(vip(&run)["backends"]["usable"], 3);
    let moved5 = moved(&run, &conns, &["b1"]);
    let (survived, total, lost) = check_survival(&mut conns, "after-removal", &["b1"]);
    let on_b1 = conns.iter().filter(|c| c.backend == "b1").count();
    let mut f = Figure::new(
        "5 stator apply --if-match: b1 removed",
        (survived, total),
        moved5,
        shown,
        Some(g5),
    );
    f.lost = lost;
    figures.push(f);

    println!(
        "{:<42} {:>10} {:>8} {:>7} {:>12} {:>10}",
        "step", "survived", "moved*", "b1 lost", "in status", "node took"
    );
    for f in &figures {
        println!(
            "{:<42} {:>10} {:>8} {:>7} {:>12} {:>10}",
            f.what,
            format!("{}/{}", f.survived, f.total),
            f.moved,
            f.lost,
            format!("{:.1?}", f.shown),
            f.node_took
        );
    }
    println!(
        "* moved: connections Maglev alone would now send to another backend, kept by the \
         connection table. In status: from the request (or the signal) to the new config \
         generation in GET /v1/status. Node took: its last_reload_seconds."
    );
    println!("connections on b1 before its removal: {on_b1}; broken after it: {lost}");
    let final_spread = spread(conns.iter().map(|c| c.backend.as_str()));
    println!("tracked connections by first backend: {final_spread:?}");

    // Leave nothing behind: SIGTERM (pins removed with on_exit = detach), the decap pins,
    // the router's program, the namespaces, the bpffs.
    drop(conns);
    let exit = run.terminate(SOON).unwrap();
    assert!(exit.success(), "{exit}: {}", run.log_tail(20));
    assert!(!lb_pins.join("stator_ctl").exists(), "pins removed on exit");
    echo.finish();
    assert!(list(&prefix).unwrap().is_empty(), "namespaces left");
    drop(bpffs);
    let _ = std::fs::remove_dir_all(&dir);
    println!("whole test {:?}", test_started.elapsed());
}
