//! Announcements through real BIRD daemons in network namespaces (needs root; BIRD 2).
//!
//! A router BIRD with `merge paths on` peers with two node BIRDs over IPv4 and IPv6; the test
//! drives each node's announcer directly (node 0 with the blocking [`Announcer`], node 1
//! through an [`AnnouncerThread`], as the controller will) and reads the router's kernel
//! table. Timings are printed (`--nocapture`); the only timing asserted is a functional
//! bound: a dead node is gone from the router within its hold time (or BFD detection time).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//! lane: alone (scripts/test-tier.sh: it times BGP sessions to the millisecond)

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use stator_bird::{Announcer, AnnouncerOptions, AnnouncerThread, BirdError, DesiredRoutes, Pass};
use stator_config::{Bgp, from_toml_str};
use stator_lab::bird::{Bird, bgp_connections, kernel_next_hops, wait_next_hops};
use stator_lab::lan::{EcmpLan, RouterBgp, node_bird_config};
use stator_lab::netns::is_root;
use stator_lab::wait::wait_until;

const SUBNET: u8 = 77;
const HOLD: u16 = 3;
const VIP1: &str = "192.0.2.10";
const VIP2: &str = "192.0.2.11";
const VIP6: &str = "2001:db8:100::10";
/// Generous bound for anything that should happen "at once" (a BGP update, a reconfigure).
const SOON: Duration = Duration::from_secs(10);
/// Bound for sessions to come up (connect retry and error wait are 1s on both sides).
const SESSIONS: Duration = Duration::from_secs(30);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn host(address: &str) -> String {
    if address.contains(':') {
        format!("{address}/128")
    } else {
        format!("{address}/32")
    }
}

/// Node `i`'s Stator configuration: sessions to the router over IPv4 and IPv6 with the lab's
/// short timers; node 1 also runs BFD on its IPv4 session.
fn node_bgp(lan: &EcmpLan, i: usize, dir: &std::path::Path) -> Bgp {
    let (v4, v6) = lan.node_addresses(i);
    let bfd = i == 1;
    let toml = format!(
        r#"
[node]
name = "n{i}"
address_v4 = "{v4}"
address_v6 = "{v6}"
[dataplane]
interfaces = ["eth0"]
[bgp]
bird_socket = "{dir}/n{i}.ctl"
bird_config = "{dir}/n{i}-stator.conf"
local_as = 65010
bfd_interval = "100ms"
bfd_multiplier = 3
[[bgp.neighbor]]
name = "tor_v4"
address = "{r4}"
remote_as = 65000
hold_time = "{HOLD}s"
keepalive = "1s"
connect_retry = "1s"
error_wait = "1s"
bfd = {bfd}
[[bgp.neighbor]]
name = "tor_v6"
address = "{r6}"
remote_as = 65000
hold_time = "{HOLD}s"
keepalive = "1s"
connect_retry = "1s"
error_wait = "1s"
"#,
        dir = dir.display(),
        r4 = lan.router_v4,
        r6 = lan.router_v6,
    );
    from_toml_str("node.toml", &toml).unwrap().bgp.unwrap()
}

fn options() -> AnnouncerOptions {
    AnnouncerOptions {
        resync_interval: Duration::from_millis(500),
        ..AnnouncerOptions::default()
    }
}

/// Runs passes until one settles (bounded).
fn settle(a: &mut Announcer) -> Result<Duration, BirdError> {
    let start = Instant::now();
    loop {
        match a.reconcile(Instant::now()) {
            Ok(Pass::Settled) => return Ok(start.elapsed()),
            Ok(Pass::Settling) if start.elapsed() < SOON => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(Pass::Settling) => panic!("BIRD did not settle within {SOON:?}"),
            Err(e) => return Err(e),
        }
    }
}

struct Lab {
    lan: EcmpLan,
    dir: PathBuf,
    router: Bird,
    nodes: Vec<Bird>,
}

impl Lab {
    fn start() -> Self {
        assert!(
            is_root(),
            "this test runs BIRD in network namespaces and needs root; run it as root \
             (cargo test -p stator-bird --release as root)"
        );
        let tag = std::process::id() % 100_000;
        let dir = std::env::temp_dir().join(format!("stator-bird-lab-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lan = EcmpLan::create(&format!("sb{tag}-"), SUBNET, 2).unwrap();
        let router_bgp = RouterBgp {
            local_as: 65000,
            node_as: 65010,
            hold_time: HOLD,
            keepalive: 1,
            bfd_nodes: vec![1],
            accept_v4: vec!["192.0.2.0/24".into()],
            accept_v6: vec!["2001:db8:100::/64".into()],
        };
        let router_conf = lan.router_bird_config(&router_bgp, &dir.join("router.log"));
        let router = Bird::start(&lan.router, &dir, "router", &router_conf).unwrap();
        let nodes = (0..2)
            .map(|i| {
                let n = &lan.nodes[i];
                let conf = node_bird_config(
                    n.v4,
                    &dir.join(format!("n{i}-stator.conf")),
                    &dir.join(format!("n{i}.log")),
                );
                Bird::start(&n.ns, &dir, &format!("n{i}"), &conf).unwrap()
            })
            .collect();
        Self {
            lan,
            dir,
            router,
            nodes,
        }
    }

    fn hops(&self, vip: &str, nodes: &[usize]) -> Vec<IpAddr> {
        nodes
            .iter()
            .map(|&i| {
                let (v4, v6) = self.lan.node_addresses(i);
                if vip.contains(':') { v6 } else { v4 }
            })
            .collect()
    }

    /// Waits until the router's kernel route for `vip` goes through exactly `nodes`.
    fn expect(&self, vip: &str, nodes: &[usize], within: Duration) -> Duration {
        wait_next_hops(&self.lan.router, &host(vip), &self.hops(vip, nodes), within)
            .unwrap_or_else(|e| panic!("{e}\nrouter log:\n{}", self.router.log_tail(20)))
    }

    /// Asserts that the router's BGP session `protocol` last went down for `reason` (BIRD's
    /// `Last error` line of `show protocols all`).
    fn last_error_is(&self, protocol: &str, reason: &str) {
        let all = self
            .router
            .birdc(&format!("show protocols all {protocol}"))
            .unwrap();
        let last = all
            .lines()
            .find(|l| l.trim_start().starts_with("Last error:"))
            .unwrap_or_else(|| panic!("no `Last error` for {protocol}:\n{all}"));
        assert!(
            last.contains(reason),
            "{protocol}: {last:?}, not {reason:?}\n{all}"
        );
    }

    fn sessions(&self) -> [&'static str; 4] {
        ["n0_v4", "n0_v6", "n1_v4", "n1_v6"]
    }

    /// "since" of every session, both sides (BIRD's `YYYY-MM-DD HH:MM:SS.mmm`).
    fn since(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .sessions()
            .iter()
            .map(|p| self.router.since(p).unwrap())
            .collect();
        for node in &self.nodes {
            for p in ["tor_v4", "tor_v6"] {
                out.push(node.since(p).unwrap());
            }
        }
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[test]
fn ecmp_announce_withdraw_reconfigure_and_failures() {
    let mut lab = Lab::start();
    let bgp0 = node_bgp(&lab.lan, 0, &lab.dir);
    let bgp1 = node_bgp(&lab.lan, 1, &lab.dir);
    let mut a = Announcer::with_options(bgp0.clone(), options());
    let b = AnnouncerThread::spawn(Announcer::with_options(bgp1, options())).unwrap();

    // Both nodes announce VIP1 and VIP6: the router installs each with both next hops.
    let mut desired = DesiredRoutes::from_vips([(ip(VIP1), true), (ip(VIP6), true)]);
    a.set_desired(desired.clone());
    settle(&mut a).unwrap();
    b.set_desired(desired.clone());
    let took = lab
        .router
        .wait_established(&lab.sessions(), SESSIONS)
        .unwrap();
    println!("sessions established after {took:?}");
    lab.expect(VIP1, &[0, 1], SOON);
    lab.expect(VIP6, &[0, 1], SOON);
    assert_eq!(a.status().counters.configures, 1);

    // Node 0 withdraws VIP1 (its forwarder failed, or the VIP's last backend): one next hop
    // left, and no reconfiguration happened.
    desired.set(ip(VIP1), false);
    let start = Instant::now();
    a.set_desired(desired.clone());
    settle(&mut a).unwrap();
    lab.expect(VIP1, &[1], SOON);
    println!(
        "withdraw of one node seen by the router after {:?}",
        start.elapsed()
    );
    lab.expect(VIP6, &[0, 1], SOON);
    let s = a.status();
    assert!(!s.announced(ip(VIP1)) && s.announced(ip(VIP6)), "{s:?}");
    assert_eq!(
        (s.counters.configures, s.counters.withdrawals),
        (1, 1),
        "a health change is enable/disable, not configure"
    );

    // Recovery: announced again, two next hops.
    desired.set(ip(VIP1), true);
    let start = Instant::now();
    a.set_desired(desired.clone());
    settle(&mut a).unwrap();
    lab.expect(VIP1, &[0, 1], SOON);
    println!("re-announce seen by the router after {:?}", start.elapsed());

    // A new VIP means a new static protocol and `configure` — the sessions stay up: same
    // "since" on both sides, same TCP connections.
    let since = lab.since();
    let conns = bgp_connections(&lab.lan.router).unwrap();
    assert_eq!(conns.len(), 4, "{conns:?}");
    desired.set(ip(VIP2), true);
    let start = Instant::now();
    a.set_desired(desired.clone());
    let pass = settle(&mut a).unwrap();
    b.set_desired(desired.clone());
    lab.expect(VIP2, &[0, 1], SOON);
    println!(
        "new VIP: configure pass {pass:?}, on the router with both next hops after {:?}",
        start.elapsed()
    );
    assert_eq!(a.status().counters.configures, 2);
    std::thread::sleep(Duration::from_millis(1500)); // a reset session would show by now
    // BIRD derives "since" from its monotonic clock and prints it as wall-clock time, so one
    // session's "since" can read a millisecond apart from one look to the next (seen: .463 then
    // .464); a restart moves it by the 1.5 s waited at least.
    let now = lab.since();
    assert_eq!(now.len(), since.len());
    for (a, b) in since.iter().zip(&now) {
        let (a_ms, b_ms) = (clock_ms(a), clock_ms(b));
        assert!(
            a_ms.abs_diff(b_ms) <= 50,
            "no BGP session restarted: since {a} then {b} ({since:?} → {now:?})"
        );
    }
    assert_eq!(bgp_connections(&lab.lan.router).unwrap(), conns);
    lab.expect(VIP1, &[0, 1], SOON);

    // Node 0's BIRD crashes: the kernel closes its TCP connections, the router drops it.
    let start = Instant::now();
    lab.nodes[0].kill();
    lab.expect(VIP1, &[1], Duration::from_secs(u64::from(HOLD) + 2));
    println!(
        "node BIRD killed: router dropped it after {:?}",
        start.elapsed()
    );
    // It restarts and reads Stator's file: the VIPs come back before Stator even notices;
    // then the announcer reconnects and reconciles.
    let start = Instant::now();
    lab.nodes[0].restart().unwrap();
    lab.expect(VIP1, &[0, 1], SESSIONS);
    println!(
        "node BIRD restarted: back on the router after {:?}",
        start.elapsed()
    );
    let connections = a.status().counters.connections;
    settle(&mut a).unwrap();
    let s = a.status();
    assert_eq!(s.counters.connections, connections + 1, "{s:?}");
    assert!(s.bird_reachable && s.announced(ip(VIP2)));
    lab.expect(VIP2, &[0, 1], SOON);

    // Node 0's uplink is cut (no BFD): the router notices when the hold timer expires.
    lab.router
        .wait_established(&lab.sessions(), SESSIONS)
        .unwrap();
    let start = Instant::now();
    lab.lan.cut(0).unwrap();
    let took = lab.expect(VIP1, &[1], Duration::from_secs(u64::from(HOLD) * 3));
    println!(
        "uplink cut, hold time {HOLD}s: router dropped the node after {took:?} ({:?} from the cut)",
        start.elapsed()
    );
    // Why the router dropped it: its hold timer, not a closed connection (measured times
    // are printed above, not asserted).
    lab.last_error_is("n0_v4", "Hold timer expired");
    lab.lan.restore(0).unwrap();
    let took = lab.expect(VIP1, &[0, 1], SESSIONS);
    println!("uplink restored: back on the router after {took:?}");

    // Node 1's uplink is cut (BFD, 100ms x 3): much faster.
    lab.router
        .wait_established(&lab.sessions(), SESSIONS)
        .unwrap();
    wait_until(
        "BFD session of node 1 up",
        SESSIONS,
        Duration::from_millis(50),
        || {
            lab.router.birdc("show bfd sessions").is_ok_and(|s| {
                s.lines()
                    .any(|l| l.contains("10.77.0.12") && l.contains("Up"))
            })
        },
    )
    .unwrap();
    lab.lan.cut(1).unwrap();
    let took = lab.expect(VIP1, &[0], Duration::from_secs(u64::from(HOLD) * 3));
    println!(
        "uplink cut, BFD 100ms x 3: router dropped the node after {took:?} (hold time {HOLD}s)"
    );
    // BFD beat the hold timer: the session ended because BFD said so.
    lab.last_error_is("n1_v4", "BFD session down");
    lab.lan.restore(1).unwrap();
    lab.expect(VIP1, &[0, 1], SESSIONS);

    // A file BIRD rejects (a neighbour name that collides with bird.conf's `device1`) is
    // rolled back; health changes still apply meanwhile; the error is reported.
    let file = std::fs::read_to_string(&bgp0.bird_config).unwrap();
    let colliding = {
        let mut toml_bgp = bgp0.clone();
        toml_bgp.neighbors[1].name = "device1".into();
        toml_bgp
    };
    a.set_bgp(colliding);
    desired.set(ip(VIP1), false);
    a.set_desired(desired.clone());
    let e = a.reconcile(Instant::now()).unwrap_err();
    assert!(e.is_config_rejected(), "{e}");
    println!("rejected: {e}");
    lab.expect(VIP1, &[1], SOON);
    let now = std::fs::read_to_string(&bgp0.bird_config).unwrap();
    assert_eq!(
        now,
        file.replace(
            "stator_vip4_192_0_2_10 {\n  disabled no;   # announced",
            "stator_vip4_192_0_2_10 {\n  disabled yes;  # withdrawn"
        ),
        "the accepted structure stays on disk, with the latest states"
    );
    assert!(a.status().last_error.is_some());
    a.set_bgp(bgp0.clone());
    desired.set(ip(VIP1), true);
    a.set_desired(desired.clone());
    settle(&mut a).unwrap();
    lab.expect(VIP1, &[0, 1], SOON);
    assert!(a.status().last_error.is_none());

    // Shutdown of node 0: withdraw_all returns once BIRD confirmed; later wishes are ignored.
    let start = Instant::now();
    a.withdraw_all(Duration::from_secs(5)).unwrap();
    println!("withdraw_all confirmed by BIRD after {:?}", start.elapsed());
    for vip in [VIP1, VIP2, VIP6] {
        lab.expect(vip, &[1], SOON);
    }
    a.set_desired(desired.clone());
    settle(&mut a).unwrap();
    assert!(a.status().withdrawing_all);
    assert!(a.status().routes.iter().all(|r| !r.announced));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        kernel_next_hops(&lab.lan.router, &host(VIP1)).unwrap(),
        lab.hops(VIP1, &[1])
    );

    // Node 1 through its thread: the status is published (after each pass, so wait for the
    // pass that saw the sessions back up), shutdown withdraws everything.
    wait_until(
        "node 1's status: VIP1 announced, sessions up",
        SOON,
        Duration::from_millis(50),
        || {
            let s = b.status();
            s.announced(ip(VIP1))
                && s.sessions.len() == 2
                && s.sessions.iter().all(|x| x.established)
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {:?}", b.status()));
    b.shutdown(Duration::from_secs(5)).unwrap();
    for vip in [VIP1, VIP2, VIP6] {
        lab.expect(vip, &[], SOON);
    }
    for node in &mut lab.nodes {
        node.stop(Duration::from_secs(5)).unwrap();
    }
    lab.router.stop(Duration::from_secs(5)).unwrap();
}

/// Removes the namespaces with a prefix when dropped (also on panic).
struct Namespaces(String);

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = stator_lab::netns::cleanup(&self.0);
    }
}

/// A BIRD whose configuration does not include Stator's file is reported as such, and a BIRD
/// that is gone is a connection error with backoff.
#[test]
fn a_bird_that_does_not_include_the_file_is_reported() {
    assert!(
        is_root(),
        "this test runs BIRD in a network namespace; run it as root"
    );
    let tag = std::process::id() % 100_000;
    let prefix = format!("sbi{tag}-");
    let _cleanup = Namespaces(prefix.clone());
    let ns = stator_lab::netns::Netns::create(&format!("{prefix}x")).unwrap();
    let dir = std::env::temp_dir().join(format!("stator-bird-lonely-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bird = Bird::start(
        &ns,
        &dir,
        "lonely",
        "router id 10.78.0.11;\nprotocol device {}\n",
    )
    .unwrap();
    let toml = format!(
        r#"
[node]
name = "lonely"
address_v4 = "10.78.0.11"
[dataplane]
interfaces = ["eth0"]
[bgp]
bird_socket = "{dir}/lonely.ctl"
bird_config = "{dir}/lonely-stator.conf"
local_as = 65010
[[bgp.neighbor]]
name = "tor"
address = "10.78.0.1"
remote_as = 65000
"#,
        dir = dir.display()
    );
    let bgp = from_toml_str("lonely.toml", &toml).unwrap().bgp.unwrap();
    let mut a = Announcer::new(bgp.clone());
    a.set_desired(DesiredRoutes::from_vips([(ip(VIP1), true)]));
    let e = a.reconcile(Instant::now()).unwrap_err();
    match &e {
        BirdError::NotIncluded {
            missing,
            bird_config,
        } => {
            assert_eq!(missing, "stator_vip4_192_0_2_10, tor");
            assert_eq!(bird_config, &bgp.bird_config);
        }
        other => panic!("{other:?}"),
    }
    println!("{e}");
    assert!(
        std::fs::read_to_string(&bgp.bird_config).is_ok(),
        "the file is written"
    );

    // BIRD stops: connection errors, retried with growing delays.
    bird.stop(Duration::from_secs(5)).unwrap();
    let mut delays = Vec::new();
    for _ in 0..3 {
        let now = Instant::now();
        let e = a.reconcile(now).unwrap_err();
        assert!(e.is_connection_lost(), "{e:?}");
        delays.push(a.next_pass().unwrap() - now);
    }
    assert!(delays[0] < delays[1] && delays[1] < delays[2], "{delays:?}");
    let s = a.status();
    assert!(!s.bird_reachable && s.counters.errors == 4, "{s:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Milliseconds since midnight of BIRD's `YYYY-MM-DD HH:MM:SS.mmm` (the date must not change
/// within a test; it is compared too).
fn clock_ms(since: &str) -> u64 {
    let (date, time) = since
        .split_once(' ')
        .unwrap_or_else(|| panic!("not BIRD's time: {since:?}"));
    assert_eq!(date.len(), 10, "{since:?}");
    let mut parts = time.split([':', '.']).map(|p| {
        p.parse::<u64>()
            .unwrap_or_else(|_| panic!("not BIRD's time: {since:?}"))
    });
    let mut next = || parts.next().unwrap_or(0);
    let (h, m, s, ms) = (next(), next(), next(), next());
    let day: u64 = date
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0, |a, d| a * 10 + u64::from(d - b'0'));
    day * 86_400_000 + ((h * 60 + m) * 60 + s) * 1000 + ms
}
