//! Properties over random weight sets (proptest): VNSWRR's period is SWRR's sequence, every
//! worker walks a rotation of it, and skipping never returns an unusable or tried peer.
use proptest::prelude::*;
use stator_sched::{
    AllUsable, Peer, PeerSet, Request, Schedule, Tried, Vnswrr, swrr_sequence, vnswrr_ring_len,
};

fn pool(weights: &[u32]) -> Vec<Peer> {
    weights
        .iter()
        .zip(0u32..)
        .map(|(&w, i)| Peer::new(i, format!("p{i}"), w))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The ring is exactly nginx's SWRR over the weights for one period (TW/gcd picks), with
    /// each peer w/gcd times; and SWRR itself repeats with that period.
    #[test]
    fn vnswrr_period_equals_swrr_sequence(
        weights in prop::collection::vec(1u32..=12, 1..40),
        scale in 1u32..=5,
    ) {
        let weights: Vec<u32> = weights.iter().map(|w| w * scale).collect();
        let v = Vnswrr::new(&pool(&weights)).unwrap();
        let len = vnswrr_ring_len(&weights) as usize;
        prop_assert_eq!(v.ring().len(), len);
        let swrr = swrr_sequence(&weights, 2 * len);
        let ring: Vec<usize> = v.ring().iter().map(|&i| i as usize).collect();
        prop_assert_eq!(&ring[..], &swrr[..len]);
        prop_assert_eq!(&swrr[..len], &swrr[len..], "SWRR repeats every TW/gcd picks");
        for (i, &w) in weights.iter().enumerate() {
            let count = ring.iter().filter(|&&p| p == i).count() as u32;
            prop_assert_eq!(count, w / v.gcd());
        }
    }

    /// A worker's picks with every peer usable are the ring rotated to its start, and its
    /// built count never exceeds picks + N.
    #[test]
    fn worker_walks_a_rotation_and_builds_lazily(
        weights in prop::collection::vec(1u32..=9, 1..30),
        seed in any::<u64>(),
    ) {
        let v = Vnswrr::new(&pool(&weights)).unwrap();
        let len = v.ring().len();
        let n = weights.len() as u64;
        let mut st = v.new_state(seed);
        let start = st.start() as usize;
        for k in 0..3 * len {
            let p = v.pick(&mut st, &Request::new(&AllUsable)).unwrap();
            prop_assert_eq!(p, v.ring()[(start + k) % len] as usize);
            prop_assert!(u64::from(st.built()) <= k as u64 + 1 + n);
        }
    }

    /// With random down and tried sets, a pick returns a usable untried peer whenever one
    /// exists (NoUpstream exactly when none does), and the lazy bound holds.
    #[test]
    fn skips_are_exact(
        weights in prop::collection::vec(1u32..=9, 1..30),
        down in prop::collection::vec(any::<bool>(), 30),
        tried_idx in prop::collection::vec(0usize..30, 0..4),
        seed in any::<u64>(),
    ) {
        let v = Vnswrr::new(&pool(&weights)).unwrap();
        let n = weights.len();
        let mut usable = PeerSet::new(n, true);
        for (i, &d) in down.iter().enumerate().take(n) {
            usable.set(i, !d);
        }
        let mut tried = Tried::new();
        for &i in &tried_idx {
            tried.insert(i);
        }
        let exists = (0..n).any(|i| !down[i] && !tried.contains(i));
        let mut st = v.new_state(seed);
        for k in 1..=200u64 {
            match v.pick(&mut st, &Request::new(&usable).with_tried(&tried)) {
                Ok(p) => prop_assert!(p < n && !down[p] && !tried.contains(p)),
                Err(_) => prop_assert!(!exists),
            }
            prop_assert!(u64::from(st.built()) <= k + n as u64);
        }
    }
}
