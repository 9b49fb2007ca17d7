//! The `stator` binary: one entry point, clap subcommands. No `unsafe`: the system calls it
//! needs beyond `std` are stator-sys's.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

mod attach_out;
mod bench;
mod client_cmd;
mod decap_cmd;
mod generate_cmd;
mod lab_cmd;
mod run_cmd;
mod table;
mod trace_send;
mod upgrade_cmd;
mod withdraw_cmd;
mod xdp_cmd;

#[derive(Debug, Parser)]
#[command(
    name = "stator",
    version = env!("STATOR_VERSION_LINE"),
    about = "Maglev-style network load balancer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration file; print every error with its field path (exit 1 on any),
    /// and warnings, among them a worst case of descriptors beyond this host's limit.
    Check(CheckArgs),
    /// Run one node: the controller and its data plane, until SIGTERM/SIGINT (SIGHUP reloads).
    Run(run_cmd::RunArgs),
    /// Withdraw every VIP of the node through BIRD without `stator run` (systemd's
    /// `ExecStopPost=` after the controller died, hung or could not start).
    Withdraw(withdraw_cmd::WithdrawArgs),
    /// Replace the running node's process (after a package upgrade) without closing a
    /// connection: its successor takes the listening sockets, the old process drains.
    Upgrade(upgrade_cmd::UpgradeArgs),
    #[command(flatten)]
    Client(client_cmd::ClientCmd),
    /// The XDP data plane: attach, detach, status, stats.
    #[command(subcommand)]
    Xdp(xdp_cmd::XdpCmd),
    /// The backend side: decapsulate GRE, IPIP and GUE for a VIP on `lo` (direct server return).
    #[command(subcommand)]
    Decap(decap_cmd::DecapCmd),
    /// The lab: a whole deployment (router, Stator nodes, backends) in namespaces; the demo.
    #[command(subcommand)]
    Lab(lab_cmd::LabCmd),
    /// Benchmarks (figures and ratios against baselines; never fail on a timing).
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Shell completions and man pages from these definitions (for packaging).
    #[command(subcommand, hide = true)]
    Generate(generate_cmd::GenerateCmd),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The configuration file (TOML).
    file: std::path::PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // `stator run` installs the logger its configuration asks for; every other command logs
    // what the libraries say (such as a bpffs mounted for the pin path) as plain lines.
    if !matches!(cli.command, Command::Run(_)) {
        stator_control::logging::init(&stator_config::Log::default());
    }
    match cli.command {
        Command::Check(args) => {
            // What `stator run` would have here: the hard descriptor limit (it raises the
            // soft one to it) and one worker per core for listeners that set none.
            let host = stator_config::Host {
                nofile: stator_sys::limits::nofile().hard,
                cores: stator_control::listeners::default_workers(),
            };
            let report = stator_config::check_file_on(&args.file, Some(&host));
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            std::process::exit(report.exit_code());
        }
        Command::Run(args) => run_cmd::run(args),
        Command::Withdraw(args) => withdraw_cmd::run(args),
        Command::Upgrade(args) => upgrade_cmd::run(args),
        Command::Client(cmd) => client_cmd::run(cmd),
        Command::Xdp(cmd) => xdp_cmd::run(cmd),
        Command::Decap(cmd) => decap_cmd::run(cmd),
        Command::Lab(cmd) => lab_cmd::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Generate(cmd) => generate_cmd::run(cmd),
    }
}
