//! Fuzzes `Forwarder::process` with sequences of frames, so the stateful paths (inserts, hits,
//! expiry, the flood guard) are reached, and checks the contract's bookkeeping on every frame:
//! exactly one action counter per packet, one drop reason per drop, and a byte-identical frame
//! unless the verdict transmits it (or is the after-rewrite `tx_port` drop).
//!
//! Input layout: byte 0 picks the world (bit 0: ICMP echo on; bit 1: flood limit 2; bit 2:
//! shared table; bit 3: no IPv6 source; bits 4–5: frame template). Then records of
//! `[cpu, dt_hi, dt_lo, len, len bytes of frame]` until the input ends. With a template, each
//! frame's bytes follow a valid Ethernet + IP header to a VIP (IPv4 or IPv6) whose length fields
//! say the truth, so the fuzzer starts past the first checks.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stator_core::{
    Action, BackendSpec, CompiledSnapshot, CtMode, DropReason, Encap, FibError, Forwarder,
    ForwarderConfig, NextHop, NodeParams, Proto, Snapshot, SnapshotBuilder, StaticFib,
    ValidSnapshot, VecPacketBuf, VipFlags, VipKey,
};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);

fn world(sel: u8) -> Snapshot {
    let be = |n: u8| {
        vec![
            BackendSpec::new(IpAddr::V4(Ipv4Addr::new(10, 1, 0, n))).encap(Encap::Gre),
            BackendSpec::new(IpAddr::V6(Ipv6Addr::new(
                0xfd00,
                1,
                0,
                0,
                0,
                0,
                0,
                n.into(),
            )))
            .encap(Encap::Gue),
            BackendSpec::new(IpAddr::V4(Ipv4Addr::new(10, 2, 0, n))).encap(Encap::Ipip),
        ]
    };
    SnapshotBuilder::new(NodeParams {
        src_v4: Some(Ipv4Addr::new(10, 9, 9, 9)),
        src_v6: (sel & 8 == 0).then_some(Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 9)),
        icmp_echo: sel & 1 != 0,
        flood_new_per_sec: if sel & 2 != 0 { 2 } else { 0 },
        tcp_timeout_ns: 5_000_000_000,
        udp_timeout_ns: 2_000_000_000,
        ..NodeParams::default()
    })
    .vip(IpAddr::V4(VIP4), 80, Proto::Tcp, 13, be(1))
    .vip(IpAddr::V4(VIP4), 0, Proto::Udp, 7, be(2))
    .vip(IpAddr::V6(VIP6), 80, Proto::Tcp, 13, be(3))
    .vip(IpAddr::V6(VIP6), 53, Proto::Udp, 13, vec![])
    .vip_with_flags(
        VipKey {
            addr: IpAddr::V6(VIP6),
            port: 0,
            proto: Proto::Tcp,
        },
        VipFlags {
            no_conntrack: true,
            ..VipFlags::default()
        },
        7,
        be(4),
    )
    .build()
    .expect("the fuzz world builds")
}

fn fib() -> StaticFib {
    let hop = |ifindex, mtu| NextHop {
        ifindex,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        mtu,
    };
    StaticFib::new()
        .default_route(IpAddr::V4(VIP4), Ok(hop(2, 1500)))
        .default_route(IpAddr::V6(VIP6), Ok(hop(3, 1500)))
        .route(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 2)), Ok(hop(2, 90)))
        .route(
            IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)),
            Err(FibError::NoNeigh),
        )
        .route(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)), Ok(hop(4, 1500)))
        .tx_port(3)
}

/// Puts `tail` behind an Ethernet + IP header to a VIP whose lengths match.
fn templated(template: u8, tail: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    match template {
        1 => {
            let proto = tail.first().copied().unwrap_or(6);
            let tail = tail.get(1..).unwrap_or(&[]);
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&((20 + tail.len()).min(65535) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 1]);
            f.extend_from_slice(&VIP4.octets());
            f.extend_from_slice(tail);
        }
        _ => {
            let next = tail.first().copied().unwrap_or(6);
            let tail = tail.get(1..).unwrap_or(&[]);
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(tail.len().min(65535) as u16).to_be_bytes());
            f.extend_from_slice(&[next, 64]);
            f.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1).octets());
            f.extend_from_slice(&VIP6.octets());
            f.extend_from_slice(tail);
        }
    }
    f
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    // Built once per world: snapshots and FIBs are immutable inputs.
    static WORLDS: OnceLock<Vec<(CompiledSnapshot, StaticFib)>> = OnceLock::new();
    let worlds = WORLDS.get_or_init(|| {
        (0..16u8)
            .map(|w| {
                let snap = ValidSnapshot::new_lenient(world(w)).expect("representable");
                let snap = CompiledSnapshot::new(&snap);
                (snap, fib())
            })
            .collect()
    });
    let Some((snap, fib)) = worlds.get(usize::from(sel & 15)) else {
        return;
    };
    let mut fwd = Forwarder::new(ForwarderConfig {
        cpus: 2,
        ct_mode: if sel & 4 != 0 {
            CtMode::Shared
        } else {
            CtMode::PerCpu
        },
        ct_capacity: 8,
        ct_seed: 1,
        ..ForwarderConfig::default()
    });
    let template = (sel >> 4) & 3;
    let mut now: u64 = 1_000_000_000_000;
    while let Some((head, tail)) = rest.split_first_chunk::<4>() {
        let [cpu, dt_hi, dt_lo, len] = *head;
        let len = usize::from(len).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        now += u64::from(u16::from_be_bytes([dt_hi, dt_lo])) * 1_000_000;
        let frame = if template == 0 {
            bytes.to_vec()
        } else {
            templated(template, bytes)
        };
        let cpu = usize::from(cpu & 1);
        let before = fwd.counters(cpu).clone();
        let mut buf = VecPacketBuf::new(&frame, if cpu == 0 { 256 } else { 40 });
        let v = fwd.process(snap, now, cpu, 2, fib, &mut buf);
        let after = fwd.counters(cpu);
        assert_eq!(
            after.packets(),
            before.packets() + 1,
            "one action per packet"
        );
        let drops = |c: &stator_core::Counters| -> u64 {
            DropReason::ALL.iter().map(|&r| c.drops(r)).sum()
        };
        let drop_delta = drops(after) - drops(&before);
        assert_eq!(drop_delta, u64::from(matches!(v.action, Action::Drop(_))));
        let rewritten = v.action.is_transmit() || v.action == Action::Drop(DropReason::TxPort);
        if !rewritten {
            assert_eq!(buf.to_vec(), frame, "untouched unless transmitted: {v:?}");
        }
    }
});
