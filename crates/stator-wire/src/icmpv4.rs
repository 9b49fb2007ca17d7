//! ICMP for IPv4 (RFC 792, RFC 1191 for the fragmentation-needed MTU).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          rest of header: identifier/sequence, unused/MTU, ... |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     data: echo payload, or the invoking packet of an error    |
//! ```
//!
//! The checksum covers the whole message, so a view's buffer is exactly the message (the IP
//! payload). The representation keeps the four "rest of header" bytes raw, so that any message,
//! known or not, round-trips exactly; typed accessors read them for the messages that define them.

use core::fmt;

use crate::checksum;
use crate::icmp::InvokingPacket;
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    pub const NEXT_HOP_MTU: Range<usize> = 6..8;
}

/// The length of an ICMPv4 header (type, code, checksum and the four "rest of header" bytes).
pub const HEADER_LEN: usize = 8;

/// The code of a destination-unreachable message that means "fragmentation needed and DF set".
pub const CODE_FRAG_NEEDED: u8 = 4;

/// An ICMPv4 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Icmpv4Message(pub u8);

impl Icmpv4Message {
    /// Echo reply.
    pub const ECHO_REPLY: Self = Self(0);
    /// Destination unreachable (an error).
    pub const DST_UNREACHABLE: Self = Self(3);
    /// Source quench (an error, deprecated by RFC 6633).
    pub const SOURCE_QUENCH: Self = Self(4);
    /// Redirect (quotes the invoking packet like an error).
    pub const REDIRECT: Self = Self(5);
    /// Echo request.
    pub const ECHO_REQUEST: Self = Self(8);
    /// Time exceeded (an error).
    pub const TIME_EXCEEDED: Self = Self(11);
    /// Parameter problem (an error).
    pub const PARAM_PROBLEM: Self = Self(12);

    /// Whether messages of this type quote an invoking packet.
    #[must_use]
    pub const fn is_error(self) -> bool {
        matches!(self.0, 3 | 4 | 5 | 11 | 12)
    }
}

impl fmt::Display for Icmpv4Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ECHO_REPLY => f.write_str("echo reply"),
            Self::DST_UNREACHABLE => f.write_str("destination unreachable"),
            Self::SOURCE_QUENCH => f.write_str("source quench"),
            Self::REDIRECT => f.write_str("redirect"),
            Self::ECHO_REQUEST => f.write_str("echo request"),
            Self::TIME_EXCEEDED => f.write_str("time exceeded"),
            Self::PARAM_PROBLEM => f.write_str("parameter problem"),
            Self(n) => write!(f, "type {n}"),
        }
    }
}

/// A read/write view of an ICMPv4 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
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
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message(self.buffer.as_ref()[field::TYPE])
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

    /// The identifier of an echo request or reply.
    pub fn echo_ident(&self) -> u16 {
        self.u16_at(field::ECHO_IDENT)
    }

    /// The sequence number of an echo request or reply.
    pub fn echo_seq_no(&self) -> u16 {
        self.u16_at(field::ECHO_SEQNO)
    }

    /// The next-hop MTU of a fragmentation-needed message (RFC 1191); 0 from routers that
    /// predate it.
    pub fn next_hop_mtu(&self) -> u16 {
        self.u16_at(field::NEXT_HOP_MTU)
    }

    /// Whether this message quotes an invoking packet (see [`Icmpv4Message::is_error`]).
    pub fn is_error(&self) -> bool {
        self.msg_type().is_error()
    }

    /// Whether this is a "fragmentation needed and DF set" message.
    pub fn is_frag_needed(&self) -> bool {
        self.msg_type() == Icmpv4Message::DST_UNREACHABLE && self.code() == CODE_FRAG_NEEDED
    }

    /// Whether the checksum verifies over the whole buffer.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Icmpv4Packet<&'a T> {
    /// The data after the 8-byte header: the echo payload, or an error's invoking packet.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Reads the invoking packet an error message quotes. Meaningful only for errors
    /// ([`is_error`](Self::is_error)); the data of any other message is parsed all the same.
    ///
    /// # Errors
    /// Those of [`InvokingPacket::parse_ipv4`].
    pub fn invoking_packet(&self) -> Result<InvokingPacket<'a>> {
        InvokingPacket::parse_ipv4(self.data())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg_type: Icmpv4Message) {
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

    /// Computes the checksum over the whole buffer and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let value = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(value);
    }

    /// The data after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The parsed form of an ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmpv4Repr<'a> {
    /// The message type.
    pub msg_type: Icmpv4Message,
    /// The code.
    pub code: u8,
    /// The four "rest of header" bytes as a big-endian word (identifier and sequence number of
    /// an echo, next-hop MTU of fragmentation needed, pointer of a parameter problem).
    pub rest_of_header: u32,
    /// The data after the header.
    pub data: &'a [u8],
}

impl<'a> Icmpv4Repr<'a> {
    /// An echo request.
    #[must_use]
    pub const fn echo_request(ident: u16, seq_no: u16, data: &'a [u8]) -> Self {
        let rest_of_header = ((ident as u32) << 16) | seq_no as u32;
        Self {
            msg_type: Icmpv4Message::ECHO_REQUEST,
            code: 0,
            rest_of_header,
            data,
        }
    }

    /// A "fragmentation needed and DF set" error announcing `mtu`, quoting `invoking` (the
    /// offending packet's IP header and at least 8 bytes of its payload).
    #[must_use]
    pub const fn frag_needed(mtu: u16, invoking: &'a [u8]) -> Self {
        Self {
            msg_type: Icmpv4Message::DST_UNREACHABLE,
            code: CODE_FRAG_NEEDED,
            rest_of_header: mtu as u32,
            data: invoking,
        }
    }

    /// Parses a checked message and verifies its checksum.
    ///
    /// # Errors
    /// Those of [`Icmpv4Packet::check_len`], [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Icmpv4Packet<&'a T>) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum() {
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
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv4Packet<T>) -> Result<()> {
        let Some(data) = packet.buffer.as_mut().get_mut(..self.buffer_len()) else {
            return Err(Error::Truncated);
        };
        let mut message = Icmpv4Packet::new_unchecked(data);
        message.set_msg_type(self.msg_type);
        message.set_code(self.code);
        message.set_rest_of_header(self.rest_of_header);
        message.data_mut().copy_from_slice(self.data);
        message.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::IpProtocol;
    use core::net::Ipv4Addr;

    // An echo request, identifier 0x1234, sequence 1, payload "abcdefgh".
    static ECHO: [u8; 16] = [
        0x08, 0x00, 0x54, 0x35, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68,
    ];

    // Fragmentation needed, MTU 1400, quoting a 1500-byte TCP packet 198.51.100.7:443 ->
    // 203.0.113.10:51000 (a backend's reply that did not fit the path). Checksums computed with
    // Python.
    static FRAG_NEEDED: [u8; 36] = [
        0x03, 0x04, 0x2a, 0x8a, 0x00, 0x00, 0x05, 0x78, 0x45, 0x00, 0x05, 0xdc, 0x1c, 0x46, 0x40,
        0x00, 0x40, 0x06, 0xb2, 0x90, 0xc6, 0x33, 0x64, 0x07, 0xcb, 0x00, 0x71, 0x0a, 0x01, 0xbb,
        0xc7, 0x38, 0x01, 0x02, 0x03, 0x04,
    ];

    #[test]
    fn test_deconstruct_echo() {
        let packet = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(packet.msg_type(), Icmpv4Message::ECHO_REQUEST);
        assert_eq!(packet.code(), 0);
        assert_eq!(packet.checksum(), 0x5435);
        assert_eq!(packet.echo_ident(), 0x1234);
        assert_eq!(packet.echo_seq_no(), 1);
        assert_eq!(packet.data(), b"abcdefgh");
        assert!(packet.verify_checksum());
        assert!(!packet.is_error());
    }

    #[test]
    fn test_construct_echo() {
        let repr = Icmpv4Repr::echo_request(0x1234, 1, b"abcdefgh");
        let mut buf = [0u8; 16];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, ECHO);
        assert_eq!(
            Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn test_deconstruct_frag_needed() {
        let packet = Icmpv4Packet::new_checked(&FRAG_NEEDED[..]).unwrap();
        assert!(packet.is_error());
        assert!(packet.is_frag_needed());
        assert_eq!(packet.next_hop_mtu(), 1400);
        assert!(packet.verify_checksum());
        let inv = packet.invoking_packet().unwrap();
        assert_eq!(inv.addrs.src(), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(inv.protocol, IpProtocol::TCP);
        assert_eq!((inv.src_port, inv.dst_port), (443, 51000));
    }

    #[test]
    fn test_construct_frag_needed() {
        let repr = Icmpv4Repr::frag_needed(1400, &FRAG_NEEDED[8..]);
        let mut buf = [0u8; 36];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, FRAG_NEEDED);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Icmpv4Packet::new_checked(&ECHO[..7]).err(),
            Some(Error::Truncated)
        );
        let mut buf = ECHO;
        buf[9] ^= 1;
        assert_eq!(
            Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&buf[..]).unwrap()),
            Err(Error::BadChecksum)
        );
        let repr = Icmpv4Repr::echo_request(1, 1, b"abcdefghi");
        assert_eq!(
            repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn message_names() {
        use std::string::ToString;
        assert_eq!(Icmpv4Message::TIME_EXCEEDED.to_string(), "time exceeded");
        assert_eq!(Icmpv4Message(42).to_string(), "type 42");
        assert!(Icmpv4Message::PARAM_PROBLEM.is_error());
        assert!(!Icmpv4Message::ECHO_REPLY.is_error());
    }
}
