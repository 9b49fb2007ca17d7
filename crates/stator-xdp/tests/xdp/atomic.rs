//! Atomic updates: one thread commits two snapshots alternately while another runs packets
//! through BPF_PROG_TEST_RUN; every verdict must be exactly the old snapshot's or the new
//! one's, never a mix. The two snapshots differ in everything a mix could combine — real ids,
//! backend addresses, encapsulation, table size and the node's outer TTL — and the VIP is
//! NO_CT, so no connection-table entry can mask a torn configuration. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stator_abi::Encap;
use stator_core::{
    BackendSpec, NodeParams, Proto, RealId, Snapshot, SnapshotBuilder, VipFlags, VipKey,
};
use stator_testkit::{Packet, tcp_flags};
use stator_xdp::testrun::{TestRunOpts, run_xdp};
use stator_xdp::{ConntrackMode, Forwarder};

use crate::common::expect::{flow_hash, maglev, tunnel};
use crate::common::{GW_MAC, Lab, PinDir, SRC_V4, pin_to_cpu, require_root, v4};
use stator_testkit::expect::{Outer, encapsulated};

const FLOWS: u16 = 64;

fn vip() -> VipKey {
    VipKey {
        addr: v4(10, 0, 0, 10),
        port: 80,
        proto: Proto::Tcp,
    }
}

fn snapshot(ttl: u8, third_octet: u8, encap: Encap, size: u32, id_base: u32) -> Snapshot {
    let node = NodeParams {
        src_v4: Some(SRC_V4),
        outer_ttl: ttl,
        ..NodeParams::default()
    };
    let backends = (1..=3)
        .map(|i| BackendSpec::new(v4(10, 20, third_octet, i)).encap(encap))
        .collect();
    let mut s = SnapshotBuilder::new(node)
        .generation(u64::from(ttl))
        .vip_with_flags(
            vip(),
            VipFlags {
                no_conntrack: true,
                ..VipFlags::default()
            },
            size,
            backends,
        )
        .build()
        .unwrap();
    // move the real ids, so the two snapshots share none
    s.reals = s
        .reals
        .into_iter()
        .map(|(id, r)| (RealId(id.0 + id_base), r))
        .collect();
    let v = s.vips.get_mut(&vip()).unwrap();
    v.table = v
        .table
        .iter()
        .map(|r| r + id_base)
        .collect::<Vec<_>>()
        .into();
    s
}

fn expected(snap: &Snapshot, p: &Packet, lbin_mac: [u8; 6]) -> Vec<u8> {
    let (sport, dport) = match p.l4 {
        stator_testkit::L4::Tcp { sport, dport, .. } => (sport, dport),
        _ => unreachable!(),
    };
    let h = flow_hash(p.src, p.dst, sport, dport, 6);
    let real = snap.reals[&maglev(snap, &vip(), h)];
    encapsulated(
        &Outer {
            dmac: GW_MAC,
            smac: lbin_mac,
            src: IpAddr::V4(SRC_V4),
            dst: real.addr,
            ttl: snap.node.outer_ttl,
            tunnel: tunnel(real.encap, snap.node.gue_port),
            hash: h,
            tos: None,
            df: None,
        },
        &p.ip_bytes(),
        0,
    )
}

#[test]
fn commits_are_atomic_for_packets_in_flight() {
    require_root();
    let lab = Lab::new("atomic");
    let pins = PinDir::new("atomic");
    let a = snapshot(64, 0, Encap::Gre, 13, 0);
    let b = snapshot(32, 1, Encap::Ipip, 7, 100);
    let frames: Vec<Packet> = (0..FLOWS)
        .map(|i| {
            Packet::tcp(
                v4(198, 51, 100, 1),
                30_000 + i,
                vip().addr,
                80,
                tcp_flags::SYN,
            )
        })
        .collect();
    let exp: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = frames
        .iter()
        .map(|p| {
            (
                p.frame(),
                expected(&a, p, lab.lbin_mac),
                expected(&b, p, lab.lbin_mac),
            )
        })
        .collect();
    assert!(
        exp.iter().all(|(_, ea, eb)| ea != eb),
        "every flow must have distinguishable answers"
    );

    let mut fwd = Forwarder::load(&pins.options(ConntrackMode::PerCpu)).unwrap();
    fwd.commit(&common::valid(&a)).unwrap();
    let prog = fwd.program_fd_owned().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_r = stop.clone();
    let lbin = lab.lbin;
    let runner = lab
        .ns
        .spawn_thread(move || {
            pin_to_cpu(1);
            let (mut packets, mut seen_a, mut seen_b) = (0u64, 0u64, 0u64);
            let opts = TestRunOpts {
                ingress_ifindex: lbin,
                ..TestRunOpts::default()
            };
            while !stop_r.load(Ordering::Relaxed) {
                for (frame, ea, eb) in &exp {
                    let out = run_xdp(&prog, frame, opts).expect("test run");
                    packets += 1;
                    assert_eq!(out.action, 3, "XDP_TX");
                    if &out.data == ea {
                        seen_a += 1;
                    } else if &out.data == eb {
                        seen_b += 1;
                    } else {
                        panic!(
                            "packet {packets}: output matches neither snapshot:\n{:02x?}",
                            out.data
                        );
                    }
                }
            }
            (packets, seen_a, seen_b)
        })
        .unwrap();

    pin_to_cpu(0);
    let start = Instant::now();
    let mut commits = 0u64;
    let mut grace = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(3) && !runner.is_finished() {
        let snap = if commits.is_multiple_of(2) { &b } else { &a };
        let report = fwd.commit(&common::valid(snap)).unwrap();
        grace += report.grace_time;
        commits += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let (packets, seen_a, seen_b) = runner.join().expect("packet thread");
    println!(
        "{commits} commits and {packets} packets in {:.1?}: {seen_a} verdicts of A, {seen_b} of B, \
         none mixed; mean grace period {:.1?}",
        start.elapsed(),
        grace / commits.max(1) as u32
    );
    assert!(
        commits >= 20,
        "too few commits ({commits}) to mean anything"
    );
    assert!(
        seen_a > 0 && seen_b > 0,
        "both snapshots must have been seen"
    );
}
