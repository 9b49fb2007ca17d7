//! The reconciler over the core plane (stator-core: the decision the XDP program is proven
//! equal to), without root: what it commits is what the plane's packet path uses, and frames
//! pushed through that path show it. Stable ids across reloads and a restart over the same
//! state; a failing backend leaving every table it is in (real probes to real servers); a
//! drain and its timeout, step by step on tokio's paused clock; the forwarder watchdog
//! withdrawing and restoring on exact check counts; a commit the plane refuses keeping the
//! old generation; a health change rebuilding only the tables it touches. The same paths over
//! the real XDP forwarder: `node_netns/xdp_plane.rs` (root).

#[allow(unused_imports)]
use crate::common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::common::sim::{self, Hold, backend, blocking, settle};
use crate::common::{TcpServer, wait_until};
use stator_api::client::ApiClient;
use stator_control::watchdog::{CHECK_INTERVAL, RISE};
use stator_core::{Action, Cause, RealId, RealState, Snapshot, VipId};
use stator_testkit::tcp_flags;

const SECS: Duration = Duration::from_secs(10);

/// VIPs `192.0.2.<vip>:80/tcp`, each over its own pool of backends `198.51.100.<host>:8080`
/// (TCP checks every 100 ms, rise 1, fall 1, unless `health` says otherwise), tables of 251.
fn config(vips: &[(u8, &[u8])], dataplane: &str, health: &str) -> String {
    let mut t = sim::node_toml(4_194_304, dataplane);
    let health = if health.is_empty() {
        "interval = \"100ms\"\ntimeout = \"50ms\"\nrise = 1\nfall = 1\n"
    } else {
        health
    };
    for (vip, hosts) in vips {
        t += &format!("[[pool]]\nname = \"p{vip}\"\n[pool.health]\n{health}");
        for h in *hosts {
            t += &format!(
                "[[pool.backend]]\naddress = \"{}\"\nport = 8080\n",
                backend(*h)
            );
        }
    }
    for (vip, _) in vips {
        t += &format!(
            "[[vip]]\nname = \"v{vip}\"\naddress = \"192.0.2.{vip}\"\nport = 80\nprotocol = \"tcp\"\n\
             pools = [\"p{vip}\"]\ntable_size = 251\n"
        );
    }
    t
}

fn vip_addr(v: u8) -> IpAddr {
    format!("192.0.2.{v}").parse().unwrap()
}

/// Real TCP servers on loopback standing in for backends `hosts` (port 8080), and the probe
/// routes to them.
fn servers(hosts: &[u8]) -> (BTreeMap<u8, TcpServer>, stator_health::ProbeRoutes) {
    let servers: BTreeMap<u8, TcpServer> = hosts
        .iter()
        .map(|&h| (h, TcpServer::start("127.0.0.1:0")))
        .collect();
    let pairs: Vec<(IpAddr, u16, SocketAddr)> = servers
        .iter()
        .map(|(h, s)| (backend(*h), 8080, s.addr))
        .collect();
    (servers, sim::routes(&pairs))
}

/// (VIP address, backend address) -> real id, for the reals of a snapshot.
fn real_ids(s: &Snapshot) -> BTreeMap<(IpAddr, IpAddr), RealId> {
    let vip_of: BTreeMap<VipId, IpAddr> = s.vips.iter().map(|(k, v)| (v.id, k.addr)).collect();
    s.reals
        .iter()
        .map(|(id, r)| ((vip_of[&r.vip], r.addr), *id))
        .collect()
}

fn vip_ids(s: &Snapshot) -> BTreeMap<IpAddr, VipId> {
    s.vips.iter().map(|(k, v)| (k.addr, v.id)).collect()
}

/// A client port whose flow to `vip` Maglev gives `real` in `snap`.
fn sport_for(snap: &Snapshot, vip: IpAddr, real: RealId, client: IpAddr) -> u16 {
    let v = snap.vips.iter().find(|(k, _)| k.addr == vip).unwrap().1;
    let (IpAddr::V4(c), IpAddr::V4(d)) = (client, vip) else {
        unreachable!("IPv4 test addresses")
    };
    (40_000..60_000u16)
        .find(|p| {
            let h = stator_hash::flow_hash_v4(c.octets(), d.octets(), *p, 80, 6);
            v.table[(h % v.table.len() as u32) as usize] == real.0
        })
        .expect("some port maps to the real")
}

#[test]
fn ids_survive_reloads_and_a_restart() {
    let (_servers, routes) = servers(&[2, 3, 4, 5]);
    let keep = "on_exit = \"keep\"";
    let a = config(&[(1, &[2, 3]), (2, &[3, 4])], keep, "");
    let b = config(&[(3, &[2]), (2, &[3, 4, 5]), (1, &[3])], keep, "");
    let state = sim::state(1 << 16);
    let rt = common::runtime();
    let node = rt.block_on(sim::start(&a, &state, routes.clone())).unwrap();
    let first = state.snapshot();
    let ids_a = real_ids(&first);
    assert_eq!(ids_a.len(), 4, "{ids_a:?}");

    let started = Instant::now();
    let report = rt
        .block_on(node.apply(b.clone(), "b".into(), None))
        .unwrap();
    let reload = started.elapsed();
    let second = state.snapshot();
    let ids_b = real_ids(&second);
    for kept in [
        (vip_addr(1), backend(3)),
        (vip_addr(2), backend(3)),
        (vip_addr(2), backend(4)),
    ] {
        assert_eq!(ids_a[&kept], ids_b[&kept], "{kept:?} kept its id");
    }
    let removed = ids_a[&(vip_addr(1), backend(2))];
    assert!(
        !ids_b.values().any(|id| *id == removed),
        "the removed pair's id is quarantined"
    );
    assert_eq!(
        vip_ids(&first)[&vip_addr(1)],
        vip_ids(&second)[&vip_addr(1)]
    );
    assert_eq!(
        vip_ids(&first)[&vip_addr(2)],
        vip_ids(&second)[&vip_addr(2)]
    );
    // the reload's own commit, or a later one: the new backend's first health result commits
    // again, after the apply returned when the machine is busy (seen in `make check`)
    assert!(second.generation >= report.generation);
    assert!(second.generation > first.generation);
    println!(
        "reload (3 VIPs, 5 reals): {reload:?} end to end; build {:.3} ms, commit {:.3} ms, {} tables rebuilt",
        report.build_seconds * 1e3,
        report.commit_seconds * 1e3,
        report.tables_rebuilt
    );
    // New backends only become usable once checked; wait for all five.
    wait_until("all reals usable", SECS, || {
        let s = state.snapshot();
        s.reals.len() == 5 && s.reals.values().all(|r| r.state == RealState::Usable)
    });
    let before_restart = state.snapshot();

    // A restart over the same state (on_exit = "keep"): ids seeded from what it forwards.
    rt.block_on(node.shutdown()).unwrap();
    assert_eq!(
        state.snapshot().generation,
        before_restart.generation,
        "keep: the plane still forwards"
    );
    let node = rt.block_on(sim::start(&b, &state, routes)).unwrap();
    let after = state.snapshot();
    assert_eq!(
        real_ids(&after),
        real_ids(&before_restart),
        "a restart keeps every id"
    );
    assert_eq!(vip_ids(&after), vip_ids(&before_restart));
    assert!(
        after.generation > before_restart.generation,
        "generations stay monotonic"
    );
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn a_failing_backend_leaves_every_table_it_is_in() {
    // Backend 3 is behind both VIPs.
    let (mut servers, routes) = servers(&[2, 3, 4]);
    let cfg = config(&[(1, &[2, 3]), (2, &[3, 4])], "", "");
    let state = sim::state(1 << 16);
    let rt = common::runtime();
    let node = rt.block_on(sim::start(&cfg, &state, routes)).unwrap();
    let three = backend(3);
    let before = state.snapshot();
    let ids: Vec<u32> = before
        .reals
        .iter()
        .filter(|(_, r)| r.addr == three)
        .map(|(id, _)| id.0)
        .collect();
    assert_eq!(ids.len(), 2, "one real per VIP");
    for v in before.vips.values() {
        assert!(
            v.table.iter().any(|s| ids.contains(s)),
            "in both tables before"
        );
    }
    // A new flow whose Maglev slot names backend 3 goes there now.
    let client: IpAddr = "10.9.0.1".parse().unwrap();
    let real3 = *before
        .reals
        .iter()
        .find(|(_, r)| {
            r.addr == three
                && before
                    .vips
                    .iter()
                    .any(|(k, v)| k.addr == vip_addr(1) && v.id == r.vip)
        })
        .unwrap()
        .0;
    let sport = sport_for(&before, vip_addr(1), real3, client);
    let v = sim::send_syn(&state, client, sport, vip_addr(1), 80);
    assert_eq!((v.action, v.real), (Action::Tx, Some(real3)));

    let stopped = Instant::now();
    servers.get_mut(&3).unwrap().stop();
    let took = wait_until("backend 3 out of the snapshot", SECS, || {
        !state.snapshot().reals.values().any(|r| r.addr == three)
    });
    let after = state.snapshot();
    for (k, v) in &after.vips {
        assert!(!v.table.is_empty(), "{k}: the other backend serves");
        assert!(
            !v.table.iter().any(|s| ids.contains(s)),
            "{k}: no slot names backend 3"
        );
    }
    // The same flow, new connection: backend 2; the old connection's entry names a real
    // that is gone, so its next packet is reselected too.
    let v = sim::send_syn(&state, client, sport, vip_addr(1), 80);
    assert_eq!(v.action, Action::Tx);
    assert_eq!(after.reals[&v.real.unwrap()].addr, backend(2));
    println!(
        "a backend behind two VIPs stopped: out of both tables (committed) after {:?} \
         (check interval 100ms, fall 1)",
        stopped.elapsed().min(took)
    );
    // The view is published right after the commit returns.
    let i = node
        .view()
        .config
        .backends
        .iter()
        .position(|b| b.address == three)
        .unwrap();
    wait_until("the view to show backend 3 down", SECS, || {
        node.view().backends[i].health == stator_control::plan::Health::Down
    });
    assert_eq!(node.view().backends[i].transitions_down, 1);

    let _again = TcpServer::start(&servers[&3].addr.to_string());
    wait_until("backend 3 back in both tables", SECS, || {
        state
            .snapshot()
            .vips
            .values()
            .all(|v| v.table.iter().any(|x| ids.contains(x)))
    });
    assert_eq!(
        real_ids(&state.snapshot()),
        real_ids(&before),
        "same ids when it returns"
    );
    rt.block_on(node.shutdown()).unwrap();
}

/// Drain with a 400 ms timeout on tokio's paused clock: at 399 ms the real is still there
/// for the flows it has and has no slot; at 401 ms it is gone and its flows move.
#[tokio::test(start_paused = true)]
async fn drain_keeps_the_real_without_slots_until_the_timeout() {
    let _hold = Hold::new();
    let cfg = config(&[(1, &[2, 3])], "", "method = \"none\"\n");
    let state = sim::state(1 << 16);
    let node = sim::start(&cfg, &state, Default::default()).await.unwrap();
    let api = ApiClient::unix(node.api_socket());
    let two = backend(2);
    let real_of = |s: &Snapshot| {
        s.reals
            .iter()
            .find(|(_, r)| r.addr == two)
            .map(|(id, r)| (*id, r.state))
    };
    let (id, state0) = real_of(&state.snapshot()).unwrap();
    assert_eq!(state0, RealState::Usable);
    // A connection to backend 2 before the drain.
    let client: IpAddr = "10.9.0.1".parse().unwrap();
    let sport = sport_for(&state.snapshot(), vip_addr(1), id, client);
    assert_eq!(
        sim::send_syn(&state, client, sport, vip_addr(1), 80).real,
        Some(id)
    );

    let a = api.clone();
    let r = blocking(move || {
        a.post_json(
            "/v1/backends/198.51.100.2:8080/drain",
            Some(&serde_json::json!({"timeout": "400ms"})),
        )
    })
    .await
    .unwrap();
    assert_eq!(r["drain"]["state"], "draining", "{r}");
    let s = state.snapshot();
    assert_eq!(
        real_of(&s),
        Some((id, RealState::Draining)),
        "kept for existing flows"
    );
    assert!(
        s.vips.values().all(|v| !v.table.contains(&id.0)),
        "no new flows"
    );
    let ack = |st: &stator_plane::coreplane::CoreState| {
        sim::send_tcp(st, client, sport, vip_addr(1), 80, tcp_flags::ACK)
    };
    let v = ack(&state);
    assert_eq!(v.real, Some(id), "the established flow stays");
    assert_eq!(v.selection.unwrap().cause, Cause::CtHit);
    assert_ne!(
        sim::send_syn(&state, client, sport + 1, vip_addr(1), 80).real,
        Some(id),
        "a new flow does not get it"
    );
    let a = api.clone();
    let b = blocking(move || a.get_json("/v1/backends")).await.unwrap();
    let entry = b["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "198.51.100.2:8080")
        .unwrap()
        .clone();
    assert_eq!(entry["vips"][0]["plan"]["state"], "draining");
    assert_eq!(entry["vips"][0]["slots"], 0);
    assert_eq!(entry["drain"]["remaining_seconds"], 0.4, "{entry}");

    let generation = node.view().generation;
    tokio::time::advance(Duration::from_millis(399)).await;
    sim::idle().await;
    assert_eq!(node.view().generation, generation, "nothing at 399 ms");
    assert_eq!(real_of(&state.snapshot()), Some((id, RealState::Draining)));
    assert_eq!(ack(&state).real, Some(id));

    tokio::time::advance(Duration::from_millis(2)).await;
    settle("the drain timeout to remove the real", || {
        real_of(&state.snapshot()).is_none()
    })
    .await;
    let v = ack(&state);
    assert_ne!(v.real, Some(id), "its flows move after the timeout");
    assert_eq!(v.selection.unwrap().cause, Cause::CtReselect, "{v:?}");
    let a = api.clone();
    let b = blocking(move || a.get_json("/v1/backends")).await.unwrap();
    let entry = b["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "198.51.100.2:8080")
        .unwrap()
        .clone();
    assert_eq!(entry["drain"]["state"], "drained");

    let a = api.clone();
    blocking(move || a.post_json("/v1/backends/198.51.100.2:8080/undrain", None))
        .await
        .unwrap();
    assert_eq!(
        real_of(&state.snapshot()),
        Some((id, RealState::Usable)),
        "same id back"
    );
    let a = api.clone();
    let err = blocking(move || a.post_json("/v1/backends/nope/drain", None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, stator_control::ControlError::Api { status: 404, .. }),
        "{err}"
    );
    node.shutdown().await.unwrap();
}

/// The watchdog checks the plane once a second: a fault withdraws every VIP at the first
/// failed check; the VIPs come back only after `RISE` consecutive passes.
#[tokio::test(start_paused = true)]
async fn the_watchdog_withdraws_at_the_first_failed_check_and_restores_after_rise() {
    let _hold = Hold::new();
    let cfg = config(&[(1, &[2]), (2, &[3])], "", "method = \"none\"\n");
    let state = sim::state(1 << 16);
    let node = sim::start(&cfg, &state, Default::default()).await.unwrap();
    settle("the first check", || node.view().forwarder.healthy).await;
    assert_eq!(node.view().announce, vec![true, true]);

    state.set_fault(Some("maps do not answer".into()));
    tokio::time::advance(CHECK_INTERVAL).await;
    settle("the failed check", || !node.view().forwarder.healthy).await;
    let v = node.view();
    assert_eq!(v.announce, vec![false, false], "everything withdrawn");
    assert_eq!(v.forwarder.reason.as_deref(), Some("maps do not answer"));
    assert_eq!(v.forwarder.failures, 1);

    state.set_fault(None);
    for pass in 1..RISE {
        let checks = state.checks_run();
        tokio::time::advance(CHECK_INTERVAL).await;
        settle("the next check", || state.checks_run() > checks).await;
        sim::idle().await;
        assert!(
            !node.view().forwarder.healthy,
            "still withdrawn after {pass} pass(es) of {RISE}"
        );
    }
    tokio::time::advance(CHECK_INTERVAL).await;
    settle("healthy again", || node.view().forwarder.healthy).await;
    assert_eq!(node.view().announce, vec![true, true]);
    node.shutdown().await.unwrap();
}

#[test]
fn a_refused_commit_keeps_the_old_generation() {
    // The plane has room for 600 slots per generation; the config says 4 Mi (as a node whose
    // plane was created smaller would have): three tables of 251 do not fit.
    let (_servers, routes) = servers(&[2]);
    let two = config(&[(1, &[2]), (2, &[2])], "", "");
    let three = config(&[(1, &[2]), (2, &[2]), (3, &[2])], "", "");
    let state = sim::state(600);
    let rt = common::runtime();
    let node = rt.block_on(sim::start(&two, &state, routes)).unwrap();
    let before = state.snapshot();
    let view_before = node.view();
    let api = ApiClient::unix(node.api_socket());
    let r = api
        .request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/toml")],
            three.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 500, "{}", r.text());
    let body = r.json().unwrap();
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("commit") && msg.contains("slots"), "{msg}");
    assert_eq!(
        state.snapshot(),
        before,
        "the plane forwards with the old snapshot"
    );
    let v = node.view();
    assert_eq!(v.config_generation, view_before.config_generation);
    assert_eq!(v.generation, view_before.generation);
    assert_eq!(v.config.vips.len(), 2, "the old config runs");
    assert_eq!(v.stats.commits_failed, 1);
    assert_eq!(v.stats.reloads_failed, 1);
    assert!(
        v.last_error
            .as_ref()
            .is_some_and(|e| e.message.contains("slots"))
    );
    // The next valid change goes through.
    let ok = rt.block_on(node.apply(
        two.replace("table_size = 251", "table_size = 241"),
        "t".into(),
        None,
    ));
    assert!(ok.is_ok(), "{ok:?}");
    assert!(state.snapshot().vips.values().all(|v| v.table.len() == 241));
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn a_health_change_rebuilds_only_the_tables_it_touches() {
    // 8 VIPs of 65,537 slots, 50 backends each (health "none"); one TCP-checked backend,
    // 198.51.100.2, is behind VIPs 0 and 1.
    let (mut servers, routes) = servers(&[2]);
    let mut t = sim::node_toml(1 << 20, "");
    t += &format!(
        "[[pool]]\nname = \"checked\"\n[pool.health]\ninterval = \"100ms\"\ntimeout = \"50ms\"\n\
         rise = 1\nfall = 1\n[[pool.backend]]\naddress = \"{}\"\nport = 8080\n",
        backend(2)
    );
    for v in 0..8 {
        t += &format!("[[pool]]\nname = \"p{v}\"\n[pool.health]\nmethod = \"none\"\n");
        for b in 0..50 {
            t += &format!(
                "[[pool.backend]]\naddress = \"10.{}.{v}.{}\"\nport = 80\n",
                230 + v,
                b + 1
            );
        }
    }
    for v in 0..8 {
        let pools = if v < 2 {
            format!("\"p{v}\", \"checked\"")
        } else {
            format!("\"p{v}\"")
        };
        t += &format!(
            "[[vip]]\nname = \"v{v}\"\naddress = \"192.0.2.{}\"\nport = 80\nprotocol = \"tcp\"\n\
             pools = [{pools}]\n",
            v + 1
        );
    }
    let state = sim::state(1 << 20);
    let rt = common::runtime();
    let started = Instant::now();
    let node = rt.block_on(sim::start(&t, &state, routes)).unwrap();
    let s = node.startup();
    println!(
        "8 VIPs x 65,537 slots, 402 reals: first commit {:?} after start; build {:.1} ms, \
         commit {:.1} ms",
        started.elapsed(),
        s.build_seconds * 1e3,
        s.commit_seconds * 1e3
    );
    assert_eq!(state.snapshot().reals.len(), 402);
    let generation = node.view().generation;
    servers.get_mut(&2).unwrap().stop();
    wait_until("a commit without the checked backend", SECS, || {
        node.view().generation > generation
    });
    let v = node.view();
    let built = v.built.as_ref().unwrap();
    assert_eq!(built.tables_rebuilt(), 2, "only VIPs 0 and 1 contain it");
    assert!(built.vips[0].rebuilt && built.vips[1].rebuilt && !built.vips[2].rebuilt);
    assert_eq!(state.snapshot().reals.len(), 400);
    println!(
        "one backend behind 2 of the 8 VIPs down: 2 tables rebuilt, build {:.1} ms, commit {:.1} ms",
        v.stats.build.last * 1e3,
        v.stats.commit.last * 1e3
    );
    rt.block_on(node.shutdown()).unwrap();
}
