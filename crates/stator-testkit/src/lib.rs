//! # stator-testkit — frames for tests, written independently of the code under test
//!
//! A small builder for Ethernet frames carrying IPv4/IPv6 with TCP, UDP or ICMP, with the knobs
//! the forwarding tests need: an 802.1Q tag, IPv4 options, DF/MF and fragment offsets, IPv6
//! extension headers (including a fragment header), TCP flags, ICMP errors quoting a packet,
//! Ethernet padding. It assembles bytes by hand and deliberately does **not** use `stator-wire`,
//! so a bug in the parsers cannot hide itself by also being in the oracle.
//!
//! Checksums are correct unless a test corrupts them on purpose. [`expect`] holds the other
//! half of the oracle: the encapsulated frame the forwarder must emit, assembled from
//! docs/forwarding.md §5, shared by stator-core's and stator-xdp's tests. Used by tests and by
//! the benchmarks' traffic (`stator bench xdp`, `stator bench veth`) — one set of frame
//! builders — never by a forwarding path. [`prometheus`] is the one reading of the monitoring
//! examples (their PromQL, the metric names it uses, `promtool`) that the monitoring tests share.
//! [`scratch`] gives tests names and directories no parallel test shares.
#![forbid(unsafe_code)]

pub mod expect;
pub mod prometheus;
pub mod scratch;

use std::net::IpAddr;

/// IP protocol numbers used by the builder.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// GRE.
    pub const GRE: u8 = 47;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// IPv6 authentication header.
    pub const AH: u8 = 51;
}

/// TCP flag bits.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// The 16-bit one's-complement Internet checksum of `data` (RFC 1071), folded and inverted.
pub fn inet_checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Upper-layer payload of a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4 {
    /// TCP with ports, flags and payload (20-byte header, no options).
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Flags ([`tcp_flags`]).
        flags: u8,
        /// Payload.
        payload: Vec<u8>,
    },
    /// UDP with ports and payload.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Payload.
        payload: Vec<u8>,
    },
    /// ICMP (IPv4) or ICMPv6 (IPv6): type, code, the 4 "rest of header" bytes, and a body
    /// (for errors: the quoted packet, e.g. from [`Packet::ip_bytes`]).
    Icmp {
        /// Type.
        ty: u8,
        /// Code.
        code: u8,
        /// Rest of header (identifier/sequence, MTU, …).
        rest: [u8; 4],
        /// Body.
        body: Vec<u8>,
    },
    /// Raw bytes after the IP header, with an explicit protocol number.
    Raw {
        /// IP protocol / next header.
        proto: u8,
        /// Bytes.
        bytes: Vec<u8>,
    },
}

impl L4 {
    fn proto(&self, v6: bool) -> u8 {
        match self {
            L4::Tcp { .. } => proto::TCP,
            L4::Udp { .. } => proto::UDP,
            L4::Icmp { .. } if v6 => proto::ICMPV6,
            L4::Icmp { .. } => proto::ICMP,
            L4::Raw { proto, .. } => *proto,
        }
    }
}

/// An IPv6 extension header to insert before the upper layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ext {
    /// Hop-by-hop options of `(len + 1) * 8` bytes (padded with PadN).
    HopByHop(u8),
    /// Destination options of `(len + 1) * 8` bytes.
    DstOpts(u8),
    /// Routing header (type 0, segments left 0) of `(len + 1) * 8` bytes.
    Routing(u8),
    /// Fragment header: offset in 8-byte units, M flag, identification.
    Fragment {
        /// Fragment offset (13 bits, 8-byte units).
        offset: u16,
        /// More-fragments flag.
        more: bool,
        /// Identification.
        id: u32,
    },
    /// Authentication header with `len` (AH length field: `(len + 2) * 4` bytes).
    Ah(u8),
}

impl Ext {
    fn proto(&self) -> u8 {
        match self {
            Ext::HopByHop(_) => proto::HOPOPT,
            Ext::DstOpts(_) => proto::DSTOPTS,
            Ext::Routing(_) => proto::ROUTING,
            Ext::Fragment { .. } => proto::FRAGMENT,
            Ext::Ah(_) => proto::AH,
        }
    }

    fn emit(&self, next: u8, out: &mut Vec<u8>) {
        match self {
            Ext::HopByHop(len) | Ext::DstOpts(len) => {
                let total = (usize::from(*len) + 1) * 8;
                out.extend_from_slice(&[next, *len]);
                // PadN option covering the rest: type 1, length total-4.
                out.extend_from_slice(&[1, (total - 4) as u8]);
                out.extend(std::iter::repeat_n(0, total - 4));
            }
            Ext::Routing(len) => {
                let total = (usize::from(*len) + 1) * 8;
                out.extend_from_slice(&[next, *len, 0, 0]);
                out.extend(std::iter::repeat_n(0, total - 4));
            }
            Ext::Fragment { offset, more, id } => {
                let off = (offset << 3) | u16::from(*more);
                out.extend_from_slice(&[next, 0]);
                out.extend_from_slice(&off.to_be_bytes());
                out.extend_from_slice(&id.to_be_bytes());
            }
            Ext::Ah(len) => {
                let total = (usize::from(*len) + 2) * 4;
                out.extend_from_slice(&[next, *len, 0, 0]);
                out.extend(std::iter::repeat_n(0, total - 4));
            }
        }
    }
}

/// A packet to build. Start from [`Packet::tcp`], [`Packet::udp`] or [`Packet::icmp`] and adjust
/// fields; [`Packet::frame`] gives the Ethernet frame, [`Packet::ip_bytes`] the IP packet alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// 802.1Q tag (TCI) if any.
    pub vlan: Option<u16>,
    /// Source address (the family of `src` and `dst` must match).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IPv4 TOS / IPv6 traffic class.
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 identification.
    pub ip_id: u16,
    /// IPv4 DF.
    pub df: bool,
    /// IPv4 MF.
    pub mf: bool,
    /// IPv4 fragment offset (8-byte units).
    pub frag_offset: u16,
    /// IPv4 options (padded to a multiple of 4 with zeros).
    pub ipv4_options: Vec<u8>,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// IPv6 extension headers, in order.
    pub ext: Vec<Ext>,
    /// The upper layer.
    pub l4: L4,
    /// Zero bytes appended after the IP packet (Ethernet padding; not counted in IP lengths).
    pub padding: usize,
}

/// Default MACs of built frames.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Default destination MAC (the load balancer).
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

impl Packet {
    fn new(src: IpAddr, dst: IpAddr, l4: L4) -> Self {
        Self {
            dst_mac: LB_MAC,
            src_mac: CLIENT_MAC,
            vlan: None,
            src,
            dst,
            tos: 0,
            ttl: 64,
            ip_id: 0x1234,
            df: true,
            mf: false,
            frag_offset: 0,
            ipv4_options: Vec::new(),
            flow_label: 0,
            ext: Vec::new(),
            l4,
            padding: 0,
        }
    }

    /// A TCP segment with the given flags and no payload.
    pub fn tcp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, flags: u8) -> Self {
        Self::new(
            src,
            dst,
            L4::Tcp {
                sport,
                dport,
                flags,
                payload: Vec::new(),
            },
        )
    }

    /// A UDP datagram with a small payload.
    pub fn udp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Self {
        Self::new(
            src,
            dst,
            L4::Udp {
                sport,
                dport,
                payload: b"stator".to_vec(),
            },
        )
    }

    /// An ICMP/ICMPv6 message.
    pub fn icmp(src: IpAddr, dst: IpAddr, ty: u8, code: u8, rest: [u8; 4], body: Vec<u8>) -> Self {
        Self::new(
            src,
            dst,
            L4::Icmp {
                ty,
                code,
                rest,
                body,
            },
        )
    }

    /// Sets the payload of a TCP/UDP packet.
    pub fn with_payload(mut self, data: &[u8]) -> Self {
        match &mut self.l4 {
            L4::Tcp { payload, .. } | L4::Udp { payload, .. } => *payload = data.to_vec(),
            L4::Icmp { body, .. } => *body = data.to_vec(),
            L4::Raw { bytes, .. } => *bytes = data.to_vec(),
        }
        self
    }

    fn is_v6(&self) -> bool {
        self.dst.is_ipv6()
    }

    /// The upper-layer bytes (header + payload) with a correct checksum.
    fn l4_bytes(&self) -> Vec<u8> {
        let v6 = self.is_v6();
        let mut b = Vec::new();
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                flags,
                payload,
            } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&1000u32.to_be_bytes()); // seq
                let ack = if flags & tcp_flags::ACK != 0 {
                    2000u32
                } else {
                    0
                };
                b.extend_from_slice(&ack.to_be_bytes());
                b.extend_from_slice(&[0x50, *flags]);
                b.extend_from_slice(&64240u16.to_be_bytes()); // window
                b.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
                b.extend_from_slice(payload);
                let c = self.l4_checksum(&b);
                b[16..18].copy_from_slice(&c.to_be_bytes());
            }
            L4::Udp {
                sport,
                dport,
                payload,
            } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(payload);
                let mut c = self.l4_checksum(&b);
                if c == 0 {
                    c = 0xffff;
                }
                b[6..8].copy_from_slice(&c.to_be_bytes());
            }
            L4::Icmp {
                ty,
                code,
                rest,
                body,
            } => {
                b.extend_from_slice(&[*ty, *code, 0, 0]);
                b.extend_from_slice(rest);
                b.extend_from_slice(body);
                let c = if v6 {
                    self.l4_checksum(&b)
                } else {
                    inet_checksum(&b)
                };
                b[2..4].copy_from_slice(&c.to_be_bytes());
            }
            L4::Raw { bytes, .. } => b.extend_from_slice(bytes),
        }
        b
    }

    fn l4_checksum(&self, l4: &[u8]) -> u16 {
        let proto = self.l4.proto(self.is_v6());
        let mut acc = 0u32;
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                acc = sum(acc, &s.octets());
                acc = sum(acc, &d.octets());
                acc += u32::from(proto);
                acc += l4.len() as u32;
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                acc = sum(acc, &s.octets());
                acc = sum(acc, &d.octets());
                acc += l4.len() as u32;
                acc += u32::from(proto);
            }
            _ => panic!("testkit: source and destination families differ"),
        }
        !fold(sum(acc, l4))
    }

    /// The IP packet (header, extension headers, upper layer), without Ethernet or padding.
    pub fn ip_bytes(&self) -> Vec<u8> {
        let l4 = self.l4_bytes();
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut opts = self.ipv4_options.clone();
                while !opts.len().is_multiple_of(4) {
                    opts.push(0);
                }
                let ihl = 5 + opts.len() / 4;
                let total = ihl * 4 + l4.len();
                let mut h = Vec::with_capacity(total);
                h.push(0x40 | ihl as u8);
                h.push(self.tos);
                h.extend_from_slice(&(total as u16).to_be_bytes());
                h.extend_from_slice(&self.ip_id.to_be_bytes());
                let mut frag = self.frag_offset & 0x1fff;
                if self.df {
                    frag |= 0x4000;
                }
                if self.mf {
                    frag |= 0x2000;
                }
                h.extend_from_slice(&frag.to_be_bytes());
                h.push(self.ttl);
                h.push(self.l4.proto(false));
                h.extend_from_slice(&[0, 0]);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                h.extend_from_slice(&opts);
                let c = inet_checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                h.extend_from_slice(&l4);
                h
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut ext = Vec::new();
                let upper = self.l4.proto(true);
                for (i, e) in self.ext.iter().enumerate() {
                    let next = self.ext.get(i + 1).map_or(upper, Ext::proto);
                    e.emit(next, &mut ext);
                }
                let first = self.ext.first().map_or(upper, Ext::proto);
                let mut h = Vec::with_capacity(40 + ext.len() + l4.len());
                let word = (6u32 << 28) | (u32::from(self.tos) << 20) | (self.flow_label & 0xfffff);
                h.extend_from_slice(&word.to_be_bytes());
                h.extend_from_slice(&((ext.len() + l4.len()) as u16).to_be_bytes());
                h.push(first);
                h.push(self.ttl);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                h.extend_from_slice(&ext);
                h.extend_from_slice(&l4);
                h
            }
            _ => panic!("testkit: source and destination families differ"),
        }
    }

    /// The complete Ethernet frame.
    pub fn frame(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(128);
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        if let Some(tci) = self.vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&tci.to_be_bytes());
        }
        let ethertype: u16 = if self.is_v6() { 0x86dd } else { 0x0800 };
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&self.ip_bytes());
        f.extend(std::iter::repeat_n(0, self.padding));
        f
    }
}

/// A non-IP frame (ARP request for 10.0.0.1 from 10.0.0.2).
pub fn arp_frame() -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[10, 0, 0, 2]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 0, 0, 1]);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, a))
    }

    #[test]
    fn ipv4_tcp_header_checksums_verify() {
        let p = Packet::tcp(v4(1), 1234, v4(2), 80, tcp_flags::SYN);
        let ip = p.ip_bytes();
        assert_eq!(ip.len(), 40);
        assert_eq!(
            inet_checksum(&ip[..20]),
            0,
            "IPv4 header checksum verifies to 0"
        );
        // TCP checksum verifies with the pseudo-header.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ip[12..20]);
        pseudo.extend_from_slice(&[0, 6, 0, 20]);
        pseudo.extend_from_slice(&ip[20..]);
        assert_eq!(inet_checksum(&pseudo), 0);
    }

    #[test]
    fn frame_layout_with_vlan_options_and_padding() {
        let mut p = Packet::udp(v4(1), 5000, v4(2), 53);
        p.vlan = Some(100);
        p.ipv4_options = vec![1, 1, 1]; // NOPs, padded to 4
        p.padding = 6;
        let f = p.frame();
        assert_eq!(&f[12..14], &[0x81, 0x00]);
        assert_eq!(&f[16..18], &[0x08, 0x00]);
        assert_eq!(f[18], 0x46, "IHL 6 with one option word");
        let total = u16::from_be_bytes([f[20], f[21]]) as usize;
        assert_eq!(f.len(), 18 + total + 6);
    }

    #[test]
    fn ipv6_extension_chain_links_next_headers() {
        let s = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
        let d = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
        let mut p = Packet::tcp(s, 1, d, 2, tcp_flags::ACK);
        p.ext = vec![
            Ext::HopByHop(0),
            Ext::Fragment {
                offset: 0,
                more: false,
                id: 7,
            },
        ];
        let ip = p.ip_bytes();
        assert_eq!(ip[6], proto::HOPOPT);
        assert_eq!(ip[40], proto::FRAGMENT);
        assert_eq!(ip[48], proto::TCP);
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]) as usize, ip.len() - 40);
    }
}
