//! Golden sequences from nginx's definition of SWRR, Tengine's VNSWRR rules (ring, gcd, lazy
//! build, random start, skipping), and the behaviour of every scheduler at its edges.
use std::sync::Arc;

use stator_sched::{
    Algorithm, AllUsable, LeastConn, NoUpstream, P2c, Peer, PeerSet, Picker, PickerState, Request,
    Schedule, Scheduler, SourceHash, Swrr, Tried, Vnswrr, WithConns, client_key, swrr_sequence,
    vnswrr_ring_len,
};

fn pool(weights: &[u32]) -> Vec<Peer> {
    weights
        .iter()
        .zip(0u32..)
        .map(|(&w, i)| Peer::new(100 + i, format!("10.0.{}.{}:80", i / 256, i % 256), w))
        .collect()
}

fn letters(seq: &[usize]) -> String {
    seq.iter()
        .map(|&i| char::from(b'A' + i as u8))
        .collect::<Vec<_>>()
        .iter()
        .collect()
}

fn picks<S: Schedule>(s: &S, state: &mut S::State, n: usize) -> Vec<usize> {
    (0..n)
        .map(|_| s.pick(state, &Request::new(&AllUsable)).unwrap())
        .collect()
}

/// nginx's own example (and Tengine's article): {A:5, B:1, C:1} → A A B A C A A, then again.
#[test]
fn swrr_golden_sequence() {
    assert_eq!(letters(&swrr_sequence(&[5, 1, 1], 7)), "AABACAA");
    let s = Swrr::new(&pool(&[5, 1, 1])).unwrap();
    let mut st = s.new_state(0);
    assert_eq!(letters(&picks(&s, &mut st, 14)), "AABACAAAABACAA");
}

/// The ring is SWRR's period, and a worker walks a rotation of it from its random start.
#[test]
fn vnswrr_ring_is_the_swrr_period_walked_from_a_random_start() {
    let v = Vnswrr::new(&pool(&[5, 1, 1])).unwrap();
    let ring: Vec<usize> = v.ring().iter().map(|&i| i as usize).collect();
    assert_eq!(letters(&ring), "AABACAA");
    let mut starts = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut st = v.new_state(seed);
        let start = st.start() as usize;
        starts.insert(start);
        let got = picks(&v, &mut st, 21);
        let want: Vec<usize> = (0..21).map(|k| ring[(start + k) % 7]).collect();
        assert_eq!(got, want, "seed {seed}");
    }
    assert!(
        starts.len() >= 5,
        "random starts cover the ring: {starts:?}"
    );
}

/// Tengine's later change: the ring has TW / gcd nodes.
#[test]
fn vnswrr_reduces_weights_by_their_gcd() {
    let v = Vnswrr::new(&pool(&[100, 200, 400])).unwrap();
    assert_eq!(v.gcd(), 100);
    assert_eq!(v.ring().len(), 7);
    assert_eq!(vnswrr_ring_len(&[100, 200, 400]), 7);
    let ring: Vec<usize> = v.ring().iter().map(|&i| i as usize).collect();
    assert_eq!(ring, swrr_sequence(&[1, 2, 4], 7));
    assert_eq!(
        ring,
        swrr_sequence(&[100, 200, 400], 7),
        "SWRR is scale-free"
    );
    assert_eq!(letters(&ring), "CBCACBC");
}

/// First N nodes, then min(N, remaining) each time the cursor reaches the end of what is built;
/// never more than picks + N.
#[test]
fn vnswrr_builds_lazily_in_batches_of_n() {
    let v = Vnswrr::new(&pool(&[5, 1, 1])).unwrap();
    let mut st = v.new_state(3);
    assert_eq!(st.built(), 3);
    let mut built = Vec::new();
    for _ in 0..9 {
        v.pick(&mut st, &Request::new(&AllUsable)).unwrap();
        built.push(st.built());
    }
    // picks 1-3 use the first batch; pick 4 builds 3 more; pick 7 builds the last 1.
    assert_eq!(built, [3, 3, 3, 6, 6, 6, 7, 7, 7]);

    // 2,000 peers, weights 1..=10: TW = 11,000; after k picks at most k + N exist.
    let weights: Vec<u32> = (0..2000).map(|i| 1 + (i * 7) % 10).collect();
    let v = Vnswrr::new(&pool(&weights)).unwrap();
    let n = 2000u64;
    let mut st = v.new_state(99);
    assert_eq!(u64::from(st.built()), n);
    for k in 1..=20_000u64 {
        v.pick(&mut st, &Request::new(&AllUsable)).unwrap();
        assert!(u64::from(st.built()) <= k + n, "k = {k}: {}", st.built());
    }
    assert_eq!(
        st.built() as usize,
        v.ring().len(),
        "fully built after a period"
    );

    // The same bound holds when down peers make the cursor skip.
    let mut usable = PeerSet::new(2000, true);
    for i in (0..2000).filter(|i| i % 3 != 0) {
        usable.set(i, false);
    }
    let mut st = v.new_state(5);
    for k in 1..=5_000u64 {
        let p = v.pick(&mut st, &Request::new(&usable)).unwrap();
        assert_eq!(p % 3, 0);
        assert!(u64::from(st.built()) <= k + n, "k = {k}: {}", st.built());
    }
}

/// Down and tried peers stay in the ring and are skipped; the walk goes on after them.
#[test]
fn vnswrr_skips_down_and_tried_peers() {
    let v = Vnswrr::new(&pool(&[5, 1, 1])).unwrap();
    // Full period visible from the start (seed chosen so start = 0 is not required: compare
    // with the ring rotated to the worker's start).
    let ring: Vec<usize> = v.ring().iter().map(|&i| i as usize).collect();
    let mut b_down = PeerSet::new(3, true);
    b_down.set(1, false);
    let mut st = v.new_state(11);
    picks(&v, &mut st, 7); // make the whole ring visible
    let start = st.start() as usize;
    let got: Vec<usize> = (0..12)
        .map(|_| v.pick(&mut st, &Request::new(&b_down)).unwrap())
        .collect();
    let want: Vec<usize> = (0..)
        .map(|k| ring[(start + k) % 7])
        .filter(|&p| p != 1)
        .take(12)
        .collect();
    assert_eq!(got, want);

    // A retry skips the peer already tried and takes the next node's peer.
    let mut tried = Tried::new();
    let first = v.pick(&mut st, &Request::new(&AllUsable)).unwrap();
    tried.insert(first);
    let second = v
        .pick(&mut st, &Request::new(&AllUsable).with_tried(&tried))
        .unwrap();
    assert_ne!(second, first);
    tried.insert(second);
    let third = v
        .pick(&mut st, &Request::new(&AllUsable).with_tried(&tried))
        .unwrap();
    assert!(third != first && third != second);
    tried.insert(third);
    assert_eq!(
        v.pick(&mut st, &Request::new(&AllUsable).with_tried(&tried)),
        Err(NoUpstream)
    );
}

/// A usable peer outside the visible part of the ring is still found (Tengine's first batch of
/// {5,1,1} is A A B: with A and B down, its walk would find nothing).
#[test]
fn vnswrr_finds_a_usable_peer_outside_the_built_part() {
    let v = Vnswrr::new(&pool(&[5, 1, 1])).unwrap();
    let mut only_c = PeerSet::new(3, false);
    only_c.set(2, true);
    for seed in 0..32 {
        let mut st = v.new_state(seed);
        assert_eq!(
            v.pick(&mut st, &Request::new(&only_c)),
            Ok(2),
            "seed {seed}"
        );
    }
}

/// The degenerate case is bounded: 999 of 1,000 peers down costs at most min(visible, N)
/// probes and one weighted pass, and still finds the survivor.
#[test]
fn vnswrr_many_down_peers_fall_back_within_o_n() {
    // Weights 1..=10: a ring of 5,500 nodes in which the survivor (weight 1) appears once.
    let weights: Vec<u32> = (0..1000).map(|i| 1 + i % 10).collect();
    let v = Vnswrr::new(&pool(&weights)).unwrap();
    assert_eq!(v.ring().len(), 5500);
    let mut one = PeerSet::new(1000, false);
    one.set(610, true);
    let mut st = v.new_state(1);
    for _ in 0..100 {
        assert_eq!(v.pick(&mut st, &Request::new(&one)), Ok(610));
    }
    assert!(st.fallbacks() > 0, "the survivor is mostly beyond N probes");
    println!(
        "999 of 1000 down: {} of 100 picks fell back",
        st.fallbacks()
    );
}

/// No usable peer → NoUpstream, for every algorithm, and for an empty pool.
#[test]
fn no_usable_peer_is_no_upstream() {
    let none = PeerSet::new(4, false);
    for algorithm in Algorithm::ALL {
        let s = Scheduler::new(algorithm, &pool(&[1, 2, 3, 4])).unwrap();
        let mut st = s.new_state(0);
        assert_eq!(
            s.pick(&mut st, &Request::new(&none)),
            Err(NoUpstream),
            "{algorithm}"
        );
        let empty = Scheduler::new(algorithm, &[]).unwrap();
        let mut st = empty.new_state(0);
        assert_eq!(
            empty.pick(&mut st, &Request::new(&AllUsable)),
            Err(NoUpstream)
        );
        // All tried is the same as all down.
        let mut tried = Tried::new();
        (0..4).for_each(|i| assert!(tried.insert(i)));
        let mut st = s.new_state(0);
        let req = Request::new(&AllUsable).with_tried(&tried);
        assert_eq!(s.pick(&mut st, &req), Err(NoUpstream), "{algorithm}");
    }
    assert_eq!(
        NoUpstream.to_string(),
        "no usable upstream peer (all down, draining or already tried)"
    );
}

/// Over whole periods VNSWRR and SWRR hit weights exactly; least-conn with no load is SWRR;
/// P2C with no load follows the weights.
#[test]
fn shares_follow_weights() {
    let weights = [1u32, 2, 3, 4, 10];
    let peers = pool(&weights);
    let total: u32 = weights.iter().sum();
    for algorithm in [Algorithm::Vnswrr, Algorithm::Swrr, Algorithm::LeastConn] {
        let s = Scheduler::new(algorithm, &peers).unwrap();
        let mut st = s.new_state(42);
        let mut counts = [0u32; 5];
        for p in picks(&s, &mut st, total as usize * 50) {
            counts[p] += 1;
        }
        let want: Vec<u32> = weights.iter().map(|w| w * 50).collect();
        assert_eq!(counts.to_vec(), want, "{algorithm}");
    }
    assert_eq!(
        picks(
            &LeastConn::new(&peers).unwrap(),
            &mut LeastConn::new(&peers).unwrap().new_state(0),
            20
        ),
        swrr_sequence(&weights, 20)
    );
    let p2c = P2c::new(&peers).unwrap();
    let mut st = p2c.new_state(7);
    let mut counts = [0u32; 5];
    let n = 200_000;
    for p in picks(&p2c, &mut st, n) {
        counts[p] += 1;
    }
    for (c, w) in counts.iter().zip(weights) {
        let share = f64::from(*c) / n as f64;
        let want = f64::from(w) / f64::from(total);
        assert!(
            (share - want).abs() < 0.01,
            "P2C share {share} vs weight share {want}"
        );
    }
}

/// Least-connections takes the lowest active/weight; P2C avoids a loaded peer.
#[test]
fn load_aware_schedulers_follow_active_connections() {
    let peers = pool(&[1, 2, 1]);
    let lc = LeastConn::new(&peers).unwrap();
    let mut st = lc.new_state(0);
    // 4/1, 5/2 = 2.5, 3/1 → peer 1.
    let active = [4u32, 5, 3];
    let view = WithConns {
        usable: &AllUsable,
        active: &active,
    };
    assert_eq!(lc.pick(&mut st, &Request::new(&view)), Ok(1));
    // peer 1 down → 3/1 < 4/1 → peer 2.
    let mut down = PeerSet::new(3, true);
    down.set(1, false);
    let view = WithConns {
        usable: &down,
        active: &active,
    };
    assert_eq!(lc.pick(&mut st, &Request::new(&view)), Ok(2));

    // Extreme counts and weights compare without overflow: MAX/MAX < MAX/1.
    let extreme = [Peer::new(1, "a", 1), Peer::new(2, "b", u32::MAX)];
    let lc = LeastConn::new(&extreme).unwrap();
    let full = [u32::MAX, u32::MAX];
    let view = WithConns {
        usable: &AllUsable,
        active: &full,
    };
    assert_eq!(lc.pick(&mut lc.new_state(0), &Request::new(&view)), Ok(1));
    let p2c = P2c::new(&extreme).unwrap();
    assert_eq!(p2c.pick(&mut p2c.new_state(0), &Request::new(&view)), Ok(1));

    let p2c = P2c::new(&pool(&[1; 10])).unwrap();
    let mut st = p2c.new_state(3);
    let mut loaded = [0u32; 10];
    loaded[4] = 1000;
    let view = WithConns {
        usable: &AllUsable,
        active: &loaded,
    };
    let hits = (0..10_000)
        .filter(|_| p2c.pick(&mut st, &Request::new(&view)) == Ok(4))
        .count();
    // Peer 4 can only win when both draws are peer 4, which distinct draws never allow.
    assert_eq!(hits, 0);
}

/// Source hashing: a client keeps its peer; when that peer is down only its clients move, and
/// they come back when it returns.
#[test]
fn source_hash_is_sticky_and_moves_only_the_down_peers_clients() {
    let peers = pool(&[1; 8]);
    let sh = SourceHash::new(&peers).unwrap();
    let mut st = sh.new_state(0);
    let keys: Vec<u32> = (0..2000u32)
        .map(|i| client_key(std::net::Ipv4Addr::from(0x0a00_0000 + i).into()))
        .collect();
    let before: Vec<usize> = keys
        .iter()
        .map(|&k| {
            sh.pick(&mut st, &Request::new(&AllUsable).with_key(k))
                .unwrap()
        })
        .collect();
    let again: Vec<usize> = keys
        .iter()
        .map(|&k| {
            sh.pick(&mut st, &Request::new(&AllUsable).with_key(k))
                .unwrap()
        })
        .collect();
    assert_eq!(before, again);
    let mut down = PeerSet::new(8, true);
    down.set(3, false);
    let mut moved = 0;
    for (&k, &b) in keys.iter().zip(&before) {
        let now = sh.pick(&mut st, &Request::new(&down).with_key(k)).unwrap();
        assert_ne!(now, 3);
        if b == 3 {
            moved += 1;
        } else {
            assert_eq!(now, b, "a client of a live peer moved");
        }
    }
    assert!(moved > 150, "peer 3 had about 1/8 of 2000 clients: {moved}");
    // Another node (a fresh build of the same pool) agrees.
    let other = SourceHash::new(&peers).unwrap();
    assert_eq!(other.table(), sh.table());
}

/// The Picker renews its state only when the scheduler changes, with a new random start.
#[test]
fn worker_adopts_a_reloaded_scheduler() {
    let a = Arc::new(Scheduler::new(Algorithm::Vnswrr, &pool(&[1; 50])).unwrap());
    let mut w = Picker::new(Arc::clone(&a), 9);
    assert!(!w.sync(&a));
    for _ in 0..10 {
        w.pick(&Request::new(&AllUsable)).unwrap();
    }
    let b = Arc::new(Scheduler::new(Algorithm::Swrr, &pool(&[1; 50])).unwrap());
    assert!(w.sync(&b));
    assert!(matches!(w.state(), PickerState::Swrr(_)));
    assert_eq!(w.scheduler().algorithm(), Algorithm::Swrr);
    assert_eq!(w.peer(0).map(|p| p.id), Some(100));
    for name in ["vnswrr", "swrr", "least_conn", "p2c", "source_hash"] {
        assert_eq!(Algorithm::from_name(name).map(|a| a.name()), Some(name));
    }
    assert_eq!(Algorithm::from_name("wrr"), None);
}

/// Bad pools are rejected with the offending peer named.
#[test]
fn bad_pools_are_rejected() {
    use stator_sched::SchedError;
    let mut peers = pool(&[1, 2]);
    peers[1].weight = 0;
    assert_eq!(
        Vnswrr::new(&peers).unwrap_err(),
        SchedError::ZeroWeight { id: 101 }
    );
    let huge = [Peer::new(1, "a", 1 << 20), Peer::new(2, "b", 1)];
    let err = Vnswrr::new(&huge).unwrap_err();
    assert!(matches!(
        err,
        SchedError::RingTooLarge {
            nodes: 1_048_577,
            ..
        }
    ));
    assert!(err.to_string().contains("1048577 virtual nodes"), "{err}");
    let same_name = [Peer::new(1, "x", 1), Peer::new(2, "x", 1)];
    assert!(matches!(
        SourceHash::new(&same_name).unwrap_err(),
        SchedError::Table(_)
    ));
}

/// Tengine's second defect: after a reload that raises one weight from 1 to 2, SWRR sends every
/// worker's first request to that peer; VNSWRR's random starts keep its share near its weight.
#[test]
fn weight_change_burst_vnswrr_vs_swrr() {
    let report = stator_sched::weight_change_burst(&stator_sched::BurstParams::default()).unwrap();
    let steady = report.steady_share;
    for f in [report.vnswrr, report.swrr] {
        println!(
            "{:>6}: {} of the first {} picks ({:.2}%, {:.2}x the steady {:.2}%); first round {}/{}",
            f.algorithm.name(),
            f.hits,
            f.picks,
            f.share * 100.0,
            f.ratio_to(steady),
            steady * 100.0,
            f.first_round_hits,
            f.workers
        );
    }
    assert!(
        report.vnswrr.share <= 2.0 * steady,
        "VNSWRR share {} > 2 x {steady}",
        report.vnswrr.share
    );
    assert_eq!(
        report.swrr.first_round_hits, 4,
        "every SWRR worker starts at the heaviest"
    );
    // Many proxies, one request each (the article's fleet): SWRR sends all of them to the
    // changed peer, VNSWRR about its weight's share.
    let fleet = stator_sched::BurstParams {
        workers: 1000,
        picks: 1000,
        ..Default::default()
    };
    let fleet = stator_sched::weight_change_burst(&fleet).unwrap();
    println!(
        "fleet of 1000 workers, one pick each: vnswrr {:.1}%, swrr {:.1}%",
        fleet.vnswrr.share * 100.0,
        fleet.swrr.share * 100.0
    );
    assert_eq!(fleet.swrr.hits, 1000);
    assert!(fleet.vnswrr.share <= 2.0 * steady);
}
