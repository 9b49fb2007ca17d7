//! The `stator` binary: one entry point, clap subcommands.
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "stator", version, about = "Maglev-style network load balancer")]
enum Cli {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli {}
}
