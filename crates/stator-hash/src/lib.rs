//! # stator-hash: the hash functions and lookup tables of Stator
//!
//! **Layer.** This crate sits between `stator-wire`, which turns bytes into packet fields, and
//! `stator-core` / the control plane, which decide where a packet goes. It knows nothing about
//! packets, sockets, maps or time: it maps *fields* to hashes and *backend sets* to lookup tables.
//! Everything here is a pure function of its arguments.
//!
//! **What it provides.**
//! - The flow hash ([`flow_hash_v4`], [`flow_hash_v6`], [`flow_hash3_v4`], [`flow_hash3_v6`]):
//!   Linux's `jhash2` over the 5-tuple (3-tuple for fragments). The XDP program computes the same
//!   function from `bpf/include/flow_hash.h`; the two are held bit-identical by shared test vectors
//!   (`testdata/flow_hash_vectors.txt`) and a differential test that compiles the header.
//! - The Toeplitz (RSS) hash ([`Toeplitz`]), so Stator can predict which receive queue a NIC picks.
//! - Maglev lookup tables ([`MaglevTable`]): the paper's Pseudocode 1 with weighted turns, built
//!   from backend *names* through two fixed SipHash-2-4 keys, plus table deltas for incremental
//!   programming of BPF maps.
//! - The Karger ring ([`KargerRing`]) and rendezvous hashing ([`Rendezvous`]), only to reproduce
//!   the paper's §5.3 comparison.
//! - Small helpers: [`is_prime`], [`next_prime`], [`siphash24`].
//!
//! **Contract.**
//! - A table is a function of (backend names, weights, ids, size) and nothing else: not the order
//!   the backends are given in, not the machine, not the Rust version. Every Stator node derives the
//!   same table from the same configuration, forever; that is what keeps a connection on its
//!   backend when ECMP moves it to another node. The hash definitions in `docs/hashing.md` are
//!   therefore part of Stator's wire format, and golden tables in `testdata/` fail loudly if they
//!   change.
//! - The flow hash is the one in `docs/hashing.md`, bit for bit, on every architecture.
//! - Lookups are O(1), allocation-free and never panic. Builds allocate O(M + N) and reject bad
//!   input with a [`MaglevError`] instead of panicking.
//!
//! **What it must never do.** No I/O, no clock, no threads, no randomness, no `unsafe`. Never use
//! `std::hash::Hasher`/`RandomState` for anything that reaches a table or a packet decision: their
//! output may change between Rust releases or processes. Never depend on tokio, aya or libc.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod flow;
mod karger;
mod maglev;
mod prime;
mod rendezvous;
mod siphash;
mod toeplitz;

pub use error::MaglevError;
pub use flow::{
    JHASH_INITVAL, STATOR_FLOW_HASH_SEED, flow_hash_v4, flow_hash_v6, flow_hash3_v4, flow_hash3_v6,
    jhash2,
};
pub use karger::KargerRing;
pub use maglev::{
    BackendSlots, MAGLEV_H1_KEY, MAGLEV_H2_KEY, MaglevBackend, MaglevPermutation, MaglevTable,
    SlotChange,
};
pub use prime::{is_prime, next_prime};
pub use rendezvous::Rendezvous;
pub use siphash::siphash24;
pub use toeplitz::{RSS_DEFAULT_KEY, Toeplitz};
