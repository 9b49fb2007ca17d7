//! One test binary for the node without privileges: the admin API and its page, health checks,
//! listeners, monitoring examples, the reconciler: each module was a test binary of its own, and
//! each linked the whole crate and its dependencies again (issue 26). Each module keeps its own
//! documentation; its tests run in parallel with those of the others, so each keeps its own names,
//! directories and ports.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod api_ui;
mod health;
mod listeners_node;
mod monitoring_examples;
mod reconciler;
mod udp_listener_node;
