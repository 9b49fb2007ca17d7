//! IPv6 extension headers (RFC 8200 §4): the bounded walk to the upper layer, and views of the
//! option-style headers and the fragment header.
//!
//! The walk follows hop-by-hop options, routing, destination options, fragment and
//! authentication (AH, RFC 4302) headers. It stops at anything else, which it reports as the
//! upper-layer protocol: TCP, UDP, ICMPv6, but also ESP (encrypted, nothing to read past it) and
//! "no next header" (59). The routing header is not interpreted: the destination a load balancer
//! matches is the one in the fixed header, the address this hop sees.
//!
//! A non-first fragment ends the walk at its fragment header: the bytes after it are the middle
//! of the original payload, not headers.

use crate::ip::{FragmentInfo, IpProtocol};
use crate::{Error, Result};

/// The most extension headers [`walk`] follows before giving up with
/// [`Error::TooManyExtensionHeaders`].
///
/// RFC 8200 §4.1 orders at most six headers before the upper layer when each appears as often as
/// it may (hop-by-hop, destination options, routing, fragment, AH, destination options); 8 leaves
/// room for ESP-less oddities while bounding the work an attacker can make each packet cost, the
/// way an XDP program must bound its loops anyway.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Where the upper layer of an IPv6 packet starts, found by [`walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6UpperLayer {
    /// The upper-layer protocol. For a non-first fragment, the next-header field of the
    /// fragment header: the first header of the fragmentable part, usually the upper layer.
    pub protocol: IpProtocol,
    /// The offset of the upper-layer header from the start of the IPv6 packet (for a non-first
    /// fragment, of the fragment data).
    pub offset: usize,
    /// The fragment header's contents, if the chain has one (an atomic fragment included).
    pub fragment: Option<FragmentInfo>,
}

impl Ipv6UpperLayer {
    /// Whether the packet is a fragment other than the first: its upper-layer header, and so its
    /// ports, are in another packet.
    #[must_use]
    pub const fn is_non_first_fragment(&self) -> bool {
        match self.fragment {
            Some(f) => !f.is_first(),
            None => false,
        }
    }
}

/// Whether `protocol` is an extension header [`walk`] steps over.
#[must_use]
pub const fn is_extension_header(protocol: IpProtocol) -> bool {
    matches!(
        protocol,
        IpProtocol::HOPOPT
            | IpProtocol::IPV6_ROUTE
            | IpProtocol::IPV6_FRAG
            | IpProtocol::AH
            | IpProtocol::IPV6_OPTS
    )
}

/// Walks the extension-header chain of the IPv6 packet in `packet` (which must end where the
/// packet ends, padding cut off), starting at `offset` with the header type `first` (the fixed
/// header's next-header field, and offset 40, for a whole packet).
///
/// At most [`MAX_EXTENSION_HEADERS`] headers are followed. Never panics.
///
/// # Errors
/// [`Error::Truncated`] if a header runs past the end of `packet`;
/// [`Error::BadExtensionHeader`] if hop-by-hop options are not first or a second fragment header
/// appears; [`Error::TooManyExtensionHeaders`] if the chain is longer than the limit.
#[inline]
pub fn walk(packet: &[u8], first: IpProtocol, offset: usize) -> Result<Ipv6UpperLayer> {
    let mut next = first;
    let mut offset = offset;
    let mut fragment = None;
    let mut count = 0;
    while is_extension_header(next) {
        if count == MAX_EXTENSION_HEADERS {
            return Err(Error::TooManyExtensionHeaders);
        }
        if next == IpProtocol::HOPOPT && count != 0 {
            return Err(Error::BadExtensionHeader);
        }
        // Every extension header is at least 8 bytes long.
        let Some(hdr) = packet.get(offset..).and_then(<[u8]>::first_chunk::<8>) else {
            return Err(Error::Truncated);
        };
        let len = match next {
            IpProtocol::IPV6_FRAG => FRAGMENT_HEADER_LEN,
            IpProtocol::AH => (usize::from(hdr[1]) + 2) * 4,
            _ => (usize::from(hdr[1]) + 1) * 8,
        };
        // `hdr` exists, so offset + 8 <= packet.len() and the subtraction cannot wrap.
        if packet.len() - offset < len {
            return Err(Error::Truncated);
        }
        if next == IpProtocol::IPV6_FRAG {
            if fragment.is_some() {
                return Err(Error::BadExtensionHeader);
            }
            let info = fragment_info(hdr);
            if !info.is_first() {
                return Ok(Ipv6UpperLayer {
                    protocol: IpProtocol(hdr[0]),
                    offset: offset + FRAGMENT_HEADER_LEN,
                    fragment: Some(info),
                });
            }
            fragment = Some(info);
        }
        next = IpProtocol(hdr[0]);
        offset += len;
        count += 1;
    }
    Ok(Ipv6UpperLayer {
        protocol: next,
        offset,
        fragment,
    })
}

#[inline]
fn fragment_info(hdr: &[u8; 8]) -> FragmentInfo {
    let word = u16::from_be_bytes([hdr[2], hdr[3]]);
    FragmentInfo {
        id: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
        // The offset counts 8-byte units in the top 13 bits: masking the low 3 gives bytes.
        offset: word & 0xfff8,
        more: word & 0x0001 != 0,
    }
}

/// The length of an IPv6 fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// A read/write view of an option-style extension header: hop-by-hop options, routing or
/// destination options (length in 8-byte units, not counting the first 8).
///
/// ```text
/// +---------------+---------------+-------------------------------+
/// |  Next Header  |  Hdr Ext Len  |  data (6 + 8 × Hdr Ext Len)   ~
/// +---------------+---------------+-------------------------------+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Wraps a buffer without checking it; accessors may panic until [`check_len`] succeeds.
    ///
    /// [`check_len`]: Self::check_len
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks that every accessor can read it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let header = Self::new_unchecked(buffer);
        header.check_len()?;
        Ok(header)
    }

    /// Checks that the whole header, as long as its length field says, lies in the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        match data.get(1) {
            Some(&n) if data.len() >= (usize::from(n) + 1) * 8 => Ok(()),
            _ => Err(Error::Truncated),
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The type of the header that follows.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[0])
    }

    /// The length of this header in bytes.
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6ExtHeader<&'a T> {
    /// The header's contents after its first two bytes: options, or routing type, segments left
    /// and type-specific data.
    pub fn data(&self) -> &'a [u8] {
        let end = self.header_len();
        &self.buffer.as_ref()[2..end]
    }
}

/// The parsed form of an option-style extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6ExtHeaderRepr<'a> {
    /// The type of the header that follows.
    pub next_header: IpProtocol,
    /// The contents after the first two bytes (so `2 + data.len()` is a multiple of 8).
    pub data: &'a [u8],
}

impl<'a> Ipv6ExtHeaderRepr<'a> {
    /// Parses a checked header.
    ///
    /// # Errors
    /// Those of [`Ipv6ExtHeader::check_len`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(header: &Ipv6ExtHeader<&'a T>) -> Result<Self> {
        header.check_len()?;
        Ok(Self {
            next_header: header.next_header(),
            data: header.data(),
        })
    }

    /// The length of the header [`emit`](Self::emit) writes.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        2 + self.data.len()
    }

    /// Writes the header at the start of `header`'s buffer.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the length is not a multiple of 8 or exceeds 2048;
    /// [`Error::Truncated`] if the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut Ipv6ExtHeader<T>) -> Result<()> {
        let len = self.buffer_len();
        if !len.is_multiple_of(8) || len > 256 * 8 {
            return Err(Error::Unrepresentable);
        }
        let data = header.buffer.as_mut();
        if data.len() < len {
            return Err(Error::Truncated);
        }
        data[0] = self.next_header.0;
        // len is a multiple of 8 in 8..=2048, so len / 8 - 1 fits a byte.
        data[1] = (len / 8 - 1) as u8;
        data[2..len].copy_from_slice(self.data);
        Ok(())
    }
}

/// A read/write view of an IPv6 fragment header.
///
/// ```text
/// +---------------+---------------+-------------------------+-----+-+
/// |  Next Header  |   Reserved    |     Fragment Offset     | Res |M|
/// +---------------+---------------+-------------------------+-----+-+
/// |                         Identification                          |
/// +-----------------------------------------------------------------+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    /// Wraps a buffer without checking it; accessors may panic until [`check_len`] succeeds.
    ///
    /// [`check_len`]: Self::check_len
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer and checks that every accessor can read it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let header = Self::new_unchecked(buffer);
        header.check_len()?;
        Ok(header)
    }

    /// Checks that the buffer holds the 8-byte header.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn header(&self) -> &[u8; 8] {
        // Slicing panics on a short unchecked buffer, as any accessor of an unchecked view may;
        // the slice is then exactly 8 bytes long, so the fallback is never taken.
        let d = &self.buffer.as_ref()[..FRAGMENT_HEADER_LEN];
        d.first_chunk::<8>().unwrap_or(&[0; 8])
    }

    /// The type of the first header of the fragmentable part.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.header()[0])
    }

    /// The fragment offset, in bytes.
    pub fn frag_offset(&self) -> u16 {
        fragment_info(self.header()).offset
    }

    /// The "more fragments" flag.
    pub fn more_frags(&self) -> bool {
        fragment_info(self.header()).more
    }

    /// The identification.
    pub fn ident(&self) -> u32 {
        fragment_info(self.header()).id
    }

    /// All three fragment fields at once.
    pub fn info(&self) -> FragmentInfo {
        fragment_info(self.header())
    }
}

/// The parsed form of an IPv6 fragment header. The reserved fields are written as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6FragmentRepr {
    /// The type of the first header of the fragmentable part.
    pub next_header: IpProtocol,
    /// Offset, identification and "more fragments" flag.
    pub info: FragmentInfo,
}

impl Ipv6FragmentRepr {
    /// Parses a checked header.
    ///
    /// # Errors
    /// Those of [`Ipv6FragmentHeader::check_len`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(header: &Ipv6FragmentHeader<&T>) -> Result<Self> {
        header.check_len()?;
        Ok(Self {
            next_header: header.next_header(),
            info: header.info(),
        })
    }

    /// The length of the header [`emit`](Self::emit) writes: always 8.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        FRAGMENT_HEADER_LEN
    }

    /// Writes the header at the start of `header`'s buffer.
    ///
    /// # Errors
    /// [`Error::Unrepresentable`] if the offset is not a multiple of 8; [`Error::Truncated`] if
    /// the buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        header: &mut Ipv6FragmentHeader<T>,
    ) -> Result<()> {
        if !self.info.offset.is_multiple_of(8) {
            return Err(Error::Unrepresentable);
        }
        let data = header.buffer.as_mut();
        let Some(hdr) = data.first_chunk_mut::<8>() else {
            return Err(Error::Truncated);
        };
        let word = self.info.offset | u16::from(self.info.more);
        hdr[0] = self.next_header.0;
        hdr[1] = 0;
        hdr[2..4].copy_from_slice(&word.to_be_bytes());
        hdr[4..8].copy_from_slice(&self.info.id.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hop-by-hop (router alert, PadN), destination options (Pad1 ×6), a first fragment, then TCP.
    static CHAIN: [u8; 24] = [
        0x3c, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01,
        0x00, // HBH -> DO: router alert (MLD), PadN 0
        0x2c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DO -> FRAG: Pad1 x6
        0x06, 0x00, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, // FRAG -> TCP: offset 0, M, id
    ];

    #[test]
    fn test_walk_chain() {
        let upper = walk(&CHAIN, IpProtocol::HOPOPT, 0).unwrap();
        assert_eq!(upper.protocol, IpProtocol::TCP);
        assert_eq!(upper.offset, 24);
        assert_eq!(
            upper.fragment,
            Some(FragmentInfo {
                id: 0xdead_beef,
                offset: 0,
                more: true
            })
        );
        assert!(!upper.is_non_first_fragment());
    }

    #[test]
    fn test_walk_non_first_fragment_stops() {
        // A later fragment (offset 1448, no M) whose data would look like a header.
        let bytes = [
            0x06, 0x00, 0x05, 0xa8, 0, 0, 0, 7, 0x00, 0xff, 0, 0, 0, 0, 0, 0,
        ];
        let upper = walk(&bytes, IpProtocol::IPV6_FRAG, 0).unwrap();
        assert_eq!(upper.protocol, IpProtocol::TCP);
        assert_eq!(upper.offset, 8);
        assert_eq!(
            upper.fragment,
            Some(FragmentInfo {
                id: 7,
                offset: 1448,
                more: false
            })
        );
        assert!(upper.is_non_first_fragment());
    }

    #[test]
    fn test_walk_ah() {
        // AH with a 12-byte ICV: payload length 4 -> (4 + 2) * 4 = 24 bytes, then UDP.
        let mut bytes = [0u8; 24];
        bytes[0] = 17;
        bytes[1] = 4;
        let upper = walk(&bytes, IpProtocol::AH, 0).unwrap();
        assert_eq!((upper.protocol, upper.offset), (IpProtocol::UDP, 24));
        assert_eq!(walk(&bytes[..23], IpProtocol::AH, 0), Err(Error::Truncated));
    }

    #[test]
    fn test_walk_errors() {
        assert_eq!(
            walk(&CHAIN[..23], IpProtocol::HOPOPT, 0),
            Err(Error::Truncated)
        );
        assert_eq!(
            walk(&CHAIN[..7], IpProtocol::HOPOPT, 0),
            Err(Error::Truncated)
        );
        // Hop-by-hop after destination options.
        let mut bytes = CHAIN;
        bytes[0] = 0x00;
        assert_eq!(
            walk(&bytes, IpProtocol::HOPOPT, 0),
            Err(Error::BadExtensionHeader)
        );
        // Two fragment headers.
        let mut two = [0u8; 16];
        two[0] = 44;
        assert_eq!(
            walk(&two, IpProtocol::IPV6_FRAG, 0),
            Err(Error::BadExtensionHeader)
        );
        // A chain of destination options longer than the limit.
        let mut long = [0u8; 8 * (MAX_EXTENSION_HEADERS + 1)];
        for h in long.chunks_mut(8) {
            h[0] = 60;
        }
        assert_eq!(
            walk(&long, IpProtocol::IPV6_OPTS, 0),
            Err(Error::TooManyExtensionHeaders)
        );
        // ... while exactly the limit is fine.
        long[8 * (MAX_EXTENSION_HEADERS - 1)] = 6;
        assert_eq!(
            walk(&long, IpProtocol::IPV6_OPTS, 0).unwrap().offset,
            8 * MAX_EXTENSION_HEADERS
        );
    }

    #[test]
    fn test_walk_stops_at_upper_layers() {
        for p in [
            IpProtocol::TCP,
            IpProtocol::ESP,
            IpProtocol::IPV6_NONXT,
            IpProtocol(253),
        ] {
            assert_eq!(
                walk(&[], p, 40),
                Ok(Ipv6UpperLayer {
                    protocol: p,
                    offset: 40,
                    fragment: None
                })
            );
        }
    }

    #[test]
    fn test_deconstruct_ext_header() {
        let header = Ipv6ExtHeader::new_checked(&CHAIN[..8]).unwrap();
        assert_eq!(header.next_header(), IpProtocol::IPV6_OPTS);
        assert_eq!(header.header_len(), 8);
        assert_eq!(header.data(), &[0x05, 0x02, 0x00, 0x00, 0x01, 0x00]);
        assert_eq!(
            Ipv6ExtHeader::new_checked(&CHAIN[..7]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn test_construct_ext_header() {
        let repr =
            Ipv6ExtHeaderRepr::parse(&Ipv6ExtHeader::new_checked(&CHAIN[..8]).unwrap()).unwrap();
        let mut buf = [0u8; 8];
        repr.emit(&mut Ipv6ExtHeader::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, CHAIN[..8]);
        let odd = Ipv6ExtHeaderRepr {
            next_header: IpProtocol::TCP,
            data: &[0; 5],
        };
        assert_eq!(
            odd.emit(&mut Ipv6ExtHeader::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
    }

    #[test]
    fn test_fragment_header() {
        let header = Ipv6FragmentHeader::new_checked(&CHAIN[16..]).unwrap();
        assert_eq!(header.next_header(), IpProtocol::TCP);
        assert_eq!(header.frag_offset(), 0);
        assert!(header.more_frags());
        assert_eq!(header.ident(), 0xdead_beef);
        let repr = Ipv6FragmentRepr::parse(&header).unwrap();
        let mut buf = [0xffu8; 8];
        repr.emit(&mut Ipv6FragmentHeader::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, CHAIN[16..]);
        let bad = Ipv6FragmentRepr {
            info: FragmentInfo {
                offset: 9,
                ..repr.info
            },
            ..repr
        };
        assert_eq!(
            bad.emit(&mut Ipv6FragmentHeader::new_unchecked(&mut buf[..])),
            Err(Error::Unrepresentable)
        );
        assert_eq!(
            Ipv6FragmentHeader::new_checked(&CHAIN[17..]).err(),
            Some(Error::Truncated)
        );
    }
}
