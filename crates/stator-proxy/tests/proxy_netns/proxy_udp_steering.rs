//! The UDP listener across namespaces, steered by client address: 10,240 request/response
//! pairs from 64 client addresses (4 source ports each) in a client namespace, through a
//! 4-worker `protocol = "udp"` listener in a server namespace with `steering = "source"`
//! (stator-steer's `SK_REUSEPORT` program) and persistence, to 3 echo backends.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! Asserted: every reply reaches the socket that asked and echoes its request (0 mismatched),
//! and every source port of a client address lands on one backend — the worker the program
//! picks for the address holds all of the client's sessions, so its persistence entry decides
//! them all. The same traffic through the kernel's 4-tuple hash (`steering = "kernel"`) is
//! printed beside it: how many clients it split across backends.

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::udp_common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::common::lab::{Lab, SERVER};
use crate::common::steering::TestSteering;
use crate::udp_common::{Echo, ask};
use stator_proxy::{ListenerSpec, PersistenceSpec, Protocol, Proxy, Steering, UdpDrop};

const CLIENTS: u8 = 64;
const PORTS_PER_CLIENT: usize = 4;
const ASKS_PER_PORT: usize = 40;

/// What one run gave: replies that did not echo their request, backends per client address,
/// pairs answered.
struct Outcome {
    mismatched: usize,
    backends: BTreeMap<u8, BTreeSet<String>>,
    answered: usize,
}

fn run(lab: &Lab, steering: Steering) -> (Outcome, Arc<stator_proxy::ListenerStats>) {
    // echo backends and the proxy live in the server namespace (their threads inherit it)
    let (proxy, echoes, addr) = lab
        .server
        .run_in(move || {
            let echoes: Vec<Echo> = (0..3)
                .map(|i| Echo::start(&format!("e{i}"), &format!("{SERVER}:0")))
                .collect();
            let mut spec = ListenerSpec::new(
                "steered",
                SocketAddr::from((SERVER, 0)),
                Protocol::Udp,
                echoes.iter().map(Echo::upstream).collect(),
            );
            spec.workers = 4;
            spec.steering = steering;
            spec.persistence = Some(PersistenceSpec {
                timeout: Duration::from_secs(600),
                max_entries: 1024,
            });
            let mut p = Proxy::new("test", Some(Arc::new(TestSteering::default())));
            p.apply(vec![spec]).expect("the listener starts");
            let addr = p.local_addr("steered").expect("bound");
            (p, echoes, addr)
        })
        .expect("enter the server namespace");
    let stats = Arc::clone(&proxy.listeners()[0].stats);
    let threads: Vec<_> = (1..=CLIENTS)
        .map(|c| {
            lab.client
                .spawn_thread(move || {
                    let socks: Vec<UdpSocket> = (0..PORTS_PER_CLIENT)
                        .map(|_| UdpSocket::bind(format!("10.78.1.{c}:0")).expect("bind"))
                        .collect();
                    let (mut mismatched, mut answered) = (0, 0);
                    let mut backends = BTreeSet::new();
                    for seq in 0..ASKS_PER_PORT {
                        for (k, s) in socks.iter().enumerate() {
                            let msg = format!("c{c}-p{k}-{seq}");
                            let Some(reply) = ask(s, addr, msg.as_bytes(), Duration::from_secs(5))
                            else {
                                mismatched += 1;
                                continue;
                            };
                            match String::from_utf8_lossy(&reply).split_once('|') {
                                Some((b, m)) if m == msg => {
                                    answered += 1;
                                    backends.insert(b.to_string());
                                }
                                _ => mismatched += 1,
                            }
                        }
                    }
                    (c, mismatched, answered, backends)
                })
                .expect("enter the client namespace")
        })
        .collect();
    let mut out = Outcome {
        mismatched: 0,
        backends: BTreeMap::new(),
        answered: 0,
    };
    for t in threads {
        let (c, mismatched, answered, backends) = t.join().expect("client thread");
        out.mismatched += mismatched;
        out.answered += answered;
        out.backends.insert(c, backends);
    }
    proxy.shutdown(Duration::from_secs(1));
    drop(echoes);
    (out, stats)
}

#[test]
fn ten_thousand_pairs_from_64_clients_reach_their_asker_and_one_backend_per_client() {
    let lab = Lab::new("su", "st", CLIENTS);
    let pairs = usize::from(CLIENTS) * PORTS_PER_CLIENT * ASKS_PER_PORT;
    let (steered, stats) = run(&lab, Steering::Source);
    assert_eq!(steered.mismatched, 0, "replies that missed their asker");
    assert_eq!(steered.answered, pairs);
    let split = steered.backends.values().filter(|b| b.len() > 1).count();
    assert_eq!(
        split, 0,
        "steering = source: every port of a client on one backend: {:?}",
        steered.backends
    );
    // A reply is counted after its send returns, possibly after the client read it.
    udp_common::eventually(Duration::from_secs(5), || {
        stats.udp.datagrams_out.load(Relaxed) >= pairs as u64
    });
    assert_eq!(stats.udp.datagrams_in.load(Relaxed), pairs as u64);
    assert_eq!(stats.udp.datagrams_out.load(Relaxed), pairs as u64);
    assert_eq!(
        stats.connections.load(Relaxed),
        (usize::from(CLIENTS) * PORTS_PER_CLIENT) as u64,
        "a session per client address and port"
    );
    for why in UdpDrop::ALL {
        assert_eq!(stats.udp.drops(why), 0, "{}", why.label());
    }
    let (kernel, _) = run(&lab, Steering::Kernel);
    assert_eq!(kernel.mismatched, 0, "replies that missed their asker");
    let kernel_split = kernel.backends.values().filter(|b| b.len() > 1).count();
    println!(
        "{pairs} request/response pairs from {CLIENTS} clients x {PORTS_PER_CLIENT} ports, 4 \
         workers, persistence on: steering = source split {split} clients across backends, \
         steering = kernel split {kernel_split}"
    );
}
