//! `stator upgrade -c stator.toml`: replaces the running node's process without closing a
//! connection — the node starts its successor (the binary now installed at the path it was
//! started from, with its configuration file), which takes its sockets and serves; the old
//! process drains and exits. See docs/operations.md, "Upgrades".

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Options of `stator upgrade`.
#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    /// The running node's configuration file: its `upgrade.socket` is where to ask.
    #[arg(
        short = 'c',
        long = "config",
        default_value = "/etc/stator/stator.toml"
    )]
    config: PathBuf,
    /// The node's upgrade socket, instead of the configuration's `upgrade.socket` (the file
    /// is then not read).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Longest wait for the outcome, in seconds (default: the configuration's
    /// `upgrade.start_timeout` and 10 s more; 70 with `--socket`).
    #[arg(long)]
    timeout: Option<f64>,
}

/// Asks, waits, reports; an error (exit 1) when the successor did not serve (the node then
/// runs on as before).
pub fn run(args: UpgradeArgs) -> Result<()> {
    let wait = match args.timeout {
        Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
        Some(_) => bail!("--timeout must be a positive number of seconds"),
        None => None,
    };
    if let Some(socket) = &args.socket {
        let timeout = wait.unwrap_or(Duration::from_secs(70));
        return match stator_node::upgrade::request_spawn(socket, timeout) {
            Ok(pid) => {
                println!(
                    "upgraded: the successor (pid {pid}) serves; the old process drains and exits"
                );
                Ok(())
            }
            Err(e) => bail!("upgrade failed: {e}"),
        };
    }
    let source = args.config.display().to_string();
    let text =
        std::fs::read_to_string(&args.config).with_context(|| format!("reading {source}"))?;
    let config = match stator_config::from_toml_str(&source, &text) {
        Ok(c) => c,
        Err(errors) => bail!("{errors}\n{source}: the successor would not start; nothing done"),
    };
    // the successor's own start waits at most start_timeout; its answer comes just after
    let timeout = wait.unwrap_or(config.upgrade.start_timeout + Duration::from_secs(10));
    let socket = &config.upgrade.socket;
    match stator_node::upgrade::request_spawn(socket, timeout) {
        Ok(pid) => {
            println!(
                "upgraded: the successor (pid {pid}) serves; the old process drains for up to {:?} and exits",
                config.upgrade.drain
            );
            Ok(())
        }
        Err(e) => bail!("upgrade failed: {e}"),
    }
}
