//! # stator-bench: the benchmarks behind `stator bench`
//!
//! **Layer.** Harnesses that measure Stator's parts and print what they measured. The binary
//! parses `stator bench <name>` and hands the arguments to the module of that name; everything
//! a benchmark does (set-up, load, timing, report) lives here, one module per benchmark:
//! [`sched`] and [`proxy`] today, and `udp`, `afxdp` next to them as they are written. (The older
//! `hashing`, `xdp` and `veth` benchmarks still live in the binary and move here when touched.)
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
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod pin;
pub mod proxy;
mod rivals;
pub mod sched;
pub mod udp;

pub use error::BenchError;
