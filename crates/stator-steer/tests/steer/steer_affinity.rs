//! Client → worker affinity on real sockets: every connection and datagram from a client
//! reaches the worker the user-space model predicts, for TCP and UDP, IPv4 and IPv6.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! Each test builds a server namespace with N `SO_REUSEPORT` workers and a client namespace with
//! 64 source addresses, drives concurrent connections (TCP) or request/response datagrams (UDP)
//! from every address, each from a fresh source port, and checks the worker that answered
//! against `SteeringTable::pick` — 100%, over at least 10,000 connections per protocol on IPv4.
//! It then detaches the program and drives the same traffic through the kernel's own 4-tuple
//! hash, printing how many clients that splits across workers (the paper's problem).
#[allow(unused_imports)]
use crate::common;

use crate::common::{Family, Lab, Proto, Workers, drive, predict};
use stator_steer::{HashFields, ReuseportSteering, RpCounter, RssKey, SteeringOptions};

const WORKERS: u32 = 4;

struct Case {
    tag: &'static str,
    proto: Proto,
    family: Family,
    fields: HashFields,
    per_client: usize,
}

fn run(case: &Case) {
    let lab = Lab::new(case.tag);
    let server = Lab::server_addr(case.family);
    let clients = Lab::client_ips(case.family);
    let workers = Workers::start(&lab.server, case.proto, server, WORKERS);
    let mut steering = ReuseportSteering::load(&SteeringOptions {
        key: Some(RssKey::random().expect("random key")),
        fields: case.fields,
        ..SteeringOptions::new(WORKERS)
    })
    .expect("load the steering program");
    workers.steer(&mut steering);

    let before = steering.counters().expect("counters");
    let round = drive(
        &lab.client,
        case.proto,
        server,
        &clients,
        case.per_client,
        8,
    );
    let counted = steering.counters().expect("counters").since(&before);
    // (run-time statistics stay off: enabling them is machine-wide and would tax every other
    // BPF program, and the benchmarks of other tests running beside this one)
    let stats = steering.program_stats().expect("program stats");
    let live = workers.live();
    let wrong = round.mispredicted(|c| predict(steering.table(), &live, c));
    let total = round.answers.len();
    println!(
        "{}: {total} answered ({} failed), {} mispredicted, {} clients split across workers, \
         per worker {:?}; program: {counted}; {:?} instructions verified",
        case.tag,
        round.failed,
        wrong.len(),
        round.split_clients(),
        round.per_worker(WORKERS),
        stats.verified_instructions
    );
    assert_eq!(
        round.failed, 0,
        "{}: connections failed: {:?}",
        case.tag, round.last_error
    );
    assert_eq!(total, clients.len() * case.per_client);
    assert!(
        wrong.is_empty(),
        "{}: {} of {total} answers not from the predicted worker, e.g. {:?}",
        case.tag,
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    // every SYN (TCP) or datagram (UDP) was decided by the client's own slot
    common::assert_every_one_decided(&counted, round.sent, case.tag);
    assert_eq!(
        counted.get(RpCounter::SelectOwn),
        counted.runs(),
        "{counted}"
    );
    if case.fields == HashFields::Addr {
        assert_eq!(round.split_clients(), 0);
    }

    // the kernel's own hash, same traffic
    ReuseportSteering::detach(workers.sockets[0].as_ref().expect("socket"))
        .expect("detach the program");
    let kernel = drive(
        &lab.client,
        case.proto,
        server,
        &clients,
        case.per_client,
        8,
    );
    let unchanged = steering.counters().expect("counters").since(&before);
    assert_eq!(unchanged, counted, "the detached program still ran");
    assert_eq!(kernel.failed, 0, "{:?}", kernel.last_error);
    println!(
        "{}: kernel 4-tuple hash: {} of {} clients split across workers; {} of {} answers \
         ({:.1}%) away from their client's most frequent worker; per worker {:?}",
        case.tag,
        kernel.split_clients(),
        clients.len(),
        kernel.off_majority(),
        kernel.answers.len(),
        100.0 * kernel.off_majority() as f64 / kernel.answers.len().max(1) as f64,
        kernel.per_worker(WORKERS)
    );
}

#[test]
fn tcp_v4_connections_reach_the_predicted_worker() {
    run(&Case {
        tag: "t4",
        proto: Proto::Tcp,
        family: Family::V4,
        fields: HashFields::Addr,
        per_client: 157, // 64 × 157 = 10,048 connections
    });
}

#[test]
fn tcp_v6_connections_reach_the_predicted_worker() {
    run(&Case {
        tag: "t6",
        proto: Proto::Tcp,
        family: Family::V6,
        fields: HashFields::Addr,
        per_client: 80,
    });
}

#[test]
fn udp_v4_datagrams_reach_the_predicted_worker() {
    run(&Case {
        tag: "u4",
        proto: Proto::Udp,
        family: Family::V4,
        fields: HashFields::Addr,
        per_client: 157,
    });
}

#[test]
fn udp_v6_datagrams_reach_the_predicted_worker() {
    run(&Case {
        tag: "u6",
        proto: Proto::Udp,
        family: Family::V6,
        fields: HashFields::Addr,
        per_client: 80,
    });
}

/// With the port hashed too, each connection still lands where the model says — which now
/// depends on its source port, so clients do spread over workers.
#[test]
fn tcp_v4_address_and_port_reach_the_predicted_worker() {
    run(&Case {
        tag: "tp",
        proto: Proto::Tcp,
        family: Family::V4,
        fields: HashFields::AddrPort,
        per_client: 40,
    });
}
