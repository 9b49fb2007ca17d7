//! One test binary for the configuration: parsing, validation with field paths, the documented
//! examples: each module was a test binary of its own, and each linked the whole crate and its
//! dependencies again (issue 26). Each module keeps its own documentation; its tests run in
//! parallel with those of the others, so each keeps its own names, directories and ports.

mod bad_configs;
mod docs;
mod large_inputs;
mod no_panic;
mod semantics;
