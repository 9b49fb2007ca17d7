//! What ICMPv4 and ICMPv6 error messages share: the quoted "invoking packet".
//!
//! An ICMP error (destination unreachable and its fragmentation-needed code, packet too big, time
//! exceeded, parameter problem) quotes the start of the packet that caused it: its IP header and
//! at least the first 8 bytes of its payload (RFC 792, RFC 1812 §4.3.2.3, RFC 4443 §2.4). A load
//! balancer reads the quoted flow to send the error to the backend that owns the connection: the
//! quoted packet went *from* that connection's VIP *to* the client, so its reversed tuple is the
//! flow the balancer saw.
//!
//! The quoted header's length fields describe the original packet, which the quote truncates, so
//! they are not checked against the quote.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::ip::{FragmentInfo, IpPair, IpProtocol};
use crate::ipv6ext;
use crate::{Error, Result};

/// The flow of the packet quoted in an ICMP error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InvokingPacket<'a> {
    /// The quoted packet's source and destination.
    pub addrs: IpPair,
    /// The quoted packet's upper-layer protocol.
    pub protocol: IpProtocol,
    /// The quoted source port (TCP and UDP), or 0.
    pub src_port: u16,
    /// The quoted destination port (TCP and UDP), or 0.
    pub dst_port: u16,
    /// The quoted packet's fragment information, if it was a fragment.
    pub fragment: Option<FragmentInfo>,
    /// The offset of the quoted upper-layer header in [`bytes`](Self::bytes).
    pub l4_offset: usize,
    /// The quote: IP header and as much of the payload as the error carried.
    pub bytes: &'a [u8],
}

impl<'a> InvokingPacket<'a> {
    /// Reads a quoted IPv4 packet.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the quote is shorter than the quoted header, or than the four
    /// bytes of ports of a quoted TCP or UDP header; [`Error::BadVersion`] if it is not IPv4;
    /// [`Error::BadHeaderLength`] if its IHL is below 5.
    pub fn parse_ipv4(quoted: &'a [u8]) -> Result<Self> {
        let Some(hdr) = quoted.first_chunk::<20>() else {
            return Err(Error::Truncated);
        };
        if hdr[0] >> 4 != 4 {
            return Err(Error::BadVersion);
        }
        let header_len = usize::from(hdr[0] & 0x0f) * 4;
        if header_len < 20 {
            return Err(Error::BadHeaderLength);
        }
        if quoted.len() < header_len {
            return Err(Error::Truncated);
        }
        let frag = u16::from_be_bytes([hdr[6], hdr[7]]);
        let fragment = (frag & 0x3fff != 0).then(|| FragmentInfo {
            id: u32::from(u16::from_be_bytes([hdr[4], hdr[5]])),
            offset: (frag & 0x1fff) << 3,
            more: frag & 0x2000 != 0,
        });
        let addrs = IpPair::V4 {
            src: Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]),
            dst: Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]),
        };
        Self::finish(quoted, addrs, IpProtocol(hdr[9]), header_len, fragment)
    }

    /// Reads a quoted IPv6 packet, walking its extension headers as far as the quote goes.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the quote ends inside the fixed header, an extension header, or
    /// the ports of a quoted TCP or UDP header; [`Error::BadVersion`] if it is not IPv6; those
    /// of [`ipv6ext::walk`].
    pub fn parse_ipv6(quoted: &'a [u8]) -> Result<Self> {
        let Some(hdr) = quoted.first_chunk::<40>() else {
            return Err(Error::Truncated);
        };
        if hdr[0] >> 4 != 6 {
            return Err(Error::BadVersion);
        }
        let payload_len = usize::from(u16::from_be_bytes([hdr[4], hdr[5]]));
        let end = quoted.len().min(40 + payload_len);
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&hdr[8..24]);
        dst.copy_from_slice(&hdr[24..40]);
        let addrs = IpPair::V6 {
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
        };
        let upper = ipv6ext::walk(&quoted[..end], IpProtocol(hdr[6]), 40)?;
        Self::finish(quoted, addrs, upper.protocol, upper.offset, upper.fragment)
    }

    fn finish(
        quoted: &'a [u8],
        addrs: IpPair,
        protocol: IpProtocol,
        l4_offset: usize,
        fragment: Option<FragmentInfo>,
    ) -> Result<Self> {
        let mut invoking = Self {
            addrs,
            protocol,
            src_port: 0,
            dst_port: 0,
            fragment,
            l4_offset,
            bytes: quoted,
        };
        let first = fragment.is_none_or(|f| f.is_first());
        if first && matches!(protocol, IpProtocol::TCP | IpProtocol::UDP) {
            let Some(ports) = quoted.get(l4_offset..).and_then(<[u8]>::first_chunk::<4>) else {
                return Err(Error::Truncated);
            };
            invoking.src_port = u16::from_be_bytes([ports[0], ports[1]]);
            invoking.dst_port = u16::from_be_bytes([ports[2], ports[3]]);
        }
        Ok(invoking)
    }

    /// The quoted IP header, extension headers included.
    #[must_use]
    pub fn header(&self) -> &'a [u8] {
        self.bytes.get(..self.l4_offset).unwrap_or(self.bytes)
    }

    /// The quoted part of the upper-layer header and payload.
    #[must_use]
    pub fn l4(&self) -> &'a [u8] {
        self.bytes.get(self.l4_offset..).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The quote from a fragmentation-needed error: 198.51.100.7:443 -> 203.0.113.10:51000, TCP.
    static QUOTE_V4: [u8; 28] = [
        0x45, 0x00, 0x05, 0xdc, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0xb2, 0x90, 0xc6, 0x33, 0x64,
        0x07, 0xcb, 0x00, 0x71, 0x0a, 0x01, 0xbb, 0xc7, 0x38, 0x01, 0x02, 0x03, 0x04,
    ];

    #[test]
    fn quoted_ipv4() {
        let inv = InvokingPacket::parse_ipv4(&QUOTE_V4).unwrap();
        assert_eq!(inv.addrs.src(), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(inv.addrs.dst(), Ipv4Addr::new(203, 0, 113, 10));
        assert_eq!(inv.protocol, IpProtocol::TCP);
        assert_eq!((inv.src_port, inv.dst_port), (443, 51000));
        assert_eq!(inv.fragment, None);
        assert_eq!(inv.header(), &QUOTE_V4[..20]);
        assert_eq!(inv.l4(), &QUOTE_V4[20..]);
    }

    #[test]
    fn quoted_ipv4_errors() {
        assert_eq!(
            InvokingPacket::parse_ipv4(&QUOTE_V4[..19]),
            Err(Error::Truncated)
        );
        assert_eq!(
            InvokingPacket::parse_ipv4(&QUOTE_V4[..23]),
            Err(Error::Truncated)
        );
        let mut q = QUOTE_V4;
        q[0] = 0x65;
        assert_eq!(InvokingPacket::parse_ipv4(&q), Err(Error::BadVersion));
        q[0] = 0x44;
        assert_eq!(InvokingPacket::parse_ipv4(&q), Err(Error::BadHeaderLength));
        q[0] = 0x47;
        assert_eq!(InvokingPacket::parse_ipv4(&q), Err(Error::Truncated));
    }

    #[test]
    fn quoted_ipv4_later_fragment_has_no_ports() {
        let mut q = QUOTE_V4;
        q[6..8].copy_from_slice(&[0x00, 0xb9]);
        let inv = InvokingPacket::parse_ipv4(&q[..20]).unwrap();
        assert_eq!((inv.src_port, inv.dst_port), (0, 0));
        assert_eq!(
            inv.fragment,
            Some(FragmentInfo {
                id: 0x1c46,
                offset: 1480,
                more: false
            })
        );
    }
}
