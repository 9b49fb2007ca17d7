//! The `stator` binary: one entry point, clap subcommands.
use clap::Parser;

mod bench;
mod bench_xdp;
mod xdp_cmd;

#[derive(Debug, Parser)]
#[command(name = "stator", version, about = "Maglev-style network load balancer")]
enum Cli {
    /// The XDP data plane: attach, detach, status, stats.
    #[command(subcommand)]
    Xdp(xdp_cmd::XdpCmd),
    /// Benchmarks (figures and ratios; never fail on a timing).
    #[command(subcommand)]
    Bench(bench::BenchCmd),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli {
        Cli::Xdp(cmd) => xdp_cmd::run(cmd),
        Cli::Bench(cmd) => bench::run(cmd),
    }
}
