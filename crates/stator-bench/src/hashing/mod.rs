//! `stator bench hashing`: the Maglev paper's consistent-hashing evaluation (§5.3).
//!
//! Figure 11 (load balance of Maglev, Karger and rendezvous at M = 65537 and 655373), Figure 12
//! (Maglev entries changed by k of 1000 backends failing at once) and the table build time the
//! paper quotes (1.8 ms and 22.9 ms), printed as tables and optionally written as CSV, JSON and a
//! PNG. `--quick` is a reduced run of a few seconds (what `make demo` and the tests run).

mod eval;
mod plot;
mod report;

use crate::error::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// Options of `stator bench hashing`.
#[derive(Debug, clap::Args)]
pub struct HashingArgs {
    /// Reduced run (a few seconds): 5 failure counts x 5 repetitions, 5 timed builds.
    #[arg(long)]
    pub quick: bool,
    /// Also write every measured value to FILE as CSV (figure,method,table_size,failures,metric,value).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Print JSON on stdout instead of tables: one object per line, one per figure
    /// (figure 11, figure 12, build_time).
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON lines to FILE (whatever stdout shows).
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Also draw Figures 11 and 12 into FILE (PNG).
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Seed for the backend names and the choice of failed backends.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl HashingArgs {
    /// The configuration: the paper's full experiment, or the reduced one.
    fn config(&self) -> eval::Config {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (failures, repetitions, build_runs) = if self.quick {
            (vec![0, 10, 20, 50, 100], 5, 5)
        } else {
            ((0..=100).collect(), 200, 25)
        };
        eval::Config {
            backends: 1000,
            sizes: vec![65_537, 655_373],
            karger_views: 1000,
            failures,
            repetitions,
            build_runs,
            seed: self.seed,
            threads,
        }
    }
}

/// Runs the evaluation and writes what was asked for.
pub fn run(args: &HashingArgs) -> Result<()> {
    let config = args.config();
    let mut progress = |line: &str| eprintln!("stator bench hashing: {line}");
    let evaluation = eval::evaluate(&config, &mut progress)?;
    let mut stdout = std::io::stdout().lock();
    let text = if args.json {
        report::json_lines(&evaluation)?
    } else {
        report::text(&evaluation)
    };
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    if let Some(path) = &args.json_out {
        std::fs::write(path, report::json_lines(&evaluation)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("stator bench hashing: wrote {}", path.display());
    }
    if let Some(path) = &args.csv {
        report::write_csv(&evaluation, path)?;
        eprintln!("stator bench hashing: wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        plot::draw(&evaluation, path).with_context(|| format!("plot {}", path.display()))?;
        eprintln!("stator bench hashing: wrote {}", path.display());
    }
    Ok(())
}
