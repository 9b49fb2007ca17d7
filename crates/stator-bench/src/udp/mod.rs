//! `stator bench udp`: Cloudflare's "How to receive a million packets per second" (Majkowski,
//! 2015; `seeds/million-pps-udp.zh.txt`) reproduced on this machine, step by step, in one run.
//!
//! A sender namespace and a receiver namespace are joined by veth ([`rig`]). The sender is
//! Stator's XDP live-frames generator (the one behind `stator bench veth`): 32-byte UDP
//! payloads, thousands of source ports so that flows spread, a bounded count and time — two
//! `sendmmsg` processes could not outrun even a plain `recvmmsg` receiver on this machine's
//! two cores. The receiver climbs the article's ladder ([`ladder::Step`]): `recvfrom` per
//! datagram, pinned, `recvmmsg` batches, two threads on one socket, `SO_REUSEPORT` with a
//! socket and a thread per core — and a sixth the article did not have: the socket picked by
//! Stator's reuseport BPF program instead of the kernel's hash. Every step prints one line a second in the article's format
//! beside the offered rate, then a table: received pps, its ratio to step 1, the per-thread
//! split, the drops where they happen (the veth ring, the sockets, the namespace's UDP MIB) and
//! the receiving threads' CPU time per datagram.
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
    /// CPU of the generator — and so of the receiving kernel's softirq work (default: the first
    /// CPU this process may use).
    #[arg(long)]
    pub gen_cpu: Option<usize>,
    /// Sockets and threads of step 5 (default: one per CPU this process may use).
    #[arg(long)]
    pub threads: Option<usize>,
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
    let cpus = pin::allowed_cpus();
    let gen_cpu = args
        .gen_cpu
        .unwrap_or_else(|| cpus.first().copied().unwrap_or(0));
    if !cpus.contains(&gen_cpu) {
        return Err(BenchError::Options {
            reason: format!("--gen-cpu {gen_cpu}: this process may use CPUs {cpus:?}"),
        });
    }
    let mut rx_cpus: Vec<usize> = cpus.iter().copied().filter(|&c| c != gen_cpu).collect();
    rx_cpus.push(gen_cpu);
    let plan = Plan {
        seconds: if args.quick { 1 } else { args.seconds.max(1) },
        warmup: Duration::from_millis(if args.quick { 200 } else { 500 }),
        threads: args.threads.unwrap_or(cpus.len()).max(1),
        rx_cpus: rx_cpus.clone(),
        max_rate: 30e6,
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
        "stator bench udp: receiving 32-byte UDP datagrams from an XDP generator on CPU \
         {gen_cpu} ({} flows); receivers on CPUs {rx_cpus:?}; {} s per step; load at start {}",
        args.flows,
        plan.seconds,
        loadavg.trim()
    ));
    let rig = Rig::new(args.flows, gen_cpu)?;
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
        "generator_cpu": gen_cpu,
        "receiver_cpus": rx_cpus,
        "flows": args.flows,
        "payload_bytes": rig::PAYLOAD,
        "seconds_per_step": plan.seconds,
        "warmup_s": plan.warmup.as_secs_f64(),
        "quick": args.quick,
        "loadavg_at_start": loadavg.trim(),
        "elapsed_s": started.elapsed().as_secs_f64(),
        "method": "XDP live-frames generator (BPF_PROG_TEST_RUN) → veth → receiver namespace; \
                   the receiving kernel's softirq runs on the generator's CPU; figures over the \
                   measured seconds after a warm-up",
    });
    let report = report::json(&results, meta);
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
        for line in report::verdict(&results) {
            println!("{line}");
        }
    }
    Ok(())
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
