//! One test binary for the schedulers: golden sequences and properties: each module was a test
//! binary of its own, and each linked the whole crate and its dependencies again (issue 26). Each
//! module keeps its own documentation; its tests run in parallel with those of the others, so each
//! keeps its own names, directories and ports.

mod sched_golden;
mod sched_properties;
