//! Generic UDP Encapsulation (draft-ietf-intarea-gue): the header after a UDP header.
//!
//! Variant 0, a 4-byte header and optional extension fields:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | 0 |C|   Hlen  |  Proto/ctype  |             Flags             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ~                 Extension fields (Hlen × 4 bytes)             ~
//! ```
//!
//! `C` marks a control message (then Proto/ctype is a control type, otherwise the IP protocol of
//! the payload); `Hlen` counts the 32-bit words of extension fields, whose presence the Flags
//! announce. This module does not interpret individual flags or fields: it exposes the flags and
//! the extension bytes (a load balancer emits none).
//!
//! Variant 1 is direct IP encapsulation: no GUE header at all, the UDP payload is an IPv4 or IPv6
//! packet, recognised by its first two bits `01` (IPv4's version nibble is `0100`, IPv6's
//! `0110`). [`classify`] tells the variants apart.

use crate::ip::IpProtocol;
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const VER_C_HLEN: usize = 0;
    pub const PROTO_CTYPE: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
}

/// The UDP port IANA assigned to GUE.
pub const PORT: u16 = 6080;
/// The length of a variant-0 GUE header without extension fields.
pub const HEADER_LEN: usize = 4;
/// The longest extension-field area (Hlen 31).
pub const MAX_EXTENSIONS_LEN: usize = 31 * 4;

/// What a GUE UDP payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GueVariant {
    /// A variant-0 GUE header, read with [`GuePacket`].
    Header,
    /// Variant 1: an IPv4 packet directly.
    DirectIpv4,
    /// Variant 1: an IPv6 packet directly.
    DirectIpv6,
}

/// Tells what a GUE UDP payload carries from its first byte.
///
/// # Errors
/// [`Error::Truncated`] on an empty payload; [`Error::BadVersion`] for GUE versions 2 and 3, and
/// for variant 1 with an IP version other than 4 or 6.
pub fn classify(udp_payload: &[u8]) -> Result<GueVariant> {
    let Some(&first) = udp_payload.first() else {
        return Err(Error::Truncated);
    };
    match (first >> 6, first >> 4) {
        (0, _) => Ok(GueVariant::Header),
        (1, 4) => Ok(GueVariant::DirectIpv4),
        (1, 6) => Ok(GueVariant::DirectIpv6),
        _ => Err(Error::BadVersion),
    }
}

/// A read/write view of a variant-0 GUE packet (header and payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GuePacket<T> {
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

    /// Checks that this is a variant-0 header and that it, extension fields included, lies in
    /// the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is too short; [`Error::BadVersion`] if the version is
    /// not 0 (variant 1 has no header: see [`classify`]).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 0 {
            return Err(Error::BadVersion);
        }
        if len < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The two version bits (0 for a header).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] >> 6
    }

    /// The C bit: a control message.
    pub fn control(&self) -> bool {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x20 != 0
    }

    /// Hlen: the length of the extension fields in 32-bit words.
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x1f
    }

    /// The length of the header, extension fields included: 4 + Hlen × 4.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + usize::from(self.hlen()) * 4
    }

    /// The Proto/ctype byte: the payload's IP protocol, or the control type of a control message.
    pub fn proto_ctype(&self) -> u8 {
        self.buffer.as_ref()[field::PROTO_CTYPE]
    }

    /// The payload's IP protocol (for a data message, `!control()`).
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.proto_ctype())
    }

    /// The flags.
    pub fn flags(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::FLAGS];
        u16::from_be_bytes([d[0], d[1]])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> GuePacket<&'a T> {
    /// The extension fields, raw.
    pub fn extensions(&self) -> &'a [u8] {
        let end = self.header_len();
        &self.buffer.as_ref()[HEADER_LEN..end]
    }

    /// The payload: everything after the header.
    pub fn payload(&self) -> &'a [u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GuePacket<T> {
    /// Sets the Proto/ctype byte.
    pub fn set_proto_ctype(&mut self, value: u8) {
        self.buffer.as_mut()[field::PROTO_CTYPE] = value;
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, flags: u16) {
        self.buffer.as_mut()[field::FLAGS].copy_from_slice(&flags.to_be_bytes());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The parsed form of a variant-0 GUE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GueRepr<'a> {
    /// The C bit: a control message.
    pub control: bool,
    /// The payload's IP protocol, or the control type.
    pub proto_ctype: u8,
    /// The flags.
    pub flags: u16,
    /// The extension fields, raw: a multiple of 4 bytes, at most 124.
    pub extensions: &'a [u8],
}

impl<'a> GueRepr<'a> {
    /// A data-message header carrying `protocol`, no flags, no extensions: what an encapsulating
    /// load balancer emits.
    #[must_use]
    pub const fn data(protocol: IpProtocol) -> Self {
        Self {
            control: false,
            proto_ctype: protocol.0,
            flags: 0,
            extensions: &[],
        }
    }

    /// Parses a checked header.
    ///
    /// # Errors
    /// Those of [`GuePacket::check_len`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &GuePacket<&'a T>) -> Result<Self> {
        packet.check_len()?;
        Ok(Self {
            control: packet.control(),
            proto_ctype: packet.proto_ctype(),
            flags: packet.flags(),
            extensions: packet.extensions(),
        })
    }

    /// The length of the header [`emit`](Self::emit) writes: 4 plus the extensions.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.extensions.len()
    }

    /// Writes the header at the start of `packet`'s buffer; the payload is left alone.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the extensions are not a multiple of 4 bytes or longer than
    /// 124; [`Error::Truncated`] if the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut GuePacket<T>) -> Result<()> {
        let ext_len = self.extensions.len();
        if !ext_len.is_multiple_of(4) || ext_len > MAX_EXTENSIONS_LEN {
            return Err(Error::Unrepresentable);
        }
        let data = packet.buffer.as_mut();
        if data.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        // At most 31 after the checks above.
        let hlen = (ext_len / 4) as u8;
        data[field::VER_C_HLEN] = (u8::from(self.control) << 5) | hlen;
        data[field::PROTO_CTYPE] = self.proto_ctype;
        data[field::FLAGS].copy_from_slice(&self.flags.to_be_bytes());
        data[HEADER_LEN..HEADER_LEN + ext_len].copy_from_slice(self.extensions);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A data message carrying IPv4 (proto 4), one extension word, flags 0x8000.
    static WITH_EXT: [u8; 10] = [0x01, 0x04, 0x80, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x45, 0x00];

    #[test]
    fn test_deconstruct() {
        assert_eq!(classify(&WITH_EXT), Ok(GueVariant::Header));
        let packet = GuePacket::new_checked(&WITH_EXT[..]).unwrap();
        assert_eq!(packet.version(), 0);
        assert!(!packet.control());
        assert_eq!(packet.hlen(), 1);
        assert_eq!(packet.header_len(), 8);
        assert_eq!(packet.protocol(), IpProtocol::IPV4);
        assert_eq!(packet.flags(), 0x8000);
        assert_eq!(packet.extensions(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(packet.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn test_construct() {
        let repr = GueRepr {
            control: false,
            proto_ctype: 4,
            flags: 0x8000,
            extensions: &[0xde, 0xad, 0xbe, 0xef],
        };
        let mut buf = [0u8; 10];
        buf[8..].copy_from_slice(&[0x45, 0x00]);
        repr.emit(&mut GuePacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, WITH_EXT);
        assert_eq!(
            GueRepr::parse(&GuePacket::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
        let mut plain = [0xffu8; 4];
        GueRepr::data(IpProtocol::IPV6)
            .emit(&mut GuePacket::new_unchecked(&mut plain[..]))
            .unwrap();
        assert_eq!(plain, [0x00, 41, 0x00, 0x00]);
    }

    #[test]
    fn control_message() {
        let buf = [0x20, 0x01, 0x00, 0x00];
        let packet = GuePacket::new_checked(&buf[..]).unwrap();
        assert!(packet.control());
        assert_eq!(packet.proto_ctype(), 1);
    }

    #[test]
    fn variant_1() {
        assert_eq!(classify(&[0x45, 0x00]), Ok(GueVariant::DirectIpv4));
        assert_eq!(classify(&[0x60, 0x00]), Ok(GueVariant::DirectIpv6));
        assert_eq!(classify(&[0x55]), Err(Error::BadVersion));
        assert_eq!(classify(&[0x80]), Err(Error::BadVersion));
        assert_eq!(classify(&[]), Err(Error::Truncated));
        assert_eq!(
            GuePacket::new_checked(&[0x45, 0, 0, 0][..]).err(),
            Some(Error::BadVersion)
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            GuePacket::new_checked(&WITH_EXT[..3]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            GuePacket::new_checked(&WITH_EXT[..7]).err(),
            Some(Error::Truncated)
        );
        let mut buf = [0u8; 200];
        let repr = GueRepr {
            control: false,
            proto_ctype: 4,
            flags: 0,
            extensions: &[0; 3],
        };
        assert_eq!(
            repr.emit(&mut GuePacket::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        let repr = GueRepr {
            extensions: &[0; 128],
            ..repr
        };
        assert_eq!(
            repr.emit(&mut GuePacket::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        let repr = GueRepr {
            extensions: &[0; 124],
            ..repr
        };
        assert_eq!(
            repr.emit(&mut GuePacket::new_unchecked(&mut buf[..127])),
            Err(Error::Truncated)
        );
        assert!(
            repr.emit(&mut GuePacket::new_unchecked(&mut buf[..128]))
                .is_ok()
        );
        assert_eq!(GuePacket::new_checked(&buf[..128]).unwrap().hlen(), 31);
    }
}
