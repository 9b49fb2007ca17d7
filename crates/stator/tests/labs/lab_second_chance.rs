//! Second chance end to end (docs/forwarding.md §12, docs/decap.md §7): deployments whose VIPs
//! encapsulate with GUE, whose nodes keep each VIP's previous Maglev table and whose backends
//! pass on what they do not own ([`stator_lab::deploy::DeploySpec::second_chance`]), put
//! through a node change and a backend change at the same moment — the case where Maglev alone
//! breaks connections (test 3 of `lab_failures` measures how many). Real kernel TCP on the
//! backends, long-lived connections exchanging data before and after. Needs root.
//!
//! 11. a node is cut while one backend's weight triples and another leaves the configuration;
//! 12. a node joins while a backend drains;
//! 13. a node is cut while a backend is added (the table changes when it turns healthy).
//!
//! Each test has its own namespace prefix (`stfb-`…`stfd-`) and subnet (211…213).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::time::{Duration, Instant};

use serde_json::Value;
use stator_lab::deploy::Deployment;
use stator_lab::traffic::{LongLived, Round};

use crate::lab_failures::{EXCHANGE, Lab, maglev_choice, nodes_of, open, per_backend_text, plan};

/// The sum over nodes of a `/metrics` sample whose line starts with `prefix`.
fn metric_sum(d: &Deployment, prefix: &str) -> u64 {
    (0..d.nodes.len())
        .filter_map(|j| d.api(j, "GET", "/metrics").ok())
        .flat_map(|a| {
            a.body
                .lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .sum::<f64>() as u64
}

/// What every test asserts at the end: all `n` connections alive and answered by their own
/// backend, and nothing passed on to a backend without the connection's socket.
fn assert_all_kept(d: &Deployment, ll: &LongLived, n: usize, round: &Round) {
    let alive = ll.conns.iter().filter(|c| c.alive).count();
    assert_eq!(alive, n, "no connection lost: {:?}", round.first_error);
    assert_eq!(
        round.other_backend, 0,
        "no connection answered by another backend"
    );
    assert_eq!(
        decap_sum(d, "sc_orphan"),
        0,
        "nothing passed on reached a backend without its socket"
    );
}

/// Prints each backend's non-zero decap counters.
fn print_decap(d: &Deployment) {
    for k in 0..d.backends.len() {
        let v: Value = serde_json::from_str(&d.decap_stats_json(k).unwrap()).unwrap();
        let nonzero: Vec<String> = v["counters"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, n)| n.as_u64() != Some(0))
            .map(|(l, n)| format!("{l} {n}"))
            .collect();
        println!("  b{k} decap: {}", nonzero.join(", "));
    }
}

/// A decap counter summed over every backend.
fn decap_sum(d: &Deployment, label: &str) -> u64 {
    (0..d.backends.len())
        .map(|k| {
            let text = d.decap_stats_json(k).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            v["counters"][label].as_u64().unwrap_or(0)
        })
        .sum()
}

/// 11. Test 3's failure — a node dies while the backends change (b0's weight triples, b3 leaves
///     every node's configuration but keeps serving) — with second chance: the VIPs encapsulate
///     with GUE, the nodes keep each VIP's previous table, the backends pass on what they do not
///     own. Every connection survives, also those the cut node held whose backend Maglev now
///     changes (what test 3 predicts and sees broken), and no connection is answered by another
///     backend. Its counters show the path: the nodes sent second chances, backends passed them
///     on, the previous backends delivered them.
#[test]
fn second_chance_keeps_every_connection_through_a_node_cut_and_a_backend_change() {
    const CONNS: usize = 300;
    const CUT: usize = 2;
    const REMOVED: usize = 3;
    let mut lab = Lab::up("stfb-", 211, |s| s.second_chance = true);
    let d = lab.d();
    let mut ll = open(d, false, CONNS);
    let before_node = nodes_of(d, &ll);
    let on_cut = before_node.values().filter(|&&n| n == CUT).count();
    println!(
        "{CONNS} echo connections: per backend {}; {on_cut} through n{CUT}",
        per_backend_text(&ll.per_backend()),
    );
    assert!(
        on_cut > 0,
        "some connections go through the node that will be cut"
    );

    let t0 = Instant::now();
    d.cut(CUT).unwrap();
    d.set_weight(0, 3);
    d.set_in_config(REMOVED, false);
    let reload = d.reload_all().unwrap();
    let rest: Vec<usize> = (0..3).filter(|&j| j != CUT).collect();
    d.wait_routed(false, &rest, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the router never withdrew n{CUT}: {e}"));
    println!(
        "cut n{CUT}, b0 weight 3, b{REMOVED} out of the configuration: reloaded in {reload:.1?},          n{CUT} withdrawn {:.1?} after the cut",
        t0.elapsed()
    );
    // At risk without second chance: at least every connection of the cut node whose backend
    // Maglev now changes (connections moved between the other nodes are not counted: with
    // second chance they make no entry that would tell where they went).
    let at_risk = ll
        .conns
        .iter()
        .filter(|c| before_node[&c.local] == CUT && maglev_choice(d, rest[0], c) != c.backend)
        .count();
    let (sent0, fwd0) = (
        metric_sum(d, "stator_second_chance_total{event=\"sent\""),
        decap_sum(d, "sc_forwarded"),
    );
    let round = ll.round("after", 8, EXCHANGE);
    let alive = ll.conns.iter().filter(|c| c.alive).count();
    let sent = metric_sum(d, "stator_second_chance_total{event=\"sent\"") - sent0;
    let forwarded = decap_sum(d, "sc_forwarded") - fwd0;
    let delivered = decap_sum(d, "sc_delivered");
    let orphans = decap_sum(d, "sc_orphan");
    println!(
        "after: {alive}/{CONNS} alive (Maglev alone breaks at least {at_risk}); round took \
         {:.1?}, first problem {:?}; second chances sent by the nodes {sent}, passed on by \
         backends {forwarded}, delivered by the previous backends {delivered}, orphans \
         {orphans}",
        round.took, round.first_error
    );
    print_decap(d);
    assert!(at_risk > 0, "the change puts some connections at risk");
    assert_all_kept(d, &ll, CONNS, &round);
    assert!(
        sent > 0 && forwarded > 0 && delivered > 0,
        "the second-chance path ran"
    );
    lab.finish();
}

/// 12. The other way round, with second chance: a node joins (ECMP moves about a third of the
///     connections to it, and it has no entry for any) while a backend drains (weight 0, still
///     serving): the drained backend's connections that land on the new node are sent to a
///     backend of the new table with the drained one named, and passed on to it. Every
///     connection survives.
#[test]
fn second_chance_keeps_every_connection_when_a_node_joins_during_a_drain() {
    const CONNS: usize = 300;
    const JOINS: usize = 2;
    const DRAINED: usize = 1;
    let mut lab = Lab::up("stfc-", 212, |s| s.second_chance = true);
    let d = lab.d();
    d.cut(JOINS).unwrap();
    d.wait_routed(false, &[0, 1], Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the router never withdrew n{JOINS}: {e}"));
    let mut ll = open(d, false, CONNS);
    let on_drained = ll
        .conns
        .iter()
        .filter(|c| c.backend == format!("b{DRAINED}"))
        .count();
    println!(
        "{CONNS} echo connections through n0 and n1: per backend {}",
        per_backend_text(&ll.per_backend())
    );
    let sent = |d: &Deployment, j: usize| {
        d.api(j, "GET", "/metrics")
            .unwrap()
            .body
            .lines()
            .filter(|l| l.starts_with("stator_second_chance_total{event=\"sent\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let before = sent(d, JOINS);
    d.set_weight(DRAINED, 0);
    let reload = d.reload_all().unwrap();
    d.restore(JOINS).unwrap();
    let joined = d
        .wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the router never routed to n{JOINS} again: {e}"));
    let round = ll.round("after", 8, EXCHANGE);
    let alive = ll.conns.iter().filter(|c| c.alive).count();
    let from_new = sent(d, JOINS) - before;
    let orphans = decap_sum(d, "sc_orphan");
    println!(
        "b{DRAINED} drained (weight 0; {on_drained} of its connections) and n{JOINS} back, \
         reloaded in {reload:.1?}, routed again after {joined:.1?}: {alive}/{CONNS} alive; \
         n{JOINS} sent {from_new} second chances; passed on {}, delivered {}, orphans \
         {orphans}; first problem {:?}",
        decap_sum(d, "sc_forwarded"),
        decap_sum(d, "sc_delivered"),
        round.first_error
    );
    assert!(
        on_drained > 0 && from_new > 0,
        "the join put some of b{DRAINED}'s at risk"
    );
    assert_all_kept(d, &ll, CONNS, &round);
    lab.finish();
}

/// 13. A node is cut while a fifth backend joins the configuration: the tables change once,
///     when its health checks pass, and the connections the cut node held whose slot moved to
///     the new backend reach their old one through it. Every connection survives.
#[test]
fn second_chance_keeps_every_connection_through_a_node_cut_and_a_backend_added() {
    node_cut_and_backend_added("stfd-", 213, false);
}

/// 13b. The same over IPv6: an IPv6 VIP, IPv6 clients, and the second chance naming the
///      previous backend's IPv6 address (docs/forwarding.md §12.3, family 6).
#[test]
fn second_chance_keeps_every_ipv6_connection_through_a_node_cut_and_a_backend_added() {
    node_cut_and_backend_added("stfg-", 216, true);
}

fn node_cut_and_backend_added(prefix: &str, subnet: u8, v6: bool) {
    const CONNS: usize = 300;
    const CUT: usize = 2;
    const ADDED: usize = 4;
    let fam = if v6 { "v6" } else { "v4" };
    let echo = if v6 { "echo6" } else { "echo4" };
    let mut lab = Lab::up(prefix, subnet, |s| {
        s.second_chance = true;
        s.backends = 5;
        s.weights = vec![1; 5];
    });
    let d = lab.d();
    d.set_in_config(ADDED, false);
    d.reload_all().unwrap();
    let mut ll = open(d, v6, CONNS);
    let before_node = nodes_of(d, &ll);
    let on_cut = before_node.values().filter(|&&n| n == CUT).count();
    assert!(
        !ll.per_backend().contains_key(&format!("b{ADDED}")),
        "b{ADDED} is not configured yet"
    );
    let t0 = Instant::now();
    d.cut(CUT).unwrap();
    d.set_in_config(ADDED, true);
    let reload = d.reload_all().unwrap();
    let rest: Vec<usize> = (0..3).filter(|&j| j != CUT).collect();
    for &j in &rest {
        stator_lab::wait::wait_until(
            &format!("n{j} to use b{ADDED}"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || plan(d, j, &format!("b{ADDED}-{fam}"), echo).as_deref() == Some("usable"),
        )
        .unwrap();
    }
    d.wait_routed(v6, &rest, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the router never withdrew n{CUT}: {e}"));
    let at_risk = ll
        .conns
        .iter()
        .filter(|c| before_node[&c.local] == CUT && maglev_choice(d, rest[0], c) != c.backend)
        .count();
    let round = ll.round("after", 8, EXCHANGE);
    let alive = ll.conns.iter().filter(|c| c.alive).count();
    println!(
        "{CONNS} {fam} connections ({on_cut} through n{CUT}); cut n{CUT} and added b{ADDED}: \
         reloaded in {reload:.1?}, b{ADDED} usable and n{CUT} withdrawn {:.1?} after the cut; \
         {alive}/{CONNS} alive (Maglev alone breaks at least {at_risk}); second chances sent \
         {}, passed on {}, delivered {}, orphans {}; first problem {:?}",
        t0.elapsed(),
        metric_sum(d, "stator_second_chance_total{event=\"sent\""),
        decap_sum(d, "sc_forwarded"),
        decap_sum(d, "sc_delivered"),
        decap_sum(d, "sc_orphan"),
        round.first_error
    );
    print_decap(d);
    assert!(at_risk > 0, "the change puts some connections at risk");
    assert_all_kept(d, &ll, CONNS, &round);
    lab.finish();
}

/// 14. A rolling restart of every node (SIGTERM, then `stator run` again over the kept maps:
///     `on_exit = "keep"`) while backends join one by one — one joins as each of the first two
///     nodes goes down — with traffic on every connection while each node is down (the
///     router then spreads the down node's connections, and reshuffles some of the others,
///     over nodes without their entries) and again once it is back. The first step changes
///     the tables once since the connections began: second chance keeps every connection.
///     From the second step on a connection may have seen two changes, and a node names only
///     the previous table's backend: the connections whose first backend neither table names
///     any more are lost (measured, printed), never answered by another backend.
#[test]
fn a_rolling_restart_while_backends_join_one_by_one() {
    const CONNS: usize = 300;
    let mut lab = Lab::up("stff-", 215, |s| {
        s.second_chance = true;
        s.keep_on_exit = true;
        s.backends = 5;
        s.weights = vec![1; 5];
    });
    let d = lab.d();
    d.set_in_config(3, false);
    d.set_in_config(4, false);
    d.reload_all().unwrap();
    let mut ll = open(d, false, CONNS);
    println!(
        "{CONNS} echo connections: per backend {}",
        per_backend_text(&ll.per_backend())
    );
    // The table the connections began under must outlive `brief_table` (2 × the health
    // interval) before the first change, or that change keeps the table from before the
    // removal above as the previous one (§12.1's rule for flapping backends)
    std::thread::sleep(Duration::from_millis(1500));
    let mut lost_by_step = Vec::new();
    for j in 0..3 {
        let joined = (j < 2).then_some(3 + j);
        if let Some(k) = joined {
            d.set_in_config(k, true);
            d.reload_all().unwrap();
            crate::lab_failures::wait_usable(d, k);
        }
        let alive_before = ll.alive();
        d.node_stop(j, Duration::from_secs(20)).unwrap();
        let rest: Vec<usize> = (0..3).filter(|&n| n != j).collect();
        d.wait_routed(false, &rest, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("the router never withdrew n{j}: {e}"));
        let down = ll.round(&format!("n{j} down"), 8, EXCHANGE);
        d.node_start(j).unwrap();
        d.wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("the router never routed to n{j} again: {e}"));
        let up = ll.round(&format!("n{j} back"), 8, EXCHANGE);
        let lost = alive_before - ll.alive();
        println!(
            "step {j}: {} n{j} restarted: {lost} lost (while down: {} failed, {} by another \
             backend; back: {} failed); second chances sent {}, passed on {}, orphans {}; \
             first problem {:?}",
            joined.map_or("no backend joined,".to_owned(), |k| format!("b{k} joined,")),
            down.failed,
            down.other_backend,
            up.failed,
            metric_sum(d, "stator_second_chance_total{event=\"sent\""),
            decap_sum(d, "sc_forwarded"),
            decap_sum(d, "sc_orphan"),
            down.first_error,
        );
        assert_eq!(
            (down.other_backend, up.other_backend),
            (0, 0),
            "no connection answered by another backend"
        );
        lost_by_step.push(lost);
    }
    print_decap(d);
    println!(
        "lost by step {lost_by_step:?}: {} of {CONNS} in all",
        lost_by_step.iter().sum::<usize>()
    );
    assert_eq!(
        lost_by_step[0], 0,
        "one table change since the connections began: second chance keeps every one"
    );
    lab.finish();
}
