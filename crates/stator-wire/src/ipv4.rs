//! IPv4 headers (RFC 791), options included.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |R|D|M|     Fragment Offset     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options (IHL > 5)                          |
//! ```
//!
//! The view's buffer may extend past the packet (Ethernet padding): [`Ipv4Packet::payload`] ends
//! at the total length, not at the end of the buffer.

use core::net::Ipv4Addr;

use crate::checksum;
use crate::ip::{FragmentInfo, IpProtocol};
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

/// The length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// The longest IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
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

    /// Checks that the header, its options and the packet its total length describes all lie in
    /// the buffer. The version field is not checked here; [`Ipv4Repr::parse`] does.
    ///
    /// Setters that change a length ([`set_header_len`](Self::set_header_len),
    /// [`set_total_len`](Self::set_total_len)) void this check.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 20 bytes or than the total length;
    /// [`Error::BadHeaderLength`] if IHL is below 5; [`Error::BadLength`] if the total length is
    /// shorter than the header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        let total_len = usize::from(self.total_len());
        if header_len < HEADER_LEN {
            Err(Error::BadHeaderLength)
        } else if total_len < header_len {
            Err(Error::BadLength)
        } else if len < total_len {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, range: core::ops::Range<usize>) -> u16 {
        let d = &self.buffer.as_ref()[range];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// The version field (4 for a well-formed packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL × 4), options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The DSCP (upper six bits of the former TOS byte).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// The ECN codepoint (lower two bits of the former TOS byte).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// The whole DSCP/ECN byte (the former TOS byte).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// The total length: header and payload, in bytes.
    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// The identification field.
    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// The "don't fragment" flag.
    pub fn dont_frag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_DF != 0
    }

    /// The "more fragments" flag.
    pub fn more_frags(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_MF != 0
    }

    /// The fragment offset, in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.u16_at(field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Whether this packet is a fragment (more fragments follow, or it does not start at 0).
    pub fn is_fragment(&self) -> bool {
        self.u16_at(field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Where this fragment sits in its datagram, or `None` if the packet is not a fragment.
    pub fn fragment(&self) -> Option<FragmentInfo> {
        self.is_fragment().then(|| FragmentInfo {
            id: u32::from(self.ident()),
            offset: self.frag_offset(),
            more: self.more_frags(),
        })
    }

    /// The time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let d = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(d[0], d[1], d[2], d[3])
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let d = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(d[0], d[1], d[2], d[3])
    }

    /// Whether the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The options: the header bytes after the first 20 (empty when IHL is 5).
    pub fn options(&self) -> &'a [u8] {
        let header_len = self.header_len();
        &self.buffer.as_ref()[HEADER_LEN..header_len]
    }

    /// The payload: from the end of the header to the total length (padding excluded).
    pub fn payload(&self) -> &'a [u8] {
        let range = self.header_len()..usize::from(self.total_len());
        &self.buffer.as_ref()[range]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16_at(&mut self, range: core::ops::Range<usize>, value: u16) {
        self.buffer.as_mut()[range].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (version << 4);
    }

    /// Sets the header length, in bytes (rounded down to a multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: usize) {
        let ihl = (len.min(MAX_HEADER_LEN) / 4) as u8;
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ihl;
    }

    /// Sets the DSCP/ECN byte.
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = tos;
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        self.set_u16_at(field::LENGTH, len);
    }

    /// Sets the identification field.
    pub fn set_ident(&mut self, ident: u16) {
        self.set_u16_at(field::IDENT, ident);
    }

    /// Sets the flags and fragment offset word: reserved bit clear, `dont_frag`, `more_frags`,
    /// and `offset` in bytes (its low three bits are dropped).
    pub fn set_flags_and_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut word = (offset >> 3) & OFFSET_MASK;
        if dont_frag {
            word |= FLAG_DF;
        }
        if more_frags {
            word |= FLAG_MF;
        }
        self.set_u16_at(field::FLG_OFF, word);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.0;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.set_u16_at(field::CHECKSUM, value);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// Computes the header checksum over the header (options included) and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let header_len = self.header_len();
        let value = checksum::checksum(&self.buffer.as_ref()[..header_len]);
        self.set_checksum(value);
    }

    /// The options, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let header_len = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..header_len]
    }

    /// The payload, mutable (up to the total length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.header_len()..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

/// The parsed header of an IPv4 packet, options aside.
///
/// Options are readable through [`Ipv4Packet::options`] but are not part of the representation:
/// [`emit`](Self::emit) always writes a 20-byte header (IHL 5), the only header a load balancer
/// emits. The reserved ("evil") flag bit is ignored on parse and written as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: IpProtocol,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// The DSCP/ECN byte.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// "Don't fragment" flag.
    pub dont_frag: bool,
    /// "More fragments" flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8, at most 65528).
    pub frag_offset: u16,
}

impl Ipv4Repr {
    /// Parses a checked packet: version must be 4 and the header checksum must verify.
    ///
    /// # Errors
    /// Those of [`Ipv4Packet::check_len`], [`Error::BadVersion`], [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::BadVersion);
        }
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
        })
    }

    /// The length of the header [`emit`](Self::emit) writes: always 20.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The length of the whole packet this header describes: header and payload.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header, checksum computed, at the start of `packet`'s buffer. The payload
    /// is left alone.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the total length exceeds 65535 or the fragment offset is not
    /// a multiple of 8; [`Error::Truncated`] if the buffer is shorter than
    /// [`buffer_len`](Self::buffer_len) (the header would claim bytes that are not there).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) -> Result<()> {
        let total_len = u16::try_from(self.buffer_len()).map_err(|_| Error::Unrepresentable)?;
        if !self.frag_offset.is_multiple_of(8) {
            return Err(Error::Unrepresentable);
        }
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.buffer.as_mut()[field::VER_IHL] = 0x45;
        packet.set_tos(self.tos);
        packet.set_total_len(total_len);
        packet.set_ident(self.ident);
        packet.set_flags_and_offset(self.dont_frag, self.more_frags, self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A UDP/IPv4 packet from 192.168.0.1 to 192.168.0.199 (the well-known example header,
    // checksum 0xb861), cut to carry four bytes of payload and so re-totalled: total length 24,
    // checksum 0xb8bc (by RFC 1624 arithmetic: 0xb861 + 0x0073 - 0x0018).
    static PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x18, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0xbc, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 0xde, 0xad, 0xbe, 0xef,
    ];

    // A fragment with a 4-byte option (a router-alert option, RFC 2113), IHL 6, DSCP AF41, ECN
    // ECT(0), ident 0x1c46, MF set, offset 1480, TTL 64, protocol TCP, 10.0.0.1 -> 10.0.0.2.
    static WITH_OPTIONS: [u8; 28] = [
        0x46, 0x8a, 0x00, 0x1c, 0x1c, 0x46, 0x20, 0xb9, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, 0x94, 0x04, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04,
    ];

    fn with_options() -> [u8; 28] {
        let mut buf = WITH_OPTIONS;
        let c = checksum::checksum(&buf[..24]);
        buf[10..12].copy_from_slice(&c.to_be_bytes());
        buf
    }

    #[test]
    fn test_deconstruct() {
        let packet = Ipv4Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.dscp(), 0);
        assert_eq!(packet.ecn(), 0);
        assert_eq!(packet.total_len(), 24);
        assert_eq!(packet.ident(), 0);
        assert!(packet.dont_frag());
        assert!(!packet.more_frags());
        assert_eq!(packet.frag_offset(), 0);
        assert!(!packet.is_fragment());
        assert_eq!(packet.fragment(), None);
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), IpProtocol::UDP);
        assert_eq!(packet.checksum(), 0xb8bc);
        assert!(packet.verify_checksum());
        assert_eq!(packet.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert_eq!(packet.options(), &[] as &[u8]);
        assert_eq!(packet.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn test_deconstruct_options_and_fragment() {
        let buf = with_options();
        let packet = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.header_len(), 24);
        assert_eq!(packet.dscp(), 34);
        assert_eq!(packet.ecn(), 2);
        assert!(!packet.dont_frag());
        assert!(packet.more_frags());
        assert_eq!(packet.frag_offset(), 1480);
        assert_eq!(
            packet.fragment(),
            Some(FragmentInfo {
                id: 0x1c46,
                offset: 1480,
                more: true
            })
        );
        assert_eq!(packet.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(packet.payload(), &[1, 2, 3, 4]);
        assert!(packet.verify_checksum());
        let repr = Ipv4Repr::parse(&packet).unwrap();
        assert_eq!(repr.payload_len, 4);
        assert_eq!(repr.protocol, IpProtocol::TCP);
    }

    #[test]
    fn test_construct() {
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::new(192, 168, 0, 1),
            dst_addr: Ipv4Addr::new(192, 168, 0, 199),
            protocol: IpProtocol::UDP,
            payload_len: 4,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        };
        let mut buf = [0xa5u8; 24];
        buf[20..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, PACKET);
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn padding_is_not_payload() {
        let mut buf = [0u8; 46];
        buf[..24].copy_from_slice(&PACKET);
        let packet = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.payload().len(), 4);
    }

    #[test]
    fn length_errors() {
        assert_eq!(
            Ipv4Packet::new_checked(&PACKET[..19]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv4Packet::new_checked(&PACKET[..23]).err(),
            Some(Error::Truncated)
        );
        let mut buf = PACKET;
        buf[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).err(),
            Some(Error::BadHeaderLength)
        );
        buf[0] = 0x46;
        buf[3] = 0x17;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).err(),
            Some(Error::BadLength)
        );
        buf[0] = 0x4f;
        buf[3] = 0x18;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).err(),
            Some(Error::BadLength)
        );
    }

    #[test]
    fn parse_errors() {
        let mut buf = PACKET;
        buf[0] = 0x65;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&buf[..])),
            Err(Error::BadVersion)
        );
        let mut buf = PACKET;
        buf[8] = 63;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&buf[..])),
            Err(Error::BadChecksum)
        );
    }

    #[test]
    fn emit_errors() {
        let mut repr = Ipv4Repr::parse(&Ipv4Packet::new_checked(&PACKET[..]).unwrap()).unwrap();
        let mut buf = [0u8; 24];
        repr.payload_len = 5;
        assert_eq!(
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])),
            Err(Error::Truncated)
        );
        repr.payload_len = 65516;
        assert_eq!(
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        repr.payload_len = 4;
        repr.frag_offset = 3;
        assert_eq!(
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        assert_eq!(buf, [0u8; 24], "a failed emit writes nothing");
    }

    #[test]
    fn setters_round_trip() {
        let mut buf = with_options();
        let mut packet = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        packet.set_flags_and_offset(true, false, 8);
        packet.set_ttl(1);
        packet.set_dst_addr(Ipv4Addr::new(10, 9, 8, 7));
        packet.options_mut()[2] = 0xaa;
        packet.payload_mut()[0] = 0xbb;
        packet.fill_checksum();
        assert!(packet.verify_checksum());
        assert!(packet.dont_frag() && !packet.more_frags());
        assert_eq!(packet.frag_offset(), 8);
        assert_eq!(buf[22], 0xaa);
        assert_eq!(buf[24], 0xbb);
    }
}
