//! One test binary for BIRD's client, the example configurations and the rendered configuration:
//! each module was a test binary of its own, and each linked the whole crate and its dependencies
//! again (issue 26). Each module keeps its own documentation; its tests run in parallel with those
//! of the others, so each keeps its own names, directories and ports.

mod client;
mod examples;
mod render;
