//! The TCP proxy and the listener lifecycle on loopback: half-close, retries, byte counters,
//! session persistence from many client addresses (127.0.0.0/8 is all local), reload under
//! load. Unprivileged.

#[allow(unused_imports)]
use crate::common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{Backend, Client, proxy, refused_addr, spec};
use stator_proxy::{Algorithm, ErrorKind, PersistenceSpec, Protocol, UpstreamSpec};

/// A TCP server that reads until the client shuts its side, then answers
/// `"<name> <bytes read>\n"` and closes.
fn count_server(name: &'static str) -> UpstreamSpec {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut total = 0usize;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => total += n,
                    }
                }
                let _ = s.write_all(format!("{name} {total}\n").as_bytes());
            });
        }
    });
    UpstreamSpec {
        name: name.into(),
        addr,
        weight: 1,
    }
}

fn bind_from(src: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(IpAddr::V4(src), 0).into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

#[test]
fn half_close_reaches_the_upstream_and_the_answer_comes_back() {
    let up = count_server("c");
    let dead = UpstreamSpec {
        name: "dead".into(),
        addr: refused_addr(),
        weight: 3,
    };
    let (p, addr) = proxy(spec("tcp", Protocol::Tcp, vec![dead, up]));
    for _ in 0..5 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&[7u8; 100_000]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "c 100000\n", "the upstream saw our end of stream");
    }
    std::thread::sleep(Duration::from_millis(100));
    let v = &p.listeners()[0];
    let refused = v.upstreams[0].stats.errors(ErrorKind::ConnectRefused);
    assert!(refused > 0, "the dead upstream was tried");
    assert_eq!(v.upstreams[1].stats.requests.load(Ordering::Relaxed), 5);
    assert_eq!(
        v.upstreams[1].stats.bytes_out.load(Ordering::Relaxed),
        500_000
    );
    assert_eq!(v.stats.bytes_in.load(Ordering::Relaxed), 500_000);
    assert_eq!(v.stats.bytes_out.load(Ordering::Relaxed), 5 * 9);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn persistence_keeps_each_client_address_on_one_backend() {
    let backends: Vec<Backend> = (0..4).map(|i| Backend::start(&format!("b{i}"))).collect();
    let mut s = spec(
        "sticky",
        Protocol::Http,
        backends.iter().map(Backend::upstream).collect(),
    );
    s.persistence = Some(PersistenceSpec {
        timeout: Duration::from_secs(60),
        max_entries: 1000,
    });
    s.algorithm = Algorithm::Vnswrr;
    let (p, addr) = proxy(s);
    let mut per_client =
        std::collections::BTreeMap::<u8, std::collections::BTreeSet<String>>::new();
    for round in 0..5 {
        for c in 1..=32u8 {
            let src = Ipv4Addr::new(127, 0, 1, c);
            let mut s = bind_from(src, addr);
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            let name = out
                .lines()
                .find_map(|l| l.strip_prefix("x-backend: "))
                .unwrap_or_else(|| panic!("round {round}: {out}"));
            per_client.entry(c).or_default().insert(name.to_string());
        }
    }
    let split = per_client.values().filter(|s| s.len() > 1).count();
    let used: std::collections::BTreeSet<&String> = per_client.values().flatten().collect();
    println!(
        "32 clients x 5 connections: {split} clients reached more than one backend; {} backends used",
        used.len()
    );
    assert_eq!(split, 0);
    assert_eq!(used.len(), 4, "clients spread over every backend");
    assert!(p.listeners()[0].stats.session_hits.load(Ordering::Relaxed) >= 4 * 32);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn reload_under_load_fails_nothing_and_keeps_connections() {
    let backends: Vec<Backend> = (0..3).map(|i| Backend::start(&format!("r{i}"))).collect();
    let mut s = spec(
        "reload",
        Protocol::Http,
        backends[..2].iter().map(Backend::upstream).collect(),
    );
    s.workers = 2;
    let name = s.name.clone();
    let mut p = Proxy::new("test", None);
    p.apply(vec![s.clone()]).unwrap();
    let addr = p.local_addr(&name).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reconnects = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..3)
        .map(|_| {
            let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
            let reconnects = Arc::clone(&reconnects);
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    match c.try_get("/") {
                        Some(200) => ok.fetch_add(1, Ordering::SeqCst),
                        Some(_) => failed.fetch_add(1, Ordering::SeqCst),
                        None => {
                            // A kept-alive connection closed by a worker that stopped after
                            // its last exchange (as nginx's old workers do): reconnect, as
                            // every HTTP client does. A request that fails on a fresh
                            // connection counts as failed.
                            reconnects.fetch_add(1, Ordering::SeqCst);
                            c = Client::connect(addr);
                            match c.try_get("/") {
                                Some(200) => ok.fetch_add(1, Ordering::SeqCst),
                                _ => failed.fetch_add(1, Ordering::SeqCst),
                            }
                        }
                    };
                }
            })
        })
        .collect();
    // An established kept-alive connection opened before the reloads.
    let mut kept = Client::connect(addr);
    assert_eq!(kept.get("/").0, 200);
    for round in 0..6 {
        std::thread::sleep(Duration::from_millis(150));
        let mut next = s.clone();
        next.upstreams = backends.iter().map(Backend::upstream).collect();
        next.upstreams[round % 3].weight = 1 + round as u32;
        if round >= 4 {
            next.workers = 1 + round % 3; // workers added and removed too
        }
        next.algorithm = if round % 2 == 0 {
            Algorithm::Swrr
        } else {
            Algorithm::Vnswrr
        };
        p.apply(vec![next]).unwrap();
        assert_eq!(
            p.local_addr(&name),
            Some(addr),
            "the listener was not re-bound"
        );
        if round == 3 {
            assert_eq!(
                reconnects.load(Ordering::SeqCst),
                0,
                "reloads that keep the workers close no connection"
            );
            assert_eq!(
                kept.get("/").0,
                200,
                "a connection from before the reloads works"
            );
        }
    }
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    println!(
        "reload under load: {ok} requests answered, {failed} failed, 6 reloads; {} kept-alive \
         connections closed by removed workers and reopened",
        reconnects.load(Ordering::SeqCst)
    );
    assert_eq!(failed, 0);
    assert!(ok > 0);
    assert!(
        backends[2].requests.load(Ordering::SeqCst) > 0,
        "the added backend serves"
    );
    p.shutdown(Duration::from_secs(2));
}

use stator_proxy::Proxy;
