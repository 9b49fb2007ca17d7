//! `stator withdraw -c stator.toml`: withdraws every VIP of the node through BIRD, without
//! `stator run` — the unit's `ExecStopPost=` after the controller died, hung (the systemd
//! watchdog killed it) or could not start. See docs/operations.md, "Running under systemd".
//!
//! With `--unless-clean` it reads what systemd tells `ExecStopPost=` about the stop
//! (`SERVICE_RESULT`, `EXIT_CODE`, `EXIT_STATUS`) and does nothing after a clean stop or
//! restart (`SERVICE_RESULT=success`): `stator run` then withdrew what it had to itself, and
//! `dataplane.on_exit = "keep"` keeps forwarding across a restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Options of `stator withdraw`.
#[derive(Debug, clap::Args)]
pub struct WithdrawArgs {
    /// The configuration file (TOML): its `[bgp]` says where BIRD is and which VIPs are the
    /// node's.
    #[arg(
        short = 'c',
        long = "config",
        default_value = "/etc/stator/stator.toml"
    )]
    config: PathBuf,
    /// BIRD's control socket, used when the configuration cannot be read: every Stator VIP
    /// protocol BIRD runs is then disabled directly.
    #[arg(long, default_value = stator_config::defaults::BIRD_SOCKET)]
    bird_socket: PathBuf,
    /// Longest wait for BIRD to confirm, in seconds.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Do nothing when systemd says the service stopped cleanly (`SERVICE_RESULT=success`,
    /// in `ExecStopPost=`).
    #[arg(long)]
    unless_clean: bool,
}

/// Runs the withdrawal; an error (exit 1) when BIRD did not confirm it in time.
pub fn run(args: WithdrawArgs) -> Result<()> {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "unset".into());
    let stop = format!(
        "SERVICE_RESULT={} EXIT_CODE={} EXIT_STATUS={}",
        var("SERVICE_RESULT"),
        var("EXIT_CODE"),
        var("EXIT_STATUS")
    );
    if args.unless_clean && std::env::var("SERVICE_RESULT").as_deref() == Ok("success") {
        tracing::info!(stop = %stop, "clean stop: nothing to withdraw (stator run withdrew or kept what it had to)");
        return Ok(());
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let started = Instant::now();
    let source = args.config.display().to_string();
    let config = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {source}"))
        .and_then(|text| {
            stator_config::from_toml_str(&source, &text)
                .map_err(|e| anyhow::anyhow!("{source}: {} error(s):\n{e}", e.errors.len()))
        });
    match config {
        Ok(config) => {
            tracing::info!(stop = %stop, config = %source, "withdrawing every VIP of the configuration through BIRD");
            let done = stator_bird::withdraw_configured(&config, timeout)
                .context("BIRD did not confirm the withdrawal")?;
            if done {
                tracing::info!(took = ?started.elapsed(), "BIRD confirmed: every VIP withdrawn");
            } else {
                tracing::info!("no [bgp] in the configuration: nothing is announced");
            }
        }
        Err(e) => {
            tracing::warn!(stop = %stop, error = format!("{e:#}"), socket = %args.bird_socket.display(),
                           "configuration unusable: disabling every Stator VIP protocol in BIRD directly");
            let n = stator_bird::withdraw_unconfigured(&args.bird_socket, timeout)
                .context("BIRD did not confirm the withdrawal")?;
            tracing::info!(took = ?started.elapsed(), disabled = n, "BIRD confirmed: every Stator VIP protocol down");
        }
    }
    Ok(())
}
