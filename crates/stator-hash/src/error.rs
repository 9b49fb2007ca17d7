//! The crate's one error type.

/// Everything that can go wrong building a lookup table: a Maglev table, or one of the Karger /
/// rendezvous comparison tables, which share Maglev's rules for backend sets.
///
/// Hash functions never fail; only table construction and table comparison do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MaglevError {
    /// Maglev needs a prime table size so that every skip is coprime to it.
    #[error("table size {size} is not prime")]
    SizeNotPrime {
        /// The rejected size.
        size: u32,
    },
    /// The table would be unreasonably large (it is built in memory and copied into a BPF map).
    #[error("table size {size} exceeds the maximum of {max}")]
    SizeTooLarge {
        /// The rejected size.
        size: u32,
        /// The largest accepted size, [`crate::MaglevTable::MAX_SIZE`].
        max: u32,
    },
    /// A backend's stable name is empty.
    #[error("backend #{index} has an empty name")]
    EmptyName {
        /// Position of the backend in the slice given to the builder.
        index: usize,
    },
    /// Two backends share a name, so they would share a permutation.
    #[error("backend name {name:?} is used by more than one backend")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// Two backends share an id, so the table could not tell them apart.
    #[error("backend id {id} is used by more than one backend")]
    DuplicateId {
        /// The repeated id.
        id: u32,
    },
    /// The id `u32::MAX` marks empty slots and cannot name a backend.
    #[error("backend id {id} is reserved to mark empty slots")]
    ReservedId {
        /// The rejected id.
        id: u32,
    },
    /// An explicit permutation starts outside the table.
    #[error("permutation of backend id {id}: offset {offset} is not below the table size {size}")]
    OffsetOutOfRange {
        /// Backend id of the permutation.
        id: u32,
        /// The rejected offset.
        offset: u32,
        /// The table size.
        size: u32,
    },
    /// An explicit permutation's skip is 0 or not below the table size, so it would not visit
    /// every slot.
    #[error("permutation of backend id {id}: skip {skip} is not in 1..{size}")]
    SkipOutOfRange {
        /// Backend id of the permutation.
        id: u32,
        /// The rejected skip.
        skip: u32,
        /// The table size.
        size: u32,
    },
    /// Two tables of different sizes cannot be compared slot by slot.
    #[error("cannot compare a table of size {old} with one of size {new}")]
    SizeMismatch {
        /// Size of the old table.
        old: u32,
        /// Size of the new table.
        new: u32,
    },
    /// A Karger ring needs at least one point per backend.
    #[error("a Karger ring needs at least one virtual node per backend")]
    ZeroViews,
    /// A Karger ring would hold too many points (backends × views).
    #[error("a ring of {points} points exceeds the maximum of {max}")]
    TooManyPoints {
        /// Backends × views requested.
        points: u64,
        /// The largest accepted number of points.
        max: u64,
    },
    /// The comparison methods only implement equal weights (as the paper evaluates them).
    #[error("{method} supports only equal non-zero weights (or zero to exclude a backend)")]
    UnequalWeights {
        /// "karger" or "rendezvous".
        method: &'static str,
    },
}
