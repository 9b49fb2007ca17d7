//! `stator run` and the CLI as an operator uses them (needs root): start-up checks that fail
//! with one clear line (invalid config, not root, missing interface, forwarding off), a pin
//! path on no bpffs (stator run mounts one there and says so), a start with BIRD unreachable
//! (not fatal), the client commands' tables and JSON,
//! drain, apply (good and bad), SIGHUP reloading the file, and SIGTERM ending with exit 0.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use stator_lab::netns::{Netns, cleanup, is_root, veth};
use stator_lab::stator::StatorRun;
use stator_lab::wait::wait_until;

const NET: u8 = 79;

/// `stator ARGS` in `ns`, its client commands on the node's socket in `dir`.
fn stator(ns: &Netns, dir: &Path, args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--net={}", ns.path().display()))
        .arg(env!("CARGO_BIN_EXE_stator"))
        .args(args)
        .env("STATOR_SOCKET", dir.join("api.sock"))
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn config(dir: &Path, pins: &Path, iface: &str, table: u32) -> String {
    format!(
        r#"
[node]
name = "cli"
address_v4 = "10.{NET}.0.1"
[dataplane]
interfaces = ["{iface}"]
pin_path = "{pins}"
conntrack = "shared"
conntrack_entries = 4096
slots_per_generation = 65536
[api]
socket = "{dir}/api.sock"
[bgp]
bird_socket = "{dir}/no-bird.ctl"
bird_config = "{dir}/stator-bird.conf"
local_as = 65010
[[bgp.neighbor]]
address = "10.{NET}.0.254"
remote_as = 65000
[[pool]]
name = "web"
[pool.health]
interval = "200ms"
timeout = "100ms"
[[pool.backend]]
address = "10.{NET}.0.2"
port = 8080
id = "web-a"
[[vip]]
name = "www"
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = {table}
"#,
        dir = dir.display(),
        pins = pins.display(),
    )
}

/// Unmounts what `stator run` mounted at the pin path, also when the test fails half-way.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

fn start_fails(ns: &Netns, dir: &Path, name: &str, config: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let out = stator(ns, dir, &["run", "-c", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out));
    text(&out)
}

#[test]
fn run_and_the_cli_as_an_operator_uses_them() {
    assert!(
        is_root(),
        "this test runs stator run in a network namespace: run it as root"
    );
    let tag = std::process::id() % 100_000;
    let prefix = format!("src{tag}-");
    cleanup(&prefix).unwrap();
    let dir: PathBuf = std::env::temp_dir().join(format!("stator-run-cli-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let node = Netns::create(&format!("{prefix}n")).unwrap();
    let backend = Netns::create(&format!("{prefix}b")).unwrap();
    veth(&node, "eth0", &backend, "eth0").unwrap();
    node.addr_add("eth0", &format!("10.{NET}.0.1/24")).unwrap();
    backend
        .addr_add("eth0", &format!("10.{NET}.0.2/24"))
        .unwrap();
    // A plain directory: `stator run` must mount a bpffs there itself (and it stays mounted on
    // the host, like Cilium's, until this test unmounts it).
    let pins = dir.join("pins");
    let _unmount = Unmount(pins.clone());
    let listen: SocketAddr = format!("10.{NET}.0.2:8080").parse().unwrap();
    let _listener = backend
        .run_in(move || TcpListener::bind(listen).unwrap())
        .unwrap();

    // Start-up checks: each fails with one clear reason and exit status 1.
    let good = config(&dir, &pins, "eth0", 251);
    let out = start_fails(
        &node,
        &dir,
        "invalid",
        &good.replace("table_size = 251", "table_size = 250"),
    );
    assert!(out.contains("vip[0].table_size: 250 is not prime"), "{out}");
    let path = dir.join("good.toml");
    std::fs::write(&path, &good).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_stator"))
        .args(["run", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("stator run needs root"),
        "{}",
        text(&out)
    );
    let out = start_fails(&node, &dir, "noiface", &config(&dir, &pins, "eth9", 251));
    assert!(
        out.contains("dataplane.interfaces[0]") && out.contains("`eth9` does not exist"),
        "{out}"
    );
    let out = start_fails(&node, &dir, "noforward", &good);
    assert!(
        out.contains("sysctl -w net.ipv4.conf.eth0.forwarding=1"),
        "{out}"
    );
    node.sysctl("net.ipv4.conf.eth0.forwarding", "1").unwrap();

    // A node whose BIRD is not there: it runs, and says so.
    let mut run = StatorRun::start(
        &node,
        Path::new(env!("CARGO_BIN_EXE_stator")),
        &dir,
        "node",
        &good,
        &dir.join("api.sock"),
    )
    .unwrap();
    let took = run.wait_ready(Duration::from_secs(10)).unwrap();
    println!("stator run ready in {took:?} with BIRD unreachable");
    let log = run.log_tail(200);
    assert_eq!(
        log.matches(&format!("mounted one at {}", pins.display()))
            .count(),
        1,
        "one line says the bpffs was mounted: {log}"
    );
    let status = text(&stator(&node, &dir, &["status"]));
    assert!(
        status.contains("forwarder   xdp healthy on eth0"),
        "{status}"
    );
    assert!(status.contains("BIRD UNREACHABLE"), "{status}");
    let vips = text(&stator(&node, &dir, &["vips"]));
    assert!(
        vips.starts_with("VIP  ADDRESS     PORT  PROTO  USABLE"),
        "{vips}"
    );
    assert!(
        vips.contains("www  192.0.2.10    80  tcp         1"),
        "{vips}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&stator(&node, &dir, &["backends", "--json"]).stdout).unwrap();
    assert_eq!(json["backends"][0]["id"], "web-a");
    assert_eq!(json["backends"][0]["vips"][0]["slots"], 251);
    let trace = text(&stator(
        &node,
        &dir,
        &["trace", "--vip", "www", "--src", "198.51.100.1"],
    ));
    assert!(
        trace.contains("=> web-a (10.79.0.2), Maglev slot"),
        "{trace}"
    );

    let drain = stator(&node, &dir, &["drain", "web-a", "--timeout", "1m"]);
    assert!(
        drain.status.success() && text(&drain).contains("web-a: draining (60s left)"),
        "{}",
        text(&drain)
    );
    let backends = text(&stator(&node, &dir, &["backends"]));
    assert!(backends.contains("draining"), "{backends}");
    assert!(stator(&node, &dir, &["undrain", "web-a"]).status.success());
    let unknown = stator(&node, &dir, &["drain", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        text(&unknown).contains("error: 404: no backend named `nope`"),
        "{}",
        text(&unknown)
    );

    // apply: a bad file is refused with its field, a good one applied.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, good.replace("port = 8080", "port = 0")).unwrap();
    let out = stator(&node, &dir, &["apply", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("error: 400: invalid configuration: pool[0].backend[0].port"),
        "{}",
        text(&out)
    );
    let next = dir.join("next.toml");
    std::fs::write(&next, config(&dir, &pins, "eth0", 241)).unwrap();
    let out = stator(&node, &dir, &["apply", next.to_str().unwrap()]);
    assert!(
        text(&out).contains("applied") && text(&out).contains("1 table(s) rebuilt"),
        "{}",
        text(&out)
    );
    let generation = |ns: &Netns| -> u64 {
        let v: serde_json::Value =
            serde_json::from_slice(&stator(ns, &dir, &["status", "--json"]).stdout).unwrap();
        v["config"]["generation"].as_u64().unwrap()
    };
    let g = generation(&node);
    let out = stator(
        &node,
        &dir,
        &[
            "apply",
            next.to_str().unwrap(),
            "--if-match",
            &(g + 5).to_string(),
        ],
    );
    assert!(text(&out).contains("error: 412"), "{}", text(&out));

    // SIGHUP: the file given to -c is read again and applied.
    std::fs::write(dir.join("node.toml"), config(&dir, &pins, "eth0", 239)).unwrap();
    let pid = run.pid().unwrap();
    Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    wait_until(
        "the SIGHUP reload",
        Duration::from_secs(5),
        Duration::from_millis(50),
        || generation(&node) > g,
    )
    .unwrap();
    let vips: serde_json::Value =
        serde_json::from_slice(&stator(&node, &dir, &["vips", "--json"]).stdout).unwrap();
    assert_eq!(vips["vips"][0]["table_size"], 239);

    let exit = run.terminate(Duration::from_secs(15)).unwrap();
    assert!(exit.success(), "{exit}: {}", run.log_tail(20));
    assert!(
        !pins.join("stator_ctl").exists(),
        "on_exit = detach removes the pins"
    );
    let down = stator(&node, &dir, &["status"]);
    assert_eq!(
        down.status.code(),
        Some(2),
        "unreachable API: {}",
        text(&down)
    );
    let umount = Command::new("umount").arg(&pins).output().unwrap();
    assert!(
        umount.status.success(),
        "the bpffs stator run mounted: {}",
        text(&umount)
    );
    cleanup(&prefix).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
