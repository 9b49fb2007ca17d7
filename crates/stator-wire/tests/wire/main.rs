//! One test binary for packet parsing and writing: checksums, flows, robustness, round trips: each
//! module was a test binary of its own, and each linked the whole crate and its dependencies again
//! (issue 26). Each module keeps its own documentation; its tests run in parallel with those of the
//! others, so each keeps its own names, directories and ports.

#[path = "../common/mod.rs"]
mod common;

mod checksum;
mod flow;
mod robustness;
mod roundtrip;
