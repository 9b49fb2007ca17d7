//! Filling a Maglev table: Pseudocode 1 with weighted turns, made fast without changing its
//! result.
//!
//! Each turn, a backend claims the first free slot of its permutation `c, c + s, c + 2s, …
//! (mod M)` starting at its next position `c`. How that slot is *found* changes as the table
//! fills, because the expected number of probes at fill level `n` is `M / (M - n)`: summed over
//! the whole build that is `M · H(M)` probes (≈ 11.7 per slot at M = 65537), most of them spent
//! on the last few per cent of slots.
//!
//! 1. Until only `tail` slots are free, probe four candidates per step (`c`, `c + s`, `c + 2s`,
//!    `c + 3s`) and pick the first free one without branching: the loads are independent, the
//!    dependency chain advances by `4s` at once, and the loop branch is taken once per four
//!    probes. Early on the step almost always finds a free slot, so the branch is predictable
//!    where a one-probe-at-a-time loop would mispredict on every other turn.
//! 2. Then stop probing and look at the free slots instead: the first free slot of the
//!    permutation is the free slot `f` with the smallest index `j = (f - c) · s⁻¹ mod M` (M is
//!    prime, so `s` is invertible). That costs O(free) per turn instead of O(M / free).
//!
//! Both find the same slot, so the table is exactly Pseudocode 1's; the unit tests check this
//! against a literal transcription for every phase boundary. The per-backend state is 28 bytes
//! (next position, skip and its multiples 2s..4s, id, count) and the slot state one byte per
//! slot: no M×N permutation matrix is ever built.

use super::{BackendSlots, MaglevPermutation, MaglevTable};

/// Builds the table; see the module documentation.
pub(super) fn populate(permutations: &[MaglevPermutation], size: u32) -> MaglevTable {
    populate_with_tail(permutations, size, tail_threshold(size))
}

/// The free-slot count below which scanning the free slots beats probing: the tail costs about
/// `tail² / 2` scan steps, probing down to `tail` free slots about `M · ln(M / tail)` probes, so
/// the optimum is `tail = √(M · probe / step)`. A scan step (a Barrett multiplication) costs about
/// three probes, and measurement agrees: `√M / 2` beats `√M` and `√M / 4`.
fn tail_threshold(size: u32) -> u32 {
    size.isqrt() / 2
}

/// [`populate`] with an explicit tail threshold (tests use every boundary).
pub(super) fn populate_with_tail(
    permutations: &[MaglevPermutation],
    size: u32,
    tail: u32,
) -> MaglevTable {
    let mut slots = vec![MaglevTable::NO_BACKEND; size as usize];
    let mut backends: Vec<BackendSlots> = permutations
        .iter()
        .map(|p| BackendSlots {
            id: p.id,
            weight: p.weight,
            slots: 0,
        })
        .collect();
    let max_weight = u64::from(permutations.iter().map(|p| p.weight).max().unwrap_or(0));
    if max_weight == 0 {
        return MaglevTable {
            size,
            slots,
            backends,
        };
    }

    // Per-turn state of the backends that take turns, in turn order (28 bytes each).
    let mut turns: Vec<Turn> = permutations
        .iter()
        .filter(|p| p.weight > 0)
        .map(|p| {
            let s2 = add_mod(p.skip, p.skip, size);
            Turn {
                next: p.offset,
                skip: p.skip,
                id: p.id,
                count: 0,
                steps: [s2, add_mod(s2, p.skip, size), add_mod(s2, s2, size)],
            }
        })
        .collect();
    let weights: Vec<u64> = permutations
        .iter()
        .filter(|p| p.weight > 0)
        .map(|p| u64::from(p.weight))
        .collect();
    let uniform = weights.iter().all(|&w| w == max_weight);
    let mut credits = Credits {
        credit: vec![0; weights.len()],
        weights,
        max: max_weight,
    };
    let mut free = FreeSlots::new(size);
    let mut table = Fill {
        turns: &mut turns,
        credits: &mut credits,
        slots: &mut slots,
        free: &mut free,
    };

    // Probe until `tail` slots are free, then scan the free slots. The turn order continues
    // across the switch: `next_turn` is whose turn it is.
    let next_turn = if uniform {
        table.run::<false>(0, tail, &mut Probing)
    } else {
        table.run::<true>(0, tail, &mut Probing)
    };
    if table.free.remaining > 0 {
        let skips: Vec<u32> = table.turns.iter().map(|t| t.skip).collect();
        let mut list = Tail::new(table.free, &skips);
        if uniform {
            table.run::<false>(next_turn, 0, &mut list);
        } else {
            table.run::<true>(next_turn, 0, &mut list);
        }
    }

    for (b, turn) in backends.iter_mut().filter(|b| b.weight > 0).zip(&turns) {
        b.slots = turn.count;
    }
    MaglevTable {
        size,
        slots,
        backends,
    }
}

/// The state of one backend that takes turns.
struct Turn {
    /// Position of the next preference to look at.
    next: u32,
    skip: u32,
    id: u32,
    /// Slots taken so far.
    count: u32,
    /// `2s, 3s, 4s mod M`: the offsets of a four-candidate probe step.
    steps: [u32; 3],
}

/// Who takes a turn when weights differ: every round each backend adds its weight to its credit
/// and takes a turn if the credit reaches the largest weight, paying the largest weight for it.
struct Credits {
    weights: Vec<u64>,
    credit: Vec<u64>,
    max: u64,
}

impl Credits {
    #[inline(always)]
    fn takes_turn(&mut self, k: usize) -> bool {
        self.credit[k] += self.weights[k];
        if self.credit[k] < self.max {
            return false;
        }
        self.credit[k] -= self.max;
        true
    }
}

/// The mutable state of one build.
struct Fill<'a> {
    turns: &'a mut [Turn],
    credits: &'a mut Credits,
    slots: &'a mut [u32],
    free: &'a mut FreeSlots,
}

impl Fill<'_> {
    /// Runs turns, starting with turn `k`, until only `stop` slots are free; `take` claims the
    /// first free slot of a turn's permutation. Returns whose turn is next. Monomorphised for
    /// equal weights (every backend takes every turn) and for weighted turns.
    #[inline(always)]
    fn run<const WEIGHTED: bool>(
        &mut self,
        mut start: usize,
        stop: u32,
        how: &mut impl Claim,
    ) -> usize {
        let size = self.free.size;
        loop {
            for (k, turn) in self.turns.iter_mut().enumerate().skip(start) {
                if self.free.remaining <= stop {
                    return k;
                }
                if !WEIGHTED || self.credits.takes_turn(k) {
                    let c = how.claim(self.free, turn, k);
                    self.slots[c as usize] = turn.id;
                    turn.count += 1;
                    turn.next = add_mod(c, turn.skip, size);
                }
            }
            start = 0;
        }
    }
}

/// A way to claim the first free slot of a turn's permutation.
trait Claim {
    fn claim(&mut self, free: &mut FreeSlots, turn: &Turn, k: usize) -> u32;
}

/// Claim by probing the permutation (all but the last `tail` slots).
struct Probing;

impl Claim for Probing {
    #[inline(always)]
    fn claim(&mut self, free: &mut FreeSlots, turn: &Turn, _: usize) -> u32 {
        let c = free.probe(turn.next, turn.skip, turn.steps);
        free.take(c);
        c
    }
}

impl Claim for Tail {
    #[inline(always)]
    fn claim(&mut self, free: &mut FreeSlots, turn: &Turn, k: usize) -> u32 {
        free.remaining -= 1;
        self.take_first(turn.next, turn.skip, k)
    }
}

/// `(a + b) mod m` for `a, b < m <= 2^24` (no overflow, no division).
#[inline(always)]
fn add_mod(a: u32, b: u32, m: u32) -> u32 {
    let x = a + b;
    // If x < m, x - m wraps above x; otherwise it is the reduced value.
    x.min(x.wrapping_sub(m))
}

/// One byte per slot (1 = taken) and the number of free slots. Probing touches these M bytes
/// rather than the 4-byte slots (a bit per slot was slower: extracting bits costs more than the
/// smaller footprint saves).
struct FreeSlots {
    size: u32,
    taken: Vec<u8>,
    remaining: u32,
}

impl FreeSlots {
    fn new(size: u32) -> Self {
        Self {
            size,
            taken: vec![0; size as usize],
            remaining: size,
        }
    }

    /// 1 if slot `c` is taken, else 0.
    #[inline(always)]
    fn bit(&self, c: u32) -> u32 {
        u32::from(self.taken[c as usize])
    }

    #[inline(always)]
    fn take(&mut self, c: u32) {
        self.taken[c as usize] = 1;
        self.remaining -= 1;
    }

    /// First free slot of `c, c + s, …`, four candidates per step. A free slot exists.
    #[inline(always)]
    fn probe(&self, mut c: u32, skip: u32, [s2, s3, s4]: [u32; 3]) -> u32 {
        let m = self.size;
        loop {
            let c1 = add_mod(c, skip, m);
            let c2 = add_mod(c, s2, m);
            let c3 = add_mod(c, s3, m);
            let taken =
                self.bit(c) | (self.bit(c1) << 1) | (self.bit(c2) << 2) | (self.bit(c3) << 3);
            if taken != 0b1111 {
                // Branch-free pick: which candidate is free is unpredictable.
                let candidates = [c, c1, c2, c3];
                return candidates[(taken.trailing_ones() & 3) as usize];
            }
            c = add_mod(c, s4, m);
        }
    }
}

/// The last phase: the list of free slots, and modular inverses of the skips.
struct Tail {
    size: u32,
    /// `floor(2^64 / size)` (rounded down from `u64::MAX`), for Barrett reduction.
    magic: u64,
    free: Vec<u32>,
    /// `skip⁻¹ mod size` of every turn-taking backend, in turn order.
    inverses: Vec<u32>,
}

impl Tail {
    fn new(slots: &FreeSlots, skips: &[u32]) -> Self {
        let mut tail = Self {
            size: slots.size,
            magic: u64::MAX / u64::from(slots.size),
            free: Vec::with_capacity(slots.remaining as usize),
            inverses: Vec::new(),
        };
        // Eight bytes at a time: almost every slot is taken by now.
        let mut chunks = slots.taken.chunks_exact(8);
        let mut base = 0u32;
        for chunk in &mut chunks {
            if chunk != [1; 8] {
                tail.collect_free(chunk, base);
            }
            base += 8;
        }
        tail.collect_free(chunks.remainder(), base);
        tail.inverses = tail.inverses_of(skips);
        tail
    }

    fn collect_free(&mut self, taken: &[u8], base: u32) {
        for (c, &t) in (base..).zip(taken) {
            if t == 0 {
                self.free.push(c);
            }
        }
    }

    /// Modular inverses of all `values` (each in `1..size`) with one exponentiation and 3n
    /// multiplications (Montgomery's batch-inversion trick).
    fn inverses_of(&self, values: &[u32]) -> Vec<u32> {
        let mut prefix = Vec::with_capacity(values.len());
        let mut product = 1;
        for &v in values {
            product = self.mul_mod(product, v);
            prefix.push(product);
        }
        // Fermat: x^(size-2) is the inverse of x modulo the prime size.
        let (mut base, mut exp, mut inverse) = (product, self.size - 2, 1);
        while exp > 0 {
            if exp & 1 == 1 {
                inverse = self.mul_mod(inverse, base);
            }
            base = self.mul_mod(base, base);
            exp >>= 1;
        }
        // Now `inverse` is (v0 · … · vk)⁻¹; peel one value off per step.
        let mut inverses = vec![0; values.len()];
        for k in (0..values.len()).rev() {
            let before = if k == 0 { 1 } else { prefix[k - 1] };
            inverses[k] = self.mul_mod(inverse, before);
            inverse = self.mul_mod(inverse, values[k]);
        }
        inverses
    }

    /// `a · b mod size` for `a, b < size <= 2^24`: Barrett reduction of a product below 2^48.
    /// The estimated quotient is the true one or one less, so one correction suffices.
    #[inline(always)]
    fn mul_mod(&self, a: u32, b: u32) -> u32 {
        let m = u64::from(self.size);
        let x = u64::from(a) * u64::from(b);
        let q = ((u128::from(x) * u128::from(self.magic)) >> 64) as u64;
        let r = x - q * m;
        // r < 2m <= 2^25, so the casts are exact.
        if r >= m { (r - m) as u32 } else { r as u32 }
    }

    /// Claims and returns the first free slot of turn `k`'s permutation from `c`: the free slot
    /// with the smallest permutation index `j = (f - c) · skip⁻¹`, which is `c + j · skip`.
    fn take_first(&mut self, c: u32, skip: u32, k: usize) -> u32 {
        let m = self.size;
        let inverse = self.inverses[k];
        let back = m - c;
        let j = self
            .free
            .iter()
            .map(|&f| self.mul_mod(add_mod(f, back, m), inverse))
            .min()
            .unwrap_or(0);
        let chosen = add_mod(c, self.mul_mod(j, skip), m);
        // The caller only enters the tail while a slot is free, so `chosen` is in the list.
        if let Some(index) = self.free.iter().position(|&f| f == chosen) {
            self.free.swap_remove(index);
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudocode 1 with weighted turns, transcribed literally: `permutation[i][next[i]]`
    /// computed with `%`, the table itself as the "taken" marker.
    fn reference(permutations: &[MaglevPermutation], size: u32) -> Vec<u32> {
        let m = u64::from(size);
        let mut entry = vec![u32::MAX; size as usize];
        let max = permutations.iter().map(|p| p.weight).max().unwrap_or(0);
        if max == 0 {
            return entry;
        }
        let mut next = vec![0u64; permutations.len()];
        let mut credit = vec![0u64; permutations.len()];
        let mut n = 0;
        loop {
            for (i, p) in permutations.iter().enumerate() {
                if p.weight == 0 {
                    continue;
                }
                credit[i] += u64::from(p.weight);
                if credit[i] < u64::from(max) {
                    continue;
                }
                credit[i] -= u64::from(max);
                let permutation = |j: u64| (u64::from(p.offset) + j * u64::from(p.skip)) % m;
                let mut c = permutation(next[i]);
                while entry[c as usize] != u32::MAX {
                    next[i] += 1;
                    c = permutation(next[i]);
                }
                entry[c as usize] = p.id;
                next[i] += 1;
                n += 1;
                if n == size {
                    return entry;
                }
            }
        }
    }

    /// Deterministic pseudo-random permutations (splitmix64).
    fn permutations(n: u32, size: u32, seed: u64, weighted: bool) -> Vec<MaglevPermutation> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        (0..n)
            .map(|id| MaglevPermutation {
                id,
                weight: if weighted { (next() % 5) as u32 } else { 1 },
                offset: (next() % u64::from(size)) as u32,
                skip: (next() % u64::from(size - 1)) as u32 + 1,
            })
            .collect()
    }

    #[test]
    fn every_phase_gives_pseudocode_1_exactly() {
        for (n, size) in [
            (1, 2),
            (2, 3),
            (3, 7),
            (5, 13),
            (10, 31),
            (7, 251),
            (40, 1009),
        ] {
            for seed in 0..4 {
                for weighted in [false, true] {
                    let perms = permutations(n, size, seed, weighted);
                    let want = reference(&perms, size);
                    for tail in [0, 1, 2, size / 3, size / 2 + 1, size] {
                        let got = populate_with_tail(&perms, size, tail);
                        assert_eq!(got.slots, want, "n={n} M={size} seed={seed} tail={tail}");
                    }
                    assert_eq!(populate(&perms, size).slots, want);
                }
            }
        }
    }

    #[test]
    fn barrett_mul_mod_is_exact() {
        for size in [2u32, 3, 7, 65_537, 655_373, 16_777_213] {
            let tail = Tail {
                size,
                magic: u64::MAX / u64::from(size),
                free: Vec::new(),
                inverses: Vec::new(),
            };
            let edge = [0, 1, 2, size / 2, size - 2, size - 1];
            for &a in &edge {
                for &b in &edge {
                    let (a, b) = (a.min(size - 1), b.min(size - 1));
                    let want = (u64::from(a) * u64::from(b) % u64::from(size)) as u32;
                    assert_eq!(tail.mul_mod(a, b), want, "{a}*{b} mod {size}");
                }
            }
        }
    }

    #[test]
    fn batch_inverses_are_inverses() {
        for size in [2u32, 3, 7, 65_537, 16_777_213] {
            let tail = Tail {
                size,
                magic: u64::MAX / u64::from(size),
                free: Vec::new(),
                inverses: Vec::new(),
            };
            let values: Vec<u32> = (1..size.min(300))
                .chain([size - 1, size / 2 + 1])
                .filter(|&v| v < size)
                .collect();
            let inverses = tail.inverses_of(&values);
            for (&v, &inverse) in values.iter().zip(&inverses) {
                assert_eq!(tail.mul_mod(v, inverse), 1, "{v}⁻¹ mod {size}");
            }
        }
    }
}
