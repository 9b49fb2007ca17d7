//! The world a sequence of frames meets, shaped by the input's first bytes: node parameters,
//! VIPs (either family, ports, TCP/UDP, `no_conntrack`, fragments, failover, prefix-group
//! suffixes), their backends (either family, every encapsulation, some behind a failing next
//! hop), classes, fragment peers (this node among them or not), the tracer's keys; a second
//! snapshot derived from the first (backends removed or draining, peers gone) that a record
//! can switch to; and the forwarder's table sizes and timeouts. The addresses come from small
//! palettes so that frames (`frames.rs`) hit them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use stator_abi::TraceKeys;
use stator_core::{
    BackendSpec, CompiledSnapshot, CtMode, Encap, FibError, ForwarderConfig, HoldLimits, NextHop,
    NodeParams, Proto, RealState, Snapshot, SnapshotBuilder, StaticFib, ValidSnapshot, VipFlags,
    VipKey,
};

use crate::input::Reader;

pub const SRC4: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 9);
pub const SRC6: Ipv6Addr = Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 9);
/// Other Stator nodes: fragment peers and the senders of redirects.
pub const PEER4: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 9, 9, 8), Ipv4Addr::new(10, 9, 9, 7)];
pub const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 8);
pub const FAILOVER4: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 1);
pub const FAILOVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 1);
/// The tracer's keys: frames are sealed with `KEYS[1]` (or, by choice, `KEYS[2]`, which no
/// node knows).
pub const KEYS: [[u8; 16]; 3] = [[1; 16], [2; 16], [3; 16]];
pub const HOP_SMAC: [u8; 6] = [2, 0, 0, 0, 0, 0xaa];
pub const HOP_DMAC: [u8; 6] = [2, 0, 0, 0, 0, 0xbb];
/// The interfaces the FIB answers with, and those in the devmap (`stator_tx_ports`).
pub const IF_MAIN: u32 = 2;
pub const IF_OTHER: u32 = 3;
pub const IF_NOT_TX: u32 = 4;

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn v6(s: &str) -> IpAddr {
    s.parse().expect("a palette address")
}

/// Where VIPs are: two plain addresses per family, two addresses of class 1 (10.100.0.0/16,
/// 2001:db8:100::/48) and the node's own IPv4 address.
pub fn vip_addrs() -> [IpAddr; 8] {
    [
        v4([10, 0, 0, 10]),
        v4([10, 0, 0, 11]),
        v4([10, 100, 1, 1]),
        v4([10, 100, 5, 1]),
        v6("2001:db8::10"),
        v6("2001:db8::11"),
        v6("2001:db8:100:1::10"),
        IpAddr::V4(SRC4),
    ]
}

/// Where frames go: the VIP addresses, addresses of class 1 this node was never told about
/// (whose suffixes match group VIPs, or not), addresses of no VIP, the node's IPv6 address.
pub fn destinations() -> [IpAddr; 16] {
    let v = vip_addrs();
    [
        v[0],
        v[1],
        v[2],
        v[3],
        v[4],
        v[5],
        v[6],
        v[7],
        v4([10, 100, 3, 1]),
        v4([10, 100, 21, 1]),
        v4([10, 100, 200, 9]),
        v6("2001:db8:100:77::10"),
        v4([10, 0, 0, 99]),
        v6("2001:db8::99"),
        v4([10, 200, 2, 1]),
        IpAddr::V6(SRC6),
    ]
}

/// A client of the destination's family.
pub fn client(dst: IpAddr, which: u8) -> IpAddr {
    match (dst, which & 1) {
        (IpAddr::V4(_), 0) => v4([192, 0, 2, 1]),
        (IpAddr::V4(_), _) => v4([192, 0, 2, 2]),
        (IpAddr::V6(_), 0) => v6("2001:db8:1::1"),
        (IpAddr::V6(_), _) => v6("2001:db8:1::2"),
    }
}

/// Another Stator node of `dst`'s family, the sender of a redirect.
pub fn peer_of(dst: IpAddr) -> IpAddr {
    match dst {
        IpAddr::V4(_) => IpAddr::V4(PEER4[0]),
        IpAddr::V6(_) => IpAddr::V6(PEER6),
    }
}

fn backend(kind: u8, n: u8) -> IpAddr {
    match kind & 3 {
        0 => v4([10, 1, 0, n]),
        1 => IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, n.into())),
        // behind a next hop that fails or leads elsewhere (see `fib`)
        2 => [
            v4([10, 1, 0, 250]),
            v4([10, 1, 0, 251]),
            v6("fd00:1::fa"),
            v4([10, 1, 0, 252]),
        ][usize::from(n % 4)],
        _ => v4([10, 1, 0, 253]),
    }
}

/// The FIB: every backend and node through `IF_MAIN` (MTU 1500), except 10.1.0.250 (no
/// neighbour), 10.1.0.251 (MTU 100), fd00:1::fa (no route), 10.1.0.252 (an interface that is
/// not in the devmap: `tx_port`), 10.1.0.253 (another interface of the devmap).
pub fn fib() -> StaticFib {
    let hop = |ifindex, mtu| NextHop {
        ifindex,
        src_mac: HOP_SMAC,
        dst_mac: HOP_DMAC,
        mtu,
    };
    StaticFib::new()
        .default_route(v4([0, 0, 0, 0]), Ok(hop(IF_MAIN, 1500)))
        .default_route(v6("::"), Ok(hop(IF_MAIN, 1500)))
        .route(v4([10, 1, 0, 250]), Err(FibError::NoNeigh))
        .route(v4([10, 1, 0, 251]), Ok(hop(IF_MAIN, 100)))
        .route(v6("fd00:1::fa"), Err(FibError::NoRoute))
        .route(v4([10, 1, 0, 252]), Ok(hop(IF_NOT_TX, 1500)))
        .route(v4([10, 1, 0, 253]), Ok(hop(IF_OTHER, 1500)))
        .tx_port(IF_MAIN)
        .tx_port(IF_OTHER)
}

/// One VIP as the input describes it.
#[derive(Clone)]
struct VipSpec {
    key: VipKey,
    flags: VipFlags,
    table_size: u32,
    backends: Vec<BackendSpec>,
    failover: Option<IpAddr>,
    group: Option<(u16, u8)>,
}

/// Everything the frames are decided under.
pub struct World {
    pub snaps: [CompiledSnapshot; 2],
    /// The snapshots as built (for the oracle: real addresses, peers, failover addresses).
    pub plain: [Arc<Snapshot>; 2],
    pub fib: StaticFib,
    pub config: ForwarderConfig,
    pub hold: HoldLimits,
    /// The key frames are sealed with when they carry a trace mark.
    pub seal_key: [u8; 16],
}

/// Reads the world from the input's first bytes; `None` when the builder refuses it (a
/// Maglev table that cannot be built).
pub fn read(r: &mut Reader<'_>) -> Option<World> {
    let node_b = r.u8();
    let fwd_b = r.u8();
    let times = r.u8();
    let peers_b = r.u8();
    let classes_b = r.u8();
    let nvips = 1 + usize::from(r.u8() % 8);
    let mut vips = Vec::new();
    for _ in 0..nvips {
        let [a, b, c, d] = [r.u8(), r.u8(), r.u8(), r.u8()];
        let addr = vip_addrs()[usize::from(a & 7)];
        let key = VipKey {
            addr,
            port: [80, 53, 0, 443][usize::from((a >> 3) & 3)],
            proto: if a & 0x20 == 0 {
                Proto::Tcp
            } else {
                Proto::Udp
            },
        };
        #[allow(clippy::needless_update)] // a flag added to VipFlags keeps its default here
        let flags = VipFlags {
            no_conntrack: a & 0x40 != 0,
            fragments: a & 0x80 != 0,
            ..VipFlags::default()
        };
        let group = match b & 3 {
            0 => None,
            class => Some((u16::from(class), b >> 2)),
        };
        let failover = (c & 8 != 0).then_some(if c & 0x10 == 0 {
            IpAddr::V4(FAILOVER4)
        } else {
            IpAddr::V6(FAILOVER6)
        });
        let table_size = [7, 13, 31, 251][usize::from((c >> 5) & 3)];
        let backends = (0..c & 3)
            .map(|i| {
                let kind = d >> (2 * i);
                let n = vips.len() as u8 * 3 + i + 1;
                let encap = [Encap::Gre, Encap::Gue, Encap::Ipip][usize::from((d >> 6) + i) % 3];
                let mut b = BackendSpec::new(backend(kind, n)).encap(encap);
                if i == 0 && c & 4 != 0 {
                    b = b.state(RealState::Draining);
                }
                b
            })
            .collect();
        vips.push(VipSpec {
            key,
            flags,
            table_size,
            backends,
            failover,
            group,
        });
    }
    let change = r.u8();
    let keys = match node_b >> 6 {
        0 => TraceKeys::default(),
        1 => TraceKeys::from_keys(&[KEYS[1]]),
        2 => TraceKeys::from_keys(&[KEYS[0], KEYS[1]]),
        _ => TraceKeys::from_keys(&[KEYS[0]]),
    };
    let node = NodeParams {
        src_v4: (node_b & 4 == 0).then_some(SRC4),
        src_v6: (node_b & 8 == 0).then_some(SRC6),
        icmp_echo: node_b & 1 != 0,
        flood_new_per_sec: if node_b & 2 != 0 { 2 } else { 0 },
        trace_per_sec: [0, 1, 2, 100][usize::from((node_b >> 4) & 3)],
        tcp_timeout_ns: [5_000, 1_000, 900_000, 30][usize::from(times & 3)] * 1_000_000,
        udp_timeout_ns: [2_000, 500, 300_000, 30][usize::from((times >> 2) & 3)] * 1_000_000,
        frag_timeout_ns: [2_000, 100, 5, 30_000][usize::from((times >> 4) & 3)] * 1_000_000,
        trace_keys: keys,
        ..NodeParams::default()
    };
    let build = |vips: &[VipSpec], peers: bool| -> Option<Snapshot> {
        let mut b = SnapshotBuilder::new(node);
        for (bit, prefix, len, class) in [
            (1, v4([10, 100, 0, 0]), 16, 1),
            (2, v6("2001:db8:100::"), 48, 1),
            (4, v4([10, 100, 128, 0]), 17, 2),
            (8, v4([10, 0, 0, 0]), 24, 3),
        ] {
            if classes_b & bit != 0 {
                b = b.class(prefix, len, class);
            }
        }
        for v in vips {
            b = b.vip_with_flags(v.key, v.flags, v.table_size, v.backends.clone());
            if let Some(f) = v.failover {
                b = b.failover(v.key, f);
            }
            if let Some((class, bits)) = v.group {
                b = b.group(v.key, class, bits);
            }
        }
        let size = if peers_b & 8 == 0 { 7 } else { 13 };
        let (s4, s6) = (IpAddr::V4(SRC4), IpAddr::V6(SRC6));
        let (p0, p1, p6) = (
            IpAddr::V4(PEER4[0]),
            IpAddr::V4(PEER4[1]),
            IpAddr::V6(PEER6),
        );
        let set: Option<(Vec<IpAddr>, Option<usize>)> = match peers_b & 7 {
            _ if !peers => None,
            0 => None,
            1 => Some((vec![s4, p0], Some(0))),
            2 => Some((vec![p0, s4, p1], Some(1))),
            3 => Some((vec![p0, p1], None)),
            4 => Some((vec![s4], Some(0))),
            5 => Some((vec![s6, p6], Some(0))),
            6 => Some((vec![s4, p6], Some(0))),
            _ => Some((vec![p0], None)),
        };
        if let Some((addrs, me)) = set {
            b = b.peers(addrs, me, size);
        }
        b.build().ok()
    };
    let a = build(&vips, true)?;
    // The second snapshot: the VIPs whose bit is set lose their first backend (the others'
    // real ids shift, so that connection-table and fragment records name another VIP's real
    // or none), every backend drains, the peers are gone.
    let mut changed = vips.clone();
    for (i, v) in changed.iter_mut().enumerate() {
        if change & (1 << (i % 4)) != 0 && !v.backends.is_empty() {
            v.backends.remove(0);
        }
        if change & 0x10 != 0 {
            for b in &mut v.backends {
                b.state = RealState::Draining;
            }
        }
    }
    let mut b = build(&changed, change & 0x20 == 0)?;
    // A corrupt slot, as the maps could hold it: a real that does not exist, or another VIP's.
    let corrupt = |s: &mut Snapshot, value: u32| {
        if let Some(v) = s.vips.values_mut().next()
            && !v.table.is_empty()
        {
            let mut t = v.table.to_vec();
            t[0] = value;
            v.table = t.into();
        }
    };
    match change >> 6 {
        1 => corrupt(&mut b, 999),
        2 => corrupt(&mut b, 0),
        _ => {}
    }
    let compile = |s: &Snapshot| {
        ValidSnapshot::new_lenient(s.clone())
            .ok()
            .map(|v| CompiledSnapshot::new(&v))
    };
    let snaps = [compile(&a)?, compile(&b)?];
    Some(World {
        snaps,
        plain: [Arc::new(a), Arc::new(b)],
        fib: fib(),
        config: ForwarderConfig {
            cpus: if fwd_b & 2 == 0 { 2 } else { 1 },
            ct_mode: if fwd_b & 1 == 0 {
                CtMode::PerCpu
            } else {
                CtMode::Shared
            },
            ct_capacity: 1 + usize::from((fwd_b >> 2) & 7),
            ct_seed: 7,
            frag_capacity: 1 + usize::from(fwd_b >> 5),
        },
        hold: HoldLimits {
            max_frames: 4,
            max_bytes: 2048,
            timeout_ns: [2_000, 50, 1_000, 10_000][usize::from(times >> 6)] * 1_000_000,
        },
        seal_key: KEYS[1],
    })
}
