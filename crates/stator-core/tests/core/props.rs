//! Property tests of `Forwarder::process`: it never panics, whatever the bytes; every packet is
//! counted exactly once; frames it does not transmit are left byte-identical; the connection
//! table and the flood guard keep their promises.

#[allow(unused_imports)]
use crate::common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::common::*;
use proptest::prelude::*;
use stator_core::{
    Action, BackendSpec, Cause, CompiledSnapshot, Counter, Counters, DropReason, Encap, Forwarder,
    ForwarderConfig, Insert, Proto, RealId, RealState, Snapshot, SnapshotBuilder, StaticFib,
    ValidSnapshot, VecPacketBuf, Verdict,
};
use stator_hash::{MaglevBackend, MaglevTable};
use stator_testkit::{Ext, L4, Packet, tcp_flags};

/// Two VIP addresses per family with exact and port-0 VIPs of both protocols, every
/// encapsulation, both backend families, a NO_CT VIP, an empty VIP.
fn rich() -> Snapshot {
    let be = |n: u8| {
        vec![
            BackendSpec::new(be4(n)).encap(Encap::Gre),
            BackendSpec::new(be6(u16::from(n))).encap(Encap::Gue),
            BackendSpec::new(be4(n + 100)).encap(Encap::Ipip),
        ]
    };
    let vip4b = v4(Ipv4Addr::new(10, 0, 0, 11));
    let vip6b = v6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x11));
    SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 13, be(1))
        .vip(v4(VIP4), 53, Proto::Udp, 13, be(2))
        .vip(vip4b, 0, Proto::Tcp, 13, be(3))
        .vip(vip4b, 0, Proto::Udp, 13, vec![])
        .vip(v6(VIP6), 80, Proto::Tcp, 13, be(4))
        .vip(v6(VIP6), 0, Proto::Udp, 13, be(5))
        .vip_with_flags(
            stator_core::VipKey {
                addr: vip6b,
                port: 443,
                proto: Proto::Tcp,
            },
            stator_core::VipFlags {
                no_conntrack: true,
                ..Default::default()
            },
            13,
            be(6),
        )
        .build()
        .unwrap()
}

/// A FIB with every outcome: most backends out of the ingress interface, some redirected, some
/// not in the devmap, some unreachable, some with a small MTU.
fn mixed_fib() -> StaticFib {
    let mut small = hop(IN_IF);
    small.mtu = 100;
    StaticFib::new()
        .default_route(be4(0), Ok(hop(IN_IF)))
        .default_route(be6(0), Ok(hop(OUT_IF)))
        .route(be4(2), Ok(hop(9)))
        .route(be4(3), Err(stator_core::FibError::NoNeigh))
        .route(be4(101), Ok(small))
        .tx_port(OUT_IF)
}

/// Checks the bookkeeping of one processed frame.
fn check(
    before: &Counters,
    after: &Counters,
    v: &Verdict,
    frame_in: &[u8],
    frame_out: &[u8],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        after.packets(),
        before.packets() + 1,
        "one action per packet"
    );
    prop_assert_eq!(
        after.get(v.action.counter()),
        before.get(v.action.counter()) + 1
    );
    let drops = |c: &Counters| DropReason::ALL.iter().map(|&r| c.drops(r)).sum::<u64>();
    match v.action {
        Action::Drop(r) => {
            prop_assert_eq!(after.drops(r), before.drops(r) + 1);
            prop_assert_eq!(drops(after), drops(before) + 1, "exactly one reason");
        }
        _ => prop_assert_eq!(drops(after), drops(before)),
    }
    let rewritten = v.action.is_transmit() || v.action == Action::Drop(DropReason::TxPort);
    if !rewritten {
        prop_assert_eq!(frame_out, frame_in, "untouched unless transmitted");
    }
    if let Some(vip) = v.vip {
        prop_assert_eq!(after.vip(vip).packets, before.vip(vip).packets + 1);
        prop_assert_eq!(
            after.vip(vip).bytes,
            before.vip(vip).bytes + frame_in.len() as u64
        );
    }
    if rewritten && v.vip.is_some() {
        let real = v.real.expect("a forwarded packet names its real");
        prop_assert_eq!(after.real(real).packets, before.real(real).packets + 1);
    }
    if v.action == Action::Tx && v.vip.is_some() {
        // Encapsulated: the inner packet sits unchanged at the end of the new frame.
        prop_assert!(frame_out.len() > frame_in.len());
    }
    Ok(())
}

fn process_checked(
    fwd: &mut Forwarder,
    snap: &CompiledSnapshot,
    fib: &StaticFib,
    now: u64,
    cpu: usize,
    frame: &[u8],
) -> Result<(Verdict, Vec<u8>), TestCaseError> {
    let before = fwd.counters(cpu).clone();
    let mut buf = VecPacketBuf::with_xdp_headroom(frame);
    let v = fwd.process(snap, now, cpu, IN_IF, fib, &mut buf);
    let out = buf.to_vec();
    check(&before, fwd.counters(cpu), &v, frame, &out)?;
    Ok((v, out))
}

fn addr_strategy(v6: bool) -> impl Strategy<Value = IpAddr> {
    if v6 {
        prop_oneof![
            Just(IpAddr::V6(VIP6)),
            Just("2001:db8::11".parse().unwrap()),
            any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
        ]
        .boxed()
    } else {
        prop_oneof![
            Just(IpAddr::V4(VIP4)),
            Just(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11))),
            any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        ]
        .boxed()
    }
}

fn port_strategy() -> impl Strategy<Value = u16> {
    prop_oneof![Just(80u16), Just(53), Just(443), Just(0), any::<u16>()]
}

fn ext_strategy() -> impl Strategy<Value = Ext> {
    prop_oneof![
        (0u8..3).prop_map(Ext::HopByHop),
        (0u8..3).prop_map(Ext::DstOpts),
        (0u8..3).prop_map(Ext::Routing),
        (1u8..4).prop_map(Ext::Ah),
        (0u16..3, any::<bool>()).prop_map(|(offset, more)| Ext::Fragment {
            offset,
            more,
            id: 1
        }),
    ]
}

/// Valid frames of every kind the decision distinguishes.
fn packet_strategy() -> impl Strategy<Value = Packet> {
    (
        any::<bool>(),
        0u8..6,
        port_strategy(),
        port_strategy(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..48),
    )
        .prop_flat_map(|(is_v6, kind, sport, dport, flags, payload)| {
            let client = if is_v6 { v6(CLIENT6) } else { v4(CLIENT4) };
            (
                addr_strategy(is_v6),
                Just((is_v6, kind, sport, dport, flags, payload, client)),
                proptest::option::of(any::<u16>()),
                proptest::collection::vec(any::<u8>(), 0..12),
                proptest::collection::vec(ext_strategy(), 0..6),
                0usize..8,
                (any::<u8>(), any::<bool>(), any::<bool>(), 0u16..2),
            )
        })
        .prop_map(
            |(
                dst,
                (is_v6, kind, sport, dport, flags, payload, client),
                vlan,
                opts,
                ext,
                pad,
                ip,
            )| {
                let mut p = match kind {
                    0 | 1 => Packet::tcp(client, sport, dst, dport, flags & 0x3f),
                    2 => Packet::udp(client, sport, dst, dport),
                    3 => Packet::icmp(client, dst, if is_v6 { 128 } else { 8 }, 0, [0; 4], vec![]),
                    4 => {
                        let (ty, code) = if is_v6 { (2, 0) } else { (3, 4) };
                        let reply = if flags & 1 == 0 {
                            Packet::tcp(dst, dport, client, sport, tcp_flags::ACK)
                        } else {
                            Packet::udp(dst, dport, client, sport)
                        };
                        let mut q = reply.ip_bytes();
                        q.truncate(if is_v6 { 48 } else { 28 });
                        Packet::icmp(client, dst, ty, code, [0, 0, 5, 0], q)
                    }
                    _ => Packet::icmp(client, dst, flags, flags >> 4, [0; 4], vec![]),
                }
                .with_payload(&payload);
                if kind == 3 || kind == 4 {
                    // Keep the ICMP body built above.
                } else if let L4::Icmp { body, .. } = &mut p.l4 {
                    body.clear();
                }
                p.vlan = vlan;
                p.padding = pad;
                p.tos = ip.0;
                p.df = ip.1;
                p.mf = ip.2 && !is_v6 && ip.3 == 0 && flags & 0x80 != 0;
                p.frag_offset = if flags & 0x40 != 0 { ip.3 } else { 0 };
                if is_v6 {
                    p.ext = ext;
                } else {
                    p.ipv4_options = opts;
                }
                p
            },
        )
}

/// A byte-level mutation.
#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
}

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Append),
    ]
}

fn mutate(frame: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Set(i, b) if !frame.is_empty() => {
            let i = i % frame.len();
            frame[i] = *b;
        }
        Mutation::Set(..) => {}
        Mutation::Truncate(n) => frame.truncate(n % (frame.len() + 1)),
        Mutation::Append(bytes) => frame.extend_from_slice(bytes),
    }
}

fn forwarder_for_props() -> Forwarder {
    Forwarder::new(ForwarderConfig {
        cpus: 3,
        ct_capacity: 64,
        ..ForwarderConfig::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn never_panics_on_any_bytes(
        frame in proptest::collection::vec(any::<u8>(), 0..160),
        now in any::<u64>(),
        cpu in any::<usize>(),
    ) {
        let snap = compile(&rich());
        let mut fwd = forwarder_for_props();
        let cpu = cpu % 3;
        process_checked(&mut fwd, &snap, &mixed_fib(), now, cpu, &frame)?;
    }

    /// Random bytes behind a valid Ethernet + IP header to a VIP address, so the generator gets
    /// past the first checks.
    #[test]
    fn never_panics_behind_a_vip_header(
        tail in proptest::collection::vec(any::<u8>(), 0..120),
        is_v6 in any::<bool>(),
        proto in prop_oneof![
            Just(6u8), Just(17), Just(1), Just(58), Just(0), Just(44), any::<u8>()
        ],
        len_delta in -8i32..8,
        now in any::<u64>(),
    ) {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        if is_v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            let plen = (tail.len() as i32 + len_delta).clamp(0, 65535) as u16;
            f.extend_from_slice(&plen.to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&CLIENT6.octets());
            f.extend_from_slice(&VIP6.octets());
        } else {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            let tot = (20 + tail.len() as i32 + len_delta).clamp(0, 65535) as u16;
            f.extend_from_slice(&tot.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&CLIENT4.octets());
            f.extend_from_slice(&VIP4.octets());
        }
        f.extend_from_slice(&tail);
        let snap = compile(&rich());
        let mut fwd = forwarder_for_props();
        process_checked(&mut fwd, &snap, &mixed_fib(), now, 0, &f)?;
    }

    #[test]
    fn valid_frames_and_their_mutations(
        p in packet_strategy(),
        mutations in proptest::collection::vec(mutation_strategy(), 0..4),
        now in 0u64..u64::MAX / 2,
    ) {
        let snap = compile(&rich());
        let mut fwd = forwarder_for_props();
        let frame = p.frame();
        process_checked(&mut fwd, &snap, &mixed_fib(), now, 1, &frame)?;
        let mut m = frame.clone();
        for x in &mutations {
            mutate(&mut m, x);
        }
        process_checked(&mut fwd, &snap, &mixed_fib(), now, 1, &m)?;
        // A lenient snapshot with holes (a slot naming a missing real, no IPv6 source).
        let mut holes = rich();
        holes.node.src_v6 = None;
        holes.reals.remove(&RealId(1));
        let holes = CompiledSnapshot::new(&ValidSnapshot::new_lenient(holes.clone()).unwrap());
        process_checked(&mut fwd, &holes, &mixed_fib(), now, 2, &m)?;
    }

    #[test]
    fn non_vip_frames_pass_byte_identical(mut p in packet_strategy()) {
        let vips = [v4(VIP4), v4(Ipv4Addr::new(10, 0, 0, 11)), v6(VIP6),
            "2001:db8::11".parse().unwrap()];
        if vips.contains(&p.dst) {
            p.dst = match p.dst {
                IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(a.to_bits() ^ 0x80)),
                IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(a.to_bits() ^ 0x80)),
            };
        }
        let snap = compile(&rich());
        let mut fwd = forwarder_for_props();
        let frame = p.frame();
        let (v, out) = process_checked(&mut fwd, &snap, &mixed_fib(), T0, 0, &frame)?;
        prop_assert_eq!(v.action, Action::Pass);
        prop_assert_eq!(out, frame);
        prop_assert_eq!(fwd.counters(0).get(Counter::NonVip), 1);
    }

    /// Once a flow has an entry, it keeps its real for as long as the real is usable — across
    /// snapshot changes that remove other backends and add new ones — and gets a new one when
    /// its real goes.
    #[test]
    fn ct_hit_keeps_the_inserted_real_while_usable(
        sport in any::<u16>(),
        udp in any::<bool>(),
        gaps in proptest::collection::vec(0u64..250 * SEC, 1..8),
        n in 3u8..8,
    ) {
        let (proto, dport) = if udp { (Proto::Udp, 53) } else { (Proto::Tcp, 80) };
        let backends: Vec<_> = (1..=n).map(|i| BackendSpec::new(be4(i))).collect();
        let s = SnapshotBuilder::new(node())
            .vip(v4(VIP4), dport, proto, 251, backends)
            .build()
            .unwrap();
        let snap = compile(&s);
        let frame = if udp {
            Packet::udp(v4(CLIENT4), sport, v4(VIP4), dport).frame()
        } else {
            Packet::tcp(v4(CLIENT4), sport, v4(VIP4), dport, tcp_flags::ACK).frame()
        };
        let mut fwd = forwarder_for_props();
        let (first, _) = process_checked(&mut fwd, &snap, &fib_tx(), T0, 0, &frame)?;
        let real = first.real.unwrap();
        // Remove every other backend: the flow's real stays usable.
        let mut shrunk = s.clone();
        shrunk.reals.retain(|id, _| *id == real || id.0 % 2 == 0);
        rebuild(&mut shrunk, 251);
        let shrunk = compile(&shrunk);
        let mut now = T0;
        for (i, gap) in gaps.iter().enumerate() {
            now += gap;
            let snap = if i % 2 == 0 { &shrunk } else { &snap };
            let (v, _) = process_checked(&mut fwd, snap, &fib_tx(), now, 0, &frame)?;
            prop_assert_eq!(v.real, Some(real));
            prop_assert_eq!(v.selection.unwrap().cause, Cause::CtHit);
        }
        // The real goes: reselect, and the new choice sticks.
        let mut gone = s.clone();
        gone.reals.remove(&real);
        rebuild(&mut gone, 251);
        let gone = compile(&gone);
        let (v, _) = process_checked(&mut fwd, &gone, &fib_tx(), now, 0, &frame)?;
        prop_assert_eq!(v.selection.unwrap().cause, Cause::CtReselect);
        prop_assert_ne!(v.real, Some(real));
        let (w, _) = process_checked(&mut fwd, &gone, &fib_tx(), now, 0, &frame)?;
        prop_assert_eq!((w.real, w.selection.unwrap().cause), (v.real, Cause::CtHit));
    }

    #[test]
    fn flood_guard_allows_exactly_limit_inserts_per_window(
        limit in 1u32..12,
        syns in 0usize..30,
        start in SEC..u64::MAX / 4,
    ) {
        let mut s = SnapshotBuilder::new(node())
            .vip(v4(VIP4), 80, Proto::Tcp, 13, vec![BackendSpec::new(be4(1))])
            .build()
            .unwrap();
        s.node.flood_new_per_sec = limit;
        let snap = compile(&s);
        let mut fwd = forwarder_for_props();
        // The first SYN opens a window at `start`; the rest come within the same second.
        for i in 0..syns {
            let f = Packet::tcp(v4(CLIENT4), i as u16, v4(VIP4), 80, tcp_flags::SYN).frame();
            let (v, _) = process_checked(&mut fwd, &snap, &fib_tx(), start + i as u64, 0, &f)?;
            let want = if (i as u32) < limit { Insert::Inserted } else { Insert::GuardHeld };
            prop_assert_eq!(v.selection.unwrap().insert, want);
            prop_assert_eq!(v.action, Action::Tx);
        }
        let c = fwd.counters(0);
        let n = syns as u64;
        let ins = n.min(u64::from(limit));
        prop_assert_eq!(c.get(Counter::CtInsert), ins);
        prop_assert_eq!(c.get(Counter::CtGuard), n - ins);
    }
}

/// Rebuilds every VIP's table (size `m`) from its usable reals, keeping ids.
fn rebuild(s: &mut Snapshot, m: u32) {
    let vips: Vec<_> = s.vips.values().map(|v| v.id).collect();
    for vip in vips {
        let names: Vec<(String, u32)> = s
            .reals
            .iter()
            .filter(|(_, r)| r.vip == vip && r.state == RealState::Usable)
            .map(|(id, r)| (r.addr.to_string(), id.0))
            .collect();
        let members: Vec<_> = names
            .iter()
            .map(|(n, id)| MaglevBackend::new(n, 1, *id))
            .collect();
        let t = MaglevTable::build(&members, m).unwrap();
        for v in s.vips.values_mut().filter(|v| v.id == vip) {
            v.table = if t.is_empty() {
                Vec::new().into()
            } else {
                t.slots().into()
            };
        }
    }
}
