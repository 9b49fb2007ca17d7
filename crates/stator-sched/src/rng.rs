//! A small seeded random number generator owned by each worker (no global RNG).

use crate::{Peer, PeerView, Request};

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, one add and a few multiplies and
/// shifts per number, full period 2^64. Statistically sound for load balancing (it is the seed
/// expander of the xoshiro family), not for anything secret.
///
/// Each worker owns one, seeded by the caller (the proxy seeds each worker differently, tests and
/// simulations seed deterministically), so picks are reproducible from (seed, inputs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator started from `seed` (any value, 0 included).
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0), by Lemire's multiply-shift: the bias is below
    /// `n / 2^64`, far below anything a load balancer can observe.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A weighted random choice among the candidates of `req` (usable, not tried), other than
/// `exclude`: two passes over the peers, no allocation. `None` if there is no such peer.
pub(crate) fn weighted_candidate<V: PeerView + ?Sized>(
    peers: &[Peer],
    rng: &mut Rng,
    req: &Request<'_, V>,
    exclude: Option<usize>,
) -> Option<usize> {
    let eligible = |i: usize| Some(i) != exclude && req.candidate(i);
    let total: u64 = (0..peers.len())
        .filter(|&i| eligible(i))
        .map(|i| u64::from(peers[i].weight))
        .sum();
    if total == 0 {
        return None;
    }
    let mut r = rng.below(total);
    for (i, p) in peers.iter().enumerate() {
        if !eligible(i) {
            continue;
        }
        let w = u64::from(p.weight);
        if r < w {
            return Some(i);
        }
        r -= w;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference SplitMix64 sequence from seed 0 (as in the xoshiro authors' `splitmix64.c`).
    #[test]
    fn splitmix64_reference_values() {
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(42);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            let x = rng.below(7);
            assert!(x < 7);
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(rng.below(0), 0);
    }
}
