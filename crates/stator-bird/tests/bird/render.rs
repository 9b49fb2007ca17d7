//! The file Stator writes for BIRD, compared with golden text in `tests/golden/`, and checked
//! by BIRD itself (`bird -p`) inside a minimal node configuration.
//!
//! After an intended change of the output, `BLESS=1 cargo test -p stator-bird --test bird -- render::`
//! rewrites the golden files — then read the diff line by line before committing it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use stator_bird::{DesiredRoutes, render};
use stator_config::{Bgp, from_toml_str};

const NODE: &str = r#"
[node]
name = "lb1"
address_v4 = "10.0.0.10"
address_v6 = "2001:db8:0:1::10"
[dataplane]
interfaces = ["eth0"]
"#;

fn bgp(toml: &str) -> Bgp {
    let config = from_toml_str("t.toml", &format!("{NODE}{toml}")).unwrap();
    config.bgp.expect("a [bgp] table")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Every option Stator renders.
fn full() -> (Bgp, DesiredRoutes) {
    let bgp = bgp(r#"
[bgp]
local_as = 65010
router_id = "10.0.0.10"
bird_config = "/etc/bird/stator.conf"
communities = ["65010:100", "65010:200"]
bfd_interval = "100ms"
bfd_multiplier = 3

[[bgp.neighbor]]
name = "tor1_v4"
address = "10.0.0.1"
remote_as = 65000
source_address = "10.0.0.10"
hold_time = "9s"
keepalive = "3s"
connect_retry = "5s"
error_wait = "5s"
bfd = true

[[bgp.neighbor]]
name = "tor1_v6"
address = "2001:db8:0:1::1"
remote_as = 65000

[[bgp.neighbor]]
name = "rr1"
address = "10.9.0.1"
remote_as = 65010
source_address = "10.0.0.10"
multihop = 4
bfd = true
error_wait = "600s"
next_hop_self = false
"#);
    let routes = DesiredRoutes::from_vips([
        (ip("192.0.2.10"), true),
        (ip("192.0.2.53"), false),
        (ip("2001:db8:100::10"), true),
    ]);
    (bgp, routes)
}

/// BIRD's defaults everywhere, no VIPs yet.
fn minimal() -> (Bgp, DesiredRoutes) {
    let bgp = bgp(r#"
[bgp]
local_as = 65010
[[bgp.neighbor]]
address = "10.0.0.1"
remote_as = 65000
"#);
    (bgp, DesiredRoutes::new())
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.conf"))
}

fn check_golden(name: &str, text: &str) {
    let path = golden(name);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (BLESS=1 creates it)", path.display()));
    if want != text {
        for (i, (w, g)) in want.lines().zip(text.lines()).enumerate() {
            assert_eq!(w, g, "{name}.conf line {}", i + 1);
        }
        assert_eq!(want, text, "{name}.conf");
    }
}

#[test]
fn golden_full() {
    let (bgp, routes) = full();
    check_golden("full", &render(&bgp, &routes));
}

#[test]
fn golden_minimal() {
    let (bgp, routes) = minimal();
    check_golden("minimal", &render(&bgp, &routes));
}

#[test]
fn only_disabled_lines_depend_on_vip_states() {
    let (bgp, routes) = full();
    let announced = render(&bgp, &routes);
    let withdrawn = render(&bgp, &routes.withdrawn());
    let differ: Vec<(&str, &str)> = announced
        .lines()
        .zip(withdrawn.lines())
        .filter(|(a, w)| a != w)
        .collect();
    assert_eq!(differ.len(), 2, "{differ:?}");
    assert!(
        differ
            .iter()
            .all(|(a, w)| a.trim().starts_with("disabled no")
                && w.trim().starts_with("disabled yes"))
    );
}

#[test]
fn bgp_protocols_do_not_depend_on_the_vips() {
    let (bgp, routes) = full();
    let sessions = |text: &str| -> String {
        text.split("\n\n")
            .filter(|block| block.starts_with("protocol bgp"))
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    let mut more = routes.clone();
    more.add(ip("192.0.2.99"), true);
    let a = render(&bgp, &routes);
    let b = render(&bgp, &more);
    assert_ne!(a, b);
    assert_eq!(sessions(&a), sessions(&b));
    assert_eq!(sessions(&a).matches("protocol bgp").count(), 3);
}

/// BIRD parses the rendered file inside a node configuration (`bird -p`, no root needed).
#[test]
fn bird_accepts_the_rendered_files() {
    assert!(
        Command::new("bird").arg("--version").output().is_ok(),
        "BIRD 2 is not installed (Debian: apt-get install bird2, or `make test-deps`)"
    );
    let dir = stator_testkit::scratch::unique_path("stator-bird-render", "");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, (bgp, routes)) in [("full", full()), ("minimal", minimal())] {
        let include = dir.join(format!("{name}.conf"));
        std::fs::write(&include, render(&bgp, &routes)).unwrap();
        let main = dir.join(format!("{name}-bird.conf"));
        std::fs::write(
            &main,
            format!(
                "router id 10.0.0.10;\nprotocol device {{}}\ninclude \"{}\";\n",
                include.display()
            ),
        )
        .unwrap();
        let out = Command::new("bird")
            .arg("-p")
            .arg("-c")
            .arg(&main)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bird -p rejected {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
