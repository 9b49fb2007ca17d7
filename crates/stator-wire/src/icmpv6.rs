//! ICMP for IPv6 (RFC 4443).
//!
//! The layout is ICMPv4's (type, code, checksum, four "rest of header" bytes, data); the
//! differences are the type numbers (errors are below 128) and the checksum, which covers the
//! IPv6 pseudo-header and so needs the addresses. A view's buffer is exactly the message.

use core::fmt;
use core::net::Ipv6Addr;

use crate::checksum;
use crate::icmp::InvokingPacket;
use crate::ip::IpProtocol;
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
}

/// The length of an ICMPv6 header (type, code, checksum and the four "rest of header" bytes).
pub const HEADER_LEN: usize = 8;

/// An ICMPv6 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Icmpv6Message(pub u8);

impl Icmpv6Message {
    /// Destination unreachable (an error).
    pub const DST_UNREACHABLE: Self = Self(1);
    /// Packet too big (an error): the IPv6 path-MTU signal.
    pub const PACKET_TOO_BIG: Self = Self(2);
    /// Time exceeded (an error).
    pub const TIME_EXCEEDED: Self = Self(3);
    /// Parameter problem (an error).
    pub const PARAM_PROBLEM: Self = Self(4);
    /// Echo request.
    pub const ECHO_REQUEST: Self = Self(128);
    /// Echo reply.
    pub const ECHO_REPLY: Self = Self(129);
    /// Neighbor solicitation (RFC 4861).
    pub const NEIGHBOR_SOLICIT: Self = Self(135);
    /// Neighbor advertisement (RFC 4861).
    pub const NEIGHBOR_ADVERT: Self = Self(136);

    /// Whether this is an error message: types 0 to 127 (RFC 4443 §2.1). Errors quote their
    /// invoking packet.
    #[must_use]
    pub const fn is_error(self) -> bool {
        self.0 < 128
    }
}

impl fmt::Display for Icmpv6Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::DST_UNREACHABLE => f.write_str("destination unreachable"),
            Self::PACKET_TOO_BIG => f.write_str("packet too big"),
            Self::TIME_EXCEEDED => f.write_str("time exceeded"),
            Self::PARAM_PROBLEM => f.write_str("parameter problem"),
            Self::ECHO_REQUEST => f.write_str("echo request"),
            Self::ECHO_REPLY => f.write_str("echo reply"),
            Self::NEIGHBOR_SOLICIT => f.write_str("neighbor solicitation"),
            Self::NEIGHBOR_ADVERT => f.write_str("neighbor advertisement"),
            Self(n) => write!(f, "type {n}"),
        }
    }
}

/// A read/write view of an ICMPv6 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic until [`check_len`] succeeds.
    ///
    /// [`check_len`]: Self::check_len
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks that every accessor can read it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 8-byte header.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, range: core::ops::Range<usize>) -> u16 {
        let d = &self.buffer.as_ref()[range];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// The message type.
    pub fn msg_type(&self) -> Icmpv6Message {
        Icmpv6Message(self.buffer.as_ref()[field::TYPE])
    }

    /// The code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The four "rest of header" bytes, as one big-endian word.
    pub fn rest_of_header(&self) -> u32 {
        let d = &self.buffer.as_ref()[field::REST];
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// The MTU of a packet-too-big message.
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// The pointer of a parameter-problem message: the offset of the offending byte.
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// The identifier of an echo request or reply.
    pub fn echo_ident(&self) -> u16 {
        self.u16_at(field::ECHO_IDENT)
    }

    /// The sequence number of an echo request or reply.
    pub fn echo_seq_no(&self) -> u16 {
        self.u16_at(field::ECHO_SEQNO)
    }

    /// Whether this is an error message, which quotes an invoking packet.
    pub fn is_error(&self) -> bool {
        self.msg_type().is_error()
    }

    fn computed_sum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> Option<u16> {
        let data = self.buffer.as_ref();
        let len = u32::try_from(data.len()).ok()?;
        let pseudo = checksum::pseudo_header_v6(src, dst, IpProtocol::ICMPV6, len);
        Some(checksum::combine(&[pseudo, checksum::sum(data)]))
    }

    /// Whether the checksum verifies over the whole buffer and the pseudo-header.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        self.computed_sum(src, dst) == Some(0xffff)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Icmpv6Packet<&'a T> {
    /// The data after the 8-byte header: the echo payload, or an error's invoking packet.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Reads the invoking packet an error message quotes. Meaningful only for errors
    /// ([`is_error`](Self::is_error)); the data of any other message is parsed all the same.
    ///
    /// # Errors
    /// Those of [`InvokingPacket::parse_ipv6`].
    pub fn invoking_packet(&self) -> Result<InvokingPacket<'a>> {
        InvokingPacket::parse_ipv6(self.data())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg_type: Icmpv6Message) {
        self.buffer.as_mut()[field::TYPE] = msg_type.0;
    }

    /// Sets the code.
    pub fn set_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the four "rest of header" bytes.
    pub fn set_rest_of_header(&mut self, rest: u32) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&rest.to_be_bytes());
    }

    /// Computes the checksum over the whole buffer and the pseudo-header, and stores it.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let value = self.computed_sum(src, dst).map_or(0, |s| !s);
        self.set_checksum(value);
    }

    /// The data after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The parsed form of an ICMPv6 message; like [`Icmpv4Repr`](crate::icmpv4::Icmpv4Repr), the
/// "rest of header" stays raw so every message round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmpv6Repr<'a> {
    /// The message type.
    pub msg_type: Icmpv6Message,
    /// The code.
    pub code: u8,
    /// The four "rest of header" bytes as a big-endian word (MTU of packet too big, pointer of
    /// parameter problem, identifier and sequence number of an echo).
    pub rest_of_header: u32,
    /// The data after the header.
    pub data: &'a [u8],
}

impl<'a> Icmpv6Repr<'a> {
    /// An echo request.
    #[must_use]
    pub const fn echo_request(ident: u16, seq_no: u16, data: &'a [u8]) -> Self {
        let rest_of_header = ((ident as u32) << 16) | seq_no as u32;
        Self {
            msg_type: Icmpv6Message::ECHO_REQUEST,
            code: 0,
            rest_of_header,
            data,
        }
    }

    /// A packet-too-big error announcing `mtu`, quoting `invoking` (as much of the offending
    /// packet as fits in the minimum MTU).
    #[must_use]
    pub const fn packet_too_big(mtu: u32, invoking: &'a [u8]) -> Self {
        Self {
            msg_type: Icmpv6Message::PACKET_TOO_BIG,
            code: 0,
            rest_of_header: mtu,
            data: invoking,
        }
    }

    /// Parses a checked message and verifies its checksum against the addresses of the IPv6
    /// packet that carried it.
    ///
    /// # Errors
    /// Those of [`Icmpv6Packet::check_len`], [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv6Packet<&'a T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::BadChecksum);
        }
        Ok(Self {
            msg_type: packet.msg_type(),
            code: packet.code(),
            rest_of_header: packet.rest_of_header(),
            data: packet.data(),
        })
    }

    /// The length of the message [`emit`](Self::emit) writes: 8 plus the data.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data.len()
    }

    /// Writes the whole message, checksum included, at the start of `packet`'s buffer. The
    /// checksum covers [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Icmpv6Packet<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) -> Result<()> {
        let Some(data) = packet.buffer.as_mut().get_mut(..self.buffer_len()) else {
            return Err(Error::Truncated);
        };
        let mut message = Icmpv6Packet::new_unchecked(data);
        message.set_msg_type(self.msg_type);
        message.set_code(self.code);
        message.set_rest_of_header(self.rest_of_header);
        message.data_mut().copy_from_slice(self.data);
        message.fill_checksum(src, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An echo request 2001:db8::1 -> 2001:db8::2, identifier 1, sequence 2, "ping".
    static ECHO: [u8; 12] = [
        0x80, 0x00, 0x45, 0x70, 0x00, 0x01, 0x00, 0x02, 0x70, 0x69, 0x6e, 0x67,
    ];

    // Packet too big (MTU 1280) from router 2001:db8:ff::1 to 2001:db8:1::5, quoting a UDP
    // datagram 2001:db8:1::5:443 -> 2001:db8:2::80:60000 (checksums computed with Python).
    static TOO_BIG: [u8; 56] = [
        0x02, 0x00, 0x2b, 0x99, 0x00, 0x00, 0x05, 0x00, 0x60, 0x00, 0x00, 0x00, 0x05, 0xac, 0x11,
        0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x05, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x80, 0x01, 0xbb, 0xea, 0x60, 0x05, 0xac, 0xab, 0xcd,
    ];

    fn addr(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn test_deconstruct_echo() {
        let packet = Icmpv6Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(packet.msg_type(), Icmpv6Message::ECHO_REQUEST);
        assert_eq!(packet.code(), 0);
        assert_eq!(packet.checksum(), 0x4570);
        assert_eq!(packet.echo_ident(), 1);
        assert_eq!(packet.echo_seq_no(), 2);
        assert_eq!(packet.data(), b"ping");
        assert!(!packet.is_error());
        assert!(packet.verify_checksum(&addr("2001:db8::1"), &addr("2001:db8::2")));
        assert!(!packet.verify_checksum(&addr("2001:db8::1"), &addr("2001:db8::3")));
    }

    #[test]
    fn test_construct_echo() {
        let (src, dst) = (addr("2001:db8::1"), addr("2001:db8::2"));
        let repr = Icmpv6Repr::echo_request(1, 2, b"ping");
        let mut buf = [0u8; 12];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst)
            .unwrap();
        assert_eq!(buf, ECHO);
        assert_eq!(
            Icmpv6Repr::parse(&Icmpv6Packet::new_checked(&buf[..]).unwrap(), &src, &dst),
            Ok(repr)
        );
    }

    #[test]
    fn test_deconstruct_packet_too_big() {
        let packet = Icmpv6Packet::new_checked(&TOO_BIG[..]).unwrap();
        assert!(packet.is_error());
        assert_eq!(packet.msg_type(), Icmpv6Message::PACKET_TOO_BIG);
        assert_eq!(packet.mtu(), 1280);
        assert!(packet.verify_checksum(&addr("2001:db8:ff::1"), &addr("2001:db8:1::5")));
        let inv = packet.invoking_packet().unwrap();
        assert_eq!(inv.addrs.src(), addr("2001:db8:1::5"));
        assert_eq!(inv.addrs.dst(), addr("2001:db8:2::80"));
        assert_eq!(inv.protocol, IpProtocol::UDP);
        assert_eq!((inv.src_port, inv.dst_port), (443, 60000));
        assert_eq!(inv.l4_offset, 40);
    }

    #[test]
    fn test_construct_packet_too_big() {
        let (src, dst) = (addr("2001:db8:ff::1"), addr("2001:db8:1::5"));
        let repr = Icmpv6Repr::packet_too_big(1280, &TOO_BIG[8..]);
        let mut buf = [0u8; 56];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst)
            .unwrap();
        assert_eq!(buf, TOO_BIG);
    }

    #[test]
    fn errors() {
        let (src, dst) = (addr("2001:db8::1"), addr("2001:db8::2"));
        assert_eq!(
            Icmpv6Packet::new_checked(&ECHO[..7]).err(),
            Some(Error::Truncated)
        );
        let packet = Icmpv6Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&packet, &dst, &dst),
            Err(Error::BadChecksum)
        );
        let mut buf = [0u8; 11];
        let repr = Icmpv6Repr::echo_request(1, 2, b"ping");
        assert_eq!(
            repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst),
            Err(Error::Truncated)
        );
        // The quote of a too-big error must at least hold the fixed header.
        let short = Icmpv6Packet::new_checked(&TOO_BIG[..47]).unwrap();
        assert_eq!(short.invoking_packet(), Err(Error::Truncated));
    }

    #[test]
    fn message_names() {
        use std::string::ToString;
        assert_eq!(Icmpv6Message::PACKET_TOO_BIG.to_string(), "packet too big");
        assert_eq!(Icmpv6Message(200).to_string(), "type 200");
    }
}
