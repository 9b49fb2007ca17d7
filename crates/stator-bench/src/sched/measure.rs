//! Timing picks: one scheduler, one pool size, a fixed number of picks per repetition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stator_sched::{
    Algorithm, AtomicPeerSet, Peer, Picker, Request, Rng, Scheduler, WithConns, vnswrr_ring_len,
};

use crate::BenchError;

/// What to measure and how long.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Pool sizes.
    pub backends: Vec<usize>,
    /// Algorithms.
    pub algorithms: Vec<Algorithm>,
    /// Picks per repetition for the O(1) schedulers (VNSWRR, P2C, source hash).
    pub picks: u64,
    /// Peer visits per repetition for the O(N) schedulers (SWRR, least-conn): they make
    /// `budget / N` picks (at least `min_picks`, at most `picks`), so each repetition does a
    /// similar amount of work at every size.
    pub budget: u64,
    /// The fewest picks of any repetition.
    pub min_picks: u64,
    /// Repetitions per case (best and median are reported).
    pub repetitions: usize,
    /// A repetition stops early past this time (counted picks are then fewer; reported).
    pub time_limit: Duration,
    /// Seed of the weights (1..=10) and the connection counts.
    pub seed: u64,
}

/// One case's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The scheduler.
    pub algorithm: Algorithm,
    /// Pool size.
    pub backends: usize,
    /// Picks per repetition (as planned; fewer if a repetition hit the time limit).
    pub picks: u64,
    /// Nanoseconds per pick of each repetition, in run order.
    pub ns_per_pick: Vec<f64>,
    /// Whether some repetition stopped at the time limit.
    pub truncated: bool,
    /// Time to build the scheduler (VNSWRR's ring, P2C's alias table, the Maglev table).
    pub build: Duration,
    /// VNSWRR's ring size (TW / gcd) for these weights.
    pub ring_nodes: u64,
}

impl Measured {
    /// The fastest repetition (the least disturbed by the rest of the machine).
    pub fn best(&self) -> f64 {
        self.ns_per_pick
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }

    /// The median repetition.
    pub fn median(&self) -> f64 {
        let mut v = self.ns_per_pick.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
}

/// Weights 1..=10 drawn from `seed` (the same pool for every algorithm of a size).
pub fn weights(backends: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed ^ (backends as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..backends).map(|_| 1 + rng.below(10) as u32).collect()
}

/// Whether a pick of `algorithm` visits every peer.
pub fn is_linear(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Swrr | Algorithm::LeastConn)
}

/// Measures one case: build the scheduler, warm up, time `repetitions` × picks through a
/// [`Picker`] (what a proxy worker calls), with an atomic usable set and connection counts as
/// the proxy keeps them and a different client key for every pick.
pub fn measure(plan: &Plan, algorithm: Algorithm, backends: usize) -> Result<Measured, BenchError> {
    let w = weights(backends, plan.seed);
    let peers: Vec<Peer> = w
        .iter()
        .zip(0u32..)
        .map(|(&weight, i)| Peer::new(i, format!("10.1.{}.{}:8080", i / 250, i % 250 + 1), weight))
        .collect();
    let started = Instant::now();
    let sched = Scheduler::new(algorithm, &peers).map_err(|source| BenchError::Sched {
        algorithm: algorithm.name(),
        backends,
        source,
    })?;
    let build = started.elapsed();
    let sched = Arc::new(sched);
    let mut worker = Picker::new(sched, plan.seed);

    let usable = AtomicPeerSet::new(backends, true);
    let mut rng = Rng::new(plan.seed);
    let active: Vec<u32> = (0..backends).map(|_| rng.below(21) as u32).collect();
    let view = WithConns {
        usable: &usable,
        active: &active,
    };
    let picks = if is_linear(algorithm) {
        (plan.budget / backends.max(1) as u64).clamp(plan.min_picks, plan.picks)
    } else {
        plan.picks
    };

    let mut sink = 0usize;
    let mut run = |count: u64| -> (u64, Duration) {
        let started = Instant::now();
        let mut done = 0;
        while done < count {
            // Check the clock every 1,024 picks: the loop is bounded in count and in time.
            let chunk = (count - done).min(1024);
            for i in done..done + chunk {
                let key = (i as u32).wrapping_mul(0x9e37_79b1);
                let req = Request::new(&view).with_key(key);
                sink = sink.wrapping_add(worker.pick(&req).unwrap_or(usize::MAX));
            }
            done += chunk;
            if started.elapsed() > plan.time_limit {
                break;
            }
        }
        (done, started.elapsed())
    };
    run((picks / 10).max(1));
    let mut ns_per_pick = Vec::with_capacity(plan.repetitions);
    let mut truncated = false;
    for _ in 0..plan.repetitions {
        let (done, took) = run(picks);
        truncated |= done < picks;
        ns_per_pick.push(took.as_nanos() as f64 / done.max(1) as f64);
    }
    std::hint::black_box(sink);
    Ok(Measured {
        algorithm,
        backends,
        picks,
        ns_per_pick,
        truncated,
        build,
        ring_nodes: vnswrr_ring_len(&w),
    })
}
