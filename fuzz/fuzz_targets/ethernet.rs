//! Fuzz target: `ethernet` over arbitrary bytes, with the oracles of the property tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../crates/stator-wire/tests/common/exercise.rs"]
mod exercise;

fuzz_target!(|data: &[u8]| exercise::ethernet(data));
