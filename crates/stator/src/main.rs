//! The `stator` binary: one entry point, clap subcommands.
use clap::{Parser, Subcommand};

mod bench_hashing;

#[derive(Debug, Parser)]
#[command(name = "stator", version, about = "Maglev-style network load balancer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks and reproductions of the Maglev paper's evaluation.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Consistent hashing (paper §5.3): Figures 11 and 12 and the table build time.
    Hashing(bench_hashing::HashingArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(BenchCommand::Hashing(args)) => bench_hashing::run(&args),
    }
}
