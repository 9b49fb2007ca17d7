//! UDP datagrams (RFC 768) and their checksum rules.
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |   Source Port   |  Dest. Port     |
//! +--------+--------+--------+--------+
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! ```
//!
//! Checksum rules: over IPv4 a zero checksum means "none computed" and always verifies; over IPv6
//! the checksum is mandatory (RFC 8200 §8.1) and zero fails verification. The exception, zero
//! checksums for tunnels over IPv6 (RFC 6935, RFC 6936), is the caller's decision: emit with no
//! addresses to write zero, and parse with no addresses to skip verification. A computed checksum
//! of zero is sent as `0xffff`.

use crate::checksum;
use crate::ip::{IpPair, IpProtocol};
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// The length of a UDP header.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a UDP datagram.
///
/// The buffer may be longer than the datagram (the length field wins). It may not be shorter,
/// which is why the UDP header of the first fragment of a fragmented datagram does not pass
/// [`check_len`](Self::check_len): read its ports with [`new_unchecked`](Self::new_unchecked)
/// after checking for 8 bytes, as the flow parser does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
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

    /// Checks that the header and the datagram its length field describes lie in the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 8 bytes or than the length field;
    /// [`Error::BadLength`] if the length field is below 8.
    pub fn check_len(&self) -> Result<()> {
        let buf_len = self.buffer.as_ref().len();
        if buf_len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            Err(Error::BadLength)
        } else if buf_len < len {
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

    /// The source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// The length field: header and payload, in bytes.
    #[allow(clippy::len_without_is_empty)] // a field accessor, not a collection length
    pub fn len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    fn computed_sum(&self, addrs: &IpPair) -> u16 {
        let len = self.len();
        let data = &self.buffer.as_ref()[..usize::from(len)];
        let pseudo = addrs.pseudo_header_sum(IpProtocol::UDP, u32::from(len));
        checksum::combine(&[pseudo, checksum::sum(data)])
    }

    /// Whether the checksum verifies for `addrs`: zero verifies over IPv4 (no checksum) and fails
    /// over IPv6 (mandatory).
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        if self.checksum() == 0 {
            return !addrs.is_ipv6();
        }
        self.computed_sum(addrs) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// The payload, up to the length field (padding excluded).
    pub fn payload(&self) -> &'a [u8] {
        let end = usize::from(self.len());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    fn set_u16_at(&mut self, range: core::ops::Range<usize>, value: u16) {
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

    /// Sets the length field. This voids [`check_len`](Self::check_len).
    pub fn set_len(&mut self, len: u16) {
        self.set_u16_at(field::LENGTH, len);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.set_u16_at(field::CHECKSUM, value);
    }

    /// Computes the checksum over the datagram (as long as its length field says) and the
    /// pseudo-header of `addrs`, and stores it; a computed zero is stored as `0xffff`.
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let value = match !self.computed_sum(addrs) {
            0 => 0xffff,
            c => c,
        };
        self.set_checksum(value);
    }

    /// The payload, mutable (up to the length field).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The parsed header of a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes (the length field minus 8).
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parses a checked datagram. With `verify = Some(addrs)` the checksum must verify by the
    /// rules of [`UdpPacket::verify_checksum`]; with `None` it is not looked at.
    ///
    /// # Errors
    /// Those of [`UdpPacket::check_len`], [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &UdpPacket<&T>,
        verify: Option<&IpPair>,
    ) -> Result<Self> {
        packet.check_len()?;
        if let Some(addrs) = verify
            && !packet.verify_checksum(addrs)
        {
            return Err(Error::BadChecksum);
        }
        Ok(Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// The length of the header [`emit`](Self::emit) writes: always 8.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The length of the whole datagram: 8 plus the payload length.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the 8-byte header at the start of `packet`'s buffer, for a payload that is already
    /// in place after it. With `checksum = Some(addrs)` the checksum is computed over header and
    /// payload; with `None` it is written as zero (no checksum: fine over IPv4, over IPv6 only
    /// for tunnels under RFC 6935/6936).
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the length exceeds 65535; [`Error::Truncated`] if the buffer
    /// is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        checksum: Option<&IpPair>,
    ) -> Result<()> {
        let len = u16::try_from(self.buffer_len()).map_err(|_| Error::Unrepresentable)?;
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        match checksum {
            Some(addrs) => packet.fill_checksum(addrs),
            None => packet.set_checksum(0),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    // A DNS query header 192.168.1.10:40000 -> 192.168.1.1:53 (checksum computed with Python).
    static DNS_V4: [u8; 20] = [
        0x9c, 0x40, 0x00, 0x35, 0x00, 0x14, 0x33, 0x26, 0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    // An mDNS-port datagram fe80::1 -> ff02::fb carrying "hello".
    static MDNS_V6: [u8; 13] = [
        0x14, 0xe9, 0x14, 0xe9, 0x00, 0x0d, 0x93, 0xb0, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];

    fn v4() -> IpPair {
        IpPair::V4 {
            src: Ipv4Addr::new(192, 168, 1, 10),
            dst: Ipv4Addr::new(192, 168, 1, 1),
        }
    }

    fn v6() -> IpPair {
        IpPair::V6 {
            src: "fe80::1".parse().unwrap(),
            dst: "ff02::fb".parse().unwrap(),
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = UdpPacket::new_checked(&DNS_V4[..]).unwrap();
        assert_eq!(packet.src_port(), 40000);
        assert_eq!(packet.dst_port(), 53);
        assert_eq!(packet.len(), 20);
        assert_eq!(packet.checksum(), 0x3326);
        assert_eq!(packet.payload(), &DNS_V4[8..]);
        assert!(packet.verify_checksum(&v4()));
        let packet = UdpPacket::new_checked(&MDNS_V6[..]).unwrap();
        assert_eq!(packet.payload(), b"hello");
        assert!(packet.verify_checksum(&v6()));
    }

    #[test]
    fn test_construct() {
        let repr = UdpRepr {
            src_port: 40000,
            dst_port: 53,
            payload_len: 12,
        };
        let mut buf = DNS_V4;
        buf[..8].fill(0xee);
        repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), Some(&v4()))
            .unwrap();
        assert_eq!(buf, DNS_V4);
        let repr =
            UdpRepr::parse(&UdpPacket::new_checked(&MDNS_V6[..]).unwrap(), Some(&v6())).unwrap();
        let mut buf = MDNS_V6;
        buf[..8].fill(0);
        repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), Some(&v6()))
            .unwrap();
        assert_eq!(buf, MDNS_V6);
    }

    #[test]
    fn zero_checksum_rules() {
        let mut buf = DNS_V4;
        buf[6..8].fill(0);
        let packet = UdpPacket::new_checked(&buf[..]).unwrap();
        assert!(packet.verify_checksum(&v4()));
        let any_v6 = IpPair::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
        };
        assert!(!packet.verify_checksum(&any_v6));
        assert_eq!(
            UdpRepr::parse(&packet, Some(&any_v6)),
            Err(Error::BadChecksum)
        );
        assert!(UdpRepr::parse(&packet, None).is_ok());
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Pick a payload word that makes the computed checksum zero: with the word at zero the
        // checksum is C = !S, and adding C to the sum S makes it 0xffff, the checksum 0.
        let mut buf = [0u8; 10];
        let mut packet = UdpPacket::new_unchecked(&mut buf[..]);
        packet.set_src_port(1);
        packet.set_dst_port(2);
        packet.set_len(10);
        packet.fill_checksum(&v4());
        let c = packet.checksum();
        buf[6..8].fill(0);
        buf[8..10].copy_from_slice(&c.to_be_bytes());
        let mut packet = UdpPacket::new_unchecked(&mut buf[..]);
        packet.fill_checksum(&v4());
        assert_eq!(packet.checksum(), 0xffff);
        assert!(packet.verify_checksum(&v4()));
    }

    #[test]
    fn errors() {
        assert_eq!(
            UdpPacket::new_checked(&DNS_V4[..7]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            UdpPacket::new_checked(&DNS_V4[..19]).err(),
            Some(Error::Truncated)
        );
        let mut buf = DNS_V4;
        buf[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&buf[..]).err(),
            Some(Error::BadLength)
        );
        let repr = UdpRepr {
            src_port: 1,
            dst_port: 2,
            payload_len: 65528,
        };
        assert_eq!(
            repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), None),
            Err(Error::Unrepresentable)
        );
        let repr = UdpRepr {
            payload_len: 13,
            ..repr
        };
        assert_eq!(
            repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), None),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn padding_is_not_payload() {
        let mut buf = [0u8; 30];
        buf[..20].copy_from_slice(&DNS_V4);
        let packet = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.payload().len(), 12);
        assert!(packet.verify_checksum(&v4()));
    }
}
