//! Properties of Maglev tables over random backend sets (proptest), and the requirements of the
//! design: balance, weights, order independence, deltas.
use proptest::prelude::*;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use stator_hash::{MaglevBackend, MaglevTable, next_prime};

fn names(n: usize, salt: u32) -> Vec<String> {
    (0..n)
        .map(|i| format!("pool-{salt}/10.{}.{}.9:80", i / 256, i % 256))
        .collect()
}

fn backends<'a>(names: &'a [String], weights: &[u32]) -> Vec<MaglevBackend<'a>> {
    names
        .iter()
        .zip(weights)
        .zip(0..)
        .map(|((name, &weight), id)| MaglevBackend::new(name, weight, id))
        .collect()
}

/// Any input order gives the same table (backends take turns in name order).
#[test]
fn shuffled_input_gives_the_same_table() {
    let names = names(200, 1);
    let weights: Vec<u32> = (0..200).map(|i| 1 + i % 5).collect();
    let mut set = backends(&names, &weights);
    let table = MaglevTable::build(&set, 65_537).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..5 {
        set.shuffle(&mut rng);
        assert_eq!(MaglevTable::build(&set, 65_537).unwrap(), table);
    }
}

/// The paper's claim, as DESIGN.md requires it: with M ≥ 100·N every backend's share is within
/// 1% of its weight's share — for equal weights, every count is ⌊M/N⌋ or ⌈M/N⌉.
#[test]
fn thousand_backends_at_both_paper_sizes() {
    let names = names(1000, 2);
    for size in [65_537u32, 655_373] {
        let table = MaglevTable::build(&backends(&names, &[1; 1000]), size).unwrap();
        let counts: Vec<u32> = table.slot_counts().iter().map(|b| b.slots).collect();
        assert_eq!(*counts.iter().min().unwrap(), size / 1000);
        assert_eq!(*counts.iter().max().unwrap(), size.div_ceil(1000));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn tables_are_full_balanced_and_order_independent(
        n in 1usize..60,
        salt in any::<u32>(),
        size_hint in 2u32..5_000,
        seed in any::<u64>(),
    ) {
        let size = next_prime(size_hint).unwrap();
        let names = names(n, salt);
        let mut set = backends(&names, &vec![1; n]);
        let table = MaglevTable::build(&set, size).unwrap();
        prop_assert!(!table.slots().contains(&MaglevTable::NO_BACKEND));
        let counts: Vec<u32> = table.slot_counts().iter().map(|b| b.slots).collect();
        prop_assert_eq!(counts.iter().sum::<u32>(), size);
        let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
        prop_assert!(max - min <= 1, "counts {min}..{max}");
        for (hash, &slot) in table.slots().iter().enumerate() {
            prop_assert_eq!(table.lookup(hash as u32), Some(slot));
        }
        set.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(MaglevTable::build(&set, size).unwrap(), table);
    }

    #[test]
    fn weighted_shares_are_within_one_percent_when_m_is_at_least_100n(
        weights in prop::collection::vec(0u32..1000, 1..40),
        salt in any::<u32>(),
    ) {
        let n = weights.len();
        let size = next_prime(100 * n as u32 + 1).unwrap();
        let names = names(n, salt);
        let table = MaglevTable::build(&backends(&names, &weights), size).unwrap();
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        for b in table.slot_counts() {
            if total == 0 {
                prop_assert_eq!(b.slots, 0);
                continue;
            }
            let share = f64::from(b.slots) / f64::from(size);
            let want = b.weight as f64 / total as f64;
            prop_assert!((share - want).abs() <= 0.01, "{:?}: {} vs {}", b, share, want);
            if b.weight == 0 {
                prop_assert_eq!(b.slots, 0);
            }
        }
        prop_assert_eq!(table.is_empty(), total == 0);
    }

    #[test]
    fn delta_turns_the_old_table_into_the_new_one(
        n in 2usize..40,
        removed in 0usize..40,
        salt in any::<u32>(),
    ) {
        let names = names(n, salt);
        let all = backends(&names, &vec![1; n]);
        let old = MaglevTable::build(&all, 1009).unwrap();
        let kept: Vec<_> = all.iter().copied().filter(|b| b.id as usize != removed % n).collect();
        let new = MaglevTable::build(&kept, 1009).unwrap();
        let mut slots = old.slots().to_vec();
        for change in MaglevTable::delta(&old, &new).unwrap() {
            slots[change.index as usize] = change.id;
        }
        prop_assert_eq!(slots.as_slice(), new.slots());
    }
}
