//! Upgrades of a running node (`stator upgrade`, `stator run --takeover`; docs/operations.md,
//! "Upgrades"), proxy-only, on loopback: the process is replaced three times under HTTP load
//! (kept-alive connections and a new connection per request) and long-lived TCP streams
//! with bytes flowing — no request fails, no stream is reset; `kill -9` of a process while
//! it drains loses exactly the streams it held and nothing else; a successor that cannot
//! start leaves the node running as before, and a later upgrade succeeds. (With steering
//! programs, which need root: `netns/upgrade_steering.rs`.)

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stator_api::client::ApiClient;
use stator_testkit::scratch::TempDir;

use crate::common::upgrade::{
    Proc, WAIT, config, echo_backend, free_port, http_backend, http_load, log, start, stream,
    three_upgrades, upgrade,
};

#[test]
fn three_upgrades_under_load_fail_no_request_and_reset_no_stream() {
    three_upgrades("stator-upgrade-load", "");
}

#[test]
fn kill_9_mid_drain_loses_only_what_that_process_held() {
    let dir = TempDir::new("stator-upgrade-kill");
    let (http, tcp) = (free_port(), free_port());
    let conf = dir.join("stator.toml");
    std::fs::write(
        &conf,
        config(
            dir.path(),
            (http, tcp),
            (http_backend(), echo_backend()),
            "",
            "",
        ),
    )
    .unwrap();
    let mut first = start(dir.path(), &conf, &[http, tcp]);
    // streams the first process holds
    let (tx, rx) = std::sync::mpsc::channel();
    let held: Vec<_> = (0..3)
        .map(|_| stream(tcp, Duration::from_secs(30), Some(tx.clone())))
        .collect();
    for _ in 0..3 {
        rx.recv_timeout(WAIT).expect("the held streams flow");
    }
    let successor = Proc {
        child: None,
        pid: upgrade(&conf).unwrap_or_else(|e| panic!("{e}\n{}", log(dir.path()))),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let load = [
        http_load(http, true, Arc::clone(&stop)),
        http_load(http, false, Arc::clone(&stop)),
    ];
    std::thread::sleep(Duration::from_millis(500));
    assert!(first.alive(), "the first process drains its streams");
    first.kill("-KILL");
    let after = stream(tcp, Duration::from_secs(1), None);
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    for t in load {
        let seen = t.join().unwrap();
        assert!(
            seen.failures.is_empty() && seen.ok > 0,
            "requests to the successor failed when the old process died: {seen:?}"
        );
    }
    for s in held {
        assert!(
            s.join().unwrap().is_err(),
            "a stream the killed process held cannot have survived it"
        );
    }
    after
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("a stream through the successor: {e}"));
    drop(successor);
}

#[test]
fn a_successor_that_cannot_start_leaves_the_node_running() {
    let dir = TempDir::new("stator-upgrade-fail");
    let (http, tcp) = (free_port(), free_port());
    let (http_up, echo_up) = (http_backend(), echo_backend());
    let conf = dir.join("stator.toml");
    let good = config(dir.path(), (http, tcp), (http_up, echo_up), "", "");
    std::fs::write(&conf, &good).unwrap();
    let node = start(dir.path(), &conf, &[http, tcp]);
    // the next configuration adds a listener on a port the test holds: its successor cannot
    // bind it
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let extra = format!(
        "[[listener]]\nname = \"taken\"\naddress = \"127.0.0.1:{port}\"\nprotocol = \"tcp\"\npool = \"echo\"\n"
    );
    std::fs::write(
        &conf,
        config(dir.path(), (http, tcp), (http_up, echo_up), "", &extra),
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let load = http_load(http, true, Arc::clone(&stop));
    let failed = upgrade(&conf).expect_err("the successor cannot bind the taken port");
    assert!(
        failed.contains("did not serve") && failed.contains("listener[2].address"),
        "{failed}"
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let seen = load.join().unwrap();
    assert!(seen.failures.is_empty() && seen.ok > 0, "{seen:?}");
    // running on: changes are taken again, and a later upgrade goes through
    let api = ApiClient::unix(dir.join("api.sock")).with_timeout(Duration::from_secs(5));
    let status = api.get_json("/v1/status").unwrap();
    assert_eq!(status["phase"], "running", "{status}");
    let events = api.get_json("/v1/events").unwrap().to_string();
    assert!(events.contains("upgrade failed"), "{events}");
    std::fs::write(&conf, &good).unwrap();
    let pid = upgrade(&conf).unwrap_or_else(|e| panic!("{e}\n{}", log(dir.path())));
    let successor = Proc { child: None, pid };
    assert_ne!(pid, node.pid);
    drop(taken);
    drop(successor);
}
