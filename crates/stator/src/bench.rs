//! `stator bench …`: benchmarks. They print figures and ratios against baselines measured in
//! the same run, write a JSON report, and never fail on a timing.

use anyhow::Result;

use crate::bench_afxdp::{self, BenchAfxdpArgs};
use crate::bench_hashing::{self, HashingArgs};
use crate::bench_veth::{self, BenchVethArgs};
use crate::bench_xdp::{self, BenchXdpArgs};

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// Consistent hashing (paper §5.3): Figures 11 and 12 and the table build time.
    Hashing(HashingArgs),
    /// The XDP forwarder under BPF_PROG_TEST_RUN (needs root).
    Xdp(BenchXdpArgs),
    /// Packets per second end to end on veth: the forwarder against plain forwarding without
    /// load balancing, in the same run (needs root).
    Veth(BenchVethArgs),
    /// The HTTP proxy against nginx and HAProxy with wrk, same backends, same run; then
    /// Tengine's 20 vs 2,000 backends with VNSWRR and SWRR.
    Proxy(stator_bench::proxy::BenchProxyArgs),
    /// The AF_XDP forwarder on veth: the paper's Figures 8 (kernel bypass against the kernel
    /// stack and XDP) and 9 (SYN, non-SYN, constant 5-tuple) (needs root).
    Afxdp(BenchAfxdpArgs),
    /// Upstream schedulers: ns per pick at 10 to 2,000 backends (VNSWRR against nginx's SWRR,
    /// least-conn, P2C, source hash) and the weight-change burst (stator-bench).
    Sched(stator_bench::sched::SchedArgs),
}

/// Runs a benchmark.
pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Hashing(args) => bench_hashing::run(&args),
        BenchCmd::Xdp(args) => bench_xdp::run(args),
        BenchCmd::Veth(args) => bench_veth::run(args),
        BenchCmd::Proxy(args) => {
            let stator = std::env::current_exe()?;
            Ok(stator_bench::proxy::run(&args, &stator)?)
        }
        BenchCmd::Afxdp(args) => bench_afxdp::run(args),
        BenchCmd::Sched(args) => Ok(stator_bench::sched::run(&args)?),
    }
}
