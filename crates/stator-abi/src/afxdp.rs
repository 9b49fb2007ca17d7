//! The AF_XDP plane's records: the redirect program's settings and the FIB query it asks
//! through `stator_fibq`.

use core::mem::{offset_of, size_of};

use crate::generated::*;

/// `struct stator_xsk_cfg` — the AF_XDP redirect program's settings (`stator_xskcfg[0]`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskCfg {
    /// Longest frame a UMEM frame holds; longer VIP packets are dropped `xsk_frame`.
    pub max_len: u32,
    /// Padding.
    pub _pad0: u32,
}
assert_layout!(XskCfg, SIZEOF_stator_xsk_cfg,
    max_len => OFFSETOF_stator_xsk_cfg_max_len);

/// `struct stator_fib_query` — a `bpf_fib_lookup` asked through `stator_fibq` (the AF_XDP
/// plane's next hops), as bytes after `STATOR_FIBQ_OFF` bytes of frame.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FibQueryRec {
    /// In: outer source, network order (IPv4 in the first four bytes).
    pub src: [u8; 16],
    /// In: outer destination.
    pub dst: [u8; 16],
    /// In: ingress interface; out: egress interface.
    pub ifindex: u32,
    /// In: outer IP length; out, on FRAG_NEEDED: the MTU.
    pub tot_len: u16,
    /// In: `STATOR_FAMILY_V4` / `V6`.
    pub family: u8,
    /// In: the outer protocol.
    pub l4_protocol: u8,
    /// Out: `BPF_FIB_LKUP_RET_*`, or -1 when the program did not answer.
    pub rc: i32,
    /// Out: the egress interface's MAC.
    pub smac: [u8; 6],
    /// Out: the neighbour's MAC.
    pub dmac: [u8; 6],
}
assert_layout!(FibQueryRec, SIZEOF_stator_fib_query,
    src => OFFSETOF_stator_fib_query_src,
    dst => OFFSETOF_stator_fib_query_dst,
    ifindex => OFFSETOF_stator_fib_query_ifindex,
    tot_len => OFFSETOF_stator_fib_query_tot_len,
    family => OFFSETOF_stator_fib_query_family,
    l4_protocol => OFFSETOF_stator_fib_query_l4_protocol,
    rc => OFFSETOF_stator_fib_query_rc,
    smac => OFFSETOF_stator_fib_query_smac,
    dmac => OFFSETOF_stator_fib_query_dmac);

impl FibQueryRec {
    /// The record as bytes (host order for the integers, as the program reads them).
    pub fn to_bytes(&self) -> [u8; SIZEOF_stator_fib_query] {
        let mut b = [0u8; SIZEOF_stator_fib_query];
        b[OFFSETOF_stator_fib_query_src..][..16].copy_from_slice(&self.src);
        b[OFFSETOF_stator_fib_query_dst..][..16].copy_from_slice(&self.dst);
        b[OFFSETOF_stator_fib_query_ifindex..][..4].copy_from_slice(&self.ifindex.to_ne_bytes());
        b[OFFSETOF_stator_fib_query_tot_len..][..2].copy_from_slice(&self.tot_len.to_ne_bytes());
        b[OFFSETOF_stator_fib_query_family] = self.family;
        b[OFFSETOF_stator_fib_query_l4_protocol] = self.l4_protocol;
        b[OFFSETOF_stator_fib_query_rc..][..4].copy_from_slice(&self.rc.to_ne_bytes());
        b[OFFSETOF_stator_fib_query_smac..][..6].copy_from_slice(&self.smac);
        b[OFFSETOF_stator_fib_query_dmac..][..6].copy_from_slice(&self.dmac);
        b
    }

    /// Parses the record back; `None` when `b` is too short.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..SIZEOF_stator_fib_query)?;
        let arr = |off: usize| -> [u8; 16] { b[off..off + 16].try_into().unwrap_or([0; 16]) };
        let mac = |off: usize| -> [u8; 6] { b[off..off + 6].try_into().unwrap_or([0; 6]) };
        let u32_at = |off: usize| u32::from_ne_bytes(b[off..off + 4].try_into().unwrap_or([0; 4]));
        Some(Self {
            src: arr(OFFSETOF_stator_fib_query_src),
            dst: arr(OFFSETOF_stator_fib_query_dst),
            ifindex: u32_at(OFFSETOF_stator_fib_query_ifindex),
            tot_len: u16::from_ne_bytes(
                b[OFFSETOF_stator_fib_query_tot_len..][..2]
                    .try_into()
                    .unwrap_or([0; 2]),
            ),
            family: b[OFFSETOF_stator_fib_query_family],
            l4_protocol: b[OFFSETOF_stator_fib_query_l4_protocol],
            rc: u32_at(OFFSETOF_stator_fib_query_rc) as i32,
            smac: mac(OFFSETOF_stator_fib_query_smac),
            dmac: mac(OFFSETOF_stator_fib_query_dmac),
        })
    }
}
