//! The one error type of this crate.
//!
//! Every variant is a plain, `Copy` value: the data path turns it into a drop reason and a counter,
//! never into an allocated message. [`Error::as_str`] gives a short, stable label fit for a metric.

use core::fmt;

/// Why a byte string is not a packet this crate can read, or why a representation cannot be
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the header does, or before a length field says the packet ends.
    Truncated,
    /// A version field (IP, GRE, GUE) holds a value this parser does not handle.
    BadVersion,
    /// A header-length field (IPv4 IHL, TCP data offset) is smaller than the fixed header.
    BadHeaderLength,
    /// A length field contradicts another one (IPv4 total length shorter than its header, UDP
    /// length shorter than 8).
    BadLength,
    /// A checksum does not verify.
    BadChecksum,
    /// The IPv6 extension-header chain breaks a rule of RFC 8200 (hop-by-hop options not first,
    /// two fragment headers).
    BadExtensionHeader,
    /// The IPv6 extension-header chain is longer than
    /// [`MAX_EXTENSION_HEADERS`](crate::ipv6ext::MAX_EXTENSION_HEADERS).
    TooManyExtensionHeaders,
    /// Well formed, but a feature this crate deliberately does not handle (GRE routing, IPv6
    /// jumbograms).
    Unsupported,
    /// The frame does not carry IPv4 or IPv6 (flow parsing only).
    NotIp,
    /// A representation holds a value its wire format cannot encode (a VLAN id above 4095, a
    /// payload longer than a length field can say, options not a multiple of four bytes).
    Unrepresentable,
}

impl Error {
    /// A short, stable, lowercase label for this error, fit for a metric label or a drop reason.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::BadVersion => "bad_version",
            Error::BadHeaderLength => "bad_header_length",
            Error::BadLength => "bad_length",
            Error::BadChecksum => "bad_checksum",
            Error::BadExtensionHeader => "bad_extension_header",
            Error::TooManyExtensionHeaders => "too_many_extension_headers",
            Error::Unsupported => "unsupported",
            Error::NotIp => "not_ip",
            Error::Unrepresentable => "unrepresentable",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = match self {
            Error::Truncated => {
                "packet truncated: the buffer ends before the header or length says"
            }
            Error::BadVersion => "unsupported version field",
            Error::BadHeaderLength => "header length field smaller than the fixed header",
            Error::BadLength => "length field inconsistent with the header",
            Error::BadChecksum => "checksum does not verify",
            Error::BadExtensionHeader => "IPv6 extension-header chain out of order",
            Error::TooManyExtensionHeaders => "IPv6 extension-header chain too long",
            Error::Unsupported => "well-formed but unsupported feature",
            Error::NotIp => "frame carries neither IPv4 nor IPv6",
            Error::Unrepresentable => "representation cannot be encoded on the wire",
        };
        f.write_str(msg)
    }
}

impl core::error::Error for Error {}

/// The result type of every fallible function in this crate.
pub type Result<T> = core::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct() {
        let all = [
            Error::Truncated,
            Error::BadVersion,
            Error::BadHeaderLength,
            Error::BadLength,
            Error::BadChecksum,
            Error::BadExtensionHeader,
            Error::TooManyExtensionHeaders,
            Error::Unsupported,
            Error::NotIp,
            Error::Unrepresentable,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.as_str(), b.as_str());
            }
        }
    }
}
