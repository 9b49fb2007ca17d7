//! The 2014 paper's claim on real sockets, through the proxy: 64 clients, each with its own
//! source address in a client namespace, open 10,000 HTTP connections (8 threads, concurrent)
//! to a listener in a server namespace.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! - `steering = "source"` (stator-steer's `SK_REUSEPORT` program) with persistence: **every**
//!   client's connections reach one worker (the `X-Served-By` header names it) — the one
//!   stator-steer's table predicts — and one backend; the backend sees the client's own
//!   address in `X-Forwarded-For`.
//! - Removing a worker (a reload from 4 workers to 3) moves only that worker's clients: the
//!   clients whose worker changed are exactly those the removed worker served, the table
//!   agrees, and every client that stayed keeps its backend (its worker's session table).
//! - `steering = "kernel"` (the 4-tuple hash), the same traffic: how many clients reached
//!   more than one worker and more than one backend is printed (the paper's problem).
//! - HTTP end to end across the namespaces: 100 requests on one kept-alive client connection,
//!   10 MB chunked each way (checksummed at the other end), upstream connections reused, the
//!   client's address in `X-Forwarded-For`.

#[allow(unused_imports)]
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::common::lab::Lab;
use crate::common::steering::TestSteering;
use crate::common::{Backend, Client, chunked_body, pattern_fnv};
use stator_proxy::{ListenerSpec, PersistenceSpec, Protocol, Proxy, SourceSteering, Steering};

const CLIENTS: u8 = 64;
const WORKERS: usize = 4;
const THREADS: u8 = 8;

/// What one connection saw: the worker (from `X-Served-By`), the backend, and the
/// `X-Forwarded-For` the backend got.
#[derive(Debug, Clone)]
struct Seen {
    worker: u32,
    backend: String,
    xff: String,
}

fn request_from(src: Ipv4Addr, to: SocketAddr) -> Result<Seen, String> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|e| e.to_string())?;
    s.bind(&SocketAddr::new(IpAddr::V4(src), 0).into())
        .map_err(|e| format!("bind {src}: {e}"))?;
    s.connect(&to.into())
        .map_err(|e| format!("connect from {src}: {e}"))?;
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    let header = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::to_owned)
            .ok_or_else(|| format!("no {name} in {out:?}"))
    };
    let served_by = header("x-served-by: ")?;
    let worker = served_by
        .rsplit('/')
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("bad x-served-by {served_by:?}"))?;
    Ok(Seen {
        worker,
        backend: header("x-backend: ")?,
        xff: header("x-seen-xff: ")?,
    })
}

/// `per_client` connections from each of the 64 clients, from 8 concurrent threads in the
/// client namespace (each thread cycles over its 8 clients); what each client saw.
fn drive(lab: &Lab, to: SocketAddr, per_client: u32) -> BTreeMap<u8, Vec<Seen>> {
    let per_thread = CLIENTS / THREADS;
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            lab.client
                .spawn_thread(move || {
                    let mut seen: BTreeMap<u8, Vec<Seen>> = BTreeMap::new();
                    for i in 0..per_client * u32::from(per_thread) {
                        let client = t * per_thread + (i % u32::from(per_thread)) as u8 + 1;
                        let s = request_from(Ipv4Addr::new(10, 78, 1, client), to)
                            .unwrap_or_else(|e| panic!("client {client}: {e}"));
                        seen.entry(client).or_default().push(s);
                    }
                    seen
                })
                .expect("enter the client namespace")
        })
        .collect();
    let mut all = BTreeMap::new();
    for t in threads {
        all.extend(t.join().expect("client thread"));
    }
    all
}

fn client_addr(client: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 78, 1, client)), 0)
}

/// Eight backends and a 4-worker HTTP listener with persistence on 10.78.0.1:8080, all in the
/// server namespace (the workers' threads are started there, so their upstream connections
/// are too).
fn start(
    lab: &Lab,
    steering: Steering,
    source: Option<Arc<TestSteering>>,
) -> (Proxy, Vec<Backend>, ListenerSpec) {
    let backends: Vec<Backend> = lab
        .server
        .run_in(|| (0..8).map(|i| Backend::start(&format!("b{i}"))).collect())
        .expect("enter the server namespace");
    let mut spec = ListenerSpec::new(
        "aff",
        "10.78.0.1:8080".parse().unwrap(),
        Protocol::Http,
        backends.iter().map(Backend::upstream).collect(),
    );
    spec.workers = WORKERS;
    spec.steering = steering;
    spec.http.served_by = true;
    spec.persistence = Some(PersistenceSpec {
        timeout: Duration::from_secs(300),
        max_entries: 65_536,
    });
    let s = spec.clone();
    let proxy = lab
        .server
        .run_in(move || {
            let source = source.map(|s| s as Arc<dyn SourceSteering>);
            let mut p = Proxy::new("n1", source);
            p.apply(vec![s]).map(|()| p)
        })
        .expect("enter the server namespace")
        .expect("the listener starts");
    (proxy, backends, spec)
}

fn one<T: Ord + Clone>(items: impl Iterator<Item = T>) -> BTreeSet<T> {
    items.collect()
}

#[test]
fn source_steering_keeps_every_client_on_one_worker_and_one_backend_and_a_removed_worker_moves_only_its_clients()
 {
    let lab = Lab::new("pa", "s", CLIENTS);
    let steering = Arc::new(TestSteering::default());
    let (mut proxy, _backends, spec) = start(&lab, Steering::Source, Some(Arc::clone(&steering)));
    let group = steering
        .loaded
        .lock()
        .unwrap()
        .clone()
        .expect("the listener loaded its program");
    let to = spec.address;

    let before = drive(&lab, to, 10_000 / u32::from(CLIENTS) + 1);
    let total: usize = before.values().map(Vec::len).sum();
    assert!(total >= 10_000, "{total}");
    assert_eq!(before.len(), usize::from(CLIENTS));
    let table = group.lock().unwrap().table().clone();
    let mut worker_of = BTreeMap::new();
    let mut backend_of = BTreeMap::new();
    let mut per_worker = [0usize; WORKERS];
    for (client, seen) in &before {
        let workers = one(seen.iter().map(|s| s.worker));
        let backends = one(seen.iter().map(|s| s.backend.clone()));
        assert_eq!(
            workers.len(),
            1,
            "client {client} reached workers {workers:?}"
        );
        assert_eq!(
            backends.len(),
            1,
            "client {client} reached backends {backends:?}"
        );
        let w = *workers.first().unwrap();
        let predicted = table
            .pick(client_addr(*client), |w| (w as usize) < WORKERS)
            .worker();
        assert_eq!(Some(w), predicted, "client {client}: stator-steer's table");
        assert!(
            seen.iter().all(|s| s.xff == format!("10.78.1.{client}")),
            "the backend sees the client's address: {:?}",
            seen[0].xff
        );
        per_worker[w as usize] += 1;
        worker_of.insert(*client, w);
        backend_of.insert(*client, backends.first().unwrap().clone());
    }
    println!(
        "steering = source, {WORKERS} workers, persistence: {total} connections from {} clients, \
         100% of each client's on one worker and one backend; clients per worker {per_worker:?}",
        before.len()
    );

    // Reload to 3 workers: worker 3 leaves.
    let mut three = spec.clone();
    three.workers = WORKERS - 1;
    proxy.apply(vec![three]).expect("reload to 3 workers");
    let table3 = group.lock().unwrap().table().clone();
    let after = drive(&lab, to, 20);
    let leaving: BTreeSet<u8> = worker_of
        .iter()
        .filter(|(_, w)| **w == WORKERS as u32 - 1)
        .map(|(c, _)| *c)
        .collect();
    let mut moved = BTreeSet::new();
    let mut kept_backend = 0;
    for (client, seen) in &after {
        let workers = one(seen.iter().map(|s| s.worker));
        assert_eq!(
            workers.len(),
            1,
            "client {client} after the reload: {workers:?}"
        );
        let w = *workers.first().unwrap();
        assert!(
            (w as usize) < WORKERS - 1,
            "client {client} reached the removed worker"
        );
        let predicted = table3
            .pick(client_addr(*client), |w| (w as usize) < WORKERS - 1)
            .worker();
        assert_eq!(
            Some(w),
            predicted,
            "client {client}: stator-steer's table after the reload"
        );
        let backends = one(seen.iter().map(|s| s.backend.clone()));
        assert_eq!(
            backends.len(),
            1,
            "client {client} after the reload: {backends:?}"
        );
        if w != worker_of[client] {
            moved.insert(*client);
        } else {
            assert_eq!(
                backends.first(),
                backend_of.get(client),
                "client {client} stayed on its worker and keeps its backend"
            );
            kept_backend += 1;
        }
    }
    let moved_by_table = worker_of
        .keys()
        .filter(|c| table.owner(client_addr(**c)) != table3.owner(client_addr(**c)))
        .count();
    println!(
        "reload 4 → 3 workers: {} clients moved (worker 3 had {}; the table moved {moved_by_table}); \
         {kept_backend} clients kept their worker and their backend",
        moved.len(),
        leaving.len()
    );
    assert_eq!(moved, leaving, "only the removed worker's clients move");
    assert_eq!(moved_by_table, leaving.len());
    proxy.shutdown(Duration::from_secs(2));
}

#[test]
fn kernel_steering_spreads_a_clients_connections_over_workers() {
    let lab = Lab::new("pa", "k", CLIENTS);
    let (proxy, _backends, spec) = start(&lab, Steering::Kernel, None);
    let seen = drive(&lab, spec.address, 10_000 / u32::from(CLIENTS) + 1);
    let total: usize = seen.values().map(Vec::len).sum();
    let split_workers = seen
        .values()
        .filter(|s| one(s.iter().map(|s| s.worker)).len() > 1)
        .count();
    let split_backends = seen
        .values()
        .filter(|s| one(s.iter().map(|s| s.backend.clone())).len() > 1)
        .count();
    let off_main: usize = seen
        .values()
        .map(|s| {
            let mut n = [0usize; WORKERS];
            for x in s {
                n[x.worker as usize] += 1;
            }
            s.len() - n.iter().max().unwrap()
        })
        .sum();
    println!(
        "steering = kernel, {WORKERS} workers, persistence: {total} connections from {} clients; \
         {split_workers} clients reached more than one worker and {split_backends} more than one \
         backend; {off_main} connections ({:.1}%) did not reach their client's most used worker",
        seen.len(),
        off_main as f64 * 100.0 / total as f64
    );
    assert!(total >= 10_000);
    assert_eq!(seen.len(), usize::from(CLIENTS));
    proxy.shutdown(Duration::from_secs(2));
}

#[test]
fn http_across_namespaces_keeps_alive_streams_10_mb_and_forwards_the_client_address() {
    let lab = Lab::new("pa", "h", CLIENTS);
    let (proxy, backends, spec) = start(&lab, Steering::Kernel, None);
    let to = spec.address;
    let mut c = lab
        .client
        .run_in(move || Client::connect(to))
        .expect("enter the client namespace");
    for _ in 0..100 {
        let (status, h, _) = c.get("/");
        assert_eq!(status, 200);
        assert_eq!(h["x-seen-xff"], "10.78.1.1");
    }
    const MB10: u64 = 10 * 1024 * 1024;
    let (status, _, body) = c.request("POST", "/upload", chunked_body(MB10));
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        format!("{MB10} {:016x}", pattern_fnv(MB10))
    );
    let (status, _, body) = c.get(&format!("/bytes/{MB10}"));
    assert_eq!(status, 200);
    assert_eq!(body.len() as u64, MB10);
    let mut h = common::Fnv::default();
    h.update(&body);
    assert_eq!(h.0, pattern_fnv(MB10));
    let view = &proxy.listeners()[0];
    let requests: u64 = backends
        .iter()
        .map(|b| b.requests.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    let upstream: u64 = backends
        .iter()
        .map(|b| b.connections.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    println!("one client connection, {requests} requests, {upstream} upstream connections");
    assert_eq!(
        view.stats
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert_eq!(requests, 102);
    assert!(
        upstream <= 8,
        "upstream connections are reused: {upstream} for 102 requests"
    );
    proxy.shutdown(Duration::from_secs(2));
}
