//! Types shared by IPv4 and IPv6: protocol numbers, address pairs and fragment information.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum;

/// An IP protocol number (IPv4 "protocol", IPv6 "next header"), as assigned by IANA.
///
/// A newtype rather than an enum: every one of the 256 values can appear on the wire, and a parser
/// must be able to carry the ones it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 hop-by-hop options (RFC 8200).
    pub const HOPOPT: Self = Self(0);
    /// ICMP for IPv4 (RFC 792).
    pub const ICMP: Self = Self(1);
    /// IPv4 encapsulated in IP (RFC 2003, "IPIP"; also 4in6).
    pub const IPV4: Self = Self(4);
    /// TCP.
    pub const TCP: Self = Self(6);
    /// UDP.
    pub const UDP: Self = Self(17);
    /// IPv6 encapsulated in IP (RFC 2473 IP6IP6, RFC 4213 6in4).
    pub const IPV6: Self = Self(41);
    /// IPv6 routing header.
    pub const IPV6_ROUTE: Self = Self(43);
    /// IPv6 fragment header.
    pub const IPV6_FRAG: Self = Self(44);
    /// Generic Routing Encapsulation (RFC 2784).
    pub const GRE: Self = Self(47);
    /// IPsec Encapsulating Security Payload (RFC 4303).
    pub const ESP: Self = Self(50);
    /// IPsec Authentication Header (RFC 4302).
    pub const AH: Self = Self(51);
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: Self = Self(58);
    /// IPv6 "no next header".
    pub const IPV6_NONXT: Self = Self(59);
    /// IPv6 destination options.
    pub const IPV6_OPTS: Self = Self(60);
}

impl From<u8> for IpProtocol {
    fn from(value: u8) -> Self {
        Self(value)
    }
}

impl From<IpProtocol> for u8 {
    fn from(value: IpProtocol) -> Self {
        value.0
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::HOPOPT => "hopopt",
            Self::ICMP => "icmp",
            Self::IPV4 => "ipip",
            Self::TCP => "tcp",
            Self::UDP => "udp",
            Self::IPV6 => "ipv6",
            Self::IPV6_ROUTE => "ipv6-route",
            Self::IPV6_FRAG => "ipv6-frag",
            Self::GRE => "gre",
            Self::ESP => "esp",
            Self::AH => "ah",
            Self::ICMPV6 => "icmpv6",
            Self::IPV6_NONXT => "ipv6-nonxt",
            Self::IPV6_OPTS => "ipv6-opts",
            Self(n) => return write!(f, "{n}"),
        };
        f.write_str(name)
    }
}

/// The source and destination addresses of one IP packet.
///
/// Both addresses always belong to the same family; this type makes a mixed pair impossible, which
/// is what the transport checksums (pseudo-headers) and the flow hash need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPair {
    /// An IPv4 packet.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// An IPv6 packet.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

impl IpPair {
    /// The source address.
    #[must_use]
    pub const fn src(&self) -> IpAddr {
        match *self {
            IpPair::V4 { src, .. } => IpAddr::V4(src),
            IpPair::V6 { src, .. } => IpAddr::V6(src),
        }
    }

    /// The destination address.
    #[must_use]
    pub const fn dst(&self) -> IpAddr {
        match *self {
            IpPair::V4 { dst, .. } => IpAddr::V4(dst),
            IpPair::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }

    /// The same pair seen from the other end (source and destination swapped).
    #[must_use]
    pub const fn reversed(&self) -> Self {
        match *self {
            IpPair::V4 { src, dst } => IpPair::V4 { src: dst, dst: src },
            IpPair::V6 { src, dst } => IpPair::V6 { src: dst, dst: src },
        }
    }

    /// Whether this is an IPv6 pair.
    #[must_use]
    pub const fn is_ipv6(&self) -> bool {
        matches!(self, IpPair::V6 { .. })
    }

    /// The one's-complement sum of the transport pseudo-header for these addresses (RFC 793 for
    /// IPv4, RFC 8200 §8.1 for IPv6), not complemented.
    #[must_use]
    pub fn pseudo_header_sum(&self, protocol: IpProtocol, length: u32) -> u16 {
        match self {
            IpPair::V4 { src, dst } => checksum::pseudo_header_v4(src, dst, protocol, length),
            IpPair::V6 { src, dst } => checksum::pseudo_header_v6(src, dst, protocol, length),
        }
    }
}

/// Where a fragment sits in its original datagram (IPv4 flags and offset, or the IPv6 fragment
/// header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// The identification shared by all fragments of one datagram (16 bits in IPv4, 32 in IPv6).
    pub id: u32,
    /// The offset of this fragment's data in the original payload, in bytes (always a multiple
    /// of 8, at most 65528).
    pub offset: u16,
    /// The "more fragments" flag: set on every fragment but the last.
    pub more: bool,
}

impl FragmentInfo {
    /// Whether this is the first fragment: it carries the upper-layer header and so the ports.
    #[must_use]
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }

    /// Whether this "fragment" is the whole datagram (offset 0, no more fragments): an IPv6
    /// atomic fragment (RFC 6946), to be processed as if it were not fragmented.
    #[must_use]
    pub const fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_display() {
        use std::string::ToString;
        assert_eq!(IpProtocol::TCP.to_string(), "tcp");
        assert_eq!(IpProtocol(200).to_string(), "200");
    }

    #[test]
    fn pair_reversal() {
        let p = IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        };
        assert_eq!(p.reversed().src(), p.dst());
        assert_eq!(p.reversed().reversed(), p);
        assert!(!p.is_ipv6());
    }

    #[test]
    fn fragment_positions() {
        let first = FragmentInfo {
            id: 1,
            offset: 0,
            more: true,
        };
        let later = FragmentInfo {
            id: 1,
            offset: 1480,
            more: false,
        };
        let atomic = FragmentInfo {
            id: 1,
            offset: 0,
            more: false,
        };
        assert!(first.is_first() && !first.is_atomic());
        assert!(!later.is_first() && !later.is_atomic());
        assert!(atomic.is_first() && atomic.is_atomic());
    }
}
