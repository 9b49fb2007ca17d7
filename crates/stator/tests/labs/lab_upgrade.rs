//! A rolling upgrade of every node of a deployment, twice (`stator upgrade`: docs/operations.md,
//! "Upgrades"), with long-lived TCP connections through the XDP forwarders exchanging data
//! and kept-alive HTTP clients on the nodes' proxy listeners: the router never loses a node's
//! route (the replaced process withdraws nothing), the XDP program goes on forwarding while
//! each successor swaps its own in over the pinned maps, no connection is lost or answered by
//! another backend, and no HTTP request fails. Needs root.
//!
//! And the rolling restart of `lab_second_chance`'s test 14 done as upgrades, while backends
//! join one by one: nothing lost.
//!
//! Prefixes `stfe-` and `stfh-`, subnets 214 and 217.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::io::{BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stator_lab::bird::kernel_next_hops;
use stator_lab::deploy::{Deployment, LISTENER_PORT};

use crate::common::upgrade::response_body;
use crate::lab_failures::{EXCHANGE, Lab, open, per_backend_text, wait_usable};

/// Kept-alive HTTP requests to `to` until `stop`, from the thread's namespace: (answered,
/// failures).
fn keepalive(to: SocketAddr, stop: &AtomicBool) -> (u64, Vec<String>) {
    let (mut ok, mut failures) = (0, Vec::new());
    let mut conn: Option<BufReader<TcpStream>> = None;
    while !stop.load(Ordering::Relaxed) {
        let r = (|| -> std::io::Result<bool> {
            if conn.is_none() {
                let s = TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                conn = Some(BufReader::new(s));
            }
            let c = conn.as_mut().expect("connected");
            c.get_mut()
                .write_all(b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n")?;
            // (the body names the backend that answered)
            response_body(c).map(|(close, _)| close)
        })();
        match r {
            Ok(close) => {
                ok += 1;
                if close {
                    conn = None;
                }
            }
            Err(e) => {
                failures.push(e.to_string());
                conn = None;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (ok, failures)
}

#[test]
fn a_rolling_upgrade_of_every_node_loses_no_connection_and_no_route() {
    const CONNS: usize = 200;
    let mut lab = Lab::up("stfe-", 214, |_| {});
    let d = lab.d();
    let mut ll = open(d, false, CONNS);
    println!(
        "{CONNS} echo connections: per backend {}",
        per_backend_text(&ll.per_backend())
    );
    let nodes: Vec<IpAddr> = (0..d.nodes.len())
        .map(|j| d.nodes[j].host.addr(false))
        .collect();
    assert_eq!(d.routed_nodes(false).unwrap().len(), nodes.len());

    // the router's route, watched the whole time: a node's next hop must never go missing
    let stop = Arc::new(AtomicBool::new(false));
    let router = d.router().clone();
    let prefix = format!("{}/32", Deployment::vip(false));
    let watched = {
        let stop = Arc::clone(&stop);
        let nodes = nodes.clone();
        std::thread::spawn(move || {
            let (mut samples, mut missing) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                if let Ok(hops) = kernel_next_hops(&router, &prefix) {
                    samples += 1;
                    for n in nodes.iter().filter(|n| !hops.contains(n)) {
                        missing.push(*n);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (samples, missing)
        })
    };
    // a kept-alive HTTP client on each node's listener, from the client's namespace
    let clients: Vec<_> = nodes
        .iter()
        .map(|&n| {
            let stop = Arc::clone(&stop);
            d.client()
                .ns
                .spawn_thread(move || keepalive(SocketAddr::new(n, LISTENER_PORT), &stop))
                .unwrap()
        })
        .collect();

    let t0 = Instant::now();
    for round in 0..2 {
        for j in 0..d.nodes.len() {
            let before = d.nodes[j].run.pid();
            let pid = d
                .node_upgrade(j)
                .unwrap_or_else(|e| panic!("round {round}, n{j}: {e}"));
            assert_ne!(Some(pid), before, "n{j} runs a new process");
            // (a request the replaced process accepted just before it stopped accepting is
            // answered by it, `stopping`: asked again)
            let started = Instant::now();
            loop {
                let status = d.api(j, "GET", "/v1/status").unwrap().body;
                if status.contains("\"phase\":\"running\"") && status.contains("\"healthy\":true") {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "n{j} after its upgrade: {status}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            // the connections keep flowing between upgrades
            let r = ll.round(&format!("r{round}n{j}"), 8, EXCHANGE);
            assert_eq!(
                (r.failed, r.other_backend),
                (0, 0),
                "after n{j}'s upgrade (round {round}): {:?}",
                r.first_error
            );
        }
    }
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (samples, missing) = watched.join().unwrap();
    let mut requests = 0;
    for (j, (n, c)) in nodes.iter().zip(clients).enumerate() {
        let (ok, failures) = c.join().unwrap();
        if !failures.is_empty() {
            println!("--- n{j}'s log ---\n{}", d.nodes[j].run.log_tail(200));
        }
        assert!(
            failures.is_empty() && ok > 0,
            "HTTP through {n}'s listener across its upgrades: {ok} ok, failures {failures:?}"
        );
        requests += ok;
    }
    let alive = ll.conns.iter().filter(|c| c.alive).count();
    println!(
        "6 upgrades in {took:.1?}: {alive}/{CONNS} connections alive, {requests} HTTP requests \
         through the listeners, none failed; the route sampled {samples} times, a node missing \
         {} times",
        missing.len()
    );
    assert!(samples > 10, "the route was watched");
    assert!(
        missing.is_empty(),
        "a node's route went missing: {missing:?}"
    );
    assert_eq!(alive, CONNS, "no connection lost");
    lab.finish();
}

/// The rolling restart of `lab_second_chance`'s test 14 done as upgrades: every node replaced
/// (`stator upgrade`) while backends join one by one — b3 before n0's upgrade, b4 before
/// n1's — with 300 long-lived connections exchanging after each step. An upgrade withdraws
/// nothing and keeps the node's connection table and program, so no connection moves between
/// nodes and the table changes never reach one: none is lost (where test 14's stop-and-start
/// loses those that saw two changes).
#[test]
fn a_rolling_upgrade_while_backends_join_one_by_one_loses_nothing() {
    const CONNS: usize = 300;
    let mut lab = Lab::up("stfh-", 217, |s| {
        s.backends = 5;
        s.weights = vec![1; 5];
    });
    let d = lab.d();
    d.set_in_config(3, false);
    d.set_in_config(4, false);
    d.reload_all().unwrap();
    let mut ll = open(d, false, CONNS);
    for j in 0..d.nodes.len() {
        if let Some(k) = (j < 2).then_some(3 + j) {
            d.set_in_config(k, true);
            d.reload_all().unwrap();
            wait_usable(d, k);
        }
        d.node_upgrade(j)
            .unwrap_or_else(|e| panic!("n{j}'s upgrade: {e}"));
        let r = ll.round(&format!("n{j} upgraded"), 8, EXCHANGE);
        println!(
            "step {j}: n{j} upgraded: {}/{CONNS} alive, {} failed, {} by another backend",
            ll.alive(),
            r.failed,
            r.other_backend
        );
        assert_eq!(
            (r.failed, r.other_backend),
            (0, 0),
            "after n{j}'s upgrade: {:?}",
            r.first_error
        );
    }
    assert_eq!(ll.alive(), CONNS, "no connection lost");
    lab.finish();
}
