//! The AF_XDP plane's kernel half (`bpf/stator_xsk.bpf.c`): the redirect program loaded over
//! the forwarder's pinned maps — so commits, the active snapshot, counters, the self-test
//! probe, attachments and status are the forwarder's own code — plus the XSKMAP of the
//! plane's sockets and the FIB query program (docs/afxdp.md).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use aya::maps::{Array, HashMap, XskMap};
use stator_abi::{STATOR_MAX_XSK_QUEUES, XskCfg};

use crate::error::{Result, XdpError};
use crate::forwarder::{Forwarder, program_fd};
use crate::objects;
use crate::options::XdpOptions;
use crate::sys::Rec;

/// Name of the AF_XDP redirect program.
pub const XSK_PROGRAM_NAME: &str = "stator_xsk";
/// Name of the FIB query program (run with BPF_PROG_TEST_RUN, never attached).
pub const FIBQ_PROGRAM_NAME: &str = "stator_fibq";
/// The connection table the redirect program's object carries unused (the packet threads keep
/// their own): loaded with this many entries.
pub const XSK_CT_ENTRIES: u32 = 64;

impl Forwarder {
    /// Loads the AF_XDP redirect program over the forwarder's maps pinned at `opts.pin_path`
    /// (their connection table sized [`XSK_CT_ENTRIES`]: the packet threads keep their own),
    /// with `max_len` as the longest frame a UMEM frame holds.
    pub fn load_xsk(opts: &XdpOptions, max_len: u32) -> Result<Self> {
        let opts = XdpOptions {
            ct_entries: XSK_CT_ENTRIES,
            ..opts.clone()
        };
        let mut fwd = Self::load_object(
            &opts,
            objects::XSK,
            XSK_PROGRAM_NAME,
            &[FIBQ_PROGRAM_NAME],
            Some(crate::ProgramClock::HELPER),
        )?;
        fwd.set_xsk_max_len(max_len)?;
        Ok(fwd)
    }

    /// Whether this is the AF_XDP redirect program.
    pub fn is_xsk(&self) -> bool {
        self.program == XSK_PROGRAM_NAME
    }

    fn xsk_map(&mut self, name: &'static str) -> Result<&mut aya::maps::Map> {
        self.ebpf.map_mut(name).ok_or_else(|| XdpError::Load {
            object: XSK_PROGRAM_NAME.into(),
            source: format!("map {name} missing (not the AF_XDP program?)").into(),
        })
    }

    /// Sets the longest frame handed to a socket (`stator_xskcfg`).
    pub fn set_xsk_max_len(&mut self, max_len: u32) -> Result<()> {
        let cfg = XskCfg {
            max_len,
            ..XskCfg::default()
        };
        Array::<_, Rec<XskCfg>>::try_from(self.xsk_map("stator_xskcfg")?)
            .map_err(|e| XdpError::map("stator_xskcfg", "open", e))?
            .set(0, Rec(cfg), 0)
            .map_err(|e| XdpError::map("stator_xskcfg", "update", e))
    }

    /// Gives interface `ifindex` socket slot `slot` (< `STATOR_MAX_TX_PORTS`) in
    /// `stator_xskifs`.
    pub fn set_xsk_iface(&mut self, ifindex: u32, slot: u32) -> Result<()> {
        HashMap::<_, u32, u32>::try_from(self.xsk_map("stator_xskifs")?)
            .map_err(|e| XdpError::map("stator_xskifs", "open", e))?
            .insert(ifindex, slot, 0)
            .map_err(|e| XdpError::map("stator_xskifs", "update", e))
    }

    /// Puts AF_XDP socket `fd` in `stator_xsks` for RX queue `queue` of the interface in socket
    /// slot `slot`: packets received there go to it. (The kernel delivers only to a socket
    /// bound to that very queue: any other is a drop.)
    pub fn set_xsk_socket(&mut self, slot: u32, queue: u32, fd: impl AsFd) -> Result<()> {
        let raw = fd.as_fd().as_raw_fd();
        XskMap::try_from(self.xsk_map("stator_xsks")?)
            .map_err(|e| XdpError::map("stator_xsks", "open", e))?
            .set(xsk_key(slot, queue), raw, 0)
            .map_err(|e| XdpError::map("stator_xsks", "update", e))
    }

    /// Empties the `stator_xsks` entry of (`slot`, `queue`).
    pub fn clear_xsk_socket(&mut self, slot: u32, queue: u32) -> Result<()> {
        let map = self.xsk_map("stator_xsks")?;
        let fd = map_fd(map)?;
        crate::sys::map_delete_u32(fd.as_fd(), xsk_key(slot, queue))
            .map_err(|e| XdpError::io("deleting a stator_xsks entry", e))
    }

    /// A duplicate of the FIB query program's descriptor (one per packet thread).
    pub fn fib_query_fd(&self) -> Result<OwnedFd> {
        program_fd(&self.ebpf, FIBQ_PROGRAM_NAME)
            .ok_or_else(|| XdpError::Load {
                object: XSK_PROGRAM_NAME.into(),
                source: "stator_fibq not loaded".into(),
            })?
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| XdpError::io("duplicating the FIB query program's fd", e))
    }
}

fn xsk_key(slot: u32, queue: u32) -> u32 {
    slot * STATOR_MAX_XSK_QUEUES + queue
}

fn map_fd(map: &aya::maps::Map) -> Result<OwnedFd> {
    let data = match map {
        aya::maps::Map::XskMap(d) => d,
        _ => {
            return Err(XdpError::Load {
                object: XSK_PROGRAM_NAME.into(),
                source: "stator_xsks is not an XSKMAP".into(),
            });
        }
    };
    data.fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| XdpError::io("duplicating the XSKMAP fd", e))
}
