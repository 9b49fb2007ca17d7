//! # stator-core — the forwarding decision, sans I/O
//!
//! Layer: above `stator-wire`, `stator-hash` and `stator-abi`; below every data plane. This crate
//! holds the one description of *what* Stator does with a packet — `docs/forwarding.md` — as
//! plain Rust over plain data. The XDP program (`bpf/stator_fwd.bpf.c`) is the other
//! implementation of the same page; the differential test holds the two to the same verdict,
//! backend, output bytes and counters for every frame.
//!
//! ## The shape (quinn-proto's)
//! Everything the decision depends on is an argument, and everything it changes is a value the
//! caller owns:
//!
//! ```text
//!  Snapshot ──compile──► CompiledSnapshot ─┐       (once per commit; ArcSwap in a data plane)
//!                                          ▼
//!  frame: &mut impl PacketBuf ──► Forwarder::process(snap, now_ns, cpu, ingress, fib, frame)
//!  fib:   &impl NextHops      ──►      │   per-CPU state: ConnTable, FloodGuard, Counters
//!                                      ▼
//!                                   Verdict { action, vip, real, selection, flow, hash }
//! ```
//!
//! - [`Snapshot`] is the configuration as the controller builds it (ids, Maglev tables,
//!   reals). [`ValidSnapshot`] is one that passed [`Snapshot::validate`] — the one definition
//!   of the rules; every data plane's commit takes it instead of checking again.
//!   [`CompiledSnapshot`] is the same content in the form packets want: the VIP-address flags
//!   (`stator_vtab` in XDP) derived once, hash maps keyed by integers, reals in a dense array.
//!   It is built once per commit, never per packet, and is immutable, so a data plane shares
//!   it between threads behind an `ArcSwap`.
//! - [`Forwarder`] owns the mutable state, explicitly per CPU index as the BPF per-CPU maps are:
//!   connection tables ([`ConnTable`], bounded, LRU; one per CPU or one shared, [`CtMode`]),
//!   the SYN-flood guard windows ([`FloodGuard`]) and the [`Counters`]. The AF_XDP data plane
//!   gives each packet thread its own single-CPU `Forwarder` (the paper's §3.1: "one
//!   connection table per packet thread to avoid access contention"); the differential test
//!   gives it the CPU the BPF program ran on.
//! - Time (`now_ns`), the CPU index, the ingress interface and the FIB ([`NextHops`], which also
//!   says which interfaces are redirect targets, the devmap) are inputs. The frame is a
//!   [`PacketBuf`]: bytes with headroom that can grow at the head, like
//!   `bpf_xdp_adjust_head`, so a UMEM frame is rewritten in place ([`SlicePacketBuf`]).
//! - [`Verdict`] is the XDP action plus what the packet tracer shows: the matched VIP, the
//!   chosen real, how it was chosen ([`Selection`]: conntrack hit / miss / expired / reselect,
//!   SYN, no-CT, whether the insert happened or the guard held it, the Maglev slot), the flow
//!   and its hash. [`Forwarder::explain`] answers the same question for a flow without
//!   touching any state or counter (the admin API's `GET /v1/trace`).
//!
//! ## Maglev §4.2–4.4
//! The same decision covers the paper's operational additions (docs/forwarding.md §3.1,
//! §9–§11): VIPs matched by prefix group and longest suffix after the exact match; fragments
//! sent once to their 3-tuple owner among the peers (GRE recursion control), the owner's
//! [`FragTable`] recording first-fragment decisions for the others, and [`Action::Hold`] for
//! those that come first — the data plane keeps them in a [`HoldQueue`] and runs them again once
//! the record exists; a failover redirect when a VIP has no backend; redirects received and
//! decided once; and the tracer's reports ([`Forwarder::take_trace`], a [`TraceEvent`] as the
//! XDP program writes it), rate-limited per node.
//!
//! ## Example
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use stator_core::{
//!     Action, BackendSpec, CompiledSnapshot, Forwarder, ForwarderConfig, NextHop, NodeParams,
//!     Proto, SnapshotBuilder, StaticFib, VecPacketBuf,
//! };
//! # use stator_testkit::{Packet, tcp_flags};
//!
//! let vip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10));
//! let backend = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1));
//! let src_v4 = Some(Ipv4Addr::new(10, 9, 9, 9));
//! let node = NodeParams { src_v4, ..NodeParams::default() };
//! let snapshot = SnapshotBuilder::new(node)
//!     .vip(vip, 80, Proto::Tcp, 13, vec![BackendSpec::new(backend)])
//!     .build()?;
//! let snap = CompiledSnapshot::new(&snapshot.validated()?); // once per commit, shared
//! let (src_mac, dst_mac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
//! let hop = NextHop { ifindex: 2, src_mac, dst_mac, mtu: 1500 };
//! let fib = StaticFib::new().default_route(backend, Ok(hop));
//! let mut fwd = Forwarder::new(ForwarderConfig { cpus: 1, ..ForwarderConfig::default() });
//! # let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
//! # let frame_bytes = Packet::tcp(client, 40000, vip, 80, tcp_flags::SYN).frame();
//! let mut frame = VecPacketBuf::with_xdp_headroom(&frame_bytes);
//! let (now_ns, cpu, ingress) = (1_000_000_000, 0, 2);
//! let verdict = fwd.process(&snap, now_ns, cpu, ingress, &fib, &mut frame);
//! assert_eq!(verdict.action, Action::Tx); // GRE-encapsulated to 10.1.0.1, out of interface 2
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The contract
//! - Bit for bit `docs/forwarding.md`: the same action, real, output bytes and counter deltas
//!   as the XDP program. Where the page was ambiguous, the choice made here is written on the
//!   page as an "open question" line, and nowhere else.
//! - Every packet ends in exactly one action counter (`act_*`); every drop also in exactly one
//!   drop reason. Per-VIP traffic is counted on a VIP match, per-real traffic on a forward.
//! - Never panics, whatever the bytes, the snapshot (once compiled), the clock or the FIB say.
//!   The frame is only modified when the verdict says so (TX, REDIRECT, or the `tx_port` drop
//!   of an already rewritten frame); a pass or any other drop leaves it byte-identical.
//! - The hot path does not allocate, except when a connection table or a per-id counter
//!   array grows to a size it has not had before (bounded by their capacities).
//!
//! ## What it must never do
//! No syscalls, no clock, no threads, no randomness (the connection tables' hash seed is an
//! argument), no `unsafe`, no tokio, aya or libc. No logging per packet: count.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod builder;
mod compiled;
mod conntrack;
mod counters;
mod encap;
mod fib;
mod flow;
mod forwarder;
mod frag;
mod guard;
mod hold;
mod icmp;
mod packet;
mod parse;
mod pipeline;
mod select;
pub mod snapshot;
mod tracer;
pub use tracer::seal as trace_seal;
mod validate;
mod verdict;

pub use builder::{BackendSpec, SnapshotBuilder, peer_set};
pub use compiled::CompiledSnapshot;
pub use conntrack::{ConnTable, CtMode};
pub use counters::Counters;
pub use fib::{FibError, FibQuery, NextHop, NextHops, StaticFib};
pub use flow::Flow;
pub use forwarder::{Forwarder, ForwarderConfig, table_hash};
pub use frag::FragTable;
pub use guard::FloodGuard;
pub use hold::{Held, HoldFrame, HoldLimits, HoldQueue, HoldStats};
pub use packet::{NoHeadroom, PacketBuf, SlicePacketBuf, VecPacketBuf, XDP_HEADROOM};
pub use snapshot::{
    ClassId, NodeParams, Peers, Prefix, Proto, Real, RealId, RealState, Snapshot, Vip, VipFlags,
    VipGroup, VipId, VipKey,
};
pub use validate::{SnapshotError, ValidSnapshot};
pub use verdict::{Action, Cause, Insert, Selection, Trace, TraceOutcome, Verdict, VipMatch};

/// The ABI types the forwarder's API speaks in, re-exported so callers need not depend on
/// `stator-abi` for them.
pub use stator_abi::{
    Beat, Counter, CtEntry, DropReason, Encap, Family, FlowKey, FragEntry, FragKey, TraceCause,
    TraceEvent, TraceKind, TraceMark, Traffic,
};
