//! # stator-steer — client steering: client → worker affinity decided in the kernel
//!
//! **Layer.** An I/O adapter of the proxy tier, beside `stator-proxy`, which calls it for
//! `steering = "source"`. A proxy listener runs N workers, each with its own `SO_REUSEPORT`
//! socket; left alone, the kernel spreads connections over them by a hash of the 4-tuple, so
//! one client's connections land on different workers and each worker's session table sees
//! only some of them. Zhang et al. (2014) patched the kernel to wake the process chosen by a
//! consistent hash of the client's address instead. This crate does the same with today's
//! kernel API and no patch: an `SK_REUSEPORT` program (`bpf/stator_reuseport.bpf.c`) with a
//! `REUSEPORT_SOCKARRAY` picks the worker from a Maglev table over worker ids, keyed by the
//! Toeplitz (RSS) hash of the client's address. The method, the table, the fallback and the
//! migration of a closing worker's requests are in `docs/steering.md`.
//!
//! **What it provides.**
//! - [`SteeringTable`]: the decision in Rust (pure): the hash of a client, its slot, its worker,
//!   and what the program picks when some workers have no socket. Tests and operators use it to
//!   predict the kernel's choice; it is the same function as the C program, bit for bit.
//! - [`ReuseportSteering`]: loads the program (aya 0.14, the first aya that loads `sk_reuseport`
//!   programs), writes its table and configuration, puts worker sockets into the socket array,
//!   attaches to a group, rebuilds the table over the live workers ([`ReuseportSteering::set_workers`]:
//!   only the slots that change are written), and reads the per-CPU counters.
//! - [`ReceiveSteering`]: `steering = "cpu"`'s receive side (`bpf/stator_rss.bpf.c`): an XDP
//!   program that sends each client's packets to the CPU of the worker its slot names, through
//!   a `CPUMAP` — the NIC's source-address RSS in software (docs/steering.md §8); its
//!   [`ReceiveSteering::listener_options`] load each listener's program with the same table.
//! - [`RssKey`], [`HashFields`]: the Toeplitz key (random per load by default, or Microsoft's
//!   verification key, or any 40 bytes) and the hashed fields (address, or address and port).
//!
//! **Contract.**
//! - For a client `c` whose own slot's worker has a socket in the group, the kernel picks that
//!   worker's socket — for every TCP connection and every UDP datagram, IPv4 and IPv6 — exactly
//!   as `table().pick(c, …)` predicts; a worker without a socket is skipped for the next
//!   `STATOR_RP_PROBES` slots, then the kernel's own hash decides; every decision is counted.
//! - The first table is Maglev's over all workers; each later change of the live workers moves
//!   only the slots of workers that left or to workers that joined, and keeps every live
//!   worker's share within one slot of the others'.
//! - Bad options are rejected before anything is loaded, with the option named.
//!
//! **What it must never do.** No `unsafe` (aya wraps every kernel interface this needs). Never
//! make a decision the program does not make (the model mirrors the program; it does not
//! replace it). Never log per connection: the program counts, user space reads counters. Never
//! touch a sysctl of the host: migration of pending requests needs none (docs/steering.md).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod key;
mod loader;
mod rebalance;
mod receive;
mod table;

pub use error::{Result, SteerError};
pub use key::{HashFields, RssKey};
pub use loader::{
    OBJECT, PROGRAM_NAME, ProgramStats, ReuseportSteering, SteerCounters, SteeringOptions,
    WorkersChange,
};
pub use receive::{
    DEFAULT_QUEUE_SIZE, RSS_OBJECT, RSS_PROGRAM_NAME, ReceiveOptions, ReceiveSteering,
    RssAttachMode, RssCounters, Transport,
};
pub use stator_abi::{
    RpCounter, RssCounter, STATOR_RP_MAX_TABLE_SIZE, STATOR_RP_MAX_WORKERS, STATOR_RP_PROBES,
};
pub use table::{Pick, SteeringTable, default_table_size};
