//! Neighbour nudges: a backend without a health check still gets its neighbour entry
//! resolved (the XDP forwarder's FIB lookups need it and cannot resolve it themselves).
//! Needs two network namespaces joined by a veth; the rest of the health checks run without
//! root in `node/health.rs`.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::common::netns::Lab;
use crate::common::runtime;
use stator_config::HealthPlan;
use stator_health::Runner;
use tokio::sync::mpsc;

#[test]
fn unchecked_backends_get_their_neighbour_resolved() {
    let lab = Lab::new("neigh", 216);
    let peer = stator_lab::netns::Netns::create(&format!("{}p", lab.ns.name())).unwrap();
    stator_lab::netns::veth(&lab.ns, "v0", &peer, "v1").unwrap();
    lab.ns.addr_add("v0", "10.217.0.1/24").unwrap();
    peer.addr_add("v1", "10.217.0.2/24").unwrap();
    let backend: IpAddr = "10.217.0.2".parse().unwrap();
    let ns = lab.ns.clone();
    let neigh = move || {
        ns.ip(["neigh", "show", "10.217.0.2", "dev", "v0"])
            .unwrap_or_default()
    };
    assert!(!neigh().contains("lladdr"), "no entry before: {}", neigh());
    let check = neigh.clone();
    let took = lab.run(move || {
        let rt = runtime();
        rt.block_on(async move {
            let (tx, _rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            let start = Instant::now();
            runner.apply(&HealthPlan::default(), vec![backend]);
            // The first nudge goes out at once; wait (bounded) for the kernel to resolve.
            while !check().contains("lladdr") && start.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            start.elapsed()
        })
    });
    let entry = neigh();
    println!(
        "neighbour of an unchecked backend resolved after {took:?}: {}",
        entry.trim()
    );
    assert!(entry.contains("lladdr"), "the nudge resolved it: {entry:?}");
    let _ = peer.delete();
}
