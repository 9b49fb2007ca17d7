//! `stator bench sched`: nanoseconds per pick of every scheduler at 10 to 2,000 backends, and
//! Tengine's two claims measured in the same run against nginx's SWRR:
//! - VNSWRR's pick does not grow with the pool (goal: 2,000 ÷ 10 backends ≤ 1.2), while SWRR's
//!   grows linearly (goal: SWRR ÷ VNSWRR ≥ 50× at 2,000; Tengine measured get-peer falling from
//!   39% to 0.27% of CPU, 144×);
//! - a raised weight ramps without a burst (the weight-change simulation of
//!   [`stator_sched::weight_change_burst`]).
//!
//! The measuring thread is pinned to one CPU; each case is a fixed number of picks, repeated,
//! best and median reported. Figures, never a verdict.

mod measure;
mod report;

use std::time::Duration;

use stator_sched::{Algorithm, BurstParams, weight_change_burst};

pub use measure::{Measured, Plan, is_linear, measure, weights};
pub use report::{Report, Summary};

use crate::{BenchError, pin};

/// Pool sizes of the benchmark (Tengine's experiment went to 2,000).
pub const BACKENDS: [usize; 5] = [10, 100, 500, 1000, 2000];

/// Options of `stator bench sched`.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedArgs {
    /// Reduced run (about a second): fewer picks and 5 repetitions per case.
    #[arg(long)]
    pub quick: bool,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// CPU to pin the measuring thread to (default: the last one this process may use).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Seed of the weights (drawn from 1..=10) and of the workers' randomness.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl SchedArgs {
    /// The measurement plan these options ask for.
    pub fn plan(&self) -> Plan {
        // Many short repetitions rather than a few long ones: on a shared machine the best
        // repetition is the one no other process interrupted, and short ones are more often so.
        let (picks, budget, repetitions, limit) = if self.quick {
            (50_000, 1_000_000, 5, Duration::from_millis(500))
        } else {
            (200_000, 4_000_000, 25, Duration::from_secs(1))
        };
        Plan {
            backends: BACKENDS.to_vec(),
            algorithms: Algorithm::ALL.to_vec(),
            picks,
            budget,
            min_picks: 1_000,
            repetitions,
            time_limit: limit,
            seed: self.seed,
        }
    }
}

/// Runs the benchmark and prints (and writes) its report.
///
/// # Errors
/// [`BenchError`] if a scheduler cannot be built or the report cannot be written; never for a
/// timing.
pub fn run(args: &SchedArgs) -> Result<(), BenchError> {
    let report = collect(args, &mut |line| eprintln!("stator bench sched: {line}"))?;
    let json = serde_json::to_string_pretty(&report.json())? + "\n";
    if args.json {
        print!("{json}");
    } else {
        print!("{}", report.text());
    }
    if let Some(path) = &args.out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
                path: dir.display().to_string(),
                source,
            })?;
        }
        std::fs::write(path, json).map_err(|source| BenchError::Write {
            path: path.display().to_string(),
            source,
        })?;
        eprintln!("stator bench sched: wrote {}", path.display());
    }
    Ok(())
}

/// Measures every case and runs the weight-change simulation; `progress` gets a line per case.
///
/// # Errors
/// [`BenchError::Sched`] if a scheduler cannot be built.
pub fn collect(args: &SchedArgs, progress: &mut dyn FnMut(&str)) -> Result<Report, BenchError> {
    let plan = args.plan();
    let cpu = args.cpu.unwrap_or_else(pin::default_cpu);
    let pinned = pin::pin_to_cpu(cpu);
    if !pinned {
        progress(&format!(
            "could not pin to CPU {cpu}; figures will be noisier"
        ));
    }
    let mut rows = Vec::new();
    for &backends in &plan.backends {
        for &algorithm in &plan.algorithms {
            let m = measure(&plan, algorithm, backends)?;
            progress(&format!(
                "{algorithm} at {backends} backends: best {:.1} ns/pick",
                m.best()
            ));
            rows.push(m);
        }
    }
    let map_err = |source| BenchError::Sched {
        algorithm: "vnswrr/swrr",
        backends: 100,
        source,
    };
    let burst = weight_change_burst(&BurstParams {
        seed: args.seed,
        ..BurstParams::default()
    })
    .map_err(map_err)?;
    let fleet = weight_change_burst(&BurstParams {
        workers: 1000,
        picks: 1000,
        seed: args.seed,
        ..BurstParams::default()
    })
    .map_err(map_err)?;
    Ok(Report {
        quick: args.quick,
        cpu: pinned.then_some(cpu),
        plan,
        rows,
        burst,
        fleet,
    })
}
