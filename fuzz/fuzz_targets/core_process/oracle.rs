//! What every processed frame is checked against (docs/forwarding.md, stator-core's contract):
//!
//! - bookkeeping: exactly one action counter (`act_*`, `act_hold` included) moves, the one of
//!   the verdict; exactly one drop reason for a drop, none otherwise; no other CPU's counters
//!   move; `held()` names a datagram exactly for `Hold`; a trace report is returned exactly
//!   when `trace_report` moves, and it names the traced IP packet's length;
//! - the tables keep their bounds (connection table, fragment table);
//! - a frame is byte-identical unless the verdict transmits it (or drops it `tx_port`, after
//!   the rewrite); a rewritten frame is either an echo reply (the same length, addresses
//!   swapped, IPv4 header checksum right, an ICMP checksum that verified still verifying) or
//!   an encapsulation: parsed with stator-wire as Ethernet (no VLAN tag) + an outer IPv4 header
//!   whose checksum verifies and whose lengths are the buffer's (or IPv6) + GRE/GUE/IPIP, whose
//!   inner packet is the received frame's IP packet (for a received redirect, its inner
//!   packet) and whose padding is the received padding, byte for byte the frame
//!   stator-testkit's independent §5 builder (`expect::encapsulated`) makes for that real (or
//!   redirect target), with GRE recursion control 1 exactly for a redirect;
//! - a redirect (fragment to its owner, failover) goes to a peer that is not this node or to
//!   the VIP's failover address, never out of a received redirect (recursion control: never
//!   redirected twice), and a redirected fragment is a fragment;
//! - `stale_pass` only while the heartbeat is stale, and then a pass that decided nothing;
//! - for a plain TCP/UDP packet (unless passed as stale), `Forwarder::explain` (asked before, on a copy) predicts the
//!   VIP, the selection and the real `process` arrives at, and `table_hash` is the verdict's
//!   flow hash.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use stator_core::{
    Action, Counter, Counters, DropReason, Encap, Forwarder, RealId, TraceOutcome, VecPacketBuf,
    Verdict, table_hash,
};
use stator_testkit::expect::{Outer, Tunnel, encapsulated};
use stator_wire::{EthernetFrame, Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv6Packet};

use crate::frames::Frame;
use crate::world::{HOP_DMAC, HOP_SMAC, World};

const ACTIONS: [Counter; 6] = [
    Counter::ActAborted,
    Counter::ActDrop,
    Counter::ActPass,
    Counter::ActTx,
    Counter::ActRedirect,
    Counter::ActHold,
];

fn delta(before: &Counters, after: &Counters, c: Counter) -> u64 {
    after.get(c) - before.get(c)
}

/// Whether to print every verdict (`FUZZ_DEBUG=1`, to see what an input reaches).
fn debug() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("FUZZ_DEBUG").is_some())
}

/// Processes `frame` under snapshot `which` at `now` and checks everything above.
pub fn process(
    fwd: &mut Forwarder,
    world: &World,
    which: usize,
    now: u64,
    frame: &Frame,
) -> Verdict {
    let snap = &world.snaps[which];
    let plain = &world.plain[which];
    let before = fwd.clone();
    let hash = table_hash(snap, &frame.bytes);
    let mut buf = VecPacketBuf::new(&frame.bytes, frame.headroom);
    let v = fwd.process(snap, now, frame.cpu, frame.ingress, &world.fib, &mut buf);
    let out = buf.to_vec();

    // bookkeeping
    let (c0, c1) = (before.counters(frame.cpu), &fwd.counters(frame.cpu).clone());
    let d = |c| delta(c0, c1, c);
    let acts: u64 = ACTIONS.iter().map(|&c| d(c)).sum();
    assert_eq!(acts, 1, "one action counter per frame: {v:?}");
    assert_eq!(
        d(v.action.counter()),
        1,
        "the verdict's action counter: {v:?}"
    );
    let drops: u64 = DropReason::ALL
        .iter()
        .map(|&r| c1.drops(r) - c0.drops(r))
        .sum();
    assert_eq!(
        drops,
        u64::from(matches!(v.action, Action::Drop(_))),
        "{v:?}"
    );
    if let Action::Drop(r) = v.action {
        assert_eq!(c1.drops(r) - c0.drops(r), 1, "the drop's own reason: {v:?}");
    }
    for cpu in 0..fwd.cpus() {
        if cpu != frame.cpu % fwd.cpus() {
            assert_eq!(
                before.counters(cpu),
                fwd.counters(cpu),
                "another CPU's counters"
            );
        }
    }
    assert_eq!(fwd.held().is_some(), v.action == Action::Hold, "{v:?}");
    let report = fwd.take_trace();
    if debug() {
        let kind = report.map(|e| e.kind());
        eprintln!(
            "snapshot {which} t={now} cpu {} {v:?} report {kind:?}",
            frame.cpu
        );
    }
    assert_eq!(report.is_some(), d(Counter::TraceReport) == 1, "{v:?}");
    if let (Some(e), Some(len)) = (report, frame.ip_len) {
        assert_eq!(
            usize::from(e.ip_len),
            len,
            "a report names the traced packet's length"
        );
    }
    assert!(fwd.conn_table(frame.cpu).len() <= world.config.ct_capacity);
    assert!(fwd.frag_table().len() <= world.config.frag_capacity.max(1));

    // redirects: once, to another node
    let redirected_in = d(Counter::RedirectRx) == 1;
    let frag_redirect = d(Counter::FragRedirect) == 1;
    let failover = d(Counter::Failover) == 1;
    assert!(
        !(redirected_in && (frag_redirect || failover)),
        "a received redirect redirected again: {v:?}"
    );

    // the frame
    let rewritten = v.action.is_transmit() || v.action == Action::Drop(DropReason::TxPort);
    if !rewritten {
        assert_eq!(out, frame.bytes, "untouched unless transmitted: {v:?}");
    } else if d(Counter::IcmpEchoReply) == 1 {
        echo_reply(&frame.bytes, &out);
    } else {
        let target = if frag_redirect {
            let me = plain.peers.self_index.map(|i| plain.peers.addrs[i]);
            Target::Redirect {
                to: plain
                    .peers
                    .addrs
                    .iter()
                    .copied()
                    .filter(|a| Some(*a) != me)
                    .collect(),
                fragment: true,
            }
        } else if failover {
            let vip = plain
                .vips
                .values()
                .find(|x| Some(x.id) == v.vip)
                .expect("a failover names its VIP");
            Target::Redirect {
                to: vip.failover.into_iter().collect(),
                fragment: false,
            }
        } else {
            let id = v.real.expect("a forward names its real");
            let real = plain
                .reals
                .get(&RealId(id.0))
                .expect("a forward's real exists");
            Target::Real(real.addr, real.encap)
        };
        let predicted = if d(Counter::FragHit) == 1 {
            None
        } else {
            v.hash
        };
        encapsulation(
            world,
            which,
            &frame.bytes,
            &out,
            &target,
            redirected_in,
            predicted,
        );
    }

    // the heartbeat (§3.2): only a stale one passes VIP traffic, and then nothing is decided
    if d(Counter::StalePass) == 1 {
        assert!(before.beat().stale(now), "stale_pass under a fresh heartbeat: {v:?}");
        assert_eq!(v.action, Action::Pass, "{v:?}");
        assert_eq!(v.real, None, "{v:?}");
        assert_eq!(
            fwd.conn_table(frame.cpu).len(),
            before.conn_table(frame.cpu).len(),
            "nothing recorded while stale"
        );
        return v;
    }

    // explain and table_hash agree with process for a plain packet
    if let Some(p) = &frame.plain {
        let t = before.explain(snap, now, frame.cpu, &p.flow, p.syn);
        assert_eq!(t.vip.map(|m| m.id), v.vip, "explain's VIP");
        if v.vip.is_some() {
            assert_eq!(t.selection, v.selection, "explain's selection");
            match t.outcome {
                TraceOutcome::Real(r) => assert_eq!(Some(r), v.real, "explain's real"),
                TraceOutcome::Drop(_) | TraceOutcome::NotVip => assert_eq!(v.real, None),
            }
        }
        if v.hash.is_some() {
            assert_eq!(hash, v.hash, "table_hash is the flow hash");
        }
    }
    v
}

/// Where an encapsulated frame may go.
enum Target {
    /// To this real, in this encapsulation.
    Real(IpAddr, Encap),
    /// GRE with recursion control 1, to one of these nodes: a fragment to its owner, or a
    /// packet of a VIP without backend to its failover address.
    Redirect { to: Vec<IpAddr>, fragment: bool },
}

fn echo_reply(input: &[u8], out: &[u8]) {
    assert_eq!(
        out.len(),
        input.len(),
        "an echo reply keeps the frame's length"
    );
    assert_eq!(
        (&out[..6], &out[6..12]),
        (&input[6..12], &input[..6]),
        "MACs swapped"
    );
    let l3 = if input[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    };
    assert_eq!(
        out[l3 - 2..l3],
        input[l3 - 2..l3],
        "the VLAN tag and ethertype stay"
    );
    if out[l3 - 2..l3] == [0x08, 0x00] {
        let (i, o) = (ipv4(&input[l3..]), ipv4(&out[l3..]));
        assert!(o.verify_checksum(), "an echo reply's IPv4 header checksum");
        assert_eq!((o.src_addr(), o.dst_addr()), (i.dst_addr(), i.src_addr()));
        assert_eq!(o.ttl(), 64);
        let (ih, oh) = (&input[l3..], &out[l3..]);
        let (hl, end) = (i.header_len(), usize::from(i.total_len()));
        let (ic, oc) = (
            Icmpv4Packet::new_checked(&ih[hl..end]).expect("an echo request"),
            Icmpv4Packet::new_checked(&oh[hl..end]).expect("an echo reply"),
        );
        assert_eq!(oc.msg_type().0, 0);
        if ic.verify_checksum() {
            assert!(
                oc.verify_checksum(),
                "the ICMP checksum updated for the type"
            );
        }
    } else {
        let (i, o) = (ipv6(&input[l3..]), ipv6(&out[l3..]));
        assert_eq!((o.src_addr(), o.dst_addr()), (i.dst_addr(), i.src_addr()));
        assert_eq!(o.hop_limit(), 64);
        let end = 40 + usize::from(i.payload_len());
        let (ic, oc) = (
            Icmpv6Packet::new_checked(&input[l3 + 40..l3 + end]).expect("an echo request"),
            Icmpv6Packet::new_checked(&out[l3 + 40..l3 + end]).expect("an echo reply"),
        );
        assert_eq!(oc.msg_type().0, 129);
        if ic.verify_checksum(&i.src_addr(), &i.dst_addr()) {
            assert!(oc.verify_checksum(&o.src_addr(), &o.dst_addr()));
        }
    }
}

fn ipv4(b: &[u8]) -> Ipv4Packet<&[u8]> {
    Ipv4Packet::new_checked(b).expect("an IPv4 header within the frame")
}

fn ipv6(b: &[u8]) -> Ipv6Packet<&[u8]> {
    Ipv6Packet::new_checked(b).expect("an IPv6 header within the frame")
}

/// Checks an encapsulated frame: with stator-wire first (the structure), then byte for byte.
#[allow(clippy::too_many_arguments)]
fn encapsulation(
    world: &World,
    which: usize,
    input: &[u8],
    out: &[u8],
    target: &Target,
    redirected_in: bool,
    predicted_hash: Option<u32>,
) {
    let node = &world.plain[which].node;
    let eth = EthernetFrame::new_checked(out).expect("an Ethernet frame");
    assert!(!eth.is_tagged(), "an ingress VLAN tag is consumed");
    assert_eq!((eth.dst_addr().0, eth.src_addr().0), (HOP_DMAC, HOP_SMAC));
    let l3 = &out[14..];
    // the outer header, its lengths, its checksum
    let (dst, proto, oh, outer_total, hash_in_frame) = match eth.ethertype().0 {
        0x0800 => {
            let ip = ipv4(l3);
            assert!(ip.verify_checksum(), "the outer IPv4 header checksum");
            assert_eq!((ip.version(), ip.header_len()), (4, 20));
            assert_eq!(
                Some(ip.src_addr()),
                node.src_v4,
                "from the node's IPv4 address"
            );
            assert_eq!(ip.ttl(), node.outer_ttl);
            (
                IpAddr::V4(ip.dst_addr()),
                ip.protocol().0,
                20,
                usize::from(ip.total_len()),
                None,
            )
        }
        0x86dd => {
            let ip = ipv6(l3);
            assert_eq!(
                Some(ip.src_addr()),
                node.src_v6,
                "from the node's IPv6 address"
            );
            assert_eq!(ip.hop_limit(), node.outer_ttl);
            (
                IpAddr::V6(ip.dst_addr()),
                ip.next_header().0,
                40,
                40 + usize::from(ip.payload_len()),
                Some(ip.flow_label()),
            )
        }
        other => panic!("an encapsulation of ethertype {other:#06x}"),
    };
    let e = match proto {
        47 => 4,
        17 => 12,
        4 | 41 => 0,
        p => panic!("outer protocol {p}"),
    };
    assert!(l3.len() >= outer_total, "the outer length within the frame");
    // the inner packet: the received one, where the received frame has it
    let tail = &out[14 + oh + e..];
    assert!(
        tail.len() <= input.len(),
        "more inner bytes than were received"
    );
    let start = input.len() - tail.len();
    assert_eq!(
        &input[start..],
        tail,
        "the inner packet and padding as received"
    );
    let ingress_l3 = if input[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    };
    if redirected_in {
        let gre = &input[start - 4..start];
        assert!(
            gre[..2] == [1, 0] && (gre[2..] == [8, 0] || gre[2..] == [0x86, 0xdd]),
            "the inner packet of a received redirect"
        );
    } else {
        assert_eq!(start, ingress_l3, "the received IP packet");
    }
    let inner_len = match tail[0] >> 4 {
        4 => usize::from(u16::from_be_bytes([tail[2], tail[3]])),
        6 => 40 + usize::from(u16::from_be_bytes([tail[4], tail[5]])),
        v => panic!("an inner packet of version {v}"),
    };
    assert_eq!(
        outer_total,
        oh + e + inner_len,
        "the outer length is the inner's plus headers"
    );
    let (inner, trailing) = tail.split_at(inner_len);
    // where it went, and how
    let (tunnel, redirect) = match target {
        Target::Real(addr, encap) => {
            assert_eq!(dst, *addr, "to the chosen real");
            let t = match encap {
                Encap::Gre => Tunnel::Gre,
                Encap::Ipip => Tunnel::Ipip,
                Encap::Gue => Tunnel::Gue {
                    port: node.gue_port,
                },
            };
            (t, false)
        }
        Target::Redirect { to, fragment } => {
            assert!(to.contains(&dst), "a redirect to {dst}, not one of {to:?}");
            assert!(!redirected_in, "never redirected twice");
            if *fragment {
                assert!(is_fragment(inner), "only fragments go to their owner");
            }
            (Tunnel::Gre, true)
        }
    };
    // The hash the outer header carries: the verdict's flow hash, a fragment's 3-tuple hash
    // (§9), else read from the frame (it only shows in the IPv6 flow label and the GUE source
    // port: a fragment that follows its record carries the record's).
    let gue_sport =
        (proto == 17).then(|| u32::from(u16::from_be_bytes([out[14 + oh], out[15 + oh]])));
    let hash = match (target, predicted_hash) {
        (Target::Redirect { fragment: true, .. }, _) => h3(inner),
        (_, Some(h)) => h,
        _ => hash_in_frame.or(gue_sport.map(|p| p & 0x3fff)).unwrap_or(0),
    };
    let outer = Outer {
        dmac: HOP_DMAC,
        smac: HOP_SMAC,
        src: match dst {
            IpAddr::V4(_) => IpAddr::V4(node.src_v4.unwrap_or(Ipv4Addr::UNSPECIFIED)),
            IpAddr::V6(_) => IpAddr::V6(node.src_v6.unwrap_or(Ipv6Addr::UNSPECIFIED)),
        },
        dst,
        ttl: node.outer_ttl,
        tunnel,
        hash,
        tos: None,
        df: None,
    };
    let mut want = encapsulated(&outer, inner, 0);
    if redirect {
        want[14 + oh] = 1; // GRE 01 00: recursion control 1 (§10.1)
    }
    want.extend_from_slice(trailing);
    assert_eq!(
        out,
        &want[..],
        "the §5 frame (stator-testkit's), redirect {redirect}"
    );
}

/// Whether an IP packet is a fragment (IPv4 MF or offset; IPv6 a fragment header).
fn is_fragment(ip: &[u8]) -> bool {
    match ip[0] >> 4 {
        4 => ipv4(ip).is_fragment(),
        _ => ipv6(ip).upper_layer().is_ok_and(|u| u.fragment.is_some()),
    }
}

/// §9's `h3`: the flow hash of a fragment's addresses and `fproto`, ports 0.
fn h3(ip: &[u8]) -> u32 {
    match ip[0] >> 4 {
        4 => {
            let p = ipv4(ip);
            let proto = p.protocol().0;
            stator_hash::flow_hash_v4(p.src_addr().octets(), p.dst_addr().octets(), 0, 0, proto)
        }
        _ => {
            let p = ipv6(ip);
            let proto = fproto_v6(ip);
            stator_hash::flow_hash_v6(p.src_addr().octets(), p.dst_addr().octets(), 0, 0, proto)
        }
    }
}

/// An IPv6 fragment's `fproto` as §2 walks to it: the next-header field of the last fragment
/// header met among the first four extension headers (the walk stops at a non-first one).
fn fproto_v6(ip: &[u8]) -> u8 {
    let (mut next, mut at, mut fproto) = (ip[6], 40, 0);
    for _ in 0..4 {
        let Some(h) = ip.get(at..at + 2) else { break };
        match next {
            44 => {
                fproto = h[0];
                let offset = ip
                    .get(at + 2..at + 4)
                    .map_or(0, |o| u16::from_be_bytes([o[0], o[1]]) >> 3);
                if offset != 0 {
                    break;
                }
                at += 8;
            }
            0 | 43 | 60 => at += (usize::from(h[1]) + 1) * 8,
            51 => at += (usize::from(h[1]) + 2) * 4,
            _ => break,
        }
        next = h[0];
    }
    fproto
}
