//! The crate's one error type, and the data path's "no upstream" result.

use std::fmt;

/// Everything that can go wrong *building* a scheduler from a pool's peers.
///
/// Picks never fail with a `SchedError`: a pick that finds no usable peer returns
/// [`NoUpstream`], a plain value (the data path never allocates an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchedError {
    /// A weight of 0 (the configuration rejects it first; the builder checks again).
    #[error("peer id {id}: weight 0 (weights are at least 1)")]
    ZeroWeight {
        /// The peer's stable id.
        id: u32,
    },
    /// Two peers share an id, so results and health state could not tell them apart.
    #[error("peer id {id} is used by more than one peer")]
    DuplicateId {
        /// The repeated id.
        id: u32,
    },
    /// More peers than a scheduler indexes.
    #[error("{count} peers exceed the maximum of {max} per pool")]
    TooManyPeers {
        /// Number of peers given.
        count: usize,
        /// [`crate::MAX_PEERS`].
        max: usize,
    },
    /// VNSWRR's ring (total weight ÷ gcd of the weights) would be too large to precompute.
    #[error(
        "VNSWRR needs {nodes} virtual nodes (total weight / gcd of weights), more than the \
         maximum of {max}: use smaller or more even weights"
    )]
    RingTooLarge {
        /// Virtual nodes the weights need.
        nodes: u64,
        /// [`crate::MAX_VIRTUAL_NODES`].
        max: u64,
    },
    /// The source-hash Maglev table could not be built (empty or repeated peer names).
    #[error("source-hash table: {0}")]
    Table(#[from] stator_hash::MaglevError),
}

/// A pick found no peer that is usable now and not already tried for this request.
///
/// A plain `Copy` value so the data path can return it without allocating; the proxy turns it
/// into a 502 (HTTP) or a closed connection (TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NoUpstream;

impl fmt::Display for NoUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no usable upstream peer (all down, draining or already tried)")
    }
}

impl std::error::Error for NoUpstream {}
