//! # stator-xdp — Stator's default data plane, in the kernel
//!
//! **Layer.** An I/O adapter between the control plane and the XDP forwarder in `bpf/`. The
//! forwarding decision itself (`docs/forwarding.md`) is C, in `bpf/stator_fwd.bpf.c` and its
//! headers; `stator-core` holds the same decision in Rust, and the two are held equal by a
//! differential test. This crate carries the compiled objects (build.rs runs clang), loads them
//! with aya, programs their maps from a [`stator_core::Snapshot`], attaches them to interfaces,
//! reads their counters, and runs `BPF_PROG_TEST_RUN` for tests, the self-test and benchmarks.
//! [`XdpPlane`] is the forwarder as the controller drives it (a `stator_plane::DataPlane`).
//!
//! **Contract.**
//! - [`Forwarder::commit`] is atomic for packets: a snapshot is written completely into the
//!   inactive half of double-buffered maps, then one 32-bit store flips
//!   `stator_ctl.active_gen`, then an RCU grace period (`membarrier(MEMBARRIER_CMD_GLOBAL)`)
//!   passes before the old half may be reused. Every packet reads the generation once and sees
//!   exactly one snapshot. A snapshot that breaks a compiled limit is rejected before anything
//!   is written; a failed commit leaves the active generation untouched.
//! - Everything is pinned under one directory (default `/sys/fs/bpf/stator`): maps by name,
//!   attachments as `link_<ifname>` bpf_links. A restart reuses the maps (connection table,
//!   counters, active generation) after checking their layout, swaps the new program into the
//!   existing links atomically, and can read the active snapshot back
//!   ([`Forwarder::active_snapshot`]) so real ids — and so connection-table entries — stay
//!   meaningful.
//! - Errors are one enum, [`XdpError`], whose messages name what to do: not root, interface
//!   missing, XDP unsupported in a mode, verifier rejection (with the log tail), pinned maps of
//!   an incompatible layout, invalid snapshots.
//!
//! **What it must never do.** Never make a forwarding decision of its own (that is the C
//! program's and `stator-core`'s job). Never write the active generation's half of a map.
//! Never leave an interface without a program during an upgrade. Never use `unsafe` outside
//! `sys.rs` and `testrun.rs` (the kernel interfaces aya does not wrap: BPF arrays seen as
//! memory, membarrier, bpf_link detach/info, rtnetlink, BPF_PROG_TEST_RUN); the crate denies
//! it everywhere else. Never log per packet:
//! the program counts, user space reads counters.
#![deny(unsafe_code)]

mod attach;
mod bpffs;
mod clock;
mod cluster;
mod ct4;
pub mod dataplane;
mod decap;
mod error;
mod forwarder;
mod holder;
mod maps;
pub mod objects;
mod options;
mod pass;
mod program;
mod rings;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
pub mod testrun;
mod unpinned;
mod xsk;

pub use attach::{
    AttachStatus, Attachment, Status, XdpMode, attached_interfaces, detach, detach_all, purge,
    status,
};
pub use bpffs::{BPFFS_ROOT, bpffs_mount_point, ensure_bpffs};
pub use clock::{ClockProbe, ClockSample, ProgramClock};
pub use ct4::{BUCKET_BYTES as CT4_BUCKET_BYTES, Occupancy as Ct4Occupancy, buckets_per_cpu};
pub use dataplane::{XdpPlane, XdpReader};
pub use decap::{
    DECAP_MAPS, DECAP_PROGRAM_NAME, DEFAULT_DECAP_PIN_PATH, Decap, DecapConfig, DecapCounters,
    DecapMaps, DecapOptions, DecapStatus, SecondChance, decap_purge, decap_status,
};
pub use error::{Result, XdpError};
pub use forwarder::{CommitReport, Forwarder, PROGRAM_NAME, SelfTest, TAIL_PROGRAMS, verify};
pub use holder::{Holder, HolderStats};
pub use maps::{BeatWriter, Counters, FORWARDER_MAPS, Maps};
pub use options::{
    AttachMode, ConntrackMode, DEFAULT_FIB_CACHE, DEFAULT_PIN_PATH, MAX_SLOTS_PER_GEN, XdpOptions,
};
pub use pass::attach_pass;
pub use rings::{HoldRing, TraceRing};
pub use stator_sys::clock::monotonic_coarse_ns;
pub use unpinned::UnpinnedObject;
pub use xsk::{FIBQ_PROGRAM_NAME, XSK_CT_ENTRIES, XSK_PROGRAM_NAME};

/// True when the process runs as root (what loading and attaching need).
pub fn is_root() -> bool {
    sys::is_root()
}

/// Index of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Option<u32> {
    sys::if_nametoindex(name)
}

/// Name of interface `index` in the calling thread's network namespace.
pub fn ifname(index: u32) -> Option<String> {
    sys::if_indextoname(index)
}
