//! The crate's one error type.

use std::io;

/// What can go wrong building or running the AF_XDP plane. The data path never returns these:
/// it counts.
#[derive(Debug, thiserror::Error)]
pub enum AfxdpError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Options out of range.
    #[error("invalid AF_XDP options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: String,
    },
    /// The kernel lacks something the plane needs.
    #[error("not supported by this kernel: {what}")]
    Unsupported {
        /// What.
        what: String,
    },
    /// Loading, programming or attaching the redirect program failed.
    #[error("the AF_XDP redirect program: {0}")]
    Xdp(#[from] stator_xdp::XdpError),
    /// A snapshot the forwarder cannot compile.
    #[error("snapshot: {0}")]
    Snapshot(#[from] stator_core::SnapshotError),
    /// A packet thread or the I/O thread is gone or did not answer.
    #[error("{what}")]
    Thread {
        /// What happened.
        what: String,
    },
    /// A frame handed to a ring or pool it does not belong to (a bug in the caller; the frame
    /// is left where it was).
    #[error("a frame of {frame} handed to {pool}")]
    ForeignFrame {
        /// The frame's pool.
        frame: crate::umem::UmemId,
        /// The pool (or ring's pool) it was handed to.
        pool: crate::umem::UmemId,
    },
    /// A socket asked to share the UMEM of a first socket that was bound over another pool.
    #[error("a socket over {umem} cannot share the UMEM of a first socket bound over {first}")]
    ForeignUmem {
        /// The pool the new socket's rings would use.
        umem: crate::umem::UmemId,
        /// The pool the first socket registered with the kernel.
        first: crate::umem::UmemId,
    },
    /// A packet that would not lie inside its frame's chunk.
    #[error("a packet at offset {head} of {len} bytes does not fit a {frame_size}-byte frame")]
    FrameBounds {
        /// Its offset in the chunk.
        head: usize,
        /// Its length.
        len: usize,
        /// The chunk size.
        frame_size: u32,
    },
    /// A pool's frames asked for a second time (each chunk has exactly one frame).
    #[error("the frames of {pool} were already taken")]
    FramesTaken {
        /// The pool.
        pool: crate::umem::UmemId,
    },
    /// Not running as root.
    #[error("{what} needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF)")]
    NotRoot {
        /// What was attempted.
        what: String,
    },
}

impl AfxdpError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Self::InvalidOptions {
            reason: reason.into(),
        }
    }

    pub(crate) fn thread(what: impl Into<String>) -> Self {
        Self::Thread { what: what.into() }
    }
}
