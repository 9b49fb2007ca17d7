//! The one error type of this crate.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong between Stator and BIRD.
#[derive(Debug, thiserror::Error)]
pub enum BirdError {
    /// The control socket could not be reached (BIRD not running, wrong path, permissions).
    #[error("cannot connect to BIRD's control socket {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// BIRD did not finish a reply in time; the connection is dropped.
    #[error("no complete reply from BIRD ({path}) to `{command}` within {timeout:?}")]
    Timeout {
        /// The socket path.
        path: PathBuf,
        /// The command (`<greeting>` while connecting).
        command: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// BIRD closed the connection (it stopped or restarted).
    #[error("BIRD ({path}) closed the control connection during `{command}`")]
    Closed {
        /// The socket path.
        path: PathBuf,
        /// The command (`<greeting>` while connecting).
        command: String,
    },
    /// Reading from or writing to the control socket failed.
    #[error("control connection to BIRD ({path}) failed during `{command}`: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The command (`<greeting>` while connecting).
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// BIRD sent something that is not its line protocol.
    #[error("unexpected reply line from BIRD ({path}): {reason}: {line:?}")]
    Protocol {
        /// The socket path.
        path: PathBuf,
        /// The offending line (cut to 200 bytes).
        line: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// BIRD answered a command with an error code (8xxx run-time, 9xxx parse error) or with a
    /// code the command does not expect.
    #[error("BIRD refused `{command}`: {code:04} {message}")]
    Command {
        /// The command.
        command: String,
        /// The reply code.
        code: u16,
        /// BIRD's message (for a configuration error: file, line and what is wrong).
        message: String,
    },
    /// A command Stator would not send: not one line, or a protocol name that is not a BIRD
    /// symbol.
    #[error("not a BIRD command: {command}: {reason}")]
    InvalidCommand {
        /// The command (escaped).
        command: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The configuration file Stator owns could not be written.
    #[error("cannot write BIRD configuration {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// BIRD reconfigured but does not run the protocols Stator wrote: its configuration does
    /// not include Stator's file.
    #[error(
        "BIRD does not know the protocols Stator wrote ({missing}); does its configuration \
         include {bird_config}? (see docs/bgp.md)"
    )]
    NotIncluded {
        /// The missing protocol names, comma-separated.
        missing: String,
        /// Stator's file, which BIRD's configuration must `include`.
        bird_config: PathBuf,
    },
    /// `withdraw_all` could not get BIRD to confirm in time.
    #[error("BIRD did not confirm the withdrawal of every VIP within {timeout:?}: {reason}")]
    WithdrawTimeout {
        /// The time allowed.
        timeout: Duration,
        /// The last reason it was not confirmed (an error, or what was still announced).
        reason: String,
    },
    /// The announcer thread could not be started or is gone.
    #[error("announcer thread: {reason}")]
    Thread {
        /// What happened.
        reason: String,
    },
}

impl BirdError {
    /// True when the error means the connection to BIRD is unusable (and is dropped): BIRD
    /// stopped, restarted, hangs or spoke garbage.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            Self::Connect { .. }
                | Self::Timeout { .. }
                | Self::Closed { .. }
                | Self::Io { .. }
                | Self::Protocol { .. }
        )
    }

    /// True when BIRD rejected its configuration (`8002`): a syntax or semantic error in
    /// BIRD's configuration, which includes Stator's file.
    pub fn is_config_rejected(&self) -> bool {
        matches!(self, Self::Command { code: 8002, .. })
    }
}
