//! The running forwarder: sockets bound, the I/O thread and the packet threads started, a
//! snapshot published to them — and stopped again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stator_abi::{STATOR_MAX_TX_PORTS, STATOR_MAX_XSK_QUEUES};
use stator_core::{CompiledSnapshot, Forwarder, ForwarderConfig};

pub use crate::worker::Shard;

use crate::config::AfxdpConfig;
use crate::error::AfxdpError;
use crate::fib::KernelFib;
use crate::hold::FrameHold;
use crate::io::{Io, IoStats, IoWake, SockIo};
use crate::socket::XskSocket;
use crate::spsc;
use crate::sys;
use crate::trace::TraceSink;
use crate::umem::Umem;
use crate::worker::{Published, SocketMap, Worker, WorkerShared};

/// The forwarders of `cfg.packet_threads` packet threads: single-CPU, per-thread connection
/// tables (§3.1), thread `i`'s table seeded `ct_seed + i`.
pub fn new_shards(cfg: &AfxdpConfig) -> Vec<Shard> {
    (0..cfg.packet_threads)
        .map(|i| {
            Arc::new(Mutex::new(Forwarder::new(ForwarderConfig {
                cpus: 1,
                ct_capacity: cfg.ct_capacity,
                ct_seed: cfg.ct_seed.wrapping_add(i as u64),
                ..ForwarderConfig::default()
            })))
        })
        .collect()
}

/// An interface the runtime binds sockets on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Name (in the calling thread's network namespace).
    pub name: String,
    /// Index.
    pub ifindex: u32,
}

/// The threads and sockets of a running plane.
#[derive(Debug)]
pub struct Runtime {
    published: Arc<Published>,
    workers: Vec<Arc<WorkerShared>>,
    io_stats: Arc<IoStats>,
    sockets: Vec<XskSocket>,
    handles: Vec<(String, JoinHandle<()>)>,
    threads: Vec<std::thread::Thread>,
    umem: Arc<Umem>,
    slots: Vec<(u32, u32)>,
    /// Heartbeats at the last liveness check: I/O thread first.
    last_beats: Mutex<Vec<u64>>,
}

/// How the runtime is started.
#[derive(Debug)]
pub struct Start<'a> {
    /// Interfaces to bind (each gets a socket per RX queue).
    pub ifaces: &'a [Iface],
    /// Options.
    pub cfg: &'a AfxdpConfig,
    /// The snapshot to start with and its publication generation.
    pub snap: Arc<CompiledSnapshot>,
    /// The packet threads' forwarders (connection tables, counters), one per thread: they
    /// outlive a runtime, so a restart keeps them and readers keep reading them.
    pub shards: Vec<Shard>,
    /// Where the packet threads put the tracer's reports.
    pub trace: TraceSink,
}

impl Runtime {
    /// Binds the sockets, registers them in the redirect program's XSKMAP and starts the
    /// threads (in the calling thread's network namespace, which they inherit).
    pub fn start(kernel: &mut stator_xdp::Forwarder, s: Start<'_>) -> Result<Self, AfxdpError> {
        let cfg = s.cfg;
        cfg.validate()?;
        if s.ifaces.is_empty() {
            return Err(AfxdpError::invalid("no interface to bind"));
        }
        if s.ifaces.len() > STATOR_MAX_TX_PORTS as usize {
            return Err(AfxdpError::invalid(format!(
                "{} interfaces (at most {STATOR_MAX_TX_PORTS})",
                s.ifaces.len()
            )));
        }
        let umem = Arc::new(Umem::new(cfg.umem)?);
        let mut sockets: Vec<XskSocket> = Vec::new();
        let mut socks: Vec<SockIo> = Vec::new();
        let mut slots = Vec::new();
        for (slot, iface) in s.ifaces.iter().enumerate() {
            let queues = cfg
                .queues
                .unwrap_or_else(|| sys::rx_queues(&iface.name))
                .min(STATOR_MAX_XSK_QUEUES);
            kernel.set_xsk_iface(iface.ifindex, slot as u32)?;
            for q in 0..queues {
                let (sock, rings) = XskSocket::bind(
                    &umem,
                    iface.ifindex,
                    q,
                    cfg.rings,
                    cfg.bind_mode,
                    sockets.first(),
                )?;
                kernel.set_xsk_socket(slot as u32, q, sock.fd())?;
                slots.push((slot as u32, q));
                socks.push(SockIo {
                    fill: rings.fill,
                    comp: rings.comp,
                    rx: rings.rx,
                    tx: rings.tx,
                    unflushed: 0,
                    oldest_ns: 0,
                    backlog: Default::default(),
                });
                sockets.push(sock);
            }
        }
        let socket_map = SocketMap {
            socks: sockets.iter().map(|s| (s.ifindex(), s.queue())).collect(),
        };
        let tx_ports: Vec<u32> = s.ifaces.iter().map(|i| i.ifindex).collect();
        let published = Arc::new(Published::new(s.snap));
        let wake = Arc::new(IoWake::new().map_err(|e| AfxdpError::io("eventfd", e))?);
        let io_stats = Arc::new(IoStats::default());
        let n = cfg.packet_threads;
        if s.shards.len() != n {
            return Err(AfxdpError::invalid(format!(
                "{} forwarders for {n} packet threads",
                s.shards.len()
            )));
        }
        let cpus = cfg.cpu_plan();
        let mut to_workers = Vec::new();
        let mut from_workers = Vec::new();
        let mut workers = Vec::new();
        let mut worker_bodies = Vec::new();
        for i in 0..n {
            let (in_tx, in_rx) = spsc::channel(cfg.queue_depth);
            let (out_tx, out_rx) = spsc::channel(cfg.queue_depth);
            let shared = Arc::new(WorkerShared::new(Arc::clone(&s.shards[i])));
            workers.push(Arc::clone(&shared));
            to_workers.push(in_tx);
            from_workers.push(out_rx);
            worker_bodies.push(Worker {
                index: i,
                umem: Arc::clone(&umem),
                rx: in_rx,
                tx: out_tx,
                fib: KernelFib::new(kernel.fib_query_fd()?, cfg.fib_cache_ns(), tx_ports.clone()),
                socks: socket_map.clone(),
                shared,
                published: Arc::clone(&published),
                io_wake: Arc::clone(&wake),
                batch: cfg.batch as usize,
                spin: cfg.spin,
                cpu: cpus.get(1 + i).copied().flatten(),
                hold: FrameHold::new(cfg.hold_limits_per_thread()),
                trace: s.trace.clone(),
            });
        }
        let mut handles = Vec::new();
        let mut threads = Vec::new();
        for w in worker_bodies {
            let name = format!("stator-pkt{}", w.index);
            let h = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || w.run())
                .map_err(|e| AfxdpError::io("spawning a packet thread", e))?;
            threads.push(h.thread().clone());
            handles.push((name, h));
        }
        let io = Io {
            free: umem.take_frames()?,
            umem: Arc::clone(&umem),
            socks,
            to_workers,
            from_workers,
            workers: workers.clone(),
            threads: threads.clone(),
            wake,
            stats: Arc::clone(&io_stats),
            snap: published.current(),
            snap_gen: 1,
            published: Arc::clone(&published),
            batch: cfg.batch,
            flush_ns: cfg.flush_timeout.as_nanos() as u64,
            spin: cfg.spin,
            cpu: cpus.first().copied().flatten(),
        };
        let h = std::thread::Builder::new()
            .name("stator-io".into())
            .spawn(move || drop(io.run()))
            .map_err(|e| AfxdpError::io("spawning the I/O thread", e))?;
        handles.insert(0, ("stator-io".into(), h));
        let rt = Self {
            published,
            workers,
            io_stats,
            sockets,
            handles,
            threads,
            umem,
            slots,
            last_beats: Mutex::new(Vec::new()),
        };
        rt.wait_taken(1, Duration::from_secs(2))?;
        Ok(rt)
    }

    /// Makes `snap` what every packet thread uses, and returns once each has taken it (each
    /// packet is decided under one snapshot: the threads switch between batches).
    pub fn publish(&self, snap: Arc<CompiledSnapshot>) -> Result<(), AfxdpError> {
        let g = self.published.publish(snap);
        for t in &self.threads {
            t.unpark();
        }
        self.wait_taken(g, Duration::from_secs(2))
    }

    fn wait_taken(&self, g: u64, timeout: Duration) -> Result<(), AfxdpError> {
        let start = Instant::now();
        loop {
            let behind: Vec<usize> = self
                .workers
                .iter()
                .enumerate()
                .filter(|(_, w)| w.seen_gen.load(Ordering::Acquire) < g)
                .map(|(i, _)| i)
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(AfxdpError::thread(format!(
                    "packet threads {behind:?} did not take snapshot publication {g} within {timeout:?}"
                )));
            }
            for &i in &behind {
                if let Some(t) = self.threads.get(i) {
                    t.unpark();
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Whether every thread is alive and turning: none has exited, and each loop counter moved
    /// since the last call (threads never sleep longer than 10 ms).
    pub fn check_alive(&self) -> Result<(), AfxdpError> {
        for (name, h) in &self.handles {
            if h.is_finished() {
                return Err(AfxdpError::thread(format!("{name} exited")));
            }
        }
        let mut beats = vec![self.io_stats.heartbeat.load(Ordering::Relaxed)];
        beats.extend(
            self.workers
                .iter()
                .map(|w| w.heartbeat.load(Ordering::Relaxed)),
        );
        let mut last = self.last_beats.lock().unwrap_or_else(|p| p.into_inner());
        if last.len() == beats.len() {
            for (i, (a, b)) in last.iter().zip(&beats).enumerate() {
                if a == b {
                    let name = self.handles.get(i).map_or("a thread", |h| h.0.as_str());
                    return Err(AfxdpError::thread(format!(
                        "{name} made no progress since the last check"
                    )));
                }
            }
        }
        *last = beats;
        let g = self.published.generation.load(Ordering::Acquire);
        for (i, w) in self.workers.iter().enumerate() {
            let seen = w.seen_gen.load(Ordering::Acquire);
            if seen != g {
                return Err(AfxdpError::thread(format!(
                    "packet thread {i} uses snapshot publication {seen}, not {g}"
                )));
            }
        }
        Ok(())
    }

    /// The packet threads' shared state (forwarders, statistics).
    pub(crate) fn workers(&self) -> &[Arc<WorkerShared>] {
        &self.workers
    }

    /// The I/O thread's statistics.
    pub fn io_stats(&self) -> &Arc<IoStats> {
        &self.io_stats
    }

    /// The bound sockets.
    pub fn sockets(&self) -> &[XskSocket] {
        &self.sockets
    }

    /// The UMEM.
    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Stops the threads, removes the sockets from the XSKMAP and closes them.
    pub fn stop(self, kernel: Option<&mut stator_xdp::Forwarder>) {
        if let Some(k) = kernel {
            for &(slot, q) in &self.slots {
                let _ = k.clear_xsk_socket(slot, q);
            }
        }
        self.published.stop.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.unpark();
        }
        for (name, h) in self.handles {
            if h.join().is_err() {
                tracing::error!(thread = %name, "an AF_XDP thread panicked");
            }
        }
    }
}
