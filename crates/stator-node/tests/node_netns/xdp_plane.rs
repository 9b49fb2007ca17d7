//! Smoke tests of the controller over the real XDP forwarder (loaded on pins of a private
//! bpffs, not attached): one per path the core-plane tests cover in depth — commit and read
//! back from the pinned maps (with a restart over the pins and a commit the maps refuse),
//! and the admin API with the counters and the tracer reading the program's maps. Health
//! probes go to real servers on loopback (probe routes), so no namespace is needed.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::common::netns::{Pins, active_snapshot, xdp_options};
use crate::common::sim::{self, backend};
use crate::common::{TcpServer, prom, wait_until};
use stator_api::client::ApiClient;
use stator_core::{RealId, RealState, Snapshot};
use stator_health::ProbeRoutes;
use stator_testkit::{Packet, tcp_flags};
use stator_xdp::Forwarder;
use stator_xdp::XdpPlane;
use stator_xdp::testrun::TestRunOpts;

const SECS: Duration = Duration::from_secs(10);

/// VIPs `192.0.2.<vip>:80/tcp` over pools of backends `198.51.100.<host>:8080` (TCP checks
/// every 100 ms, rise 1, fall 1), tables of 251; the data plane's pins at `pins`.
fn config(pins: &Pins, vips: &[(u8, &[u8])], extra: &str) -> String {
    let mut t = format!(
        "[node]\nname = \"t\"\naddress_v4 = \"{}\"\n[dataplane]\ninterfaces = [\"sim0\"]\n\
         pin_path = \"{}\"\nconntrack = \"shared\"\nconntrack_entries = 4096\n\
         slots_per_generation = 4194304\n{extra}\n",
        sim::NODE,
        pins.path.display()
    );
    for (vip, hosts) in vips {
        t += &format!(
            "[[pool]]\nname = \"p{vip}\"\n[pool.health]\ninterval = \"100ms\"\n\
             timeout = \"50ms\"\nrise = 1\nfall = 1\n"
        );
        for h in *hosts {
            t += &format!(
                "[[pool.backend]]\naddress = \"{}\"\nport = 8080\nid = \"b{h}\"\n",
                backend(*h)
            );
        }
    }
    for (vip, _) in vips {
        t += &format!(
            "[[vip]]\nname = \"v{vip}\"\naddress = \"192.0.2.{vip}\"\nport = 80\n\
             protocol = \"tcp\"\npools = [\"p{vip}\"]\ntable_size = 251\n"
        );
    }
    t
}

/// Servers on loopback for backends `hosts` and the routes to them.
fn servers(hosts: &[u8]) -> (Vec<TcpServer>, ProbeRoutes) {
    let servers: Vec<TcpServer> = hosts
        .iter()
        .map(|_| TcpServer::start("127.0.0.1:0"))
        .collect();
    let pairs: Vec<(IpAddr, u16, SocketAddr)> = hosts
        .iter()
        .zip(&servers)
        .map(|(h, s)| (backend(*h), 8080, s.addr))
        .collect();
    (servers, sim::routes(&pairs))
}

fn real_ids(s: &Snapshot) -> BTreeMap<IpAddr, RealId> {
    s.reals.iter().map(|(id, r)| (r.addr, *id)).collect()
}

#[test]
fn commit_read_back_a_refused_commit_and_a_restart_over_the_pins() {
    let pins = Pins::new("commit");
    let (_servers, routes) = servers(&[2, 3, 4]);
    let keep = "on_exit = \"keep\"";
    let a = config(&pins, &[(1, &[2, 3])], keep);
    let b = config(&pins, &[(1, &[3, 4]), (2, &[2])], keep);
    let three = config(&pins, &[(1, &[3, 4]), (2, &[2]), (3, &[2])], keep);
    // The maps hold 600 slots per generation: two tables of 251 fit, three do not.
    let opts = xdp_options(&pins.path, 600);
    let rt = common::runtime();
    let plane = XdpPlane::load(&opts).unwrap();
    let node = rt
        .block_on(sim::start_with(&a, Box::new(plane), routes.clone()))
        .unwrap();
    let built = |n: &stator_node::Node| (*n.view().built.as_ref().unwrap().snapshot).clone();
    // The view is published right after each commit returns.
    let same = |n: &stator_node::Node| {
        wait_until(
            "the maps to hold what the view says was committed",
            SECS,
            || active_snapshot(&pins.path) == built(n),
        );
    };
    same(&node);
    let first = real_ids(&active_snapshot(&pins.path));

    rt.block_on(node.apply(b.clone(), "b".into(), None))
        .unwrap();
    wait_until(
        "every real usable",
        std::time::Duration::from_secs(10),
        || {
            let s = active_snapshot(&pins.path);
            s.reals.len() == 3 && s.reals.values().all(|r| r.state == RealState::Usable)
        },
    );
    same(&node);
    let second = active_snapshot(&pins.path);
    assert_eq!(
        real_ids(&second)[&backend(3)],
        first[&backend(3)],
        "a kept pair keeps its id"
    );

    let err = rt
        .block_on(node.apply(three, "three".into(), None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("commit") && err.contains("slots"), "{err}");
    assert_eq!(
        active_snapshot(&pins.path),
        second,
        "the old snapshot forwards"
    );

    // A restart over the same pins: ids seeded from the maps.
    rt.block_on(node.shutdown()).unwrap();
    let plane = XdpPlane::load(&opts).unwrap();
    let node = rt
        .block_on(sim::start_with(&b, Box::new(plane), routes))
        .unwrap();
    let after = active_snapshot(&pins.path);
    assert_eq!(
        real_ids(&after),
        real_ids(&second),
        "a restart keeps every id"
    );
    assert!(after.generation > second.generation);
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn the_api_counters_and_tracer_read_the_programs_maps() {
    let pins = Pins::new("api");
    let (_servers, routes) = servers(&[2, 3]);
    let cfg = config(&pins, &[(10, &[2, 3])], "");
    let opts = xdp_options(&pins.path, 1 << 16);
    let rt = common::runtime();
    let plane = XdpPlane::load(&opts).unwrap();
    let node = rt
        .block_on(sim::start_with(&cfg, Box::new(plane), routes))
        .unwrap();
    let api = ApiClient::unix(node.api_socket());
    let status = api.get_json("/v1/status").unwrap();
    assert_eq!(status["forwarder"]["kind"], "xdp");
    assert_eq!(status["phase"], "running");

    // A SYN to the backend b2 through the program (a second handle on the same pins).
    let snap = active_snapshot(&pins.path);
    let vip = snap.vips.values().next().unwrap();
    let b2 = real_ids(&snap)[&backend(2)].0;
    let sport = (40_000..50_000u16)
        .find(|p| {
            let h = stator_hash::flow_hash_v4([198, 51, 100, 7], [192, 0, 2, 10], *p, 80, 6);
            vip.table[(h % vip.table.len() as u32) as usize] == b2
        })
        .unwrap();
    let client: IpAddr = "198.51.100.7".parse().unwrap();
    let vip_addr: IpAddr = "192.0.2.10".parse().unwrap();
    let probe = Forwarder::load(&opts).unwrap();
    let frame = Packet::tcp(client, sport, vip_addr, 80, tcp_flags::SYN).frame();
    let out = probe.test_run(&frame, TestRunOpts::default()).unwrap();
    assert_ne!(out.action, 2, "forwarded, not passed");

    // The tracer finds the program's connection-table entry, and keeps it through a drain.
    api.post_json("/v1/backends/b2/drain", None).unwrap();
    let t = api
        .get_json(&format!("/v1/trace?vip=v10&src=198.51.100.7&sport={sport}"))
        .unwrap();
    assert_eq!(t["decision"], "conntrack", "{t}");
    assert_eq!(t["backend"]["id"], "b2");
    assert_ne!(t["maglev"]["backend"]["id"], "b2", "{t}");

    // The counters are the program's.
    let text = api
        .request("GET", "/metrics", &[], &[])
        .unwrap()
        .ok()
        .unwrap()
        .text();
    let samples = prom::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        prom::value(&samples, "stator_conntrack_inserts_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        prom::value(&samples, "stator_vip_packets_total", &[("vip", "v10")]),
        Some(1.0)
    );
    rt.block_on(node.shutdown()).unwrap();
}
