//! The one error type of stator-xdp. Every variant says what went wrong in words an operator can
//! act on; kernel and aya errors are kept as the `#[source]`.

use std::io;
use std::path::PathBuf;

/// What can go wrong loading, programming, attaching or reading the XDP data plane.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// Loading BPF programs and maps needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN).
    #[error("{what} needs root (CAP_BPF, CAP_NET_ADMIN); run as root")]
    NotRoot {
        /// What was attempted.
        what: String,
    },

    /// The pin directory is not on a bpffs and mounting one there failed.
    #[error(
        "pin path {pin_path} is not on a bpffs and mounting one at {at} failed ({what}): {source}"
    )]
    BpffsMount {
        /// The pin directory.
        pin_path: PathBuf,
        /// Where the mount was attempted.
        at: PathBuf,
        /// The step that failed.
        what: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// The interface does not exist in this network namespace.
    #[error("network interface `{iface}` does not exist (in this network namespace)")]
    InterfaceMissing {
        /// The interface name.
        iface: String,
    },

    /// The interface (or its driver) cannot run XDP in the requested mode.
    #[error(
        "interface `{iface}` does not support XDP in {mode} mode (try --mode generic, or auto)"
    )]
    XdpUnsupported {
        /// The interface.
        iface: String,
        /// `native` or `generic`.
        mode: &'static str,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// The kernel verifier rejected a program.
    #[error(
        "the kernel verifier rejected program `{program}` ({source}); verifier log tail:\n{log_tail}"
    )]
    VerifierRejected {
        /// Program name.
        program: String,
        /// The last lines of the verifier log.
        log_tail: String,
        /// The load error.
        #[source]
        source: io::Error,
    },

    /// A map pinned by an earlier run has another layout than this build expects.
    #[error(
        "pinned map {path} is incompatible with this build: {what} is {pinned}, expected \
         {expected} (detach and remove the pins with `stator xdp detach --all --purge`, or \
         load with the options it was created with)"
    )]
    IncompatiblePin {
        /// The pin.
        path: PathBuf,
        /// Which property differs.
        what: &'static str,
        /// The pinned map's value.
        pinned: String,
        /// This build's value.
        expected: String,
    },

    /// A snapshot violates a limit compiled into the programs, or is inconsistent.
    #[error("snapshot rejected: {reason}")]
    InvalidSnapshot {
        /// What is wrong, naming the VIP or real.
        reason: String,
    },

    /// Options are out of range.
    #[error("invalid XDP options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: String,
    },

    /// Loading the BPF object failed for another reason than the verifier.
    #[error("loading BPF object {object} failed")]
    Load {
        /// Object or program name.
        object: String,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A map operation failed.
    #[error("BPF map `{map}`: {op} failed")]
    Map {
        /// Map name.
        map: &'static str,
        /// The operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Attaching to or detaching from an interface failed.
    #[error("{op} XDP on `{iface}` failed")]
    Attach {
        /// `attach`, `detach`, `re-attach`.
        op: &'static str,
        /// The interface.
        iface: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Nothing of ours is attached to this interface.
    #[error("no Stator XDP attachment on `{iface}` under {pin_path}")]
    NotAttached {
        /// The interface.
        iface: String,
        /// The pin directory searched.
        pin_path: PathBuf,
    },

    /// No pinned maps: the forwarder was never loaded with this pin path.
    #[error("no pinned Stator maps under {pin_path} (run `stator xdp attach` first)")]
    NotLoaded {
        /// The pin directory.
        pin_path: PathBuf,
    },

    /// The self-test probe was not answered as expected.
    #[error("forwarder self-test failed: {reason}")]
    SelfTest {
        /// What was wrong with the answer.
        reason: String,
    },

    /// The kernel's tick could not be measured for the program's clock (`clock.rs`).
    #[error("measuring the kernel's tick: {reason}")]
    Clock {
        /// What went wrong.
        reason: String,
    },

    /// Another system call failed.
    #[error("{what} failed")]
    Io {
        /// What was attempted.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, XdpError>;

impl XdpError {
    /// An [`XdpError::Io`]: `what` was being done when the kernel answered `source`.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// An [`XdpError::Map`]: operation `op` on map `map` failed with `source`.
    pub fn map(
        map: &'static str,
        op: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Map {
            map,
            op,
            source: Box::new(source),
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Self::InvalidSnapshot {
            reason: reason.into(),
        }
    }
}

/// The last `lines` lines of a verifier log.
pub(crate) fn log_tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines() {
        assert_eq!(log_tail("a\nb\n\nc\nd\n", 2), "c\nd");
        assert_eq!(log_tail("only", 5), "only");
    }
}
