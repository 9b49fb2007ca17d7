//! For every representation: emit, then parse, gives back the same value; and the emitted bytes
//! pass the view's `check_len`.

mod common;

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;
use stator_wire::encap::{Encap, GreTunnel, GueTunnel, Ipv4Outer, Ipv6Outer, OuterIp, Tunnel};
use stator_wire::*;

fn ipv4_addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<[u8; 4]>().prop_map(Ipv4Addr::from)
}

fn ipv6_addr() -> impl Strategy<Value = Ipv6Addr> {
    any::<[u8; 16]>().prop_map(Ipv6Addr::from)
}

fn ip_pair() -> impl Strategy<Value = IpPair> {
    prop_oneof![
        (ipv4_addr(), ipv4_addr()).prop_map(|(src, dst)| IpPair::V4 { src, dst }),
        (ipv6_addr(), ipv6_addr()).prop_map(|(src, dst)| IpPair::V6 { src, dst }),
    ]
}

fn ethernet_repr() -> impl Strategy<Value = EthernetRepr> {
    let vlan = proptest::option::of(
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    );
    (any::<[u8; 6]>(), any::<[u8; 6]>(), vlan, any::<u16>())
        .prop_filter("an untagged frame cannot say 0x8100", |(_, _, vlan, et)| {
            vlan.is_some() || *et != 0x8100
        })
        .prop_map(|(s, d, vlan, et)| EthernetRepr {
            src_addr: EthernetAddress(s),
            dst_addr: EthernetAddress(d),
            vlan,
            ethertype: EtherType(et),
        })
}

prop_compose! {
    fn ipv4_repr()(
        src_addr in ipv4_addr(), dst_addr in ipv4_addr(), protocol in any::<u8>(),
        payload_len in 0usize..600, ttl in any::<u8>(), tos in any::<u8>(), ident in any::<u16>(),
        dont_frag in any::<bool>(), more_frags in any::<bool>(), offset in 0u16..0x2000,
    ) -> Ipv4Repr {
        Ipv4Repr {
            src_addr, dst_addr, protocol: IpProtocol(protocol), payload_len, ttl, tos, ident,
            dont_frag, more_frags, frag_offset: offset << 3,
        }
    }
}

prop_compose! {
    fn ipv6_repr()(
        src_addr in ipv6_addr(), dst_addr in ipv6_addr(), next_header in any::<u8>(),
        payload_len in 0usize..600, hop_limit in any::<u8>(), traffic_class in any::<u8>(),
        flow_label in 0u32..=0xfffff,
    ) -> Ipv6Repr {
        Ipv6Repr {
            src_addr, dst_addr, next_header: IpProtocol(next_header), payload_len, hop_limit,
            traffic_class, flow_label,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn ethernet(repr in ethernet_repr(), payload in vec(any::<u8>(), 0..64)) {
        let mut buf = vec![0u8; repr.buffer_len()];
        buf.extend_from_slice(&payload);
        repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..])).unwrap();
        let frame = EthernetFrame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&frame), Ok(repr));
        prop_assert_eq!(frame.payload(), &payload[..]);
    }

    #[test]
    fn ipv4(repr in ipv4_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])).unwrap();
        let packet = Ipv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(packet.verify_checksum());
        prop_assert_eq!(Ipv4Repr::parse(&packet), Ok(repr));
    }

    #[test]
    fn ipv6(repr in ipv6_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn ipv6_ext_header(next in any::<u8>(), units in 0usize..8, fill in any::<u8>()) {
        let data = vec![fill; units * 8 + 6];
        let repr = Ipv6ExtHeaderRepr { next_header: IpProtocol(next), data: &data };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Ipv6ExtHeader::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(Ipv6ExtHeaderRepr::parse(&Ipv6ExtHeader::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn ipv6_fragment_header(next in any::<u8>(), offset in 0u16..0x2000, more in any::<bool>(), id in any::<u32>()) {
        let repr = Ipv6FragmentRepr { next_header: IpProtocol(next), info: FragmentInfo { id, offset: offset << 3, more } };
        let mut buf = [0u8; 8];
        repr.emit(&mut Ipv6FragmentHeader::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(Ipv6FragmentRepr::parse(&Ipv6FragmentHeader::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn tcp(
        addrs in ip_pair(), src_port in any::<u16>(), dst_port in any::<u16>(), seq_number in any::<u32>(),
        ack_number in any::<u32>(), flags in 0u16..0x1000, window_len in any::<u16>(), urgent_at in any::<u16>(),
        options in (0usize..=10).prop_flat_map(|n| vec(any::<u8>(), n * 4)), payload in vec(any::<u8>(), 0..200),
    ) {
        let repr = TcpRepr {
            src_port, dst_port, seq_number, ack_number, flags: TcpFlags::from_bits(flags), window_len, urgent_at,
            options: &options, payload: &payload,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &addrs).unwrap();
        prop_assert_eq!(TcpRepr::parse(&TcpPacket::new_checked(&buf[..]).unwrap(), &addrs), Ok(repr));
    }

    #[test]
    fn udp(addrs in ip_pair(), src_port in any::<u16>(), dst_port in any::<u16>(), payload in vec(any::<u8>(), 0..200), with_checksum in any::<bool>()) {
        let repr = UdpRepr { src_port, dst_port, payload_len: payload.len() };
        let mut buf = vec![0u8; 8];
        buf.extend_from_slice(&payload);
        repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), with_checksum.then_some(&addrs)).unwrap();
        let packet = UdpPacket::new_checked(&buf[..]).unwrap();
        let verify = (with_checksum || !addrs.is_ipv6()).then_some(&addrs);
        prop_assert_eq!(UdpRepr::parse(&packet, verify), Ok(repr));
        prop_assert_eq!(packet.payload(), &payload[..]);
        prop_assert_eq!(packet.checksum() != 0, with_checksum);
    }

    #[test]
    fn icmpv4(msg_type in any::<u8>(), code in any::<u8>(), rest_of_header in any::<u32>(), data in vec(any::<u8>(), 0..100)) {
        let repr = Icmpv4Repr { msg_type: Icmpv4Message(msg_type), code, rest_of_header, data: &data };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn icmpv6(src in ipv6_addr(), dst in ipv6_addr(), msg_type in any::<u8>(), code in any::<u8>(), rest_of_header in any::<u32>(), data in vec(any::<u8>(), 0..100)) {
        let repr = Icmpv6Repr { msg_type: Icmpv6Message(msg_type), code, rest_of_header, data: &data };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst).unwrap();
        prop_assert_eq!(Icmpv6Repr::parse(&Icmpv6Packet::new_checked(&buf[..]).unwrap(), &src, &dst), Ok(repr));
    }

    #[test]
    fn gre(
        protocol in any::<u16>(), checksum in any::<bool>(), key in proptest::option::of(any::<u32>()),
        sequence_number in proptest::option::of(any::<u32>()), recursion_control in 0u8..8, payload in vec(any::<u8>(), 0..64),
    ) {
        let repr = GreRepr { protocol_type: EtherType(protocol), checksum, key, sequence_number, recursion_control };
        let mut buf = vec![0u8; repr.buffer_len()];
        buf.extend_from_slice(&payload);
        repr.emit(&mut GrePacket::new_unchecked(&mut buf[..])).unwrap();
        let packet = GrePacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(GreRepr::parse(&packet), Ok(repr));
        prop_assert_eq!(packet.payload(), &payload[..]);
    }

    #[test]
    fn gue(control in any::<bool>(), proto_ctype in any::<u8>(), flags in any::<u16>(), words in 0usize..=31, fill in any::<u8>()) {
        let extensions = vec![fill; words * 4];
        let repr = GueRepr { control, proto_ctype, flags, extensions: &extensions };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut GuePacket::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(gue::classify(&buf), Ok(GueVariant::Header));
        prop_assert_eq!(GueRepr::parse(&GuePacket::new_checked(&buf[..]).unwrap()), Ok(repr));
    }
}

fn outer() -> impl Strategy<Value = OuterIp> {
    prop_oneof![
        (
            ipv4_addr(),
            ipv4_addr(),
            any::<u8>(),
            any::<u8>(),
            any::<bool>()
        )
            .prop_map(|(s, d, ttl, tos, dont_frag)| {
                OuterIp::V4(Ipv4Outer {
                    ttl,
                    tos,
                    dont_frag,
                    ..Ipv4Outer::new(s, d)
                })
            }),
        (
            ipv6_addr(),
            ipv6_addr(),
            any::<u8>(),
            any::<u8>(),
            0u32..=0xfffff
        )
            .prop_map(|(s, d, hop_limit, traffic_class, flow_label)| {
                OuterIp::V6(Ipv6Outer {
                    hop_limit,
                    traffic_class,
                    flow_label,
                    ..Ipv6Outer::new(s, d)
                })
            }),
    ]
}

fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::Ipip),
        (
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            any::<bool>(),
            0u8..8
        )
            .prop_map(
                |(key, sequence_number, checksum, recursion_control)| Tunnel::Gre(GreTunnel {
                    key,
                    sequence_number,
                    checksum,
                    recursion_control
                })
            ),
        (any::<u16>(), any::<u16>(), any::<bool>(), any::<bool>()).prop_map(
            |(src_port, dst_port, direct, udp_checksum)| {
                Tunnel::Gue(GueTunnel {
                    src_port,
                    dst_port,
                    direct,
                    udp_checksum,
                })
            }
        ),
    ]
}

/// An inner IPv4 or IPv6 packet with a random payload.
fn inner() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (ipv4_repr(), any::<u8>()).prop_map(|(r, fill)| {
            let r = Ipv4Repr {
                payload_len: r.payload_len % 100,
                ..r
            };
            let mut b = vec![fill; r.buffer_len()];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..])).unwrap();
            b
        }),
        (ipv6_repr(), any::<u8>()).prop_map(|(r, fill)| {
            let r = Ipv6Repr {
                payload_len: r.payload_len % 100,
                ..r
            };
            let mut b = vec![fill; r.buffer_len()];
            r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..])).unwrap();
            b
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Encapsulate, then take the result apart with the views: every outer field is what the
    /// encapsulation asked for, and the inner packet is untouched.
    #[test]
    fn encap(outer in outer(), tunnel in tunnel(), inner in inner()) {
        let encap = Encap { outer, tunnel };
        let hl = encap.header_len();
        let mut buf = vec![0u8; hl];
        buf.extend_from_slice(&inner);
        encap.emit(&mut buf).unwrap();
        let v6_inner = inner[0] >> 4 == 6;
        let inner_proto = if v6_inner { IpProtocol::IPV6 } else { IpProtocol::IPV4 };
        let (proto, ip_payload) = match outer {
            OuterIp::V4(o) => {
                let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
                let r = Ipv4Repr::parse(&p).unwrap();
                prop_assert_eq!(r, o.repr(r.protocol, buf.len() - 20));
                (r.protocol, p.payload())
            }
            OuterIp::V6(o) => {
                let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
                let r = Ipv6Repr::parse(&p).unwrap();
                prop_assert_eq!(r, o.repr(r.next_header, buf.len() - 40));
                (r.next_header, p.payload())
            }
        };
        // Also let the generic oracles loose on the result.
        common::exercise::all(&buf);
        let carried = match tunnel {
            Tunnel::Ipip => {
                prop_assert_eq!(proto, inner_proto);
                ip_payload
            }
            Tunnel::Gre(g) => {
                prop_assert_eq!(proto, IpProtocol::GRE);
                let p = GrePacket::new_checked(ip_payload).unwrap();
                let r = GreRepr::parse(&p).unwrap();
                prop_assert_eq!(r.key, g.key);
                prop_assert_eq!(r.sequence_number, g.sequence_number);
                prop_assert_eq!(r.checksum, g.checksum);
                prop_assert_eq!(r.recursion_control, g.recursion_control);
                prop_assert_eq!(r.protocol_type, if v6_inner { EtherType::IPV6 } else { EtherType::IPV4 });
                p.payload()
            }
            Tunnel::Gue(g) => {
                prop_assert_eq!(proto, IpProtocol::UDP);
                let u = UdpPacket::new_checked(ip_payload).unwrap();
                let verify = g.udp_checksum.then(|| outer.addrs());
                prop_assert!(UdpRepr::parse(&u, verify.as_ref()).is_ok());
                prop_assert_eq!((u.src_port(), u.dst_port()), (g.src_port, g.dst_port));
                prop_assert_eq!(u.checksum() == 0, !g.udp_checksum);
                if g.direct {
                    let variant = if v6_inner { GueVariant::DirectIpv6 } else { GueVariant::DirectIpv4 };
                    prop_assert_eq!(gue::classify(u.payload()), Ok(variant));
                    u.payload()
                } else {
                    let h = GuePacket::new_checked(u.payload()).unwrap();
                    prop_assert_eq!(GueRepr::parse(&h), Ok(GueRepr::data(inner_proto)));
                    h.payload()
                }
            }
        };
        prop_assert_eq!(carried, &inner[..]);
    }
}

proptest! {
    /// A buffer shorter than `buffer_len` is an error, never a panic, and is left untouched.
    #[test]
    fn short_buffers_are_refused(ip in ipv4_repr(), tunnel in tunnel(), inner in inner(), cut in any::<usize>()) {
        let mut buf = vec![0xeeu8; cut % ip.buffer_len()];
        prop_assert_eq!(ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])), Err(Error::Truncated));
        prop_assert!(buf.iter().all(|&b| b == 0xee));

        let tcp = TcpRepr {
            src_port: 1, dst_port: 2, seq_number: 3, ack_number: 4, flags: TcpFlags::SYN, window_len: 5,
            urgent_at: 0, options: &[1, 1, 1, 0], payload: &inner,
        };
        let mut buf = vec![0xeeu8; cut % tcp.buffer_len()];
        prop_assert_eq!(tcp.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &v4()), Err(Error::Truncated));
        prop_assert!(buf.iter().all(|&b| b == 0xee));

        // An encapsulation with no room for the inner packet's first byte.
        let encap = Encap { outer: OuterIp::V4(Ipv4Outer::new(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST)), tunnel };
        let mut buf = vec![0xeeu8; cut % (encap.header_len() + 1)];
        prop_assert_eq!(encap.emit(&mut buf), Err(Error::Truncated));
        prop_assert!(buf.iter().all(|&b| b == 0xee));
    }
}

fn v4() -> IpPair {
    IpPair::V4 {
        src: Ipv4Addr::new(192, 0, 2, 1),
        dst: Ipv4Addr::new(192, 0, 2, 2),
    }
}
