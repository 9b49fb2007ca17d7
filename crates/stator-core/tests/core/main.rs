//! One test binary for the forwarding decision: golden cases, drops, ICMP, the connection table,
//! heartbeats, Maglev §4, properties: each module was a test binary of its own, and each linked the
//! whole crate and its dependencies again (issue 26). Each module keeps its own documentation; its
//! tests run in parallel with those of the others, so each keeps its own names, directories and
//! ports.

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod cases_drops;
mod cases_icmp;
mod conntrack;
mod heartbeat;
mod maglev_fragments_redirects;
mod props;
mod second_chance;
