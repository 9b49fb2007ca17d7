//! The quick start (docs/quickstart.md) run as written, so that it cannot rot — the way
//! trycmd and snapbox test a command line's documentation. The file is read at build time;
//! its fenced blocks are the input:
//!
//! - every `# file: PATH` block is written under a scratch directory of the test, one root per
//!   host (`/etc/stator/stator.toml` of `lb1` → `<scratch>/lb1/etc/stator/stator.toml`);
//! - every line of every `sh` block is either run by the scenario below — `stator` being this
//!   build's binary, paths remapped, inside the host's network namespace — or listed in
//!   [`NOT_RUN`] with the reason; [`every_quickstart_command_is_run_or_listed`] fails when
//!   the quick start gains a command that is neither (or the lists name one it lost).
//!
//! The hosts, in namespaces with the quick start's own addresses: a router (BIRD with the
//! documented configuration, ECMP into its kernel table), two load-balancer nodes `lb1` and
//! `lb2` (BIRD and `stator run` with XDP, both from the documented files), two backends
//! `be1` and `be2` (the documented sysctls and MTU, the packaged `stator-decap.service`'s
//! commands with the documented `decap.env`, a web server on port 80), a client behind the
//! router, and the proxy-only node `proxy1` with its two upstreams. A real TCP connection
//! (the documented `curl`) goes client → router (ECMP route learnt over BGP) → a node's XDP
//! forwarder → GRE → a backend's decap → the web server, and back directly.
//!
//! What the test adds to the documented files, each said where it is done: the paths of its
//! own (pins on a bpffs of its own, API and BIRD sockets, BIRD's log), `conntrack = "shared"`
//! (the documented advice for veth), smaller tables, and the lab's veth needs (an XDP program
//! on the router's ports towards the nodes, GRO, no TX checksum offload, the router's MAC as
//! a permanent neighbour on the nodes). The router starts with a strict reverse-path filter,
//! some distributions' default, which the documented sysctls must overcome. The backends'
//! `systemctl stop stator-decap` (the unit's `ExecStop`) is run at the end and must take the
//! VIP off `lo`. Needs root, BIRD 2 and curl. Takes about 16 s; times are printed.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::{output_text, peer_xdp};
use stator_lab::bird::{Bird, wait_next_hops};
use stator_lab::netns::{Netns, is_root, veth};
use stator_lab::serve::Server;
use stator_lab::stator::{BpfFs, StatorRun};
use stator_lab::wait::wait_for;
use stator_testkit::scratch::TempDir;

const QUICKSTART: &str = include_str!("../../../../docs/quickstart.md");
/// The packaged backend unit whose commands `systemctl enable --now stator-decap` runs.
const DECAP_UNIT: &str = include_str!("../../../../packaging/stator-decap.service.in");

const INSTALL: &str = "Installing Stator";
const LB: &str = "Load-balancer node (XDP, with BIRD)";
const BACKEND: &str = "Backend";
const ROUTER: &str = "Router";
const END_TO_END: &str = "End to end";
const PROXY: &str = "Proxy-only node";

/// Every command of the quick start the scenario runs, by section.
const RUN: &[(&str, &str)] = &[
    (LB, "sysctl --system"),
    (LB, "stator check /etc/stator/stator.toml"),
    (LB, "systemctl restart bird"),
    (LB, "systemctl enable --now stator"),
    (LB, "stator vips"),
    (LB, "stator status"),
    (LB, "birdc show route export router_v4"),
    (BACKEND, "ip link set dev eth0 mtu 1600"),
    (BACKEND, "sysctl --system"),
    (BACKEND, "systemctl enable --now stator-decap"),
    (BACKEND, "stator decap status"),
    (BACKEND, "stator decap stats"),
    (ROUTER, "sysctl --system"),
    (ROUTER, "systemctl restart bird"),
    (ROUTER, "ip route show 192.0.2.10"),
    (END_TO_END, "curl -s http://192.0.2.10/"),
    (PROXY, "stator check /etc/stator/stator.toml"),
    (PROXY, "systemctl enable --now stator"),
    (PROXY, "curl -si http://10.1.2.21/"),
    (PROXY, "stator listeners"),
];

/// Every command of the quick start the scenario does not run, with the reason.
const NOT_RUN: &[(&str, &str, &str)] = &[
    (
        INSTALL,
        "make deb",
        "builds the package; tests/stator_cli/packaging.rs builds it with scripts/deb.sh from this binary \
         and checks what it installs, both units included",
    ),
    (
        INSTALL,
        "apt install ./stator_*.deb",
        "changes the host; the test runs this build's binary and the packaged unit's commands",
    ),
    (
        LB,
        "apt install bird2",
        "changes the host; the test needs BIRD 2 installed and runs it in the namespaces",
    ),
    (
        ROUTER,
        "apt install bird2",
        "changes the host; the test needs BIRD 2 installed and runs it in the namespaces",
    ),
];

// The hosts' addresses, from the quick start's table.
const VIP: &str = "192.0.2.10";
const LBS: [(&str, &str); 2] = [("lb1", "10.0.0.10"), ("lb2", "10.0.0.11")];
const BACKENDS: [(&str, &str); 2] = [("be1", "10.1.1.11"), ("be2", "10.1.1.12")];
const PROXY_ADDR: &str = "10.1.2.21";
const UPSTREAMS: [&str; 2] = ["10.1.2.11", "10.1.2.12"];
// The client is not in the quick start ("a client that routes to 192.0.2.10 through the
// router"): a documentation range of its own.
const CLIENT: &str = "198.51.100.2";
const CLIENT_GW: &str = "198.51.100.1";

/// Bounds of the waits: BGP with the documented timers (connect retry 5 s) and health checks
/// (every 2 s) need some seconds; none of these is a measurement.
const SOON: Duration = Duration::from_secs(20);
const BGP: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The quick start, parsed.

/// A fenced block: the `## ` section it is in, its language, its text (indentation of a list
/// item removed).
#[derive(Debug, Clone)]
struct Block {
    section: String,
    lang: String,
    text: String,
}

fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut open: Option<(usize, Block)> = None;
    for line in md.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some((ind, mut block)) = open.take() {
            if trimmed.trim_end() == "```" {
                out.push(block);
            } else {
                block.text.push_str(line.get(ind..).unwrap_or(trimmed));
                block.text.push('\n');
                open = Some((ind, block));
            }
            continue;
        }
        if let Some(h) = line.strip_prefix("## ") {
            section = h.trim().to_owned();
        } else if let Some(lang) = trimmed.strip_prefix("```") {
            open = Some((
                indent,
                Block {
                    section: section.clone(),
                    lang: lang.trim().to_owned(),
                    text: String::new(),
                },
            ));
        }
    }
    assert!(
        open.is_none(),
        "an unclosed fenced block in the quick start"
    );
    out
}

/// The quick start's commands (`sh` lines) and files (`# file: PATH` blocks), by section.
struct Quickstart {
    commands: Vec<(String, String)>,
    files: BTreeMap<(String, String), String>,
    /// What the scenario ran.
    ran: Mutex<BTreeSet<(String, String)>>,
}

impl Quickstart {
    fn parse() -> Self {
        let mut commands = Vec::new();
        let mut files = BTreeMap::new();
        for b in blocks(QUICKSTART) {
            if b.lang == "sh" {
                for l in b.text.lines().map(str::trim) {
                    if !l.is_empty() && !l.starts_with('#') {
                        commands.push((b.section.clone(), l.to_owned()));
                    }
                }
            } else if let Some(path) = b
                .text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# file: "))
            {
                let key = (b.section.clone(), path.trim().to_owned());
                assert!(
                    files.insert(key.clone(), b.text.clone()).is_none(),
                    "{key:?} twice in the quick start"
                );
            }
        }
        Self {
            commands,
            files,
            ran: Mutex::default(),
        }
    }

    /// The documented file `path` of `section`.
    fn file(&self, section: &str, path: &str) -> &str {
        self.files
            .get(&(section.to_owned(), path.to_owned()))
            .unwrap_or_else(|| panic!("the quick start's {section:?} has no file {path}"))
    }

    /// The files of `section` whose path starts with `dir`.
    fn files_under(&self, section: &str, dir: &str) -> Vec<(&str, &str)> {
        self.files
            .iter()
            .filter(|((s, p), _)| s == section && p.starts_with(dir))
            .map(|((_, p), t)| (p.as_str(), t.as_str()))
            .collect()
    }

    /// `command` of `section`, which the scenario is about to run: it must be in the quick
    /// start and in [`RUN`]. Recorded.
    fn cmd<'a>(&self, section: &str, command: &'a str) -> &'a str {
        let key = (section.to_owned(), command.to_owned());
        assert!(
            self.commands.contains(&key),
            "the quick start's {section:?} no longer says `{command}`: update the test"
        );
        assert!(
            RUN.contains(&(section, command)),
            "`{command}` is run but not in RUN"
        );
        self.ran.lock().unwrap().insert(key);
        command
    }
}

#[test]
fn every_quickstart_command_is_run_or_listed() {
    let qs = Quickstart::parse();
    assert!(qs.commands.len() >= 20, "{:?}", qs.commands);
    let listed: BTreeSet<(&str, &str)> = RUN
        .iter()
        .copied()
        .chain(NOT_RUN.iter().map(|(s, c, _)| (*s, *c)))
        .collect();
    for (s, c) in &qs.commands {
        assert!(
            listed.contains(&(s.as_str(), c.as_str())),
            "the quick start's {s:?} says `{c}`, which quickstart_netns neither runs nor lists \
             in NOT_RUN with a reason"
        );
    }
    for (s, c) in &listed {
        assert!(
            qs.commands
                .iter()
                .any(|(qs_s, qs_c)| qs_s == s && qs_c == c),
            "RUN or NOT_RUN names `{c}` in {s:?}, which the quick start no longer says"
        );
    }
    // Every file block is one the scenario writes.
    let used = [
        (LB, "/etc/sysctl.d/90-stator.conf"),
        (LB, "/etc/bird/bird.conf"),
        (LB, "/etc/stator/stator.toml"),
        (BACKEND, "/etc/sysctl.d/90-stator-backend.conf"),
        (BACKEND, "/etc/stator/decap.env"),
        (ROUTER, "/etc/sysctl.d/90-ecmp.conf"),
        (ROUTER, "/etc/bird/bird.conf"),
        (PROXY, "/etc/stator/stator.toml"),
    ];
    for (s, p) in qs.files.keys() {
        assert!(
            used.contains(&(s.as_str(), p.as_str())),
            "the quick start's {s:?} has a file {p} the test does not write"
        );
    }
    for (s, p) in used {
        qs.file(s, p);
    }
}

// ---------------------------------------------------------------------------------------------
// Hosts, files and commands.

/// A host of the quick start: its namespace and the scratch root its files go under.
struct Host {
    name: String,
    ns: Netns,
    root: PathBuf,
}

impl Host {
    /// Where the documented absolute `path` of this host lives in the test.
    fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    fn write(&self, path: &str, text: &str) -> PathBuf {
        let p = self.path(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `sysctl --system`: every documented `/etc/sysctl.d` file of `section`, in this
    /// namespace (`sysctl -p FILE`; the host's own sysctl.d is not this test's).
    fn sysctl_system(&self, qs: &Quickstart, section: &str) {
        let files = qs.files_under(section, "/etc/sysctl.d/");
        assert!(!files.is_empty(), "{section} has no sysctl file");
        for (path, text) in files {
            let p = self.write(path, text);
            self.ns
                .exec("sysctl", [std::ffi::OsStr::new("-p"), p.as_os_str()])
                .unwrap_or_else(|e| panic!("{}: sysctl -p {path}: {e}", self.name));
        }
    }

    /// A documented non-Stator command in this namespace; its standard output.
    fn exec(&self, command: &str) -> String {
        let words: Vec<&str> = command.split_whitespace().collect();
        self.ns
            .exec(words[0], &words[1..])
            .unwrap_or_else(|e| panic!("{}: `{command}`: {e}", self.name))
    }

    /// A documented `stator …` command line in this namespace, with its absolute paths
    /// remapped and `extra` arguments appended; the output, after asserting success.
    fn stator(&self, command: &str, extra: &[&str], env: &[(&str, &Path)]) -> Output {
        let mut words = command.split_whitespace();
        assert_eq!(words.next(), Some("stator"), "{command}");
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.ns.path().display()))
            .arg(env!("CARGO_BIN_EXE_stator"));
        for w in words {
            if w.starts_with('/') {
                c.arg(self.path(w));
            } else {
                c.arg(w);
            }
        }
        c.args(extra);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().expect("run stator under nsenter");
        assert!(
            out.status.success(),
            "{}: `{command}` {extra:?}: {}",
            self.name,
            output_text(&out)
        );
        out
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Removes every namespace of the test when dropped (processes inside are killed first).
struct Namespaces(Vec<Netns>);

impl Namespaces {
    fn create(&mut self, name: &str) -> Netns {
        let ns = Netns::create(name).unwrap_or_else(|e| panic!("namespace {name}: {e}"));
        self.0.push(ns.clone());
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.0.drain(..).rev() {
            let _ = ns.delete();
        }
    }
}

/// Removes the test's pins (bpffs is not namespaced), then unmounts its bpffs.
struct Pins(Vec<PathBuf>, Option<BpfFs>);

impl Drop for Pins {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = stator_xdp::detach_all(p);
            let _ = stator_xdp::purge(p);
            let _ = stator_xdp::decap_purge(p);
            let _ = std::fs::remove_dir_all(p);
        }
        drop(self.1.take());
    }
}

/// The lab's veth needs (crates/stator-lab/src/topo.rs explains each): GRO on both ends, no
/// TX checksum offload on the host's end, the MTU of a LAN that carries tunnel packets.
fn link(router: &Netns, port: &str, host: &Netns, mtu: Option<u32>) {
    veth(router, port, host, "eth0").unwrap();
    for (n, dev) in [(router, port), (host, "eth0")] {
        if let Some(mtu) = mtu {
            n.ip(["link", "set", dev, "mtu", &mtu.to_string()]).unwrap();
        }
        n.exec("ethtool", ["-K", dev, "gro", "on"]).unwrap();
    }
    host.exec("ethtool", ["-K", "eth0", "tx", "off"]).unwrap();
}

/// The commands of the packaged unit's `key=` lines (`ExecStart`, `ExecStop`) as systemd runs
/// them with `env` (its `EnvironmentFile`): `${VAR}` is one word; `@BINDIR@/stator` is the
/// test's binary.
fn unit_commands(key: &str, env: &BTreeMap<String, String>) -> Vec<Vec<String>> {
    DECAP_UNIT
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    let w = w.replace("@BINDIR@/stator", env!("CARGO_BIN_EXE_stator"));
                    match w.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
                        Some(var) => env
                            .get(var)
                            .unwrap_or_else(|| panic!("{var} is not in decap.env"))
                            .clone(),
                        None => {
                            assert!(!w.contains('$'), "{w}: only ${{VAR}} words are expanded");
                            w
                        }
                    }
                })
                .collect()
        })
        .collect()
}

/// `KEY=VALUE` lines of an environment file.
fn env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("{l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// Runs a unit command (`stator decap …`) in `ns` with the test's pin path; its output.
fn run_unit_command(host: &Host, argv: &[String], pins: &Path) -> String {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", host.ns.path().display()))
        .args(argv)
        .arg("--pin-path")
        .arg(pins)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {argv:?}: {}",
        host.name,
        output_text(&out)
    );
    stdout(&out)
}

/// The documented node configuration with what the test adds: its own paths (pins on the
/// test's bpffs; the API socket; BIRD's socket and the file BIRD includes, under the host's
/// scratch root), `conntrack = "shared"` (the quick start's advice for veth, which has no
/// RSS) and a smaller connection table (memory on a small test machine).
fn node_config(doc: &str, host: &Host, pins: &Path, dir: &Path) -> String {
    let mut out = String::new();
    for line in doc.lines() {
        out.push_str(line);
        out.push('\n');
        match line.trim() {
            "[dataplane]" => out.push_str(&format!(
                "pin_path = \"{}\"\nconntrack = \"shared\"\nconntrack_entries = 16384\n",
                pins.display()
            )),
            "[bgp]" => out.push_str(&format!(
                "bird_socket = \"{}\"\nbird_config = \"{}\"\n",
                dir.join(format!("{}-bird.ctl", host.name)).display(),
                host.path("/etc/bird/stator.conf").display()
            )),
            _ => {}
        }
    }
    out.push_str(&format!(
        "\n[api]\nsocket = \"{}\"\n",
        dir.join(format!("{}.sock", host.name)).display()
    ));
    out
}

/// A documented BIRD configuration for a host: absolute paths under the host's root, the log
/// to a file of the test instead of syslog (for the messages of a failure).
fn bird_config(doc: &str, host: &Host, dir: &Path) -> String {
    let log = dir.join(format!("{}-bird.log", host.name));
    let root = format!("\"{}/etc/bird/", host.root.display());
    let text = doc.replace("\"/etc/bird/", &root).replace(
        "log syslog all;",
        &format!("log \"{}\" all;", log.display()),
    );
    assert!(
        text.contains(&format!("log \"{}\"", log.display())),
        "{doc}"
    );
    text
}

// ---------------------------------------------------------------------------------------------
// The scenario.

#[test]
#[allow(clippy::too_many_lines)] // the quick start, role by role
fn the_quickstart_runs_as_written() {
    assert!(
        is_root(),
        "this test builds network namespaces, loads XDP programs and runs BIRD: run it as root"
    );
    let started = Instant::now();
    let qs = Quickstart::parse();
    let scratch = TempDir::new("stator-quickstart");
    let dir = scratch.path().to_path_buf();
    // namespace names are short: a tag of five digits from the unique directory's hash
    let tag = {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(scratch.path()) % 100_000
    };
    let prefix = format!("sqs{tag}-");
    let bpffs_dir = dir.join("bpffs");
    let bpffs = BpfFs::mount(&bpffs_dir).expect("a private bpffs for the pins");
    let pin = |name: &str| bpffs_dir.join(name);
    let _pins = Pins(
        ["rt-lb1", "rt-lb2", "lb1", "lb2", "be1", "be2"]
            .iter()
            .map(|n| pin(n))
            .collect(),
        Some(bpffs),
    );
    let mut spaces = Namespaces(Vec::new());
    let host = |spaces: &mut Namespaces, name: &str| Host {
        name: name.to_owned(),
        ns: spaces.create(&format!("{prefix}{name}")),
        root: dir.join(name),
    };

    // ---- The network: router with the LB LAN and the backends' LAN, a client behind it.
    let router = host(&mut spaces, "rt");
    // A strict reverse-path filter, the default of some distributions (RHEL), on every
    // interface the router gets: the documented sysctls must cope with it.
    for key in ["all", "default"] {
        router
            .ns
            .sysctl(&format!("net.ipv4.conf.{key}.rp_filter"), "1")
            .unwrap();
    }
    for (br, addr) in [("brlb", "10.0.0.1/24"), ("brbe", "10.1.1.1/24")] {
        router.ns.ip(["link", "add", br, "type", "bridge"]).unwrap();
        // a fixed MAC: a bridge otherwise takes its lowest port's, and the nodes' permanent
        // neighbour entry for the router would go stale
        let mac = if br == "brlb" {
            "02:5a:00:00:01:01"
        } else {
            "02:5a:00:00:02:01"
        };
        router.ns.ip(["link", "set", br, "address", mac]).unwrap();
        router.ns.ip(["link", "set", br, "mtu", "1600"]).unwrap();
        router.ns.addr_add(br, addr).unwrap();
    }
    let client = host(&mut spaces, "cl");
    link(&router.ns, "cl", &client.ns, None);
    router
        .ns
        .addr_add("cl", &format!("{CLIENT_GW}/24"))
        .unwrap();
    client.ns.addr_add("eth0", &format!("{CLIENT}/24")).unwrap();
    client
        .ns
        .ip(["route", "add", "default", "via", CLIENT_GW])
        .unwrap();
    let router_mac = router
        .ns
        .exec("cat", ["/sys/class/net/brlb/address"])
        .unwrap();
    let router_mac = router_mac.trim();
    let mut lbs = Vec::new();
    for (name, addr) in LBS {
        let h = host(&mut spaces, name);
        link(&router.ns, name, &h.ns, Some(1600));
        router
            .ns
            .ip(["link", "set", name, "master", "brlb"])
            .unwrap();
        // XDP_TX from a node reaches the router through veth only with an XDP program on
        // the router's port (docs/xdp.md)
        peer_xdp(&router.ns, name, &pin(&format!("rt-{name}"))).unwrap();
        h.ns.addr_add("eth0", &format!("{addr}/24")).unwrap();
        h.ns.ip(["route", "add", "default", "via", "10.0.0.1"])
            .unwrap();
        // XDP resolves no neighbour: the router's, permanent (on a LAN the BGP session keeps
        // it fresh; the lab does the same)
        h.ns.ip([
            "neigh",
            "replace",
            "10.0.0.1",
            "lladdr",
            router_mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])
        .unwrap();
        lbs.push((h, addr));
    }
    let mut backends = Vec::new();
    for (name, addr) in BACKENDS {
        let h = host(&mut spaces, name);
        // the backend's own eth0 keeps 1500 until the documented MTU command below
        link(&router.ns, name, &h.ns, None);
        router.ns.ip(["link", "set", name, "mtu", "1600"]).unwrap();
        router
            .ns
            .ip(["link", "set", name, "master", "brbe"])
            .unwrap();
        h.ns.addr_add("eth0", &format!("{addr}/24")).unwrap();
        h.ns.ip(["route", "add", "default", "via", "10.1.1.1"])
            .unwrap();
        backends.push((h, addr));
    }
    println!("network built in {:?}", started.elapsed());

    // ---- Backend (be1 as written; be2 "with its own address").
    let mut servers = Vec::new();
    let mut decap_stop = Vec::new();
    for (be, addr) in &backends {
        // the web server on port 80 the quick start assumes (the VIP and the own address)
        servers.push(Server::http(&be.ns, SocketAddr::from(([0, 0, 0, 0], 80)), &be.name).unwrap());
        be.sysctl_system(&qs, BACKEND);
        qs.cmd(BACKEND, "sysctl --system");
        be.exec(qs.cmd(BACKEND, "ip link set dev eth0 mtu 1600"));
        let env_doc = qs.file(BACKEND, "/etc/stator/decap.env");
        let env_text = env_doc.replace("10.1.1.11", addr);
        be.write("/etc/stator/decap.env", &env_text);
        assert!(
            DECAP_UNIT.contains("EnvironmentFile=@SYSCONFDIR@/stator/decap.env"),
            "the unit reads the file the quick start writes"
        );
        // `systemctl enable --now stator-decap`: the packaged unit's ExecStart lines
        qs.cmd(BACKEND, "systemctl enable --now stator-decap");
        let env = env_file(&env_text);
        let pins = pin(&be.name);
        for argv in unit_commands("ExecStart", &env) {
            let out = run_unit_command(be, &argv, &pins);
            println!("{}: {out}", be.name);
        }
        let lo = be.ns.ip(["-4", "addr", "show", "dev", "lo"]).unwrap();
        assert!(lo.contains(&format!("{VIP}/32")), "the VIP on lo: {lo}");
        let status = stdout(&be.stator(
            qs.cmd(BACKEND, "stator decap status"),
            &["--pin-path", pins.to_str().unwrap()],
            &[],
        ));
        println!("{}: stator decap status\n{status}", be.name);
        assert!(status.contains("eth0") && status.contains(addr), "{status}");
        decap_stop.push((unit_commands("ExecStop", &env), pins));
    }

    // ---- Router.
    router.sysctl_system(&qs, ROUTER);
    qs.cmd(ROUTER, "sysctl --system");
    qs.cmd(ROUTER, "systemctl restart bird");
    let router_bird = Bird::start(
        &router.ns,
        &dir,
        "rt-bird",
        &bird_config(qs.file(ROUTER, "/etc/bird/bird.conf"), &router, &dir),
    )
    .unwrap();

    // ---- Load-balancer nodes (lb1 as written; lb2 "with its own name and address").
    let mut birds = Vec::new();
    let mut nodes = Vec::new();
    for (lb, addr) in &lbs {
        let own = |t: &str| {
            t.replace("\"lb1\"", &format!("\"{}\"", lb.name))
                .replace("10.0.0.10", addr)
        };
        lb.sysctl_system(&qs, LB);
        qs.cmd(LB, "sysctl --system");
        let bird_conf = bird_config(&own(qs.file(LB, "/etc/bird/bird.conf")), lb, &dir);
        lb.write("/etc/bird/bird.conf", &bird_conf);
        qs.cmd(LB, "systemctl restart bird");
        birds.push(Bird::start(&lb.ns, &dir, &format!("{}-bird", lb.name), &bird_conf).unwrap());
        let doc = own(qs.file(LB, "/etc/stator/stator.toml"));
        lb.write("/etc/stator/stator.toml", &doc);
        let check = lb.stator(qs.cmd(LB, "stator check /etc/stator/stator.toml"), &[], &[]);
        println!("{}: stator check\n{}", lb.name, output_text(&check));
        // `systemctl enable --now stator`: the unit's `stator run -c`, with the test's paths
        qs.cmd(LB, "systemctl enable --now stator");
        let config = node_config(&doc, lb, &pin(&lb.name), &dir);
        let socket = dir.join(format!("{}.sock", lb.name));
        let mut run = StatorRun::start(
            &lb.ns,
            Path::new(env!("CARGO_BIN_EXE_stator")),
            &dir,
            &lb.name,
            &config,
            &socket,
        )
        .unwrap();
        run.wait_ready(SOON).unwrap();
        nodes.push(run);
    }

    // The router's ECMP route: one next hop per node, learnt over BGP.
    let hops: Vec<IpAddr> = LBS.iter().map(|(_, a)| a.parse().unwrap()).collect();
    let took = wait_next_hops(&router.ns, &format!("{VIP}/32"), &hops, BGP).unwrap_or_else(|e| {
        panic!(
            "{e}\nrouter BIRD:\n{}\nlb1:\n{}\nlb1 BIRD:\n{}",
            router_bird.log_tail(20),
            nodes[0].log_tail(20),
            birds[0].log_tail(20)
        )
    });
    println!("the router has {VIP} over both nodes {took:?} later");
    let route = router.exec(qs.cmd(ROUTER, "ip route show 192.0.2.10"));
    println!("router: ip route show {VIP}\n{route}");
    for (_, a) in LBS {
        assert!(route.contains(&format!("nexthop via {a} ")), "{route}");
    }

    // What each node shows (the documented outputs).
    for (i, ((lb, _), node)) in lbs.iter().zip(&nodes).enumerate() {
        let socket = node.socket().to_owned();
        let env = [("STATOR_SOCKET", socket.as_path())];
        // "shows the VIP with 2 usable backends and ANNOUNCE yes"
        let usable_announced = |vips: &str| {
            let row: Vec<&str> = vips
                .lines()
                .find(|l| l.contains(VIP))?
                .split_whitespace()
                .collect();
            let proto = row.iter().position(|w| *w == "tcp")?;
            (row.get(proto + 1) == Some(&"2") && row.get(proto + 4) == Some(&"yes")).then_some(())
        };
        let (vips, _) = wait_for(
            "stator vips to show 2 usable backends and ANNOUNCE yes",
            SOON,
            Duration::from_millis(200),
            || {
                let v = stdout(&lb.stator("stator vips", &[], &env));
                usable_announced(&v).map(|()| v)
            },
        )
        .unwrap_or_else(|e| panic!("{e}: {}", stdout(&lb.stator("stator vips", &[], &env))));
        qs.cmd(LB, "stator vips");
        println!("{}: stator vips\n{vips}", lb.name);
        let (status, _) = wait_for(
            "stator status to show the session Established and the VIP announced",
            BGP,
            Duration::from_millis(200),
            || {
                let s = stdout(&lb.stator("stator status", &[], &env));
                (s.contains("router_v4 Established") && s.contains(&format!("announced: {VIP}")))
                    .then_some(s)
            },
        )
        .unwrap_or_else(|e| {
            panic!(
                "{e}: {}",
                output_text(&lb.stator("stator status", &[], &env))
            )
        });
        qs.cmd(LB, "stator status");
        println!("{}: stator status\n{status}", lb.name);
        assert!(
            status
                .contains("BIRD reachable; sessions: router_v4 Established; announced: 192.0.2.10"),
            "{status}"
        );
        let export = birds[i]
            .birdc(
                qs.cmd(LB, "birdc show route export router_v4")
                    .trim_start_matches("birdc "),
            )
            .unwrap();
        println!("{}: birdc show route export router_v4\n{export}", lb.name);
        assert!(export.contains(&format!("{VIP}/32")), "{export}");
    }

    // ---- End to end: the client's curl through the router, a node and a backend.
    let curl = qs.cmd(END_TO_END, "curl -s http://192.0.2.10/");
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..8 {
        // --max-time: every wait of the test is bounded
        let words: Vec<&str> = curl.split_whitespace().collect();
        let out = client
            .ns
            .exec(words[0], ["--max-time", "5"].iter().chain(&words[1..]))
            .unwrap_or_else(|e| panic!("`{curl}` from the client: {e}"));
        *answers.entry(out.trim().to_owned()).or_default() += 1;
    }
    println!("client: `{curl}` ×8 answered by {answers:?}");
    for a in answers.keys() {
        assert!(
            BACKENDS.iter().any(|(b, _)| b == a),
            "answered by a backend: {answers:?}"
        );
    }
    let mut decapsulated = 0;
    for (be, _) in &backends {
        let stats = stdout(&be.stator(
            qs.cmd(BACKEND, "stator decap stats"),
            &["--pin-path", pin(&be.name).to_str().unwrap()],
            &[],
        ));
        println!("{}: stator decap stats\n{stats}", be.name);
        decapsulated += stator_xdp::DecapMaps::open(&pin(&be.name))
            .unwrap()
            .counters()
            .unwrap()
            .decapsulated();
    }
    assert!(
        decapsulated > 0,
        "the backends decapsulated the connections"
    );

    // ---- Proxy-only node: its LAN with the two upstreams (HTTP, /healthz answered).
    let proxy = host(&mut spaces, "proxy1");
    let upstream = host(&mut spaces, "app");
    veth(&proxy.ns, "eth0", &upstream.ns, "eth0").unwrap();
    proxy
        .ns
        .addr_add("eth0", &format!("{PROXY_ADDR}/24"))
        .unwrap();
    for (k, a) in UPSTREAMS.iter().enumerate() {
        upstream.ns.addr_add("eth0", &format!("{a}/24")).unwrap();
        servers.push(
            Server::http(
                &upstream.ns,
                SocketAddr::new(a.parse().unwrap(), 8080),
                &format!("app{k}"),
            )
            .unwrap(),
        );
    }
    let doc = qs.file(PROXY, "/etc/stator/stator.toml");
    proxy.write("/etc/stator/stator.toml", doc);
    let check = proxy.stator(
        qs.cmd(PROXY, "stator check /etc/stator/stator.toml"),
        &[],
        &[],
    );
    println!("proxy1: stator check\n{}", output_text(&check));
    // `systemctl enable --now stator`: the documented file plus an API socket of the test's.
    // The listener keeps its documented 0.0.0.0:80: the node has a namespace of its own.
    qs.cmd(PROXY, "systemctl enable --now stator");
    let socket = dir.join("proxy1.sock");
    let config = format!("{doc}\n[api]\nsocket = \"{}\"\n", socket.display());
    let mut proxy_run = StatorRun::start(
        &proxy.ns,
        Path::new(env!("CARGO_BIN_EXE_stator")),
        &dir,
        "proxy1",
        &config,
        &socket,
    )
    .unwrap();
    proxy_run.wait_ready(SOON).unwrap();
    // from a host on its LAN (the upstreams'), once the health checks pass
    let curl = qs.cmd(PROXY, "curl -si http://10.1.2.21/");
    let words: Vec<&str> = curl.split_whitespace().collect();
    let (answer, took) = wait_for(
        "the proxy-only node to answer 200",
        SOON,
        Duration::from_millis(200),
        || {
            let out = upstream
                .ns
                .exec(words[0], ["--max-time", "2"].iter().chain(&words[1..]))
                .ok()?;
            out.starts_with("HTTP/1.1 200").then_some(out)
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", proxy_run.log_tail(20)));
    println!("upstreams' LAN: `{curl}` after {took:?}\n{answer}");
    assert!(
        answer.contains("app0") || answer.contains("app1"),
        "{answer}"
    );
    let env = [("STATOR_SOCKET", socket.as_path())];
    let listeners = stdout(&proxy.stator(qs.cmd(PROXY, "stator listeners"), &[], &env));
    println!("proxy1: stator listeners\n{listeners}");
    assert!(listeners.contains("web"), "{listeners}");

    // ---- Stop: `systemctl stop stator-decap` undoes the backend's setup.
    for ((be, _), (argvs, pins)) in backends.iter().zip(&decap_stop) {
        for argv in argvs {
            println!("{}: {}", be.name, run_unit_command(be, argv, pins));
        }
        let lo = be.ns.ip(["-4", "addr", "show", "dev", "lo"]).unwrap();
        assert!(!lo.contains(VIP), "the VIP off lo after stop: {lo}");
    }
    let ran = qs.ran.lock().unwrap().clone();
    let all: BTreeSet<(String, String)> = RUN
        .iter()
        .map(|(s, c)| ((*s).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(ran, all, "every command of RUN was run");
    println!("the quick start ran in {:?}", started.elapsed());

    // Leave nothing behind: processes, then (guards, in reverse order) namespaces, pins,
    // bpffs, the scratch directory.
    let _ = proxy_run.terminate(SOON);
    for mut n in nodes {
        let _ = n.terminate(SOON);
    }
    drop(birds);
    drop(router_bird);
    drop(servers);
}
