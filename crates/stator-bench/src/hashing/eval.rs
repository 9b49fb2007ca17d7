//! The measurements behind `stator bench hashing`: the Maglev paper's §5.3 (Figures 11 and 12)
//! and the table build time it quotes, computed with `stator-hash`.
//!
//! How the comparison tables are populated (the paper says only "we populate one lookup table
//! using each method"):
//! - Maglev: `MaglevTable::build`, 1000 equal-weight backends.
//! - Karger: a ring with `views` points per backend; table entry `i` is the owner of ring position
//!   `i · 2^64 / M` (the ring cut into M equal arcs).
//! - Rendezvous: entry `i` goes to the backend with the highest score for key `i`.
//!
//! Figure 12 follows the paper: for each failure count k, remove k random backends, rebuild,
//! and count the entries that changed; average over the repetitions. It also records the share
//! of entries that belonged to the failed backends, which any method must move (and which is all
//! Karger and rendezvous move).

use crate::error::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use stator_hash::{KargerRing, MaglevBackend, MaglevTable, Rendezvous};
use std::collections::HashSet;
use std::thread;
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Number of backends (the paper: 1000).
    pub backends: usize,
    /// Table sizes (the paper: 65537 "small" and 655373 "large").
    pub sizes: Vec<u32>,
    /// Points per backend on the Karger ring (the paper: 1000 "views").
    pub karger_views: u32,
    /// Failure counts for Figure 12 (the paper: up to 10% of the backends).
    pub failures: Vec<usize>,
    /// Repetitions per failure count (the paper: 200).
    pub repetitions: usize,
    /// Timed builds per size for the build-time median.
    pub build_runs: usize,
    /// Seed for backend names and failure choices.
    pub seed: u64,
    /// Worker threads for Figures 11 and 12 (timed builds always run alone on one thread).
    pub threads: usize,
}

/// One method × table size of Figure 11.
#[derive(Debug, Clone, Serialize)]
pub struct BalanceRow {
    /// "maglev", "karger" or "rendezvous".
    pub method: &'static str,
    /// Table size M.
    pub table_size: u32,
    /// Fewest entries any backend got.
    pub min_entries: u32,
    /// Most entries any backend got.
    pub max_entries: u32,
    /// `min_entries` as a percentage of the table (perfect balance: 100 / N).
    pub min_percent: f64,
    /// `max_entries` as a percentage of the table.
    pub max_percent: f64,
    /// How much more than its fair share the busiest backend gets, in percent: the
    /// over-provisioning the paper quotes (`max / (M / N) - 1`).
    pub overprovision_percent: f64,
}

/// One table size × failure count of Figure 12.
#[derive(Debug, Clone, Serialize)]
pub struct ResilienceRow {
    /// Table size M.
    pub table_size: u32,
    /// Number of failed backends k.
    pub failures: usize,
    /// k as a percentage of the backends.
    pub failure_percent: f64,
    /// Mean percentage of table entries that changed.
    pub changed_percent_mean: f64,
    /// Smallest percentage over the repetitions.
    pub changed_percent_min: f64,
    /// Largest percentage over the repetitions.
    pub changed_percent_max: f64,
    /// Mean percentage of entries that belonged to the failed backends (the unavoidable part;
    /// Karger and rendezvous change exactly these).
    pub failed_entries_percent_mean: f64,
}

/// Build time of one table size.
#[derive(Debug, Clone, Serialize)]
pub struct BuildTimeRow {
    /// Table size M.
    pub table_size: u32,
    /// Median over the timed builds, milliseconds.
    pub median_ms: f64,
    /// Fastest timed build, milliseconds.
    pub min_ms: f64,
    /// The paper's figure for this size, if it gives one.
    pub paper_ms: Option<f64>,
    /// Stator's goal for this size (DESIGN.md: beat the paper), if it has one.
    pub goal_ms: Option<f64>,
}

/// Everything measured.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// The configuration it ran with.
    pub config: Config,
    /// Figure 11.
    pub balance: Vec<BalanceRow>,
    /// Figure 12.
    pub resilience: Vec<ResilienceRow>,
    /// Build times.
    pub build_times: Vec<BuildTimeRow>,
}

/// The paper's build times (§5.3) and Stator's goals, by table size.
fn paper_and_goal_ms(size: u32) -> (Option<f64>, Option<f64>) {
    match size {
        65_537 => (Some(1.8), Some(1.0)),
        655_373 => (Some(22.9), Some(15.0)),
        _ => (None, None),
    }
}

/// `count` distinct backend names like `10.37.201.14:8080`, derived from `seed`.
pub fn backend_names(count: usize, seed: u64) -> Vec<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut seen = HashSet::new();
    let mut names = Vec::with_capacity(count);
    while names.len() < count {
        let octets: [u8; 3] = rng.random();
        let port: u16 = rng.random_range(1024..=65_535);
        let name = format!("10.{}.{}.{}:{port}", octets[0], octets[1], octets[2]);
        if seen.insert(name.clone()) {
            names.push(name);
        }
    }
    names
}

fn equal_backends(names: &[String]) -> Vec<MaglevBackend<'_>> {
    names
        .iter()
        .zip(0..)
        .map(|(name, id)| MaglevBackend::new(name, 1, id))
        .collect()
}

/// Runs everything; `progress` receives one line per step worth reporting.
pub fn evaluate(config: &Config, progress: &mut dyn FnMut(&str)) -> Result<Evaluation> {
    let names = backend_names(config.backends, config.seed);
    let backends = equal_backends(&names);
    progress("figure 11: load balance of Maglev, Karger and rendezvous");
    let balance = figure_11(config, &backends)?;
    let mut resilience = Vec::new();
    for &size in &config.sizes {
        progress(&format!(
            "figure 12: M = {size}, {} failure counts x {} repetitions",
            config.failures.len(),
            config.repetitions
        ));
        resilience.extend(figure_12(config, &backends, size)?);
    }
    progress("build time");
    let build_times = build_times(config, &backends)?;
    Ok(Evaluation {
        config: config.clone(),
        balance,
        resilience,
        build_times,
    })
}

fn balance_row(method: &'static str, table: &[u32], backends: usize) -> BalanceRow {
    let mut counts = vec![0u32; backends];
    for &id in table {
        if let Some(count) = counts.get_mut(id as usize) {
            *count += 1;
        }
    }
    let size = table.len() as f64;
    let min = counts.iter().copied().min().unwrap_or(0);
    let max = counts.iter().copied().max().unwrap_or(0);
    BalanceRow {
        method,
        table_size: table.len() as u32,
        min_entries: min,
        max_entries: max,
        min_percent: 100.0 * f64::from(min) / size,
        max_percent: 100.0 * f64::from(max) / size,
        overprovision_percent: 100.0 * (f64::from(max) * backends as f64 / size - 1.0),
    }
}

fn figure_11(config: &Config, backends: &[MaglevBackend<'_>]) -> Result<Vec<BalanceRow>> {
    let ring = KargerRing::build(backends, config.karger_views).context("Karger ring")?;
    let rendezvous = Rendezvous::build(backends).context("rendezvous")?;
    let mut rows = Vec::new();
    for &size in &config.sizes {
        let maglev = MaglevTable::build(backends, size).context("Maglev table")?;
        rows.push(balance_row("maglev", maglev.slots(), backends.len()));
        rows.push(balance_row("karger", &ring.table(size), backends.len()));
        let table = parallel_rendezvous_table(&rendezvous, size, config.threads);
        rows.push(balance_row("rendezvous", &table, backends.len()));
    }
    // Present like the paper: all Maglev bars, then Karger, then rendezvous.
    let order = |m: &str| {
        ["maglev", "karger", "rendezvous"]
            .iter()
            .position(|x| *x == m)
    };
    rows.sort_by_key(|r| (order(r.method), r.table_size));
    Ok(rows)
}

/// Rendezvous fills the table one entry at a time over every backend (M × N scores), so split
/// the entries between threads.
fn parallel_rendezvous_table(rendezvous: &Rendezvous, size: u32, threads: usize) -> Vec<u32> {
    let threads = threads.max(1) as u32;
    let chunk = size.div_ceil(threads);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let range = (t * chunk).min(size)..((t + 1) * chunk).min(size);
                scope.spawn(move || {
                    range
                        .map(|i| {
                            rendezvous
                                .pick(u64::from(i))
                                .unwrap_or(MaglevTable::NO_BACKEND)
                        })
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        handles
            .into_iter()
            // A worker only panics on a bug; propagate it.
            .flat_map(|h| h.join().expect("rendezvous worker panicked"))
            .collect()
    })
}

/// A seed for one (size, k, repetition), independent of how work is split between threads.
fn trial_seed(seed: u64, size: u32, failures: usize, repetition: usize) -> u64 {
    let mut z = seed
        ^ (u64::from(size) << 32)
        ^ ((failures as u64) << 16)
        ^ (repetition as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The outcome of removing `failures` random backends once.
#[derive(Debug, Clone, Copy)]
struct Trial {
    failures: usize,
    /// Entries that differ between the old and the rebuilt table.
    changed: usize,
    /// Entries that belonged to the failed backends in the old table.
    owned: usize,
}

/// Removes `failures` backends chosen with `seed`, rebuilds and compares.
fn trial(
    backends: &[MaglevBackend<'_>],
    old: &MaglevTable,
    failures: usize,
    seed: u64,
) -> Result<Trial> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let failed: HashSet<usize> = rand::seq::index::sample(&mut rng, backends.len(), failures)
        .into_iter()
        .collect();
    let survivors: Vec<MaglevBackend<'_>> = backends
        .iter()
        .enumerate()
        .filter(|(i, _)| !failed.contains(i))
        .map(|(_, b)| *b)
        .collect();
    let new = MaglevTable::build(&survivors, old.size()).context("rebuild")?;
    let changed = MaglevTable::delta(old, &new).context("delta")?.len();
    let owned = failed
        .iter()
        .map(|&i| old.slot_count(backends[i].id).unwrap_or(0) as usize)
        .sum();
    Ok(Trial {
        failures,
        changed,
        owned,
    })
}

fn figure_12(
    config: &Config,
    backends: &[MaglevBackend<'_>],
    size: u32,
) -> Result<Vec<ResilienceRow>> {
    let old = MaglevTable::build(backends, size).context("Maglev table")?;
    let work: Vec<(usize, usize)> = config
        .failures
        .iter()
        .flat_map(|&k| (0..config.repetitions).map(move |r| (k, r)))
        .collect();
    let threads = config.threads.max(1);
    let results: Vec<Result<Vec<Trial>>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, old) = (&work, &old);
                scope.spawn(move || {
                    work.iter()
                        .skip(t)
                        .step_by(threads)
                        .map(|&(k, r)| {
                            let seed = trial_seed(config.seed, size, k, r);
                            trial(backends, old, k, seed)
                        })
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            // A worker only panics on a bug; propagate it.
            .map(|h| h.join().expect("figure 12 worker panicked"))
            .collect()
    });
    let mut trials = Vec::with_capacity(work.len());
    for r in results {
        trials.extend(r?);
    }
    let percent = |entries: usize| 100.0 * entries as f64 / f64::from(size);
    Ok(config
        .failures
        .iter()
        .map(|&k| {
            let of_k: Vec<&Trial> = trials.iter().filter(|t| t.failures == k).collect();
            let n = of_k.len().max(1) as f64;
            let changed: Vec<f64> = of_k.iter().map(|t| percent(t.changed)).collect();
            ResilienceRow {
                table_size: size,
                failures: k,
                failure_percent: 100.0 * k as f64 / backends.len() as f64,
                changed_percent_mean: changed.iter().sum::<f64>() / n,
                changed_percent_min: changed.iter().copied().fold(f64::INFINITY, f64::min),
                changed_percent_max: changed.iter().copied().fold(0.0, f64::max),
                failed_entries_percent_mean: of_k.iter().map(|t| percent(t.owned)).sum::<f64>() / n,
            }
        })
        .collect())
}

/// Median of `build_runs` builds per size, one at a time on this thread.
fn build_times(config: &Config, backends: &[MaglevBackend<'_>]) -> Result<Vec<BuildTimeRow>> {
    let mut rows = Vec::new();
    for &size in &config.sizes {
        // One untimed build warms the allocator and caches.
        std::hint::black_box(MaglevTable::build(backends, size).context("Maglev table")?);
        let mut ms = Vec::with_capacity(config.build_runs);
        for _ in 0..config.build_runs.max(1) {
            let start = Instant::now();
            let table = MaglevTable::build(backends, size).context("Maglev table")?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(table);
        }
        ms.sort_by(f64::total_cmp);
        let (paper_ms, goal_ms) = paper_and_goal_ms(size);
        rows.push(BuildTimeRow {
            table_size: size,
            median_ms: ms[ms.len() / 2],
            min_ms: ms[0],
            paper_ms,
            goal_ms,
        });
    }
    Ok(rows)
}
