//! The data plane's heartbeat (`dataplane.stale_after`, docs/forwarding.md §3.2) with the real
//! binary and real TCP (needs root): a controller that stops refreshing it — stopped with
//! SIGSTOP, as a hung one — leaves a forwarder that passes VIP traffic to the kernel (no new
//! connection reaches a backend on its stale tables, `stale_pass` counted); a controller that
//! runs again refreshes it within a second or two and new connections get through; a clean
//! stop with `on_exit = "keep"` turns the check off, so the node keeps forwarding past the
//! bound with no controller at all (the hitless restart).
//!
//! The DSR lab (`stator_lab::topo`): one client namespace → router → one LB node running
//! `stator run` (XDP on its uplink, the VIP routed to it statically, no BGP) → two backends
//! with `stator decap`, the VIP on `lo` and an echo server. Times are printed (`--nocapture`).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::EchoLab;
use stator_abi::Counter;
use stator_lab::netns::is_root;
use stator_lab::serve::tcp_connect;
use stator_lab::stator::{BpfFs, StatorRun};
use stator_lab::topo::{DsrLab, DsrSpec};
use stator_lab::wait::wait_for;

const NET: u8 = 84;
const VIP: &str = "192.0.2.84";
const STALE_AFTER: Duration = Duration::from_secs(3);
const SOON: Duration = Duration::from_secs(10);

fn config(lab: &DsrLab, dir: &Path, pins: &Path) -> String {
    let mut backends = String::new();
    for (k, b) in lab.backends.iter().enumerate() {
        backends.push_str(&format!(
            "[[pool.backend]]\naddress = \"{}\"\nport = 80\nid = \"b{k}\"\n",
            b.addr(false)
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
on_exit = "keep"
stale_after = "{stale}s"

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
table_size = 251
"#,
        node = lab.lbs[0].addr(false),
        pins = pins.display(),
        socket = dir.join("api.sock").display(),
        stale = STALE_AFTER.as_secs(),
    )
}

/// One new connection through the VIP from the client's `i`-th address and one line: the
/// answering backend's name, or what went wrong (within about a second).
fn one_request(lab: &DsrLab, i: usize) -> Result<String, String> {
    let srcs = lab.clients[0].addrs(false);
    let src = srcs[i % srcs.len()];
    let vip = SocketAddr::new(VIP.parse().unwrap(), 80);
    lab.clients[0]
        .ns
        .run_in(move || {
            let s = tcp_connect(Some(src), vip, Duration::from_millis(700))
                .map_err(|e| format!("connect from {src}: {e}"))?;
            s.set_read_timeout(Some(Duration::from_millis(700)))
                .unwrap();
            (&s).write_all(b"hello\n").map_err(|e| e.to_string())?;
            let mut line = String::new();
            BufReader::new(&s)
                .read_line(&mut line)
                .map_err(|e| format!("reading from {src}: {e}"))?;
            if line.is_empty() {
                return Err(format!("closed without an answer (from {src})"));
            }
            Ok(line.trim().to_owned())
        })
        .unwrap()
}

fn stale_passes(pins: &Path) -> u64 {
    stator_xdp::Maps::open(pins)
        .and_then(|m| m.counters())
        .expect("read the forwarder's counters")
        .get(Counter::StalePass)
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn a_controller_that_stops_refreshing_leaves_a_forwarder_that_passes_vip_traffic() {
    assert!(
        is_root(),
        "this test builds network namespaces and runs stator run with XDP: run it as root"
    );
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_stator"));
    let scratch = stator_testkit::scratch::TempDir::new("stator-heartbeat");
    let dir = scratch.path().to_path_buf();
    // interface names are short: a tag of five digits from the unique name's hash
    let tag = {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(scratch.path()) % 100_000
    };
    let prefix = format!("shb{tag}-");
    let bpffs = BpfFs::mount(&dir.join("bpffs")).unwrap();
    let lb_pins = bpffs.path().join("l0");

    let mut spec = DsrSpec::new(&prefix, NET, 1, 1, 2);
    spec.addrs_per_client = 4;
    let echo = EchoLab::create(&spec, VIP.parse().unwrap(), bpffs.path());
    let lab = &echo.lab;

    let socket = dir.join("api.sock");
    let mut run = StatorRun::start(
        &lab.lbs[0].ns,
        &binary,
        &dir,
        "node",
        &config(lab, &dir, &lb_pins),
        &socket,
    )
    .unwrap();
    run.wait_ready(SOON).unwrap();
    let pid = run.pid().expect("stator run is running");

    // 1. Running: the heartbeat is on and refreshed; requests through the VIP are answered.
    let beat = stator_xdp::BeatWriter::open(&lb_pins).expect("stator_beat is pinned");
    let b0 = beat.read();
    assert_eq!(
        b0.stale_after_ns,
        STALE_AFTER.as_nanos() as u64,
        "{}",
        run.log_tail(20)
    );
    wait_for(
        "answered and refreshed",
        SOON,
        Duration::from_millis(100),
        || {
            (one_request(lab, 0).is_ok() && beat.read().refreshed_ns > b0.refreshed_ns)
                .then_some(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {}", run.log_tail(20)));
    let passes0 = stale_passes(&lb_pins);
    assert_eq!(passes0, 0);

    // 2. SIGSTOP (a hung controller): refreshes stop; past the bound, VIP traffic is passed.
    signal(pid, "-STOP");
    let stopped = Instant::now();
    let last = beat.read().refreshed_ns;
    std::thread::sleep(STALE_AFTER + Duration::from_millis(1500));
    assert_eq!(
        beat.read().refreshed_ns,
        last,
        "nobody refreshes a stopped controller's heartbeat"
    );
    let mut answered = Vec::new();
    for i in 0..8 {
        if let Ok(b) = one_request(lab, i) {
            answered.push(b);
        }
    }
    let passes = stale_passes(&lb_pins);
    println!(
        "stopped for {:?}: {} of 8 new connections answered, stale_pass {passes}",
        stopped.elapsed(),
        answered.len()
    );
    assert!(
        answered.is_empty(),
        "no backend answers through stale tables: {answered:?}"
    );
    assert!(passes > 0, "the passed SYNs are counted stale_pass");

    // 3. SIGCONT: the controller refreshes, new connections get through again.
    signal(pid, "-CONT");
    let resumed = Instant::now();
    wait_for(
        "forwarding again after SIGCONT",
        SOON,
        Duration::from_millis(100),
        || one_request(lab, 1).ok(),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", run.log_tail(20)));
    println!("forwarding again {:?} after SIGCONT", resumed.elapsed());
    assert!(beat.read().refreshed_ns > last);

    // 4. A clean stop with on_exit = "keep": the check is off, and the node keeps forwarding
    //    past the bound with no controller. (The count is taken again here: connections tried
    //    between SIGCONT and the first refresh — 103 ms once under load — pass as stale too.)
    let passes = stale_passes(&lb_pins);
    let exit = run.terminate(SOON).unwrap();
    assert!(exit.success(), "{exit}: {}", run.log_tail(20));
    assert_eq!(
        beat.read().stale_after_ns,
        0,
        "a clean stop that keeps forwarding turns the check off"
    );
    std::thread::sleep(STALE_AFTER + Duration::from_millis(1500));
    let kept = one_request(lab, 2);
    let passes_after = stale_passes(&lb_pins);
    println!(
        "{:?} after a clean stop (keep): {kept:?}, stale_pass {passes_after}",
        STALE_AFTER + Duration::from_millis(1500)
    );
    assert!(
        kept.is_ok(),
        "still forwarding after a clean stop: {kept:?}"
    );
    assert_eq!(
        passes_after, passes,
        "nothing passed for staleness after a clean stop"
    );

    // Leave nothing behind: the kept forwarder and its pins, the decap pins, the router's
    // program, the namespaces, the bpffs.
    drop(beat);
    let _ = lab.lbs[0].ns.run_in({
        let p = lb_pins.clone();
        move || stator_xdp::detach_all(&p)
    });
    let _ = stator_xdp::purge(&lb_pins);
    echo.finish();
    drop(bpffs);
}
