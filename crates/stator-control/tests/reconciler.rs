//! The reconciler over the real XDP forwarder (loaded on a test pin path, not attached):
//! what it commits is read back from the pinned maps, i.e. what packets would see. Stable ids
//! across reloads and a restart; a failing backend leaving every table it is in; drain, then
//! the drain timeout; a commit the data plane refuses keeping the old generation. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{
    Lab, Pins, TcpServer, active_snapshot, node_toml, runtime, start_node, wait_until, xdp_options,
};
use stator_control::client::ApiClient;
use stator_core::{RealId, RealState, Snapshot, VipId};

const SECS: Duration = Duration::from_secs(5);

/// VIPs `192.0.2.<vip>:80/tcp`, each over its own pool of backends `10.<net>.0.<host>:8080`
/// (TCP checks every 100 ms, rise 1, fall 1), small tables.
fn config(lab: &Lab, pins: &Pins, vips: &[(u8, &[u8])], extra: &str) -> String {
    let mut t = node_toml(lab, pins, 4_194_304);
    t += extra;
    t += "\n";
    for (vip, hosts) in vips {
        t += &format!(
            "[[pool]]\nname = \"p{vip}\"\n[pool.health]\ninterval = \"100ms\"\ntimeout = \"50ms\"\n\
             rise = 1\nfall = 1\n"
        );
        for h in *hosts {
            t += &format!(
                "[[pool.backend]]\naddress = \"{}\"\nport = 8080\n",
                lab.addr(*h)
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

#[test]
fn ids_survive_reloads_and_a_restart() {
    let lab = Lab::new("ids", 221);
    let pins = Pins::new("ids");
    let a = config(
        &lab,
        &pins,
        &[(1, &[2, 3]), (2, &[3, 4])],
        "on_exit = \"keep\"",
    );
    let b = config(
        &lab,
        &pins,
        &[(3, &[2]), (2, &[3, 4, 5]), (1, &[3])],
        "on_exit = \"keep\"",
    );
    let pa = pins.path.clone();
    let addr = |h: u8| -> IpAddr { format!("10.221.0.{h}").parse().unwrap() };
    lab.run(move || {
        let _servers: Vec<TcpServer> = (2..=5)
            .map(|h| TcpServer::start(&format!("10.221.0.{h}:8080")))
            .collect();
        let rt = runtime();
        let opts = xdp_options(&pa, 1 << 16);
        let node = start_node(&rt, &a, &opts);
        let first = active_snapshot(&pa);
        let ids_a = real_ids(&first);
        assert_eq!(ids_a.len(), 4, "{ids_a:?}");
        let gen_a = first.generation;

        let started = Instant::now();
        let report = rt.block_on(node.apply(b.clone(), "b".into(), None)).unwrap();
        let reload = started.elapsed();
        let second = active_snapshot(&pa);
        let ids_b = real_ids(&second);
        for kept in [(vip_addr(1), addr(3)), (vip_addr(2), addr(3)), (vip_addr(2), addr(4))] {
            assert_eq!(ids_a[&kept], ids_b[&kept], "{kept:?} kept its id");
        }
        let removed = ids_a[&(vip_addr(1), addr(2))];
        assert!(!ids_b.values().any(|id| *id == removed), "the removed pair's id is quarantined");
        assert_eq!(vip_ids(&first)[&vip_addr(1)], vip_ids(&second)[&vip_addr(1)]);
        assert_eq!(vip_ids(&first)[&vip_addr(2)], vip_ids(&second)[&vip_addr(2)]);
        assert_eq!(second.generation, report.generation);
        assert!(second.generation > gen_a);
        println!(
            "reload (3 VIPs, 5 reals): {reload:?} end to end; build {:.3} ms, commit {:.1} ms, {} tables rebuilt",
            report.build_seconds * 1e3,
            report.commit_seconds * 1e3,
            report.tables_rebuilt
        );
        // New backends only become usable once checked; wait for all five.
        wait_until("all reals usable", SECS, || {
            let s = active_snapshot(&pa);
            s.reals.len() == 5 && s.reals.values().all(|r| r.state == RealState::Usable)
        });
        let before_restart = active_snapshot(&pa);

        // A restart over the same pins (on_exit = "keep"): ids seeded from the maps.
        rt.block_on(node.shutdown()).unwrap();
        let kept = active_snapshot(&pa);
        assert_eq!(kept.generation, before_restart.generation, "keep: the maps still forward");
        let node = start_node(&rt, &b, &opts);
        let after = active_snapshot(&pa);
        assert_eq!(real_ids(&after), real_ids(&before_restart), "a restart keeps every id");
        assert_eq!(vip_ids(&after), vip_ids(&before_restart));
        assert!(after.generation > before_restart.generation, "generations stay monotonic");
        rt.block_on(node.shutdown()).unwrap();
    });
}

#[test]
fn a_failing_backend_leaves_every_table_it_is_in() {
    let lab = Lab::new("fail", 222);
    let pins = Pins::new("fail");
    // Backend 3 is behind both VIPs.
    let cfg = config(&lab, &pins, &[(1, &[2, 3]), (2, &[3, 4])], "");
    let pa = pins.path.clone();
    lab.run(move || {
        let _a = TcpServer::start("10.222.0.2:8080");
        let mut shared = TcpServer::start("10.222.0.3:8080");
        let _c = TcpServer::start("10.222.0.4:8080");
        let rt = runtime();
        let node = start_node(&rt, &cfg, &xdp_options(&pa, 1 << 16));
        let three: IpAddr = "10.222.0.3".parse().unwrap();
        let before = active_snapshot(&pa);
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
        let stopped = Instant::now();
        shared.stop();
        let took = wait_until("backend 3 out of the snapshot", SECS, || {
            !active_snapshot(&pa).reals.values().any(|r| r.addr == three)
        });
        let after = active_snapshot(&pa);
        for (k, v) in &after.vips {
            assert!(!v.table.is_empty(), "{k}: the other backend serves");
            assert!(
                !v.table.iter().any(|s| ids.contains(s)),
                "{k}: no slot names backend 3"
            );
        }
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

        let _again = TcpServer::start("10.222.0.3:8080");
        wait_until("backend 3 back in both tables", SECS, || {
            let s = active_snapshot(&pa);
            s.vips
                .values()
                .all(|v| v.table.iter().any(|x| ids.contains(x)))
        });
        assert_eq!(
            real_ids(&active_snapshot(&pa)),
            real_ids(&before),
            "same ids when it returns"
        );
        rt.block_on(node.shutdown()).unwrap();
    });
}

#[test]
fn drain_keeps_the_real_without_slots_until_the_timeout() {
    let lab = Lab::new("drain", 223);
    let pins = Pins::new("drain");
    let cfg = config(&lab, &pins, &[(1, &[2, 3])], "");
    let pa = pins.path.clone();
    lab.run(move || {
        let _s: Vec<TcpServer> = (2..=3)
            .map(|h| TcpServer::start(&format!("10.223.0.{h}:8080")))
            .collect();
        let rt = runtime();
        let node = start_node(&rt, &cfg, &xdp_options(&pa, 1 << 16));
        let api = ApiClient::new(&node.api_addr().to_string(), None).unwrap();
        let two: IpAddr = "10.223.0.2".parse().unwrap();
        let real_of = |s: &Snapshot| {
            s.reals
                .iter()
                .find(|(_, r)| r.addr == two)
                .map(|(id, r)| (*id, r.state))
        };
        let (id, state) = real_of(&active_snapshot(&pa)).unwrap();
        assert_eq!(state, RealState::Usable);

        let drained_at = Instant::now();
        let r = api
            .post_json(
                "/v1/backends/10.223.0.2:8080/drain",
                Some(&serde_json::json!({"timeout": "400ms"})),
            )
            .unwrap();
        assert_eq!(r["drain"]["state"], "draining", "{r}");
        let s = active_snapshot(&pa);
        assert_eq!(
            real_of(&s),
            Some((id, RealState::Draining)),
            "kept for existing flows"
        );
        assert!(
            s.vips.values().all(|v| !v.table.contains(&id.0)),
            "no new flows"
        );
        let b = api.get_json("/v1/backends").unwrap();
        let entry = b["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == "10.223.0.2:8080")
            .unwrap()
            .clone();
        assert_eq!(entry["vips"][0]["plan"]["state"], "draining");
        assert_eq!(entry["vips"][0]["slots"], 0);

        wait_until("the drain timeout removes the real", SECS, || {
            real_of(&active_snapshot(&pa)).is_none()
        });
        let took = drained_at.elapsed();
        println!("drain timeout 400ms: real removed after {took:?}");
        assert!(took >= Duration::from_millis(400), "{took:?}");
        let b = api.get_json("/v1/backends").unwrap();
        let entry = b["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == "10.223.0.2:8080")
            .unwrap()
            .clone();
        assert_eq!(entry["drain"]["state"], "drained");

        api.post_json("/v1/backends/10.223.0.2:8080/undrain", None)
            .unwrap();
        assert_eq!(
            real_of(&active_snapshot(&pa)),
            Some((id, RealState::Usable)),
            "same id back"
        );
        let err = api.post_json("/v1/backends/nope/drain", None).unwrap_err();
        assert!(
            matches!(err, stator_control::ControlError::Api { status: 404, .. }),
            "{err}"
        );
        rt.block_on(node.shutdown()).unwrap();
    });
}

#[test]
fn a_refused_commit_keeps_the_old_generation() {
    let lab = Lab::new("refuse", 224);
    let pins = Pins::new("refuse");
    // The data plane has room for 600 slots per generation; the config says 4 Mi (as a
    // node whose maps were created smaller would have): three tables of 251 do not fit.
    let two = config(&lab, &pins, &[(1, &[2]), (2, &[2])], "");
    let three = config(&lab, &pins, &[(1, &[2]), (2, &[2]), (3, &[2])], "");
    let pa = pins.path.clone();
    lab.run(move || {
        let _s = TcpServer::start("10.224.0.2:8080");
        let rt = runtime();
        let node = start_node(&rt, &two, &xdp_options(&pa, 600));
        let before = active_snapshot(&pa);
        let view_before = node.view();
        let api = ApiClient::new(&node.api_addr().to_string(), None).unwrap();
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
        let after = active_snapshot(&pa);
        assert_eq!(
            after, before,
            "the data plane forwards with the old snapshot"
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
        assert!(
            active_snapshot(&pa)
                .vips
                .values()
                .all(|v| v.table.len() == 241)
        );
        rt.block_on(node.shutdown()).unwrap();
    });
}

#[test]
fn a_health_change_rebuilds_only_the_tables_it_touches() {
    let lab = Lab::new("big", 225);
    let pins = Pins::new("big");
    // 8 VIPs of 65,537 slots, 50 backends each (health "none"); one TCP-checked backend,
    // 10.225.0.2, is behind VIPs 0 and 1.
    let mut t = node_toml(&lab, &pins, 1 << 20);
    t += "[[pool]]\nname = \"checked\"\n[pool.health]\ninterval = \"100ms\"\ntimeout = \"50ms\"\n\
          rise = 1\nfall = 1\n[[pool.backend]]\naddress = \"10.225.0.2\"\nport = 8080\n";
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
    let pa = pins.path.clone();
    lab.run(move || {
        let mut checked = TcpServer::start("10.225.0.2:8080");
        let rt = runtime();
        let started = Instant::now();
        let node = start_node(&rt, &t, &xdp_options(&pa, 1 << 20));
        let s = node.startup();
        println!(
            "8 VIPs x 65,537 slots, 402 reals: first commit {:?} after start; build {:.1} ms, \
             commit {:.1} ms",
            started.elapsed(),
            s.build_seconds * 1e3,
            s.commit_seconds * 1e3
        );
        assert_eq!(active_snapshot(&pa).reals.len(), 402);
        let generation = node.view().generation;
        checked.stop();
        wait_until("a commit without the checked backend", SECS, || {
            node.view().generation > generation
        });
        let v = node.view();
        let built = v.built.as_ref().unwrap();
        assert_eq!(built.tables_rebuilt(), 2, "only VIPs 0 and 1 contain it");
        assert!(built.vips[0].rebuilt && built.vips[1].rebuilt && !built.vips[2].rebuilt);
        assert_eq!(active_snapshot(&pa).reals.len(), 400);
        println!(
            "one backend behind 2 of the 8 VIPs down: 2 tables rebuilt, build {:.1} ms, commit {:.1} ms",
            v.stats.build.last * 1e3,
            v.stats.commit.last * 1e3
        );
        rt.block_on(node.shutdown()).unwrap();
    });
}
