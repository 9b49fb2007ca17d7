//! # stator-core — the forwarding decision, sans I/O
//!
//! Layer: above `stator-wire`, `stator-hash` and `stator-abi`; below every data plane. This crate
//! holds the one description of *what* Stator does with a packet — `docs/forwarding.md` — as
//! plain Rust over plain data:
//!
//! - [`Snapshot`]: an immutable, complete configuration (node parameters, VIPs with their Maglev
//!   tables, reals). The controller builds one per commit; every data plane switches to it in one
//!   step (generation flip in BPF maps, `ArcSwap` in user space). A packet sees exactly one.
//! - The forwarder (`process(now, …, frame) -> Verdict`): VIP match, connection table, SYN-flood
//!   guard, Maglev, encapsulation, counters. Time, the CPU index and the FIB are inputs.
//!
//! Contract: bit-for-bit the behaviour of `bpf/stator_fwd.bpf.c` (the differential test proves
//! it); never panics on any frame; no syscalls, no clock, no threads, no `unsafe`.
#![forbid(unsafe_code)]

pub mod builder;
pub mod snapshot;

pub use builder::{BackendSpec, SnapshotBuilder};
pub use snapshot::{
    NodeParams, Proto, Real, RealId, RealState, Snapshot, Vip, VipFlags, VipId, VipKey,
};
