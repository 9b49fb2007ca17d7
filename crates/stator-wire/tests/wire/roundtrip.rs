//! For every representation: emit, then parse, gives back the same value; and the emitted bytes
//! pass the view's `check_len`.

#[allow(unused_imports)]
use crate::common;

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;
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
    /// A buffer shorter than `buffer_len` is an error, never a panic, and is left untouched.
    #[test]
    fn short_buffers_are_refused(ip in ipv4_repr(), inner in inner(), cut in any::<usize>()) {
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

    }
}

fn v4() -> IpPair {
    IpPair::V4 {
        src: Ipv4Addr::new(192, 0, 2, 1),
        dst: Ipv4Addr::new(192, 0, 2, 2),
    }
}
