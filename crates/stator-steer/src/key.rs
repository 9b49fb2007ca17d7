//! What the steering hash reads: the Toeplitz key and the client's fields.

use std::fmt;
use std::str::FromStr;

use stator_hash::RSS_DEFAULT_KEY;

use crate::SteerError;

/// A 40-byte (320-bit) Toeplitz key, the size NICs use for RSS.
///
/// The default of [`crate::SteeringOptions`] is a random key drawn from the operating system
/// when the program is loaded, as the 2014 paper draws one at boot: with a key an attacker
/// cannot know, no choice of source addresses (an IPv6 client owns 2^64 of them) can pile its
/// connections onto one worker. [`RssKey::microsoft`] — the key of Microsoft's verification
/// suite — gives a placement anyone can compute, for tests and for reproducing a decision.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RssKey([u8; 40]);

impl RssKey {
    /// A key of the given bytes.
    pub const fn new(bytes: [u8; 40]) -> Self {
        Self(bytes)
    }

    /// Microsoft's RSS verification key (`6d:5a:56:da:…`), the default of many NICs.
    pub const fn microsoft() -> Self {
        Self(RSS_DEFAULT_KEY)
    }

    /// A key from the operating system's random source (`getrandom(2)`).
    ///
    /// # Errors
    /// [`SteerError::Random`] when the OS has no randomness to give.
    pub fn random() -> Result<Self, SteerError> {
        use rand::TryRngCore as _;
        let mut bytes = [0u8; 40];
        rand::rngs::OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| SteerError::Random {
                reason: e.to_string(),
            })?;
        Ok(Self(bytes))
    }

    /// The key's bytes.
    pub const fn bytes(&self) -> &[u8; 40] {
        &self.0
    }
}

impl fmt::Display for RssKey {
    /// Colon-separated hex, as `ethtool -x` prints an RSS key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for RssKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RssKey({self})")
    }
}

impl FromStr for RssKey {
    type Err = SteerError;

    /// `"microsoft"`, or 40 bytes of hex: 80 digits, optionally separated by `:` (as `ethtool -x`
    /// prints them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("microsoft") {
            return Ok(Self::microsoft());
        }
        let bad = |reason: String| SteerError::BadKey { reason };
        let digits: Vec<u8> = s.bytes().filter(|&c| c != b':').collect();
        if digits.len() != 80 {
            return Err(bad(format!(
                "expected \"microsoft\" or 40 bytes of hex (80 digits, `:` separators allowed), \
                 got {} digits",
                digits.len()
            )));
        }
        let mut bytes = [0u8; 40];
        for (i, pair) in digits.chunks_exact(2).enumerate() {
            let hex = |c: u8| (c as char).to_digit(16);
            match (hex(pair[0]), hex(pair[1])) {
                (Some(hi), Some(lo)) => bytes[i] = (hi * 16 + lo) as u8,
                _ => {
                    return Err(bad(format!(
                        "byte {i}: {:?} is not hex",
                        String::from_utf8_lossy(pair)
                    )));
                }
            }
        }
        Ok(Self(bytes))
    }
}

/// Which fields of the client feed the hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashFields {
    /// The client's address only (the paper's choice, and the default): every connection and
    /// datagram of a client reaches one worker, whatever its source port.
    #[default]
    Addr,
    /// The address and the source port: clients behind one NAT address spread over workers,
    /// but a client's connections from different ports may reach different workers.
    AddrPort,
}

impl HashFields {
    /// The name used in configuration: `"addr"` or `"addr+port"`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Addr => "addr",
            Self::AddrPort => "addr+port",
        }
    }
}

impl fmt::Display for HashFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HashFields {
    type Err = SteerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "addr" => Ok(Self::Addr),
            "addr+port" => Ok(Self::AddrPort),
            other => Err(SteerError::BadFields {
                value: other.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microsoft_key_round_trips_through_text() {
        let k = RssKey::microsoft();
        let text = k.to_string();
        assert!(text.starts_with("6d:5a:56:da:25:5b"), "{text}");
        assert_eq!(text.parse::<RssKey>().unwrap(), k);
        assert_eq!("microsoft".parse::<RssKey>().unwrap(), k);
        let plain: String = text.split(':').collect();
        assert_eq!(plain.parse::<RssKey>().unwrap(), k);
    }

    #[test]
    fn bad_keys_say_why() {
        let e = "6d5a".parse::<RssKey>().unwrap_err().to_string();
        assert!(e.contains("got 4 digits"), "{e}");
        let mut text = "00".repeat(40);
        text.replace_range(6..8, "zz");
        let e = text.parse::<RssKey>().unwrap_err().to_string();
        assert!(e.contains("byte 3"), "{e}");
    }

    #[test]
    fn random_keys_differ() {
        let a = RssKey::random().unwrap();
        let b = RssKey::random().unwrap();
        assert_ne!(a, b, "two 320-bit random keys collided");
    }

    #[test]
    fn fields_parse() {
        assert_eq!("addr".parse::<HashFields>().unwrap(), HashFields::Addr);
        assert_eq!(
            "addr+port".parse::<HashFields>().unwrap(),
            HashFields::AddrPort
        );
        assert_eq!(HashFields::AddrPort.to_string(), "addr+port");
        let e = "port".parse::<HashFields>().unwrap_err().to_string();
        assert!(e.contains("\"port\""), "{e}");
    }
}
