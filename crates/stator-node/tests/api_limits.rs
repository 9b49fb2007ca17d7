//! The admin API under clients that open connections and send nothing: with 1,000 such
//! connections held open, `GET /v1/status` still answers promptly; at `api.max_connections`
//! the oldest idle connection makes room for a new one; a connection silent for
//! `api.header_read_timeout` is closed (stepped on tokio's paused clock). No root.
//!
//! The process runs with a descriptor limit a default host has room for (1,400): 1,000
//! client sockets here plus the node's side of every connection it keeps open. A server that
//! kept every idle connection would run out of descriptors and make new connections wait —
//! the defect these limits fix.

mod common;

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::sim::{self, Hold, settle};
use stator_api::client::ApiClient;

/// The descriptor limit the first test needs: its 1,000 client sockets and, until the API has
/// closed those over `api.max_connections`, as many accepted ones, in one process (1,400 was
/// too few: a loaded CI run hit EMFILE while the API was still closing the surplus).
const FD_LIMIT: u64 = 4096;

/// The TCP endpoint's token (these tests are about TCP connections).
const TOKEN: &str = "api-limits-token";

fn config(api: &str) -> String {
    format!(
        "{}[api]\ntoken = \"{TOKEN}\"\n{api}\n[[pool]]\nname = \"web\"\n[pool.health]\nmethod = \"none\"\n\
         [[pool.backend]]\naddress = \"{}\"\nport = 80\n[[vip]]\naddress = \"192.0.2.10\"\n\
         port = 80\nprotocol = \"tcp\"\npools = [\"web\"]\ntable_size = 251\n",
        sim::node_toml(1 << 16, ""),
        sim::backend(2)
    )
}

/// Whether the peer closed `s` (a read returns end of file or a reset); `s` must be
/// non-blocking.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

fn connect_idle(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

#[test]
fn a_thousand_idle_connections_do_not_delay_the_api() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let hard = getrlimit(Resource::Nofile).maximum;
    assert!(
        hard.is_none_or(|h| h >= FD_LIMIT),
        "this test needs a descriptor limit of {FD_LIMIT}; the hard limit is {hard:?}"
    );
    // raise the soft limit to FD_LIMIT, never lower it
    let soft = getrlimit(Resource::Nofile).current;
    if soft.is_some_and(|s| s < FD_LIMIT) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(FD_LIMIT),
                maximum: hard,
            },
        )
        .unwrap();
    }

    let rt = common::runtime();
    let state = sim::state(1 << 16);
    let node = rt
        .block_on(sim::start_tcp(&config(""), &state, Default::default()))
        .unwrap();
    let addr = node.api_addr().unwrap();
    let max = node.view().config.api.max_connections as usize;
    let started = Instant::now();
    let idle: Vec<TcpStream> = (0..1000).map(|_| connect_idle(addr)).collect();
    println!(
        "1,000 idle connections opened in {:?} (api.max_connections = {max})",
        started.elapsed()
    );
    let stats = std::sync::Arc::clone(&node.ctx().conn_stats);
    // The server has accepted them all (evicting idle ones past the limit).
    common::wait_until(
        "the server to take every connection",
        Duration::from_secs(10),
        || stats.accepted() >= 1000,
    );

    let api = ApiClient::new(&addr.to_string(), Some(TOKEN.into())).unwrap();
    let mut took: Vec<Duration> = (0..9)
        .map(|_| {
            let t = Instant::now();
            let status = api.get_json("/v1/status").unwrap();
            assert_eq!(status["phase"], "running");
            t.elapsed()
        })
        .collect();
    took.sort_unstable();
    let median = took[took.len() / 2];
    println!(
        "GET /v1/status with 1,000 idle connections held: median {median:?} of 9 (min {:?}, \
         max {:?}); connections accepted {}, evicted {}, refused {}, open {}",
        took[0],
        took[took.len() - 1],
        stats.accepted(),
        stats.evicted(),
        stats.refused(),
        stats.open()
    );
    assert!(median < Duration::from_millis(100), "median {median:?}");
    assert!(stats.open() <= max, "{} open > {max}", stats.open());
    assert!(
        stats.evicted() >= (1000 - max) as u64,
        "idle connections made room: {} evicted",
        stats.evicted()
    );
    assert_eq!(
        stats.refused(),
        0,
        "idle connections are evicted, not new ones"
    );
    let metrics = api.request("GET", "/metrics", &[], &[]).unwrap().text();
    let samples = common::prom::check(&metrics).unwrap();
    assert_eq!(
        common::prom::value(
            &samples,
            "stator_api_connections_total",
            &[("result", "refused")]
        ),
        Some(0.0)
    );
    drop(idle);
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn at_the_limit_the_oldest_idle_connection_makes_room() {
    let rt = common::runtime();
    let state = sim::state(1 << 16);
    let node = rt
        .block_on(sim::start_tcp(
            &config("max_connections = 3"),
            &state,
            Default::default(),
        ))
        .unwrap();
    let addr = node.api_addr().unwrap();
    let stats = std::sync::Arc::clone(&node.ctx().conn_stats);
    let mut idle: Vec<TcpStream> = Vec::new();
    for n in 1..=3 {
        idle.push(connect_idle(addr));
        common::wait_until("the server to accept it", Duration::from_secs(10), || {
            stats.accepted() >= n
        });
    }
    assert!(idle.iter_mut().all(|s| !closed(s)));
    // A fourth client with a request: the oldest idle connection is closed for it.
    let api = ApiClient::new(&addr.to_string(), Some(TOKEN.into())).unwrap();
    assert_eq!(api.get_json("/v1/status").unwrap()["phase"], "running");
    common::wait_until("the oldest to be closed", Duration::from_secs(10), || {
        closed(&mut idle[0])
    });
    assert!(
        !closed(&mut idle[1]) && !closed(&mut idle[2]),
        "only the oldest"
    );
    assert_eq!((stats.evicted(), stats.refused()), (1, 0));
    rt.block_on(node.shutdown()).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_is_closed_after_the_header_read_timeout() {
    let _hold = Hold::new();
    let state = sim::state(1 << 16);
    let node = sim::start_tcp(
        &config("header_read_timeout = \"300ms\""),
        &state,
        Default::default(),
    )
    .await
    .unwrap();
    let addr = node.api_addr().unwrap();
    let stats = std::sync::Arc::clone(&node.ctx().conn_stats);
    let mut silent = connect_idle(addr);
    // A partial request head is no better than none.
    let mut partial = connect_idle(addr);
    std::io::Write::write_all(&mut partial, b"GET /v1/status HTTP/1.1\r\nHost: x\r\n").unwrap();
    settle("the server to accept both", || stats.accepted() >= 2).await;
    tokio::time::advance(Duration::from_millis(299)).await;
    sim::idle().await;
    assert!(
        !closed(&mut silent) && !closed(&mut partial),
        "open at 299 ms"
    );
    tokio::time::advance(Duration::from_millis(2)).await;
    settle("both closed at 300 ms", || {
        closed(&mut silent) && closed(&mut partial)
    })
    .await;
    settle("the server to forget them", || stats.open() == 0).await;
    node.shutdown().await.unwrap();
}
