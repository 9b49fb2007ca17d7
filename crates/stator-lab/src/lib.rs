//! # stator-lab — a whole Maglev deployment on one machine
//!
//! Layer: test and demo infrastructure, above everything else. [`netns`] is a small, honest
//! wrapper over iproute2 and `setns(2)`: create network namespaces and veth pairs, run commands
//! and threads inside a namespace, and tear everything down again — by name prefix, so a lab
//! left behind by a crashed run is still found and removed (`down` is idempotent).
//!
//! Contract: every object this crate creates carries the caller's prefix in its name; nothing
//! outside that prefix is ever touched. Operations fail with the command line and its stderr.
#![deny(unsafe_code)]

pub mod netns;
