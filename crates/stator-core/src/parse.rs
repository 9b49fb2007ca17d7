//! docs/forwarding.md §1–§3: from a frame to "VIP traffic of this shape", in the order the page
//! gives, which matters: the destination decides first whether the packet is ours (so the
//! node's own traffic is passed untouched whatever it looks like), validation comes after.
//!
//! Written directly on the bytes with one bounds check per header rather than through
//! `stator-wire`'s views: the views validate what a well-formed packet must satisfy, while this
//! must reproduce exactly the XDP program's checks and their order, and nothing else (no TCP
//! data-offset check, a zero IPv6 payload length refused whatever the next header, …).

use stator_abi::{DropReason, Family, STATOR_MAX_IPV6_EXT_HDRS};

use crate::compiled::{CompiledSnapshot, IPPROTO_TCP, IPPROTO_UDP};
use crate::flow::v4;

/// Ethernet header length, untagged.
pub(crate) const ETH_LEN: usize = 14;
const ETH_P_8021Q: u16 = 0x8100;
pub(crate) const ETH_P_IP: u16 = 0x0800;
pub(crate) const ETH_P_IPV6: u16 = 0x86dd;

pub(crate) const IPPROTO_ICMP: u8 = 1;
pub(crate) const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_AH: u8 = 51;
const IPPROTO_DSTOPTS: u8 = 60;

/// How processing stopped before a VIP decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Not IP: pass, count `non_ip`.
    NonIp,
    /// Not VIP traffic: pass, count `non_vip`.
    NonVip,
    /// Drop for this reason.
    Drop(DropReason),
}

/// A VIP-addressed IP packet that passed §2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ip {
    pub family: Family,
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the upper-layer header.
    pub l4: usize,
    /// Where the IP packet ends (Ethernet padding may follow).
    pub ip_end: usize,
    /// IPv4 protocol / IPv6 upper-layer next header.
    pub proto: u8,
    /// VIP-address table flags of the destination.
    pub vaddr: u32,
    /// Source address as a big-endian number of its flow-key field (IPv4 in the top 32 bits,
    /// see [`crate::flow::v4`]).
    pub src: u128,
    /// Destination address, likewise.
    pub dst: u128,
}

/// The upper layer of a VIP-addressed packet (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum L4 {
    /// TCP or UDP.
    Ports {
        sport: u16,
        dport: u16,
        /// TCP with SYN set and ACK clear.
        syn: bool,
    },
    /// ICMP (IPv4) or ICMPv6 (IPv6) with its 8-byte header present.
    Icmp { ty: u8, code: u8 },
}

#[inline]
fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

/// §1 and §2: layer 2, the VIP-address check, and IP validation.
#[inline]
pub(crate) fn parse_ip(data: &[u8], snap: &CompiledSnapshot) -> Result<Ip, Stop> {
    let Some(eth) = data.first_chunk::<ETH_LEN>() else {
        return Err(Stop::NonIp);
    };
    let mut ethertype = be16([eth[12], eth[13]]);
    let mut l3 = ETH_LEN;
    if ethertype == ETH_P_8021Q {
        let Some(tag) = data.get(14..18) else {
            return Err(Stop::NonIp);
        };
        ethertype = be16([tag[2], tag[3]]);
        l3 = 18;
    }
    match ethertype {
        ETH_P_IP => ipv4(data, l3, snap),
        ETH_P_IPV6 => ipv6(data, l3, snap),
        _ => Err(Stop::NonIp),
    }
}

#[inline]
fn ipv4(data: &[u8], l3: usize, snap: &CompiledSnapshot) -> Result<Ip, Stop> {
    const MALFORMED: Stop = Stop::Drop(DropReason::MalformedL3);
    let len = data.len();
    let Some(h) = data.get(l3..).and_then(<[u8]>::first_chunk::<20>) else {
        return Err(MALFORMED);
    };
    let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
    let Some(vaddr) = snap.vaddr_v4(dst) else {
        return Err(Stop::NonVip);
    };
    let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
    let hlen = usize::from(h[0] & 0x0f) * 4;
    let tot_len = usize::from(be16([h[2], h[3]]));
    if h[0] >> 4 != 4 || hlen < 20 || l3 + hlen > len || hlen > tot_len || l3 + tot_len > len {
        return Err(MALFORMED);
    }
    // MF (0x2000) or a fragment offset (0x1fff); DF and the reserved bit are ignored.
    if be16([h[6], h[7]]) & 0x3fff != 0 {
        return Err(Stop::Drop(DropReason::Fragment));
    }
    Ok(Ip {
        family: Family::V4,
        l3,
        l4: l3 + hlen,
        ip_end: l3 + tot_len,
        proto: h[9],
        vaddr,
        src: v4(src),
        dst: v4(dst),
    })
}

/// Source and destination of an IPv6 header, as big-endian numbers.
#[inline]
pub(crate) fn addrs_v6(h: &[u8; 40]) -> (u128, u128) {
    let mut a = [0u8; 16];
    a.copy_from_slice(&h[8..24]);
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[24..40]);
    (u128::from_be_bytes(a), u128::from_be_bytes(b))
}

#[inline]
fn is_ext_header(nh: u8) -> bool {
    matches!(
        nh,
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_FRAGMENT | IPPROTO_AH | IPPROTO_DSTOPTS
    )
}

#[inline]
fn ipv6(data: &[u8], l3: usize, snap: &CompiledSnapshot) -> Result<Ip, Stop> {
    const MALFORMED: Stop = Stop::Drop(DropReason::MalformedL3);
    let len = data.len();
    let Some(h) = data.get(l3..).and_then(<[u8]>::first_chunk::<40>) else {
        return Err(MALFORMED);
    };
    let (src, dst) = addrs_v6(h);
    let Some(vaddr) = snap.vaddr_v6(dst) else {
        return Err(Stop::NonVip);
    };
    let payload_len = usize::from(be16([h[4], h[5]]));
    if h[0] >> 4 != 6 || payload_len == 0 || l3 + 40 + payload_len > len {
        return Err(MALFORMED);
    }
    let ip_end = l3 + 40 + payload_len;
    let mut next = h[6];
    let mut off = l3 + 40;
    for _ in 0..STATOR_MAX_IPV6_EXT_HDRS {
        if !is_ext_header(next) {
            break;
        }
        // The first two bytes (next header, length) must lie within the packet...
        let Some(e) = data.get(off..ip_end).and_then(<[u8]>::first_chunk::<2>) else {
            return Err(MALFORMED);
        };
        let hlen = match next {
            IPPROTO_AH => (usize::from(e[1]) + 2) * 4,
            IPPROTO_FRAGMENT => 8,
            _ => (usize::from(e[1]) + 1) * 8,
        };
        // ...then all of it.
        if off + hlen > ip_end {
            return Err(MALFORMED);
        }
        if next == IPPROTO_FRAGMENT {
            let Some(f) = data.get(off + 2..off + 4) else {
                return Err(MALFORMED);
            };
            // Offset (13 bits) | reserved (2) | M (1): offset != 0 or M set is a fragment; an
            // atomic fragment (both clear, RFC 6946) is walked over.
            if be16([f[0], f[1]]) & 0xfff9 != 0 {
                return Err(Stop::Drop(DropReason::Fragment));
            }
        }
        next = e[0];
        off += hlen;
    }
    if is_ext_header(next) {
        return Err(Stop::Drop(DropReason::Ipv6ExtLimit));
    }
    Ok(Ip {
        family: Family::V6,
        l3,
        l4: off,
        ip_end,
        proto: next,
        vaddr,
        src,
        dst,
    })
}

/// §3 (first half) and §6's length rule: the upper layer of a VIP-addressed packet.
#[inline]
pub(crate) fn parse_l4(data: &[u8], ip: &Ip) -> Result<L4, Stop> {
    const MALFORMED: Stop = Stop::Drop(DropReason::MalformedL4);
    let l4 = data.get(ip.l4..ip.ip_end).unwrap_or(&[]);
    let icmp = match ip.family {
        Family::V4 => IPPROTO_ICMP,
        Family::V6 => IPPROTO_ICMPV6,
    };
    match ip.proto {
        IPPROTO_TCP => {
            let Some(t) = l4.first_chunk::<20>() else {
                return Err(MALFORMED);
            };
            let flags = t[13];
            Ok(L4::Ports {
                sport: be16([t[0], t[1]]),
                dport: be16([t[2], t[3]]),
                syn: flags & 0x02 != 0 && flags & 0x10 == 0,
            })
        }
        IPPROTO_UDP => {
            let Some(u) = l4.first_chunk::<8>() else {
                return Err(MALFORMED);
            };
            Ok(L4::Ports {
                sport: be16([u[0], u[1]]),
                dport: be16([u[2], u[3]]),
                syn: false,
            })
        }
        p if p == icmp => {
            let Some(i) = l4.first_chunk::<8>() else {
                return Err(MALFORMED);
            };
            Ok(L4::Icmp {
                ty: i[0],
                code: i[1],
            })
        }
        _ => Err(Stop::NonVip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{NodeParams, Proto, Snapshot, Vip, VipFlags, VipId, VipKey};
    use stator_testkit::{Ext, Packet, tcp_flags};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::sync::Arc;

    const VIP4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
    const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);

    fn snap() -> CompiledSnapshot {
        let mut s = Snapshot {
            node: NodeParams::default(),
            ..Snapshot::default()
        };
        for (i, addr) in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)].into_iter().enumerate() {
            s.vips.insert(
                VipKey {
                    addr,
                    port: 80,
                    proto: Proto::Tcp,
                },
                Vip {
                    id: VipId(i as u32),
                    flags: VipFlags::default(),
                    table: Arc::from(Vec::new()),
                },
            );
        }
        CompiledSnapshot::new(&crate::ValidSnapshot::new_lenient(s).unwrap())
    }

    fn client4() -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))
    }

    fn client6() -> IpAddr {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1))
    }

    #[test]
    fn ipv4_offsets_with_vlan_and_options() {
        let mut p = Packet::tcp(client4(), 1000, IpAddr::V4(VIP4), 80, tcp_flags::SYN);
        p.vlan = Some(7);
        p.ipv4_options = vec![1; 8];
        p.padding = 5;
        let f = p.frame();
        let ip = parse_ip(&f, &snap()).unwrap();
        assert_eq!((ip.l3, ip.l4, ip.ip_end), (18, 46, 66));
        assert_eq!(ip.proto, 6);
        assert_eq!(
            parse_l4(&f, &ip),
            Ok(L4::Ports {
                sport: 1000,
                dport: 80,
                syn: true
            })
        );
    }

    #[test]
    fn ipv6_walks_extensions_and_atomic_fragments() {
        let mut p = Packet::tcp(client6(), 1000, IpAddr::V6(VIP6), 80, tcp_flags::ACK);
        p.ext = vec![
            Ext::HopByHop(0),
            Ext::Fragment {
                offset: 0,
                more: false,
                id: 1,
            },
            Ext::Ah(2),
            Ext::DstOpts(1),
        ];
        let f = p.frame();
        let ip = parse_ip(&f, &snap()).unwrap();
        assert_eq!(ip.l4, 14 + 40 + 8 + 8 + 16 + 16);
        p.ext.push(Ext::Routing(0));
        assert_eq!(
            parse_ip(&p.frame(), &snap()),
            Err(Stop::Drop(DropReason::Ipv6ExtLimit))
        );
        p.ext = vec![Ext::Fragment {
            offset: 0,
            more: true,
            id: 1,
        }];
        assert_eq!(
            parse_ip(&p.frame(), &snap()),
            Err(Stop::Drop(DropReason::Fragment))
        );
    }

    #[test]
    fn not_ours_is_decided_before_validation() {
        let mut p = Packet::tcp(client4(), 1, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99)), 80, 0);
        let mut f = p.frame();
        f[14] = 0x4f; // IHL 15 > total length: malformed, but not ours
        assert_eq!(parse_ip(&f, &snap()), Err(Stop::NonVip));
        p.dst = IpAddr::V4(VIP4);
        let mut f = p.frame();
        f[14] = 0x4f;
        assert_eq!(
            parse_ip(&f, &snap()),
            Err(Stop::Drop(DropReason::MalformedL3))
        );
        assert_eq!(parse_ip(&f[..13], &snap()), Err(Stop::NonIp));
        assert_eq!(
            parse_ip(&f[..33], &snap()),
            Err(Stop::Drop(DropReason::MalformedL3))
        );
    }
}
