//! Frames the forwarder answers or wraps itself: the self-test probe payload and the benchmark
//! wrapper's original frame.

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_probe` — the payload of a self-test probe frame (ethertype
/// `STATOR_PROBE_ETHERTYPE`), filled in by the forwarder from the active generation.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probe {
    /// `STATOR_PROBE_MAGIC` (host order).
    pub magic: u64,
    /// Chosen by user space.
    pub nonce: u32,
    /// Written by the program: `!nonce`.
    pub answer: u32,
    /// Address to look up in `stator_vaddrs`, network order.
    pub addr: [u8; 16],
    /// Its family; `STATOR_FAMILY_NONE` = no lookup.
    pub family: u8,
    /// Padding.
    pub _pad0: [u8; 3],
    /// Written: the active generation.
    pub active_gen: u32,
    /// Written: `STATOR_PROBE_F_*`.
    pub result: u32,
    /// Written: the vaddr's flags when found.
    pub vaddr_flags: u32,
    /// Written: `stator_cfg[gen].config_generation`.
    pub config_generation: u64,
}
assert_layout!(Probe, SIZEOF_stator_probe,
    magic => OFFSETOF_stator_probe_magic,
    nonce => OFFSETOF_stator_probe_nonce,
    answer => OFFSETOF_stator_probe_answer,
    addr => OFFSETOF_stator_probe_addr,
    family => OFFSETOF_stator_probe_family,
    active_gen => OFFSETOF_stator_probe_active_gen,
    result => OFFSETOF_stator_probe_result,
    vaddr_flags => OFFSETOF_stator_probe_vaddr_flags,
    config_generation => OFFSETOF_stator_probe_config_generation);

impl Probe {
    /// The probe as bytes (host order, as the program reads it).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_probe] {
        let mut b = [0u8; SIZEOF_stator_probe];
        b[OFFSETOF_stator_probe_magic..][..8].copy_from_slice(&self.magic.to_ne_bytes());
        b[OFFSETOF_stator_probe_nonce..][..4].copy_from_slice(&self.nonce.to_ne_bytes());
        b[OFFSETOF_stator_probe_answer..][..4].copy_from_slice(&self.answer.to_ne_bytes());
        b[OFFSETOF_stator_probe_addr..][..16].copy_from_slice(&self.addr);
        b[OFFSETOF_stator_probe_family] = self.family;
        b[OFFSETOF_stator_probe_active_gen..][..4].copy_from_slice(&self.active_gen.to_ne_bytes());
        b[OFFSETOF_stator_probe_result..][..4].copy_from_slice(&self.result.to_ne_bytes());
        b[OFFSETOF_stator_probe_vaddr_flags..][..4]
            .copy_from_slice(&self.vaddr_flags.to_ne_bytes());
        b[OFFSETOF_stator_probe_config_generation..][..8]
            .copy_from_slice(&self.config_generation.to_ne_bytes());
        b
    }

    /// Reads a probe back from bytes (`None` if too short).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.first_chunk::<SIZEOF_stator_probe>()?;
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_ne_bytes(w)
        };
        let mut addr = [0u8; 16];
        addr.copy_from_slice(&b[OFFSETOF_stator_probe_addr..][..16]);
        Some(Self {
            magic: u64_at(OFFSETOF_stator_probe_magic),
            nonce: u32_at(OFFSETOF_stator_probe_nonce),
            answer: u32_at(OFFSETOF_stator_probe_answer),
            addr,
            family: b[OFFSETOF_stator_probe_family],
            _pad0: [0; 3],
            active_gen: u32_at(OFFSETOF_stator_probe_active_gen),
            result: u32_at(OFFSETOF_stator_probe_result),
            vaddr_flags: u32_at(OFFSETOF_stator_probe_vaddr_flags),
            config_generation: u64_at(OFFSETOF_stator_probe_config_generation),
        })
    }
}

/// `struct stator_bench_frame` — the benchmark wrapper's original frame.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchFrame {
    /// Frame length.
    pub len: u32,
    /// Distinct flows to cycle through (> 1 varies the word at `flow_off`).
    pub nflows: u32,
    /// Offset of the big-endian word the wrapper varies.
    pub flow_off: u32,
    /// Padding.
    pub _pad0: u32,
    /// The frame.
    pub bytes: [u8; STATOR_BENCH_FRAME_MAX as usize],
}
assert_layout!(BenchFrame, SIZEOF_stator_bench_frame,
    len => OFFSETOF_stator_bench_frame_len,
    nflows => OFFSETOF_stator_bench_frame_nflows,
    flow_off => OFFSETOF_stator_bench_frame_flow_off,
    bytes => OFFSETOF_stator_bench_frame_bytes);

impl Default for BenchFrame {
    fn default() -> Self {
        Self {
            len: 0,
            nflows: 0,
            flow_off: 0,
            _pad0: 0,
            bytes: [0; STATOR_BENCH_FRAME_MAX as usize],
        }
    }
}
