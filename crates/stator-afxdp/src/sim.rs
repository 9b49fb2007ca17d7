//! The kernel's side of a socket's four rings, over heap memory — what lets the I/O thread
//! and the packet threads run in unit tests without root (no socket, no mapping, no driver).
//!
//! [`socket`] makes the rings the plane drives ([`SocketRings`], exactly the types a bound
//! socket gives) and a [`SimSocket`] holding the other side of each: it takes frames from the
//! fill ring and "receives" bytes into them (at the kernel's 256-byte headroom), "sends" what
//! the TX ring holds and completes it. Its descriptor is one end of a Unix datagram pair: the
//! sim sends a datagram on receive, so the I/O thread's `ppoll` wakes as it would on a socket,
//! and counts the plane's `sendto` kicks as the datagrams they make. The need_wakeup flags stay
//! clear unless a test sets TX's ([`SimSocket::need_tx_wakeup`]).
//!
//! [`Rig`] puts an I/O thread's state ([`Io`]) over such sockets, with the packet threads'
//! ends of its queues, so a test can play the packet threads (stepping `Io` with its own
//! clock) or run real [`Worker`]s over a table FIB ([`Rig::worker`]).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stator_core::{
    BackendSpec, CompiledSnapshot, Forwarder, ForwarderConfig, HoldLimits, NextHop, NodeParams,
    Proto, SnapshotBuilder, StaticFib,
};
use stator_testkit::{Packet, tcp_flags};

use crate::fib::FibStats;
use crate::hold::FrameHold;
use crate::io::{Io, IoStats, IoWake, SockIo};
use crate::ring::{CompRing, FillRing, RawRing, RingOffsets, RxRing, TxRing};
use crate::rtc::Rtc;
use crate::socket::{SocketFd, SocketRings};
use crate::spsc::{self, Consumer, Producer};
use crate::trace::TraceSink;
use crate::umem::{KERNEL_HEADROOM, Umem, UmemConfig};
use crate::worker::{
    Decider, PacketFib, Published, RxItem, SocketMap, TxItem, Worker, WorkerShared,
};

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
    rx: RawRing<libc::xdp_desc>,
    tx: RawRing<libc::xdp_desc>,
    /// The kernel's end of the pair: readiness sent, kicks received.
    peer: UnixDatagram,
    /// The plane's end, to read readiness back (what emptying the RX ring does).
    plane: UnixDatagram,
    /// Chunks taken from the fill ring and not yet received into: a second hand-over of one
    /// of them is a duplicate the plane made.
    held: BTreeSet<u64>,
}

/// A socket's rings over `umem`, every ring `size` entries, and the kernel's side of them.
pub(crate) fn socket(umem: &Arc<Umem>, size: u32) -> (SocketRings, SimSocket) {
    let (plane, peer) = UnixDatagram::pair().expect("socketpair");
    for s in [&plane, &peer] {
        s.set_nonblocking(true).expect("non-blocking");
    }
    let fd = Arc::new(SocketFd(OwnedFd::from(
        plane.try_clone().expect("dup the plane's end"),
    )));
    let (fill_user, fill_kernel) = heap_ring(size);
    let (comp_kernel, comp_user) = heap_ring(size);
    let (rx_kernel, rx_user) = heap_ring(size);
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
        rx: rx_kernel,
        tx: tx_kernel,
        peer,
        plane,
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

    /// Receives `bytes` into a frame from the fill ring, as a NIC does; `false` when there is
    /// no frame to receive into or the RX ring is full (the kernel would drop and count).
    pub(crate) fn receive(&mut self, bytes: &[u8]) -> bool {
        self.take_fill();
        if self.rx.free(1) == 0 {
            return false;
        }
        let Some(&base) = self.held.iter().next() else {
            return false;
        };
        self.held.remove(&base);
        let addr = base + u64::from(KERNEL_HEADROOM);
        // SAFETY: the chunk came out of the fill ring and has not been received into: no Frame
        // for it exists.
        unsafe { self.umem.kernel_write(addr, bytes) };
        self.rx.write(
            0,
            libc::xdp_desc {
                addr,
                len: bytes.len() as u32,
                options: 0,
            },
        );
        self.rx.submit(1);
        // readable, as a socket with frames is (a full queue is readable already)
        let _ = self.peer.send(&[1]);
        true
    }

    /// Frames the RX ring holds that the plane has not read yet.
    pub(crate) fn rx_waiting(&mut self) -> u32 {
        self.rx.in_flight()
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

    /// Clears the socket's readiness (what reading the RX ring empty does).
    pub(crate) fn quiet(&self) {
        let mut b = [0u8; 8];
        while self.plane.recv(&mut b).is_ok() {}
    }

    /// Sets or clears the TX ring's need_wakeup flag (copy mode: always set).
    pub(crate) fn need_tx_wakeup(&self, on: bool) {
        self.tx
            .set_flags(if on { libc::XDP_RING_NEED_WAKEUP } else { 0 });
    }

    /// The `sendto` kicks the plane made since the last call.
    pub(crate) fn kicks(&self) -> usize {
        let mut b = [0u8; 8];
        let mut n = 0;
        while self.peer.recv(&mut b).is_ok() {
            n += 1;
        }
        n
    }
}

/// The virtual service the rigs forward: a TCP VIP on port 80 (port 81 is nobody's: the
/// forwarder passes it, which user space recycles).
pub(crate) const VIP: Ipv4Addr = Ipv4Addr::new(10, 202, 0, 10);
/// Its backend.
pub(crate) const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
/// The interface every simulated socket is on (and forwarded frames leave by).
pub(crate) const IFINDEX: u32 = 2;

/// A TCP packet from client port `sport` to the VIP's `dport`, its payload the packet's
/// number (the last 4 bytes of the frame, before and after encapsulation).
pub(crate) fn packet(sport: u16, dport: u16, id: u32) -> Vec<u8> {
    let client = IpAddr::V4(Ipv4Addr::new(10, 200, 1, 2));
    Packet::tcp(client, sport, VIP.into(), dport, tcp_flags::ACK)
        .with_payload(&id.to_be_bytes())
        .frame()
}

/// The number a [`packet`] carries.
pub(crate) fn packet_id(frame: &[u8]) -> u32 {
    let tail: [u8; 4] = frame[frame.len() - 4..].try_into().expect("4 bytes");
    u32::from_be_bytes(tail)
}

/// The snapshot: [`VIP`]:80/TCP to [`BACKEND`].
pub(crate) fn snapshot() -> Arc<CompiledSnapshot> {
    let node = NodeParams {
        src_v4: Some(Ipv4Addr::new(10, 200, 2, 1)),
        ..NodeParams::default()
    };
    let snap = SnapshotBuilder::new(node)
        .generation(1)
        .vip(
            VIP.into(),
            80,
            Proto::Tcp,
            251,
            vec![BackendSpec::new(BACKEND.into())],
        )
        .build()
        .expect("snapshot")
        .validated()
        .expect("a valid snapshot");
    Arc::new(CompiledSnapshot::new(&snap))
}

/// A packet thread's next hops from a table: the backend out of [`IFINDEX`].
impl PacketFib for StaticFib {
    fn set_now(&self, _now_ns: u64) {}

    fn stats(&self) -> FibStats {
        FibStats::default()
    }
}

/// How a rig is built.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RigConfig {
    pub frames: u32,
    pub threads: usize,
    pub queue_depth: usize,
    pub ring: u32,
    pub batch: u32,
    pub flush_ns: u64,
}

impl Default for RigConfig {
    fn default() -> Self {
        Self {
            frames: 256,
            threads: 2,
            queue_depth: 256,
            ring: 64,
            batch: 16,
            flush_ns: 50_000,
        }
    }
}

/// An I/O thread's state over one simulated socket, and everything around it.
#[derive(Debug)]
pub(crate) struct Rig {
    pub umem: Arc<Umem>,
    pub io: Io,
    pub kernel: SimSocket,
    /// Packet thread `i`'s receiving queue (popped by the test, or by a [`Worker`]).
    pub to_threads: Vec<Option<Consumer<RxItem>>>,
    /// Packet thread `i`'s transmission queue (pushed by the test, or by a [`Worker`]).
    pub from_threads: Vec<Option<Producer<TxItem>>>,
    pub shared: Vec<Arc<WorkerShared>>,
    pub published: Arc<Published>,
    pub stats: Arc<IoStats>,
    pub wake: Arc<IoWake>,
}

impl Rig {
    pub(crate) fn new(cfg: RigConfig) -> Self {
        let umem = Arc::new(
            Umem::new(UmemConfig {
                frames: cfg.frames,
                frame_size: 2048,
                check_frames: true,
            })
            .expect("UMEM"),
        );
        let (rings, kernel) = socket(&umem, cfg.ring);
        let snap = snapshot();
        let published = Arc::new(Published::new(Arc::clone(&snap)));
        let (mut to_workers, mut to_threads) = (Vec::new(), Vec::new());
        let (mut from_workers, mut from_threads) = (Vec::new(), Vec::new());
        let mut shared = Vec::new();
        for _ in 0..cfg.threads {
            let (p, c) = spsc::channel(cfg.queue_depth);
            to_workers.push(p);
            to_threads.push(Some(c));
            let (p, c) = spsc::channel(cfg.queue_depth);
            from_threads.push(Some(p));
            from_workers.push(c);
            let fwd = Forwarder::new(ForwarderConfig {
                cpus: 1,
                ..ForwarderConfig::default()
            });
            shared.push(Arc::new(WorkerShared::new(Arc::new(Mutex::new(fwd)))));
        }
        let stats = Arc::new(IoStats::default());
        let wake = Arc::new(IoWake::new().expect("eventfd"));
        let io = Io {
            free: umem.take_frames().expect("frames"),
            umem: Arc::clone(&umem),
            socks: vec![SockIo {
                fill: rings.fill,
                comp: rings.comp,
                rx: rings.rx,
                tx: rings.tx,
                unflushed: 0,
                oldest_ns: 0,
                backlog: Default::default(),
            }],
            to_workers,
            from_workers,
            workers: shared.clone(),
            // unparked after a push: harmless on the test's own thread until real packet
            // threads replace these
            threads: vec![std::thread::current(); cfg.threads],
            wake: Arc::clone(&wake),
            stats: Arc::clone(&stats),
            published: Arc::clone(&published),
            snap,
            snap_gen: 1,
            batch: cfg.batch,
            flush_ns: cfg.flush_ns,
            spin: Duration::from_micros(20),
            cpu: None,
        };
        Self {
            umem,
            io,
            kernel,
            to_threads,
            from_threads,
            shared,
            published,
            stats,
            wake,
        }
    }

    /// Packet thread `i` with the queues the rig holds for it, over a table FIB.
    pub(crate) fn worker(&mut self, i: usize) -> Worker<StaticFib> {
        let hop = NextHop {
            ifindex: IFINDEX,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            mtu: 1500,
        };
        Worker {
            index: i,
            decider: Decider {
                umem: Arc::clone(&self.umem),
                fib: StaticFib::new().default_route(BACKEND.into(), Ok(hop)),
                socks: SocketMap {
                    socks: vec![(IFINDEX, 0)],
                },
                shared: Arc::clone(&self.shared[i]),
                hold: FrameHold::new(HoldLimits::default()),
                trace: TraceSink::default(),
                out: Vec::new(),
            },
            rx: self.to_threads[i].take().expect("queue not given yet"),
            tx: self.from_threads[i].take().expect("queue not given yet"),
            published: Arc::clone(&self.published),
            io_wake: Arc::clone(&self.wake),
            batch: self.io.batch as usize,
            spin: Duration::from_micros(20),
            cpu: None,
        }
    }
}

/// A run-to-completion thread over simulated sockets, and what the test reads around it.
#[derive(Debug)]
pub(crate) struct RtcRig {
    pub umem: Arc<Umem>,
    pub rtc: Rtc<StaticFib>,
    /// The kernel's side of socket `i`: interface `IFINDEX + i`, queue 0.
    pub kernels: Vec<SimSocket>,
    pub shared: Arc<WorkerShared>,
    pub published: Arc<Published>,
    pub stats: Arc<IoStats>,
}

impl RtcRig {
    /// The thread owns queue 0 of `ifaces` interfaces (`IFINDEX`, `IFINDEX + 1`, …) and all of
    /// the pool; its FIB sends the backend out of interface `IFINDEX + egress`.
    pub(crate) fn new(cfg: RigConfig, ifaces: u32, egress: u32) -> Self {
        let umem = Arc::new(
            Umem::new(UmemConfig {
                frames: cfg.frames,
                frame_size: 2048,
                check_frames: true,
            })
            .expect("UMEM"),
        );
        let (mut socks, mut kernels) = (Vec::new(), Vec::new());
        for _ in 0..ifaces {
            let (rings, kernel) = socket(&umem, cfg.ring);
            socks.push(SockIo {
                fill: rings.fill,
                comp: rings.comp,
                rx: rings.rx,
                tx: rings.tx,
                unflushed: 0,
                oldest_ns: 0,
                backlog: Default::default(),
            });
            kernels.push(kernel);
        }
        let snap = snapshot();
        let published = Arc::new(Published::new(Arc::clone(&snap)));
        let stats = Arc::new(IoStats::default());
        let fwd = Forwarder::new(ForwarderConfig {
            cpus: 1,
            ..ForwarderConfig::default()
        });
        let shared = Arc::new(WorkerShared::new(Arc::new(Mutex::new(fwd))));
        let hop = NextHop {
            ifindex: IFINDEX + egress,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            mtu: 1500,
        };
        let fib = (0..ifaces).fold(
            StaticFib::new().default_route(BACKEND.into(), Ok(hop)),
            |f, i| f.tx_port(IFINDEX + i),
        );
        let io = Io {
            free: umem.take_frames().expect("frames"),
            umem: Arc::clone(&umem),
            socks,
            to_workers: Vec::new(),
            from_workers: Vec::new(),
            workers: Vec::new(),
            threads: Vec::new(),
            wake: Arc::new(IoWake::new().expect("eventfd")),
            stats: Arc::clone(&stats),
            published: Arc::clone(&published),
            snap,
            snap_gen: 1,
            batch: cfg.batch,
            flush_ns: cfg.flush_ns,
            spin: Duration::from_micros(20),
            cpu: None,
        };
        let rtc = Rtc {
            index: 0,
            io,
            decider: Decider {
                umem: Arc::clone(&umem),
                fib,
                socks: SocketMap {
                    socks: (0..ifaces).map(|i| (IFINDEX + i, 0)).collect(),
                },
                shared: Arc::clone(&shared),
                hold: FrameHold::new(HoldLimits::default()),
                trace: TraceSink::default(),
                out: Vec::new(),
            },
        };
        Self {
            umem,
            rtc,
            kernels,
            shared,
            published,
            stats,
        }
    }
}
