//! SipHash-2-4 (Aumasson and Bernstein, 2012), implemented here so that it can never change.
//!
//! Maglev permutations are derived from backend names with two SipHash-2-4 keys. `std`'s hashers
//! are not an option: their algorithm is explicitly allowed to change between Rust releases, and
//! a table must be the same on every Stator node forever.

/// SipHash-2-4 of `data` under the 128-bit `key`, as specified by the SipHash paper.
///
/// The key's two halves are read little-endian (`k0 = key[0..8]`, `k1 = key[8..16]`), the message
/// in little-endian 64-bit words, and the last word carries the message length in its top byte;
/// the result is the 64-bit output of the reference implementation.
pub fn siphash24(key: [u8; 16], data: &[u8]) -> u64 {
    let mut state = State::new(key);
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        state.compress(u64::from_le_bytes(to_word(chunk)));
    }
    state.compress(last_word(data, chunks.remainder()));
    state.finish()
}

/// `(siphash24(key1, data), siphash24(key2, data))`, computed in one pass: the two states are
/// independent, so the processor overlaps them (Maglev needs both for every backend name).
pub(crate) fn siphash24_pair(key1: [u8; 16], key2: [u8; 16], data: &[u8]) -> (u64, u64) {
    let (mut a, mut b) = (State::new(key1), State::new(key2));
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(to_word(chunk));
        a.compress(m);
        b.compress(m);
    }
    let m = last_word(data, chunks.remainder());
    a.compress(m);
    b.compress(m);
    (a.finish(), b.finish())
}

/// The final message word: the tail bytes, and the low byte of the length in the top byte (as
/// the specification says).
fn last_word(data: &[u8], tail: &[u8]) -> u64 {
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    last[7] = data.len() as u8;
    u64::from_le_bytes(last)
}

/// Copies up to 8 bytes into a word buffer (callers pass exactly 8).
fn to_word(bytes: &[u8]) -> [u8; 8] {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    word
}

struct State {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl State {
    #[inline(always)]
    fn new(key: [u8; 16]) -> Self {
        let (k0_bytes, k1_bytes) = key.split_at(8);
        let k0 = u64::from_le_bytes(to_word(k0_bytes));
        let k1 = u64::from_le_bytes(to_word(k1_bytes));
        Self {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f6d,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        }
    }

    #[inline(always)]
    fn finish(mut self) -> u64 {
        self.v2 ^= 0xff;
        for _ in 0..4 {
            self.round();
        }
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }

    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13);
        self.v1 ^= self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16);
        self.v3 ^= self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21);
        self.v3 ^= self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17);
        self.v1 ^= self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    #[inline(always)]
    fn compress(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.round();
        self.v0 ^= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key 00 01 .. 0f, as in the reference `vectors.h`.
    const KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    fn message(len: usize) -> Vec<u8> {
        (0..len).map(|i| i as u8).collect()
    }

    /// Vectors from the SipHash reference implementation (`vectors.h`, `vectors_sip64`):
    /// message `00 01 .. (len-1)` under key `00 .. 0f`, output read little-endian.
    #[test]
    fn reference_vectors() {
        let cases: [(usize, u64); 4] = [
            (0, 0x726f_db47_dd0e_0e31),
            (1, 0x74f8_39c5_93dc_67fd),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
        ];
        for (len, want) in cases {
            assert_eq!(siphash24(KEY, &message(len)), want, "length {len}");
        }
    }

    #[test]
    fn pair_is_two_single_hashes() {
        for len in 0..=40 {
            let data = message(len);
            let (a, b) = siphash24_pair(KEY, *b"another-key-16by", &data);
            assert_eq!(a, siphash24(KEY, &data));
            assert_eq!(b, siphash24(*b"another-key-16by", &data));
        }
    }

    /// `std::hash::SipHasher` is SipHash-2-4 today (deprecated because it may change, which is
    /// exactly why Stator has its own copy); agreeing with it on many lengths checks the tail
    /// and length handling.
    #[test]
    #[allow(deprecated)]
    fn agrees_with_std_siphasher_today() {
        use std::hash::Hasher;
        for len in 0..=64 {
            let data = message(len);
            let key: [u8; 16] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ len as u8);
            let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
            let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
            let mut hasher = std::hash::SipHasher::new_with_keys(k0, k1);
            hasher.write(&data);
            assert_eq!(siphash24(key, &data), hasher.finish(), "length {len}");
        }
    }
}
