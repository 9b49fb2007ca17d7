//! How the AF_XDP plane runs: thread counts and CPUs, the packet pool, rings, batches and the
//! flush timer. Defaults fit a 2-core machine: one I/O thread (steering and muxing) and one
//! packet thread.

use std::time::Duration;

use stator_core::HoldLimits;

use crate::error::AfxdpError;
use crate::socket::{BindMode, RingSizes};
use crate::umem::UmemConfig;

/// How the plane's threads share the work (docs/afxdp.md "Threads").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Threading {
    /// The paper's design (§3.1): one I/O thread owns every ring and steers each frame by its
    /// 5-tuple to a packet thread's queue, and muxes the decided frames back into TX rings.
    #[default]
    Steered,
    /// One thread per RX queue: thread `q` owns queue `q`'s socket on every interface (its
    /// four rings each), reads a batch, decides it in place and writes it to TX itself — no
    /// queue between threads. Every interface binds exactly `packet_threads` RX queues.
    RunToCompletion,
}

impl Threading {
    /// The configuration's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Steered => "steered",
            Self::RunToCompletion => "run_to_completion",
        }
    }
}

/// Options of the AF_XDP plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfxdpConfig {
    /// How the threads share the work.
    pub threading: Threading,
    /// Packet threads (each with its own connection table). Run to completion: the threads,
    /// one per RX queue of every interface.
    pub packet_threads: usize,
    /// CPUs to pin to: steered, the I/O thread's first, then one per packet thread; run to
    /// completion, one per thread. Empty with `pin`: the CPUs this process may use, in that
    /// order (wrapping).
    pub cpus: Vec<usize>,
    /// Pin the threads at all.
    pub pin: bool,
    /// The packet pool.
    pub umem: UmemConfig,
    /// Ring sizes of every socket.
    pub rings: RingSizes,
    /// Frames per batch: RX read, packet-thread batch, TX flush.
    pub batch: u32,
    /// A TX batch is flushed at the latest this long after its first frame (§3.2: 50 µs).
    pub flush_timeout: Duration,
    /// Capacity of each packet thread's receiving and transmission queue.
    pub queue_depth: usize,
    /// RX queues to bind per interface (`None`: every RX queue the interface has).
    pub queues: Option<u32>,
    /// Copy, zero-copy, or whatever the driver offers.
    pub bind_mode: BindMode,
    /// How long an idle thread busy-polls before it sleeps.
    pub spin: Duration,
    /// Entries per packet thread's connection table.
    pub ct_capacity: usize,
    /// Seed of the connection tables' hash (thread `i` uses `seed + i`).
    pub ct_seed: u64,
    /// Next-hop cache lifetime (`None`: ask the kernel for every packet).
    pub fib_cache: Option<Duration>,
    /// The holder of early fragments (`fragments.hold_frames`, `hold_bytes`, `timeout`), for the
    /// whole plane: see [`hold_limits_per_thread`](Self::hold_limits_per_thread).
    pub hold: HoldLimits,
}

impl Default for AfxdpConfig {
    fn default() -> Self {
        Self {
            threading: Threading::Steered,
            packet_threads: 1,
            cpus: Vec::new(),
            pin: true,
            umem: UmemConfig::default(),
            rings: RingSizes::all(2048),
            batch: 64,
            flush_timeout: Duration::from_micros(50),
            queue_depth: 1024,
            queues: None,
            bind_mode: BindMode::Auto,
            spin: Duration::from_micros(20),
            ct_capacity: stator_abi::STATOR_DEFAULT_CT_ENTRIES as usize,
            ct_seed: 0,
            fib_cache: Some(Duration::from_secs(1)),
            hold: HoldLimits::default(),
        }
    }
}

impl AfxdpConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), AfxdpError> {
        self.umem.validate()?;
        if !(1..=64).contains(&self.packet_threads) {
            return Err(AfxdpError::invalid(format!(
                "packet_threads {} (1 ..= 64)",
                self.packet_threads
            )));
        }
        if !(1..=1024).contains(&self.batch) {
            return Err(AfxdpError::invalid(format!(
                "batch {} (1 ..= 1024)",
                self.batch
            )));
        }
        if self.queue_depth < 2 || self.queue_depth > 1 << 16 {
            return Err(AfxdpError::invalid(format!(
                "queue_depth {} (2 ..= 65536)",
                self.queue_depth
            )));
        }
        if self.flush_timeout.is_zero() || self.flush_timeout > Duration::from_millis(10) {
            return Err(AfxdpError::invalid(format!(
                "flush_timeout {:?} (more than 0, at most 10 ms)",
                self.flush_timeout
            )));
        }
        if self.queues == Some(0) {
            return Err(AfxdpError::invalid("queues = 0"));
        }
        let rtc = self.threading == Threading::RunToCompletion;
        if !self.cpus.is_empty() && self.cpus.len() != self.threads() {
            let want = if rtc {
                "one per thread"
            } else {
                "one for the I/O thread and one per packet thread"
            };
            return Err(AfxdpError::invalid(format!(
                "cpus lists {} CPUs: {want} ({}) are needed",
                self.cpus.len(),
                self.threads()
            )));
        }
        if rtc
            && self
                .queues
                .is_some_and(|q| q as usize != self.packet_threads)
        {
            return Err(AfxdpError::invalid(format!(
                "queues = {} with run_to_completion: one thread per RX queue, so queues must \
                 equal packet_threads ({})",
                self.queues.unwrap_or(0),
                self.packet_threads
            )));
        }
        Ok(())
    }

    /// The threads the plane runs: steered, the I/O thread and the packet threads; run to
    /// completion, the packet threads alone.
    pub fn threads(&self) -> usize {
        match self.threading {
            Threading::Steered => self.packet_threads + 1,
            Threading::RunToCompletion => self.packet_threads,
        }
    }

    /// The CPU of each thread, steered with the I/O thread first (`None`: not pinned).
    pub fn cpu_plan(&self) -> Vec<Option<usize>> {
        let n = self.threads();
        if !self.pin {
            return vec![None; n];
        }
        if !self.cpus.is_empty() {
            return self.cpus.iter().copied().map(Some).collect();
        }
        let allowed = stator_sys::cpu::allowed_cpus().unwrap_or_else(|_| vec![0]);
        (0..n)
            .map(|i| allowed.get(i % allowed.len().max(1)).copied())
            .collect()
    }

    /// Each packet thread's share of the hold (docs/afxdp.md "Fragments"): `hold`'s frames and
    /// bytes split evenly over the threads, and at most a quarter of the pool in all — a held
    /// fragment keeps its UMEM frame, and the fill rings must not run dry because of holds.
    pub fn hold_limits_per_thread(&self) -> HoldLimits {
        let n = self.packet_threads.max(1);
        let pool = (self.umem.frames as usize / 4) / n;
        HoldLimits {
            max_frames: (self.hold.max_frames / n).min(pool),
            max_bytes: self.hold.max_bytes / n,
            timeout_ns: self.hold.timeout_ns,
        }
    }

    /// The next-hop cache lifetime in ns (0 = off).
    pub fn fib_cache_ns(&self) -> u64 {
        self.fib_cache.map_or(0, |d| d.as_nanos() as u64)
    }
}
