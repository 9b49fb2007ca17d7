//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! One test binary for the proxy tier in namespaces: kernel client affinity, UDP steering: each
//! module was a test binary of its own, and each linked the whole crate and its dependencies again
//! (issue 26). Each module keeps its own documentation; its tests run in parallel with those of the
//! others, so each keeps its own names, directories and ports.

#[path = "../common/mod.rs"]
mod common;
#[path = "../udp_common/mod.rs"]
mod udp_common;

mod proxy_affinity_netns;
mod proxy_udp_steering;
