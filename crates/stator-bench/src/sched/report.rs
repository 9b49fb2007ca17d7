//! The report of `stator bench sched`: a table of ns/pick, the ratios against their goals, the
//! weight-change figures; as text or JSON.

use std::fmt::Write as _;

use serde_json::{Value, json};
use stator_sched::{Algorithm, BurstFigures, BurstReport};

use super::{Measured, Plan};

/// Goal: VNSWRR's ns/pick at 2,000 backends over that at 10.
pub const GOAL_FLAT: f64 = 1.2;
/// Goal: SWRR's ns/pick over VNSWRR's at 2,000 backends.
pub const GOAL_SPEEDUP: f64 = 50.0;
/// Tengine's figure for the same comparison: get-peer's CPU share, 39% (SWRR) → 0.27%.
pub const TENGINE_SPEEDUP: f64 = 39.0 / 0.27;

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// A `--quick` run.
    pub quick: bool,
    /// The CPU the measuring thread was pinned to (`None`: pinning failed).
    pub cpu: Option<usize>,
    /// What was run.
    pub plan: Plan,
    /// One row per (backends, algorithm).
    pub rows: Vec<Measured>,
    /// 100 backends, 4 workers, weight 1 → 2, the first 1,000 picks.
    pub burst: BurstReport,
    /// The same change seen by 1,000 workers making one pick each.
    pub fleet: BurstReport,
}

/// The two ratios the benchmark is run for (from each case's best repetition).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// VNSWRR at the largest pool ÷ at the smallest.
    pub vnswrr_flatness: Option<f64>,
    /// SWRR ÷ VNSWRR at the largest pool.
    pub swrr_over_vnswrr: Option<f64>,
    /// The smallest and largest pool sizes measured.
    pub sizes: (usize, usize),
}

impl Report {
    /// The case `(algorithm, backends)`, if measured.
    pub fn row(&self, algorithm: Algorithm, backends: usize) -> Option<&Measured> {
        self.rows
            .iter()
            .find(|m| m.algorithm == algorithm && m.backends == backends)
    }

    /// The ratios against their goals.
    pub fn summary(&self) -> Summary {
        let small = self.plan.backends.iter().copied().min().unwrap_or(0);
        let large = self.plan.backends.iter().copied().max().unwrap_or(0);
        let best = |a, n| self.row(a, n).map(Measured::best);
        let ratio = |x: Option<f64>, y: Option<f64>| Some(x? / y?);
        Summary {
            vnswrr_flatness: ratio(
                best(Algorithm::Vnswrr, large),
                best(Algorithm::Vnswrr, small),
            ),
            swrr_over_vnswrr: ratio(best(Algorithm::Swrr, large), best(Algorithm::Vnswrr, large)),
            sizes: (small, large),
        }
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let pinned = self.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}"),
        );
        let _ = writeln!(
            out,
            "stator bench sched{}: ns per pick, best / median of {} repetitions, {pinned}; \
             weights 1..=10 (seed {}); O(1) schedulers {} picks per repetition, O(N) ones {} peer \
             visits",
            if self.quick { " --quick" } else { "" },
            self.plan.repetitions,
            self.plan.seed,
            self.plan.picks,
            self.plan.budget,
        );
        let _ = write!(out, "{:>8}", "backends");
        for a in &self.plan.algorithms {
            let _ = write!(out, "  {:>17}", a.name());
        }
        let _ = writeln!(
            out,
            "  {:>11}  {:>10}  {:>13}",
            "swrr÷vnswrr", "ring nodes", "ring build ms"
        );
        for &n in &self.plan.backends {
            let _ = write!(out, "{n:>8}");
            for &a in &self.plan.algorithms {
                let cell = self.row(a, n).map_or_else(
                    || "-".to_string(),
                    |m| {
                        let mark = if m.truncated { "*" } else { "" };
                        format!("{:.1} / {:.1}{mark}", m.best(), m.median())
                    },
                );
                let _ = write!(out, "  {cell:>17}");
            }
            let v = self.row(Algorithm::Vnswrr, n);
            let ratio = match (self.row(Algorithm::Swrr, n), v) {
                (Some(s), Some(v)) => format!("{:.1}x", s.best() / v.best()),
                _ => "-".to_string(),
            };
            let (nodes, build) = v.map_or(("-".into(), "-".into()), |v| {
                (
                    v.ring_nodes.to_string(),
                    format!("{:.3}", v.build.as_secs_f64() * 1e3),
                )
            });
            let _ = writeln!(out, "  {ratio:>11}  {nodes:>10}  {build:>13}");
        }
        if self.rows.iter().any(|m| m.truncated) {
            let _ = writeln!(out, "(* a repetition stopped at its time limit)");
        }
        let s = self.summary();
        let (small, large) = s.sizes;
        if let Some(f) = s.vnswrr_flatness {
            let _ = writeln!(
                out,
                "VNSWRR {large} ÷ {small} backends: {f:.2} (goal ≤ {GOAL_FLAT}: {})",
                verdict(f <= GOAL_FLAT)
            );
        }
        if let Some(x) = s.swrr_over_vnswrr {
            let _ = writeln!(
                out,
                "SWRR ÷ VNSWRR at {large} backends: {x:.0}x (goal ≥ {GOAL_SPEEDUP}x: {}; Tengine: \
                 get-peer 39% → 0.27% of CPU, {TENGINE_SPEEDUP:.0}x)",
                verdict(x >= GOAL_SPEEDUP)
            );
        }
        let b = &self.burst;
        let _ = writeln!(
            out,
            "weight change 1 → 2 at a reload ({} backends, {} workers, first {} picks): steady \
             share {:.2}%",
            b.params.backends,
            b.params.workers,
            b.params.picks,
            b.steady_share * 100.0
        );
        for f in [&b.vnswrr, &b.swrr] {
            let _ = writeln!(out, "  {}", burst_line(f, b.steady_share));
        }
        let f = &self.fleet;
        let _ = writeln!(
            out,
            "the same change over a fleet of {} workers, one pick each: vnswrr {:.1}% \
             ({:.2}x), swrr {:.1}% ({:.2}x)",
            f.params.workers,
            f.vnswrr.share * 100.0,
            f.vnswrr.ratio_to(f.steady_share),
            f.swrr.share * 100.0,
            f.swrr.ratio_to(f.steady_share),
        );
        out
    }

    /// The machine-readable report.
    pub fn json(&self) -> Value {
        let s = self.summary();
        json!({
            "benchmark": "sched",
            "quick": self.quick,
            "cpu": self.cpu,
            "repetitions": self.plan.repetitions,
            "seed": self.plan.seed,
            "weights": "1..=10",
            "rows": self.rows.iter().map(|m| json!({
                "algorithm": m.algorithm.name(),
                "backends": m.backends,
                "picks": m.picks,
                "best_ns": m.best(),
                "median_ns": m.median(),
                "ns_per_pick": m.ns_per_pick,
                "truncated": m.truncated,
                "build_ms": m.build.as_secs_f64() * 1e3,
                "ring_nodes": m.ring_nodes,
            })).collect::<Vec<_>>(),
            "ratios": {
                "vnswrr_largest_over_smallest": s.vnswrr_flatness,
                "vnswrr_goal": GOAL_FLAT,
                "swrr_over_vnswrr_at_largest": s.swrr_over_vnswrr,
                "swrr_over_vnswrr_goal": GOAL_SPEEDUP,
                "tengine_swrr_over_vnswrr": TENGINE_SPEEDUP,
                "sizes": [s.sizes.0, s.sizes.1],
            },
            "burst": burst_json(&self.burst),
            "fleet": burst_json(&self.fleet),
        })
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

fn burst_line(f: &BurstFigures, steady: f64) -> String {
    format!(
        "{:>6}: {} of {} picks to the changed backend ({:.2}%, {:.2}x its steady share); \
         workers whose first pick was it: {}/{}",
        f.algorithm.name(),
        f.hits,
        f.picks,
        f.share * 100.0,
        f.ratio_to(steady),
        f.first_round_hits,
        f.workers
    )
}

fn burst_json(b: &BurstReport) -> Value {
    let fig = |f: &BurstFigures| {
        json!({
            "hits": f.hits,
            "picks": f.picks,
            "share": f.share,
            "ratio_to_steady": f.ratio_to(b.steady_share),
            "first_round_hits": f.first_round_hits,
            "workers": f.workers,
        })
    };
    json!({
        "backends": b.params.backends,
        "workers": b.params.workers,
        "picks": b.params.picks,
        "old_weight": b.params.old_weight,
        "new_weight": b.params.new_weight,
        "steady_share": b.steady_share,
        "vnswrr": fig(&b.vnswrr),
        "swrr": fig(&b.swrr),
    })
}
