//! Workers leaving and joining: only the clients of the worker that changes move.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! Four TCP workers behind the steering program, 64 IPv4 clients, 20 connections per client per
//! phase. (1) All workers live: the baseline. (2) Worker 2's socket closes without a table
//! change: its clients fall back to the next slots' workers, as predicted, counted in
//! `select_probe`; nobody else moves. (3) `set_workers` without worker 2: the table delta holds
//! only worker 2's slots, and exactly worker 2's clients move. (4) Worker 2 comes back with a new
//! socket: slots move only to it, clients only to it. (5) No live worker: the kernel's hash picks
//! (`select_kernel`), and connections still succeed.
#[allow(unused_imports)]
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::Arc;

use crate::common::{Family, Lab, Proto, Round, Workers, drive, predict, reuseport_socket};
use stator_steer::{ReuseportSteering, RpCounter, RssKey, SteerCounters, SteeringOptions};

const PER_CLIENT: usize = 20;

/// Drives one phase and checks every answer against the model with `live` sockets.
fn phase(
    name: &str,
    lab: &Lab,
    steering: &ReuseportSteering,
    live: &[u32],
) -> (Round, SteerCounters) {
    let before = steering.counters().expect("counters");
    let round = drive(
        &lab.client,
        Proto::Tcp,
        Lab::server_addr(Family::V4),
        &Lab::client_ips(Family::V4),
        PER_CLIENT,
        8,
    );
    let counted = steering.counters().expect("counters").since(&before);
    assert_eq!(round.failed, 0, "{name}: {:?}", round.last_error);
    let wrong = round.mispredicted(|c| predict(steering.table(), live, c));
    assert!(
        wrong.is_empty(),
        "{name}: {} answers not from the predicted worker, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    common::assert_every_one_decided(&counted, round.sent, name);
    if !live.is_empty() {
        assert_eq!(round.split_clients(), 0, "{name}");
    }
    println!(
        "{name}: {} connections, program: {counted}",
        round.answers.len()
    );
    (round, counted)
}

/// Client → its (single) worker in a round.
fn owners(round: &Round) -> BTreeMap<IpAddr, u32> {
    round
        .workers_by_client()
        .into_iter()
        .map(|(ip, ws)| (ip, *ws.iter().next().expect("a worker")))
        .collect()
}

fn moved(a: &BTreeMap<IpAddr, u32>, b: &BTreeMap<IpAddr, u32>) -> BTreeSet<IpAddr> {
    a.iter()
        .filter(|(ip, w)| b.get(ip) != Some(w))
        .map(|(ip, _)| *ip)
        .collect()
}

#[test]
fn only_the_clients_of_a_changing_worker_move() {
    let lab = Lab::new("w");
    let server = Lab::server_addr(Family::V4);
    let mut workers = Workers::start(&lab.server, Proto::Tcp, server, 4);
    let mut steering = ReuseportSteering::load(&SteeringOptions {
        key: Some(RssKey::random().expect("key")),
        ..SteeringOptions::new(4)
    })
    .expect("load");
    workers.steer(&mut steering);

    // 1. all live
    let (base, counted) = phase("all live", &lab, &steering, &[0, 1, 2, 3]);
    assert_eq!(
        counted.get(RpCounter::SelectOwn),
        counted.runs(),
        "{counted}"
    );
    let base_owners = owners(&base);
    let of_2: BTreeSet<IpAddr> = base_owners
        .iter()
        .filter(|(_, w)| **w == 2)
        .map(|(ip, _)| *ip)
        .collect();
    assert!(!of_2.is_empty(), "worker 2 owns no client of 64");

    // 2. worker 2's socket closes, the table still names it: its clients probe onwards
    drop(workers.close(2));
    let (fallback, counted) = phase("socket 2 closed", &lab, &steering, &[0, 1, 3]);
    let probed = (of_2.len() * PER_CLIENT) as u64;
    let extra = counted.runs() - fallback.sent as u64;
    let probe = counted.get(RpCounter::SelectProbe);
    assert!(probe >= probed && probe <= probed + extra, "{counted}");
    assert_eq!(
        counted.get(RpCounter::SelectOwn) + probe,
        counted.runs(),
        "{counted}"
    );
    assert_eq!(moved(&base_owners, &owners(&fallback)), of_2);

    // 3. the table drops worker 2: the delta is worker 2's slots only
    let change = steering.set_workers(&[0, 1, 3]).expect("set_workers");
    assert!(!change.changes.is_empty());
    for c in &change.changes {
        assert_eq!(
            change.previous.slots()[c.index as usize],
            2,
            "slot {}",
            c.index
        );
    }
    assert_eq!(
        change.changes.len() as u32,
        change.previous.slot_count(2),
        "every slot of worker 2 and no other"
    );
    let (without, counted) = phase("worker 2 removed", &lab, &steering, &[0, 1, 3]);
    assert_eq!(
        counted.get(RpCounter::SelectOwn),
        counted.runs(),
        "{counted}"
    );
    let without_owners = owners(&without);
    let moved_clients = moved(&base_owners, &without_owners);
    // a client moves iff its slot is in the delta
    let in_delta: BTreeSet<IpAddr> = base_owners
        .keys()
        .filter(|ip| {
            let slot = steering.table().slot(std::net::SocketAddr::new(**ip, 0));
            change.changes.iter().any(|c| c.index == slot)
        })
        .copied()
        .collect();
    println!(
        "worker 2 left: {} of {} clients moved, exactly worker 2's {}; table delta {} of {} slots",
        moved_clients.len(),
        base_owners.len(),
        of_2.len(),
        change.changes.len(),
        steering.table().size()
    );
    assert_eq!(moved_clients, of_2);
    assert_eq!(in_delta, of_2);

    // 4. worker 2 comes back with a new socket: slots and clients move only to it
    let socket = Arc::new(reuseport_socket(&lab.server, Proto::Tcp, server));
    steering.set_socket(2, socket.as_fd()).expect("set_socket");
    workers.spawn(2, socket.clone());
    workers.sockets[2] = Some(socket);
    let change = steering.set_workers(&[0, 1, 2, 3]).expect("set_workers");
    assert!(change.changes.iter().all(|c| c.id == 2));
    let (back, _) = phase("worker 2 back", &lab, &steering, &[0, 1, 2, 3]);
    let back_owners = owners(&back);
    let returned = moved(&without_owners, &back_owners);
    assert!(returned.iter().all(|ip| back_owners[ip] == 2));
    println!(
        "worker 2 back: {} clients moved, all to worker 2 ({} table slots)",
        returned.len(),
        change.changes.len()
    );

    // 5. no live worker: the kernel decides, and still serves
    steering.set_workers(&[]).expect("set_workers");
    let (_, counted) = phase("no live worker", &lab, &steering, &[]);
    assert_eq!(
        counted.get(RpCounter::SelectKernel),
        counted.runs(),
        "{counted}"
    );
}
