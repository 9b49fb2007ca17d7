//! docs/forwarding.md §1–§3: from a frame to "VIP traffic of this shape", in the order the page
//! gives, which matters: the destination decides first whether the packet is ours (so the
//! node's own traffic is passed untouched whatever it looks like), validation comes after.
//!
//! Written directly on the bytes with one bounds check per header rather than through
//! `stator-wire`'s views: the views validate what a well-formed packet must satisfy, while this
//! must reproduce exactly the XDP program's checks and their order, and nothing else (no TCP
//! data-offset check, a zero IPv6 payload length refused whatever the next header, …).

use stator_abi::{
    DropReason, Family, STATOR_MAX_IPV6_EXT_HDRS, STATOR_VADDR_F_TCP_ANY, STATOR_VADDR_F_TCP_PORTS,
    STATOR_VADDR_F_UDP_ANY, STATOR_VADDR_F_UDP_PORTS,
};

use crate::compiled::{CompiledSnapshot, IPPROTO_TCP, IPPROTO_UDP};
use crate::flow::v4;

/// Ethernet header length, untagged.
pub(crate) const ETH_LEN: usize = 14;
const ETH_P_8021Q: u16 = 0x8100;
pub(crate) const ETH_P_IP: u16 = 0x0800;
pub(crate) const ETH_P_IPV6: u16 = 0x86dd;

pub(crate) const IPPROTO_ICMP: u8 = 1;
pub(crate) const IPPROTO_ICMPV6: u8 = 58;
pub(crate) const IPPROTO_GRE: u8 = 47;
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
    /// VIP traffic while the controller's heartbeat is stale (§3.2): pass, count `stale_pass`.
    Stale,
    /// Drop for this reason.
    Drop(DropReason),
}

/// A fragment (docs/forwarding.md §2, §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frag {
    /// IPv4's 16-bit identification (zero-extended) or IPv6's 32-bit one.
    pub id: u32,
    /// IPv4 protocol / the IPv6 fragment header's next header.
    pub proto: u8,
    /// Offset 0: the fragment with the L4 header.
    pub first: bool,
}

/// The VIP-address flags that say an address has a VIP of some protocol.
const VIP_FLAGS: u32 = STATOR_VADDR_F_TCP_PORTS
    | STATOR_VADDR_F_TCP_ANY
    | STATOR_VADDR_F_UDP_PORTS
    | STATOR_VADDR_F_UDP_ANY;

/// An IP packet addressed to us that passed §2.
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
    /// VIP-address table flags of the destination; `None` when it is ours only by its class
    /// (docs/forwarding.md §3.1).
    pub vaddr: Option<u32>,
    /// The fragment, if it is one.
    pub frag: Option<Frag>,
    /// Source address as a big-endian number of its flow-key field (IPv4 in the top 32 bits,
    /// see [`crate::flow::v4`]).
    pub src: u128,
    /// Destination address, likewise.
    pub dst: u128,
}

impl Ip {
    /// The flow of this packet with these ports (its own protocol).
    pub(crate) fn tuple(&self, sport: u16, dport: u16) -> crate::flow::Tuple {
        crate::flow::Tuple {
            src: self.src,
            dst: self.dst,
            sport,
            dport,
            proto: self.proto,
            family: self.family,
        }
    }
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

/// §1: the ethertype behind at most one 802.1Q tag, and the offset of the IP header.
#[inline]
pub(crate) fn parse_eth(data: &[u8]) -> Result<(u16, usize), Stop> {
    let Some(eth) = data.first_chunk::<ETH_LEN>() else {
        return Err(Stop::NonIp);
    };
    let ethertype = be16([eth[12], eth[13]]);
    if ethertype == ETH_P_8021Q {
        let Some(tag) = data.get(14..18) else {
            return Err(Stop::NonIp);
        };
        return Ok((be16([tag[2], tag[3]]), 18));
    }
    Ok((ethertype, ETH_LEN))
}

/// §2: the IP header at `l3` of the given ethertype — "ours?", then validation.
#[inline]
pub(crate) fn parse_l3(
    data: &[u8],
    l3: usize,
    ethertype: u16,
    snap: &CompiledSnapshot,
) -> Result<Ip, Stop> {
    match ethertype {
        ETH_P_IP => ipv4(data, l3, snap),
        ETH_P_IPV6 => ipv6(data, l3, snap),
        _ => Err(Stop::NonIp),
    }
}

/// §2 "Ours": the destination's VIP-address flags, or `None` for an address that is ours only
/// by its class; `Err(NonVip)` when it is not ours.
#[inline]
fn ours(
    snap: &CompiledSnapshot,
    family: Family,
    vaddr: Option<u32>,
    dst: u128,
) -> Result<Option<u32>, Stop> {
    match vaddr {
        Some(f) => Ok(Some(f)),
        None if snap.has_groups() && snap.class_of(family, dst).is_some() => Ok(None),
        None => Err(Stop::NonVip),
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
    let vaddr = ours(snap, Family::V4, snap.vaddr_v4(dst), v4(dst))?;
    let frag = be16([h[6], h[7]]);
    // The node's own address: only unfragmented GRE may be a redirect; the rest is the node's.
    if vaddr.is_some_and(|f| f & VIP_FLAGS == 0) && (h[9] != IPPROTO_GRE || frag & 0x3fff != 0) {
        return Err(Stop::NonVip);
    }
    let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
    let hlen = usize::from(h[0] & 0x0f) * 4;
    let tot_len = usize::from(be16([h[2], h[3]]));
    if h[0] >> 4 != 4 || hlen < 20 || l3 + hlen > len || hlen > tot_len || l3 + tot_len > len {
        return Err(MALFORMED);
    }
    // MF (0x2000) or a fragment offset (0x1fff); DF and the reserved bit are ignored.
    let frag = (frag & 0x3fff != 0).then(|| Frag {
        id: u32::from(be16([h[4], h[5]])),
        proto: h[9],
        first: frag & 0x1fff == 0,
    });
    Ok(Ip {
        family: Family::V4,
        l3,
        l4: l3 + hlen,
        ip_end: l3 + tot_len,
        proto: h[9],
        vaddr,
        frag,
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
    let vaddr = ours(snap, Family::V6, snap.vaddr_v6(dst), dst)?;
    if vaddr.is_some_and(|f| f & VIP_FLAGS == 0) && h[6] != IPPROTO_GRE {
        return Err(Stop::NonVip);
    }
    let payload_len = usize::from(be16([h[4], h[5]]));
    if h[0] >> 4 != 6 || payload_len == 0 || l3 + 40 + payload_len > len {
        return Err(MALFORMED);
    }
    let ip_end = l3 + 40 + payload_len;
    let mut next = h[6];
    let mut off = l3 + 40;
    let mut frag = None;
    let mut ended = false;
    for _ in 0..STATOR_MAX_IPV6_EXT_HDRS {
        if !is_ext_header(next) {
            ended = true;
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
            let Some(f) = data.get(off + 2..off + 8) else {
                return Err(MALFORMED);
            };
            // Offset (13 bits) | reserved (2) | M (1). An offset: a non-first fragment, the
            // walk ends after it; M alone: the first fragment, the walk goes on; both clear:
            // an atomic fragment (RFC 6946), walked over.
            let word = be16([f[0], f[1]]);
            let id = u32::from_be_bytes([f[2], f[3], f[4], f[5]]);
            if word & 0xfff8 != 0 {
                frag = Some(Frag {
                    id,
                    proto: e[0],
                    first: false,
                });
                next = e[0];
                off += hlen;
                ended = true;
                break;
            }
            if word & 1 != 0 {
                frag = Some(Frag {
                    id,
                    proto: e[0],
                    first: true,
                });
            }
        }
        next = e[0];
        off += hlen;
    }
    if !ended && is_ext_header(next) {
        return Err(Stop::Drop(DropReason::Ipv6ExtLimit));
    }
    Ok(Ip {
        family: Family::V6,
        l3,
        l4: off,
        ip_end,
        proto: next,
        vaddr,
        frag,
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
                Vip::new(VipId(i as u32), VipFlags::default(), Arc::from(Vec::new())),
            );
        }
        CompiledSnapshot::new(&crate::ValidSnapshot::new_lenient(s).unwrap())
    }

    fn parse_ip(data: &[u8], snap: &CompiledSnapshot) -> Result<Ip, Stop> {
        let (ethertype, l3) = parse_eth(data)?;
        parse_l3(data, l3, ethertype, snap)
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
        // a first fragment: the walk goes on to TCP
        p.ext = vec![Ext::Fragment {
            offset: 0,
            more: true,
            id: 0x01020304,
        }];
        let ip = parse_ip(&p.frame(), &snap()).unwrap();
        let first = Frag {
            id: 0x01020304,
            proto: 6,
            first: true,
        };
        assert_eq!((ip.frag, ip.proto, ip.l4), (Some(first), 6, 14 + 48));
        // a later one: the walk ends after it, whatever follows
        p.ext = vec![
            Ext::Fragment {
                offset: 9,
                more: false,
                id: 7,
            },
            Ext::DstOpts(0),
            Ext::DstOpts(0),
            Ext::DstOpts(0),
            Ext::DstOpts(0),
        ];
        let ip = parse_ip(&p.frame(), &snap()).unwrap();
        let later = Frag {
            id: 7,
            proto: 60,
            first: false,
        };
        assert_eq!((ip.frag, ip.proto, ip.l4), (Some(later), 60, 14 + 48));
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
