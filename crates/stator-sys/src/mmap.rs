//! Memory mappings owned by a value: anonymous memory (an AF_XDP UMEM) and shared mappings of
//! a kernel object's memory (an AF_XDP socket's rings, a `BPF_F_MMAPABLE` array map), unmapped
//! when the value is dropped.
//!
//! A mapping is handed out as an address, never as a Rust reference: its bytes are shared with
//! the kernel (and BPF programs, and other threads through the types built on it), so the code
//! that reads and writes them — with volatile or atomic accesses, under ownership rules of its
//! own — is the `unsafe` of the crate that knows those rules, not this module's.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// A memory mapping of `len` bytes, readable and writable, unmapped on drop.
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Mmap` owns an address range, not data with thread affinity: the range may be
// unmapped from any thread, and who may touch which bytes is decided by the types built on it
// (a UMEM's frame ownership, a ring's single owner, a BPF array's atomic fields), whose own
// `unsafe` blocks state it.
unsafe impl Send for Mmap {}
// SAFETY: through `&Mmap` one can only read the address and the length; every access to the
// bytes is a raw-pointer access under the rules of the type built on the mapping.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// `len` bytes of zeroed private anonymous memory, populated up front (no page fault
    /// later on the data path).
    ///
    /// # Errors
    /// The kernel's (`ENOMEM`; `EINVAL` for a zero length).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        // SAFETY: a new anonymous private mapping with no address hint, so it replaces
        // nothing of ours; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Self::from_result(p, len)
    }

    /// `len` bytes of the memory of kernel object `fd` from byte `offset` on, shared with the
    /// kernel and populated up front: an AF_XDP ring at its `XDP_PGOFF_*` offset, a
    /// `BPF_F_MMAPABLE` array map at 0. The mapping stays valid after `fd` is closed.
    ///
    /// # Errors
    /// The kernel's: the object cannot be mapped, or not at this offset and length.
    pub fn shared(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<Self> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a new shared mapping of `fd` with no address hint, so it replaces nothing of
        // ours; the kernel checks the offset and length against the object; the result is
        // checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        Self::from_result(p, len)
    }

    fn from_result(p: *mut libc::c_void, len: usize) -> io::Result<Self> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Self { ptr, len })
    }

    /// The first byte (page aligned). Valid for `len()` bytes until the value is dropped.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes, as asked for (the kernel maps whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no bytes (never: the kernel refuses an empty mapping).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by this value with this length and is unmapped once,
        // here; the pointers handed out by `as_ptr` are documented to end with the value.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The system's page size (4096 when the kernel will not say, as on every Linux target
/// Stator runs on).
pub fn page_size() -> usize {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_memory_is_zeroed_page_aligned_and_writable() {
        let m = Mmap::anonymous(3 * page_size()).unwrap();
        assert_eq!(m.len(), 3 * page_size());
        assert!(!m.is_empty());
        assert_eq!(m.as_ptr() as usize % page_size(), 0);
        // SAFETY: the mapping is ours alone, `len` bytes long, and outlives the slice.
        let bytes = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), m.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[m.len() - 1] = 7;
        assert_eq!(bytes[m.len() - 1], 7);
        assert!(Mmap::anonymous(0).is_err());
    }

    #[test]
    fn a_shared_mapping_sees_the_file() {
        use std::io::Write as _;
        use std::os::fd::AsFd as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        // a file without a name (O_TMPFILE): nothing for a parallel test to meet
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(std::env::temp_dir())
            .unwrap();
        f.write_all(&vec![5u8; page_size()]).unwrap();
        let m = Mmap::shared(f.as_fd(), 0, page_size()).unwrap();
        drop(f);
        // SAFETY: the mapping is `len` bytes long and outlives the read; no one writes it.
        let last = unsafe { m.as_ptr().add(page_size() - 1).read_volatile() };
        assert_eq!(last, 5);
        assert!(Mmap::shared(std::io::stdin().as_fd(), u64::MAX, 1).is_err());
    }
}
