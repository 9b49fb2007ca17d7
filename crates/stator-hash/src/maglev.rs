//! Maglev hashing (Eisenbud et al., NSDI '16, §3.4): lookup tables in which every backend owns an
//! almost equal (or weight-proportional) share of the slots and which change little when the
//! backend set changes.
//!
//! Each backend has a permutation of the slots, `(offset + j * skip) mod M`, derived from its
//! stable name with two independent SipHash-2-4 keys ([`MAGLEV_H1_KEY`], [`MAGLEV_H2_KEY`]). The
//! backends take turns, in the order of their names, claiming their most preferred free slot
//! (Pseudocode 1). Weights change how often a backend takes a turn: every round each backend adds
//! its weight to a credit and takes a turn when the credit reaches the largest weight, paying the
//! largest weight for it (the cumulative rule of Katran's Maglev V2 and Envoy). With equal weights
//! every backend takes a turn every round, which is exactly Pseudocode 1.
//!
//! The permutations are generated on the fly: the build keeps O(N) state (next position, skip,
//! credit per backend) and one bit per slot, never the M×N permutation matrix.

mod populate;

use crate::siphash::siphash24_pair;
use crate::{MaglevError, is_prime};
use populate::populate;

/// SipHash-2-4 key of `h1`, which gives a backend's `offset = h1(name) mod M`.
pub const MAGLEV_H1_KEY: [u8; 16] = *b"stator-maglev-h1";

/// SipHash-2-4 key of `h2`, which gives a backend's `skip = h2(name) mod (M - 1) + 1`.
pub const MAGLEV_H2_KEY: [u8; 16] = *b"stator-maglev-h2";

/// A backend as the table builder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaglevBackend<'a> {
    /// The backend's stable name (its configured id, else `address:port`). The permutation is
    /// derived from it, so it must not change while the backend lives. Must be non-empty and
    /// unique in the set.
    pub name: &'a str,
    /// Relative weight; 0 keeps the backend out of the table.
    pub weight: u32,
    /// The id stored in the table's slots (assigned by the control plane). Must be unique in the
    /// set and must not be [`MaglevTable::NO_BACKEND`].
    pub id: u32,
}

impl<'a> MaglevBackend<'a> {
    /// A backend with the given name, weight and id.
    pub const fn new(name: &'a str, weight: u32, id: u32) -> Self {
        Self { name, weight, id }
    }
}

/// A backend with an explicit permutation `(offset + j * skip) mod M`, for reproducing the paper's
/// examples and for callers that derive permutations themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaglevPermutation {
    /// The id stored in the table's slots.
    pub id: u32,
    /// Relative weight; 0 keeps the backend out of the table.
    pub weight: u32,
    /// First preferred slot, `< M`.
    pub offset: u32,
    /// Distance between consecutive preferences, in `1..M`.
    pub skip: u32,
}

impl MaglevPermutation {
    /// The permutation of a backend named `name` in a table of `size` slots:
    /// `offset = siphash24(MAGLEV_H1_KEY, name) mod size`,
    /// `skip = siphash24(MAGLEV_H2_KEY, name) mod (size - 1) + 1`.
    ///
    /// `size` should be a prime (at least 2); for sizes below 2, offset is 0 and skip is 1.
    pub fn from_name(name: &str, size: u32, id: u32, weight: u32) -> Self {
        let (h1, h2) = siphash24_pair(MAGLEV_H1_KEY, MAGLEV_H2_KEY, name.as_bytes());
        // Both remainders are below `size`, so they fit in u32.
        let offset = h1.checked_rem(u64::from(size)).unwrap_or(0) as u32;
        let skip = h2
            .checked_rem(u64::from(size.saturating_sub(1)))
            .unwrap_or(0) as u32
            + 1;
        Self {
            id,
            weight,
            offset,
            skip,
        }
    }

    /// The `j`-th preferred slot, `(offset + j * skip) mod size` (`size` must be non-zero).
    pub fn nth(&self, j: u32, size: u32) -> u32 {
        let size = u64::from(size.max(1));
        // The result is below `size`, so it fits in u32.
        ((u64::from(self.offset) + u64::from(j) * u64::from(self.skip)) % size) as u32
    }
}

/// How many slots a backend received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackendSlots {
    /// The backend's id.
    pub id: u32,
    /// The backend's weight.
    pub weight: u32,
    /// Number of slots holding `id`.
    pub slots: u32,
}

/// One slot that differs between two tables: program `slots[index] = id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotChange {
    /// Slot index.
    pub index: u32,
    /// The new table's backend id (possibly [`MaglevTable::NO_BACKEND`]).
    pub id: u32,
}

/// A Maglev lookup table: `slots[hash % M]` is the backend id for a flow hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaglevTable {
    size: u32,
    slots: Vec<u32>,
    backends: Vec<BackendSlots>,
}

impl MaglevTable {
    /// The id of an empty slot (no usable backend).
    pub const NO_BACKEND: u32 = u32::MAX;

    /// The default table size (a prime; the paper's "small" size).
    pub const DEFAULT_SIZE: u32 = 65_537;

    /// The largest accepted table size (`2^24`; the largest accepted prime is 16,777,213).
    pub const MAX_SIZE: u32 = 1 << 24;

    /// Builds the table for a set of named backends.
    ///
    /// The result depends only on the set (names, weights, ids) and `size`, not on the order of
    /// `backends`: backends take turns in the byte order of their names. Zero backends, or all
    /// weights zero, give a valid table whose slots are all [`Self::NO_BACKEND`].
    ///
    /// # Errors
    /// [`MaglevError::SizeNotPrime`] / [`MaglevError::SizeTooLarge`] for a bad size;
    /// [`MaglevError::EmptyName`], [`MaglevError::DuplicateName`], [`MaglevError::DuplicateId`] or
    /// [`MaglevError::ReservedId`] for a bad backend set.
    pub fn build(backends: &[MaglevBackend<'_>], size: u32) -> Result<Self, MaglevError> {
        check_size(size)?;
        let order = sorted_by_name(backends)?;
        let permutations: Vec<MaglevPermutation> = order
            .iter()
            .map(|&i| {
                let b = &backends[i];
                MaglevPermutation::from_name(b.name, size, b.id, b.weight)
            })
            .collect();
        Ok(populate(&permutations, size))
    }

    /// Builds the table from explicit permutations; backends take turns in the order given.
    ///
    /// # Errors
    /// [`MaglevError::SizeNotPrime`] / [`MaglevError::SizeTooLarge`] for a bad size;
    /// [`MaglevError::OffsetOutOfRange`], [`MaglevError::SkipOutOfRange`],
    /// [`MaglevError::DuplicateId`] or [`MaglevError::ReservedId`] for a bad permutation.
    pub fn build_with_permutations(
        permutations: &[MaglevPermutation],
        size: u32,
    ) -> Result<Self, MaglevError> {
        check_size(size)?;
        for p in permutations {
            if p.offset >= size {
                return Err(MaglevError::OffsetOutOfRange {
                    id: p.id,
                    offset: p.offset,
                    size,
                });
            }
            if p.skip == 0 || p.skip >= size {
                return Err(MaglevError::SkipOutOfRange {
                    id: p.id,
                    skip: p.skip,
                    size,
                });
            }
        }
        check_ids(permutations.iter().map(|p| p.id))?;
        Ok(populate(permutations, size))
    }

    /// The table size M.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The slots: backend ids, [`Self::NO_BACKEND`] where there is none.
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// The backend for a flow hash: `slots[hash % M]`, `None` if the slot is empty.
    #[inline]
    pub fn lookup(&self, hash: u32) -> Option<u32> {
        // `size` is never 0 (it is prime), and `slots.len() == size`.
        match self.slots.get((hash % self.size) as usize) {
            Some(&id) if id != Self::NO_BACKEND => Some(id),
            _ => None,
        }
    }

    /// Whether no slot holds a backend.
    pub fn is_empty(&self) -> bool {
        self.backends.iter().all(|b| b.slots == 0)
    }

    /// Slots per backend, in turn order (by name for [`Self::build`]); includes weight-0
    /// backends with 0 slots.
    pub fn slot_counts(&self) -> &[BackendSlots] {
        &self.backends
    }

    /// Number of slots of the backend `id`, `None` if it is not in the table's backend set.
    pub fn slot_count(&self, id: u32) -> Option<u32> {
        self.backends.iter().find(|b| b.id == id).map(|b| b.slots)
    }

    /// The slots that differ from `old` to `new`, in increasing index order, with `new`'s ids:
    /// what to write into a BPF map holding `old` to turn it into `new`.
    ///
    /// # Errors
    /// [`MaglevError::SizeMismatch`] if the tables have different sizes.
    pub fn delta(old: &Self, new: &Self) -> Result<Vec<SlotChange>, MaglevError> {
        if old.size != new.size {
            return Err(MaglevError::SizeMismatch {
                old: old.size,
                new: new.size,
            });
        }
        Ok(old
            .slots
            .iter()
            .zip(&new.slots)
            .zip(0u32..)
            .filter(|((a, b), _)| a != b)
            .map(|((_, &id), index)| SlotChange { index, id })
            .collect())
    }
}

/// Rejects sizes that are not prime or too large.
fn check_size(size: u32) -> Result<(), MaglevError> {
    if size > MaglevTable::MAX_SIZE {
        return Err(MaglevError::SizeTooLarge {
            size,
            max: MaglevTable::MAX_SIZE,
        });
    }
    if !is_prime(size) {
        return Err(MaglevError::SizeNotPrime { size });
    }
    Ok(())
}

/// Rejects reserved and repeated ids (reporting the smallest repeated id).
fn check_ids(ids: impl Iterator<Item = u32>) -> Result<(), MaglevError> {
    let mut ids: Vec<u32> = ids.collect();
    if ids.contains(&MaglevTable::NO_BACKEND) {
        return Err(MaglevError::ReservedId {
            id: MaglevTable::NO_BACKEND,
        });
    }
    ids.sort_unstable();
    match ids.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(MaglevError::DuplicateId { id: w[0] }),
        None => Ok(()),
    }
}

/// Validates a backend set (names non-empty and unique, ids unique and not reserved) and returns
/// the indices of `backends` sorted by name: the canonical order shared by every table method.
pub(crate) fn sorted_by_name(backends: &[MaglevBackend<'_>]) -> Result<Vec<usize>, MaglevError> {
    if let Some(index) = backends.iter().position(|b| b.name.is_empty()) {
        return Err(MaglevError::EmptyName { index });
    }
    check_ids(backends.iter().map(|b| b.id))?;
    // Byte order of the names. Comparing a big-endian 8-byte prefix first settles most
    // comparisons without a call to memcmp; equal prefixes fall back to the whole name.
    let prefix = |name: &str| {
        let mut bytes = [0u8; 8];
        let n = name.len().min(8);
        bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        u64::from_be_bytes(bytes)
    };
    let mut keyed: Vec<(u64, &str, usize)> = backends
        .iter()
        .enumerate()
        .map(|(i, b)| (prefix(b.name), b.name, i))
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    if let Some(w) = keyed.windows(2).find(|w| w[0].1 == w[1].1) {
        return Err(MaglevError::DuplicateName {
            name: w[0].1.to_owned(),
        });
    }
    let order: Vec<usize> = keyed.iter().map(|&(_, _, i)| i).collect();
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::siphash24;

    const B0: u32 = 0;
    const B1: u32 = 1;
    const B2: u32 = 2;

    fn perm(id: u32, offset: u32, skip: u32) -> MaglevPermutation {
        MaglevPermutation {
            id,
            weight: 1,
            offset,
            skip,
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.1.{}.{}:443", i / 256, i % 256))
            .collect()
    }

    fn equal(names: &[String]) -> Vec<MaglevBackend<'_>> {
        names
            .iter()
            .zip(0..)
            .map(|(n, id)| MaglevBackend::new(n, 1, id))
            .collect()
    }

    /// The paper's Table 1 (§3.4): M = 7, (offset, skip) = (3, 4), (0, 2), (3, 1). The paper's
    /// text names the backends B0..B2 here and removes B1 (the seed copy of the paper prints them
    /// 1-based, B1..B3, and removes "B2": the same backend). Checked by hand against Pseudocode 1.
    #[test]
    fn paper_table_1() {
        let all = [perm(B0, 3, 4), perm(B1, 0, 2), perm(B2, 3, 1)];
        let permutations: Vec<Vec<u32>> = all
            .iter()
            .map(|p| (0..7).map(|j| p.nth(j, 7)).collect())
            .collect();
        assert_eq!(permutations[0], [3, 0, 4, 1, 5, 2, 6]);
        assert_eq!(permutations[1], [0, 2, 4, 6, 1, 3, 5]);
        assert_eq!(permutations[2], [3, 4, 5, 6, 0, 1, 2]);

        let before = MaglevTable::build_with_permutations(&all, 7).unwrap();
        assert_eq!(before.slots(), [B1, B0, B1, B0, B2, B2, B0]);
        let after = MaglevTable::build_with_permutations(&[all[0], all[2]], 7).unwrap();
        assert_eq!(after.slots(), [B0, B0, B0, B0, B2, B2, B2]);

        // "aside from updating all of the entries that contained B1, only one other entry (row 7)
        // needs to be changed": slots 0 and 2 held B1 and go to B0; slot 6 (row 7) moves from B0
        // to B2.
        let delta = MaglevTable::delta(&before, &after).unwrap();
        let changed: Vec<(u32, u32)> = delta.iter().map(|c| (c.index, c.id)).collect();
        assert_eq!(changed, [(0, B0), (2, B0), (6, B2)]);
    }

    #[test]
    fn sizes_must_be_prime_and_bounded() {
        let err = MaglevTable::build(&[], 65_536).unwrap_err();
        assert_eq!(err, MaglevError::SizeNotPrime { size: 65_536 });
        assert_eq!(err.to_string(), "table size 65536 is not prime");
        for size in [0, 1, 4, 9, 65_535] {
            assert_eq!(
                MaglevTable::build(&[], size),
                Err(MaglevError::SizeNotPrime { size })
            );
        }
        assert!(matches!(
            MaglevTable::build(&[], 16_777_259),
            Err(MaglevError::SizeTooLarge { .. })
        ));
        assert!(MaglevTable::build(&[], 2).is_ok());
    }

    #[test]
    fn rejects_bad_backend_sets_clearly() {
        let b = |name, id| MaglevBackend::new(name, 1, id);
        let err = MaglevTable::build(&[b("a", 1), b("", 2)], 7).unwrap_err();
        assert_eq!(err, MaglevError::EmptyName { index: 1 });
        let err = MaglevTable::build(&[b("a", 1), b("b", 2), b("a", 3)], 7).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"backend name "a" is used by more than one backend"#
        );
        let err = MaglevTable::build(&[b("a", 5), b("b", 5)], 7).unwrap_err();
        assert_eq!(err, MaglevError::DuplicateId { id: 5 });
        let err = MaglevTable::build(&[b("a", u32::MAX)], 7).unwrap_err();
        assert_eq!(err, MaglevError::ReservedId { id: u32::MAX });
    }

    #[test]
    fn rejects_bad_explicit_permutations() {
        let err = MaglevTable::build_with_permutations(&[perm(1, 7, 1)], 7).unwrap_err();
        assert_eq!(
            err.to_string(),
            "permutation of backend id 1: offset 7 is not below the table size 7"
        );
        for skip in [0, 7, 8] {
            assert_eq!(
                MaglevTable::build_with_permutations(&[perm(1, 0, skip)], 7),
                Err(MaglevError::SkipOutOfRange {
                    id: 1,
                    skip,
                    size: 7
                })
            );
        }
        assert_eq!(
            MaglevTable::build_with_permutations(&[perm(1, 0, 1), perm(1, 2, 3)], 7),
            Err(MaglevError::DuplicateId { id: 1 })
        );
    }

    #[test]
    fn no_backends_or_zero_weights_give_an_empty_table() {
        let empty = MaglevTable::build(&[], 13).unwrap();
        assert_eq!(empty.slots(), [MaglevTable::NO_BACKEND; 13]);
        assert!(empty.is_empty());
        assert_eq!(empty.lookup(12345), None);
        let zero = [MaglevBackend::new("a", 0, 1), MaglevBackend::new("b", 0, 2)];
        let table = MaglevTable::build(&zero, 13).unwrap();
        assert!(table.is_empty());
        assert_eq!(table.slot_count(1), Some(0));
        assert_eq!(table.slot_count(3), None);
        assert_eq!(table.lookup(0), None);
    }

    #[test]
    fn lookup_is_slot_of_hash_mod_size() {
        let names = names(5);
        let table = MaglevTable::build(&equal(&names), 31).unwrap();
        for hash in [0u32, 1, 30, 31, 32, 1_000_000, u32::MAX] {
            assert_eq!(
                table.lookup(hash),
                Some(table.slots()[(hash % 31) as usize])
            );
        }
    }

    #[test]
    fn equal_weights_differ_by_at_most_one_slot() {
        for (n, size) in [(1, 7), (3, 7), (7, 7), (10, 13), (100, 251), (1000, 65_537)] {
            let names = names(n);
            let table = MaglevTable::build(&equal(&names), size).unwrap();
            let counts: Vec<u32> = table.slot_counts().iter().map(|b| b.slots).collect();
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert_eq!(*min, size / n as u32, "n={n} M={size}");
            assert!(max - min <= 1, "n={n} M={size}: {min}..{max}");
            assert_eq!(counts.iter().sum::<u32>(), size);
        }
    }

    #[test]
    fn more_backends_than_slots_still_fills_the_table() {
        let names = names(20);
        let table = MaglevTable::build(&equal(&names), 7).unwrap();
        assert!(!table.slots().contains(&MaglevTable::NO_BACKEND));
        assert_eq!(
            table.slot_counts().iter().filter(|b| b.slots == 1).count(),
            7
        );
    }

    #[test]
    fn weighted_shares_are_within_one_percent() {
        let names = names(10);
        let weights = [1u32, 2, 3, 5, 8, 13, 21, 34, 55, 100];
        let backends: Vec<_> = names
            .iter()
            .zip(weights)
            .zip(0..)
            .map(|((n, w), id)| MaglevBackend::new(n, w, id))
            .collect();
        let total: u32 = weights.iter().sum();
        for size in [1009u32, 65_537] {
            let table = MaglevTable::build(&backends, size).unwrap();
            for b in table.slot_counts() {
                let share = f64::from(b.slots) / f64::from(size);
                let want = f64::from(b.weight) / f64::from(total);
                assert!(
                    (share - want).abs() <= 0.01,
                    "M={size} {b:?}: {share} vs {want}"
                );
            }
        }
    }

    #[test]
    fn weight_zero_gets_no_slots_and_others_stay_balanced() {
        let names = names(4);
        let mut backends = equal(&names);
        backends[2].weight = 0;
        let table = MaglevTable::build(&backends, 101).unwrap();
        assert_eq!(table.slot_count(2), Some(0));
        assert!(!table.slots().contains(&2));
        for id in [0, 1, 3] {
            let count = table.slot_count(id).unwrap();
            assert!((33..=34).contains(&count), "{id}: {count}");
        }
    }

    #[test]
    fn scaling_all_weights_changes_nothing() {
        let names = names(6);
        let weighted = |k: u32| -> Vec<MaglevBackend<'_>> {
            names
                .iter()
                .zip(0..)
                .map(|(n, id)| MaglevBackend::new(n, k * (id + 1), id))
                .collect()
        };
        let one = MaglevTable::build(&weighted(1), 251).unwrap();
        assert_eq!(MaglevTable::build(&weighted(1000), 251).unwrap(), {
            let mut scaled = one.clone();
            for b in &mut scaled.backends {
                b.weight *= 1000;
            }
            scaled
        });
    }

    #[test]
    fn equal_weights_are_pseudocode_1_regardless_of_weight_value() {
        let names = names(9);
        let ones = equal(&names);
        let sevens: Vec<_> = ones
            .iter()
            .map(|b| MaglevBackend { weight: 7, ..*b })
            .collect();
        assert_eq!(
            MaglevTable::build(&ones, 97).unwrap().slots(),
            MaglevTable::build(&sevens, 97).unwrap().slots()
        );
    }

    #[test]
    fn delta_lists_changed_slots_and_rejects_size_mismatch() {
        let names = names(10);
        let all = equal(&names);
        let old = MaglevTable::build(&all, 101).unwrap();
        let new = MaglevTable::build(&all[1..], 101).unwrap();
        let delta = MaglevTable::delta(&old, &new).unwrap();
        let mut patched = old.slots().to_vec();
        for change in &delta {
            patched[change.index as usize] = change.id;
        }
        assert_eq!(patched, new.slots());
        assert!(delta.windows(2).all(|w| w[0].index < w[1].index));
        assert!(MaglevTable::delta(&old, &old).unwrap().is_empty());
        let other = MaglevTable::build(&all, 103).unwrap();
        assert_eq!(
            MaglevTable::delta(&old, &other),
            Err(MaglevError::SizeMismatch { old: 101, new: 103 })
        );
    }

    #[test]
    fn from_name_follows_the_documented_definition() {
        let p = MaglevPermutation::from_name("10.0.0.1:80", 65_537, 4, 2);
        let h1 = siphash24(MAGLEV_H1_KEY, b"10.0.0.1:80");
        let h2 = siphash24(MAGLEV_H2_KEY, b"10.0.0.1:80");
        assert_eq!(u64::from(p.offset), h1 % 65_537);
        assert_eq!(u64::from(p.skip), h2 % 65_536 + 1);
        assert_eq!((p.id, p.weight), (4, 2));
        assert_ne!(h1, h2);
        let tiny = MaglevPermutation::from_name("x", 1, 0, 1);
        assert_eq!((tiny.offset, tiny.skip), (0, 1));
    }
}
