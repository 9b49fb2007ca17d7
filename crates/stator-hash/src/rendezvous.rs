//! Rendezvous, or highest-random-weight, hashing (Thaler and Ravishankar, 1998), as the paper's
//! §5.3 compares it with Maglev.
//!
//! A key goes to the backend with the highest score `score(backend, key)`. To compare with Maglev
//! the method fills an M-entry lookup table whose entry `i` is the winner for key `i`.
//!
//! Scores must be cheap (a table of 655,373 entries over 1000 backends needs 655 million of them),
//! so each backend gets a 64-bit seed `siphash24(RENDEZVOUS_KEY, name)` once, and
//! `score(backend, key) = fmix64(seed ^ fmix64(key))`, where `fmix64` is MurmurHash3's 64-bit
//! finaliser (a bijection with full avalanche). Ties, which need a 64-bit collision, go to the
//! backend whose name sorts first.

use crate::karger::check_equal_weights;
use crate::maglev::sorted_by_name;
use crate::{MaglevBackend, MaglevError, MaglevTable, siphash24};

/// SipHash-2-4 key of the per-backend seeds.
const RENDEZVOUS_KEY: [u8; 16] = *b"stator-hrw-seed1";

/// Rendezvous hashing over a fixed backend set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    /// Seed of each backend with non-zero weight, in name order.
    seeds: Vec<u64>,
    /// Backend id of each seed.
    ids: Vec<u32>,
}

impl Rendezvous {
    /// Prepares the backends with non-zero weight.
    ///
    /// # Errors
    /// The backend-set errors of [`crate::MaglevTable::build`], and
    /// [`MaglevError::UnequalWeights`] if the non-zero weights differ.
    pub fn build(backends: &[MaglevBackend<'_>]) -> Result<Self, MaglevError> {
        let order = sorted_by_name(backends)?;
        check_equal_weights(backends, "rendezvous")?;
        let members = order.iter().map(|&i| &backends[i]).filter(|b| b.weight > 0);
        let (seeds, ids) = members
            .map(|b| (siphash24(RENDEZVOUS_KEY, b.name.as_bytes()), b.id))
            .unzip();
        Ok(Self { seeds, ids })
    }

    /// The backend with the highest score for `key`, `None` if there are no backends.
    pub fn pick(&self, key: u64) -> Option<u32> {
        let mixed = fmix64(key);
        let mut best: Option<(u64, u32)> = None;
        for (&seed, &id) in self.seeds.iter().zip(&self.ids) {
            let score = fmix64(seed ^ mixed);
            if best.is_none_or(|(top, _)| score > top) {
                best = Some((score, id));
            }
        }
        best.map(|(_, id)| id)
    }

    /// The M-entry lookup table: entry `i` is [`Self::pick`] of `i`. No backends → all entries
    /// [`MaglevTable::NO_BACKEND`].
    pub fn table(&self, size: u32) -> Vec<u32> {
        (0..size)
            .map(|i| self.pick(u64::from(i)).unwrap_or(MaglevTable::NO_BACKEND))
            .collect()
    }
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("backend-{i}")).collect()
    }

    fn backends(names: &[String]) -> Vec<MaglevBackend<'_>> {
        names
            .iter()
            .zip(0..)
            .map(|(n, id)| MaglevBackend::new(n, 1, id))
            .collect()
    }

    #[test]
    fn removing_a_backend_moves_only_its_entries() {
        let names = names(40);
        let all = backends(&names);
        let before = Rendezvous::build(&all).unwrap().table(2003);
        let without: Vec<_> = all.iter().copied().filter(|b| b.id != 3).collect();
        let after = Rendezvous::build(&without).unwrap().table(2003);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            assert!(b == a || *b == 3, "entry moved from {b} to {a}");
            moved += usize::from(b != a);
        }
        assert!(moved > 0);
    }

    #[test]
    fn spreads_keys_over_all_backends() {
        let names = names(10);
        let table = Rendezvous::build(&backends(&names)).unwrap().table(10_007);
        for id in 0..10 {
            let count = table.iter().filter(|&&x| x == id).count();
            assert!((800..1200).contains(&count), "backend {id}: {count}");
        }
    }

    #[test]
    fn independent_of_input_order_and_handles_empty_sets() {
        let names = names(8);
        let mut all = backends(&names);
        let table = Rendezvous::build(&all).unwrap().table(97);
        all.reverse();
        assert_eq!(Rendezvous::build(&all).unwrap().table(97), table);
        let empty = Rendezvous::build(&[]).unwrap();
        assert_eq!(empty.pick(1), None);
        assert_eq!(empty.table(2), vec![MaglevTable::NO_BACKEND; 2]);
        all[1].weight = 3;
        assert_eq!(
            Rendezvous::build(&all),
            Err(MaglevError::UnequalWeights {
                method: "rendezvous"
            })
        );
    }
}
