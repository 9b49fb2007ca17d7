//! `stator bench udp`: Cloudflare's "How to receive a million packets per second" (Majkowski,
//! 2015; `seeds/million-pps-udp.zh.txt`) reproduced on this machine, step by step, in one run.
//!
//! A sender namespace and a receiver namespace are joined by veth ([`rig`]). The sender is
//! Stator's XDP live-frames generator (the one behind `stator bench veth`), one process per
//! generator CPU, each on a veth queue of its own: 32-byte UDP payloads, thousands of source
//! ports so that flows spread, a bounded count and time — two `sendmmsg` processes could not
//! outrun even a plain `recvmmsg` receiver on a two-core machine. The generators are sized
//! from the CPUs present ([`default_generators`]). The receiver climbs the article's ladder ([`ladder::Step`]): `recvfrom` per
//! datagram, pinned, `recvmmsg` batches, two threads on one socket, `SO_REUSEPORT` with a
//! socket and a thread per core — and a sixth the article did not have: the socket picked by
//! Stator's reuseport BPF program instead of the kernel's hash. Every step prints one line a second in the article's format
//! beside the offered rate, then a table: received pps, its ratio to step 1, the per-thread
//! split, the drops where they happen (the veth ring, the sockets, the namespace's UDP MIB) and
//! the receiving threads' CPU time per datagram.
//!
//! With `--offered auto` it shows the ladder where the CPUs cannot offer more than the receivers
//! take (a small machine): step 1 is measured first at full rate, then every step runs at one
//! fixed rate above what step 1 took ([`ABOVE_STEP1`] of it), and the figures that matter are
//! the receivers' CPU per datagram and the share lost — the figure Cloudflare's article argues
//! from when throughput cannot be raised. `--offered MPPS` fixes the rate by hand.
//!
//! With `--proxy` it measures the UDP proxy tier instead ([`proxy`]): Stator's `protocol =
//! "udp"` listener beside nginx's `stream` UDP proxy, same backend, same CPUs, same run.

pub mod generator;
pub mod ladder;
pub mod procnet;
pub mod proxy;
pub mod recv;
pub mod report;
pub mod rig;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use self::ladder::{Plan, Step, StepResult};
use self::rig::{MAX_FLOWS, Rig};
use crate::{BenchError, pin};

/// Options of `stator bench udp`.
#[derive(Debug, Clone, clap::Args)]
pub struct UdpArgs {
    /// A short smoke run: one second per step (the figures are not meaningful).
    #[arg(long)]
    pub quick: bool,
    /// Print the report as JSON instead of lines and tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Measured seconds per step (one line each).
    #[arg(long, default_value_t = 5)]
    pub seconds: u32,
    /// Distinct flows (source ports) of the generated traffic.
    #[arg(long, default_value_t = 4096)]
    pub flows: u32,
    /// Generators, one per CPU, each on a veth queue of its own (default: one below 4 CPUs,
    /// else half the CPUs this process may use).
    #[arg(long)]
    pub generators: Option<usize>,
    /// CPUs of the generators — and so of the receiving kernel's softirq work (default: the
    /// first CPUs this process may use, one per generator).
    #[arg(long, value_delimiter = ',')]
    pub gen_cpus: Vec<usize>,
    /// Sockets and threads of steps 5 and 6 (default: one per CPU no generator uses, at least
    /// 2).
    #[arg(long)]
    pub threads: Option<usize>,
    /// The offered rate: `auto` (measure step 1 first, then offer every step 1.5× what it
    /// took), or a fixed rate in Mpps (default: as fast as the generators can).
    #[arg(long, value_name = "auto|MPPS")]
    pub offered: Option<String>,
    /// Receive buffer of every socket, bytes (default: the kernel's, `net.core.rmem_default`,
    /// as in the article; the kernel caps a larger one at `net.core.rmem_max`).
    #[arg(long)]
    pub rcvbuf: Option<usize>,
    /// Instead of the ladder: request/response and one-way datagrams per second through
    /// Stator's UDP listener and nginx's `stream` UDP proxy to the same echo backend.
    #[arg(long)]
    pub proxy: bool,
    /// Steps to run, e.g. `1,3,5` (default: all).
    #[arg(long, value_delimiter = ',')]
    pub steps: Vec<u8>,
}

/// With `--offered auto`, every step is offered this many times what step 1 took.
pub const ABOVE_STEP1: f64 = 1.5;

/// How the offered rate is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offered {
    /// As fast as the generators can.
    Max,
    /// Step 1 first, then [`ABOVE_STEP1`] times what it took.
    Auto,
    /// This many frames a second.
    Fixed(f64),
}

impl Offered {
    /// `--offered`'s value.
    pub fn parse(arg: Option<&str>) -> Result<Self, BenchError> {
        match arg.map(str::trim) {
            None => Ok(Self::Max),
            Some("auto") => Ok(Self::Auto),
            Some(v) => match v.parse::<f64>() {
                Ok(m) if m.is_finite() && m > 0.0 && m <= 100.0 => Ok(Self::Fixed(m * 1e6)),
                _ => Err(BenchError::Options {
                    reason: format!("--offered {v}: `auto` or a rate in Mpps (0 < rate ≤ 100)"),
                }),
            },
        }
    }
}

/// Generators for a process that may use `cpus` CPUs: one below 4 (the generators' CPUs also
/// run the receiving kernel's softirq, and the receivers need CPUs of their own), else half.
pub fn default_generators(cpus: usize) -> usize {
    if cpus < 4 { 1 } else { cpus / 2 }
}

/// The generators' CPUs and the receivers' (those no generator uses first, then the
/// generators'), from the allowed CPUs and the options.
fn cpu_plan(
    cpus: &[usize],
    gen_cpus: &[usize],
    generators: Option<usize>,
) -> Result<(Vec<usize>, Vec<usize>), BenchError> {
    let gens: Vec<usize> = if gen_cpus.is_empty() {
        let n = generators.unwrap_or_else(|| default_generators(cpus.len()));
        if n == 0 || n > cpus.len() {
            return Err(BenchError::Options {
                reason: format!(
                    "--generators {n}: this process may use {} CPUs ({cpus:?})",
                    cpus.len()
                ),
            });
        }
        cpus[..n].to_vec()
    } else {
        let mut g = gen_cpus.to_vec();
        g.sort_unstable();
        g.dedup();
        if let Some(c) = g.iter().find(|c| !cpus.contains(c)) {
            return Err(BenchError::Options {
                reason: format!("--gen-cpus {c}: this process may use CPUs {cpus:?}"),
            });
        }
        if generators.is_some_and(|n| n != g.len()) {
            return Err(BenchError::Options {
                reason: "--generators and --gen-cpus disagree on how many generators".into(),
            });
        }
        g
    };
    let mut rx: Vec<usize> = cpus.iter().copied().filter(|c| !gens.contains(c)).collect();
    rx.extend(&gens);
    Ok((gens, rx))
}

/// Runs the benchmark and prints (and writes) its report.
///
/// # Errors
/// [`BenchError`] when it cannot run (not root, namespaces, BPF, sockets) or cannot write its
/// report; never for a figure.
pub fn run(args: &UdpArgs) -> Result<(), BenchError> {
    if args.proxy {
        return proxy::run(args);
    }
    if !stator_xdp::is_root() {
        return Err(BenchError::NotRoot {
            what: "stator bench udp",
        });
    }
    let steps = steps(args)?;
    if args.flows == 0 || args.flows > MAX_FLOWS {
        return Err(BenchError::Options {
            reason: format!("--flows {} (1..={MAX_FLOWS})", args.flows),
        });
    }
    let offered = Offered::parse(args.offered.as_deref())?;
    let mut cpus = pin::allowed_cpus();
    if cpus.is_empty() {
        cpus.push(0);
    }
    let (gen_cpus, rx_cpus) = cpu_plan(&cpus, &args.gen_cpus, args.generators)?;
    let rx_only = rx_cpus.len() - gen_cpus.len();
    let mut plan = Plan {
        seconds: if args.quick { 1 } else { args.seconds.max(1) },
        warmup: Duration::from_millis(if args.quick { 200 } else { 500 }),
        threads: args.threads.unwrap_or(rx_only.max(2)).max(1),
        rx_cpus: rx_cpus.clone(),
        max_rate: 30e6,
        rate: match offered {
            Offered::Fixed(r) => Some(r),
            Offered::Max | Offered::Auto => None,
        },
        rcvbuf: args.rcvbuf,
    };
    let started = Instant::now();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let say = |line: &str| {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    say(&format!(
        "stator bench udp: receiving 32-byte UDP datagrams from {} XDP generator(s) on CPUs \
         {gen_cpus:?} ({} flows); receivers on CPUs {rx_cpus:?}; {} s per step; offered: {}; \
         load at start {}",
        gen_cpus.len(),
        args.flows,
        plan.seconds,
        match offered {
            Offered::Max => "as fast as the generators can".to_string(),
            Offered::Auto => format!("{ABOVE_STEP1}× what step 1 takes, measured first"),
            Offered::Fixed(r) => format!("{:.3} Mpps", r / 1e6),
        },
        loadavg.trim()
    ));
    let rig = Rig::new(args.flows, &gen_cpus)?;
    let mut calibration = None;
    if offered == Offered::Auto {
        say("\ncalibration — step 1 at full rate: what the naive receiver takes");
        let c = ladder::run_step(&rig, Step::Naive, &plan, &mut |l| say(l))?;
        let rate = auto_rate(&c);
        say(&format!(
            "calibration: step 1 took {:.3} of {:.3} Mpps offered; every step is offered {:.3} \
             Mpps{}",
            c.pps() / 1e6,
            c.offered_pps() / 1e6,
            rate / 1e6,
            if rate < ABOVE_STEP1 * c.pps() {
                " (all the generators could offer: less than 1.5× step 1)"
            } else {
                ""
            }
        ));
        plan.rate = Some(rate);
        calibration = Some(c);
    }
    let mut results: Vec<StepResult> = Vec::new();
    for step in steps {
        say(&format!(
            "\nstep {} — {}: {}",
            step.number(),
            step.name(),
            step.what()
        ));
        results.push(ladder::run_step(&rig, step, &plan, &mut |l| say(l))?);
    }
    drop(rig);
    let meta = json!({
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": cpus,
        "generators": gen_cpus.len(),
        "generator_cpus": gen_cpus,
        "receiver_cpus": rx_cpus,
        "offered_mode": match offered {
            Offered::Max => "max",
            Offered::Auto => "auto",
            Offered::Fixed(_) => "fixed",
        },
        "offered_rate_pps": plan.rate,
        "calibration": calibration.as_ref().map(|c| json!({
            "offered_pps": c.offered_pps(),
            "received_pps": c.pps(),
            "receiver_limited": report::receiver_limited(c),
            "above_step1": ABOVE_STEP1,
        })),
        "flows": args.flows,
        "payload_bytes": rig::PAYLOAD,
        "seconds_per_step": plan.seconds,
        "warmup_s": plan.warmup.as_secs_f64(),
        "quick": args.quick,
        "loadavg_at_start": loadavg.trim(),
        "elapsed_s": started.elapsed().as_secs_f64(),
        "method": "XDP live-frames generators (BPF_PROG_TEST_RUN), one process per CPU → \
                   veth with a queue per generator → receiver namespace; the receiving kernel's \
                   softirq runs on the generators' CPUs; figures over the measured seconds after \
                   a warm-up",
    });
    let report = report::json(&results, meta, plan.rate);
    let text = serde_json::to_string_pretty(&report)? + "\n";
    if let Some(path) = &args.out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
                path: dir.display().to_string(),
                source,
            })?;
        }
        std::fs::write(path, &text).map_err(|source| BenchError::Write {
            path: path.display().to_string(),
            source,
        })?;
    }
    if args.json {
        print!("{text}");
    } else {
        println!("\n{}", report::table(&results));
        for r in results.iter().filter(|r| !r.steer_counters.is_empty()) {
            let counters: Vec<String> = r
                .steer_counters
                .iter()
                .filter(|(_, v)| *v > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            println!(
                "step {}: the steering program's decisions: {}",
                r.step.number(),
                counters.join(", ")
            );
        }
        for line in report::verdict(&results, plan.rate) {
            println!("{line}");
        }
    }
    Ok(())
}

/// The rate `--offered auto` fixes from its calibration: [`ABOVE_STEP1`] times what step 1
/// took, but no more than 95% of what the generators offered then (a rate they can keep).
fn auto_rate(c: &StepResult) -> f64 {
    (ABOVE_STEP1 * c.pps())
        .min(0.95 * c.offered_pps())
        .max(1000.0)
}

fn steps(args: &UdpArgs) -> Result<Vec<Step>, BenchError> {
    if args.steps.is_empty() {
        return Ok(Step::ALL.to_vec());
    }
    let mut steps = args
        .steps
        .iter()
        .map(|&n| {
            Step::from_number(n).ok_or_else(|| BenchError::Options {
                reason: format!("--steps: no step {n} (1..={})", Step::ALL.len()),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    steps.sort();
    steps.dedup();
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_sized_from_the_cpus() {
        assert_eq!(default_generators(1), 1);
        assert_eq!(default_generators(2), 1);
        assert_eq!(default_generators(3), 1);
        assert_eq!(default_generators(4), 2);
        assert_eq!(default_generators(16), 8);
        let (g, rx) = cpu_plan(&[0, 1], &[], None).unwrap();
        assert_eq!((g, rx), (vec![0], vec![1, 0]));
        let cpus: Vec<usize> = (0..16).collect();
        let (g, rx) = cpu_plan(&cpus, &[], None).unwrap();
        assert_eq!(g, (0..8).collect::<Vec<_>>());
        assert_eq!(rx[..8], (8..16).collect::<Vec<_>>()[..]);
        assert_eq!(rx.len(), 16);
        let (g, _) = cpu_plan(&cpus, &[5, 3, 5], None).unwrap();
        assert_eq!(g, [3, 5]);
        assert!(cpu_plan(&[0, 1], &[], Some(3)).is_err());
        assert!(cpu_plan(&[0, 1], &[], Some(0)).is_err());
        assert!(cpu_plan(&[0, 1], &[7], None).is_err());
        assert!(cpu_plan(&[0, 1], &[0], Some(2)).is_err());
    }

    #[test]
    fn offered_rates_parse() {
        assert_eq!(Offered::parse(None).unwrap(), Offered::Max);
        assert_eq!(Offered::parse(Some("auto")).unwrap(), Offered::Auto);
        assert_eq!(
            Offered::parse(Some("0.25")).unwrap(),
            Offered::Fixed(250_000.0)
        );
        for bad in ["0", "-1", "nan", "fast", "1000"] {
            assert!(Offered::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
