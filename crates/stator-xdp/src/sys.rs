//! The kernel interfaces aya does not wrap, each as small as it can be: BPF arrays seen as
//! memory (mapped by stator-sys's `Mmap`), `membarrier(2)`, bpf_link information and
//! `BPF_LINK_DETACH`, an `RTM_GETLINK` query for the XDP attach mode, and interface names.
//! Every `unsafe` block of the crate outside `testrun.rs` is here.

use std::ffi::CString;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use stator_sys::mmap::Mmap;
pub(crate) use stator_sys::mmap::page_size;
pub(crate) use stator_sys::users::is_root;

use stator_abi::{
    AddrRec, Beat, BenchFrame, Class, Ct4Bucket, CtEntry, Ctl, DecapAddr, DecapCfg, Flood, FlowKey,
    FragEntry, FragKey, NodeCfg, Peer, PrevRec, Real, SIZEOF_stator_class_key, SfxKey, TraceKeys,
    Traffic, Vaddr, Vip, VipKey, XskCfg,
};

/// Plain data that may be copied to and from kernel memory byte for byte.
///
/// # Safety
/// Implementors are `#[repr(C)]` (or primitive), have no implicit padding (the ABI structs name
/// every padding byte) and accept any bit pattern (integers and byte arrays only).
pub(crate) unsafe trait Record: Copy + 'static {}

// SAFETY: primitives — any bit pattern is valid, no padding.
unsafe impl Record for u32 {}
// SAFETY: as above.
unsafe impl Record for u64 {}
macro_rules! abi_records {
    ($($t:ty),*) => { $(
        // SAFETY: a stator-abi #[repr(C)] struct of integers and byte arrays with explicit
        // padding fields; its size and offsets are asserted against the C header.
        unsafe impl Record for $t {}
    )* };
}
abi_records!(
    Beat, Ctl, NodeCfg, Vaddr, VipKey, Vip, Real, FlowKey, CtEntry, Ct4Bucket, Flood, Traffic,
    BenchFrame, DecapAddr, DecapCfg, XskCfg, Peer, AddrRec, PrevRec, Class, SfxKey, FragKey,
    FragEntry, TraceKeys
);

/// The part of `struct stator_class_key` after `prefixlen` (aya's LPM key carries the length
/// itself): generation, family, two zero bytes, the address.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct ClassData {
    pub(crate) generation: u8,
    pub(crate) family: u8,
    pub(crate) _pad0: [u8; 2],
    pub(crate) addr: [u8; 16],
}
const _: () = assert!(size_of::<u32>() + size_of::<ClassData>() == SIZEOF_stator_class_key);
// SAFETY: integers and byte arrays with an explicit padding field; its size is asserted above
// against the C header's key.
unsafe impl aya::Pod for ClassData {}

/// A [`Record`] as an aya map key or value (aya's `Pod` cannot be implemented for another
/// crate's types directly).
#[repr(transparent)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rec<T>(pub T);

// SAFETY: `Rec<T>` is transparent over a `Record`, which is plain data (see `Record`).
unsafe impl<T: Record> aya::Pod for Rec<T> {}

/// A `BPF_F_MMAPABLE` array map seen as memory: element `i` lives at `i * round_up(size, 8)`
/// (the kernel's array element stride).
#[derive(Debug)]
pub(crate) struct MmapArray<T> {
    map: Mmap,
    entries: u32,
    stride: usize,
    _t: PhantomData<T>,
}

impl<T: Record> MmapArray<T> {
    /// Maps an array of `entries` elements of `T`.
    pub(crate) fn open(fd: BorrowedFd<'_>, entries: u32) -> io::Result<Self> {
        let stride = size_of::<T>().next_multiple_of(8);
        let len = (entries as usize * stride).next_multiple_of(page_size());
        Ok(Self {
            map: Mmap::shared(fd, 0, len)?,
            entries,
            stride,
            _t: PhantomData,
        })
    }

    fn ptr(&self, i: u32) -> *mut T {
        assert!(
            i < self.entries,
            "mmap array index {i} out of {}",
            self.entries
        );
        // SAFETY: i < entries, so the offset lies inside the mapping, which is page aligned;
        // the stride is a multiple of 8 ≥ size_of::<T>() so every element is aligned for T
        // (alignment of the ABI records is at most 8).
        unsafe { self.map.as_ptr().add(i as usize * self.stride).cast() }
    }

    /// Reads element `i` (panics when out of range: indices are computed, never received).
    pub(crate) fn read(&self, i: u32) -> T {
        // SAFETY: `ptr` is in bounds and aligned; T accepts any bit pattern (`Record`).
        unsafe { self.ptr(i).read_volatile() }
    }

    /// Writes element `i` (panics when out of range).
    pub(crate) fn write(&self, i: u32, value: T) {
        // SAFETY: `ptr` is in bounds and aligned; the memory is shared with BPF programs, which
        // is why the store is volatile and no reference is ever formed.
        unsafe { self.ptr(i).write_volatile(value) }
    }
}

impl MmapArray<Ctl> {
    /// `stator_ctl[0].active_gen`, read atomically.
    pub(crate) fn active_gen(&self) -> u32 {
        self.gen_atomic().load(Ordering::Acquire)
    }

    /// Flips `stator_ctl[0].active_gen` with one atomic 32-bit store (what the programs read).
    pub(crate) fn set_active_gen(&self, generation: u32) {
        self.gen_atomic().store(generation, Ordering::Release);
    }

    /// Sets `stator_ctl[0].fib_cache_us` atomically.
    pub(crate) fn set_fib_cache_us(&self, us: u32) {
        let off = std::mem::offset_of!(Ctl, fib_cache_us);
        // SAFETY: in bounds (element 0), 4-byte aligned, accessed atomically or by BPF loads.
        let a = unsafe { AtomicU32::from_ptr(self.ptr(0).cast::<u8>().add(off).cast()) };
        a.store(us, Ordering::Release);
    }

    /// Sets `stator_ctl[0].test_clock_ns` atomically.
    pub(crate) fn set_test_clock(&self, ns: u64) {
        let off = std::mem::offset_of!(Ctl, test_clock_ns);
        // SAFETY: the field lies inside element 0, is 8-byte aligned (asserted ABI offset 8 in
        // a page-aligned mapping) and is only ever accessed atomically or by BPF loads.
        let a = unsafe { AtomicU64::from_ptr(self.ptr(0).cast::<u8>().add(off).cast()) };
        a.store(ns, Ordering::Release);
    }

    fn gen_atomic(&self) -> &AtomicU32 {
        let off = std::mem::offset_of!(Ctl, active_gen);
        // SAFETY: as for `set_test_clock`: in bounds, 4-byte aligned, accessed atomically only.
        unsafe { AtomicU32::from_ptr(self.ptr(0).cast::<u8>().add(off).cast()) }
    }
}

impl MmapArray<Beat> {
    fn beat_field(&self, off: usize) -> &AtomicU64 {
        // SAFETY: both fields lie inside element 0 and are 8-byte aligned (asserted ABI offsets
        // 0 and 8 in a page-aligned mapping); they are only accessed atomically or by BPF loads.
        unsafe { AtomicU64::from_ptr(self.ptr(0).cast::<u8>().add(off).cast()) }
    }

    /// Stores `stator_beat[0]`, each field atomically, in the order that never shows a packet
    /// a stale beat the two values do not mean: the refresh before turning the check on, the
    /// check off before an older refresh.
    pub(crate) fn store(&self, beat: Beat) {
        let at = self.beat_field(std::mem::offset_of!(Beat, refreshed_ns));
        let after = self.beat_field(std::mem::offset_of!(Beat, stale_after_ns));
        if beat.stale_after_ns == 0 {
            after.store(0, Ordering::Release);
            at.store(beat.refreshed_ns, Ordering::Release);
        } else {
            at.store(beat.refreshed_ns, Ordering::Release);
            after.store(beat.stale_after_ns, Ordering::Release);
        }
    }

    /// Loads `stator_beat[0]`.
    pub(crate) fn load(&self) -> Beat {
        Beat {
            refreshed_ns: self
                .beat_field(std::mem::offset_of!(Beat, refreshed_ns))
                .load(Ordering::Acquire),
            stale_after_ns: self
                .beat_field(std::mem::offset_of!(Beat, stale_after_ns))
                .load(Ordering::Acquire),
        }
    }
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL)`: returns after an RCU grace period (`synchronize_rcu`),
/// i.e. once every XDP program invocation that started before the call has finished.
pub(crate) fn membarrier_global() -> io::Result<()> {
    const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True when `path` (or its nearest existing ancestor) lies on a mounted bpffs.
pub(crate) fn on_bpffs(path: &Path) -> io::Result<bool> {
    const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
    let existing = path
        .ancestors()
        .find(|p| p.exists())
        .ok_or_else(|| io::Error::other("no existing ancestor"))?;
    let c = CString::new(existing.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path contains NUL"))?;
    // SAFETY: a zeroed statfs is a valid out-parameter; `c` is NUL-terminated and outlives the
    // call; statfs writes only into `st`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// Mounts a fresh bpffs at `at` (an existing directory), private to nobody but root (mode 0700).
pub(crate) fn mount_bpffs(at: &Path) -> io::Result<()> {
    let target = CString::new(at.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path contains NUL"))?;
    let source = c"bpf";
    let fstype = c"bpf";
    let data = c"mode=0700";
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; mount reads them
    // and touches no other memory of ours.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The number of possible CPUs (what per-CPU maps and `stator_ct4` are sized by).
pub(crate) fn possible_cpus() -> crate::error::Result<u32> {
    aya::util::nr_cpus()
        .map(|n| n as u32)
        .map_err(|(_, e)| crate::error::XdpError::io("counting possible CPUs", e))
}

pub(crate) use stator_sys::iface::{index as if_nametoindex, name as if_indextoname};

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_DETACH: libc::c_long = 34;
/// `BPF_LINK_TYPE_XDP`.
pub(crate) const BPF_LINK_TYPE_XDP: u32 = 6;

/// What the kernel says about a bpf_link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkInfo {
    pub(crate) link_type: u32,
    pub(crate) id: u32,
    pub(crate) prog_id: u32,
    /// For XDP links: the interface.
    pub(crate) ifindex: u32,
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a link.
pub(crate) fn link_info(fd: BorrowedFd<'_>) -> io::Result<LinkInfo> {
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    // struct bpf_link_info: type, id, prog_id, then a union aligned to 8 (xdp: ifindex first).
    let mut info = [0u64; 32];
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: `attr` describes `info`, a writable buffer of `info_len` bytes that outlives the
    // call; the kernel writes at most that many bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr as *mut InfoAttr,
            size_of::<InfoAttr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let word = |i: usize| -> u32 {
        let w = info[i / 2];
        if i.is_multiple_of(2) {
            w as u32
        } else {
            (w >> 32) as u32
        }
    };
    Ok(LinkInfo {
        link_type: word(0),
        id: word(1),
        prog_id: word(2),
        ifindex: word(4),
    })
}

/// `BPF_OBJ_GET`: opens a pinned BPF object (map, program or link).
pub(crate) fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct ObjAttr {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("pin path contains NUL"))?;
    let mut attr = ObjAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    // SAFETY: `attr.pathname` points at a NUL-terminated string that outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &mut attr as *mut ObjAttr,
            size_of::<ObjAttr>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: BPF_OBJ_GET returned a new descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// True when `iface` is a veth device (ethtool driver name), false otherwise or on error.
pub(crate) fn is_veth(iface: &str) -> bool {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GDRVINFO: u32 = 3;
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        rest: [u8; 160],
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IF_NAMESIZE],
        data: *mut DrvInfo,
        _pad: [u8; 16],
    }
    let bytes = iface.as_bytes();
    if bytes.len() >= libc::IF_NAMESIZE {
        return false;
    }
    let mut info = DrvInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 160],
    };
    let mut req = IfReq {
        name: [0; libc::IF_NAMESIZE],
        data: &mut info,
        _pad: [0; 16],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: socket(2) with constant arguments; checked and owned below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return false;
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: SIOCETHTOOL reads `req` (a NUL-terminated name and a pointer to `info`) and writes
    // at most size_of::<DrvInfo>() bytes into `info`; both live across the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfReq) };
    rc == 0 && info.driver.starts_with(b"veth\0")
}

/// `BPF_LINK_DETACH`: detaches a link from its hook even if other file descriptors or pins
/// still refer to it.
pub(crate) fn link_detach(fd: BorrowedFd<'_>) -> io::Result<()> {
    #[repr(C)]
    struct DetachAttr {
        link_fd: u32,
    }
    let mut attr = DetachAttr {
        link_fd: fd.as_raw_fd() as u32,
    };
    // SAFETY: `attr` is a valid `bpf_attr.link_detach`; the kernel only reads it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_DETACH,
            &mut attr as *mut DetachAttr,
            size_of::<DetachAttr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What rtnetlink says about an interface: XDP attachment and the peer link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XdpAttachState {
    /// `XDP_ATTACHED_*`: 0 none, 1 driver (native), 2 generic (skb), 3 offload, 4 multi.
    pub(crate) attached: u8,
    /// The attached program (0 = none).
    pub(crate) prog_id: u32,
    /// `IFLA_LINK`: the peer / lower device (a veth's peer), if any.
    pub(crate) link: Option<u32>,
    /// `IFLA_LINK_NETNSID` present: the link lives in another network namespace.
    pub(crate) link_elsewhere: bool,
}

/// Asks rtnetlink (`RTM_GETLINK`) how XDP is attached to interface `ifindex`.
pub(crate) fn xdp_query(ifindex: u32) -> io::Result<XdpAttachState> {
    const RTM_GETLINK: u16 = 18;
    const RTM_NEWLINK: u16 = 16;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;

    // SAFETY: socket(2) with constant arguments; the result is checked and owned below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };

    // nlmsghdr (16 bytes) + ifinfomsg (16 bytes)
    let mut req = [0u8; 32];
    req[0..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[20..24].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    // SAFETY: sending `req.len()` bytes from a live buffer on our socket.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: receiving at most `buf.len()` bytes into a live, writable buffer.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    parse_getlink_reply(&buf, RTM_NEWLINK, NLMSG_ERROR)
}

/// Finds IFLA_XDP in an RTM_NEWLINK reply (or the error of an NLMSG_ERROR).
fn parse_getlink_reply(buf: &[u8], newlink: u16, error: u16) -> io::Result<XdpAttachState> {
    const IFLA_LINK: u16 = 5;
    const IFLA_LINK_NETNSID: u16 = 37;
    const IFLA_XDP: u16 = 43;
    const IFLA_XDP_ATTACHED: u16 = 2;
    const IFLA_XDP_PROG_ID: u16 = 4;
    let u16_at = |b: &[u8], o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);

    let mut state = XdpAttachState {
        attached: 0,
        prog_id: 0,
        link: None,
        link_elsewhere: false,
    };
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32_at(buf, off) as usize;
        let ty = u16_at(buf, off + 4);
        if len < 16 || off + len > buf.len() {
            break;
        }
        let msg = &buf[off..off + len];
        if ty == error && msg.len() >= 20 {
            let code = i32::from_ne_bytes([msg[16], msg[17], msg[18], msg[19]]);
            if code != 0 {
                return Err(io::Error::from_raw_os_error(-code));
            }
        } else if ty == newlink {
            for (aty, payload) in rtattrs(msg.get(32..).unwrap_or(&[])) {
                match aty & 0x3fff {
                    IFLA_LINK if payload.len() >= 4 => state.link = Some(u32_at(payload, 0)),
                    IFLA_LINK_NETNSID => state.link_elsewhere = true,
                    _ => {}
                }
                if aty & 0x3fff != IFLA_XDP {
                    continue;
                }
                for (nty, nested) in rtattrs(payload) {
                    match nty & 0x3fff {
                        IFLA_XDP_ATTACHED if !nested.is_empty() => state.attached = nested[0],
                        IFLA_XDP_PROG_ID if nested.len() >= 4 => state.prog_id = u32_at(nested, 0),
                        _ => {}
                    }
                }
            }
        }
        off += len.next_multiple_of(4);
    }
    Ok(state)
}

/// Iterates the `rtattr`s (type, payload) of a netlink attribute area.
fn rtattrs(mut area: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if area.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([area[0], area[1]]));
        let ty = u16::from_ne_bytes([area[2], area[3]]);
        if len < 4 || len > area.len() {
            return None;
        }
        let payload = &area[4..len];
        area = area.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

/// `BPF_MAP_DELETE_ELEM` of a map with 4-byte keys (an XSKMAP slot: aya 0.13 has no delete
/// for it). A missing key is not an error.
pub(crate) fn map_delete_u32(map: BorrowedFd<'_>, key: u32) -> io::Result<()> {
    #[repr(C)]
    struct DeleteAttr {
        map_fd: u32,
        _pad0: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
    let attr = DeleteAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad0: 0,
        key: &key as *const u32 as u64,
        value: 0,
        flags: 0,
    };
    // SAFETY: `attr.key` points at a live u32 for the duration of the call; the kernel only
    // reads the attribute.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_DELETE_ELEM,
            &attr as *const DeleteAttr,
            size_of::<DeleteAttr>(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getlink_reply_yields_the_xdp_attributes() {
        // nlmsghdr + ifinfomsg + IFLA_IFNAME("lo") + IFLA_LINK(9) + IFLA_XDP{ATTACHED=2,
        // PROG_ID=77}
        let mut msg = vec![0u8; 32];
        msg.extend_from_slice(&[7, 0, 3, 0, b'l', b'o', 0, 0]);
        msg.extend_from_slice(&[8, 0, 5, 0]);
        msg.extend_from_slice(&9u32.to_ne_bytes());
        let mut xdp = Vec::new();
        xdp.extend_from_slice(&[5, 0, 2, 0, 2, 0, 0, 0]);
        xdp.extend_from_slice(&[8, 0, 4, 0]);
        xdp.extend_from_slice(&77u32.to_ne_bytes());
        msg.extend_from_slice(&((4 + xdp.len()) as u16).to_ne_bytes());
        msg.extend_from_slice(&(43u16 | 0x8000).to_ne_bytes());
        msg.extend_from_slice(&xdp);
        let len = msg.len() as u32;
        msg[0..4].copy_from_slice(&len.to_ne_bytes());
        msg[4..6].copy_from_slice(&16u16.to_ne_bytes());
        let st = parse_getlink_reply(&msg, 16, 2).unwrap();
        assert_eq!(
            st,
            XdpAttachState {
                attached: 2,
                prog_id: 77,
                link: Some(9),
                link_elsewhere: false,
            }
        );
    }

    #[test]
    fn getlink_error_is_reported() {
        let mut msg = vec![0u8; 36];
        msg[0..4].copy_from_slice(&36u32.to_ne_bytes());
        msg[4..6].copy_from_slice(&2u16.to_ne_bytes());
        msg[16..20].copy_from_slice(&(-19i32).to_ne_bytes());
        let err = parse_getlink_reply(&msg, 16, 2).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(19));
    }
}
