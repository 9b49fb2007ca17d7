//! docs/forwarding.md §6: ICMP and ICMPv6 to a VIP address — the echo reply written in place,
//! and the flow an ICMP frag-needed / packet-too-big is about.

use stator_abi::{DropReason, Family};
use stator_wire::checksum;

use crate::compiled::{IPPROTO_TCP, IPPROTO_UDP};
use crate::flow::{Tuple, v4};
use crate::parse::{Ip, addrs_v6};

const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_FRAG_NEEDED: u8 = 4;
const ICMP_ECHO: u8 = 8;
const ICMPV6_PKT_TOOBIG: u8 = 2;
const ICMPV6_ECHO_REQUEST: u8 = 128;
const ICMPV6_ECHO_REPLY: u8 = 129;
/// Hop limit / TTL of an echo reply.
const REPLY_TTL: u8 = 64;

/// What §6 does with an ICMP message, by type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// Echo request: answer (or pass, without `STATOR_NODE_F_ICMP_ECHO`).
    Echo,
    /// Fragmentation needed / packet too big: route to the flow's backend.
    TooBig,
    /// ICMPv6 neighbour discovery (133–137): pass.
    NeighbourDiscovery,
    /// Anything else: drop `icmp`.
    Other,
}

/// Classifies an ICMP (IPv4) or ICMPv6 (IPv6) message.
#[inline]
pub(crate) fn classify(family: Family, ty: u8, code: u8) -> IcmpKind {
    match (family, ty) {
        (Family::V4, ICMP_ECHO) | (Family::V6, ICMPV6_ECHO_REQUEST) => IcmpKind::Echo,
        (Family::V4, ICMP_DEST_UNREACH) if code == ICMP_FRAG_NEEDED => IcmpKind::TooBig,
        (Family::V6, ICMPV6_PKT_TOOBIG) => IcmpKind::TooBig,
        (Family::V6, 133..=137) => IcmpKind::NeighbourDiscovery,
        _ => IcmpKind::Other,
    }
}

/// Turns the echo request in `frame` into its reply, in place: Ethernet addresses swapped (a VLAN
/// tag stays), IP addresses swapped, TTL / hop limit 64, the IPv4 header checksum recomputed over
/// the whole header, the type changed and the ICMP checksum updated for it (RFC 1624 eqn. 3).
/// The caller has validated `ip` against this frame (§2, and the 8-byte ICMP header).
pub(crate) fn echo_reply(frame: &mut [u8], ip: &Ip) {
    if frame.len() < ip.ip_end || ip.l4 + 8 > ip.ip_end {
        return;
    }
    let (dst_mac, rest) = frame.split_at_mut(6);
    dst_mac.swap_with_slice(&mut rest[..6]);
    let (hdr, icmp) = frame.split_at_mut(ip.l4);
    let h = &mut hdr[ip.l3..];
    let (old_type, new_type) = match ip.family {
        Family::V4 => {
            let (src, dst) = h[12..20].split_at_mut(4);
            src.swap_with_slice(dst);
            h[8] = REPLY_TTL;
            h[10..12].fill(0);
            let c = checksum::checksum(h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            (ICMP_ECHO, ICMP_ECHO_REPLY)
        }
        Family::V6 => {
            let (src, dst) = h[8..40].split_at_mut(16);
            src.swap_with_slice(dst);
            h[7] = REPLY_TTL;
            // The pseudo-header's sum does not change when source and destination swap.
            (ICMPV6_ECHO_REQUEST, ICMPV6_ECHO_REPLY)
        }
    };
    let code = icmp[1];
    let old = u16::from_be_bytes([old_type, code]);
    let new = u16::from_be_bytes([new_type, code]);
    // RFC 1624 eqn. 3 gives 0x0000 where the data now sums to +0 (an all-zero IPv4 echo
    // reply), which does not verify; 0xffff (-0) verifies wherever 0x0000 did (the fuzz target
    // core_process found it: fuzz/regressions/core_process/echo-all-zero)
    let c = match checksum::update(u16::from_be_bytes([icmp[2], icmp[3]]), old, new) {
        0 => 0xffff,
        c => c,
    };
    icmp[0] = new_type;
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}

/// The flow an ICMP frag-needed / packet-too-big is about: the quoted packet's flow reversed,
/// `{inner.dst, inner.src, inner.dport, inner.sport, inner.proto}`, so it is the key of the
/// client's own packets; its destination and destination port are the VIP's.
///
/// Parses the packet quoted at `l4 + 8` as the outer's family (§6): the version must match,
/// IPv4 needs 20 bytes and `l4 + 8 + IHL*4 + 8 ≤ ip_end` with IHL ≥ 5, IPv6 needs 40 + 8 bytes
/// (no extension-header walk); else `malformed_l4`. A protocol other than TCP or UDP is `icmp`.
pub(crate) fn quoted_flow(data: &[u8], ip: &Ip) -> Result<Tuple, DropReason> {
    const MALFORMED: DropReason = DropReason::MalformedL4;
    let q = data.get(ip.l4 + 8..ip.ip_end).unwrap_or(&[]);
    match ip.family {
        Family::V4 => {
            let Some(h) = q.first_chunk::<20>() else {
                return Err(MALFORMED);
            };
            let hlen = usize::from(h[0] & 0x0f) * 4;
            if h[0] >> 4 != 4 || hlen < 20 {
                return Err(MALFORMED);
            }
            let Some(p) = q.get(hlen..).and_then(<[u8]>::first_chunk::<8>) else {
                return Err(MALFORMED);
            };
            let proto = h[9];
            if proto != IPPROTO_TCP && proto != IPPROTO_UDP {
                return Err(DropReason::Icmp);
            }
            let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
            Ok(Tuple {
                src: v4(dst),
                dst: v4(src),
                sport: u16::from_be_bytes([p[2], p[3]]),
                dport: u16::from_be_bytes([p[0], p[1]]),
                proto,
                family: Family::V4,
            })
        }
        Family::V6 => {
            let Some(h) = q.first_chunk::<48>() else {
                return Err(MALFORMED);
            };
            if h[0] >> 4 != 6 {
                return Err(MALFORMED);
            }
            let proto = h[6];
            if proto != IPPROTO_TCP && proto != IPPROTO_UDP {
                return Err(DropReason::Icmp);
            }
            let Some(fixed) = h.first_chunk::<40>() else {
                return Err(MALFORMED);
            };
            let (src, dst) = addrs_v6(fixed);
            Ok(Tuple {
                src: dst,
                dst: src,
                sport: u16::from_be_bytes([h[42], h[43]]),
                dport: u16::from_be_bytes([h[40], h[41]]),
                proto,
                family: Family::V6,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(classify(Family::V4, 8, 0), IcmpKind::Echo);
        assert_eq!(classify(Family::V4, 128, 0), IcmpKind::Other);
        assert_eq!(classify(Family::V4, 3, 4), IcmpKind::TooBig);
        assert_eq!(classify(Family::V4, 3, 3), IcmpKind::Other);
        assert_eq!(classify(Family::V6, 128, 0), IcmpKind::Echo);
        assert_eq!(classify(Family::V6, 2, 0), IcmpKind::TooBig);
        assert_eq!(classify(Family::V6, 135, 0), IcmpKind::NeighbourDiscovery);
        assert_eq!(classify(Family::V4, 135, 0), IcmpKind::Other);
        assert_eq!(classify(Family::V6, 1, 4), IcmpKind::Other);
    }
}
