//! Building the outer headers that carry an untouched inner IP packet to a backend: IP-in-IP
//! (IPIP, 6in4, 4in6, IP6IP6), GRE, and GUE over UDP.
//!
//! The layout is the one a forwarder gets after growing headroom in front of the received packet
//! (`bpf_xdp_adjust_head`, or an AF_XDP frame's headroom):
//!
//! ```text
//! packet: [ outer IPv4/IPv6 | tunnel header (GRE, UDP+GUE, nothing) | inner IP packet ...... ]
//!           <------------- Encap::header_len() ------------------->   <- already in place ->
//! ```
//!
//! [`Encap::emit`] fills the first [`Encap::header_len`] bytes of `packet` and leaves the rest,
//! the inner packet, alone; the outer Ethernet header goes in front with
//! [`EthernetRepr`](crate::ethernet::EthernetRepr). `packet` must end where the inner packet
//! ends: strip Ethernet padding first (the IP length fields say where), or the outer lengths
//! will count the padding.
//!
//! The output is exact and deterministic, so that a C/XDP implementation can be compared with
//! this one byte for byte. Every choice:
//! - the inner IP version (first nibble of the inner packet) picks the protocol numbers: outer IP
//!   protocol 4 (IPv4 inner) or 41 (IPv6 inner) for IP-in-IP and in the GUE header; GRE protocol
//!   type `0x0800` or `0x86dd`; GRE and GUE use outer protocol 47 and 17;
//! - outer IPv4: version 4, IHL 5 (no options), DSCP/ECN byte = [`Ipv4Outer::tos`], total length
//!   = 20 + tunnel header + inner length, identification 0 (RFC 6864: the identification of an
//!   atomic datagram has no meaning, and 0 keeps the output a pure function of the input), DF =
//!   [`Ipv4Outer::dont_frag`] (set by default: the encapsulated packet must not be fragmented on
//!   the way, the backend would have to reassemble), MF clear, offset 0, TTL = [`Ipv4Outer::ttl`]
//!   (64 by default), header checksum computed;
//! - outer IPv6: version 6, traffic class = [`Ipv6Outer::traffic_class`], flow label =
//!   [`Ipv6Outer::flow_label`] (0 by default; RFC 6438 suggests a hash of the inner flow, which
//!   the caller has), payload length = tunnel header + inner length, hop limit =
//!   [`Ipv6Outer::hop_limit`] (64 by default), no extension headers;
//! - GRE: version 0, the optional fields [`GreTunnel`] asks for (none by default), Reserved1 zero,
//!   the recursion-control value given, the checksum (if asked) over GRE header and inner packet;
//! - GUE: UDP source port = [`GueTunnel::src_port`] (the caller puts flow entropy there, as the
//!   GUE draft asks), destination port [`GueTunnel::dst_port`] ([`gue::PORT`] by default), UDP
//!   length = 8 + GUE header + inner length, UDP checksum zero unless
//!   [`GueTunnel::udp_checksum`] (zero is always legal over IPv4, and over IPv6 for tunnels under
//!   RFC 6935/6936; a computed checksum covers the whole inner packet and costs accordingly); a
//!   variant-0 GUE header (version 0, C clear, Hlen 0, Proto = inner protocol, Flags 0) unless
//!   [`GueTunnel::direct`] asks for variant 1, which has no GUE header;
//! - DSCP and ECN are the caller's: [`inner_traffic_class`] reads the inner packet's byte, to copy
//!   it outward (RFC 6040's "normal mode" copies ECN; copying DSCP is RFC 2983's uniform model).

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::ethernet::EtherType;
use crate::gre::{self, GrePacket, GreRepr};
use crate::gue::{self, GuePacket, GueRepr};
use crate::ip::{IpPair, IpProtocol};
use crate::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::udp::{self, UdpPacket, UdpRepr};
use crate::{Error, Result};

/// The TTL or hop limit of outer headers unless the caller says otherwise.
pub const DEFAULT_TTL: u8 = 64;

/// The parameters of an outer IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Outer {
    /// Source: the encapsulating node's address.
    pub src_addr: Ipv4Addr,
    /// Destination: the backend.
    pub dst_addr: Ipv4Addr,
    /// Time to live.
    pub ttl: u8,
    /// The DSCP/ECN byte.
    pub tos: u8,
    /// The "don't fragment" flag.
    pub dont_frag: bool,
}

impl Ipv4Outer {
    /// Defaults: TTL [`DEFAULT_TTL`], DSCP/ECN 0, DF set.
    #[must_use]
    pub const fn new(src_addr: Ipv4Addr, dst_addr: Ipv4Addr) -> Self {
        Self {
            src_addr,
            dst_addr,
            ttl: DEFAULT_TTL,
            tos: 0,
            dont_frag: true,
        }
    }

    /// The header these parameters give for a payload (tunnel header and inner packet) of
    /// `payload_len` bytes carrying `protocol`.
    #[must_use]
    pub const fn repr(&self, protocol: IpProtocol, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src_addr: self.src_addr,
            dst_addr: self.dst_addr,
            protocol,
            payload_len,
            ttl: self.ttl,
            tos: self.tos,
            ident: 0,
            dont_frag: self.dont_frag,
            more_frags: false,
            frag_offset: 0,
        }
    }
}

/// The parameters of an outer IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Outer {
    /// Source: the encapsulating node's address.
    pub src_addr: Ipv6Addr,
    /// Destination: the backend.
    pub dst_addr: Ipv6Addr,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Outer {
    /// Defaults: hop limit [`DEFAULT_TTL`], traffic class 0, flow label 0.
    #[must_use]
    pub const fn new(src_addr: Ipv6Addr, dst_addr: Ipv6Addr) -> Self {
        Self {
            src_addr,
            dst_addr,
            hop_limit: DEFAULT_TTL,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// The header these parameters give for a payload of `payload_len` bytes whose first header
    /// is `next_header`.
    #[must_use]
    pub const fn repr(&self, next_header: IpProtocol, payload_len: usize) -> Ipv6Repr {
        Ipv6Repr {
            src_addr: self.src_addr,
            dst_addr: self.dst_addr,
            next_header,
            payload_len,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
        }
    }
}

/// The outer IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OuterIp {
    /// An outer IPv4 header.
    V4(Ipv4Outer),
    /// An outer IPv6 header.
    V6(Ipv6Outer),
}

impl OuterIp {
    /// The length of the outer IP header: 20 or 40.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        match self {
            OuterIp::V4(_) => ipv4::HEADER_LEN,
            OuterIp::V6(_) => ipv6::HEADER_LEN,
        }
    }

    /// The outer source and destination.
    #[must_use]
    pub const fn addrs(&self) -> IpPair {
        match *self {
            OuterIp::V4(o) => IpPair::V4 {
                src: o.src_addr,
                dst: o.dst_addr,
            },
            OuterIp::V6(o) => IpPair::V6 {
                src: o.src_addr,
                dst: o.dst_addr,
            },
        }
    }
}

/// The GRE header fields an encapsulation chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GreTunnel {
    /// The key, if any.
    pub key: Option<u32>,
    /// The sequence number, if any.
    pub sequence_number: Option<u32>,
    /// Whether to include a checksum (over the GRE header and the whole inner packet).
    pub checksum: bool,
    /// Recursion control, 0 to 7: Maglev marks a fragment redirected to a peer with it.
    pub recursion_control: u8,
}

/// The UDP and GUE header fields an encapsulation chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GueTunnel {
    /// UDP source port: flow entropy, so that ECMP and RSS on the way spread tunnels.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Variant 1 (no GUE header, the inner packet right after UDP) instead of variant 0.
    pub direct: bool,
    /// Compute the UDP checksum instead of sending zero.
    pub udp_checksum: bool,
}

impl GueTunnel {
    /// Defaults: destination port [`gue::PORT`], variant 0, zero UDP checksum.
    #[must_use]
    pub const fn new(src_port: u16) -> Self {
        Self {
            src_port,
            dst_port: gue::PORT,
            direct: false,
            udp_checksum: false,
        }
    }

    const fn header_len(&self) -> usize {
        udp::HEADER_LEN + if self.direct { 0 } else { gue::HEADER_LEN }
    }
}

/// The tunnel header between the outer IP header and the inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tunnel {
    /// IP in IP: nothing between the headers.
    Ipip,
    /// GRE.
    Gre(GreTunnel),
    /// UDP and GUE.
    Gue(GueTunnel),
}

impl Tunnel {
    /// The length of the tunnel header.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        match self {
            Tunnel::Ipip => 0,
            Tunnel::Gre(g) => {
                gre::HEADER_LEN
                    + 4 * (g.checksum as usize
                        + g.key.is_some() as usize
                        + g.sequence_number.is_some() as usize)
            }
            Tunnel::Gue(g) => g.header_len(),
        }
    }
}

/// A complete encapsulation: outer IP header and tunnel header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Encap {
    /// The outer IP header.
    pub outer: OuterIp,
    /// The tunnel header.
    pub tunnel: Tunnel,
}

/// The IP protocol number and EtherType that announce an inner packet, from its version nibble.
///
/// # Errors
/// [`Error::Truncated`] on an empty packet, [`Error::BadVersion`] for a version other than 4 or 6.
pub fn inner_protocol(inner: &[u8]) -> Result<(IpProtocol, EtherType)> {
    match inner.first().map(|b| b >> 4) {
        Some(4) => Ok((IpProtocol::IPV4, EtherType::IPV4)),
        Some(6) => Ok((IpProtocol::IPV6, EtherType::IPV6)),
        Some(_) => Err(Error::BadVersion),
        None => Err(Error::Truncated),
    }
}

/// The DSCP/ECN byte of an inner packet: IPv4's second byte, or IPv6's traffic class.
///
/// # Errors
/// [`Error::Truncated`] if the packet is too short to hold it, [`Error::BadVersion`] for a
/// version other than 4 or 6.
pub fn inner_traffic_class(inner: &[u8]) -> Result<u8> {
    match inner {
        [b0, b1, ..] if b0 >> 4 == 4 => Ok(*b1),
        [b0, b1, ..] if b0 >> 4 == 6 => Ok((b0 << 4) | (b1 >> 4)),
        [b0, ..] if !matches!(b0 >> 4, 4 | 6) => Err(Error::BadVersion),
        _ => Err(Error::Truncated),
    }
}

impl Encap {
    /// The length of everything [`emit`](Self::emit) writes: outer IP and tunnel headers.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        self.outer.header_len() + self.tunnel.header_len()
    }

    /// Writes the outer headers into `packet[..self.header_len()]`, for the inner IP packet that
    /// fills `packet[self.header_len()..]`. See the module documentation for every field's value.
    ///
    /// Everything is validated before anything is written: on error, `packet` is unchanged.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `packet` has no byte after the headers; [`Error::BadVersion`] if
    /// the inner packet is neither IPv4 nor IPv6; [`Error::Unrepresentable`] if an outer length
    /// would exceed 65535, the recursion control 7 or the flow label 20 bits.
    pub fn emit(&self, packet: &mut [u8]) -> Result<()> {
        let header_len = self.header_len();
        let inner = packet.get(header_len..).ok_or(Error::Truncated)?;
        let (inner_proto, inner_ethertype) = inner_protocol(inner)?;
        let ip_len = self.outer.header_len();
        let ip_payload_len = packet.len() - ip_len;
        let outer_proto = match self.tunnel {
            Tunnel::Ipip => inner_proto,
            Tunnel::Gre(g) => {
                if g.recursion_control > gre::MAX_RECURSION_CONTROL {
                    return Err(Error::Unrepresentable);
                }
                IpProtocol::GRE
            }
            Tunnel::Gue(_) => {
                if ip_payload_len > usize::from(u16::MAX) {
                    return Err(Error::Unrepresentable);
                }
                IpProtocol::UDP
            }
        };
        match self.outer {
            OuterIp::V4(_) if packet.len() > usize::from(u16::MAX) => {
                return Err(Error::Unrepresentable);
            }
            OuterIp::V6(o)
                if ip_payload_len > usize::from(u16::MAX)
                    || o.flow_label > ipv6::MAX_FLOW_LABEL =>
            {
                return Err(Error::Unrepresentable);
            }
            _ => {}
        }

        // Validated: no emit below can fail, but their results are still propagated rather than
        // assumed.
        match self.outer {
            OuterIp::V4(o) => o
                .repr(outer_proto, ip_payload_len)
                .emit(&mut Ipv4Packet::new_unchecked(&mut *packet))?,
            OuterIp::V6(o) => o
                .repr(outer_proto, ip_payload_len)
                .emit(&mut Ipv6Packet::new_unchecked(&mut *packet))?,
        }
        let tunnel = &mut packet[ip_len..];
        match self.tunnel {
            Tunnel::Ipip => {}
            Tunnel::Gre(g) => {
                let repr = GreRepr {
                    protocol_type: inner_ethertype,
                    checksum: g.checksum,
                    key: g.key,
                    sequence_number: g.sequence_number,
                    recursion_control: g.recursion_control,
                };
                repr.emit(&mut GrePacket::new_unchecked(tunnel))?;
            }
            Tunnel::Gue(g) => {
                if !g.direct {
                    let gue = &mut tunnel[udp::HEADER_LEN..];
                    GueRepr::data(inner_proto).emit(&mut GuePacket::new_unchecked(gue))?;
                }
                let repr = UdpRepr {
                    src_port: g.src_port,
                    dst_port: g.dst_port,
                    payload_len: ip_payload_len - udp::HEADER_LEN,
                };
                let addrs = self.outer.addrs();
                repr.emit(
                    &mut UdpPacket::new_unchecked(tunnel),
                    g.udp_checksum.then_some(&addrs),
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gue::GueVariant;
    use crate::ipv6ext;

    // A 24-byte inner IPv4/UDP packet: the example header re-totalled, plus 4 payload bytes.
    static INNER_V4: [u8; 24] = [
        0x45, 0x2e, 0x00, 0x18, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x8e, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 0xde, 0xad, 0xbe, 0xef,
    ];

    fn outer_v4() -> Ipv4Outer {
        Ipv4Outer::new(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 1, 7))
    }

    fn outer_v6() -> Ipv6Outer {
        Ipv6Outer::new(
            "2001:db8::1".parse().unwrap(),
            "2001:db8:1::7".parse().unwrap(),
        )
    }

    fn packet(encap: &Encap, inner: &[u8]) -> std::vec::Vec<u8> {
        let mut buf = std::vec![0u8; encap.header_len() + inner.len()];
        buf[encap.header_len()..].copy_from_slice(inner);
        encap.emit(&mut buf).unwrap();
        buf
    }

    #[test]
    fn test_construct_ipip() {
        let encap = Encap {
            outer: OuterIp::V4(outer_v4()),
            tunnel: Tunnel::Ipip,
        };
        let buf = packet(&encap, &INNER_V4);
        // Checksum computed with Python over 45 00 00 2c 00 00 40 00 40 04 0000 0a000001 0a000107.
        let expected: [u8; 20] = [
            0x45, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x04, 0x25, 0xc7, 0x0a, 0x00,
            0x00, 0x01, 0x0a, 0x00, 0x01, 0x07,
        ];
        assert_eq!(buf[..20], expected);
        assert_eq!(buf[20..], INNER_V4);
    }

    #[test]
    fn test_construct_gre_v6_over_v4_keeps_tos() {
        let mut outer = outer_v4();
        outer.tos = inner_traffic_class(&INNER_V4).unwrap();
        let gre = GreTunnel {
            key: Some(42),
            recursion_control: 1,
            checksum: true,
            ..GreTunnel::default()
        };
        let encap = Encap {
            outer: OuterIp::V4(outer),
            tunnel: Tunnel::Gre(gre),
        };
        assert_eq!(encap.header_len(), 20 + 12);
        let buf = packet(&encap, &INNER_V4);
        let ip = Ipv4Packet::new_checked(&buf[..]).unwrap();
        let repr = Ipv4Repr::parse(&ip).unwrap();
        assert_eq!(repr.protocol, IpProtocol::GRE);
        assert_eq!(repr.tos, 0x2e);
        assert_eq!(repr.payload_len, 12 + 24);
        let g = GrePacket::new_checked(ip.payload()).unwrap();
        assert_eq!(
            GreRepr::parse(&g).unwrap(),
            GreRepr {
                protocol_type: EtherType::IPV4,
                checksum: true,
                key: Some(42),
                sequence_number: None,
                recursion_control: 1,
            }
        );
        assert_eq!(g.payload(), INNER_V4);
    }

    #[test]
    fn test_construct_gue_v6() {
        let mut inner = [0u8; 48];
        let inner_repr = Ipv6Repr {
            src_addr: "2001:db8:9::1".parse().unwrap(),
            dst_addr: "2001:db8:a::1".parse().unwrap(),
            next_header: IpProtocol::IPV6_NONXT,
            payload_len: 8,
            hop_limit: 63,
            traffic_class: 0xb9,
            flow_label: 7,
        };
        inner_repr
            .emit(&mut Ipv6Packet::new_unchecked(&mut inner[..]))
            .unwrap();
        let mut outer = outer_v6();
        outer.traffic_class = inner_traffic_class(&inner).unwrap();
        outer.flow_label = 0xabcde;
        let tunnel = GueTunnel {
            udp_checksum: true,
            ..GueTunnel::new(50000)
        };
        let encap = Encap {
            outer: OuterIp::V6(outer),
            tunnel: Tunnel::Gue(tunnel),
        };
        let buf = packet(&encap, &inner);
        let ip = Ipv6Packet::new_checked(&buf[..]).unwrap();
        let ip_repr = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!(ip_repr.traffic_class, 0xb9);
        assert_eq!(ip_repr.flow_label, 0xabcde);
        assert_eq!(ip_repr.next_header, IpProtocol::UDP);
        assert_eq!(ip_repr.payload_len, 8 + 4 + 48);
        let upper = ip.upper_layer().unwrap();
        assert_eq!(
            upper,
            ipv6ext::Ipv6UpperLayer {
                protocol: IpProtocol::UDP,
                offset: 40,
                fragment: None
            }
        );
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((udp.src_port(), udp.dst_port()), (50000, gue::PORT));
        assert!(udp.verify_checksum(&encap.outer.addrs()));
        assert_ne!(udp.checksum(), 0);
        assert_eq!(gue::classify(udp.payload()), Ok(GueVariant::Header));
        let g = GuePacket::new_checked(udp.payload()).unwrap();
        assert_eq!(g.protocol(), IpProtocol::IPV6);
        assert_eq!(g.payload(), inner);
    }

    #[test]
    fn test_construct_gue_direct_zero_checksum() {
        let tunnel = GueTunnel {
            direct: true,
            ..GueTunnel::new(1234)
        };
        let encap = Encap {
            outer: OuterIp::V4(outer_v4()),
            tunnel: Tunnel::Gue(tunnel),
        };
        assert_eq!(encap.header_len(), 28);
        let buf = packet(&encap, &INNER_V4);
        assert_eq!(
            buf[20..28],
            [0x04, 0xd2, 0x17, 0xc0, 0x00, 0x20, 0x00, 0x00]
        );
        assert_eq!(gue::classify(&buf[28..]), Ok(GueVariant::DirectIpv4));
    }

    #[test]
    fn test_construct_ip6ip6() {
        let mut inner = [0u8; 40];
        let repr = Ipv6Repr {
            src_addr: Ipv6Addr::LOCALHOST,
            dst_addr: Ipv6Addr::LOCALHOST,
            next_header: IpProtocol::IPV6_NONXT,
            payload_len: 0,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
        };
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut inner[..]))
            .unwrap();
        let encap = Encap {
            outer: OuterIp::V6(outer_v6()),
            tunnel: Tunnel::Ipip,
        };
        let buf = packet(&encap, &inner);
        let ip = Ipv6Repr::parse(&Ipv6Packet::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(ip.next_header, IpProtocol::IPV6);
        assert_eq!(ip.payload_len, 40);
        assert_eq!(ip.hop_limit, DEFAULT_TTL);
    }

    #[test]
    fn errors_leave_the_packet_alone() {
        let encap = Encap {
            outer: OuterIp::V4(outer_v4()),
            tunnel: Tunnel::Ipip,
        };
        let mut buf = [0u8; 20];
        assert_eq!(encap.emit(&mut buf), Err(Error::Truncated));
        let mut buf = [0u8; 21];
        buf[20] = 0x50;
        assert_eq!(encap.emit(&mut buf), Err(Error::BadVersion));
        assert_eq!(buf[..20], [0u8; 20]);
        let gre = GreTunnel {
            recursion_control: 8,
            ..GreTunnel::default()
        };
        let encap = Encap {
            outer: OuterIp::V4(outer_v4()),
            tunnel: Tunnel::Gre(gre),
        };
        let mut buf = [0u8; 25];
        buf[24] = 0x45;
        assert_eq!(encap.emit(&mut buf), Err(Error::Unrepresentable));
        assert_eq!(buf[..24], [0u8; 24]);
        let mut outer = outer_v6();
        outer.flow_label = 1 << 20;
        let encap = Encap {
            outer: OuterIp::V6(outer),
            tunnel: Tunnel::Ipip,
        };
        let mut buf = [0u8; 41];
        buf[40] = 0x45;
        assert_eq!(encap.emit(&mut buf), Err(Error::Unrepresentable));
        let encap = Encap {
            outer: OuterIp::V4(outer_v4()),
            tunnel: Tunnel::Ipip,
        };
        let mut big = std::vec![0u8; 65536];
        big[20] = 0x45;
        assert_eq!(encap.emit(&mut big), Err(Error::Unrepresentable));
    }

    #[test]
    fn inner_helpers() {
        assert_eq!(inner_traffic_class(&[0x45, 0x2e]), Ok(0x2e));
        assert_eq!(inner_traffic_class(&[0x6b, 0x81]), Ok(0xb8));
        assert_eq!(inner_traffic_class(&[0x45]), Err(Error::Truncated));
        assert_eq!(inner_traffic_class(&[]), Err(Error::Truncated));
        assert_eq!(inner_traffic_class(&[0x55, 0]), Err(Error::BadVersion));
        assert_eq!(
            inner_protocol(&[0x60]),
            Ok((IpProtocol::IPV6, EtherType::IPV6))
        );
        assert_eq!(inner_protocol(&[0x00]), Err(Error::BadVersion));
    }
}
