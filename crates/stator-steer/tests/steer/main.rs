//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! One test binary for the reuseport steering programs: each module was a test binary of its own,
//! and each linked the whole crate and its dependencies again (issue 26). Each module keeps its own
//! documentation; its tests run in parallel with those of the others, so each keeps its own names,
//! directories and ports.

#[path = "../common/mod.rs"]
mod common;

mod steer_affinity;
mod steer_cpu;
mod steer_errors;
mod steer_migrate;
mod steer_toeplitz_bpf;
mod steer_workers;
