//! docs/forwarding.md §5 steps 1–5: the outer headers toward a backend, written in place in
//! front of the untouched inner packet.
//!
//! ```text
//! received: [ Ethernet (+ VLAN tag) | inner IP packet (l3 .. ip_end) | padding ]
//! sent:     [ Ethernet | outer IPv4/IPv6 | GRE / UDP+GUE / — | inner IP packet | padding ]
//!             14         20 / 40          4 / 12 / 0
//! ```
//!
//! The frame grows at the head by `14 + outer + E − l3` bytes; the inner packet and the padding
//! do not move in the buffer. Nothing is written before the FIB has answered, so a drop leaves
//! the frame as it was.

use stator_abi::{DropReason, Encap, Family, STATOR_SC_MAGIC};

use crate::compiled::{Addr, CompiledNode, CompiledReal};
use crate::fib::{FibError, FibQuery, NextHop, NextHops};
use crate::packet::PacketBuf;
use crate::parse::{ETH_LEN, ETH_P_IP, ETH_P_IPV6, Ip};

const IPPROTO_IPIP: u8 = 4;
const IPPROTO_IPV6: u8 = 41;
const IPPROTO_GRE: u8 = 47;
const IPPROTO_UDP: u8 = 17;

/// What kind of tunnel packet §5 builds besides the real's encapsulation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tunnel {
    /// A redirect between Stator nodes (§10.1; the real is the target, GRE with recursion
    /// control 1).
    pub redirect: bool,
    /// A second chance naming this previous backend in GUE private data (§12.3; only toward a
    /// GUE real of the same family, which §12.2 checked).
    pub sc: Option<Addr>,
}

/// Steps 1–5 of §5: source, headers, next hop, head growth, and the rewrite. Returns the egress
/// interface.
#[allow(clippy::too_many_arguments)] // §5's inputs
#[inline]
pub(crate) fn encapsulate<B: PacketBuf + ?Sized, N: NextHops + ?Sized>(
    node: &CompiledNode,
    real: &CompiledReal,
    ip: &Ip,
    hash: u32,
    ingress_ifindex: u32,
    fib: &N,
    frame: &mut B,
    tunnel: Tunnel,
) -> Result<u32, DropReason> {
    let redirect = tunnel.redirect;
    let sc = tunnel.sc.filter(|_| !redirect && real.encap == Encap::Gue);
    let inner_v6 = ip.family == Family::V6;
    let inner_len = ip.ip_end - ip.l3;
    // Step 1: the node's source address of the backend's family.
    let (src, outer_len) = match real.addr {
        Addr::V4(_) => (node.src_v4.map(Addr::V4), 20),
        Addr::V6(_) => (node.src_v6.map(Addr::V6), 40),
    };
    let src = src.ok_or(DropReason::NoSource)?;
    // Step 2: the tunnel header and the outer protocol.
    let (encap_len, proto) = match real.encap {
        Encap::Gre => (4, IPPROTO_GRE),
        Encap::Ipip if inner_v6 => (0, IPPROTO_IPV6),
        Encap::Ipip => (0, IPPROTO_IPIP),
        Encap::Gue => match sc {
            None => (12, IPPROTO_UDP),
            Some(Addr::V4(_)) => (12 + 8, IPPROTO_UDP),
            Some(Addr::V6(_)) => (12 + 20, IPPROTO_UDP),
        },
    };
    let ip_len = outer_len + encap_len + inner_len;
    // An outer packet over 65535 bytes cannot be encoded (nor fit any MTU). Unreachable in XDP,
    // whose frames are at most a page (docs/forwarding.md, open question on §5).
    let Ok(tot_len) = u16::try_from(ip_len) else {
        return Err(DropReason::Mtu);
    };
    // The inner header fields the outer one copies, read before anything is written.
    let data = frame.data();
    let (tos, df) = match (ip.family, data.get(ip.l3..ip.l3 + 8)) {
        (Family::V4, Some(h)) => (h[1], h[6] & 0x40 != 0),
        (Family::V6, Some(h)) => ((h[0] << 4) | (h[1] >> 4), true),
        // §2 checked that the fixed header is there.
        (_, None) => return Err(DropReason::MalformedL3),
    };
    // Step 4: the next hop, before the frame is touched.
    let hop = fib
        .next_hop(&FibQuery {
            src: src.ip(),
            dst: real.addr.ip(),
            ingress_ifindex,
            l4_protocol: proto,
            tot_len,
        })
        .map_err(FibError::drop_reason)?;
    if ip_len > hop.mtu as usize {
        return Err(DropReason::Mtu);
    }
    // Step 5: grow the head (or shrink it, for the inner packet of a redirect whose received
    // headers were longer than the new ones).
    let hdr_len = ETH_LEN + outer_len + encap_len;
    if hdr_len >= ip.l3 {
        frame
            .grow_head(hdr_len - ip.l3)
            .map_err(|_| DropReason::Adjust)?;
    } else {
        frame
            .shrink_head(ip.l3 - hdr_len)
            .map_err(|_| DropReason::Adjust)?;
    }
    let Some(out) = frame.data_mut().get_mut(..hdr_len) else {
        // The frame was at least l3 long, so after growing it is at least hdr_len long.
        return Err(DropReason::Adjust);
    };
    let outer = Outer {
        src,
        dst: real.addr,
        proto,
        tos,
        df,
        tot_len,
        ttl: node.outer_ttl,
        hash,
    };
    write_headers(
        out,
        &hop,
        &outer,
        real.encap,
        inner_v6,
        inner_len,
        node.gue_port,
        Tunnel { redirect, sc },
    );
    Ok(hop.ifindex)
}

/// The outer IP header's fields.
struct Outer {
    src: Addr,
    dst: Addr,
    proto: u8,
    tos: u8,
    df: bool,
    /// The outer IP packet's length (IPv6: 40 + payload).
    tot_len: u16,
    ttl: u8,
    hash: u32,
}

/// The outer IPv4 header's checksum, summed from the field values rather than read back from
/// the bytes just written (a read of fresh narrow stores stalls store forwarding). The same
/// one's-complement sum as over the 20 bytes with the checksum field zero.
#[inline]
fn ipv4_checksum(o: &Outer, src: [u8; 4], dst: [u8; 4]) -> u16 {
    let word = |hi: u8, lo: u8| u32::from(u16::from_be_bytes([hi, lo]));
    let sum = word(0x45, o.tos)
        + u32::from(o.tot_len)
        + if o.df { 0x4000 } else { 0 }
        + word(o.ttl, o.proto)
        + word(src[0], src[1])
        + word(src[2], src[3])
        + word(dst[0], dst[1])
        + word(dst[2], dst[3]);
    // At most 8 × 0xffff: two folds suffice.
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Writes Ethernet, outer IP and tunnel headers into `out` (exactly their length, which the
/// caller computed from the same `o` and `encap`; a shorter `out` leaves the rest unwritten).
#[allow(clippy::too_many_arguments)] // the header fields
fn write_headers(
    out: &mut [u8],
    hop: &NextHop,
    o: &Outer,
    encap: Encap,
    inner_v6: bool,
    inner_len: usize,
    gue_port: u16,
    Tunnel { redirect, sc }: Tunnel,
) {
    let Some((eth, rest)) = out.split_first_chunk_mut::<ETH_LEN>() else {
        return;
    };
    eth[0..6].copy_from_slice(&hop.dst_mac);
    eth[6..12].copy_from_slice(&hop.src_mac);
    let tunnel = match (o.src, o.dst) {
        (Addr::V4(src), Addr::V4(dst)) => {
            eth[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
            let Some((h, tunnel)) = rest.split_first_chunk_mut::<20>() else {
                return;
            };
            let [len_hi, len_lo] = o.tot_len.to_be_bytes();
            let df = if o.df { 0x40 } else { 0 };
            let [c_hi, c_lo] = ipv4_checksum(o, src, dst).to_be_bytes();
            *h = [
                0x45, o.tos, len_hi, len_lo, 0, 0, df, 0, o.ttl, o.proto, c_hi, c_lo, src[0],
                src[1], src[2], src[3], dst[0], dst[1], dst[2], dst[3],
            ];
            tunnel
        }
        (Addr::V6(src), Addr::V6(dst)) => {
            eth[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
            let Some((h, tunnel)) = rest.split_first_chunk_mut::<40>() else {
                return;
            };
            let word = (6u32 << 28) | (u32::from(o.tos) << 20) | (o.hash & 0x000f_ffff);
            h[0..4].copy_from_slice(&word.to_be_bytes());
            h[4..6].copy_from_slice(&o.tot_len.saturating_sub(40).to_be_bytes());
            h[6] = o.proto;
            h[7] = o.ttl;
            h[8..24].copy_from_slice(&src);
            h[24..40].copy_from_slice(&dst);
            tunnel
        }
        // The source is chosen by the destination's family.
        _ => return,
    };
    match encap {
        Encap::Gre => {
            if let Some(g) = tunnel.first_chunk_mut::<4>() {
                let [hi, lo] = if inner_v6 { ETH_P_IPV6 } else { ETH_P_IP }.to_be_bytes();
                // RFC 1701 recursion control 1 marks a redirect between Stator nodes (§10).
                *g = [u8::from(redirect), 0, hi, lo];
            }
        }
        Encap::Ipip => {}
        Encap::Gue => {
            let Some((g, private)) = tunnel.split_first_chunk_mut::<12>() else {
                return;
            };
            // §12.3: "SC", the family, hop 0, the address — Hlen 2 or 5 words.
            let (hlen, family, addr): (u8, u8, &[u8]) = match &sc {
                None => (0, 0, &[]),
                Some(Addr::V4(a)) => (2, 4, a),
                Some(Addr::V6(a)) => (5, 6, a),
            };
            let [sp_hi, sp_lo] = (0xc000 | (o.hash & 0x3fff) as u16).to_be_bytes();
            let [dp_hi, dp_lo] = gue_port.to_be_bytes();
            // Fits: the outer length (inner_len + 32 or more) fitted 16 bits.
            let ulen = 8 + 4 + 4 * usize::from(hlen) + inner_len;
            let [ul_hi, ul_lo] = (ulen as u16).to_be_bytes();
            let pp = if inner_v6 { IPPROTO_IPV6 } else { IPPROTO_IPIP };
            *g = [
                sp_hi, sp_lo, dp_hi, dp_lo, ul_hi, ul_lo, 0, 0, hlen, pp, 0, 0,
            ];
            if hlen != 0
                && let Some(p) = private.get_mut(..4 + addr.len())
            {
                let [m_hi, m_lo] = (STATOR_SC_MAGIC as u16).to_be_bytes();
                p[..4].copy_from_slice(&[m_hi, m_lo, family, 0]);
                p[4..].copy_from_slice(addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_wire::checksum;

    #[test]
    fn field_checksum_equals_the_byte_checksum() {
        for (tos, tot_len, df, ttl, proto) in [
            (0u8, 64u16, true, 64u8, 47u8),
            (0xff, 0xffff, false, 0xff, 0xff),
            (0, 20, false, 0, 0),
            (0xb9, 1500, true, 1, 17),
        ] {
            let o = Outer {
                src: Addr::V4([10, 9, 9, 9]),
                dst: Addr::V4([255, 255, 255, 255]),
                proto,
                tos,
                df,
                tot_len,
                ttl,
                hash: 0,
            };
            let (src, dst) = ([10, 9, 9, 9], [255, 255, 255, 255]);
            let [l0, l1] = tot_len.to_be_bytes();
            let h = [
                0x45,
                tos,
                l0,
                l1,
                0,
                0,
                if df { 0x40 } else { 0 },
                0,
                ttl,
                proto,
                0,
                0,
                src[0],
                src[1],
                src[2],
                src[3],
                dst[0],
                dst[1],
                dst[2],
                dst[3],
            ];
            assert_eq!(ipv4_checksum(&o, src, dst), checksum::checksum(&h));
        }
    }
}
