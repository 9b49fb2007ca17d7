//! GRE (RFC 2784, with RFC 2890's key and sequence number), and RFC 1701's recursion control.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |C|R|K|S|s|Recur|  Flags  | Ver |         Protocol Type         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      Checksum (optional)      |       Reserved1 (optional)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         Key (optional)                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Sequence Number (optional)                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The first 16 bits are drawn after RFC 1701, which RFC 2784 folded into "Reserved0" and RFC 2890
//! partly reclaimed (K, S). Bits 5–7, **recursion control**, are what the Maglev paper (§4.3) uses
//! to mark a fragment that one Maglev already redirected to another, so that it is redirected only
//! once; [`GrePacket::recursion_control`] and [`GreRepr::recursion_control`] expose them.
//!
//! What this module refuses: the routing-present bit R (RFC 1701 source routing, deprecated: its
//! variable-length routing field is not supported, [`Error::Unsupported`]) and versions other
//! than 0 (version 1 is PPTP's enhanced GRE, a different layout, [`Error::BadVersion`]). The
//! strict-source-route bit `s` and the five Flags bits are readable but ignored, and emitted as
//! zero. With C set, the checksum is followed by Reserved1, which is written as zero.
//!
//! GRE has no length field: a view's buffer is the GRE header and the whole payload, which is
//! what the checksum covers.

use crate::checksum;
use crate::ethernet::EtherType;
use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const FLAGS_VER: Range<usize> = 0..2;
    pub const PROTOCOL: Range<usize> = 2..4;
    pub const OPTIONAL: usize = 4;
}

/// The length of a GRE header with no optional field.
pub const HEADER_LEN: usize = 4;
/// The length of a GRE header with checksum, key and sequence number.
pub const MAX_HEADER_LEN: usize = 16;
/// The largest recursion-control value (three bits).
pub const MAX_RECURSION_CONTROL: u8 = 7;

const FLAG_C: u16 = 0x8000;
const FLAG_R: u16 = 0x4000;
const FLAG_K: u16 = 0x2000;
const FLAG_S: u16 = 0x1000;
const FLAG_STRICT: u16 = 0x0800;
const RECUR_MASK: u16 = 0x0700;
const RECUR_SHIFT: u32 = 8;
const FLAGS_MASK: u16 = 0x00f8;
const VERSION_MASK: u16 = 0x0007;

/// A read/write view of a GRE packet (header and payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrePacket<T> {
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

    /// Checks that the header, with the optional fields its flags announce, lies in the buffer,
    /// and that the layout is one this module reads.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is too short; [`Error::BadVersion`] for a version other
    /// than 0; [`Error::Unsupported`] if the routing bit is set.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let word = self.flags_word();
        if word & VERSION_MASK != 0 {
            return Err(Error::BadVersion);
        }
        if word & FLAG_R != 0 {
            return Err(Error::Unsupported);
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

    fn flags_word(&self) -> u16 {
        let d = &self.buffer.as_ref()[field::FLAGS_VER];
        u16::from_be_bytes([d[0], d[1]])
    }

    /// Whether the checksum (and Reserved1) field is present (C).
    pub fn checksum_present(&self) -> bool {
        self.flags_word() & FLAG_C != 0
    }

    /// Whether RFC 1701's routing bit is set (never, once checked).
    pub fn routing_present(&self) -> bool {
        self.flags_word() & FLAG_R != 0
    }

    /// Whether the key field is present (K).
    pub fn key_present(&self) -> bool {
        self.flags_word() & FLAG_K != 0
    }

    /// Whether the sequence-number field is present (S).
    pub fn seq_present(&self) -> bool {
        self.flags_word() & FLAG_S != 0
    }

    /// RFC 1701's strict-source-route bit (meaningless without routing; ignored).
    pub fn strict_source_route(&self) -> bool {
        self.flags_word() & FLAG_STRICT != 0
    }

    /// The 3-bit recursion-control field (RFC 1701): Maglev's "already redirected" mark.
    pub fn recursion_control(&self) -> u8 {
        // Three bits after the shift.
        ((self.flags_word() & RECUR_MASK) >> RECUR_SHIFT) as u8
    }

    /// The five Flags bits of RFC 1701 (reserved; ignored).
    pub fn reserved_flags(&self) -> u8 {
        // Five bits after the shift.
        ((self.flags_word() & FLAGS_MASK) >> 3) as u8
    }

    /// The version (0, once checked).
    pub fn version(&self) -> u8 {
        // Three bits.
        (self.flags_word() & VERSION_MASK) as u8
    }

    /// The protocol type of the payload, an EtherType.
    pub fn protocol_type(&self) -> EtherType {
        let d = &self.buffer.as_ref()[field::PROTOCOL];
        EtherType(u16::from_be_bytes([d[0], d[1]]))
    }

    /// The length of the header: 4, plus 4 for each of checksum, key, sequence number.
    pub fn header_len(&self) -> usize {
        let word = self.flags_word();
        HEADER_LEN
            + 4 * (usize::from(word & FLAG_C != 0)
                + usize::from(word & FLAG_K != 0)
                + usize::from(word & FLAG_S != 0))
    }

    fn optional_u32(&self, index: usize) -> u32 {
        let start = field::OPTIONAL + 4 * index;
        let d = &self.buffer.as_ref()[start..start + 4];
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// The checksum, if present.
    pub fn checksum(&self) -> Option<u16> {
        // The checksum is the high half of the first optional word.
        self.checksum_present()
            .then(|| (self.optional_u32(0) >> 16) as u16)
    }

    /// The key, if present.
    pub fn key(&self) -> Option<u32> {
        let index = usize::from(self.checksum_present());
        self.key_present().then(|| self.optional_u32(index))
    }

    /// The sequence number, if present.
    pub fn sequence_number(&self) -> Option<u32> {
        let index = usize::from(self.checksum_present()) + usize::from(self.key_present());
        self.seq_present().then(|| self.optional_u32(index))
    }

    /// Whether the checksum verifies over the whole buffer; `true` when there is no checksum.
    pub fn verify_checksum(&self) -> bool {
        !self.checksum_present() || checksum::sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> GrePacket<&'a T> {
    /// The payload: everything after the header.
    pub fn payload(&self) -> &'a [u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GrePacket<T> {
    fn set_flags_word(&mut self, word: u16) {
        self.buffer.as_mut()[field::FLAGS_VER].copy_from_slice(&word.to_be_bytes());
    }

    /// Sets the recursion-control field (its bits above the third are dropped). The checksum,
    /// if any, covers this field: refresh it with [`fill_checksum`](Self::fill_checksum).
    pub fn set_recursion_control(&mut self, value: u8) {
        let word =
            (self.flags_word() & !RECUR_MASK) | ((u16::from(value) << RECUR_SHIFT) & RECUR_MASK);
        self.set_flags_word(word);
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, protocol: EtherType) {
        self.buffer.as_mut()[field::PROTOCOL].copy_from_slice(&protocol.0.to_be_bytes());
    }

    /// Computes the checksum over the whole buffer and stores it, if the header has one.
    pub fn fill_checksum(&mut self) {
        if !self.checksum_present() {
            return;
        }
        let start = field::OPTIONAL;
        self.buffer.as_mut()[start..start + 2].fill(0);
        let value = checksum::checksum(self.buffer.as_ref());
        self.buffer.as_mut()[start..start + 2].copy_from_slice(&value.to_be_bytes());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The parsed header of a GRE packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GreRepr {
    /// The protocol type of the payload (`0x0800` IPv4, `0x86dd` IPv6).
    pub protocol_type: EtherType,
    /// Whether the header carries a checksum.
    pub checksum: bool,
    /// The key, if any (RFC 2890).
    pub key: Option<u32>,
    /// The sequence number, if any (RFC 2890).
    pub sequence_number: Option<u32>,
    /// Recursion control, 0 to 7 (RFC 1701).
    pub recursion_control: u8,
}

impl GreRepr {
    /// Parses a checked packet; a checksum, if present, must verify.
    ///
    /// # Errors
    /// Those of [`GrePacket::check_len`], [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &GrePacket<&T>) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Self {
            protocol_type: packet.protocol_type(),
            checksum: packet.checksum_present(),
            key: packet.key(),
            sequence_number: packet.sequence_number(),
            recursion_control: packet.recursion_control(),
        })
    }

    /// The length of the header [`emit`](Self::emit) writes: 4 to 16 bytes.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
            + 4 * (self.checksum as usize
                + self.key.is_some() as usize
                + self.sequence_number.is_some() as usize)
    }

    /// Writes the header at the start of `packet`'s buffer. With a checksum, the payload must
    /// already be in place after the header: the checksum covers the whole buffer.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the recursion control exceeds 7; [`Error::Truncated`] if the
    /// buffer is shorter than the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut GrePacket<T>) -> Result<()> {
        if self.recursion_control > MAX_RECURSION_CONTROL {
            return Err(Error::Unrepresentable);
        }
        let data = packet.buffer.as_mut();
        if data.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        let mut word = u16::from(self.recursion_control) << RECUR_SHIFT;
        let mut at = field::OPTIONAL;
        if self.checksum {
            word |= FLAG_C;
            data[at..at + 4].fill(0);
            at += 4;
        }
        if let Some(key) = self.key {
            word |= FLAG_K;
            data[at..at + 4].copy_from_slice(&key.to_be_bytes());
            at += 4;
        }
        if let Some(seq) = self.sequence_number {
            word |= FLAG_S;
            data[at..at + 4].copy_from_slice(&seq.to_be_bytes());
        }
        data[field::FLAGS_VER].copy_from_slice(&word.to_be_bytes());
        data[field::PROTOCOL].copy_from_slice(&self.protocol_type.0.to_be_bytes());
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every optional field: checksum, key 0xabcd, sequence 7, recursion control 1 (a Maglev
    // redirect), carrying the first 4 bytes of an IPv4 header (checksum computed with Python).
    static FULL: [u8; 20] = [
        0xb1, 0x00, 0x08, 0x00, 0x56, 0x16, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd, 0x00, 0x00, 0x00,
        0x07, 0x45, 0x00, 0x00, 0x14,
    ];

    // The plain RFC 2784 header a Linux gre tunnel sends for IPv6: no options.
    static PLAIN: [u8; 6] = [0x00, 0x00, 0x86, 0xdd, 0x60, 0x00];

    #[test]
    fn test_deconstruct_full() {
        let packet = GrePacket::new_checked(&FULL[..]).unwrap();
        assert!(packet.checksum_present() && packet.key_present() && packet.seq_present());
        assert!(!packet.routing_present() && !packet.strict_source_route());
        assert_eq!(packet.recursion_control(), 1);
        assert_eq!(packet.reserved_flags(), 0);
        assert_eq!(packet.version(), 0);
        assert_eq!(packet.protocol_type(), EtherType::IPV4);
        assert_eq!(packet.header_len(), 16);
        assert_eq!(packet.checksum(), Some(0x5616));
        assert_eq!(packet.key(), Some(0xabcd));
        assert_eq!(packet.sequence_number(), Some(7));
        assert!(packet.verify_checksum());
        assert_eq!(packet.payload(), &[0x45, 0x00, 0x00, 0x14]);
    }

    #[test]
    fn test_deconstruct_plain() {
        let packet = GrePacket::new_checked(&PLAIN[..]).unwrap();
        assert_eq!(packet.header_len(), 4);
        assert_eq!(packet.protocol_type(), EtherType::IPV6);
        assert_eq!(
            (packet.checksum(), packet.key(), packet.sequence_number()),
            (None, None, None)
        );
        assert!(packet.verify_checksum());
        assert_eq!(packet.payload(), &[0x60, 0x00]);
    }

    #[test]
    fn test_construct_full() {
        let repr = GreRepr {
            protocol_type: EtherType::IPV4,
            checksum: true,
            key: Some(0xabcd),
            sequence_number: Some(7),
            recursion_control: 1,
        };
        let mut buf = [0xffu8; 20];
        buf[16..].copy_from_slice(&FULL[16..]);
        repr.emit(&mut GrePacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, FULL);
        assert_eq!(
            GreRepr::parse(&GrePacket::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn test_construct_key_only() {
        let repr = GreRepr {
            protocol_type: EtherType::IPV6,
            checksum: false,
            key: Some(0x0102_0304),
            sequence_number: None,
            recursion_control: 0,
        };
        let mut buf = [0u8; 8];
        repr.emit(&mut GrePacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, [0x20, 0x00, 0x86, 0xdd, 0x01, 0x02, 0x03, 0x04]);
    }

    #[test]
    fn recursion_control_marks_a_redirect() {
        let mut buf = FULL;
        let mut packet = GrePacket::new_checked(&mut buf[..]).unwrap();
        packet.set_recursion_control(0);
        assert_eq!(packet.recursion_control(), 0);
        assert!(
            !packet.verify_checksum(),
            "the checksum covers the recursion bits"
        );
        packet.set_recursion_control(7);
        packet.fill_checksum();
        assert_eq!(packet.recursion_control(), 7);
        assert!(packet.verify_checksum());
        assert!(packet.checksum_present() && packet.key_present() && packet.seq_present());
        packet.set_recursion_control(0xff);
        assert_eq!(packet.recursion_control(), 7);
        assert_eq!(packet.version(), 0);
    }

    #[test]
    fn errors() {
        assert_eq!(
            GrePacket::new_checked(&FULL[..3]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            GrePacket::new_checked(&FULL[..15]).err(),
            Some(Error::Truncated)
        );
        let mut buf = PLAIN;
        buf[1] = 0x01;
        assert_eq!(
            GrePacket::new_checked(&buf[..]).err(),
            Some(Error::BadVersion)
        );
        buf[0] = 0x40;
        buf[1] = 0x00;
        assert_eq!(
            GrePacket::new_checked(&buf[..]).err(),
            Some(Error::Unsupported)
        );
        let mut buf = FULL;
        buf[19] ^= 0xff;
        assert_eq!(
            GreRepr::parse(&GrePacket::new_checked(&buf[..]).unwrap()),
            Err(Error::BadChecksum)
        );
        let repr = GreRepr {
            recursion_control: 8,
            ..GreRepr::parse(&GrePacket::new_checked(&FULL[..]).unwrap()).unwrap()
        };
        assert_eq!(
            repr.emit(&mut GrePacket::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        let repr = GreRepr {
            recursion_control: 0,
            ..repr
        };
        assert_eq!(
            repr.emit(&mut GrePacket::new_unchecked(&mut buf[..15])),
            Err(Error::Truncated)
        );
    }
}
