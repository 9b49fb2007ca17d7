//! Tunnel frames for the decap tests, assembled byte by byte from the RFCs (GRE: RFC 2784 and
//! 2890; IPIP: RFC 2003 / 2473; GUE: draft-ietf-intarea-gue; zero UDP checksum: RFC 6935),
//! independently of the C program and of `stator-wire`. Inner packets come from
//! `stator-testkit`; checksums from its RFC 1071 implementation.
#![allow(dead_code)] // each test binary uses a different part

use std::net::IpAddr;

use stator_testkit::inet_checksum;

/// MAC addresses of the tunnel frames (router → backend).
pub const ROUTER_MAC: [u8; 6] = [0x02, 0xee, 0, 0, 0, 0x01];
pub const BACKEND_MAC: [u8; 6] = [0x02, 0xee, 0, 0, 0, 0x02];

pub const GRE_C: u16 = 0x8000;
pub const GRE_R: u16 = 0x4000;
pub const GRE_K: u16 = 0x2000;
pub const GRE_S: u16 = 0x1000;

pub const GUE_PORT: u16 = 6080;

/// What sits between the outer IP header and the inner packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tunnel {
    /// GRE: the first 16 bits (C/R/K/S, recursion, flags, version), the protocol type (`None`:
    /// the inner packet's ethertype) and the optional 32-bit words in order (checksum +
    /// reserved1, key, sequence number), which must match the flags for a valid packet.
    Gre {
        flags: u16,
        ptype: Option<u16>,
        opt: Vec<u32>,
    },
    /// IP in IP: outer protocol 4 or 41 (`None`: by the inner version).
    Ipip { proto: Option<u8> },
    /// UDP + GUE variant 0: the first byte's C bit and Hlen, the protocol (`None`: 4 or 41 by
    /// the inner version), the flags; Hlen words of extension fields (filled with 0xEE).
    Gue0 {
        ctl: bool,
        hlen: u8,
        proto: Option<u8>,
        flags: u16,
    },
    /// UDP + GUE variant 1 (the UDP payload is the inner packet).
    Gue1,
    /// UDP to the GUE port with these payload bytes before the inner packet.
    GueRaw(Vec<u8>),
}

impl Tunnel {
    /// Plain GRE (what the forwarder sends).
    pub fn gre() -> Self {
        Tunnel::Gre {
            flags: 0,
            ptype: None,
            opt: vec![],
        }
    }
    pub fn ipip() -> Self {
        Tunnel::Ipip { proto: None }
    }
    pub fn gue0() -> Self {
        Tunnel::Gue0 {
            ctl: false,
            hlen: 0,
            proto: None,
            flags: 0,
        }
    }
    pub fn is_udp(&self) -> bool {
        matches!(self, Tunnel::Gue0 { .. } | Tunnel::Gue1 | Tunnel::GueRaw(_))
    }
}

/// A tunnel frame to build.
#[derive(Debug, Clone)]
pub struct Spec {
    pub outer_src: IpAddr,
    pub outer_dst: IpAddr,
    pub tunnel: Tunnel,
    /// The inner IP packet.
    pub inner: Vec<u8>,
    pub vlan: Option<u16>,
    /// Outer IPv4 TOS / IPv6 traffic class.
    pub tos: u8,
    /// Outer IPv4 flags + fragment offset word (DF by default).
    pub frag: u16,
    /// Outer IPv4 options (a multiple of 4 bytes).
    pub ipv4_options: Vec<u8>,
    /// Zero bytes after the outer IP packet.
    pub padding: usize,
    pub udp_sport: u16,
    pub udp_dport: u16,
    pub udp_csum: u16,
}

impl Spec {
    pub fn new(outer_src: IpAddr, outer_dst: IpAddr, tunnel: Tunnel, inner: Vec<u8>) -> Self {
        assert_eq!(outer_src.is_ipv6(), outer_dst.is_ipv6(), "one outer family");
        Self {
            outer_src,
            outer_dst,
            tunnel,
            inner,
            vlan: None,
            tos: 0,
            frag: 0x4000,
            ipv4_options: Vec::new(),
            padding: 0,
            udp_sport: 0xc123,
            udp_dport: GUE_PORT,
            udp_csum: 0,
        }
    }

    fn inner_v6(&self) -> bool {
        self.inner[0] >> 4 == 6
    }

    /// Outer IP protocol and the bytes between the outer IP header and the inner packet.
    pub fn tunnel_header(&self) -> (u8, Vec<u8>) {
        let v6 = self.inner_v6();
        let ip_proto = if v6 { 41 } else { 4 };
        match &self.tunnel {
            Tunnel::Gre { flags, ptype, opt } => {
                let mut h = flags.to_be_bytes().to_vec();
                let pt = ptype.unwrap_or(if v6 { 0x86dd } else { 0x0800 });
                h.extend_from_slice(&pt.to_be_bytes());
                for w in opt {
                    h.extend_from_slice(&w.to_be_bytes());
                }
                (47, h)
            }
            Tunnel::Ipip { proto } => (proto.unwrap_or(ip_proto), Vec::new()),
            Tunnel::Gue0 {
                ctl,
                hlen,
                proto,
                flags,
            } => {
                let mut g = vec![
                    (u8::from(*ctl) << 5) | (hlen & 0x1f),
                    proto.unwrap_or(ip_proto),
                ];
                g.extend_from_slice(&flags.to_be_bytes());
                g.extend(std::iter::repeat_n(0xee, usize::from(*hlen) * 4));
                (17, self.udp(&g))
            }
            Tunnel::Gue1 => (17, self.udp(&[])),
            Tunnel::GueRaw(bytes) => (17, self.udp(bytes)),
        }
    }

    fn udp(&self, gue: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&self.udp_sport.to_be_bytes());
        u.extend_from_slice(&self.udp_dport.to_be_bytes());
        u.extend_from_slice(&((8 + gue.len() + self.inner.len()) as u16).to_be_bytes());
        u.extend_from_slice(&self.udp_csum.to_be_bytes());
        u.extend_from_slice(gue);
        u
    }

    /// The bytes the outer IP header carries: tunnel header + inner packet.
    pub fn payload(&self) -> Vec<u8> {
        let (_, mut p) = self.tunnel_header();
        p.extend_from_slice(&self.inner);
        p
    }

    /// Offset of the outer IP header.
    pub fn l3(&self) -> usize {
        if self.vlan.is_some() { 18 } else { 14 }
    }

    /// Offset of the tunnel header (the outer IP payload).
    pub fn l4(&self) -> usize {
        self.l3()
            + if self.outer_dst.is_ipv6() {
                40
            } else {
                20 + self.ipv4_options.len()
            }
    }

    /// The complete frame.
    pub fn frame(&self) -> Vec<u8> {
        self.frame_with_payload(&self.payload())
    }

    /// The frame around an arbitrary outer payload (lengths and checksum made consistent).
    pub fn frame_with_payload(&self, payload: &[u8]) -> Vec<u8> {
        let (proto, _) = self.tunnel_header();
        let mut f = self.eth(if self.outer_dst.is_ipv6() {
            0x86dd
        } else {
            0x0800
        });
        match (self.outer_src, self.outer_dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                assert!(self.ipv4_options.len().is_multiple_of(4));
                let ihl = 5 + self.ipv4_options.len() / 4;
                let mut h = vec![0x40 | ihl as u8, self.tos];
                h.extend_from_slice(&((ihl * 4 + payload.len()) as u16).to_be_bytes());
                h.extend_from_slice(&[0xab, 0xcd]);
                h.extend_from_slice(&self.frag.to_be_bytes());
                h.extend_from_slice(&[63, proto, 0, 0]);
                h.extend_from_slice(&s.octets());
                h.extend_from_slice(&d.octets());
                h.extend_from_slice(&self.ipv4_options);
                let c = inet_checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                f.extend_from_slice(&h);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let word = (6u32 << 28) | (u32::from(self.tos) << 20) | 0x12345;
                f.extend_from_slice(&word.to_be_bytes());
                f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
                f.extend_from_slice(&[proto, 63]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
            }
            _ => unreachable!("checked in Spec::new"),
        }
        f.extend_from_slice(payload);
        f.extend(std::iter::repeat_n(0, self.padding));
        f
    }

    fn eth(&self, ethertype: u16) -> Vec<u8> {
        let mut f = Vec::with_capacity(128);
        f.extend_from_slice(&BACKEND_MAC);
        f.extend_from_slice(&ROUTER_MAC);
        if let Some(tci) = self.vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    /// What decapsulation must produce: the same MACs (and tag), the inner ethertype, the
    /// inner packet, then whatever followed it (padding).
    pub fn expected(&self) -> Vec<u8> {
        decapsulated(
            &self.eth(if self.inner_v6() { 0x86dd } else { 0x0800 }),
            &self.inner,
            self.padding,
        )
    }

    /// The frame with the outer payload cut to `n` bytes, every length field (outer IP, UDP)
    /// and the IPv4 checksum made consistent with the cut.
    pub fn consistent_cut(&self, n: usize) -> Vec<u8> {
        let mut p = self.payload();
        p.truncate(n);
        if self.tunnel.is_udp() && n >= 6 {
            p[4..6].copy_from_slice(&(n as u16).to_be_bytes());
        }
        let mut s = self.clone();
        s.padding = 0;
        s.frame_with_payload(&p)
    }
}

/// `eth` + `inner` + `padding` zero bytes.
pub fn decapsulated(eth: &[u8], inner: &[u8], padding: usize) -> Vec<u8> {
    let mut f = eth.to_vec();
    f.extend_from_slice(inner);
    f.extend(std::iter::repeat_n(0, padding));
    f
}
