//! The compiled BPF objects, embedded at build time (build.rs runs clang on `bpf/*.bpf.c`).

/// The forwarder with a per-CPU connection table (`LRU_PERCPU_HASH`).
pub static FORWARDER: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_fwd.o"));

/// The forwarder with one shared connection table (`LRU_HASH` + `BPF_F_NO_COMMON_LRU`).
pub static FORWARDER_SHARED: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_fwd_shared.o"));

/// Baselines: `stator_pass` (XDP_PASS) and `stator_swap_tx` (MAC swap + XDP_TX).
pub static PASS: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_pass.o"));

/// The kernel-repeat benchmark wrapper (`stator_bench`).
pub static BENCH: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_bench.o"));

/// The backend-side decap program (`stator_decap`).
pub static DECAP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_decap.o"));

/// The end-to-end veth benchmark's generator, sink and plain-forwarding baseline.
pub static VETH_BENCH: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_veth.o"));

/// The AF_XDP plane's redirect program (`stator_xsk`) and FIB query program (`stator_fibq`).
pub static XSK: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_xsk.o"));
