//! Logging: `tracing` events to stderr, human-readable or one JSON object per line, as
//! `[log]` says. `STATOR_LOG` (an `EnvFilter` directive such as `debug` or
//! `stator_control=debug,info`) overrides the level for a debugging session.

use stator_config::{Log, LogFormat, LogLevel};
use tracing_subscriber::EnvFilter;

fn level_name(l: LogLevel) -> &'static str {
    match l {
        LogLevel::Error => "error",
        LogLevel::Warn => "warn",
        LogLevel::Info => "info",
        LogLevel::Debug => "debug",
        LogLevel::Trace => "trace",
    }
}

/// Installs the global subscriber (once; later calls do nothing).
pub fn init(log: &Log) {
    let filter = std::env::var("STATOR_LOG")
        .ok()
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new(level_name(log.level)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    let _ = match log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
