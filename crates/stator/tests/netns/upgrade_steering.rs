//! Upgrades of a node whose listeners steer clients with the reuseport program (`steering =
//! "source"`): a socket is in one program's map at most, so the node lets go of its sockets
//! in its map before it hands them over, and takes them back if its successor fails. Three
//! upgrades under load: no request fails, no stream breaks, every replaced process exits.
//! Needs root (BPF).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

#[test]
fn three_upgrades_with_source_steering_fail_no_request() {
    assert!(
        stator_xdp::is_root(),
        "steering = \"source\" loads a BPF program: run this test as root"
    );
    common::upgrade::three_upgrades("stator-upgrade-steer", "steering = \"source\"\nworkers = 2");
}

/// A successor that cannot start (its configuration adds a listener on a port the test
/// holds): the node had let go of its sockets in its steering maps for it, and takes them
/// back — new connections are again each picked by its program (`select_own` grows by every
/// one of them), none by the kernel's fallback.
#[test]
fn a_failed_upgrade_gives_the_sockets_back_to_the_node_s_steering() {
    use common::upgrade::{config, echo_backend, free_port, http_backend, start, upgrade};
    use stator_api::client::ApiClient;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    assert!(
        stator_xdp::is_root(),
        "steering = \"source\" loads a BPF program: run this test as root"
    );
    let dir = stator_testkit::scratch::TempDir::new("stator-upgrade-steer-fail");
    let (http, tcp) = (free_port(), free_port());
    let ups = (http_backend(), echo_backend());
    let steer = "steering = \"source\"\nworkers = 2";
    let conf = dir.join("stator.toml");
    std::fs::write(&conf, config(dir.path(), (http, tcp), ups, steer, "")).unwrap();
    let _node = start(dir.path(), &conf, &[http, tcp]);
    let api = ApiClient::unix(dir.join("api.sock")).with_timeout(Duration::from_secs(5));
    let decisions = |k: &str| {
        let v = api.get_json("/v1/listeners").unwrap();
        let l = v["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "stream")
            .cloned()
            .unwrap();
        l["steering_decisions"][k].as_u64().unwrap_or(0)
    };
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let extra = format!(
        "[[listener]]\nname = \"taken\"\naddress = \"127.0.0.1:{}\"\nprotocol = \"tcp\"\npool = \"echo\"\n",
        taken.local_addr().unwrap().port()
    );
    std::fs::write(&conf, config(dir.path(), (http, tcp), ups, steer, &extra)).unwrap();
    let failed = upgrade(&conf).expect_err("the successor cannot bind the taken port");
    assert!(failed.contains("did not serve"), "{failed}");
    let (own, kernel) = (decisions("select_own"), decisions("select_kernel"));
    for _ in 0..20 {
        drop(TcpStream::connect(("127.0.0.1", tcp)).unwrap());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while decisions("select_own") < own + 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the node's program picks the worker of every new connection again: select_own {} \
             → {}, select_kernel {kernel} → {}",
            own,
            decisions("select_own"),
            decisions("select_kernel")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        decisions("select_kernel"),
        kernel,
        "none left to the kernel"
    );
}
