//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! One test binary for the `stator` binary as root in namespaces: API access by user, benchmark
//! smoke runs, DSR, heartbeats, reloads, BGP, the CLI, the status page: each module was a test
//! binary of its own, and each linked the whole crate and its dependencies again (issue 26). Each
//! module keeps its own documentation; its tests run in parallel with those of the others, so each
//! keeps its own names, directories and ports.

#[path = "../cdp/mod.rs"]
mod cdp;
#[path = "../common/mod.rs"]
mod common;

mod api_access;
mod bench_afxdp_smoke;
mod bench_proxy_steering;
mod bench_udp_smoke;
mod bench_xdp_smoke;
mod dsr_netns;
mod heartbeat_netns;
mod reload_netns;
mod run_bgp;
mod run_cli;
mod status_page;
mod upgrade_steering;
