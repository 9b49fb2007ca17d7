//! # stator-sched: the proxy tier's upstream schedulers
//!
//! **Layer.** Between the configuration (a pool's peers and weights) and the proxy's workers
//! (`stator-proxy`), which ask, for every request or connection, "which peer now?". This crate
//! answers; it never opens a socket, reads a clock, spawns a thread or draws from a global RNG.
//! It depends on `stator-hash` (Maglev tables, SipHash) and nothing else of Stator's.
//!
//! **Shape.** Every scheduler implements [`Schedule`] and comes in two parts:
//! - an immutable per-pool structure built once per configuration ([`Vnswrr`], [`Swrr`],
//!   [`LeastConn`], [`P2c`], [`SourceHash`], or the [`Scheduler`] enum over them): the peers
//!   with their stable ids and weights and whatever is precomputed (VNSWRR's ring, P2C's alias
//!   table, the source-hash Maglev table). It is `Send + Sync` and shared by all workers behind
//!   the `Arc` the proxy swaps on reload (`ArcSwap<Scheduler>`); picks only read it.
//! - cheap per-worker mutable state ([`Schedule::State`], [`PickerState`]): a cursor, SWRR
//!   current weights, an RNG seeded by the caller. The worker owns it; nothing is shared or
//!   locked. [`Picker`] bundles a worker's `Arc<Scheduler>` with its state and renews the state
//!   when a reload swaps the scheduler.
//!
//! Per request the caller supplies a [`Request`]: a [`PeerView`] (which peers are usable now —
//! not down, not draining — and their active connections), the peers already [`Tried`] for this
//! request (a fixed inline set), and a client key for source hashing ([`client_key`]). A pick
//! returns a peer index into [`Schedule::peers`], or [`NoUpstream`] when no peer is usable and
//! untried. A pick never allocates (a test counts allocations) and never panics.
//!
//! **The algorithms** (docs/sched.md walks through each, pick by pick):
//! - [`Vnswrr`] — Tengine's virtual-node SWRR: nginx's SWRR order precomputed into a ring of
//!   TW/gcd nodes, a random start per worker, O(1) picks that skip down and tried peers. The
//!   ring is built whole at construction and shared; Tengine's lazy batch build survives as each
//!   worker's visible window (the module's documentation says why). The default.
//! - [`Swrr`] — nginx's smooth weighted round-robin, O(N) per pick: the reference VNSWRR is
//!   tested against, and the rival in `stator bench sched` and the weight-change simulation.
//! - [`LeastConn`] — fewest active connections per weight, SWRR among ties (nginx's least_conn).
//! - [`P2c`] — power of two choices over weighted random draws.
//! - [`SourceHash`] — a Maglev table keyed by the client, for stickiness without session state.
//!
//! **Down, draining and tried peers** stay in every structure (rings and tables are built from
//! the configuration, not from health); picks skip them. So a health change costs nothing but a
//! bit flip in the caller's view, and a peer that comes back is picked again at once.
//!
//! **What it must never do.** No I/O, no clock (where time matters, it is a parameter), no
//! threads, no tokio, no libc, no `unsafe`, no global state; no allocation and no panic in a
//! pick; no decision that depends on `std`'s randomly seeded hashers.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod burst;
mod error;
mod least_conn;
mod p2c;
mod peer;
mod rng;
mod scheduler;
mod source_hash;
mod swrr;
mod vnswrr;

pub use burst::{BurstFigures, BurstParams, BurstReport, steady_share, weight_change_burst};
pub use error::{NoUpstream, SchedError};
pub use least_conn::{LeastConn, LeastConnState};
pub use p2c::{P2c, P2cState};
pub use peer::{
    AllUsable, AtomicPeerSet, ConnCount, MAX_PEERS, Peer, PeerSet, PeerView, Request, Tried,
    WithConns,
};
pub use rng::Rng;
pub use scheduler::{Algorithm, Picker, PickerState, Scheduler};
pub use source_hash::{CLIENT_KEY_SIPHASH_KEY, SourceHash, SourceHashState, client_key};
pub use swrr::{Swrr, SwrrState, swrr_sequence};
pub use vnswrr::{MAX_VIRTUAL_NODES, Vnswrr, VnswrrState, vnswrr_ring_len};

/// A scheduler: an immutable per-pool structure that picks peers for requests, with the help of
/// a per-worker mutable [`Schedule::State`].
pub trait Schedule: Send + Sync {
    /// One worker's mutable state (cursor, current weights, RNG); the worker owns it.
    type State: Send;

    /// The pool's peers; picks return indices into this slice.
    fn peers(&self) -> &[Peer];

    /// Fresh state for one worker. `seed` drives everything random the worker does (VNSWRR's
    /// start, P2C's draws); give each worker a different one. Allocates (SWRR's current
    /// weights), so call it when a worker adopts a scheduler, not per request.
    fn new_state(&self, seed: u64) -> Self::State;

    /// Picks a peer for `req`: the index of a usable peer not in `req.tried`, or [`NoUpstream`].
    /// Never allocates, never panics.
    fn pick<V: PeerView + ?Sized>(
        &self,
        state: &mut Self::State,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream>;
}
