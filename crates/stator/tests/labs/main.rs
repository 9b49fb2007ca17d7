//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! One test binary for whole labs: end to end, failures, Maglev §4, Prometheus, the quick start:
//! each module was a test binary of its own, and each linked the whole crate and its dependencies
//! again (issue 26). Each module keeps its own documentation; its tests run in parallel with those
//! of the others, so each keeps its own names, directories and ports.

#[path = "../common/mod.rs"]
mod common;

mod lab_e2e;
mod lab_failures;
mod lab_fragments_redirects;
mod lab_prometheus;
mod lab_second_chance;
mod lab_upgrade;
mod quickstart_netns;
