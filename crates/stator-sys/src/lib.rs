//! # stator-sys — the system calls Stator makes beyond `std`
//!
//! Layer: the bottom of the I/O side, beside `std`; no other Stator crate below it. It holds
//! what the node needs from the kernel that `std` does not offer, each behind a safe function
//! with a plain Rust signature:
//! - [`clock`]: the kernel's tick (the coarse clocks' resolution);
//! - [`creds`]: who is at the other end of a Unix socket — user, primary group and, with
//!   `SO_PEERGROUPS`, every supplementary group, as the kernel recorded them at `connect`
//!   (no race with the peer exiting or changing identity later);
//! - [`limits`]: the process's descriptor limit (`RLIMIT_NOFILE`) raised to its hard limit,
//!   and the descriptors open now;
//! - [`users`]: a group name to its id (the local group database), the effective ids;
//! - [`files`]: a file replaced atomically through a temporary file created exclusively in
//!   the target's directory (`O_EXCL | O_NOFOLLOW`, chosen mode and group): a user who can
//!   write to that directory cannot make the node write through a symbolic link.
//!
//! Contract: every `unsafe` block is here, each with its `SAFETY` comment; functions return
//! `io::Error`s from the kernel unchanged. It never logs, never allocates on a hot path and
//! knows nothing of Stator's configuration.

pub mod clock;
pub mod creds;
pub mod files;
pub mod limits;
pub mod users;
