//! One test binary for the hashes: the flow hash and Toeplitz against their C twins, Maglev golden
//! tables and properties: each module was a test binary of its own, and each linked the whole crate
//! and its dependencies again (issue 26). Each module keeps its own documentation; its tests run in
//! parallel with those of the others, so each keeps its own names, directories and ports.

#[path = "../common/mod.rs"]
mod common;

mod flow_hash_c;
mod flow_hash_vectors;
mod maglev_golden;
mod maglev_properties;
mod toeplitz_c;
