//! The running forwarder: sockets bound, the threads started — steered, the I/O thread and the
//! packet threads; run to completion, one thread per RX queue — a snapshot published to them,
//! and stopped again.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stator_abi::{STATOR_MAX_TX_PORTS, STATOR_MAX_XSK_QUEUES};
use stator_core::{CompiledSnapshot, Forwarder, ForwarderConfig};

pub use crate::worker::Shard;

use crate::config::{AfxdpConfig, Threading};
use crate::error::AfxdpError;
use crate::fib::KernelFib;
use crate::hold::FrameHold;
use crate::io::{Io, IoStats, IoWake, SockIo};
use crate::rtc::Rtc;
use crate::socket::XskSocket;
use crate::spsc;
use crate::sys;
use crate::trace::TraceSink;
use crate::umem::{Frame, Umem};
use crate::worker::{Decider, Published, SocketMap, Worker, WorkerShared};

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
    threading: Threading,
    /// What wakes the threads that sleep in `ppoll` (the I/O thread, run-to-completion
    /// threads).
    wakes: Vec<Arc<IoWake>>,
    published: Arc<Published>,
    workers: Vec<Arc<WorkerShared>>,
    io_stats: Arc<IoStats>,
    sockets: Vec<XskSocket>,
    handles: Vec<(String, JoinHandle<()>)>,
    threads: Vec<std::thread::Thread>,
    umem: Arc<Umem>,
    slots: Vec<(u32, u32)>,
    /// Heartbeats at the last liveness check, in `handles`' order.
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
        let rtc = cfg.threading == Threading::RunToCompletion;
        let mut queues_of = Vec::with_capacity(s.ifaces.len());
        for iface in s.ifaces {
            let have = sys::rx_queues(&iface.name);
            let queues = cfg.queues.unwrap_or(have).min(STATOR_MAX_XSK_QUEUES);
            // one thread per RX queue: every interface must have one for each thread, or
            // frames would arrive where no thread reads
            if rtc && queues as usize != cfg.packet_threads {
                return Err(AfxdpError::invalid(format!(
                    "run_to_completion: {} has {have} RX queues and packet_threads is {}; each \
                     thread owns one RX queue of every interface (set packet_threads, or the \
                     interface's channels with `ethtool -L {} combined {}`)",
                    iface.name, cfg.packet_threads, iface.name, cfg.packet_threads
                )));
            }
            queues_of.push(queues);
        }
        let umem = Arc::new(Umem::new(cfg.umem)?);
        let mut sockets: Vec<XskSocket> = Vec::new();
        let mut socks: Vec<SockIo> = Vec::new();
        let mut slots = Vec::new();
        for (slot, (iface, &queues)) in s.ifaces.iter().zip(&queues_of).enumerate() {
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
        let tx_ports: Vec<u32> = s.ifaces.iter().map(|i| i.ifindex).collect();
        let published = Arc::new(Published::new(s.snap));
        let io_stats = Arc::new(IoStats::default());
        let n = cfg.packet_threads;
        if s.shards.len() != n {
            return Err(AfxdpError::invalid(format!(
                "{} forwarders for {n} packet threads",
                s.shards.len()
            )));
        }
        let cpus = cfg.cpu_plan();
        let workers: Vec<Arc<WorkerShared>> = s
            .shards
            .iter()
            .map(|f| Arc::new(WorkerShared::new(Arc::clone(f))))
            .collect();
        let decider = |i: usize, socks: SocketMap| -> Result<Decider, AfxdpError> {
            Ok(Decider {
                umem: Arc::clone(&umem),
                fib: KernelFib::new(kernel.fib_query_fd()?, cfg.fib_cache_ns(), tx_ports.clone()),
                socks,
                shared: Arc::clone(&workers[i]),
                hold: FrameHold::new(cfg.hold_limits_per_thread()),
                trace: s.trace.clone(),
                out: Vec::with_capacity(cfg.batch as usize),
            })
        };
        let io = |socks: Vec<SockIo>, free: Vec<Frame>, wake: Arc<IoWake>, cpu| Io {
            free,
            umem: Arc::clone(&umem),
            socks,
            to_workers: Vec::new(),
            from_workers: Vec::new(),
            workers: Vec::new(),
            threads: Vec::new(),
            wake,
            stats: Arc::clone(&io_stats),
            snap: published.current(),
            snap_gen: 1,
            published: Arc::clone(&published),
            batch: cfg.batch,
            flush_ns: cfg.flush_timeout.as_nanos() as u64,
            spin: cfg.spin,
            cpu,
        };
        let mut handles = Vec::new();
        let mut threads = Vec::new();
        let mut wakes = Vec::new();
        if rtc {
            // thread q: queue q's socket of every interface, in interface order, and an equal
            // share of the pool
            let mut free = umem.take_frames()?;
            let per = free.len() / n;
            let mut groups: Vec<Vec<SockIo>> = (0..n).map(|_| Vec::new()).collect();
            let mut maps: Vec<SocketMap> =
                (0..n).map(|_| SocketMap { socks: Vec::new() }).collect();
            for (sock, x) in socks.into_iter().zip(&sockets) {
                let q = x.queue() as usize;
                groups[q].push(sock);
                maps[q].socks.push((x.ifindex(), x.queue()));
            }
            for (i, (group, map)) in groups.into_iter().zip(maps).enumerate() {
                let share = if i + 1 == n {
                    std::mem::take(&mut free)
                } else {
                    free.split_off(free.len() - per)
                };
                let wake = Arc::new(IoWake::new().map_err(|e| AfxdpError::io("eventfd", e))?);
                wakes.push(Arc::clone(&wake));
                let body = Rtc {
                    index: i,
                    io: io(group, share, wake, cpus.get(i).copied().flatten()),
                    decider: decider(i, map)?,
                };
                let name = format!("stator-rtc{i}");
                let h = std::thread::Builder::new()
                    .name(name.clone())
                    .spawn(move || drop(body.run()))
                    .map_err(|e| AfxdpError::io("spawning a run-to-completion thread", e))?;
                threads.push(h.thread().clone());
                handles.push((name, h));
            }
        } else {
            let socket_map = SocketMap {
                socks: sockets.iter().map(|s| (s.ifindex(), s.queue())).collect(),
            };
            let wake = Arc::new(IoWake::new().map_err(|e| AfxdpError::io("eventfd", e))?);
            wakes.push(Arc::clone(&wake));
            let mut to_workers = Vec::new();
            let mut from_workers = Vec::new();
            for i in 0..n {
                let (in_tx, in_rx) = spsc::channel(cfg.queue_depth);
                let (out_tx, out_rx) = spsc::channel(cfg.queue_depth);
                to_workers.push(in_tx);
                from_workers.push(out_rx);
                let w = Worker {
                    index: i,
                    decider: decider(i, socket_map.clone())?,
                    rx: in_rx,
                    tx: out_tx,
                    published: Arc::clone(&published),
                    io_wake: Arc::clone(&wake),
                    batch: cfg.batch as usize,
                    spin: cfg.spin,
                    cpu: cpus.get(1 + i).copied().flatten(),
                };
                let name = format!("stator-pkt{i}");
                let h = std::thread::Builder::new()
                    .name(name.clone())
                    .spawn(move || w.run())
                    .map_err(|e| AfxdpError::io("spawning a packet thread", e))?;
                threads.push(h.thread().clone());
                handles.push((name, h));
            }
            let io = Io {
                to_workers,
                from_workers,
                workers: workers.clone(),
                threads: threads.clone(),
                ..io(
                    socks,
                    umem.take_frames()?,
                    wake,
                    cpus.first().copied().flatten(),
                )
            };
            let h = std::thread::Builder::new()
                .name("stator-io".into())
                .spawn(move || drop(io.run()))
                .map_err(|e| AfxdpError::io("spawning the I/O thread", e))?;
            handles.insert(0, ("stator-io".into(), h));
        }
        let rt = Self {
            threading: cfg.threading,
            wakes,
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
        self.wake_all();
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
            self.wake_all();
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
        let mut beats = match self.threading {
            Threading::Steered => vec![self.io_stats.heartbeat.load(Ordering::Relaxed)],
            Threading::RunToCompletion => Vec::new(),
        };
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

    /// Unparks the packet threads and wakes the threads sleeping in `ppoll`.
    fn wake_all(&self) {
        for t in &self.threads {
            t.unpark();
        }
        for w in &self.wakes {
            w.wake_now();
        }
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
        self.wake_all();
        for (name, h) in self.handles {
            if h.join().is_err() {
                tracing::error!(thread = %name, "an AF_XDP thread panicked");
            }
        }
    }
}
