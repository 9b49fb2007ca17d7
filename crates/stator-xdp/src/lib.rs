//! # stator-xdp — Stator's XDP data plane in the kernel (skeleton)
//!
//! Layer: an I/O adapter. It carries the compiled BPF objects (built from `bpf/*.bpf.c` by
//! build.rs), loads them with aya, and runs `BPF_PROG_TEST_RUN` for tests and benchmarks.
#![deny(unsafe_code)]

pub mod testrun;

/// The compiled BPF objects, embedded at build time.
pub mod objects {
    /// Baselines: `stator_pass` (XDP_PASS) and `stator_swap_tx` (MAC swap + XDP_TX).
    pub static PASS: &[u8] =
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_pass.o"));
}
