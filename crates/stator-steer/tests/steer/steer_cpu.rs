//! `steering = "cpu"` (docs/steering.md §8): the 2014 paper's locality, with the NIC's
//! source-address RSS done in software. Receive steering (`stator_rss` at XDP on the server's
//! veth) sends each client's packets to the CPU of the worker its slot names; the workers are
//! pinned one per CPU; the reuseport program, loaded with the same key and table, picks that
//! worker. For 64 clients × 4 connections from client threads pinned on different CPUs:
//! every connection reaches the client's predicted worker, the kernel received its packets on
//! that worker's CPU (`SO_INCOMING_CPU` of the accepted socket, read after the request's data
//! arrived), the worker served it there (`sched_getcpu`), and the programs' own counters agree.
//! Then the same traffic without receive steering: the checks that passed now fail for some
//! connections — what they measure is the steering. And UDP, IPv4 and IPv6: every datagram
//! selected on its worker's CPU, by the program's own per-CPU counters.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use socket2::Socket;
use stator_steer::{
    ReceiveOptions, ReceiveSteering, ReuseportSteering, RpCounter, RssAttachMode, RssCounter,
    RssKey, Transport,
};

use crate::common::{CLIENTS, Family, Lab, PORT, Proto, reuseport_socket, tcp_connect};

/// Connections per client and phase.
const PER_CLIENT: usize = 4;
/// Bytes a client sends before the worker answers (two writes: more than one data packet).
const REQUEST: usize = 512;

/// One served connection: who, which worker, where its packets were received and served.
#[derive(Debug, Clone, Copy)]
struct Served {
    client: IpAddr,
    worker: u32,
    received_on: u32,
    served_on: u32,
}

/// Workers pinned one per CPU, each accepting on its own socket: reads the request, answers
/// `[worker, SO_INCOMING_CPU, sched_getcpu]`.
struct PinnedWorkers {
    sockets: Vec<Arc<Socket>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl PinnedWorkers {
    fn start(lab: &Lab, cpus: &[u32]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut w = Self {
            sockets: Vec::new(),
            stop: stop.clone(),
            threads: Vec::new(),
        };
        for (id, &cpu) in cpus.iter().enumerate() {
            let s = Arc::new(reuseport_socket(
                &lab.server,
                Proto::Tcp,
                Lab::server_addr(Family::V4),
            ));
            let (socket, stop) = (s.clone(), stop.clone());
            w.threads.push(
                std::thread::Builder::new()
                    .name(format!("cpu-worker-{id}"))
                    .spawn(move || serve(id as u8, cpu, &socket, &stop))
                    .expect("spawn worker"),
            );
            w.sockets.push(s);
        }
        w
    }
}

impl Drop for PinnedWorkers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(id: u8, cpu: u32, socket: &Socket, stop: &AtomicBool) {
    stator_sys::cpu::pin_to_cpu(cpu as usize).expect("pin the worker to its CPU");
    while !stop.load(Ordering::SeqCst) {
        let Ok((conn, _)) = socket.accept() else {
            continue; // SO_RCVTIMEO: look at `stop` again
        };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let received_on = {
            let mut stream: &Socket = &conn;
            let mut req = [0u8; REQUEST];
            if stream.read_exact(&mut req).is_err() {
                continue;
            }
            conn.cpu_affinity().map_or(u8::MAX, |c| c as u8)
        };
        let served_on = stator_sys::cpu::current_cpu().map_or(u8::MAX, |c| c as u8);
        let mut stream: &Socket = &conn;
        let _ = stream.write_all(&[id, received_on, served_on]);
    }
}

/// `PER_CLIENT` connections from each client, from one client thread pinned on each CPU.
fn drive(lab: &Lab, cpus: &[u32]) -> (Vec<Served>, usize) {
    let clients = Lab::client_ips(Family::V4);
    let server = Lab::server_addr(Family::V4);
    let handles: Vec<_> = cpus
        .iter()
        .enumerate()
        .map(|(t, &cpu)| {
            let mine: Vec<IpAddr> = clients
                .iter()
                .copied()
                .cycle()
                .take(clients.len() * PER_CLIENT)
                .skip(t)
                .step_by(cpus.len())
                .collect();
            lab.client
                .spawn_thread(move || {
                    stator_sys::cpu::pin_to_cpu(cpu as usize).expect("pin the client thread");
                    let (mut served, mut failed) = (Vec::new(), 0);
                    for ip in mine {
                        match once(ip, server) {
                            Ok(s) => served.push(s),
                            Err(_) => failed += 1,
                        }
                    }
                    (served, failed)
                })
                .expect("client thread")
        })
        .collect();
    let (mut served, mut failed) = (Vec::new(), 0);
    for h in handles {
        let (s, f) = h.join().expect("client thread panicked");
        served.extend(s);
        failed += f;
    }
    (served, failed)
}

fn once(ip: IpAddr, server: SocketAddr) -> std::io::Result<Served> {
    let (mut stream, _) = tcp_connect(ip, server)?;
    stream.set_nodelay(true)?;
    stream.write_all(&[b'a'; REQUEST / 2])?;
    std::thread::sleep(Duration::from_millis(1));
    stream.write_all(&[b'b'; REQUEST / 2])?;
    let mut answer = [0u8; 3];
    stream.read_exact(&mut answer)?;
    Ok(Served {
        client: ip,
        worker: u32::from(answer[0]),
        received_on: u32::from(answer[1]),
        served_on: u32::from(answer[2]),
    })
}

/// The lab `tag`, the CPUs the workers go on (up to four the test may use; at least two), and
/// receive steering for `transport` on the server's veth (generic XDP, Microsoft's key).
fn receive_lab(tag: &str, transport: Transport) -> (Lab, Vec<u32>, ReceiveSteering) {
    let lab = Lab::new(tag);
    let allowed = stator_sys::cpu::allowed_cpus().expect("the CPUs this test may use");
    assert!(
        allowed.len() >= 2,
        "steering = \"cpu\" needs two CPUs to show anything; this test may run on {allowed:?} only"
    );
    let cpus: Vec<u32> = allowed.iter().take(4).map(|&c| c as u32).collect();
    let opts = ReceiveOptions {
        key: Some(RssKey::microsoft()),
        ..ReceiveOptions::new(cpus.clone())
    };
    let rss = lab
        .server
        .run_in(move || {
            let mut rss = ReceiveSteering::load(&opts).expect("load stator_rss");
            rss.steer_port(transport, PORT).expect("steer the port");
            rss.attach("vs", RssAttachMode::Generic)
                .expect("attach to vs");
            rss
        })
        .expect("enter the server namespace");
    (lab, cpus, rss)
}

#[test]
fn every_packet_of_a_client_is_received_and_served_on_its_workers_cpu() {
    let (lab, cpus, rss) = receive_lab("cpu", Transport::Tcp);
    let workers = PinnedWorkers::start(&lab, &cpus);
    let mut steering =
        ReuseportSteering::load(&rss.listener_options()).expect("load the reuseport program");
    for (id, s) in workers.sockets.iter().enumerate() {
        steering
            .set_socket(id as u32, s.as_fd())
            .expect("set_socket");
    }
    steering
        .attach(workers.sockets[0].as_fd())
        .expect("attach to the group");
    assert_eq!(steering.table().slots(), rss.table().slots(), "one table");

    let (served, failed) = drive(&lab, &cpus);
    let counters = steering.counters().expect("reuseport counters");
    let rss_counters = rss.counters().expect("receive-steering counters");
    eprintln!("XDP generic: {rss_counters}; reuseport: {counters}");
    let connections = CLIENTS * PER_CLIENT;
    assert_eq!((served.len(), failed), (connections, 0));
    let mut per_cpu = vec![0usize; cpus.len()];
    for s in &served {
        let worker = rss
            .table()
            .owner(SocketAddr::new(s.client, 0))
            .expect("owner");
        let cpu = cpus[worker as usize];
        assert_eq!(
            (s.worker, s.received_on, s.served_on),
            (worker, cpu, cpu),
            "{}: (worker, received on, served on) should be its worker's and that worker's CPU",
            s.client
        );
        per_cpu[worker as usize] += 1;
    }
    assert!(
        per_cpu.iter().all(|&n| n > 0),
        "64 clients should reach every CPU: {per_cpu:?}"
    );
    // counted per CPU by the program itself: each CPU made exactly its worker's selections
    let on_cpu = steering.counters_per_cpu().expect("per-CPU counters");
    for (worker, &cpu) in cpus.iter().enumerate() {
        let c = &on_cpu[cpu as usize];
        assert_eq!(
            (c.get(RpCounter::CpuLocal), c.get(RpCounter::CpuRemote)),
            (per_cpu[worker] as u64, 0),
            "CPU {cpu}: the selections for worker {worker}'s clients, all local"
        );
    }
    assert_eq!(counters.get(RpCounter::SelectOwn), connections as u64);
    assert_eq!(counters.get(RpCounter::CpuLocal), connections as u64);
    assert_eq!(counters.get(RpCounter::CpuRemote), 0);
    assert_eq!(rss_counters.get(RssCounter::NoCpu), 0);
    assert_eq!(rss_counters.get(RssCounter::Malformed), 0);
    // client threads run on every CPU, so some packets arrived on the wrong one and moved
    assert!(
        rss_counters.get(RssCounter::Redirected) > 0,
        "{rss_counters}"
    );
    assert!(rss_counters.get(RssCounter::Local) > 0, "{rss_counters}");

    // The same traffic with receive steering gone (dropping it detaches the program).
    drop(rss);
    let before = steering.counters().expect("reuseport counters");
    let (served, failed) = drive(&lab, &cpus);
    let after = steering
        .counters()
        .expect("reuseport counters")
        .since(&before);
    assert_eq!((served.len(), failed), (connections, 0));
    let elsewhere = served
        .iter()
        .filter(|s| s.received_on != cpus[s.worker as usize])
        .count();
    eprintln!("without receive steering: {after}; {elsewhere} connections received elsewhere");
    assert!(after.get(RpCounter::CpuRemote) > 0, "{after}");
    assert!(
        elsewhere > 0,
        "without receive steering some packets land on another CPU"
    );
    // persistence does not depend on it: the table still decides the worker
    assert_eq!(after.get(RpCounter::SelectOwn), connections as u64);
}

/// The same for UDP, IPv4 and IPv6: every datagram of 64 clients is selected on the CPU of the
/// worker its client is steered to (the reuseport program's per-CPU counters: `cpu_local` on
/// that CPU only, never `cpu_remote`), and reaches the predicted worker.
#[test]
fn every_udp_datagram_is_selected_on_its_workers_cpu() {
    let (lab, cpus, rss) = receive_lab("cpuu", Transport::Udp);
    for family in [Family::V4, Family::V6] {
        let server = Lab::server_addr(family);
        let workers =
            crate::common::Workers::start(&lab.server, Proto::Udp, server, cpus.len() as u32);
        let mut steering =
            ReuseportSteering::load(&rss.listener_options()).expect("load the reuseport program");
        workers.steer(&mut steering);
        let round = crate::common::drive(
            &lab.client,
            Proto::Udp,
            server,
            &Lab::client_ips(family),
            PER_CLIENT,
            cpus.len(),
        );
        assert_eq!(round.failed, 0, "{:?}", round.last_error);
        let wrong = round.mispredicted(|c| rss.table().owner(c));
        assert!(wrong.is_empty(), "{family:?}: {wrong:?}");
        let total = steering.counters().expect("counters");
        let on_cpu = steering.counters_per_cpu().expect("per-CPU counters");
        eprintln!("UDP {family:?}: {total}");
        assert_eq!(total.get(RpCounter::CpuRemote), 0, "{family:?}: {total}");
        assert_eq!(
            total.get(RpCounter::CpuLocal),
            total.get(RpCounter::SelectOwn),
            "{family:?}: {total}"
        );
        assert!(total.get(RpCounter::SelectOwn) >= round.answers.len() as u64);
        // every CPU counted only its own worker's datagrams, and each worker had some
        for (worker, &cpu) in cpus.iter().enumerate() {
            let answered = round.per_worker(cpus.len() as u32)[worker] as u64;
            assert!(answered > 0, "{family:?}: worker {worker} got no client");
            assert!(
                on_cpu[cpu as usize].get(RpCounter::CpuLocal) >= answered,
                "{family:?}: CPU {cpu} selected fewer datagrams than worker {worker} answered"
            );
        }
    }
    let c = rss.counters().expect("receive-steering counters");
    assert_eq!(
        (c.get(RssCounter::NoCpu), c.get(RssCounter::Malformed)),
        (0, 0),
        "{c}"
    );
}
