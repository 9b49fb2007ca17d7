//! Direct server return end to end, in namespaces (stator_lab::topo):
//!
//! client (8 addresses) → router → LB node (the XDP forwarder on its veth, one-armed:
//! encapsulates and sends back to the router with XDP_TX) → router → two backends
//! (`stator decap` attached through the CLI, the VIP on `lo`, TCP identify and UDP echo
//! servers) → replies straight from the backends to the client through the router.
//!
//! For GRE, IPIP and GUE, an IPv4 and an IPv6 VIP: real TCP connections complete with the
//! right answers, both backends get a fair share, every encapsulated packet is decapsulated,
//! and the LB node sees only client→VIP packets (its interface counters and the forwarder's
//! counters against the client's), so the replies bypassed it. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use crate::common::{decap_attach, decap_detach, peer_xdp, stator_ok};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use stator_abi::{Counter, DecapCounter, Encap};
use stator_core::{BackendSpec, NodeParams, Proto, SnapshotBuilder, ValidSnapshot};
use stator_lab::netns::Netns;
use stator_lab::serve::{self, Server};
use stator_lab::stator::BpfFs;
use stator_lab::topo::{DsrLab, DsrSpec};
use stator_xdp::{ConntrackMode, DecapMaps, Forwarder, XdpMode, XdpOptions};

const V4_CONNS: usize = 200;
const V6_CONNS: usize = 100;
const UDP_REQS: usize = 20;
const TIMEOUT: Duration = Duration::from_secs(5);

use stator_lab::netns::require_root;

/// Removes the bpffs pins of the test (not namespaced, so not removed with the lab), then
/// unmounts the test's own bpffs they live on.
struct Pins(Vec<PathBuf>, Option<BpfFs>);

impl Drop for Pins {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = stator_xdp::detach_all(p);
            let _ = stator_xdp::purge(p);
            let _ = stator_xdp::decap_purge(p);
            let _ = std::fs::remove_dir_all(p);
        }
        drop(self.1.take());
    }
}

/// An interface statistic (`rx_packets`, `tx_packets`) inside a namespace.
fn if_stat(ns: &Netns, dev: &str, what: &str) -> u64 {
    ns.exec("cat", [format!("/sys/class/net/{dev}/statistics/{what}")])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn snapshot(lab: &DsrLab, vips: &[IpAddr], encap: Encap, generation: u64) -> ValidSnapshot {
    let lb = &lab.lbs[0];
    let node = NodeParams {
        src_v4: lb.v4.first().copied(),
        src_v6: lb.v6.first().copied(),
        ..NodeParams::default()
    };
    let mut s = SnapshotBuilder::new(node).generation(generation);
    for &vip in vips {
        let backends = || {
            lab.backends
                .iter()
                .map(|b| BackendSpec::new(b.addr(vip.is_ipv6())).encap(encap))
                .collect::<Vec<_>>()
        };
        s = s.vip(vip, 80, Proto::Tcp, 251, backends());
        s = s.vip(vip, 7, Proto::Udp, 251, backends());
    }
    s.build().unwrap().validated().unwrap()
}

/// Everything counted on one side of a run.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    lb_rx: u64,
    client_tx: u64,
    client_rx: u64,
}

fn sample(lab: &DsrLab) -> Sample {
    Sample {
        lb_rx: if_stat(&lab.lbs[0].ns, "eth0", "rx_packets"),
        client_tx: if_stat(&lab.clients[0].ns, "eth0", "tx_packets"),
        client_rx: if_stat(&lab.clients[0].ns, "eth0", "rx_packets"),
    }
}

/// `n` TCP connections to `vip:80` from the client's addresses in turn; returns how many each
/// backend answered. Every answer must echo the request.
fn connect_many(lab: &DsrLab, vip: IpAddr, n: usize) -> BTreeMap<String, usize> {
    let srcs = lab.clients[0].addrs(vip.is_ipv6());
    let answers = lab.clients[0]
        .ns
        .run_in(move || {
            (0..n)
                .map(|i| {
                    let src = srcs[i % srcs.len()];
                    let line = format!("hello {i} from {src}");
                    let (reply, local) =
                        serve::tcp_identify(Some(src), SocketAddr::new(vip, 80), &line, TIMEOUT)
                            .unwrap_or_else(|e| panic!("connection {i} from {src} to {vip}: {e}"));
                    assert_eq!(local.ip(), src);
                    let (backend, echoed) = reply
                        .split_once(' ')
                        .unwrap_or_else(|| panic!("answer {reply:?}"));
                    assert_eq!(echoed, line, "the backend echoes the request");
                    backend.to_string()
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    let mut spread = BTreeMap::new();
    for b in answers {
        *spread.entry(b).or_insert(0) += 1;
    }
    spread
}

fn udp_many(lab: &DsrLab, vip: IpAddr, n: usize) -> BTreeMap<String, usize> {
    let srcs = lab.clients[0].addrs(vip.is_ipv6());
    let answers = lab.clients[0]
        .ns
        .run_in(move || {
            (0..n)
                .map(|i| {
                    let src = srcs[i % srcs.len()];
                    let reply =
                        serve::udp_request(Some(src), SocketAddr::new(vip, 7), b"ping", TIMEOUT)
                            .unwrap_or_else(|e| panic!("datagram {i} from {src} to {vip}: {e}"));
                    let reply = String::from_utf8(reply).unwrap();
                    let (backend, echoed) = reply.split_once(' ').unwrap();
                    assert_eq!(echoed, "ping");
                    backend.to_string()
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    let mut spread = BTreeMap::new();
    for b in answers {
        *spread.entry(b).or_insert(0) += 1;
    }
    spread
}

/// The forwarder's counters at a moment no packet was being counted: two reads in a row that
/// agree. Reading the per-CPU counters is not atomic, and the node's background traffic (ARP,
/// neighbour discovery) arrives at any time: a packet counted between the read of `act_pass`
/// and that of `non_vip` would show in one and not the other.
fn still_counters(fwd: &stator_xdp::Forwarder) -> stator_xdp::Counters {
    let mut last = fwd.maps().counters().unwrap();
    for _ in 0..1_000 {
        let now = fwd.maps().counters().unwrap();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the forwarder's counters never held still for two reads in a row");
}

fn decap_counters(pins: &[PathBuf]) -> Vec<stator_xdp::DecapCounters> {
    pins.iter()
        .map(|p| DecapMaps::open(p).unwrap().counters().unwrap())
        .collect()
}

fn pin(fs: &BpfFs, prefix: &str, what: &str) -> PathBuf {
    fs.path().join(format!("{prefix}{what}"))
}

#[test]
fn tcp_connections_spread_over_both_backends_and_replies_bypass_the_lb() {
    require_root();
    let prefix = format!("sdsr{}-", std::process::id());
    let mut spec = DsrSpec::new(&prefix, 77, 1, 1, 2);
    spec.addrs_per_client = 8;
    // the pins on a bpffs of the test's own, never the host's /sys/fs/bpf
    let fs = BpfFs::mount(&std::env::temp_dir().join(format!("stator-{prefix}bpffs")))
        .expect("a private bpffs for the pins");
    let lb_pin = pin(&fs, &prefix, "lb");
    let peer_pin = pin(&fs, &prefix, "peer");
    let backend_pins: Vec<PathBuf> = (0..2)
        .map(|k| pin(&fs, &prefix, &format!("b{k}")))
        .collect();
    let _pins = Pins(
        [vec![lb_pin.clone(), peer_pin.clone()], backend_pins.clone()].concat(),
        Some(fs),
    );
    // XDP_TX from the LB node reaches the router only through an XDP program on its port
    let lab = DsrLab::create_with(&spec, |router, port| peer_xdp(router, port, &peer_pin))
        .expect("build the DSR lab");

    let vip4: IpAddr = "192.0.2.80".parse().unwrap();
    let vip6: IpAddr = "2001:db8:80::1".parse().unwrap();
    let mut servers = Vec::new();
    for (k, b) in lab.backends.iter().enumerate() {
        for vip in [vip4, vip6] {
            lab.add_vip_to_backend(k, vip).unwrap();
            servers.push(Server::tcp_identify(&b.ns, SocketAddr::new(vip, 80), &b.name).unwrap());
            servers.push(Server::udp_echo(&b.ns, SocketAddr::new(vip, 7), &b.name).unwrap());
        }
        // the backend side through the CLI, as an operator runs it
        let out = decap_attach(&b.ns, &[b.addr(false), b.addr(true)], &backend_pins[k]);
        assert!(out.contains("attached to eth0"), "{out}");
        assert!(out.contains("native mode"), "{out}");
    }
    lab.route_vip(vip4, &[0]).unwrap();
    lab.route_vip(vip6, &[0]).unwrap();

    // the LB node: the forwarder through the library, attached in its namespace
    let opts = XdpOptions {
        pin_path: lb_pin.clone(),
        conntrack: ConntrackMode::Shared, // veth has no RSS (docs/xdp.md)
        ct_entries: 65536,
        slots_per_gen: 1 << 16,
        ..XdpOptions::default()
    };
    let first = snapshot(&lab, &[vip4, vip6], Encap::Gre, 1);
    let (mut fwd, attachment) = lab.lbs[0]
        .ns
        .run_in(move || {
            let mut fwd = Forwarder::load(&opts).unwrap();
            fwd.commit(&first).unwrap();
            let at = fwd.attach("eth0").unwrap();
            (fwd, at)
        })
        .unwrap();
    assert_eq!(attachment.mode, XdpMode::Native);

    for (generation, encap) in [(1, Encap::Gre), (2, Encap::Ipip), (3, Encap::Gue)] {
        fwd.commit(&snapshot(&lab, &[vip4, vip6], encap, generation))
            .unwrap();
        let fwd_before = still_counters(&fwd);
        let decap_before = decap_counters(&backend_pins);
        let before = sample(&lab);

        let tcp4 = connect_many(&lab, vip4, V4_CONNS);
        let tcp6 = connect_many(&lab, vip6, V6_CONNS);
        let udp4 = udp_many(&lab, vip4, UDP_REQS);
        let udp6 = udp_many(&lab, vip6, UDP_REQS);

        let after = sample(&lab);
        let fwd_delta = still_counters(&fwd).since(&fwd_before);
        let decap_delta: Vec<_> = decap_counters(&backend_pins)
            .iter()
            .zip(&decap_before)
            .map(|(a, b)| a.since(b))
            .collect();
        let client_tx = after.client_tx - before.client_tx;
        let client_rx = after.client_rx - before.client_rx;
        let lb_rx = after.lb_rx - before.lb_rx;
        let encapsulated = fwd_delta.get(Counter::ActTx);
        let other = fwd_delta.get(Counter::NonVip) + fwd_delta.get(Counter::NonIp);
        let kind = match encap {
            Encap::Gre => DecapCounter::Gre,
            Encap::Ipip => DecapCounter::Ipip,
            Encap::Gue => DecapCounter::Gue,
        };
        let decapsulated: u64 = decap_delta.iter().map(|d| d.get(kind)).sum();
        println!(
            "{encap:?}: TCP v4 {tcp4:?}, TCP v6 {tcp6:?}, UDP v4 {udp4:?}, UDP v6 {udp6:?}; \
             client sent {client_tx} / received {client_rx} packets; LB received {lb_rx}, \
             encapsulated {encapsulated}, passed {other}; backends decapsulated \
             {decapsulated} ({:?} / {:?})",
            decap_delta[0].nonzero(),
            decap_delta[1].nonzero(),
        );

        // every connection completed (connect_many asserts each answer) on both backends
        for (what, spread, n) in [
            ("TCP v4", &tcp4, V4_CONNS),
            ("TCP v6", &tcp6, V6_CONNS),
            ("UDP v4", &udp4, UDP_REQS),
            ("UDP v6", &udp6, UDP_REQS),
        ] {
            assert_eq!(spread.values().sum::<usize>(), n, "{encap:?} {what}");
            assert_eq!(
                spread.keys().map(String::as_str).collect::<Vec<_>>(),
                ["b0", "b1"],
                "{encap:?} {what}: both backends answer"
            );
            if n >= 100 {
                // Maglev over 251 slots, hash of varied 5-tuples: about half each
                assert!(
                    spread.values().all(|&c| c * 4 >= n),
                    "{encap:?} {what}: each backend gets at least a quarter: {spread:?}"
                );
            }
        }
        // the forwarder encapsulated every client packet and nothing else came its way
        assert_eq!(
            fwd_delta.get(Counter::ActDrop),
            0,
            "{encap:?}: {:?}",
            fwd_delta.nonzero()
        );
        // every packet the LB handed to its kernel was not VIP traffic: the node's own
        // background (ARP, neighbour discovery, MLD — a few, up to a dozen seen in a run)
        assert_eq!(
            fwd_delta.get(Counter::ActPass),
            other,
            "{encap:?}: the LB passed VIP traffic ({:?})",
            fwd_delta.nonzero()
        );
        assert!(
            other <= 40,
            "{encap:?}: LB passed {other} packets ({:?})",
            fwd_delta.nonzero()
        );
        // (the client also sends ARP / neighbour discovery to the router: a few dozen)
        assert!(
            encapsulated <= client_tx && encapsulated + 40 >= client_tx,
            "{encap:?}: encapsulated {encapsulated}, the client sent {client_tx}"
        );
        // every encapsulated packet was decapsulated by a backend, none rejected
        assert_eq!(decapsulated, encapsulated, "{encap:?}");
        for d in &decap_delta {
            assert_eq!(
                d.get(DecapCounter::Rejected),
                0,
                "{encap:?}: {:?}",
                d.nonzero()
            );
        }
        // replies bypassed the LB: it received about what the client sent, while the client
        // received at least SYN-ACK, answer and FIN for every connection
        let conns = (V4_CONNS + V6_CONNS) as u64;
        assert!(
            client_rx >= 3 * conns,
            "{encap:?}: the client received {client_rx}"
        );
        assert!(
            lb_rx <= client_tx + 10,
            "{encap:?}: the LB received {lb_rx} packets, the client sent {client_tx}: replies \
             went through the LB"
        );
    }

    // the CLI reads the same counters and the attachment
    let stats: serde_json::Value = serde_json::from_str(&stator_ok(
        &lab.backends[0].ns,
        &[
            "decap",
            "stats",
            "--json",
            "--pin-path",
            backend_pins[0].to_str().unwrap(),
        ],
    ))
    .unwrap();
    for k in ["gre", "ipip", "gue"] {
        assert!(stats["counters"][k].as_u64().unwrap() > 0, "{k}: {stats}");
    }
    assert_eq!(stats["counters"]["rejected"], 0);
    let status: serde_json::Value = serde_json::from_str(&stator_ok(
        &lab.backends[0].ns,
        &[
            "decap",
            "status",
            "--json",
            "--pin-path",
            backend_pins[0].to_str().unwrap(),
        ],
    ))
    .unwrap();
    assert_eq!(status["attachments"][0]["iface"], "eth0");
    assert_eq!(status["attachments"][0]["mode"], "native");
    assert_eq!(status["gue_port"], 6080);

    for p in &backend_pins {
        let out = decap_detach(&lab.backends[0].ns, p);
        assert!(out.contains("detached from eth0"), "{out}");
        assert!(!p.exists());
    }
    drop(servers);
}
