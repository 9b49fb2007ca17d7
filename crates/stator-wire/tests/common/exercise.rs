//! Runs every parser of stator-wire over arbitrary bytes, calls every accessor a successful check
//! allows, and checks the oracles that must hold for any input:
//! - nothing panics (the contract of the crate);
//! - what parses re-emits, and the re-emitted bytes parse back to the same representation;
//! - the views and `parse_flow` agree.
//!
//! Used by the property tests (`tests/wire/robustness.rs`) and by every cargo-fuzz target, which
//! include this file with `#[path]`, so that both test the same things.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::hint::black_box;
use std::vec;

use stator_wire::*;

/// The addresses used where a checksum needs a pseudo-header.
pub fn v4_pair() -> IpPair {
    IpPair::V4 {
        src: Ipv4Addr::new(192, 0, 2, 1),
        dst: Ipv4Addr::new(198, 51, 100, 2),
    }
}

/// The IPv6 addresses used where a checksum needs a pseudo-header.
pub fn v6_pair() -> IpPair {
    IpPair::V6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    }
}

pub fn ethernet(data: &[u8]) {
    let Ok(frame) = EthernetFrame::new_checked(data) else {
        return;
    };
    black_box((
        frame.dst_addr(),
        frame.src_addr(),
        frame.outer_ethertype(),
        frame.vlan_tag(),
    ));
    black_box((frame.ethertype(), frame.header_len(), frame.payload()));
    let repr = EthernetRepr::parse(&frame).expect("a checked frame parses");
    let mut buf = vec![0u8; repr.buffer_len()];
    match repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..])) {
        Ok(()) => {
            let again =
                EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).unwrap()).unwrap();
            assert_eq!(again, repr);
            assert_eq!(buf[..], data[..repr.buffer_len()]);
        }
        // A double-tagged frame parses with ethertype 0x8100 and a tag: representable. The
        // only unrepresentable parse result would be no tag and ethertype 0x8100, which
        // cannot come out of parse.
        Err(e) => panic!("parsed Ethernet header does not re-emit: {e}"),
    }
}

pub fn ipv4(data: &[u8]) {
    let Ok(packet) = Ipv4Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.version(),
        packet.header_len(),
        packet.dscp(),
        packet.ecn(),
        packet.tos(),
    ));
    black_box((
        packet.total_len(),
        packet.ident(),
        packet.dont_frag(),
        packet.more_frags(),
    ));
    black_box((
        packet.frag_offset(),
        packet.is_fragment(),
        packet.fragment(),
        packet.ttl(),
    ));
    black_box((
        packet.protocol(),
        packet.checksum(),
        packet.src_addr(),
        packet.dst_addr(),
    ));
    black_box((packet.options(), packet.payload(), packet.verify_checksum()));
    assert_eq!(packet.options().len() + 20, packet.header_len());
    let Ok(repr) = Ipv4Repr::parse(&packet) else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]))
        .expect("parsed IPv4 re-emits");
    assert_eq!(
        Ipv4Repr::parse(&Ipv4Packet::new_checked(&buf[..]).unwrap()),
        Ok(repr)
    );
}

pub fn ipv6(data: &[u8]) {
    let Ok(packet) = Ipv6Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.version(),
        packet.traffic_class(),
        packet.flow_label(),
        packet.payload_len(),
    ));
    black_box((
        packet.next_header(),
        packet.hop_limit(),
        packet.src_addr(),
        packet.dst_addr(),
    ));
    black_box(packet.payload());
    if let Ok(upper) = packet.upper_layer() {
        assert!(upper.offset <= packet.total_len());
        assert!(upper.offset >= 40);
    }
    let Ok(repr) = Ipv6Repr::parse(&packet) else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]))
        .expect("parsed IPv6 re-emits");
    assert_eq!(
        Ipv6Repr::parse(&Ipv6Packet::new_checked(&buf[..]).unwrap()),
        Ok(repr)
    );
    assert_eq!(buf[..40], data[..40]);
}

pub fn ipv6ext(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    if let Ok(upper) = ipv6ext::walk(rest, IpProtocol(first), 0) {
        assert!(upper.offset <= rest.len());
    }
    if let Ok(header) = Ipv6ExtHeader::new_checked(rest) {
        black_box((header.next_header(), header.header_len(), header.data()));
        let repr = Ipv6ExtHeaderRepr::parse(&header).unwrap();
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Ipv6ExtHeader::new_unchecked(&mut buf[..]))
            .expect("parsed header re-emits");
        assert_eq!(buf[..], rest[..repr.buffer_len()]);
    }
    if let Ok(header) = Ipv6FragmentHeader::new_checked(rest) {
        black_box((
            header.next_header(),
            header.frag_offset(),
            header.more_frags(),
            header.ident(),
        ));
        let repr = Ipv6FragmentRepr::parse(&header).unwrap();
        let mut buf = [0u8; 8];
        repr.emit(&mut Ipv6FragmentHeader::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(
            Ipv6FragmentRepr::parse(&Ipv6FragmentHeader::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
    }
}

pub fn tcp(data: &[u8]) {
    let Ok(packet) = TcpPacket::new_checked(data) else {
        return;
    };
    black_box((
        packet.src_port(),
        packet.dst_port(),
        packet.seq_number(),
        packet.ack_number(),
    ));
    black_box((
        packet.header_len(),
        packet.flags(),
        packet.window_len(),
        packet.checksum(),
    ));
    black_box((packet.urgent_at(), packet.options(), packet.payload()));
    for addrs in [v4_pair(), v6_pair()] {
        let verified = packet.verify_checksum(&addrs);
        assert_eq!(TcpRepr::parse(&packet, &addrs).is_ok(), verified);
        // Rebuild from the view's fields (the checksum of random bytes rarely verifies), emit
        // with a fresh checksum, and the result must parse back to the same fields.
        let repr = TcpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            urgent_at: packet.urgent_at(),
            options: packet.options(),
            payload: packet.payload(),
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &addrs)
            .expect("viewed TCP re-emits");
        assert_eq!(
            TcpRepr::parse(&TcpPacket::new_checked(&buf[..]).unwrap(), &addrs),
            Ok(repr)
        );
        if verified {
            // Same bytes but the checksum, which may be 0x0000 where the sender wrote its
            // equivalent 0xffff.
            assert_eq!((&buf[..16], &buf[18..]), (&data[..16], &data[18..]));
        }
    }
}

pub fn udp(data: &[u8]) {
    let Ok(packet) = UdpPacket::new_checked(data) else {
        return;
    };
    black_box((
        packet.src_port(),
        packet.dst_port(),
        packet.len(),
        packet.checksum(),
        packet.payload(),
    ));
    let repr = UdpRepr::parse(&packet, None).expect("a checked datagram parses unverified");
    for addrs in [v4_pair(), v6_pair()] {
        assert_eq!(
            UdpRepr::parse(&packet, Some(&addrs)).is_ok(),
            packet.verify_checksum(&addrs)
        );
        let mut buf = vec![0u8; repr.buffer_len()];
        buf[8..].copy_from_slice(packet.payload());
        repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), Some(&addrs))
            .unwrap();
        assert_eq!(
            UdpRepr::parse(&UdpPacket::new_checked(&buf[..]).unwrap(), Some(&addrs)),
            Ok(repr)
        );
    }
}

pub fn icmpv4(data: &[u8]) {
    let Ok(packet) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.msg_type(),
        packet.code(),
        packet.checksum(),
        packet.rest_of_header(),
    ));
    black_box((
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.next_hop_mtu(),
        packet.is_error(),
    ));
    black_box((
        packet.is_frag_needed(),
        packet.data(),
        packet.verify_checksum(),
    ));
    if let Ok(inv) = packet.invoking_packet() {
        invoking(&inv);
    }
    let repr = Icmpv4Repr {
        msg_type: packet.msg_type(),
        code: packet.code(),
        rest_of_header: packet.rest_of_header(),
        data: packet.data(),
    };
    assert_eq!(Icmpv4Repr::parse(&packet).is_ok(), packet.verify_checksum());
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(
        Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&buf[..]).unwrap()),
        Ok(repr)
    );
}

pub fn icmpv6(data: &[u8]) {
    let Ok(packet) = Icmpv6Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.msg_type(),
        packet.code(),
        packet.checksum(),
        packet.mtu(),
        packet.pointer(),
    ));
    black_box((
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.is_error(),
        packet.data(),
    ));
    if let Ok(inv) = packet.invoking_packet() {
        invoking(&inv);
    }
    let IpPair::V6 { src, dst } = v6_pair() else {
        unreachable!()
    };
    assert_eq!(
        Icmpv6Repr::parse(&packet, &src, &dst).is_ok(),
        packet.verify_checksum(&src, &dst)
    );
    let repr = Icmpv6Repr {
        msg_type: packet.msg_type(),
        code: packet.code(),
        rest_of_header: packet.rest_of_header(),
        data: packet.data(),
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst)
        .unwrap();
    assert_eq!(
        Icmpv6Repr::parse(&Icmpv6Packet::new_checked(&buf[..]).unwrap(), &src, &dst),
        Ok(repr)
    );
}

fn invoking(inv: &InvokingPacket<'_>) {
    assert!(inv.l4_offset <= inv.bytes.len());
    assert_eq!(inv.header().len() + inv.l4().len(), inv.bytes.len());
    if inv.src_port != 0 || inv.dst_port != 0 {
        assert!(matches!(inv.protocol, IpProtocol::TCP | IpProtocol::UDP));
    }
}

pub fn gre(data: &[u8]) {
    let Ok(packet) = GrePacket::new_checked(data) else {
        return;
    };
    black_box((
        packet.checksum_present(),
        packet.routing_present(),
        packet.key_present(),
    ));
    black_box((
        packet.seq_present(),
        packet.strict_source_route(),
        packet.recursion_control(),
    ));
    black_box((
        packet.reserved_flags(),
        packet.version(),
        packet.protocol_type(),
        packet.header_len(),
    ));
    black_box((
        packet.checksum(),
        packet.key(),
        packet.sequence_number(),
        packet.payload(),
    ));
    assert!(packet.recursion_control() <= 7);
    let Ok(repr) = GreRepr::parse(&packet) else {
        assert!(!packet.verify_checksum());
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len() + packet.payload().len()];
    buf[repr.buffer_len()..].copy_from_slice(packet.payload());
    repr.emit(&mut GrePacket::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(
        GreRepr::parse(&GrePacket::new_checked(&buf[..]).unwrap()),
        Ok(repr)
    );
}

pub fn gue(data: &[u8]) {
    let variant = gue::classify(data);
    let Ok(packet) = GuePacket::new_checked(data) else {
        // A payload that classifies as a variant-0 header fails its check only when truncated.
        if variant == Ok(GueVariant::Header) {
            assert_eq!(GuePacket::new_checked(data).err(), Some(Error::Truncated));
        }
        return;
    };
    assert_eq!(variant, Ok(GueVariant::Header));
    black_box((
        packet.version(),
        packet.control(),
        packet.hlen(),
        packet.header_len(),
    ));
    black_box((
        packet.proto_ctype(),
        packet.protocol(),
        packet.flags(),
        packet.extensions(),
        packet.payload(),
    ));
    let repr = GueRepr::parse(&packet).unwrap();
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut GuePacket::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(buf[..], data[..repr.buffer_len()]);
}

/// `parse_flow` on arbitrary bytes; when it succeeds, the views must agree with it, and
/// `parse_ip` on the IP packet alone must give the same flow, offsets shifted.
pub fn flow(data: &[u8]) {
    if let Ok(t) = parse_ip(data) {
        assert_eq!((t.l3_offset, t.vlan), (0, None));
        assert!(t.l4_offset <= t.l3_end && t.l3_end <= data.len());
    }
    let Ok(t) = parse_flow(data) else { return };
    let bare = parse_ip(t.ip_packet(data)).expect("parse_ip accepts the packet parse_flow did");
    let shift = t.l3_offset;
    assert_eq!(
        bare,
        FlowTuple {
            vlan: None,
            l3_offset: 0,
            l4_offset: t.l4_offset - shift,
            l3_end: t.l3_end - shift,
            ..t
        }
    );
    assert!(t.l3_offset <= t.l4_offset && t.l4_offset <= t.l3_end && t.l3_end <= data.len());
    black_box((
        t.ip_packet(data),
        t.l4(data),
        t.is_icmp_error(),
        t.has_ports(),
        t.reversed(),
    ));
    if let Ok(Some(inv)) = t.icmp_invoking(data) {
        invoking(&inv);
    }
    let frame = EthernetFrame::new_checked(data).expect("parse_flow accepted the frame");
    assert_eq!(frame.header_len(), t.l3_offset);
    assert_eq!(frame.vlan_tag(), t.vlan);
    let ip = t.ip_packet(data);
    let l4 = t.l4(data);
    match t.addrs {
        IpPair::V4 { src, dst } => {
            let p = Ipv4Packet::new_checked(frame.payload())
                .expect("IPv4 view accepts what parse_flow did");
            assert_eq!(
                (p.src_addr(), p.dst_addr(), p.protocol()),
                (src, dst, t.protocol)
            );
            assert_eq!(p.fragment(), t.fragment);
            assert_eq!(p.header_len(), t.l4_offset - t.l3_offset);
            assert_eq!(usize::from(p.total_len()), ip.len());
        }
        IpPair::V6 { src, dst } => {
            let p = Ipv6Packet::new_checked(frame.payload())
                .expect("IPv6 view accepts what parse_flow did");
            assert_eq!((p.src_addr(), p.dst_addr()), (src, dst));
            let upper = p
                .upper_layer()
                .expect("the walk accepts what parse_flow did");
            assert_eq!(upper.protocol, t.protocol);
            assert_eq!(upper.offset, t.l4_offset - t.l3_offset);
            assert_eq!(upper.fragment.filter(|f| !f.is_atomic()), t.fragment);
            assert_eq!(p.total_len(), ip.len());
        }
    }
    if t.is_non_first_fragment() {
        assert_eq!(
            (t.src_port, t.dst_port, t.tcp_flags, t.icmp_type),
            (0, 0, TcpFlags::EMPTY, 0)
        );
        return;
    }
    match t.protocol {
        IpProtocol::TCP => {
            let s = TcpPacket::new_checked(l4).expect("TCP view accepts what parse_flow did");
            assert_eq!(
                (s.src_port(), s.dst_port(), s.flags()),
                (t.src_port, t.dst_port, t.tcp_flags)
            );
        }
        IpProtocol::UDP => {
            // The UDP length is not parse_flow's business: read the ports unchecked.
            let d = UdpPacket::new_unchecked(l4);
            assert_eq!((d.src_port(), d.dst_port()), (t.src_port, t.dst_port));
        }
        IpProtocol::ICMP => {
            let m = Icmpv4Packet::new_checked(l4).expect("ICMP view accepts what parse_flow did");
            assert_eq!((m.msg_type().0, m.code()), (t.icmp_type, t.icmp_code));
        }
        IpProtocol::ICMPV6 => {
            let m = Icmpv6Packet::new_checked(l4).expect("ICMPv6 view accepts what parse_flow did");
            assert_eq!((m.msg_type().0, m.code()), (t.icmp_type, t.icmp_code));
        }
        _ => assert_eq!((t.src_port, t.dst_port), (0, 0)),
    }
}

/// `Repr::parse` must not panic even on a view nobody checked: it checks for itself.
pub fn parse_unchecked(data: &[u8]) {
    let (v4, v6) = (v4_pair(), v6_pair());
    let IpPair::V6 { src, dst } = v6 else {
        unreachable!()
    };
    let _ = black_box(EthernetRepr::parse(&EthernetFrame::new_unchecked(data)));
    let _ = black_box(Ipv4Repr::parse(&Ipv4Packet::new_unchecked(data)));
    let _ = black_box(Ipv6Repr::parse(&Ipv6Packet::new_unchecked(data)));
    let _ = black_box(Ipv6ExtHeaderRepr::parse(&Ipv6ExtHeader::new_unchecked(
        data,
    )));
    let _ = black_box(Ipv6FragmentRepr::parse(&Ipv6FragmentHeader::new_unchecked(
        data,
    )));
    let _ = black_box(TcpRepr::parse(&TcpPacket::new_unchecked(data), &v4));
    let _ = black_box(UdpRepr::parse(&UdpPacket::new_unchecked(data), Some(&v6)));
    let _ = black_box(Icmpv4Repr::parse(&Icmpv4Packet::new_unchecked(data)));
    let _ = black_box(Icmpv6Repr::parse(
        &Icmpv6Packet::new_unchecked(data),
        &src,
        &dst,
    ));
    let _ = black_box(GreRepr::parse(&GrePacket::new_unchecked(data)));
    let _ = black_box(GueRepr::parse(&GuePacket::new_unchecked(data)));
}

/// Every parser over the same bytes.
pub fn all(data: &[u8]) {
    parse_unchecked(data);
    ethernet(data);
    ipv4(data);
    ipv6(data);
    ipv6ext(data);
    tcp(data);
    udp(data);
    icmpv4(data);
    icmpv6(data);
    gre(data);
    gue(data);
    flow(data);
    let _ = black_box(checksum::sum(data));
    let _ = black_box(InvokingPacket::parse_ipv4(data));
    let _ = black_box(InvokingPacket::parse_ipv6(data));
}
