//! Proptest strategies for whole frames, written byte by byte here (not with the crate's emit
//! code) so that the flow tests compare `parse_flow` with an independent model: the flow tuple
//! each spec must give.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::vec::Vec;

use proptest::collection::vec;
use proptest::prelude::*;
use stator_wire::{FlowTuple, FragmentInfo, IpPair, IpProtocol, TcpFlags, VlanTag, checksum};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frag {
    /// Not a fragment.
    Whole,
    /// Offset 0, more fragments.
    First,
    /// Offset in 8-byte units (> 0), and the M flag.
    Later(u16, bool),
    /// IPv6 only: a fragment header with offset 0 and no M flag (RFC 6946).
    Atomic,
}

#[derive(Debug, Clone)]
pub enum L4 {
    Tcp {
        src_port: u16,
        dst_port: u16,
        flags: u16,
        option_words: usize,
        payload: Vec<u8>,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
        payload: Vec<u8>,
    },
    Icmp {
        msg_type: u8,
        code: u8,
        payload: Vec<u8>,
    },
    Other {
        protocol: u8,
        payload: Vec<u8>,
    },
}

#[derive(Debug, Clone)]
pub enum Ext {
    /// Hop-by-hop (only ever first), destination options, routing: length in 8-byte units - 1.
    Options(IpProtocol, u8),
    /// AH: payload length field (total (n + 2) * 4 bytes), kept a multiple of 8 bytes.
    Ah(u8),
}

#[derive(Debug, Clone)]
pub enum Ip {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        option_words: usize,
        ident: u16,
        dont_frag: bool,
        frag: Frag,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        before: Vec<Ext>,
        frag: Frag,
        ident: u32,
        after_dstopts: bool,
    },
}

#[derive(Debug, Clone)]
pub struct FrameSpec {
    pub vlan: Option<VlanTag>,
    pub ip: Ip,
    pub l4: L4,
    pub padding: usize,
}

fn frag_v4() -> impl Strategy<Value = Frag> {
    prop_oneof![
        3 => Just(Frag::Whole),
        1 => Just(Frag::First),
        1 => (1u16..0x2000, any::<bool>()).prop_map(|(o, m)| Frag::Later(o, m)),
    ]
}

fn frag_v6() -> impl Strategy<Value = Frag> {
    prop_oneof![
        3 => Just(Frag::Whole),
        1 => Just(Frag::First),
        1 => (1u16..0x2000, any::<bool>()).prop_map(|(o, m)| Frag::Later(o, m)),
        1 => Just(Frag::Atomic),
    ]
}

fn l4() -> impl Strategy<Value = L4> {
    let payload = || vec(any::<u8>(), 0..48);
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            0u16..0x1000,
            0usize..=10,
            payload()
        )
            .prop_map(
                |(src_port, dst_port, flags, option_words, payload)| L4::Tcp {
                    src_port,
                    dst_port,
                    flags,
                    option_words,
                    payload
                }
            ),
        (any::<u16>(), any::<u16>(), payload()).prop_map(|(src_port, dst_port, payload)| L4::Udp {
            src_port,
            dst_port,
            payload
        }),
        (any::<u8>(), any::<u8>(), payload()).prop_map(|(msg_type, code, payload)| L4::Icmp {
            msg_type,
            code,
            payload
        }),
        // Anything but the protocols parse_flow reads and the IPv6 extension headers.
        (any::<u8>(), payload())
            .prop_filter("not a parsed protocol", |(p, _)| !matches!(
                *p,
                0 | 1 | 6 | 17 | 43 | 44 | 51 | 58 | 60
            ))
            .prop_map(|(protocol, payload)| L4::Other { protocol, payload }),
    ]
}

fn ext() -> impl Strategy<Value = Ext> {
    prop_oneof![
        (0u8..3).prop_map(|n| Ext::Options(IpProtocol::IPV6_OPTS, n)),
        (0u8..3).prop_map(|n| Ext::Options(IpProtocol::IPV6_ROUTE, n)),
        // (n + 2) * 4 must be a multiple of 8 in IPv6: n even.
        (0u8..3).prop_map(|n| Ext::Ah(n * 2)),
    ]
}

fn ip() -> impl Strategy<Value = Ip> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            0usize..=10,
            any::<u16>(),
            any::<bool>(),
            frag_v4()
        )
            .prop_map(|(s, d, option_words, ident, dont_frag, frag)| Ip::V4 {
                src: s.into(),
                dst: d.into(),
                option_words,
                ident,
                dont_frag,
                frag
            }),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<bool>(),
            vec(ext(), 0..4),
            frag_v6(),
            any::<u32>(),
            any::<bool>()
        )
            .prop_map(|(s, d, hbh, mut before, frag, ident, after_dstopts)| {
                if hbh {
                    before.insert(0, Ext::Options(IpProtocol::HOPOPT, 0));
                }
                Ip::V6 {
                    src: s.into(),
                    dst: d.into(),
                    before,
                    frag,
                    ident,
                    after_dstopts,
                }
            }),
    ]
}

pub fn frame_spec() -> impl Strategy<Value = FrameSpec> {
    let vlan = proptest::option::of(
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    );
    (vlan, ip(), l4(), 0usize..20).prop_map(|(vlan, ip, l4, padding)| FrameSpec {
        vlan,
        ip,
        l4,
        padding,
    })
}

impl L4 {
    fn protocol(&self) -> IpProtocol {
        match self {
            L4::Tcp { .. } => IpProtocol::TCP,
            L4::Udp { .. } => IpProtocol::UDP,
            L4::Icmp { .. } => IpProtocol::ICMP,
            L4::Other { protocol, .. } => IpProtocol(*protocol),
        }
    }

    fn bytes(&self, v6: bool) -> Vec<u8> {
        let mut b = Vec::new();
        match self {
            L4::Tcp {
                src_port,
                dst_port,
                flags,
                option_words,
                payload,
            } => {
                b.extend_from_slice(&src_port.to_be_bytes());
                b.extend_from_slice(&dst_port.to_be_bytes());
                b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
                let word = (((5 + *option_words) as u16) << 12) | flags;
                b.extend_from_slice(&word.to_be_bytes());
                b.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
                b.extend(std::iter::repeat_n(1u8, option_words * 4));
                b.extend_from_slice(payload);
            }
            L4::Udp {
                src_port,
                dst_port,
                payload,
            } => {
                b.extend_from_slice(&src_port.to_be_bytes());
                b.extend_from_slice(&dst_port.to_be_bytes());
                b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(payload);
            }
            L4::Icmp {
                msg_type,
                code,
                payload,
            } => {
                b.extend_from_slice(&[*msg_type, *code, 0, 0, 0, 0, 0, 0]);
                b.extend_from_slice(payload);
                let _ = v6;
            }
            L4::Other { payload, .. } => b.extend_from_slice(payload),
        }
        b
    }
}

impl Ext {
    fn kind(&self) -> IpProtocol {
        match self {
            Ext::Options(kind, _) => *kind,
            Ext::Ah(_) => IpProtocol::AH,
        }
    }

    fn bytes(&self, next: IpProtocol) -> Vec<u8> {
        let (len_field, len) = match self {
            Ext::Options(_, n) => (*n, (usize::from(*n) + 1) * 8),
            Ext::Ah(n) => (*n, (usize::from(*n) + 2) * 4),
        };
        let mut b = std::vec![0u8; len];
        b[0] = next.0;
        b[1] = len_field;
        b
    }
}

/// The frame bytes of `spec` and the flow `parse_flow` must find in them.
pub fn build(spec: &FrameSpec) -> (Vec<u8>, FlowTuple) {
    let mut f = std::vec![
        0x52, 0x54, 0, 0xab, 0xcd, 0xef, 0x52, 0x54, 0, 0x12, 0x34, 0x56
    ];
    if let Some(tag) = spec.vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&tag.tci().unwrap().to_be_bytes());
    }
    let l3 = f.len() + 2;
    let l4_proto = spec.l4.protocol();
    // ICMP in an IPv6 frame is ICMPv6.
    let l4_proto_for = |v6: bool| {
        if v6 && l4_proto == IpProtocol::ICMP {
            IpProtocol::ICMPV6
        } else {
            l4_proto
        }
    };
    let (addrs, fragment, protocol, l4_rel, ip_bytes) = match &spec.ip {
        Ip::V4 {
            src,
            dst,
            option_words,
            ident,
            dont_frag,
            frag,
        } => {
            f.extend_from_slice(&[0x08, 0x00]);
            let l4 = spec.l4.bytes(false);
            let hl = 20 + option_words * 4;
            let total = hl + l4.len();
            let (mf, off) = match frag {
                Frag::Whole | Frag::Atomic => (false, 0),
                Frag::First => (true, 0),
                Frag::Later(o, m) => (*m, *o),
            };
            let word = (u16::from(*dont_frag) << 14) | (u16::from(mf) << 13) | off;
            let mut h = std::vec![(0x40 | (hl / 4)) as u8, 0];
            h.extend_from_slice(&(total as u16).to_be_bytes());
            h.extend_from_slice(&ident.to_be_bytes());
            h.extend_from_slice(&word.to_be_bytes());
            h.extend_from_slice(&[64, l4_proto.0, 0, 0]);
            h.extend_from_slice(&src.octets());
            h.extend_from_slice(&dst.octets());
            h.extend(std::iter::repeat_n(1u8, option_words * 4)); // NOPs
            let c = checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            let fragment = match frag {
                Frag::Whole | Frag::Atomic => None,
                Frag::First => Some(FragmentInfo {
                    id: u32::from(*ident),
                    offset: 0,
                    more: true,
                }),
                Frag::Later(o, m) => Some(FragmentInfo {
                    id: u32::from(*ident),
                    offset: o << 3,
                    more: *m,
                }),
            };
            h.extend_from_slice(&l4);
            (
                IpPair::V4 {
                    src: *src,
                    dst: *dst,
                },
                fragment,
                l4_proto,
                hl,
                h,
            )
        }
        Ip::V6 {
            src,
            dst,
            before,
            frag,
            ident,
            after_dstopts,
        } => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let upper = l4_proto_for(true);
            // The chain: before..., [fragment], [destination options], upper layer.
            let mut chain: Vec<(IpProtocol, Option<&Ext>)> =
                before.iter().map(|e| (e.kind(), Some(e))).collect();
            if *frag != Frag::Whole {
                chain.push((IpProtocol::IPV6_FRAG, None));
            }
            let after = Ext::Options(IpProtocol::IPV6_OPTS, 0);
            if *after_dstopts {
                chain.push((IpProtocol::IPV6_OPTS, Some(&after)));
            }
            let first = chain.first().map_or(upper, |c| c.0);
            let mut payload = Vec::new();
            let mut l4_rel = 40;
            let mut protocol = upper;
            for (i, (kind, e)) in chain.iter().enumerate() {
                let next = chain.get(i + 1).map_or(upper, |c| c.0);
                let bytes = match e {
                    Some(e) => e.bytes(next),
                    None => {
                        let (off, m) = match frag {
                            Frag::First => (0, true),
                            Frag::Later(o, m) => (*o, *m),
                            _ => (0, false),
                        };
                        let mut b = std::vec![next.0, 0];
                        b.extend_from_slice(&((off << 3) | u16::from(m)).to_be_bytes());
                        b.extend_from_slice(&ident.to_be_bytes());
                        b
                    }
                };
                payload.extend_from_slice(&bytes);
                if *kind == IpProtocol::IPV6_FRAG && matches!(frag, Frag::Later(..)) {
                    // The walk stops here: what follows is fragment data.
                    protocol = next;
                    l4_rel = 40 + payload.len();
                    // Keep the remaining headers as opaque fragment data.
                    for (j, (_, e2)) in chain.iter().enumerate().skip(i + 1) {
                        let next2 = chain.get(j + 1).map_or(upper, |c| c.0);
                        if let Some(e2) = e2 {
                            payload.extend_from_slice(&e2.bytes(next2));
                        }
                    }
                    break;
                }
                l4_rel = 40 + payload.len();
            }
            payload.extend_from_slice(&spec.l4.bytes(true));
            let mut h = std::vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            h.extend_from_slice(&[first.0, 64]);
            h.extend_from_slice(&src.octets());
            h.extend_from_slice(&dst.octets());
            h.extend_from_slice(&payload);
            let fragment = match frag {
                Frag::Whole | Frag::Atomic => None,
                Frag::First => Some(FragmentInfo {
                    id: *ident,
                    offset: 0,
                    more: true,
                }),
                Frag::Later(o, m) => Some(FragmentInfo {
                    id: *ident,
                    offset: o << 3,
                    more: *m,
                }),
            };
            (
                IpPair::V6 {
                    src: *src,
                    dst: *dst,
                },
                fragment,
                protocol,
                l4_rel,
                h,
            )
        }
    };
    f.extend_from_slice(&ip_bytes);
    let l3_end = f.len();
    f.extend(std::iter::repeat_n(0u8, spec.padding));

    let later = fragment.is_some_and(|fr| !fr.is_first());
    let mut expected = FlowTuple {
        addrs,
        src_port: 0,
        dst_port: 0,
        protocol,
        tcp_flags: TcpFlags::EMPTY,
        icmp_type: 0,
        icmp_code: 0,
        fragment,
        vlan: spec.vlan,
        l3_offset: l3,
        l4_offset: l3 + l4_rel,
        l3_end,
    };
    if !later {
        match &spec.l4 {
            L4::Tcp {
                src_port,
                dst_port,
                flags,
                ..
            } => {
                expected.src_port = *src_port;
                expected.dst_port = *dst_port;
                expected.tcp_flags = TcpFlags::from_bits(*flags);
            }
            L4::Udp {
                src_port, dst_port, ..
            } => {
                expected.src_port = *src_port;
                expected.dst_port = *dst_port;
            }
            L4::Icmp { msg_type, code, .. } => {
                expected.icmp_type = *msg_type;
                expected.icmp_code = *code;
            }
            L4::Other { .. } => {}
        }
    }
    (f, expected)
}
