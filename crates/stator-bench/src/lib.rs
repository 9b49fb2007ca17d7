//! # stator-bench: the benchmarks behind `stator bench`
//!
//! **Layer.** Harnesses that measure Stator's parts and print what they measured. The binary
//! parses `stator bench <name>` and hands the arguments to the module of that name; everything
//! a benchmark does (set-up, load, timing, report) lives here, one module per benchmark:
//! [`hashing`] (consistent hashing, the paper's §5.3), [`xdp`] (the XDP forwarder under
//! BPF_PROG_TEST_RUN), [`veth`] (packets per second end to end on veth), [`afxdp`] (the
//! AF_XDP forwarder against the kernel stack, with its `AF_PACKET` rival), [`proxy`], [`tcp`]
//! (the TCP listener against HAProxy and nginx `stream`), [`sched`] and [`udp`]. The BPF
//! programs they load beside the forwarder — baselines, the kernel-repeat wrapper, the veth
//! generator and sink — are stator-xdp's objects, driven from [`programs`] and
//! [`veth_programs`] through `stator_xdp::UnpinnedObject`; the system calls they make
//! (pinning, clocks, batched datagrams, raw sockets) are stator-sys's. No
//! production crate carries a benchmark or a rival.
//!
//! **Contract.** Every benchmark starts its own baseline or rival in the same run — SWRR beside
//! VNSWRR, nginx and HAProxy beside the proxy, plain forwarding beside the forwarder — and
//! prints figures and the ratios between them, each with the goal it is measured against. A
//! benchmark never passes or fails on a timing: a missed goal is reported, never an error, and
//! its exit status says only whether it could run. Every load loop is bounded in count and in
//! time. Each has a `--quick` form for smoke tests and `--json` for machines; a run names the
//! machine-dependent facts (CPU it was pinned to, repetitions, picks) next to its figures.
//!
//! **What it must never do.** Assert on a timing; run unbounded; leave anything behind (a
//! process, a namespace, a pin, a file outside the paths it was given).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod afxdp;
pub mod decap;
pub mod error;
pub mod hashing;
mod load;
pub mod pin;
pub mod programs;
pub mod proxy;
mod report;
mod rivals;
pub mod sched;
pub mod tcp;
pub mod udp;
pub mod veth;
pub mod veth_programs;
pub mod xdp;

pub use error::BenchError;
