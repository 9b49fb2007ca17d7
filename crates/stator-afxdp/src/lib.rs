//! # stator-afxdp — Maglev's own forwarder, on AF_XDP
//!
//! **Layer.** The second data plane: the design the Maglev paper itself describes (§3.1–3.2) —
//! a user-space forwarder with a shared packet pool, ring pointers, a steering module, packet
//! threads with their own connection tables, and a muxing module — built on AF_XDP and running
//! `stator-core`, the same forwarding decision the XDP program is proven equal to. Above it
//! sits the controller, which drives it as a `stator_plane::DataPlane` ([`AfxdpPlane`]); below it the kernel's AF_XDP sockets
//! and a small XDP program (`bpf/stator_xsk.bpf.c`, loaded through `stator-xdp`).
//!
//! ```text
//!  NIC queue q ─► stator_xsk (XDP: the forwarder's parse + VIP match) ─► XSKMAP ─► socket q
//!                     │ not for a VIP: XDP_PASS (the node stays reachable)
//!  ┌─────────────────────────────────── UMEM: the packet pool ─────────────────────────────┐
//!  │ fill ring ─► kernel ─► RX ring ─► steering ─► queue i ─► packet thread i (stator-core, │
//!  │  ▲                        (I/O thread)            in place, own connection table)     │
//!  │  └── free list ◄── completion ring ◄── kernel ◄── TX ring ◄── muxing ◄── queue i ◄─┘   │
//!  └────────────────────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! - [`umem`]: the pool, [`Frame`] ownership tokens and the per-frame ledger.
//! - [`ring`]: the four rings as single-owner types; [`socket`]: binding, statistics.
//! - [`spsc`]: the queues between the I/O thread and the packet threads.
//! - [`steer`]: the steering hash; [`fib`]: next hops from the kernel (`stator_fibq`).
//! - `io` (steering + muxing), `worker` (packet threads), `rtc` (run-to-completion threads:
//!   `dataplane.afxdp.threading`), [`runtime`] (start, publish, stop),
//!   [`forwarder`] (kernel half and runtime committed and read together), [`dataplane`] (that
//!   forwarder as the controller's `DataPlane`, and its `PlaneReader`).
//!
//! **Contract.** Frames are never copied in user space: only descriptors move. Each ring side
//! and each queue half is owned by exactly one thread, by type. Every packet is decided under
//! exactly one snapshot and counted exactly once, in the same counters as the XDP plane (kernel
//! half + packet threads). need_wakeup is honoured, TX completions are reaped and frames are
//! recycled to the fill rings every turn; a batch is flushed when full or after
//! `flush_timeout` (50 µs). Overload never blocks: it drops in the kernel, where
//! `XDP_STATISTICS` counts it. Packets longer than a frame holds are dropped by the XDP program
//! and counted (`xsk_frame`).
//!
//! **What it must never do.** Make a forwarding decision of its own (that is `stator-core`);
//! touch a chunk it holds no [`Frame`] for; block a packet thread on the I/O thread or the
//! reverse; log per packet. `unsafe` is denied everywhere but in four modules, each block with
//! its `// SAFETY:`: `sys` (the AF_XDP socket's system calls; memory maps are stator-sys's),
//! `ring` (the shared indices and slots), `umem` (the pool's bytes) and `spsc` (the queues'
//! slots) — and, compiled for unit tests only, `sim` (the heap rings that stand in for the
//! kernel's). Safe code cannot break the UMEM's invariants: see [`umem`].
#![deny(missing_debug_implementations)]
#![deny(unsafe_code)]

pub mod config;
pub mod dataplane;
mod error;
pub mod fib;
pub mod forwarder;
mod hold;
mod io;
#[allow(unsafe_code)]
pub mod ring;
mod rtc;
pub mod runtime;
#[cfg(test)]
#[allow(unsafe_code)]
mod sim;
pub mod socket;
#[allow(unsafe_code)]
pub mod spsc;
pub mod steer;
#[allow(unsafe_code)]
mod sys;
pub mod trace;
#[allow(unsafe_code)]
pub mod umem;
mod worker;

pub use config::{AfxdpConfig, Threading};
pub use dataplane::{AfxdpPlane, AfxdpReader};
pub use error::AfxdpError;
pub use forwarder::{AfxdpCommit, AfxdpForwarder, ForwarderReader, PlaneStats};
pub use io::IoStats;
pub use runtime::Shard;
pub use socket::{BindMode, RingSizes, XskSocket, XskStats};
pub use trace::{TraceSink, TraceTap};
pub use umem::{Frame, FrameState, Umem, UmemConfig};
pub use worker::WorkerStats;

/// The clock the packet threads decide with (`CLOCK_MONOTONIC_COARSE`, what the XDP program's
/// `bpf_ktime_get_coarse_ns` reads), in nanoseconds: a reader ages connection-table entries
/// with it.
pub fn clock_ns() -> u64 {
    stator_sys::clock::monotonic_coarse_ns()
}
