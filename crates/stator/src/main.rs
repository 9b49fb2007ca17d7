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
    /// Validate a configuration file; print every error with its field path (exit 1 on any).
    Check(CheckArgs),
    /// Benchmarks and reproductions of the Maglev paper's evaluation.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The configuration file (TOML).
    file: std::path::PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Consistent hashing (paper §5.3): Figures 11 and 12 and the table build time.
    Hashing(bench_hashing::HashingArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Check(args) => {
            let report = stator_config::check_file(&args.file);
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            std::process::exit(report.exit_code());
        }
        Command::Bench(BenchCommand::Hashing(args)) => bench_hashing::run(&args),
    }
}
