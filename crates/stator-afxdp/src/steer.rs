//! Packet steering — the steering module's choice (Maglev §3.1): which packet thread gets a
//! frame. (Not client steering, `stator-steer`'s choice of proxy worker: docs/steering.md
//! names the three kinds of steering.)
//!
//! The flow hash of the 5-tuple (stator-hash's, the one the forwarder uses) picks the thread,
//! so a connection's packets meet the same thread — and its connection table — in order. The
//! hash is the one of the connection-table key the forwarder itself will use
//! (`stator_core::table_hash`: its own parse, the quoted flow reversed for an ICMP error), so
//! no frame the forwarder would look up in a table is ever steered by a different reading of
//! its headers. Frames that will not reach a table (malformed, not a VIP, fragments) are
//! spread by [`steering_hash`], stator-wire's reading: the 5-tuple, a fragment's 3-tuple, an
//! ICMP error's quoted flow. When the chosen thread's queue is full, the next thread with room
//! takes the frame, round-robin (the paper's fallback for floods of one 5-tuple); the caller
//! counts it.

use stator_hash::{flow_hash_v4, flow_hash_v6, flow_hash3_v4, flow_hash3_v6};
use stator_wire::{IpPair, parse_flow};

/// The steering hash of an Ethernet frame; 0 for anything that does not parse (the XDP
/// program hands up only IP traffic for a VIP, so that is a frame the forwarder will drop).
#[inline]
pub fn steering_hash(frame: &[u8]) -> u32 {
    let Ok(t) = parse_flow(frame) else {
        return 0;
    };
    if t.is_fragment() {
        return match t.addrs {
            IpPair::V4 { src, dst } => flow_hash3_v4(src.octets(), dst.octets(), t.protocol.0),
            IpPair::V6 { src, dst } => flow_hash3_v6(src.octets(), dst.octets(), t.protocol.0),
        };
    }
    if t.is_icmp_error()
        && let Ok(Some(q)) = t.icmp_invoking(frame)
    {
        // the quoted packet went from the VIP to the client: reversed, it is the client's flow
        return match q.addrs {
            IpPair::V4 { src, dst } => flow_hash_v4(
                dst.octets(),
                src.octets(),
                q.dst_port,
                q.src_port,
                q.protocol.0,
            ),
            IpPair::V6 { src, dst } => flow_hash_v6(
                dst.octets(),
                src.octets(),
                q.dst_port,
                q.src_port,
                q.protocol.0,
            ),
        };
    }
    match t.addrs {
        IpPair::V4 { src, dst } => flow_hash_v4(
            src.octets(),
            dst.octets(),
            t.src_port,
            t.dst_port,
            t.protocol.0,
        ),
        IpPair::V6 { src, dst } => flow_hash_v6(
            src.octets(),
            dst.octets(),
            t.src_port,
            t.dst_port,
            t.protocol.0,
        ),
    }
}

/// The thread a hash asks for (of `threads`, at least 1).
#[inline]
pub fn home_thread(hash: u32, threads: usize) -> usize {
    // multiply-shift: uniform over the threads without a division
    ((u64::from(hash) * threads as u64) >> 32) as usize
}

/// The threads the round-robin fallback tries when `home`'s queue is full: every other thread
/// once, starting after `last` (the one the fallback used last time).
#[inline]
pub fn fallback_order(home: usize, last: usize, threads: usize) -> impl Iterator<Item = usize> {
    (1..=threads)
        .map(move |k| (last + k) % threads)
        .filter(move |&t| t != home)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_testkit::{Packet, tcp_flags};
    use std::net::{IpAddr, Ipv4Addr};

    fn v4(d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, d))
    }

    #[test]
    fn the_fallback_tries_every_other_thread_once() {
        for threads in 1..6 {
            for home in 0..threads {
                for last in 0..threads {
                    let mut got: Vec<usize> = fallback_order(home, last, threads).collect();
                    assert_eq!(got.first().copied(), {
                        let first = (last + 1) % threads;
                        if first == home && threads > 1 {
                            Some((last + 2) % threads)
                        } else if threads == 1 {
                            None
                        } else {
                            Some(first)
                        }
                    });
                    got.sort_unstable();
                    let want: Vec<usize> = (0..threads).filter(|&t| t != home).collect();
                    assert_eq!(got, want, "threads {threads} home {home} last {last}");
                }
            }
        }
    }

    #[test]
    fn a_flow_and_its_icmp_error_steer_alike() {
        let client = v4(1);
        let vip = v4(10);
        let p = Packet::tcp(client, 40000, vip, 80, tcp_flags::ACK).frame();
        let h = steering_hash(&p);
        assert_ne!(h, 0);
        assert_eq!(h, steering_hash(&p), "deterministic");
        let other = Packet::tcp(client, 40001, vip, 80, tcp_flags::ACK).frame();
        assert_ne!(h, steering_hash(&other));
        // garbage steers to hash 0
        assert_eq!(steering_hash(&[1, 2, 3]), 0);
        // spread: 4 threads all get some of 1000 flows
        let mut seen = [0usize; 4];
        for port in 0..1000u16 {
            let f = Packet::tcp(client, 10_000 + port, vip, 80, tcp_flags::ACK).frame();
            seen[home_thread(steering_hash(&f), 4)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
    }
}
