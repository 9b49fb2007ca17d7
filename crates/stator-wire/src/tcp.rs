//! TCP segments (RFC 9293): header fields, options bytes, and the checksum over the pseudo-header.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! |                        Sequence Number                        |
//! |                    Acknowledgment Number                      |
//! |  Data |Rsrvd|A|C|E|U|A|P|R|S|F|                               |
//! | Offset|     |E|W|C|R|C|S|S|Y|I|            Window             |
//! |       |     | |R|E|G|K|H|T|N|N|                               |
//! |           Checksum            |         Urgent Pointer        |
//! |                    Options (data offset > 5)                  |
//! ```
//!
//! A view's buffer is the whole segment, exactly: the checksum covers all of it, so slice it with
//! the IP payload length, not the end of the Ethernet frame.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use crate::checksum;
use crate::ip::{IpPair, IpProtocol};
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    pub const FLAGS: Range<usize> = 12..14;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// The length of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// The longest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// The twelve bits after the data offset: three reserved bits and nine flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(u16);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: Self = Self(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Self = Self(0x002);
    /// Reset the connection.
    pub const RST: Self = Self(0x004);
    /// Push function.
    pub const PSH: Self = Self(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: Self = Self(0x010);
    /// Urgent pointer field is significant.
    pub const URG: Self = Self(0x020);
    /// ECN-echo (RFC 3168).
    pub const ECE: Self = Self(0x040);
    /// Congestion window reduced (RFC 3168).
    pub const CWR: Self = Self(0x080);
    /// Accurate ECN (the former NS bit, RFC 3540, now AccECN's AE).
    pub const AE: Self = Self(0x100);
    /// No flag set.
    pub const EMPTY: Self = Self(0);
    /// Every bit of the field, the three reserved bits included.
    pub const ALL: Self = Self(0x0fff);

    /// Builds flags from the twelve bits after the data offset; higher bits are dropped.
    #[must_use]
    pub const fn from_bits(bits: u16) -> Self {
        Self(bits & Self::ALL.0)
    }

    /// The twelve bits.
    #[must_use]
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    #[must_use]
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set in `self`.
    #[must_use]
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// SYN set.
    #[must_use]
    pub const fn syn(self) -> bool {
        self.contains(Self::SYN)
    }

    /// ACK set.
    #[must_use]
    pub const fn ack(self) -> bool {
        self.contains(Self::ACK)
    }

    /// RST set.
    #[must_use]
    pub const fn rst(self) -> bool {
        self.contains(Self::RST)
    }

    /// FIN set.
    #[must_use]
    pub const fn fin(self) -> bool {
        self.contains(Self::FIN)
    }
}

impl BitOr for TcpFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 9] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "AE"];
        write!(f, "TcpFlags(")?;
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        let reserved = self.0 & 0x0e00;
        if reserved != 0 {
            write!(
                f,
                "{}reserved={:#x}",
                if first { "" } else { "|" },
                reserved >> 9
            )?;
        }
        write!(f, ")")
    }
}

/// A read/write view of a TCP segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
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

    /// Checks that the header, options included, lies in the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 20 bytes or than the data offset;
    /// [`Error::BadHeaderLength`] if the data offset is below 5.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            Err(Error::BadHeaderLength)
        } else if len < header_len {
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

    fn u32_at(&self, range: core::ops::Range<usize>) -> u32 {
        let d = &self.buffer.as_ref()[range];
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// The sequence number.
    pub fn seq_number(&self) -> u32 {
        self.u32_at(field::SEQ_NUM)
    }

    /// The acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        self.u32_at(field::ACK_NUM)
    }

    /// The header length in bytes (data offset × 4), options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS.start] >> 4) * 4
    }

    /// The flags (and the three reserved bits).
    pub fn flags(&self) -> TcpFlags {
        TcpFlags::from_bits(self.u16_at(field::FLAGS))
    }

    /// The window.
    pub fn window_len(&self) -> u16 {
        self.u16_at(field::WIN_SIZE)
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        self.u16_at(field::URGENT)
    }

    /// Whether the checksum verifies over the whole buffer and the pseudo-header of `addrs`.
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        let data = self.buffer.as_ref();
        let Ok(len) = u32::try_from(data.len()) else {
            return false;
        };
        let pseudo = addrs.pseudo_header_sum(IpProtocol::TCP, len);
        checksum::combine(&[pseudo, checksum::sum(data)]) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// The options: header bytes after the first 20.
    pub fn options(&self) -> &'a [u8] {
        let end = self.header_len();
        &self.buffer.as_ref()[HEADER_LEN..end]
    }

    /// The payload: everything after the header.
    pub fn payload(&self) -> &'a [u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    fn set_u16_at(&mut self, range: core::ops::Range<usize>, value: u16) {
        self.buffer.as_mut()[range].copy_from_slice(&value.to_be_bytes());
    }

    fn set_u32_at(&mut self, range: core::ops::Range<usize>, value: u32) {
        self.buffer.as_mut()[range].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        self.set_u16_at(field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        self.set_u16_at(field::DST_PORT, port);
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, seq: u32) {
        self.set_u32_at(field::SEQ_NUM, seq);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, ack: u32) {
        self.set_u32_at(field::ACK_NUM, ack);
    }

    /// Sets the data offset and flags word: `header_len` in bytes (rounded down to a multiple of
    /// 4, at most 60) and the twelve flag bits. This voids [`check_len`](Self::check_len).
    pub fn set_header_len_and_flags(&mut self, header_len: usize, flags: TcpFlags) {
        // At most 15 after the division, so the cast keeps every bit.
        let offset = (header_len.min(MAX_HEADER_LEN) / 4) as u16;
        self.set_u16_at(field::FLAGS, (offset << 12) | flags.bits());
    }

    /// Sets the flags, keeping the data offset.
    pub fn set_flags(&mut self, flags: TcpFlags) {
        let offset = self.u16_at(field::FLAGS) & 0xf000;
        self.set_u16_at(field::FLAGS, offset | flags.bits());
    }

    /// Sets the window.
    pub fn set_window_len(&mut self, window: u16) {
        self.set_u16_at(field::WIN_SIZE, window);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.set_u16_at(field::CHECKSUM, value);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, urgent: u16) {
        self.set_u16_at(field::URGENT, urgent);
    }

    /// Computes the checksum over the whole buffer and the pseudo-header of `addrs`, and stores
    /// it. A buffer longer than 4 GiB gets checksum 0 (no IP packet is that long).
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let Ok(len) = u32::try_from(data.len()) else {
            return;
        };
        let pseudo = addrs.pseudo_header_sum(IpProtocol::TCP, len);
        let value = !checksum::combine(&[pseudo, checksum::sum(data)]);
        self.set_checksum(value);
    }

    /// The options, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The parsed form of a TCP segment. Options are kept as raw bytes: a load balancer forwards
/// them untouched and has no reason to interpret them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flags and reserved bits.
    pub flags: TcpFlags,
    /// Window.
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_at: u16,
    /// Options, padded: a multiple of 4 bytes, at most 40.
    pub options: &'a [u8],
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> TcpRepr<'a> {
    /// Parses a checked segment and verifies its checksum against `addrs`.
    ///
    /// # Errors
    /// Those of [`TcpPacket::check_len`], [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &TcpPacket<&'a T>,
        addrs: &IpPair,
    ) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum(addrs) {
            return Err(Error::BadChecksum);
        }
        Ok(Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            urgent_at: packet.urgent_at(),
            options: packet.options(),
            payload: packet.payload(),
        })
    }

    /// The length of the header: 20 plus the options.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// The length of the whole segment [`emit`](Self::emit) writes.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Writes the whole segment (header, options, payload, checksum for `addrs`) at the start of
    /// `packet`'s buffer. The checksum covers [`buffer_len`](Self::buffer_len) bytes, so slice
    /// the buffer to that length if it is longer.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the options are not a multiple of 4 bytes or longer than 40;
    /// [`Error::Truncated`] if the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut TcpPacket<T>,
        addrs: &IpPair,
    ) -> Result<()> {
        if !self.options.len().is_multiple_of(4) || self.header_len() > MAX_HEADER_LEN {
            return Err(Error::Unrepresentable);
        }
        let len = self.buffer_len();
        let Some(data) = packet.buffer.as_mut().get_mut(..len) else {
            return Err(Error::Truncated);
        };
        let mut segment = TcpPacket::new_unchecked(data);
        segment.set_src_port(self.src_port);
        segment.set_dst_port(self.dst_port);
        segment.set_seq_number(self.seq_number);
        segment.set_ack_number(self.ack_number);
        segment.set_header_len_and_flags(self.header_len(), self.flags);
        segment.set_window_len(self.window_len);
        segment.set_urgent_at(self.urgent_at);
        segment.options_mut().copy_from_slice(self.options);
        segment.payload_mut().copy_from_slice(self.payload);
        segment.fill_checksum(addrs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    // A Linux SYN 10.0.0.1:54321 -> 10.0.0.2:80 with MSS 1460, SACK permitted, timestamps and
    // window scale 7 (checksum computed independently, with Python).
    static SYN: [u8; 40] = [
        0xd4, 0x31, 0x00, 0x50, 0x6a, 0x2c, 0x1f, 0x3b, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x37, 0x35, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x09,
        0xa3, 0xe5, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    // A PSH|ACK segment 2001:db8::1:443 -> 2001:db8::2:40000 carrying "GET /".
    static PSH_V6: [u8; 25] = [
        0x01, 0xbb, 0x9c, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x50, 0x18, 0x02,
        0x00, 0xe9, 0xee, 0x00, 0x00, 0x47, 0x45, 0x54, 0x20, 0x2f,
    ];

    fn v4() -> IpPair {
        IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        }
    }

    fn v6() -> IpPair {
        IpPair::V6 {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!(packet.src_port(), 54321);
        assert_eq!(packet.dst_port(), 80);
        assert_eq!(packet.seq_number(), 0x6a2c_1f3b);
        assert_eq!(packet.ack_number(), 0);
        assert_eq!(packet.header_len(), 40);
        assert_eq!(packet.flags(), TcpFlags::SYN);
        assert!(packet.flags().syn() && !packet.flags().ack());
        assert_eq!(packet.window_len(), 64240);
        assert_eq!(packet.checksum(), 0x3735);
        assert_eq!(packet.urgent_at(), 0);
        assert_eq!(packet.options(), &SYN[20..]);
        assert_eq!(packet.payload(), &[] as &[u8]);
        assert!(packet.verify_checksum(&v4()));
        // Swapping the addresses keeps the pseudo-header sum; changing one does not.
        assert!(packet.verify_checksum(&v4().reversed()));
        let other = IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 3),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        };
        assert!(!packet.verify_checksum(&other));
    }

    #[test]
    fn test_deconstruct_v6() {
        let packet = TcpPacket::new_checked(&PSH_V6[..]).unwrap();
        assert_eq!(packet.flags(), TcpFlags::PSH | TcpFlags::ACK);
        assert_eq!(packet.payload(), b"GET /");
        assert!(packet.verify_checksum(&v6()));
        let repr = TcpRepr::parse(&packet, &v6()).unwrap();
        assert_eq!(repr.payload, b"GET /");
        let other = IpPair::V6 {
            src: "2001:db8::3".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
        };
        assert_eq!(TcpRepr::parse(&packet, &other), Err(Error::BadChecksum));
    }

    #[test]
    fn test_construct() {
        let repr = TcpRepr {
            src_port: 54321,
            dst_port: 80,
            seq_number: 0x6a2c_1f3b,
            ack_number: 0,
            flags: TcpFlags::SYN,
            window_len: 64240,
            urgent_at: 0,
            options: &SYN[20..],
            payload: &[],
        };
        let mut buf = [0xffu8; 40];
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &v4())
            .unwrap();
        assert_eq!(buf, SYN);
        assert_eq!(
            TcpRepr::parse(&TcpPacket::new_checked(&buf[..]).unwrap(), &v4()),
            Ok(repr)
        );
    }

    #[test]
    fn test_construct_v6() {
        let repr = TcpRepr::parse(&TcpPacket::new_checked(&PSH_V6[..]).unwrap(), &v6()).unwrap();
        let mut buf = [0u8; 25];
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &v6())
            .unwrap();
        assert_eq!(buf, PSH_V6);
    }

    #[test]
    fn errors() {
        assert_eq!(
            TcpPacket::new_checked(&SYN[..19]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            TcpPacket::new_checked(&SYN[..39]).err(),
            Some(Error::Truncated)
        );
        let mut buf = SYN;
        buf[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&buf[..]).err(),
            Some(Error::BadHeaderLength)
        );
        let repr = TcpRepr {
            options: &SYN[20..23],
            ..TcpRepr::parse(&TcpPacket::new_checked(&SYN[..]).unwrap(), &v4()).unwrap()
        };
        let mut out = [0u8; 64];
        assert_eq!(
            repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), &v4()),
            Err(Error::Unrepresentable)
        );
        let repr = TcpRepr {
            options: &[0; 44],
            ..repr
        };
        assert_eq!(
            repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), &v4()),
            Err(Error::Unrepresentable)
        );
        let repr = TcpRepr {
            options: &[],
            payload: &[0; 45],
            ..repr
        };
        assert_eq!(
            repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), &v4()),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn flags() {
        let f = TcpFlags::SYN | TcpFlags::ACK;
        assert!(f.syn() && f.ack() && !f.rst() && !f.fin());
        assert!(f.intersects(TcpFlags::ACK | TcpFlags::RST));
        assert!(!f.contains(TcpFlags::ACK | TcpFlags::RST));
        assert_eq!(TcpFlags::from_bits(0xffff), TcpFlags::ALL);
        let mut g = TcpFlags::EMPTY;
        g |= TcpFlags::FIN;
        assert!(g.fin());
        assert_eq!(std::format!("{:?}", f), "TcpFlags(SYN|ACK)");
        assert_eq!(
            std::format!("{:?}", TcpFlags::from_bits(0x201)),
            "TcpFlags(FIN|reserved=0x1)"
        );
    }

    #[test]
    fn setters() {
        let mut buf = SYN;
        let mut packet = TcpPacket::new_checked(&mut buf[..]).unwrap();
        packet.set_flags(TcpFlags::SYN | TcpFlags::ACK);
        assert_eq!(packet.header_len(), 40);
        packet.set_ack_number(1);
        packet.fill_checksum(&v4());
        assert!(packet.verify_checksum(&v4()));
        assert_eq!(packet.flags(), TcpFlags::SYN | TcpFlags::ACK);
    }
}
