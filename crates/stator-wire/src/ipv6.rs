//! The IPv6 fixed header (RFC 8200 §3). Extension headers are in [`crate::ipv6ext`].
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                Source Address (128 bits)                      |
//! |              Destination Address (128 bits)                   |
//! ```
//!
//! Jumbograms (RFC 2675: payload length 0 and a hop-by-hop jumbo option) are not supported: such
//! a packet reads as one with an empty payload, and [`Ipv6Packet::upper_layer`] reports
//! [`Error::Unsupported`] for it.

use core::net::Ipv6Addr;

use crate::ip::IpProtocol;
use crate::ipv6ext::{self, Ipv6UpperLayer};
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// The length of the IPv6 fixed header.
pub const HEADER_LEN: usize = 40;

/// The largest flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0x000f_ffff;

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
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

    /// Checks that the fixed header and the payload its length describes lie in the buffer. The
    /// version field is not checked here; [`Ipv6Repr::parse`] does.
    ///
    /// # Errors
    /// [`Error::Truncated`] if they do not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.total_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        let d = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// The version field (6 for a well-formed packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        // Bits 4..12 of the first word; the shift leaves 8 bits.
        (self.first_word() >> 20) as u8
    }

    /// The flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & MAX_FLOW_LABEL
    }

    /// The payload length: everything after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// The length of the whole packet: 40 plus the payload length.
    pub fn total_len(&self) -> usize {
        // check_len calls this before it knows the header is there.
        match self.buffer.as_ref().get(field::LENGTH) {
            Some(&[a, b]) => HEADER_LEN + usize::from(u16::from_be_bytes([a, b])),
            _ => HEADER_LEN,
        }
    }

    /// The next-header field of the fixed header: an extension header or the upper layer.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(octets)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(octets)
    }

    /// Walks the extension headers (bounded by
    /// [`MAX_EXTENSION_HEADERS`](crate::ipv6ext::MAX_EXTENSION_HEADERS)) to the upper-layer
    /// protocol: which one, where it starts (from the start of this packet), and the fragment
    /// header's contents if there is one.
    ///
    /// # Errors
    /// Those of [`ipv6ext::walk`]; [`Error::Unsupported`] for a jumbogram.
    pub fn upper_layer(&self) -> Result<Ipv6UpperLayer> {
        if self.payload_len() == 0 && self.next_header() == IpProtocol::HOPOPT {
            return Err(Error::Unsupported);
        }
        let packet = &self.buffer.as_ref()[..self.total_len()];
        ipv6ext::walk(packet, self.next_header(), HEADER_LEN)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// The payload: extension headers and upper layer, up to the payload length (padding
    /// excluded).
    pub fn payload(&self) -> &'a [u8] {
        let end = self.total_len();
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_first_word(&mut self, word: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&word.to_be_bytes());
    }

    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let word = (self.first_word() & 0x0fff_ffff) | (u32::from(version & 0x0f) << 28);
        self.set_first_word(word);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let word = (self.first_word() & 0xf00f_ffff) | (u32::from(tc) << 20);
        self.set_first_word(word);
    }

    /// Sets the flow label (its bits above the 20th are dropped).
    pub fn set_flow_label(&mut self, label: u32) {
        let word = (self.first_word() & !MAX_FLOW_LABEL) | (label & MAX_FLOW_LABEL);
        self.set_first_word(word);
    }

    /// Sets the payload length. This voids [`check_len`](Self::check_len).
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the next-header field.
    pub fn set_next_header(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = protocol.0;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The payload, mutable (up to the payload length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The parsed fixed header of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// The next-header field of the fixed header.
    pub next_header: IpProtocol,
    /// Payload length in bytes (extension headers included).
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Parses the fixed header of a checked packet; version must be 6.
    ///
    /// # Errors
    /// Those of [`Ipv6Packet::check_len`], [`Error::BadVersion`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv6Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::BadVersion);
        }
        Ok(Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// The length of the header [`emit`](Self::emit) writes: always 40.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The length of the whole packet this header describes: 40 plus the payload length.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header at the start of `packet`'s buffer; the payload is left alone.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the payload length exceeds 65535 or the flow label 20 bits;
    /// [`Error::Truncated`] if the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) -> Result<()> {
        let payload_len = u16::try_from(self.payload_len).map_err(|_| Error::Unrepresentable)?;
        if self.flow_label > MAX_FLOW_LABEL {
            return Err(Error::Unrepresentable);
        }
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        let word = (6 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        packet.set_first_word(word);
        packet.set_payload_len(payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An ICMPv6 echo request header from 2001:db8::1 to 2001:db8::2, traffic class 0xb8 (EF),
    // flow label 0x12345, hop limit 64, followed by the first 8 bytes of the echo request.
    static PACKET: [u8; 48] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x08, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x80, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x01,
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            src_addr: "2001:db8::1".parse().unwrap(),
            dst_addr: "2001:db8::2".parse().unwrap(),
            next_header: IpProtocol::ICMPV6,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0xb8,
            flow_label: 0x12345,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0xb8);
        assert_eq!(packet.flow_label(), 0x12345);
        assert_eq!(packet.payload_len(), 8);
        assert_eq!(packet.total_len(), 48);
        assert_eq!(packet.next_header(), IpProtocol::ICMPV6);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(
            packet.src_addr(),
            "2001:db8::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            packet.dst_addr(),
            "2001:db8::2".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(packet.payload(), &PACKET[40..]);
        let upper = packet.upper_layer().unwrap();
        assert_eq!(upper.protocol, IpProtocol::ICMPV6);
        assert_eq!(upper.offset, 40);
        assert_eq!(upper.fragment, None);
        assert_eq!(Ipv6Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xffu8; 48];
        buf[40..].copy_from_slice(&PACKET[40..]);
        repr()
            .emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, PACKET);
    }

    #[test]
    fn setters() {
        let mut buf = PACKET;
        let mut packet = Ipv6Packet::new_checked(&mut buf[..]).unwrap();
        packet.set_traffic_class(0x01);
        packet.set_flow_label(0xfffff);
        packet.set_hop_limit(1);
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0x01);
        assert_eq!(packet.flow_label(), 0xfffff);
        packet.set_version(4);
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.traffic_class(), 0x01);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Ipv6Packet::new_checked(&PACKET[..39]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv6Packet::new_checked(&PACKET[..47]).err(),
            Some(Error::Truncated)
        );
        let mut buf = PACKET;
        buf[0] = 0x4b;
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&buf[..])),
            Err(Error::BadVersion)
        );
        let mut out = [0u8; 48];
        let mut r = repr();
        r.flow_label = 0x100000;
        assert_eq!(
            r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..])),
            Err(Error::Unrepresentable)
        );
        r.flow_label = 0;
        r.payload_len = 9;
        assert_eq!(
            r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..])),
            Err(Error::Truncated)
        );
        r.payload_len = 65536;
        assert_eq!(
            r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..])),
            Err(Error::Unrepresentable)
        );
    }

    #[test]
    fn jumbogram_is_unsupported() {
        let mut buf = [0u8; 48];
        buf[..40].copy_from_slice(&PACKET[..40]);
        buf[4..6].copy_from_slice(&[0, 0]);
        buf[6] = 0;
        let packet = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.upper_layer(), Err(Error::Unsupported));
    }
}
