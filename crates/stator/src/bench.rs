//! `stator bench …`: benchmarks. They print figures and ratios against baselines measured in
//! the same run, write a JSON report, and never fail on a timing. Each lives in stator-bench;
//! this parses the subcommand and hands its arguments over.

use anyhow::Result;

use stator_bench::afxdp::BenchAfxdpArgs;
use stator_bench::hashing::HashingArgs;
use stator_bench::veth::BenchVethArgs;
use stator_bench::xdp::BenchXdpArgs;

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// Consistent hashing (paper §5.3): Figures 11 and 12 and the table build time.
    Hashing(HashingArgs),
    /// The XDP forwarder under BPF_PROG_TEST_RUN (needs root).
    Xdp(BenchXdpArgs),
    /// The backend's decap program under BPF_PROG_TEST_RUN, and what second chance adds:
    /// the socket lookup, passing a packet on (needs root).
    Decap(stator_bench::decap::BenchDecapArgs),
    /// Packets per second end to end on veth: the forwarder against plain forwarding without
    /// load balancing, in the same run (needs root).
    Veth(BenchVethArgs),
    /// The HTTP proxy against nginx and HAProxy with wrk, same backends, same run; then
    /// Tengine's 20 vs 2,000 backends with VNSWRR and SWRR.
    Proxy(stator_bench::proxy::BenchProxyArgs),
    /// The TCP listener against HAProxy `mode tcp` and nginx `stream` with wrk through them,
    /// same backend, same run: bytes/s in bulk, connections/s for short connections.
    Tcp(stator_bench::tcp::BenchTcpArgs),
    /// The AF_XDP forwarder on veth: the paper's Figures 8 (kernel bypass against the kernel
    /// stack and XDP) and 9 (SYN, non-SYN, constant 5-tuple) (needs root).
    Afxdp(BenchAfxdpArgs),
    /// Upstream schedulers: ns per pick at 10 to 2,000 backends (VNSWRR against nginx's SWRR,
    /// least-conn, P2C, source hash) and the weight-change burst (stator-bench).
    Sched(stator_bench::sched::SchedArgs),
    /// Receiving UDP at a million packets per second: Cloudflare's ladder (recvfrom, pinning,
    /// recvmmsg, threads, SO_REUSEPORT) against an XDP generator on veth (needs root).
    Udp(stator_bench::udp::UdpArgs),
    /// The generator process of `stator bench udp` (started by it, not by hand).
    #[command(name = "udp-gen", hide = true)]
    UdpGen(stator_bench::udp::generator::GenArgs),
}

/// Runs a benchmark.
pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Hashing(args) => Ok(stator_bench::hashing::run(&args)?),
        BenchCmd::Xdp(args) => Ok(stator_bench::xdp::run(args)?),
        BenchCmd::Decap(args) => Ok(stator_bench::decap::run(args)?),
        BenchCmd::Veth(args) => Ok(stator_bench::veth::run(args)?),
        BenchCmd::Proxy(args) => {
            let stator = std::env::current_exe()?;
            Ok(stator_bench::proxy::run(&args, &stator)?)
        }
        BenchCmd::Tcp(args) => {
            let stator = std::env::current_exe()?;
            Ok(stator_bench::tcp::run(&args, &stator)?)
        }
        BenchCmd::Afxdp(args) => Ok(stator_bench::afxdp::run(args)?),
        BenchCmd::Sched(args) => Ok(stator_bench::sched::run(&args)?),
        BenchCmd::Udp(args) => Ok(stator_bench::udp::run(&args)?),
        BenchCmd::UdpGen(args) => Ok(stator_bench::udp::generator::run_child(&args)?),
    }
}
