//! Ethernet II frames carrying at most one IEEE 802.1Q VLAN tag.
//!
//! ```text
//!  0            6            12        14        16        18
//! +------------+------------+---------+---------+---------+----------
//! | dst MAC    | src MAC    | 0x8100  |  TCI    | type    | payload    (tagged)
//! +------------+------------+---------+---------+---------+----------
//! | dst MAC    | src MAC    | type    | payload                        (untagged)
//! ```
//!
//! Only a first EtherType of `0x8100` is read as a tag. A second `0x8100` (double tagging) and the
//! 802.1ad service tag `0x88a8` are reported as the EtherType they are, so a load balancer sees
//! "not IP" and hands the frame to the kernel. The frame check sequence is not part of the buffer
//! (NICs strip it), and Ethernet padding after a short IP packet is part of the payload: use the IP
//! length fields to find where the packet ends.

use core::fmt;

use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const TCI: Range<usize> = 14..16;
    pub const TAGGED_ETHERTYPE: Range<usize> = 16..18;
}

/// The length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// The length of an Ethernet II header carrying one 802.1Q tag.
pub const TAGGED_HEADER_LEN: usize = 18;

/// A six-byte Ethernet (MAC) address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// The six bytes of the address.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is a multicast (group) address, broadcast included: the I/G bit is set.
    #[must_use]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is the broadcast address.
    #[must_use]
    pub const fn is_broadcast(&self) -> bool {
        matches!(self.0, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An EtherType (IEEE 802.3 type field, values `>= 0x0600`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: Self = Self(0x0800);
    /// ARP.
    pub const ARP: Self = Self(0x0806);
    /// An IEEE 802.1Q customer VLAN tag follows.
    pub const VLAN: Self = Self(0x8100);
    /// IPv6.
    pub const IPV6: Self = Self(0x86dd);
    /// An IEEE 802.1ad service VLAN tag follows (not parsed by this crate).
    pub const QINQ: Self = Self(0x88a8);
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

/// The tag control information of an 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 0 to 7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0 to 4095.
    pub vid: u16,
}

impl VlanTag {
    /// Splits a 16-bit tag control information field.
    #[must_use]
    pub const fn from_tci(tci: u16) -> Self {
        Self {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    /// Joins the fields into a tag control information field, or `None` if a field is out of
    /// range.
    #[must_use]
    pub const fn tci(&self) -> Option<u16> {
        if self.pcp > 7 || self.vid > 0x0fff {
            return None;
        }
        Some(((self.pcp as u16) << 13) | ((self.dei as u16) << 12) | self.vid)
    }
}

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic until [`check_len`] succeeds.
    ///
    /// [`check_len`]: Self::check_len
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks that every accessor can read it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the whole header, tag included when there is one.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN || (self.is_tagged() && data.len() < TAGGED_HEADER_LEN) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The destination address.
    pub fn dst_addr(&self) -> EthernetAddress {
        let d = &self.buffer.as_ref()[field::DESTINATION];
        EthernetAddress([d[0], d[1], d[2], d[3], d[4], d[5]])
    }

    /// The source address.
    pub fn src_addr(&self) -> EthernetAddress {
        let d = &self.buffer.as_ref()[field::SOURCE];
        EthernetAddress([d[0], d[1], d[2], d[3], d[4], d[5]])
    }

    /// The EtherType right after the addresses: `0x8100` for a tagged frame.
    pub fn outer_ethertype(&self) -> EtherType {
        let d = self.buffer.as_ref();
        // `get` so that check_len, which calls this on a buffer not yet checked, cannot panic.
        match d.get(field::ETHERTYPE) {
            Some(&[a, b]) => EtherType(u16::from_be_bytes([a, b])),
            _ => EtherType(0),
        }
    }

    /// Whether the frame carries an 802.1Q tag.
    pub fn is_tagged(&self) -> bool {
        self.outer_ethertype() == EtherType::VLAN
    }

    /// The 802.1Q tag, if the frame carries one.
    pub fn vlan_tag(&self) -> Option<VlanTag> {
        if !self.is_tagged() {
            return None;
        }
        let d = &self.buffer.as_ref()[field::TCI];
        Some(VlanTag::from_tci(u16::from_be_bytes([d[0], d[1]])))
    }

    /// The EtherType of the payload: after the tag for a tagged frame.
    pub fn ethertype(&self) -> EtherType {
        let range = if self.is_tagged() {
            field::TAGGED_ETHERTYPE
        } else {
            field::ETHERTYPE
        };
        let d = &self.buffer.as_ref()[range];
        EtherType(u16::from_be_bytes([d[0], d[1]]))
    }

    /// The length of the header, tag included: the offset of the payload in the frame.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// The payload: everything after the header, Ethernet padding included.
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        let start = if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        };
        &data[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType of the payload (after the tag, for a tagged frame). To add or remove a
    /// tag, emit an [`EthernetRepr`] instead.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        let range = if self.is_tagged() {
            field::TAGGED_ETHERTYPE
        } else {
            field::ETHERTYPE
        };
        self.buffer.as_mut()[range].copy_from_slice(&ethertype.0.to_be_bytes());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The parsed header of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src_addr: EthernetAddress,
    /// Destination address.
    pub dst_addr: EthernetAddress,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// The EtherType of the payload.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of a checked frame. Never fails once [`EthernetFrame::check_len`] passed;
    /// returns a `Result` for symmetry with the other parsers.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &EthernetFrame<&T>) -> Result<Self> {
        frame.check_len()?;
        Ok(Self {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan_tag(),
            ethertype: frame.ethertype(),
        })
    }

    /// The number of bytes [`emit`](Self::emit) writes: 14, or 18 with a tag.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header at the start of `frame`'s buffer; the payload is left alone.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than [`buffer_len`](Self::buffer_len);
    /// [`Error::Unrepresentable`] if the tag has a field out of range, or if an untagged frame
    /// would carry EtherType `0x8100` (a reader would take it for a tag).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) -> Result<()> {
        // Validate everything before writing anything, so a failed emit leaves the buffer as it was.
        let tci = match self.vlan {
            Some(tag) => Some(tag.tci().ok_or(Error::Unrepresentable)?),
            None if self.ethertype == EtherType::VLAN => return Err(Error::Unrepresentable),
            None => None,
        };
        let data = frame.buffer.as_mut();
        if data.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        data[field::DESTINATION].copy_from_slice(&self.dst_addr.0);
        data[field::SOURCE].copy_from_slice(&self.src_addr.0);
        if let Some(tci) = tci {
            data[field::ETHERTYPE].copy_from_slice(&EtherType::VLAN.0.to_be_bytes());
            data[field::TCI].copy_from_slice(&tci.to_be_bytes());
            data[field::TAGGED_ETHERTYPE].copy_from_slice(&self.ethertype.0.to_be_bytes());
        } else {
            data[field::ETHERTYPE].copy_from_slice(&self.ethertype.0.to_be_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A broadcast ARP request from 52:54:00:12:34:56, VLAN 100, priority 3.
    static TAGGED: [u8; 22] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x81, 0x00, 0x60,
        0x64, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00,
    ];

    // An IPv4 frame between two virtio NICs, no tag; payload is the first four header bytes.
    static UNTAGGED: [u8; 18] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x54,
    ];

    #[test]
    fn test_deconstruct_untagged() {
        let frame = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(
            frame.dst_addr(),
            EthernetAddress([0x52, 0x54, 0x00, 0xab, 0xcd, 0xef])
        );
        assert_eq!(
            frame.src_addr(),
            EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
        );
        assert!(!frame.is_tagged());
        assert_eq!(frame.vlan_tag(), None);
        assert_eq!(frame.ethertype(), EtherType::IPV4);
        assert_eq!(frame.header_len(), 14);
        assert_eq!(frame.payload(), &[0x45, 0x00, 0x00, 0x54]);
    }

    #[test]
    fn test_deconstruct_tagged() {
        let frame = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert!(frame.dst_addr().is_broadcast());
        assert_eq!(frame.outer_ethertype(), EtherType::VLAN);
        assert_eq!(
            frame.vlan_tag(),
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(frame.ethertype(), EtherType::ARP);
        assert_eq!(frame.header_len(), 18);
        assert_eq!(frame.payload(), &[0x00, 0x01, 0x08, 0x00]);
    }

    #[test]
    fn test_construct_tagged() {
        let repr = EthernetRepr {
            dst_addr: EthernetAddress::BROADCAST,
            src_addr: EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            vlan: Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
            ethertype: EtherType::ARP,
        };
        let mut buf = [0u8; 22];
        buf[18..].copy_from_slice(&TAGGED[18..]);
        repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, TAGGED);
        assert_eq!(
            EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn test_construct_untagged() {
        let repr =
            EthernetRepr::parse(&EthernetFrame::new_checked(&UNTAGGED[..]).unwrap()).unwrap();
        let mut buf = UNTAGGED;
        buf[..14].fill(0);
        repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, UNTAGGED);
    }

    #[test]
    fn short_frames() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..17]).err(),
            Some(Error::Truncated)
        );
        // 14 bytes are enough for an untagged header with an empty payload.
        assert!(EthernetFrame::new_checked(&UNTAGGED[..14]).is_ok());
    }

    #[test]
    fn double_tag_is_not_followed() {
        let mut buf = TAGGED;
        buf[16..18].copy_from_slice(&[0x81, 0x00]);
        let frame = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(frame.ethertype(), EtherType::VLAN);
        assert_eq!(frame.header_len(), 18);
    }

    #[test]
    fn unrepresentable_reprs() {
        let mut buf = [0u8; 18];
        let mut repr = EthernetRepr {
            dst_addr: EthernetAddress::BROADCAST,
            src_addr: EthernetAddress::default(),
            vlan: None,
            ethertype: EtherType::VLAN,
        };
        assert_eq!(
            repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        repr.vlan = Some(VlanTag {
            pcp: 8,
            dei: false,
            vid: 1,
        });
        assert_eq!(
            repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        repr.vlan = Some(VlanTag {
            pcp: 0,
            dei: true,
            vid: 4096,
        });
        assert_eq!(
            repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        repr.vlan = None;
        repr.ethertype = EtherType::IPV6;
        assert_eq!(
            repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..13])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn address_display() {
        use std::string::ToString;
        assert_eq!(
            EthernetAddress([0x52, 0x54, 0, 0x12, 0x34, 0x56]).to_string(),
            "52:54:00:12:34:56"
        );
        assert!(EthernetAddress::BROADCAST.is_multicast());
    }
}
