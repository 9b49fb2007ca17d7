//! Maglev §4.2–4.4 through `Forwarder::process` (docs/forwarding.md §3.1, §9, §10, §11): one
//! case or more per new branch — fragments (opt-in, owner redirect, record, hold, expiry),
//! redirects received (GRE recursion control) and sent (failover), prefix/suffix matching, and
//! the tracer's reports and rate limit. Expected frames come from stator-testkit and
//! `stator_testkit::expect::encapsulated`, written independently of the core.

#[allow(unused_imports)]
use crate::common;

use std::net::{IpAddr, Ipv4Addr};

use crate::common::*;
use stator_core::{
    Action, BackendSpec, CompiledSnapshot, Counter, DropReason, Encap, FragKey, Proto, RealId,
    SnapshotBuilder, TraceKind, ValidSnapshot, Verdict, VipFlags, VipId, VipKey,
};
use stator_hash::{flow_hash_v4, flow_hash_v6};
use stator_testkit::expect::encapsulated;
use stator_testkit::{Ext, L4, Packet, tcp_flags};

/// Another Stator node (a fragment peer, or a failover target).
const PEER4: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 8);
const FAILOVER4: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 1);

fn key(addr: IpAddr, port: u16, proto: Proto) -> VipKey {
    VipKey { addr, port, proto }
}

fn frags() -> VipFlags {
    VipFlags {
        fragments: true,
        ..VipFlags::default()
    }
}

/// VIP 0: VIP4:53/udp with fragments, backend be4(1) over GUE (its outer source port shows the
/// hash a fragment was sent with); VIP 1: VIP4:80/tcp without; VIP 2: VIP6:53/udp with
/// fragments, be6(1) GRE.
fn frag_world() -> SnapshotBuilder {
    SnapshotBuilder::new(node())
        .vip_with_flags(
            key(v4(VIP4), 53, Proto::Udp),
            frags(),
            13,
            vec![BackendSpec::new(be4(1)).encap(Encap::Gue)],
        )
        .vip(v4(VIP4), 80, Proto::Tcp, 13, vec![BackendSpec::new(be4(2))])
        .vip_with_flags(
            key(v6(VIP6), 53, Proto::Udp),
            frags(),
            13,
            vec![BackendSpec::new(be6(1))],
        )
}

fn csnap(b: SnapshotBuilder) -> CompiledSnapshot {
    compile(&b.build().expect("builds"))
}

/// The first fragment of a UDP datagram (id `id`, MF set, DF clear, 24 bytes of payload).
fn first4(sport: u16, id: u16) -> Packet {
    let mut p = Packet::udp(v4(CLIENT4), sport, v4(VIP4), 53).with_payload(&[7; 24]);
    p.df = false;
    p.mf = true;
    p.ip_id = id;
    p
}

/// A later fragment of the same datagram (offset 4 × 8 bytes, the last one).
fn later4(id: u16) -> Packet {
    let mut p = Packet::udp(v4(CLIENT4), 1, v4(VIP4), 53);
    p.df = false;
    p.ip_id = id;
    p.frag_offset = 4;
    p.l4 = L4::Raw {
        proto: 17,
        bytes: vec![8; 40],
    };
    p
}

fn fkey4(id: u16) -> FragKey {
    let mut k = FragKey {
        id: u32::from(id).to_be_bytes(),
        proto: 17,
        family: 4,
        ..FragKey::default()
    };
    k.src[..4].copy_from_slice(&CLIENT4.octets());
    k.dst[..4].copy_from_slice(&VIP4.octets());
    k
}

fn gue_out(p: &Packet, hash: u32, df: bool) -> Vec<u8> {
    encapsulated(&outer_to(be4(1), Encap::Gue, 0, df, hash), &p.ip_bytes(), 0)
}

#[test]
fn a_datagram_goes_where_its_first_fragment_went() {
    let snap = csnap(frag_world());
    let mut fwd = forwarder();
    let hash = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 4000, 53, 17);
    // first: decided like an unfragmented packet, recorded
    let first = first4(4000, 0x1234);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &first.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!((v.vip, v.real), (Some(VipId(0)), Some(RealId(0))));
    assert_eq!(out, gue_out(&first, hash, false));
    let rec = fwd.frag_table().get(&fkey4(0x1234)).expect("recorded");
    assert_eq!(
        (rec.real_id, rec.vip_id, rec.reason, rec.hash),
        (0, 0, 0, hash)
    );
    assert_eq!(rec.created_ns, T0);
    // later: follows the record, with the first one's flow hash as outer entropy
    let later = later4(0x1234);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0 + SEC, &later.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(v.real, Some(RealId(0)));
    assert_eq!(out, gue_out(&later, hash, false));
    let c = fwd.counters(0);
    assert_eq!(
        (c.get(Counter::FragRecord), c.get(Counter::FragHit)),
        (1, 1)
    );
    assert_eq!(
        c.vip(VipId(0)).packets,
        2,
        "both fragments count for the VIP"
    );
    // a stale record (older than the 2 s default timeout) no longer answers: held
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0 + 3 * SEC, &later.frame());
    assert_eq!(v.action, Action::Hold);
    assert_eq!(fwd.held(), Some(fkey4(0x1234)));
}

#[test]
fn an_early_fragment_is_held_then_sent_where_its_first_went() {
    let snap = csnap(frag_world());
    let mut fwd = forwarder();
    let later = later4(77);
    let frame = later.frame();
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &frame);
    assert_eq!(v.action, Action::Hold);
    assert_eq!(out, frame, "a held frame is left as received");
    assert_eq!(fwd.held(), Some(fkey4(77)));
    assert_eq!(fwd.counters(0).get(Counter::ActHold), 1);
    assert_eq!(
        fwd.counters(0).get(Counter::ActDrop),
        0,
        "held is not dropped"
    );
    assert!(!fwd.frag_table().is_fresh(&fkey4(77), T0, 2 * SEC));
    // the first arrives; the holder finds the record and runs the frame again
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0 + 1, &first4(999, 77).frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(fwd.held(), None);
    assert!(fwd.frag_table().is_fresh(&fkey4(77), T0 + 2, 2 * SEC));
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0 + 2, &frame);
    assert_eq!(v.action, Action::Tx);
    let hash = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 999, 53, 17);
    assert_eq!(out, gue_out(&later, hash, false));
}

#[test]
fn fragments_need_an_opted_in_vip() {
    let snap = csnap(frag_world());
    let mut fwd = forwarder();
    let drop = Action::Drop(DropReason::Fragment);
    // VIP4:80/tcp does not opt in, though its address does (through VIP4:53/udp): the first
    // fragment is refused and recorded, so the others are dropped rather than held
    let mut first = Packet::tcp(v4(CLIENT4), 5, v4(VIP4), 80, tcp_flags::ACK);
    first.df = false;
    first.mf = true;
    first.ip_id = 5;
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &first.frame()).0.action,
        drop
    );
    let mut later = later4(5);
    later.l4 = L4::Raw {
        proto: 6,
        bytes: vec![0; 16],
    };
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &later.frame()).0.action,
        drop
    );
    // an address without any fragment VIP: dropped at once, nothing recorded
    let snap = csnap(SnapshotBuilder::new(node()).vip(
        v4(VIP4),
        53,
        Proto::Udp,
        13,
        vec![BackendSpec::new(be4(1))],
    ));
    let mut fwd = forwarder();
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &later4(6).frame())
            .0
            .action,
        drop
    );
    assert!(fwd.frag_table().is_empty());
}

#[test]
fn fragment_corner_cases() {
    let snap = csnap(frag_world());
    let mut fwd = forwarder();
    // a non-first fragment of neither TCP nor UDP is not ours to hold
    let mut icmp = later4(9);
    icmp.l4 = L4::Raw {
        proto: 1,
        bytes: vec![0; 16],
    };
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &icmp.frame()).0.action,
        Action::Pass
    );
    // a first fragment too short for its UDP header
    let mut short = first4(1, 10);
    short.l4 = L4::Raw {
        proto: 17,
        bytes: vec![0; 4],
    };
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &short.frame()).0.action,
        Action::Drop(DropReason::MalformedL4)
    );
    // a first fragment to a port without VIP
    let mut other = first4(1, 11);
    other.l4 = L4::Udp {
        sport: 1,
        dport: 54,
        payload: vec![0; 8],
    };
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &other.frame()).0.action,
        Action::Pass
    );
    // the record's real leaves the snapshot: the rest of the datagram has no backend
    run(&mut fwd, &snap, &fib_tx(), T0, &first4(1, 12).frame());
    let gone = csnap(
        SnapshotBuilder::new(node())
            .vip_with_flags(key(v4(VIP4), 53, Proto::Udp), frags(), 13, vec![])
            .vip(v4(VIP4), 80, Proto::Tcp, 13, vec![]),
    );
    assert_eq!(
        run(&mut fwd, &snap.clone(), &fib_tx(), T0, &later4(12).frame())
            .0
            .action,
        Action::Tx
    );
    assert_eq!(
        run(&mut fwd, &gone, &fib_tx(), T0, &later4(12).frame())
            .0
            .action,
        Action::Drop(DropReason::NoBackend)
    );
    // a first fragment of a VIP without backend records the refusal: the rest drop too
    run(&mut fwd, &gone, &fib_tx(), T0, &first4(1, 13).frame());
    assert_eq!(
        fwd.frag_table().get(&fkey4(13)).unwrap().reason,
        DropReason::NoBackend as u32
    );
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &later4(13).frame())
            .0
            .action,
        Action::Drop(DropReason::NoBackend)
    );
    // too long to hold
    let mut big = later4(14);
    big.l4 = L4::Raw {
        proto: 17,
        bytes: vec![0; 9300],
    };
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &big.frame()).0.action,
        Action::Drop(DropReason::FragHold)
    );
}

#[test]
fn ipv6_fragments() {
    let snap = csnap(frag_world());
    let mut fwd = forwarder();
    let mut first = Packet::udp(v6(CLIENT6), 6000, v6(VIP6), 53).with_payload(&[1; 16]);
    first.ext = vec![Ext::Fragment {
        offset: 0,
        more: true,
        id: 0xabcdef01,
    }];
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &first.frame());
    assert_eq!(v.action, Action::Tx);
    let hash = flow_hash_v6(CLIENT6.octets(), VIP6.octets(), 6000, 53, 17);
    let want = encapsulated(
        &outer_to(be6(1), Encap::Gre, 0, true, hash),
        &first.ip_bytes(),
        0,
    );
    assert_eq!(out, want);
    let mut later = Packet::udp(v6(CLIENT6), 1, v6(VIP6), 53);
    later.ext = vec![Ext::Fragment {
        offset: 3,
        more: false,
        id: 0xabcdef01,
    }];
    later.l4 = L4::Raw {
        proto: 17,
        bytes: vec![2; 24],
    };
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &later.frame());
    assert_eq!(v.action, Action::Tx);
    let want = encapsulated(
        &outer_to(be6(1), Encap::Gre, 0, true, hash),
        &later.ip_bytes(),
        0,
    );
    assert_eq!(out, want, "the record's hash is the outer flow label");
}

/// An IPv4 GRE redirect (recursion control 1) from PEER4 to `dst` around `inner`.
fn redirect_frame(dst: Ipv4Addr, inner: &Packet, flags: [u8; 2]) -> Vec<u8> {
    let et: [u8; 2] = if inner.dst.is_ipv6() {
        [0x86, 0xdd]
    } else {
        [0x08, 0x00]
    };
    let mut bytes = vec![flags[0], flags[1], et[0], et[1]];
    bytes.extend_from_slice(&inner.ip_bytes());
    let mut outer = Packet::udp(v4(PEER4), 1, v4(dst), 1);
    outer.l4 = L4::Raw { proto: 47, bytes };
    outer.frame()
}

/// Two peers, SRC4 and PEER4; this node is the 3-tuple owner of (CLIENT4, VIP4, udp) when
/// `mine`, else the other one is. Returns the snapshot and the owner's address.
fn peer_world(mine: bool) -> (CompiledSnapshot, IpAddr) {
    let mut s = frag_world().build().unwrap();
    s.peers = stator_core::peer_set(vec![v4(SRC4), v4(PEER4)], None, 251).unwrap();
    let h3 = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 0, 0, 17);
    let owner = s.peers.table[h3 as usize % 251] as usize;
    s.peers.self_index = Some(if mine { owner } else { 1 - owner });
    let addr = s.peers.addrs[owner];
    (compile(&s), addr)
}

#[test]
fn fragments_go_to_their_three_tuple_owner_once() {
    let (snap, owner) = peer_world(false);
    let mut fwd = forwarder();
    // the owner is the other node: both fragments are redirected to it, GRE recursion 1
    let h3 = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 0, 0, 17);
    for p in [first4(1, 40), later4(40)] {
        let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
        assert_eq!(v.action, Action::Tx);
        let mut want = encapsulated(&outer_to(owner, Encap::Gre, 0, false, h3), &p.ip_bytes(), 0);
        want[34] = 1; // GRE 01 00: recursion control 1
        assert_eq!(out, want);
    }
    assert_eq!(fwd.counters(0).get(Counter::FragRedirect), 2);
    assert!(
        fwd.frag_table().is_empty(),
        "the owner records, not this node"
    );
    // a fragment that was already redirected here is decided here, counted
    let frame = redirect_frame(SRC4, &first4(1, 41), [1, 0]);
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0, &frame);
    assert_eq!(v.action, Action::Tx);
    assert_eq!(fwd.counters(0).get(Counter::RedirectAgain), 1);
    assert!(fwd.frag_table().get(&fkey4(41)).is_some());
}

#[test]
fn an_owner_decides_redirected_fragments() {
    let (snap, _) = peer_world(true);
    let mut fwd = forwarder();
    // directly: decided here, nothing redirected
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0, &first4(2, 49).frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(fwd.counters(0).get(Counter::FragRedirect), 0);
    // from the peer in a redirect: the owner decides it and replaces the outer headers (the
    // received ones were 38 bytes, the new ones 46: GUE)
    let p = first4(2, 50);
    let frame = redirect_frame(SRC4, &p, [1, 0]);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &frame);
    assert_eq!(v.action, Action::Tx);
    let hash = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 2, 53, 17);
    assert_eq!(out, gue_out(&p, hash, false));
    assert_eq!(fwd.counters(0).get(Counter::RedirectRx), 1);
    assert_eq!(fwd.counters(0).get(Counter::RedirectAgain), 0);
}

#[test]
fn redirects_received() {
    let snap = csnap(frag_world());
    let mut fwd = forwarder();
    let syn = Packet::tcp(v4(CLIENT4), 7, v4(VIP4), 80, tcp_flags::SYN);
    // to a VIP address and to the node's own address: the inner packet is decided
    for dst in [VIP4, SRC4] {
        let (v, out) = run(
            &mut fwd,
            &snap,
            &fib_tx(),
            T0,
            &redirect_frame(dst, &syn, [1, 0]),
        );
        assert_eq!(v.action, Action::Tx, "to {dst}");
        let hash = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 7, 80, 6);
        let want = encapsulated(
            &outer_to(be4(2), Encap::Gre, 0, true, hash),
            &syn.ip_bytes(),
            0,
        );
        assert_eq!(
            out, want,
            "to {dst}: outer headers replaced (the same length: no move)"
        );
    }
    assert_eq!(fwd.counters(0).get(Counter::RedirectRx), 2);
    let pass =
        |f: &[u8], fwd: &mut stator_core::Forwarder| run(fwd, &snap, &fib_tx(), T0, f).0.action;
    // plain GRE (no recursion control) and other flags are the kernel's
    assert_eq!(
        pass(&redirect_frame(VIP4, &syn, [0, 0]), &mut fwd),
        Action::Pass
    );
    assert_eq!(
        pass(&redirect_frame(VIP4, &syn, [0x81, 0]), &mut fwd),
        Action::Pass
    );
    // the node's own traffic is untouched
    let own = Packet::tcp(v4(CLIENT4), 7, v4(SRC4), 22, tcp_flags::SYN).frame();
    assert_eq!(pass(&own, &mut fwd), Action::Pass);
    let mut bad = Packet::tcp(v4(CLIENT4), 7, v4(SRC4), 22, 0).frame();
    bad[14] = 0x4f;
    assert_eq!(pass(&bad, &mut fwd), Action::Pass, "even malformed");
    // what a redirect may not carry
    let drop = Action::Drop(DropReason::Redirect);
    let nested = {
        let mut inner = Packet::udp(v4(PEER4), 1, v4(VIP4), 1);
        let et = [1, 0, 0x08, 0x00];
        let mut bytes = et.to_vec();
        bytes.extend_from_slice(&syn.ip_bytes());
        inner.l4 = L4::Raw { proto: 47, bytes };
        inner
    };
    assert_eq!(pass(&redirect_frame(VIP4, &nested, [1, 0]), &mut fwd), drop);
    let elsewhere = Packet::tcp(v4(CLIENT4), 7, v4(Ipv4Addr::new(10, 0, 0, 99)), 80, 0);
    assert_eq!(
        pass(&redirect_frame(VIP4, &elsewhere, [1, 0]), &mut fwd),
        drop
    );
    let echo = Packet::icmp(v4(CLIENT4), v4(VIP4), 8, 0, [0; 4], vec![]);
    assert_eq!(pass(&redirect_frame(VIP4, &echo, [1, 0]), &mut fwd), drop);
    let other_port = Packet::tcp(v4(CLIENT4), 7, v4(VIP4), 81, 0);
    assert_eq!(
        pass(&redirect_frame(VIP4, &other_port, [1, 0]), &mut fwd),
        drop
    );
}

fn failover_world() -> SnapshotBuilder {
    let k = key(v4(VIP4), 80, Proto::Tcp);
    SnapshotBuilder::new(node())
        .vip(v4(VIP4), 80, Proto::Tcp, 13, vec![])
        .failover(k, v4(FAILOVER4))
}

#[test]
fn a_vip_without_backend_fails_over_once() {
    let snap = csnap(failover_world());
    let mut fwd = forwarder();
    let syn = Packet::tcp(v4(CLIENT4), 8, v4(VIP4), 80, tcp_flags::SYN);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &syn.frame());
    assert_eq!(v.action, Action::Tx);
    let hash = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 8, 80, 6);
    let mut want = encapsulated(
        &outer_to(v4(FAILOVER4), Encap::Gre, 0, true, hash),
        &syn.ip_bytes(),
        0,
    );
    want[34] = 1;
    assert_eq!(out, want);
    assert_eq!(fwd.counters(0).get(Counter::Failover), 1);
    assert_eq!(fwd.counters(0).vip(VipId(0)).packets, 1);
    // received as a redirect, it is not sent on again
    let (v, _) = run(
        &mut fwd,
        &snap,
        &fib_tx(),
        T0,
        &redirect_frame(VIP4, &syn, [1, 0]),
    );
    assert_eq!(v.action, Action::Drop(DropReason::NoBackend));
    assert_eq!(fwd.counters(0).get(Counter::RedirectAgain), 1);
    // without a source address of the target's family: no_source
    let mut n = node();
    n.src_v4 = None;
    let mut b = failover_world();
    b = b.vip(v6(VIP6), 80, Proto::Tcp, 13, vec![]);
    let mut s = b.build().unwrap();
    s.node = n;
    let snap = CompiledSnapshot::new(&ValidSnapshot::new_lenient(s).unwrap());
    assert_eq!(
        run(&mut fwd, &snap, &fib_tx(), T0, &syn.frame()).0.action,
        Action::Drop(DropReason::NoSource)
    );
}

/// Class 1 = 10.100.0.0/16 and 2001:db8:100::/48; group VIPs: 10.100.1.1:80/tcp (8-bit
/// suffix, VIP 0), 10.100.5.1:80/tcp (12-bit suffix, VIP 1), 10.100.1.9 any port/udp (VIP 2),
/// [2001:db8:100:1::10]:80/tcp (64-bit suffix, VIP 3); an exact VIP 10.100.7.1:80/tcp (VIP 4,
/// no group).
fn group_world() -> SnapshotBuilder {
    let a = v4(Ipv4Addr::new(10, 100, 1, 1));
    let b = v4(Ipv4Addr::new(10, 100, 5, 1));
    let c = v4(Ipv4Addr::new(10, 100, 1, 9));
    let d: IpAddr = "2001:db8:100:1::10".parse().unwrap();
    let e = v4(Ipv4Addr::new(10, 100, 7, 1));
    let one = |n| vec![BackendSpec::new(be4(n))];
    SnapshotBuilder::new(node())
        .class("10.100.0.0".parse().unwrap(), 16, 1)
        .class("2001:db8:100::".parse().unwrap(), 48, 1)
        .vip(a, 80, Proto::Tcp, 13, one(1))
        .vip(b, 80, Proto::Tcp, 13, one(2))
        .vip(c, 0, Proto::Udp, 13, one(3))
        .vip(d, 80, Proto::Tcp, 13, vec![BackendSpec::new(be6(4))])
        .vip(e, 80, Proto::Tcp, 13, one(5))
        .group(key(a, 80, Proto::Tcp), 1, 8)
        .group(key(b, 80, Proto::Tcp), 1, 12)
        .group(key(c, 0, Proto::Udp), 1, 8)
        .group(key(d, 80, Proto::Tcp), 1, 64)
}

#[test]
fn prefix_groups_and_the_longest_suffix() {
    let snap = csnap(group_world());
    let mut fwd = forwarder();
    let to = |d: &str, port, tcp: bool| -> Vec<u8> {
        let dst: IpAddr = d.parse().unwrap();
        let src = if dst.is_ipv6() {
            v6(CLIENT6)
        } else {
            v4(CLIENT4)
        };
        if tcp {
            Packet::tcp(src, 9, dst, port, tcp_flags::SYN).frame()
        } else {
            Packet::udp(src, 9, dst, port).frame()
        }
    };
    let vip_of = |fwd: &mut stator_core::Forwarder, f: Vec<u8>| -> (Action, Option<VipId>) {
        let v: Verdict = run(fwd, &snap, &fib_tx(), T0, &f).0;
        (v.action, v.vip)
    };
    // a cluster this node was never told about: 10.100.3.0/24
    assert_eq!(
        vip_of(&mut fwd, to("10.100.3.1", 80, true)),
        (Action::Tx, Some(VipId(0)))
    );
    assert_eq!(fwd.counters(0).get(Counter::GroupMatch), 1);
    // the longest suffix wins: .21.1 ends in 0x501 (12 bits) and 0x01 (8 bits)
    assert_eq!(
        vip_of(&mut fwd, to("10.100.21.1", 80, true)),
        (Action::Tx, Some(VipId(1)))
    );
    // an exact VIP keeps priority over the group
    assert_eq!(
        vip_of(&mut fwd, to("10.100.7.1", 80, true)),
        (Action::Tx, Some(VipId(4)))
    );
    assert_eq!(fwd.counters(0).get(Counter::GroupMatch), 2);
    // the wildcard port of a group VIP
    assert_eq!(
        vip_of(&mut fwd, to("10.100.200.9", 4444, false)),
        (Action::Tx, Some(VipId(2)))
    );
    // IPv6, a 64-bit suffix
    assert_eq!(
        vip_of(&mut fwd, to("2001:db8:100:77::10", 80, true)),
        (Action::Tx, Some(VipId(3)))
    );
    // not ours: another suffix, another port, another prefix
    assert_eq!(vip_of(&mut fwd, to("10.100.3.2", 80, true)).0, Action::Pass);
    assert_eq!(vip_of(&mut fwd, to("10.100.3.1", 81, true)).0, Action::Pass);
    assert_eq!(vip_of(&mut fwd, to("10.101.3.1", 80, true)).0, Action::Pass);
    assert_eq!(fwd.counters(0).get(Counter::NonVip), 3);
}

#[test]
fn a_failover_lands_on_the_group_vip_of_another_cluster() {
    // cluster B (this node) has 10.100.2.1; cluster A's 10.100.1.1 fails over to it
    let b_vip = v4(Ipv4Addr::new(10, 100, 2, 1));
    let snap = csnap(
        SnapshotBuilder::new(node())
            .class("10.100.0.0".parse().unwrap(), 16, 1)
            .vip(b_vip, 80, Proto::Tcp, 13, vec![BackendSpec::new(be4(1))])
            .group(key(b_vip, 80, Proto::Tcp), 1, 8),
    );
    let mut fwd = forwarder();
    let a_syn = Packet::tcp(
        v4(CLIENT4),
        9,
        v4(Ipv4Addr::new(10, 100, 1, 1)),
        80,
        tcp_flags::SYN,
    );
    let (v, out) = run(
        &mut fwd,
        &snap,
        &fib_tx(),
        T0,
        &redirect_frame(Ipv4Addr::new(10, 100, 2, 1), &a_syn, [1, 0]),
    );
    assert_eq!((v.action, v.vip), (Action::Tx, Some(VipId(0))));
    let hash = flow_hash_v4(CLIENT4.octets(), [10, 100, 1, 1], 9, 80, 6);
    let want = encapsulated(
        &outer_to(be4(1), Encap::Gre, 0, true, hash),
        &a_syn.ip_bytes(),
        0,
    );
    assert_eq!(out, want);
}

#[test]
fn traced_packets_are_reported_and_forwarded_untouched() {
    let mut b = frag_world();
    b = b.vip(v4(Ipv4Addr::new(10, 0, 0, 12)), 80, Proto::Tcp, 13, vec![]);
    let mut s = b.build().unwrap();
    s.node.trace_per_sec = 2;
    let snap = compile(&s);
    let mut fwd = forwarder();
    let rx = Ipv4Addr::new(192, 0, 2, 77);
    let p = traced(Packet::udp(v4(CLIENT4), 11, v4(VIP4), 53), rx, 5555, 42);
    let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Tx);
    let hash = flow_hash_v4(CLIENT4.octets(), VIP4.octets(), 11, 53, 17);
    assert_eq!(out, gue_out(&p, hash, true), "forwarded as usual");
    let e = fwd.take_trace().expect("a report");
    assert_eq!(e.kind(), Some(TraceKind::Forward));
    assert_eq!((e.trace_id, e.hop, e.vip_id, e.real_id), (42, 1, 0, 0));
    assert_eq!(
        (e.receiver[..4].to_vec(), e.receiver_port),
        (rx.octets().to_vec(), [0x15, 0xb3])
    );
    assert_eq!(e.slot, hash % 13);
    assert_eq!(e.cause(), Some(stator_core::TraceCause::CtMiss));
    assert_eq!(e.flow, p_flow(&p));
    assert_eq!(fwd.take_trace(), None, "taken");
    // a TCP SYN carries the mark right after its 20 bytes; a drop is reported too
    let syn = traced(
        Packet::tcp(
            v4(CLIENT4),
            12,
            v4(Ipv4Addr::new(10, 0, 0, 12)),
            80,
            tcp_flags::SYN,
        ),
        rx,
        5555,
        43,
    );
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0, &syn.frame());
    assert_eq!(v.action, Action::Drop(DropReason::NoBackend));
    let e = fwd.take_trace().expect("a report");
    assert_eq!(
        (e.kind(), e.drop_reason()),
        (Some(TraceKind::Drop), Some(DropReason::NoBackend))
    );
    // the node's window: 2 a second
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
    assert_eq!(v.action, Action::Tx);
    assert_eq!(fwd.take_trace(), None);
    let c = fwd.counters(0);
    assert_eq!(
        (c.get(Counter::TraceReport), c.get(Counter::TraceLimited)),
        (2, 1)
    );
    // a new second, a new window; a mark cut short by the packet's end is no mark
    assert!(
        run(&mut fwd, &snap, &fib_tx(), T0 + SEC, &p.frame())
            .0
            .action
            == Action::Tx
    );
    assert!(fwd.take_trace().is_some());
    let whole = traced(Packet::udp(v4(CLIENT4), 11, v4(VIP4), 53), rx, 5555, 44);
    let cut = match &whole.l4 {
        L4::Udp { payload, .. } => payload[..39].to_vec(),
        _ => unreachable!(),
    };
    let short = Packet::udp(v4(CLIENT4), 11, v4(VIP4), 53).with_payload(&cut);
    run(&mut fwd, &snap, &fib_tx(), T0 + SEC, &short.frame());
    assert_eq!(fwd.take_trace(), None);
    assert_eq!(
        fwd.counters(0).get(Counter::TraceUnauth),
        0,
        "no mark at all"
    );
}

/// docs/forwarding.md §11.1: a mark is traced only when its MAC verifies under one of the
/// node's keys, for this receiver and this flow; anything else is ordinary traffic, counted.
#[test]
fn only_authentic_marks_are_traced() {
    let mut s = frag_world().build().unwrap();
    s.node.trace_per_sec = 100;
    let snap = compile(&s);
    let mut fwd = forwarder();
    let rx = Ipv4Addr::new(192, 0, 2, 77);
    let victim = Ipv4Addr::new(203, 0, 113, 9);
    let udp = |sport| Packet::udp(v4(CLIENT4), sport, v4(VIP4), 53);
    let hash = |sport| flow_hash_v4(CLIENT4.octets(), VIP4.octets(), sport, 53, 17);
    // an outsider's mark: no key, or a key of its own
    let unsealed = {
        let p = traced(udp(11), rx, 5555, 1);
        let L4::Udp { payload, .. } = &p.l4 else {
            unreachable!()
        };
        let mut payload = payload.clone();
        payload[32..40].fill(0);
        udp(11).with_payload(&payload)
    };
    let wrong_key = traced_with(udp(12), victim, 5555, 2, b"not-the-clusters");
    // a genuine mark replayed towards another receiver (its receiver rewritten), and on
    // another flow (another source port)
    let replayed = {
        let p = traced(udp(13), rx, 5555, 3);
        let L4::Udp { payload, .. } = &p.l4 else {
            unreachable!()
        };
        let mut payload = payload.clone();
        payload[8..12].copy_from_slice(&victim.octets());
        udp(13).with_payload(&payload)
    };
    let moved = {
        let p = traced(udp(14), rx, 5555, 4);
        let L4::Udp { payload, .. } = &p.l4 else {
            unreachable!()
        };
        udp(15).with_payload(payload)
    };
    for (what, p, sport) in [
        ("no MAC", &unsealed, 11),
        ("another key", &wrong_key, 12),
        ("another receiver", &replayed, 13),
        ("another flow", &moved, 15),
    ] {
        let (v, out) = run(&mut fwd, &snap, &fib_tx(), T0, &p.frame());
        assert_eq!(
            v.action,
            Action::Tx,
            "{what}: forwarded as ordinary traffic"
        );
        assert_eq!(out, gue_out(p, hash(sport), true), "{what}");
        assert_eq!(fwd.take_trace(), None, "{what}: never reported");
    }
    assert_eq!(fwd.counters(0).get(Counter::TraceUnauth), 4);
    // the genuine one is reported; a second key (rotation) verifies too
    run(
        &mut fwd,
        &snap,
        &fib_tx(),
        T0,
        &traced(udp(16), rx, 5555, 5).frame(),
    );
    assert_eq!(fwd.take_trace().map(|e| e.trace_id), Some(5));
    let next: [u8; 16] = *b"the-next-key-16b";
    let mut rotated = frag_world().build().unwrap();
    rotated.node.trace_keys = stator_abi::TraceKeys::from_keys(&[next, TRACE_KEY]);
    let rotated = compile(&rotated);
    for (key, id) in [(next, 6), (TRACE_KEY, 7)] {
        let p = traced_with(udp(17), rx, 5555, id, &key);
        run(&mut fwd, &rotated, &fib_tx(), T0 + SEC, &p.frame());
        assert_eq!(fwd.take_trace().map(|e| e.trace_id), Some(id), "key {id}");
    }
    // a node without keys traces nothing
    let mut keyless = frag_world().build().unwrap();
    keyless.node.trace_keys = stator_abi::TraceKeys::default();
    let keyless = compile(&keyless);
    run(
        &mut fwd,
        &keyless,
        &fib_tx(),
        T0 + SEC,
        &traced(udp(18), rx, 5555, 8).frame(),
    );
    assert_eq!(fwd.take_trace(), None);
    assert_eq!(fwd.counters(0).get(Counter::TraceUnauth), 5);
}

fn p_flow(p: &Packet) -> stator_core::FlowKey {
    let (sport, dport, proto) = match &p.l4 {
        L4::Udp { sport, dport, .. } => (*sport, *dport, 17),
        L4::Tcp { sport, dport, .. } => (*sport, *dport, 6),
        _ => (0, 0, 0),
    };
    stator_core::Flow {
        src: p.src,
        dst: p.dst,
        sport,
        dport,
        proto,
    }
    .key()
    .unwrap()
}

#[test]
fn a_traced_fragment_reports_its_redirect_and_its_decision() {
    let (snap, owner) = peer_world(false);
    let mut fwd = forwarder();
    let rx = Ipv4Addr::new(192, 0, 2, 77);
    let first = traced(first4(3, 60), rx, 7, 9);
    let (v, _) = run(&mut fwd, &snap, &fib_tx(), T0, &first.frame());
    assert_eq!(v.action, Action::Tx);
    // hop 1: to the owner
    let e = fwd.take_trace().expect("a report");
    assert_eq!((e.kind(), e.hop), (Some(TraceKind::FragRedirect), 1));
    let IpAddr::V4(o) = owner else { panic!() };
    assert_eq!(&e.target[..4], &o.octets());
    assert_eq!(e.flow, p_flow(&first));
    // hop 2, at the owner (another forwarder, given the redirect)
    let (own, _) = peer_world(true);
    let mut owner_fwd = forwarder();
    let frame = redirect_frame(SRC4, &first, [1, 0]);
    let (v, _) = run(&mut owner_fwd, &own, &fib_tx(), T0, &frame);
    assert_eq!(v.action, Action::Tx);
    let e = owner_fwd.take_trace().expect("a report at the owner");
    assert_eq!((e.kind(), e.hop), (Some(TraceKind::Forward), 2));
    assert_eq!(e.flags, stator_abi::STATOR_TRACE_F_FRAGMENT as u8);
}

#[test]
fn a_traced_failover_is_reported() {
    let snap = csnap(failover_world());
    let mut fwd = forwarder();
    let syn = traced(
        Packet::tcp(v4(CLIENT4), 8, v4(VIP4), 80, tcp_flags::SYN),
        Ipv4Addr::new(192, 0, 2, 77),
        7,
        1,
    );
    run(&mut fwd, &snap, &fib_tx(), T0, &syn.frame());
    let e = fwd.take_trace().unwrap();
    assert_eq!(e.kind(), Some(TraceKind::Failover));
    assert_eq!(&e.target[..4], &FAILOVER4.octets());
}
