//! ns/packet of `Forwarder::process`, with baselines measured in the same run. These figures are
//! the AF_XDP data plane's budget (the Maglev paper: ~350 ns per packet per thread, §3.1). They
//! print figures and ratios and never fail on timing.
//!
//! Every variant does the same per-packet preparation — copy a 54-byte template frame into a
//! buffer after 256 bytes of headroom (and, where the flow changes, patch its source port and
//! address) — so the ratios compare the work that differs:
//!
//! - `baseline/copy`: the preparation alone (the memcpy a forwarder cannot avoid);
//! - `baseline/parse_flow`: preparation + `stator_wire::parse_flow` to the 5-tuple;
//! - `process/tcp4_ct_hit`: an established TCP flow's ACK (VIP match, CT hit, GRE, TX);
//! - `process/tcp4_syn_new_flow`: a SYN of a never-seen flow into a full table (Maglev, insert
//!   with LRU eviction, GRE, TX);
//! - `process/non_vip_pass`: a TCP segment to an address that is not a VIP.
//!
//! After the criterion groups, a summary times each variant again with a plain loop and prints
//! ns/packet and the ratios to the baselines on one screen. Run with
//! `cargo bench -p stator-core --bench process`.
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::Criterion;
use stator_core::{
    Action, BackendSpec, CompiledSnapshot, Forwarder, ForwarderConfig, NextHop, NodeParams, Proto,
    SlicePacketBuf, SnapshotBuilder, StaticFib,
};
use stator_testkit::{Packet, tcp_flags};

const HEADROOM: usize = 256;
const IN_IF: u32 = 2;
const NOW: u64 = 10_000_000_000_000;
/// Connection-table capacity of the SYN benchmark (full after warm-up, so inserts evict).
const SYN_TABLE: usize = 1 << 16;

/// The world: one VIP (10.0.0.10:80/tcp) over 100 backends, Maglev M = 65537, plus 31 other
/// VIPs so the maps are not trivially small.
struct World {
    snap: CompiledSnapshot,
    fib: StaticFib,
    ack: Vec<u8>,
    syn: Vec<u8>,
    other: Vec<u8>,
}

fn world() -> World {
    let vip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10));
    let backends = |k: u8| {
        (0..100u8)
            .map(|i| BackendSpec::new(IpAddr::V4(Ipv4Addr::new(10, k, 1, i))))
            .collect::<Vec<_>>()
    };
    let mut b = SnapshotBuilder::new(NodeParams {
        src_v4: Some(Ipv4Addr::new(10, 9, 9, 9)),
        ..NodeParams::default()
    })
    .vip(vip, 80, Proto::Tcp, 65_537, backends(1));
    for k in 1..32u8 {
        let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 1, k));
        b = b.vip(addr, 443, Proto::Tcp, 251, backends(k + 1));
    }
    let snap = CompiledSnapshot::new(
        &b.build()
            .expect("world builds")
            .validated()
            .expect("valid world"),
    );
    let fib = StaticFib::new().default_route(
        vip,
        Ok(NextHop {
            ifindex: IN_IF,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            mtu: 1500,
        }),
    );
    let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    let not_vip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99));
    World {
        snap,
        fib,
        ack: Packet::tcp(client, 40000, vip, 80, tcp_flags::ACK).frame(),
        syn: Packet::tcp(client, 40000, vip, 80, tcp_flags::SYN).frame(),
        other: Packet::tcp(client, 40000, not_vip, 22, tcp_flags::ACK).frame(),
    }
}

/// A packet buffer reused across iterations.
struct Slot {
    mem: Vec<u8>,
    len: usize,
}

impl Slot {
    fn new() -> Self {
        Self {
            mem: vec![0; 2048],
            len: 0,
        }
    }

    /// Copies `frame` in after the headroom.
    #[inline]
    fn load(&mut self, frame: &[u8]) {
        self.mem[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        self.len = frame.len();
    }

    /// Gives the n-th new flow its own source: port n, address 192.0.(n >> 16).(n >> 8)+1.
    #[inline]
    fn new_flow(&mut self, n: u32) {
        let f = &mut self.mem[HEADROOM..];
        f[14 + 14] = (n >> 16) as u8;
        f[14 + 15] = (n >> 24) as u8 | 1;
        f[14 + 20..14 + 22].copy_from_slice(&(n as u16).to_be_bytes());
    }

    #[inline]
    fn buf(&mut self) -> SlicePacketBuf<'_> {
        SlicePacketBuf::new(&mut self.mem, HEADROOM, self.len)
    }
}

fn forwarder(capacity: usize) -> Forwarder {
    Forwarder::new(ForwarderConfig {
        cpus: 1,
        ct_capacity: capacity,
        ct_seed: 0x5eed,
        ..ForwarderConfig::default()
    })
}

/// A named variant: each call handles one packet.
type Variant<'w> = (&'static str, Box<dyn FnMut() + 'w>);

/// The variants, as closures over their own state.
fn variants(w: &World) -> Vec<Variant<'_>> {
    let mut copy = Slot::new();
    let mut parse = Slot::new();
    let mut hit = Slot::new();
    let mut hit_fwd = forwarder(1 << 20);
    {
        hit.load(&w.ack);
        let v = hit_fwd.process(&w.snap, NOW, 0, IN_IF, &w.fib, &mut hit.buf());
        assert_eq!(v.action, Action::Tx, "warm-up inserts the flow");
    }
    let mut syn = Slot::new();
    let mut syn_fwd = forwarder(SYN_TABLE);
    let mut n: u32 = 0;
    for _ in 0..SYN_TABLE {
        syn.load(&w.syn);
        syn.new_flow(n);
        n = n.wrapping_add(1);
        syn_fwd.process(&w.snap, NOW, 0, IN_IF, &w.fib, &mut syn.buf());
    }
    assert_eq!(syn_fwd.conn_table(0).len(), SYN_TABLE, "the table is full");
    let mut pass = Slot::new();
    let mut pass_fwd = forwarder(1024);
    vec![
        (
            "baseline/copy",
            Box::new(move || {
                copy.load(black_box(&w.ack));
                black_box(&copy.mem[HEADROOM]);
            }) as Box<dyn FnMut()>,
        ),
        (
            "baseline/parse_flow",
            Box::new(move || {
                parse.load(black_box(&w.ack));
                let t = stator_wire::parse_flow(&parse.mem[HEADROOM..HEADROOM + parse.len]);
                black_box(t.ok());
            }),
        ),
        (
            "process/tcp4_ct_hit",
            Box::new(move || {
                hit.load(black_box(&w.ack));
                let v = hit_fwd.process(&w.snap, NOW, 0, IN_IF, &w.fib, &mut hit.buf());
                black_box(v);
            }),
        ),
        (
            "process/tcp4_syn_new_flow",
            Box::new(move || {
                syn.load(black_box(&w.syn));
                syn.new_flow(n);
                n = n.wrapping_add(1);
                let v = syn_fwd.process(&w.snap, NOW, 0, IN_IF, &w.fib, &mut syn.buf());
                black_box(v);
            }),
        ),
        (
            "process/non_vip_pass",
            Box::new(move || {
                pass.load(black_box(&w.other));
                let v = pass_fwd.process(&w.snap, NOW, 0, IN_IF, &w.fib, &mut pass.buf());
                black_box(v);
            }),
        ),
    ]
}

/// Median ns per call over `rounds` rounds of `iters` calls.
fn time(f: &mut dyn FnMut(), iters: u32, rounds: usize) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(iters)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[rounds / 2]
}

fn main() {
    let w = world();
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    {
        let mut group = c.benchmark_group("stator-core");
        for (name, mut f) in variants(&w) {
            group.bench_function(name, |b| b.iter(&mut f));
        }
        group.finish();
    }
    c.final_summary();

    // One screen of figures and ratios, all measured in this run.
    let mut fs = variants(&w);
    for (_, f) in &mut fs {
        time(f.as_mut(), 100_000, 1); // warm-up
    }
    let ns: Vec<(&str, f64)> = fs
        .iter_mut()
        .map(|(name, f)| (*name, time(f.as_mut(), 200_000, 15)))
        .collect();
    let (copy, parse) = (ns[0].1, ns[1].1);
    println!();
    println!("stator-core process(): median of 15 x 200k packets, 54-byte frames");
    println!(
        "{:<28} {:>9} {:>10} {:>14} {:>13}",
        "variant", "ns/pkt", "Mpps/core", "x copy", "x parse_flow"
    );
    for (name, t) in &ns {
        println!(
            "{:<28} {:>9.1} {:>10.2} {:>14.2} {:>13.2}",
            name,
            t,
            1e3 / t,
            t / copy,
            t / parse
        );
    }
    println!("(Maglev paper, §3.1: ~350 ns per packet per packet thread)");
}
