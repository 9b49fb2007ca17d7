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

/// The steering program's state goes with the sockets: the successor's program uses the
/// replaced one's key, so every client reaches the same worker index as before. Sixteen
/// client addresses (`127.0.0.2`…`17`), one request each before and after an upgrade, their
/// workers read from the access log: the same worker for every one (with a new key, each
/// would stay with probability one half).
#[test]
fn an_upgrade_keeps_every_client_on_its_worker() {
    use common::upgrade::{config, echo_backend, free_port, http_backend, start, upgrade};
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::{Duration, Instant};

    assert!(
        stator_xdp::is_root(),
        "steering = \"source\" loads a BPF program: run this test as root"
    );
    let dir = stator_testkit::scratch::TempDir::new("stator-upgrade-steer-keys");
    let (http, tcp) = (free_port(), free_port());
    let log = dir.join("access.log");
    let conf = dir.join("stator.toml");
    std::fs::write(
        &conf,
        config(
            dir.path(),
            (http, tcp),
            (http_backend(), echo_backend()),
            "steering = \"source\"\nworkers = 2",
            &format!(
                "[access_log]\npath = \"{}\"\nformat = \"text\"\n",
                log.display()
            ),
        ),
    )
    .unwrap();
    let _node = start(dir.path(), &conf, &[http, tcp]);
    let request = |client: Ipv4Addr, tag: &str| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::new(client.into(), 0).into()).unwrap();
        s.connect(&SocketAddr::from(([127, 0, 0, 1], http)).into())
            .unwrap();
        let mut s = std::net::TcpStream::from(s);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            format!("GET /{tag} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    };
    // worker of each client's request tagged `tag`, from the access log's lines
    // (time kind listener worker client …, the request in quotes)
    let workers = |tag: &str| -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let mut got: Vec<(String, String)> = text
                .lines()
                .filter(|l| l.contains(&format!("GET /{tag}\"")))
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    let ip = f[4].rsplit_once(':').map_or(f[4], |(ip, _)| ip);
                    (ip.to_owned(), f[3].to_owned())
                })
                .collect();
            if got.len() == 16 {
                got.sort();
                return got.into_iter().map(|(ip, w)| format!("{ip}→{w}")).collect();
            }
            assert!(
                Instant::now() < deadline,
                "{} of 16 lines for /{tag}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let clients: Vec<Ipv4Addr> = (2..18).map(|i| Ipv4Addr::new(127, 0, 0, i)).collect();
    for &c in &clients {
        request(c, "before");
    }
    let before = workers("before");
    assert!(
        before.iter().any(|w| w.ends_with("→0")) && before.iter().any(|w| w.ends_with("→1")),
        "the clients spread over both workers: {before:?}"
    );
    // the successor is the node's child, not ours: killed by its pid when the test ends
    let _successor = common::upgrade::Proc {
        child: None,
        pid: upgrade(&conf).unwrap_or_else(|e| panic!("{e}")),
    };
    for &c in &clients {
        request(c, "after");
    }
    assert_eq!(
        workers("after"),
        before,
        "each client on the same worker as before"
    );
}
