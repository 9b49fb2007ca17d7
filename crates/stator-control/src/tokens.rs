//! The admin API's bearer tokens, resolved from the configuration at start and on each reload
//! (the reconciler swaps them; the API's TCP endpoint reads them per request).

use stator_config::AccessLevel;

/// The bearer tokens of the TCP endpoint (re-read on reload).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    /// The `admin` token.
    pub admin: Option<String>,
    /// The `read` token.
    pub read: Option<String>,
}

impl Tokens {
    /// The level `given` grants, if it is one of the tokens. Both are compared, each in time
    /// that depends only on the lengths.
    pub fn level(&self, given: &str) -> Option<AccessLevel> {
        let matches = |t: &Option<String>| {
            t.as_deref()
                .is_some_and(|t| constant_time_eq(t.as_bytes(), given.as_bytes()))
        };
        let (admin, read) = (matches(&self.admin), matches(&self.read));
        if admin {
            Some(AccessLevel::Admin)
        } else if read {
            Some(AccessLevel::Read)
        } else {
            None
        }
    }

    /// Whether any token is set.
    pub fn any(&self) -> bool {
        self.admin.is_some() || self.read.is_some()
    }
}

/// Compares in time that depends on the lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
