//! `stator run -c stator.toml`: one node, the controller plus its data plane, until SIGTERM or
//! SIGINT (SIGHUP reloads the file). See docs/operations.md.

use std::path::PathBuf;

use anyhow::{Context, Result};
use stator_node::{Node, NodeOptions};

/// Options of `stator run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The configuration file (TOML).
    #[arg(
        short = 'c',
        long = "config",
        default_value = "/etc/stator/stator.toml"
    )]
    config: PathBuf,
    /// Replace the node running with this configuration without closing a connection: take
    /// its listening sockets over `upgrade.socket`, start, then let it drain and exit
    /// (docs/operations.md, "Upgrades"). `stator upgrade` asks the node to start one.
    #[arg(long)]
    takeover: bool,
}

/// Runs a node to the end.
pub fn run(args: RunArgs) -> Result<()> {
    let path = args.config;
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    let source = path.display().to_string();
    let config = match stator_config::from_toml_str(&source, &text) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "{source}: {} error(s); nothing started",
                errors.errors.len()
            );
            std::process::exit(1);
        }
    };
    stator_control::logging::init(&config.log);
    // Before anything else: a node under systemd says so (or that it is not) first.
    let mut supervision = stator_control::supervise::Supervision::from_env();
    // A successor takes the running node's sockets before anything else opens one; the
    // running node is paused from here until it hears how this start went.
    let mut takeover = None;
    if args.takeover {
        let (inherited, predecessor) =
            stator_node::upgrade::take_over(&config.upgrade.socket, env!("STATOR_COMMIT"))
                .map_err(anyhow::Error::msg)
                .context("stator run --takeover: nothing started")?;
        tracing::info!(predecessor = predecessor.pid, commit = %predecessor.commit,
                       listeners = inherited.listeners.len(), "taking over the running node's sockets");
        supervision.successor();
        takeover = Some((inherited, predecessor));
    }
    let (inherited, predecessor) = match takeover {
        Some((i, p)) => (Some(i), Some(p)),
        None => (None, None),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("stator")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let opts = NodeOptions {
            config_path: Some(path),
            commit: Some(env!("STATOR_COMMIT").to_owned()),
            inherited,
            ..NodeOptions::default()
        };
        let node = match Node::start(text, source, opts).await {
            Ok(node) => node,
            Err(e) => {
                tracing::error!(error = %e, "start failed");
                if let Some(p) = predecessor {
                    p.failed(&e.to_string());
                    tracing::info!("the node this one was to replace runs on");
                }
                return Err(anyhow::Error::new(e).context("stator run could not start"));
            }
        };
        if let Some(p) = predecessor {
            let pid = p.pid;
            match p.serving() {
                Ok(()) => tracing::info!(predecessor = pid, "serving: the replaced node drains and exits"),
                Err(e) => tracing::warn!(predecessor = pid, error = %e, "serving, but the replaced node did not hear it (it resumed or died)"),
            }
        }
        if let Err(e) = node.run_until_signal(supervision).await {
            // The data plane was still detached or kept; report, but the shutdown is done.
            tracing::error!(error = %e, "shutdown finished with an error");
        }
        tracing::info!("stopped");
        Ok(())
    })
}
