//! The crate's one error type.

use stator_hash::MaglevError;

/// Everything that can go wrong steering clients to workers. Messages say what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// An option is out of range.
    #[error("steering option `{field}`: {reason}")]
    InvalidOption {
        /// The option (`workers`, `table_size`, …).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A key that is neither `microsoft` nor 40 bytes of hex.
    #[error("RSS key: {reason}")]
    BadKey {
        /// What is wrong with it.
        reason: String,
    },
    /// Hash fields that are neither `addr` nor `addr+port`.
    #[error("steering hash fields {value:?}: expected \"addr\" or \"addr+port\"")]
    BadFields {
        /// The rejected value.
        value: String,
    },
    /// The OS random source failed while drawing a key.
    #[error("cannot draw a random RSS key: {reason}")]
    Random {
        /// The OS error.
        reason: String,
    },
    /// A worker id at or above the group's capacity.
    #[error("worker {worker} does not exist: the steering group was loaded for {workers} workers")]
    UnknownWorker {
        /// The rejected id.
        worker: u32,
        /// The capacity given to [`crate::ReuseportSteering::load`].
        workers: u32,
    },
    /// The worker table could not be built.
    #[error("building the worker table: {0}")]
    Table(#[from] MaglevError),
    /// The kernel refused the object (maps or program).
    #[error("loading stator_reuseport: {source}{hint}")]
    Load {
        /// What aya reported (a verifier rejection carries the log).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// A map operation failed.
    #[error("{op} {map}: {detail}{hint}")]
    Map {
        /// The map.
        map: &'static str,
        /// What was being done.
        op: String,
        /// `source` and its causes (the OS error), as one line.
        detail: String,
        /// What aya reported.
        #[source]
        source: Box<aya::maps::MapError>,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// Receive steering (`stator_rss`, `steering = "cpu"`) could not be set up: loading the
    /// program, filling its maps, or attaching it to an interface.
    #[error("receive steering: {what}: {detail}{hint}")]
    Receive {
        /// What was being done (`loading stator_rss`, `attaching to eth0`, …).
        what: String,
        /// The error and its causes (the OS error), as one line.
        detail: String,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// `SO_ATTACH_REUSEPORT_EBPF` (or the detach) failed.
    #[error(
        "{op} the steering program: {detail} (the socket must have SO_REUSEPORT set and be bound)"
    )]
    Attach {
        /// `attaching` or `detaching`.
        op: &'static str,
        /// `source` and its causes (the OS error), as one line.
        detail: String,
        /// What aya reported.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
}

/// An error and its causes as one line, `a: b: c` (aya keeps the OS error in the causes).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

/// Result alias.
pub type Result<T> = std::result::Result<T, SteerError>;

/// The hint for an `EPERM` from the kernel.
pub(crate) const ROOT_HINT: &str =
    " (loading BPF programs needs root: CAP_BPF and CAP_NET_ADMIN; run as root)";
