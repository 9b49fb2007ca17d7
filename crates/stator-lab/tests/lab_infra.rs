//! The lab's building blocks on their own: namespaces and veth pairs, the backends' servers,
//! and the direct-server-return topology without a load balancer in it.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use stator_lab::netns::{Netns, cleanup, is_root, list, veth};
use stator_lab::serve::{Server, http_get, tcp_connect, tcp_identify, udp_request};
use stator_lab::topo::{DsrLab, DsrSpec};

const POLL: Duration = Duration::from_millis(2);

/// Two namespaces joined by a veth pair: a TCP connection crosses it, and cleanup by prefix
/// removes both. Needs root.
#[test]
fn veth_pair_carries_tcp_and_cleanup_removes_everything() {
    assert!(
        is_root(),
        "this test needs root to create network namespaces; run as root"
    );
    let prefix = format!("stl-t{}-", std::process::id());
    let a = Netns::create(&format!("{prefix}a")).unwrap();
    let b = Netns::create(&format!("{prefix}b")).unwrap();
    veth(&a, "va", &b, "vb").unwrap();
    a.addr_add("va", "10.99.0.1/24").unwrap();
    b.addr_add("vb", "10.99.0.2/24").unwrap();
    assert!(a.ifindex("va").unwrap() > 0);
    assert_ne!(a.mac("va").unwrap(), [0; 6]);

    let listener = b
        .run_in(|| TcpListener::bind("10.99.0.2:7000").unwrap())
        .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
    });
    let echoed = a
        .run_in(|| {
            let mut c = TcpStream::connect("10.99.0.2:7000").unwrap();
            c.write_all(b"hello").unwrap();
            let mut buf = [0u8; 5];
            c.read_exact(&mut buf).unwrap();
            buf
        })
        .unwrap();
    server.join().unwrap();
    assert_eq!(&echoed, b"hello");

    let _sleeper = a.spawn("sleep", &["30"]).unwrap();
    assert_eq!(list(&prefix).unwrap().len(), 2);
    assert_eq!(cleanup(&prefix).unwrap(), 2);
    assert!(list(&prefix).unwrap().is_empty());
    assert_eq!(cleanup(&prefix).unwrap(), 0, "cleanup is idempotent");
}

/// The three servers answer over loopback in a namespace of their own. Needs root.
#[test]
fn servers_answer_with_their_name() {
    assert!(is_root(), "this test creates a namespace: run as root");
    let ns = Netns::create(&format!("stl-srv{}", std::process::id())).unwrap();
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let id = Server::tcp_identify(&ns, SocketAddr::new(lo, 7001), "b7").unwrap();
    let web = Server::http(&ns, SocketAddr::new(lo, 7002), "b7").unwrap();
    let udp = Server::udp_echo(&ns, SocketAddr::new(lo, 7003), "b7").unwrap();
    let echo = Server::tcp_echo(&ns, SocketAddr::new(lo, 7004), "b7").unwrap();
    let t = Duration::from_secs(5);
    // a long-lived connection: two lines, two answers, then the client closes
    let lines = ns
        .run_in(move || {
            let mut s = tcp_connect(None, SocketAddr::new(lo, 7004), t).unwrap();
            let mut answers = Vec::new();
            for line in ["one", "two"] {
                s.write_all(format!("{line}\n").as_bytes()).unwrap();
                let mut buf = [0u8; 64];
                let n = s.read(&mut buf).unwrap();
                answers.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            answers
        })
        .unwrap();
    assert_eq!(lines, ["b7 one\n", "b7 two\n"]);
    stator_lab::wait::wait_until("two echo answers counted", t, POLL, || echo.served() == 2)
        .unwrap();
    let (a, b, c) = ns
        .run_in(move || {
            (
                tcp_identify(Some(lo), SocketAddr::new(lo, 7001), "hi 1", t).unwrap(),
                http_get(None, SocketAddr::new(lo, 7002), "/", t).unwrap(),
                udp_request(None, SocketAddr::new(lo, 7003), b"ping", t).unwrap(),
            )
        })
        .unwrap();
    assert_eq!(a.0, "b7 hi 1");
    assert_eq!(a.1.ip(), lo);
    assert_eq!(b, (200, Some("b7".to_string())));
    assert_eq!(c, b"b7 ping");
    // a handler counts after it closed the connection: wait for it
    stator_lab::wait::wait_until("three answers counted", t, POLL, || {
        (id.served(), web.served(), udp.served()) == (1, 1, 1)
    })
    .unwrap();
    // a port already taken is an error, not a silent thread
    assert!(Server::tcp_identify(&ns, SocketAddr::new(lo, 7001), "dup").is_err());
    drop((id, web, udp, echo));
    ns.delete().unwrap();
}

/// Without any load balancer in the way, every host reaches every other through the
/// router, with the tunnel MTU on the LANs, and the lab goes away on drop. Needs root.
#[test]
fn hosts_reach_each_other_through_the_router() {
    assert!(is_root(), "this test creates namespaces: run as root");
    let prefix = format!("stl-dsr{}-", std::process::id());
    let mut spec = DsrSpec::new(&prefix, 91, 1, 1, 2);
    spec.addrs_per_client = 3;
    let lab = DsrLab::create(&spec).unwrap();
    assert_eq!(lab.clients[0].v4.len(), 3);
    for v6 in [false, true] {
        let b = lab.backends[1].addr(v6);
        let _srv =
            Server::tcp_identify(&lab.backends[1].ns, SocketAddr::new(b, 7000), "b1").unwrap();
        let src = lab.clients[0].addrs(v6)[2];
        let (reply, local) = lab.clients[0]
            .ns
            .run_in(move || {
                tcp_identify(
                    Some(src),
                    SocketAddr::new(b, 7000),
                    "hi",
                    Duration::from_secs(5),
                )
            })
            .unwrap()
            .unwrap();
        assert_eq!(reply, "b1 hi");
        assert_eq!(local.ip(), src);
    }
    let mtu = lab.lbs[0]
        .ns
        .exec("cat", ["/sys/class/net/eth0/mtu"])
        .unwrap();
    assert_eq!(mtu.trim(), "1600");
    drop(lab);
    assert!(list(&prefix).unwrap().is_empty());
}
