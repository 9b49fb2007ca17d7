//! The XDP differential test's world, lab and generator (`crates/stator-xdp/tests/diff`),
//! compiled into the AF_XDP differential test as they are: one corpus for both.
#![allow(dead_code)]

#[path = "../../../stator-xdp/tests/diff/frames.rs"]
pub mod frames;
#[path = "../../../stator-xdp/tests/diff/lab.rs"]
pub mod lab;
#[path = "../../../stator-xdp/tests/diff/world.rs"]
pub mod world;
