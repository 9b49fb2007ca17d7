//! The kernel's side of a socket's four rings, over heap memory — what lets the I/O thread
//! and the packet threads run in unit tests without root (no socket, no mapping, no driver).
//!
//! [`socket`] makes the rings the plane drives ([`SocketRings`], exactly the types a bound
//! socket gives) and a [`SimSocket`] holding the other side of each: it takes frames from the
//! fill ring and "receives" bytes into them (at the kernel's 256-byte headroom), "sends" what
//! the TX ring holds and completes it. Its descriptor is an eventfd, signalled on receive, so
//! the I/O thread's `ppoll` wakes as it would on a socket. The need_wakeup flags stay clear:
//! no `sendto` or `recvfrom` is ever made.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::ring::{CompRing, FillRing, RawRing, RingOffsets, RxRing, TxRing};
use crate::socket::{SocketFd, SocketRings};
use crate::sys::EventFd;
use crate::umem::Umem;

/// Both sides of one ring over a heap block: producer, consumer and flags words, then the
/// slots.
pub(crate) fn heap_ring<T: Copy>(size: u32) -> (RawRing<T>, RawRing<T>) {
    let words = 8 + (size as usize * size_of::<T>()).div_ceil(8);
    let mut mem = vec![0u64; words].into_boxed_slice();
    let base = mem.as_mut_ptr().cast::<u8>();
    let off = RingOffsets {
        producer: 0,
        consumer: 8,
        flags: 16,
        desc: 64,
    };
    let shared = Arc::new(Mutex::new(mem));
    // SAFETY: the block holds the three (8-byte aligned) words and `size` slots at these
    // offsets, and lives as long as either side (both hold the Arc); a boxed slice does not
    // move its elements.
    unsafe {
        (
            RawRing::new(base, off, size, Box::new(Arc::clone(&shared))),
            RawRing::new(base, off, size, Box::new(shared)),
        )
    }
}

/// The kernel's side of one socket.
#[derive(Debug)]
pub(crate) struct SimSocket {
    umem: Arc<Umem>,
    fill: RawRing<u64>,
    comp: RawRing<u64>,
    tx: RawRing<libc::xdp_desc>,
    /// The socket's descriptor's other end (kept open).
    _wake: EventFd,
    /// Chunks taken from the fill ring and not yet received into: a second hand-over of one
    /// of them is a duplicate the plane made.
    held: BTreeSet<u64>,
}

/// A socket's rings over `umem`, every ring `size` entries, and the kernel's side of them.
pub(crate) fn socket(umem: &Arc<Umem>, size: u32) -> (SocketRings, SimSocket) {
    let wake = EventFd::new().expect("eventfd");
    let fd = Arc::new(SocketFd(wake.try_clone_fd().expect("dup")));
    let (fill_user, fill_kernel) = heap_ring(size);
    let (comp_kernel, comp_user) = heap_ring(size);
    let (_rx_kernel, rx_user) = heap_ring(size);
    let (tx_user, tx_kernel) = heap_ring(size);
    let rings = SocketRings {
        fill: FillRing {
            ring: fill_user,
            umem: Arc::clone(umem),
            fd: Arc::clone(&fd),
        },
        comp: CompRing {
            ring: comp_user,
            umem: Arc::clone(umem),
            fd: Arc::clone(&fd),
        },
        rx: Some(RxRing {
            ring: rx_user,
            umem: Arc::clone(umem),
            fd: Arc::clone(&fd),
        }),
        tx: TxRing {
            ring: tx_user,
            umem: Arc::clone(umem),
            fd,
            written: 0,
        },
    };
    let sim = SimSocket {
        umem: Arc::clone(umem),
        fill: fill_kernel,
        comp: comp_kernel,
        tx: tx_kernel,
        _wake: wake,
        held: BTreeSet::new(),
    };
    (rings, sim)
}

impl SimSocket {
    /// Takes every frame the fill ring offers into the kernel's hands; panics on a chunk
    /// handed over twice.
    fn take_fill(&mut self) {
        let n = self.fill.ready(u32::MAX);
        for i in 0..n {
            let addr = self.fill.read(i);
            assert!(
                self.held.insert(addr),
                "chunk {addr:#x} in the fill ring twice"
            );
        }
        self.fill.release(n);
    }

    /// Frames the kernel holds for receiving (taken from the fill ring, or waiting in it).
    pub(crate) fn fill_held(&mut self) -> Vec<u64> {
        self.take_fill();
        self.held.iter().copied().collect()
    }

    /// Sends every published TX descriptor there is room to complete: returns their bytes,
    /// in order, and puts their addresses on the completion ring.
    pub(crate) fn transmit(&mut self) -> Vec<Vec<u8>> {
        let n = self.tx.ready(u32::MAX).min(self.comp.free(u32::MAX));
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            let d = self.tx.read(i);
            // SAFETY: a published TX descriptor: the plane holds no Frame for the chunk until
            // it is completed, below.
            out.push(unsafe { self.umem.kernel_read(d.addr, d.len) });
            self.comp.write(i, d.addr);
        }
        self.tx.release(n);
        self.comp.submit(n);
        out
    }

    /// Puts a raw address on the completion ring (a descriptor the kernel should never
    /// return).
    pub(crate) fn complete_raw(&mut self, addr: u64) {
        assert!(self.comp.free(1) >= 1, "room in the completion ring");
        self.comp.write(0, addr);
        self.comp.submit(1);
    }
}
