//! What a valid configuration means: flattening, stable names, health-check deduplication,
//! warnings, limits, the `check` report and the shipped examples.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use stator_config::{
    BackendId, CheckReport, Config, Probe, Timing, check_file, check_str, from_toml_str,
};

const HEADER: &str = "[node]
name = \"lb1\"
address_v4 = \"10.0.0.10\"
address_v6 = \"2001:db8::10\"

[dataplane]
interfaces = [\"eth0\"]
";

fn config(body: &str) -> Config {
    match from_toml_str("t.toml", &format!("{HEADER}{body}")) {
        Ok(config) => config,
        Err(e) => panic!("{e}"),
    }
}

fn report(body: &str) -> CheckReport {
    check_str("t.toml", &format!("{HEADER}{body}"))
}

/// (name, weight) of a VIP's Maglev backends.
fn maglev(config: &Config, vip: usize) -> Vec<(String, u32)> {
    config
        .maglev_backends(&config.vips[vip])
        .into_iter()
        .map(|(name, _, w)| (name.to_string(), w))
        .collect()
}

const NESTED: &str = r#"
[[pool]]
name = "web"
include = ["rack1", "rack2"]
[[pool.backend]]
address = "10.1.0.1"
port = 80

[[pool]]
name = "rack1"
[[pool.backend]]
address = "10.1.1.1"
port = 80
weight = 3
[[pool.backend]]
address = "10.1.1.2"
port = 80
id = "web-r1-b"

[[pool]]
name = "rack2"
include = ["rack1"]
[[pool.backend]]
address = "2001:DB8:0:2::0001"
port = 80
[[pool.backend]]
address = "10.1.2.2"
weight = 0
[pool.health]
port = 8080

[[vip]]
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["web", "rack2"]
"#;

#[test]
fn nested_pools_flatten_to_one_sorted_list() {
    let c = config(NESTED);
    // rack1 is reached twice (web -> rack1, web -> rack2 -> rack1) and counted once; rack2 is
    // named by the VIP and included by web: once. Sorted by stable name, in byte order.
    assert_eq!(
        maglev(&c, 0),
        [
            ("10.1.0.1:80".to_string(), 1),
            ("10.1.1.1:80".to_string(), 3),
            ("10.1.2.2".to_string(), 0),
            ("[2001:db8:0:2::1]:80".to_string(), 1),
            ("web-r1-b".to_string(), 1),
        ]
    );
    assert_eq!(c.vips[0].total_weight(), 6);
    assert_eq!(c.reals(), 5);
    let web = c.pool_by_name("web").unwrap();
    assert_eq!(c.flatten_pool(web).members.len(), 5);
    let rack1 = c.pool_by_name("rack1").unwrap();
    assert_eq!(c.flatten_pool(rack1).members.len(), 2);
}

#[test]
fn stable_names_do_not_depend_on_file_order() {
    // The same pools and backends, written in another order, give the same Maglev input.
    let reordered = r#"
[[pool]]
name = "rack2"
include = ["rack1"]
[pool.health]
port = 8080
[[pool.backend]]
address = "10.1.2.2"
weight = 0
[[pool.backend]]
address = "2001:db8:0:2::1"
port = 80

[[pool]]
name = "rack1"
[[pool.backend]]
address = "10.1.1.2"
port = 80
id = "web-r1-b"
[[pool.backend]]
address = "10.1.1.1"
port = 80
weight = 3

[[pool]]
name = "web"
include = ["rack2", "rack1"]
[[pool.backend]]
address = "10.1.0.1"
port = 80

[[vip]]
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["rack2", "web"]
"#;
    assert_eq!(maglev(&config(NESTED), 0), maglev(&config(reordered), 0));
}

#[test]
fn backend_in_several_pools_is_one_backend() {
    let c = config(
        r#"
[[pool]]
name = "a"
[[pool.backend]]
address = "10.1.1.1"
port = 80
id = "shared"
[[pool]]
name = "b"
[[pool.backend]]
address = "10.1.1.1"
port = 80
[[vip]]
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["a"]
[[vip]]
address = "192.0.2.10"
port = 443
protocol = "tcp"
pools = ["b"]
"#,
    );
    // The id given in one pool names the backend everywhere.
    assert_eq!(c.backends.len(), 1);
    assert_eq!(c.backends[0].name, "shared");
    assert_eq!(maglev(&c, 1), [("shared".to_string(), 1)]);
}

const HEALTH: &str = r#"
[[pool]]
name = "web"
[pool.health]
method = "http"
path = "/healthz"
jitter = 0.1
[[pool.backend]]
address = "10.1.1.1"
port = 80
[[pool.backend]]
address = "10.1.1.2"
port = 80

[[pool]]
name = "web-too"
[pool.health]
method = "http"
path = "/healthz"
jitter = "200ms"
[[pool.backend]]
address = "10.1.1.1"
port = 80

[[pool]]
name = "web-tcp"
[[pool.backend]]
address = "10.1.1.2"
port = 80

[[pool]]
name = "admin"
[pool.health]
port = 9000
[[pool.backend]]
address = "10.1.1.3"
port = 80
[[pool.backend]]
address = "10.1.1.3"
port = 443

[[pool]]
name = "static"
[pool.health]
method = "none"
[[pool.backend]]
address = "10.1.1.4"

[[vip]]
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["web", "web-too", "web-tcp", "admin", "static"]
"#;

#[test]
fn health_checks_are_deduplicated_across_pools() {
    let c = config(HEALTH);
    let plan = c.health_plan();
    let summary: Vec<(String, u16, &str, Vec<usize>)> = plan
        .checks
        .iter()
        .map(|h| {
            let backends = h.backends.iter().map(|b| b.0).collect();
            (h.address.to_string(), h.port, h.probe.method(), backends)
        })
        .collect();
    // Backends by id: 0 = 10.1.1.1:80, 1 = 10.1.1.2:80, 2 = 10.1.1.3:80, 3 = 10.1.1.3:443,
    // 4 = 10.1.1.4.
    assert_eq!(
        summary,
        [
            // "web" and "web-too" check 10.1.1.1:80 identically (0.1 x 2s = 200ms): once.
            ("10.1.1.1".to_string(), 80, "http", vec![0]),
            // 10.1.1.2:80 has an HTTP check from "web" and a TCP check from "web-tcp".
            ("10.1.1.2".to_string(), 80, "tcp", vec![1]),
            ("10.1.1.2".to_string(), 80, "http", vec![1]),
            // Both "admin" backends are probed on the same port 9000: one check decides both.
            ("10.1.1.3".to_string(), 9000, "tcp", vec![2, 3]),
        ]
    );
    assert_eq!(plan.checks_of(BackendId(0)).len(), 1);
    assert_eq!(plan.checks_of(BackendId(1)).len(), 2);
    assert_eq!(plan.checks_of(BackendId(4)), []);
    // One backend, one state: up only when all its checks are up.
    let tcp = plan.checks_of(BackendId(1))[0];
    assert!(plan.is_up(BackendId(1), |_| true));
    assert!(!plan.is_up(BackendId(1), |c| c != tcp));
    assert!(plan.is_up(BackendId(4), |_| false), "no check: always up");
    let http = &plan.checks[0];
    assert!(matches!(&http.probe, Probe::Http(h) if h.path == "/healthz"
        && h.expect_status.first == 200 && h.expect_status.last == 399));
    assert_eq!(
        http.timing,
        Timing {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            jitter: Duration::from_millis(200),
        }
    );
}

#[test]
fn udp_probe_bytes() {
    let c = config(
        r#"
[[pool]]
name = "dns"
[pool.health]
method = "udp"
port = 53
payload_hex = "12 34 0100"
expect = "4"
[[pool.backend]]
address = "10.1.5.1"
[[vip]]
address = "192.0.2.53"
port = 53
protocol = "udp"
pools = ["dns"]
"#,
    );
    let plan = c.health_plan();
    let Probe::Udp(udp) = &plan.checks[0].probe else {
        panic!("{:?}", plan.checks[0].probe)
    };
    assert_eq!(udp.payload, [0x12, 0x34, 0x01, 0x00]);
    assert_eq!(udp.expect.as_deref(), Some(&b"4"[..]));
}

#[test]
fn defaults_and_node_params() {
    let c = config(
        r#"
[[pool]]
name = "web"
[[pool.backend]]
address = "10.1.1.1"
port = 80
[[vip]]
address = "2001:db8:100::10"
port = "any"
protocol = "udp"
pools = ["web"]
"#,
    );
    let vip = &c.vips[0];
    assert_eq!(vip.name, "udp/[2001:db8:100::10]:any");
    assert_eq!(vip.key.port, 0);
    assert_eq!(vip.table_size, 65537);
    assert_eq!(vip.encap, stator_config::Encap::Gre);
    assert!(!vip.flags.no_conntrack);
    assert_eq!(c.api.listen, None, "no TCP endpoint unless configured");
    assert_eq!(c.api.socket, std::path::Path::new("/run/stator/api.sock"));
    assert_eq!(
        c.api.socket_group,
        stator_config::SocketGroup::Name("stator".into())
    );
    assert!(c.bgp.is_none());
    let params = c.node_params();
    assert_eq!(
        params,
        stator_core::NodeParams {
            src_v4: Some("10.0.0.10".parse().unwrap()),
            src_v6: Some("2001:db8::10".parse().unwrap()),
            trace_per_sec: 0, // the tracer is off without a key file
            ..Default::default()
        }
    );
    assert!(!c.tracer.enabled());
    assert_eq!(c.dataplane.slots_per_generation, 1 << 22);
    assert_eq!(c.dataplane.conntrack_entries, 1 << 20);
    assert_eq!(c.encap.gue_port, 6080);
    assert_eq!(
        c.dataplane.next_hop_cache,
        Some(std::time::Duration::from_secs(1))
    );
}

#[test]
fn next_hop_cache_zero_turns_it_off() {
    let c = config("next_hop_cache = \"0s\"\n");
    assert_eq!(c.dataplane.next_hop_cache, None);
}

#[test]
fn bgp_for_bird() {
    let c = config(
        r#"
[bgp]
local_as = 65010
communities = ["65010:100"]
[[bgp.neighbor]]
address = "10.0.0.1"
remote_as = 65000
hold_time = "9s"
keepalive = "3s"
connect_retry = "5s"
error_wait = "2s"
[[bgp.neighbor]]
name = "tor_v6"
address = "2001:db8::1"
remote_as = 65010
next_hop_self = false
"#,
    );
    let bgp = c.bgp.unwrap();
    assert_eq!(
        bgp.router_id.to_string(),
        "10.0.0.10",
        "defaults to node.address_v4"
    );
    assert_eq!(bgp.bird_socket, Path::new("/run/bird/bird.ctl"));
    assert_eq!(bgp.communities, [(65010, 100)]);
    let n = &bgp.neighbors;
    assert_eq!(
        (n[0].name.as_str(), n[0].hold_time, n[0].keepalive),
        ("stator_0", Some(9), Some(3))
    );
    assert!(n[0].next_hop_self && !n[0].bfd);
    assert_eq!((n[0].connect_retry, n[0].error_wait), (Some(5), Some(2)));
    assert_eq!((n[1].connect_retry, n[1].error_wait), (None, None));
    assert_eq!((bgp.bfd_interval, bgp.bfd_multiplier), (None, None));
    assert_eq!((n[1].name.as_str(), n[1].next_hop_self), ("tor_v6", false));
    // A disabled [bgp] is not checked at all, so it can be kept half-written.
    let c = config("[bgp]\nenabled = false\nlocal_as = 0\n");
    assert!(c.bgp.is_none());
}

#[test]
fn warnings_are_reported_but_do_not_fail() {
    let r = report(
        r#"
[api]
listen = "0.0.0.0:9180"
read_token_file = "/etc/stator/read-token"

[bgp]
local_as = 65010
[[bgp.neighbor]]
address = "10.0.0.1"
remote_as = 65000

[[pool]]
name = "web"
[[pool.backend]]
address = "10.1.1.1"
port = 8080

[[pool.backend]]
address = "10.1.1.1"
port = 8443

[[pool]]
name = "old"
[[pool.backend]]
address = "10.1.1.9"
port = 80

[[vip]]
address = "2001:db8:100::10"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = 13
"#,
    );
    assert!(r.is_ok());
    assert_eq!(r.exit_code(), 0);
    let lines: Vec<String> = r
        .to_string()
        .lines()
        .filter(|l| l.contains(": warning: "))
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        [
            "t.toml:13:1: warning: bgp: no IPv6 BGP neighbor: IPv6 VIPs will not be announced (a \
             neighbor announces the VIPs of its own address family)",
            "t.toml:29:1: warning: pool[1]: pool \"old\" is not used by any VIP or listener",
            "t.toml:39:9: warning: vip[0].pools: 10.1.1.1 is behind this VIP as 2 backends \
             (10.1.1.1:8080, 10.1.1.1:8443): packets are forwarded by address (ports are not \
             rewritten), so it receives 2 shares",
            "t.toml:39:9: warning: vip[0].pools: backend 10.1.1.1:8080 has a port different from \
             the VIP's port 80: Stator does not rewrite ports (direct server return), the backend \
             receives port 80; the backend port only sets the health-check port and the stable name",
            "t.toml:40:14: warning: vip[0].table_size: table_size 13 is less than 100 x 2 backends: \
             Maglev keeps weight shares within 1% only when table_size >= 100 x backends",
        ]
    );
}

#[test]
fn every_error_is_reported_in_document_order() {
    let r = report(
        r#"
[[pool]]
name = "web"
include = ["nope"]
[[pool.backend]]
address = "10.1.1.1/24"

[[vip]]
address = "192.0.2.300"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = 100
"#,
    );
    let errors: Vec<String> = r.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        errors,
        [
            "pool[0].include[0]: no pool is named \"nope\"; defined pools: web",
            "pool[0].backend[0].address: \"10.1.1.1/24\" is not an IP address (write the address \
             without a prefix length)",
            "vip[0].address: \"192.0.2.300\" is not an IP address",
            "vip[0].table_size: 100 is not prime; the nearest primes are 97 and 101",
        ]
    );
    let lines: Vec<usize> = r.errors.iter().map(|e| e.location.unwrap().line).collect();
    assert_eq!(lines, [11, 13, 16, 20]);
    assert!(r.to_string().ends_with("t.toml: 4 errors\n"));
}

/// `[[pool]] web` with `n` backends and `vips` VIPs on it, tables of `table_size`.
fn big(n: usize, vips: usize, table_size: u32) -> String {
    let mut text =
        format!("{HEADER}\n[[pool]]\nname = \"web\"\n[pool.health]\nmethod = \"none\"\n");
    for i in 0..n {
        text += &format!(
            "[[pool.backend]]\naddress = \"10.{}.{}.{}\"\n",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        );
    }
    for i in 0..vips {
        text += &format!(
            "[[vip]]\naddress = \"192.0.{}.{}\"\nport = 80\nprotocol = \"tcp\"\npools = [\"web\"]\ntable_size = {table_size}\n",
            2 + (i >> 8),
            i & 255
        );
    }
    text
}

#[test]
fn counts_beyond_the_compiled_limits() {
    let r = check_str("t.toml", &big(1, 1025, 7));
    assert_eq!(
        r.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        ["vip: VIPs: 1025 exceeds STATOR_MAX_VIPS = 1024"]
    );
    // 2 VIPs x 32769 backends = 65538 (VIP, backend) pairs.
    let r = check_str("t.toml", &big(32769, 2, 65537));
    assert_eq!(
        r.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        ["vip: (VIP, backend) pairs: 65538 exceeds STATOR_MAX_REALS = 65536"]
    );
    // Exactly at the limits is fine.
    assert!(check_str("t.toml", &big(1, 1024, 7)).is_ok());
    assert!(check_str("t.toml", &big(32768, 2, 65537)).is_ok());
}

#[test]
fn exit_code_and_json() {
    let bad = check_str("bad.toml", "[node]\nname = 1\n");
    assert!(!bad.is_ok());
    assert_eq!(bad.exit_code(), 1);
    assert!(!bad.errors.is_empty());
    let json = serde_json::to_value(&bad).unwrap();
    assert_eq!(json["ok"], false);
    assert_eq!(json["errors"][0]["path"], "node.name");
    assert_eq!(json["errors"][0]["location"]["line"], 2);
    assert_eq!(
        json["errors"][0]["message"],
        "invalid type: integer `1`, expected a string"
    );

    let good = report(
        "[[pool]]\nname = \"w\"\n[[pool.backend]]\naddress = \"10.1.1.1\"\nport = 80\n\
         [[vip]]\naddress = \"192.0.2.1\"\nport = 80\nprotocol = \"tcp\"\npools = [\"w\"]\n",
    );
    assert_eq!(good.exit_code(), 0);
    let json = serde_json::to_value(&good).unwrap();
    assert_eq!(json["summary"]["vips"][0]["name"], "tcp/192.0.2.1:80");
    assert_eq!(json["summary"]["health_checks"], 1);

    let missing = check_file(Path::new("/nonexistent/stator.toml"));
    assert_eq!(missing.exit_code(), 1);
    assert!(
        missing.errors[0]
            .message
            .starts_with("cannot read /nonexistent/stator.toml: "),
        "{}",
        missing.errors[0].message
    );
}

#[test]
fn config_errors_display_every_line() {
    let e = from_toml_str("x.toml", "[node]\nname = \"a b\"\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.toml:1:1: error: node.address_v4: missing: set node.address_v4 and/or node.address_v6 \
         (the outer source addresses of encapsulated packets; a proxy-only node, [dataplane] mode \
         = \"none\", needs neither)\n\
         x.toml:2:8: error: node.name: \"a b\" is not a valid name (1-63 letters, digits, '.', \
         '_' or '-', starting with a letter or digit)\n\
         x.toml: error: dataplane: missing: add a [dataplane] table with interfaces = [\"eth0\"] \
         (the interfaces to forward on), or mode = \"none\" for a proxy-only node (listeners, no \
         packet forwarder)"
    );
}

#[test]
fn shipped_examples_are_valid_and_quiet() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let r = check_file(&path);
            assert!(r.is_ok() && r.warnings.is_empty(), "{r}");
            checked += 1;
        }
    }
    assert!(checked >= 2, "examples/ has {checked} .toml files");
    let full = stator_config::load_file(&dir.join("stator.toml")).unwrap();
    let v6: IpAddr = "2001:db8:2::11".parse().unwrap();
    assert!(
        full.backends.iter().any(|b| b.address == v6),
        "IPv6 backend behind IPv4 VIP"
    );
    assert!(full.vips.iter().any(|v| v.key.addr.is_ipv6()));
    assert!(full.bgp.is_some());
}

#[test]
fn listeners_resolve_upstreams_ports_and_defaults() {
    let c = stator_config::from_toml_str(
        "t.toml",
        r#"
[node]
name = "p1"
[dataplane]
mode = "none"
[[pool]]
name = "inner"
[[pool.backend]]
address = "10.1.1.3"
weight = 0
[pool.health]
method = "none"
[[pool]]
name = "web"
include = ["inner"]
[[pool.backend]]
address = "10.1.1.2"
port = 81
weight = 3
[[pool.backend]]
address = "10.1.1.1"
port = 80
[[listener]]
address = "0.0.0.0:8080"
protocol = "http"
pool = "web"
backend_port = 9000
persistence = "10m"
[[listener]]
name = "raw"
address = "[::]:9000"
protocol = "tcp"
pool = "web"
backend_port = 9001
steering = "source"
scheduler = "least_conn"
workers = 3
persistence = "0s"
[listener.timeouts]
idle = "5m"
"#,
    )
    .unwrap();
    assert_eq!(c.dataplane.mode, stator_config::DataplaneMode::None);
    assert!(c.dataplane.interfaces.is_empty() && c.vips.is_empty());
    let (web, raw) = (&c.listeners[0], &c.listeners[1]);
    assert_eq!(web.name, "http/0.0.0.0:8080");
    assert_eq!(web.scheduler, stator_config::Scheduler::Vnswrr);
    assert_eq!(web.steering, stator_config::Steering::Kernel);
    assert_eq!(web.workers, None);
    assert_eq!(web.retries, 2);
    assert_eq!(web.persistence.unwrap().timeout.as_secs(), 600);
    assert_eq!(web.persistence.unwrap().max_entries, 65536);
    assert_eq!(web.http.forwarded_for, stator_config::ForwardedMode::Append);
    assert_eq!(web.http.forwarded, stator_config::ForwardedMode::Off);
    assert!(web.http.trusted_proxies.is_empty());
    assert_eq!(web.timeouts.client_read.as_secs(), 60);
    assert_eq!(web.timeouts.upstream_write.as_secs(), 60);
    // a listener without [listener.timeouts] gets the type's Default, which the proxy tier
    // uses as is (stator_proxy::Timeouts)
    assert_eq!(web.timeouts, stator_config::ListenerTimeouts::default());
    // Sorted by stable name; a member's own port wins over backend_port; weights kept.
    let ups: Vec<(String, u16, u32)> = web
        .upstreams
        .iter()
        .map(|u| (c.backend(u.backend).name.clone(), u.port, u.weight))
        .collect();
    assert_eq!(
        ups,
        [
            ("10.1.1.1:80".to_string(), 80, 1),
            ("10.1.1.2:81".to_string(), 81, 3),
            ("10.1.1.3".to_string(), 9000, 0)
        ]
    );
    assert_eq!(raw.upstreams[2].port, 9001);
    assert_eq!(raw.protocol, stator_config::ListenerProtocol::Tcp);
    assert_eq!(raw.steering, stator_config::Steering::Source);
    assert_eq!(raw.scheduler, stator_config::Scheduler::LeastConn);
    assert_eq!(raw.workers, Some(3));
    assert_eq!(raw.persistence, None);
    assert_eq!(raw.timeouts.idle.as_secs(), 300);
    assert_eq!(raw.timeouts.connect.as_secs(), 5);
    let r = check_str(
        "t.toml",
        "[node]\nname = \"p\"\n[dataplane]\nmode = \"none\"\n",
    );
    assert!(r.is_ok(), "{r}");
    assert!(r.to_string().contains("data plane none"), "{r}");
}

/// `steering = "cpu"` with `[receive_steering]`: defaults, the workers left to the CPUs, and
/// what `stator check` says the host needs.
#[test]
fn receive_steering_defaults_and_what_check_says() {
    let text = r#"
[node]
name = "p1"
[dataplane]
mode = "none"
[receive_steering]
interfaces = ["eth0", "lo"]
[[pool]]
name = "web"
[[pool.backend]]
address = "10.1.1.3"
port = 80
[pool.health]
method = "none"
[[listener]]
name = "h"
address = "0.0.0.0:8080"
protocol = "http"
pool = "web"
steering = "cpu"
"#;
    let c = stator_config::from_toml_str("t.toml", text).unwrap();
    let r = c.receive_steering.as_ref().unwrap();
    assert_eq!(r.interfaces, ["eth0", "lo"]);
    assert_eq!(r.cpus, None);
    assert_eq!(r.xdp_mode, stator_config::types::ReceiveXdpMode::Generic);
    assert_eq!(r.queue_size, 2048);
    assert_eq!(c.listeners[0].steering, stator_config::Steering::Cpu);
    assert_eq!(c.listeners[0].workers, None);
    let report = check_str("t.toml", text);
    assert!(report.is_ok(), "{report}");
    let out = report.to_string();
    assert!(
        out.contains("steering cpu")
            && out.contains("receive steering: XDP (generic) on eth0, lo")
            && out.contains("listeners (h) pinned one per CPU on every CPU the node may run on")
            && out.contains("root (CAP_BPF, CAP_NET_ADMIN)"),
        "{out}"
    );
}

/// The stall timeouts and the forwarding-header modes as written, old booleans included.
#[test]
fn listener_stall_timeouts_and_forwarding_modes() {
    let listener = |http: &str| {
        let c = stator_config::from_toml_str(
            "t.toml",
            &format!(
                r#"
[node]
name = "p1"
[dataplane]
mode = "none"
[[pool]]
name = "web"
[[pool.backend]]
address = "10.1.1.1"
port = 80
[[listener]]
address = "0.0.0.0:8080"
protocol = "http"
pool = "web"
[listener.timeouts]
client_read = "1s"
client_write = "2s"
upstream_read = "3s"
upstream_write = "4s"
[listener.http]
{http}
"#
            ),
        )
        .unwrap();
        c.listeners[0].clone()
    };
    use stator_config::ForwardedMode::{Append, Off, Replace};
    let l = listener("forwarded_for = true\nforwarded = false");
    assert_eq!((l.http.forwarded_for, l.http.forwarded), (Append, Off));
    assert_eq!(
        [
            l.timeouts.client_read,
            l.timeouts.client_write,
            l.timeouts.upstream_read,
            l.timeouts.upstream_write
        ]
        .map(|d| d.as_secs()),
        [1, 2, 3, 4]
    );
    let l = listener("forwarded_for = false\nforwarded = true");
    assert_eq!((l.http.forwarded_for, l.http.forwarded), (Off, Append));
    let l = listener(
        "forwarded_for = \"replace\"\nforwarded = \"off\"\n\
         trusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\"]",
    );
    assert_eq!((l.http.forwarded_for, l.http.forwarded), (Replace, Off));
    let p: Vec<String> = l
        .http
        .trusted_proxies
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(p, ["10.0.0.0/8", "2001:db8::/32"]);
}

/// Fragments, failover, classes and the tracer as a node forwards with them: the peers with
/// this node found among them, the VIP's group and failover, the node parameters.
#[test]
fn fragments_classes_failover_and_the_tracer() {
    let c = config(
        r#"
[fragments]
peers = ["10.0.0.11", "10.0.0.10", "10.0.0.12"]
timeout = "3s"
hold_frames = 64
[tracer]
reports_per_sec = 7
key_file = "/etc/stator/trace.key"
receivers = ["10.9.0.0/16", "2001:db8:9::/48"]
[[vip_class]]
name = "web"
prefixes = ["10.100.0.0/16", "2001:db8:100::/48"]
suffix_bits_v6 = 80
[[pool]]
name = "web"
[[pool.backend]]
address = "10.1.1.1"
port = 80
[[vip]]
address = "10.100.1.1"
port = 80
protocol = "udp"
pools = ["web"]
class = "web"
fragments = true
failover = "10.100.2.1"
[[vip]]
address = "2001:db8:100:1::1"
port = 80
protocol = "tcp"
pools = ["web"]
class = "web"
suffix_bits = 64
[[vip]]
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["web"]
"#,
    );
    let f = &c.fragments;
    assert_eq!(f.peers.len(), 3);
    assert_eq!(f.self_index, Some(1), "10.0.0.10 is node.address_v4");
    assert_eq!((f.timeout, f.hold_frames), (Duration::from_secs(3), 64));
    assert_eq!(c.tracer.reports_per_sec, 7);
    assert!(c.tracer.enabled());
    assert_eq!(
        c.tracer
            .receivers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["10.9.0.0/16", "2001:db8:9::/48"]
    );
    assert_eq!(c.classes.len(), 1);
    assert_eq!(c.classes[0].prefixes.len(), 2);
    let v = &c.vips;
    assert!(v[0].flags.fragments && !v[1].flags.fragments && !v[2].flags.fragments);
    assert_eq!(v[0].failover, Some("10.100.2.1".parse::<IpAddr>().unwrap()));
    assert_eq!(v[0].group.map(|g| (g.class, g.bits)), Some((0, 8)));
    assert_eq!(
        v[1].group.map(|g| g.bits),
        Some(64),
        "the VIP's own length wins"
    );
    assert_eq!(v[2].group, None);
    let n = c.node_params();
    assert_eq!((n.frag_timeout_ns, n.trace_per_sec), (3_000_000_000, 7));
}

#[test]
fn afxdp_threading_defaults_to_the_papers_steered_design_and_reads_run_to_completion() {
    use stator_config::AfxdpThreading;
    let c = config("");
    assert_eq!(c.dataplane.afxdp.threading, AfxdpThreading::Steered);
    // run to completion: one CPU per thread, no I/O thread
    let c = config(
        "[dataplane.afxdp]\nthreading = \"run_to_completion\"\npacket_threads = 2\nqueues = 2\n\
         cpus = [0, 1]\n",
    );
    let a = &c.dataplane.afxdp;
    assert_eq!(a.threading, AfxdpThreading::RunToCompletion);
    assert_eq!((a.packet_threads, a.queues, a.cpus.len()), (2, Some(2), 2));
}
