//! The generator in a process of its own.
//!
//! The article's sender is another machine; here it is another process, in a session of its
//! own, as a user would start a sender from another terminal. This matters on a shared
//! machine: Linux's autogroup scheduler gives each session one share of the CPUs and divides
//! it among the session's threads by where they are runnable, so a generator busy on one CPU
//! in the receivers' own process would take most of that share and leave a sleeping receiver
//! on the other CPU with a sliver of it.
//!
//! The parent runs `stator bench udp-gen …` (hidden) with pipes: the child starts a session
//! (`setsid`), loads `stator_vgen` and attaches it to an idle interface (`--keeper`: see
//! `VethBench::keep_generator_dispatched`: one generator then kept its CPU busy instead of 57%
//! of the time, 0.39 → 0.56 Mpps with `--quick --steps 3` here, and pacing became possible), generates from a thread in the sender's namespace pinned to its CPU, and
//! writes `<frames> <cpu_ns>` every 5 ms; it stops at end of its standard input (the parent
//! closed it, or died), after `--max-frames`, or after `--max-seconds`.
//!
//! With `--rate` it paces itself: chunks of a millisecond's frames, each started at its due
//! time. A generator that falls more than [`MAX_LAG`] behind (its CPU was
//! taken) restarts its schedule instead of catching up in a burst, so no window of the
//! measurement sees more than the rate. Several generators ([`Generators`]) share one rate.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::veth_programs::VethBench;
use stator_lab::netns::Netns;
use stator_xdp::testrun::run_xdp_live;

use crate::BenchError;

/// Frames per generator system call (the kernel transmits them in batches of [`GEN_BATCH`]).
const CHUNK: u32 = 16_384;
/// Frames per batch inside one call: the kernel flushes redirects (and runs the receiving
/// softirq) after each.
const GEN_BATCH: u32 = 64;
/// How far a paced generator may fall behind its schedule before it gives up on catching up.
const MAX_LAG: Duration = Duration::from_millis(10);
/// How often a generator reports its count.
const REPORT_EVERY: Duration = Duration::from_millis(5);

/// Arguments of the hidden `stator bench udp-gen` (started by `stator bench udp` only).
#[derive(Debug, Clone, clap::Args)]
pub struct GenArgs {
    /// The sender's namespace.
    #[arg(long)]
    pub netns: String,
    /// Interface index of the sender's veth, in that namespace.
    #[arg(long)]
    pub ifindex: u32,
    /// CPU to pin the generating thread to.
    #[arg(long)]
    pub cpu: usize,
    /// Source ports to cycle through.
    #[arg(long)]
    pub flows: u32,
    /// Offset of the big-endian word varied per flow.
    #[arg(long)]
    pub flow_word: u32,
    /// The frame, in hex.
    #[arg(long)]
    pub frame: String,
    /// Stop after this many frames.
    #[arg(long)]
    pub max_frames: u64,
    /// Stop after this many seconds.
    #[arg(long)]
    pub max_seconds: f64,
    /// Frames per second (0: as fast as it can).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// An idle interface in the sender's namespace to attach the program to, which keeps it in
    /// the kernel's XDP dispatcher (see `VethBench::keep_generator_dispatched`).
    #[arg(long)]
    pub keeper: Option<String>,
}

/// The child's side: generates until told to stop; see the module documentation.
///
/// # Errors
/// [`BenchError`] when the program cannot be loaded or run.
pub fn run_child(args: &GenArgs) -> Result<(), BenchError> {
    // A session of its own, so an autogroup of its own. (A child of `stator bench udp` is not a
    // process-group leader, so this cannot fail; if it did, the generator would merely share
    // the parent's group.)
    let _ = stator_sys::process::new_session();
    let frame = Arc::new(hex_decode(&args.frame).ok_or_else(|| BenchError::Options {
        reason: "--frame: not hex".into(),
    })?);
    let mut bench = VethBench::load()?;
    bench.set_frame(&frame, args.flows, args.flow_word, args.ifindex)?;
    if let Some(keeper) = args.keeper.clone() {
        let (back, kept) = Netns::existing(&args.netns).run_in(move || {
            let kept = bench.keep_generator_dispatched(&keeper);
            (bench, kept)
        })?;
        bench = back;
        kept?;
    }
    let fd = Arc::new(bench.generator()?);
    let rate = (args.rate.is_finite() && args.rate > 0.0).then_some(args.rate);
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        schedule: Mutex::new((0, rate.map(Pace::new))),
        max_frames: args.max_frames,
        deadline: Instant::now() + Duration::from_secs_f64(args.max_seconds.max(0.0)),
        chunk: rate.map_or(CHUNK, paced_chunk),
    });
    let s = Arc::clone(&shared);
    // end of standard input: the parent closed it or is gone
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        s.stop.store(true, Relaxed);
    });
    let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
    let (sh, ifindex, cpu) = (Arc::clone(&shared), args.ifindex, args.cpu);
    let worker = Netns::existing(&args.netns).spawn_thread(move || {
        let _ = pinned_tx.send(crate::pin::pin_to_cpu(cpu));
        generate(&sh, &*fd, &frame, ifindex)
    })?;
    let pinned = pinned_rx.recv().unwrap_or(false);
    let mut out = std::io::stdout().lock();
    let report = |out: &mut std::io::StdoutLock<'_>| -> std::io::Result<()> {
        let cpu_ns = super::recv::process_cpu_time().as_nanos();
        writeln!(out, "{} {cpu_ns}", shared.sent.load(Relaxed))?;
        out.flush()
    };
    let io = |e| BenchError::io("the generator's report", e);
    writeln!(out, "pinned {pinned}").map_err(io)?;
    out.flush().map_err(io)?;
    while !worker.is_finished() {
        std::thread::sleep(REPORT_EVERY);
        report(&mut out).map_err(io)?;
    }
    let result = worker
        .join()
        .map_err(|_| BenchError::io("the generator", std::io::Error::other("panicked")))?
        .map_err(|e| BenchError::io("BPF_PROG_TEST_RUN in live-frames mode", e));
    report(&mut out).map_err(io)?;
    result
}

/// What the generating thread shares with the one that reports and the one that reads stdin.
struct Shared {
    stop: AtomicBool,
    /// Frames generated (their calls returned).
    sent: AtomicU64,
    /// Frames claimed, and the schedule when paced.
    schedule: Mutex<(u64, Option<Pace>)>,
    max_frames: u64,
    deadline: Instant,
    chunk: u32,
}

/// The generating thread: claims a chunk (and, paced, its start time), waits for that time,
/// sends it, until told to stop or a bound is reached.
fn generate(
    shared: &Shared,
    fd: &impl std::os::fd::AsFd,
    frame: &[u8],
    ifindex: u32,
) -> std::io::Result<()> {
    loop {
        if shared.stop.load(Relaxed) || Instant::now() >= shared.deadline {
            return Ok(());
        }
        let (n, at) = {
            let mut g = shared
                .schedule
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let left = shared.max_frames.saturating_sub(g.0);
            if left == 0 {
                return Ok(());
            }
            let n = shared
                .chunk
                .min(u32::try_from(left).unwrap_or(shared.chunk));
            g.0 += u64::from(n);
            (
                n,
                g.1.as_mut().map(|p| p.claim(u64::from(n), Instant::now())),
            )
        };
        if let Some(at) = at {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        run_xdp_live(fd, frame, n, GEN_BATCH, ifindex)?;
        shared.sent.fetch_add(u64::from(n), Relaxed);
    }
}

/// Frames per chunk of a generator paced at `rate` a second: a millisecond's worth, at least a
/// batch, at most [`CHUNK`].
fn paced_chunk(rate: f64) -> u32 {
    ((rate / 1000.0) as u32).clamp(GEN_BATCH, CHUNK)
}

/// A paced generator's schedule: `rate` frames a second from `base`, restarted (rather than
/// caught up) when it falls more than [`MAX_LAG`] behind.
#[derive(Debug, Clone, Copy)]
struct Pace {
    rate: f64,
    base: Instant,
    /// Frames sent since `base`.
    since_base: u64,
}

impl Pace {
    fn new(rate: f64) -> Self {
        Self {
            rate,
            base: Instant::now(),
            since_base: 0,
        }
    }

    /// When the frames claimed so far are due.
    fn due(&self) -> Instant {
        self.base + Duration::from_secs_f64(self.since_base as f64 / self.rate)
    }

    /// Claims `n` frames at `now`: when they may start (the frames claimed before them are
    /// then due). A schedule left more than [`MAX_LAG`] behind starts again at `now`.
    fn claim(&mut self, n: u64, now: Instant) -> Instant {
        if now.saturating_duration_since(self.due()) > MAX_LAG {
            self.base = now;
            self.since_base = 0;
        }
        let at = self.due();
        self.since_base += n;
        at
    }
}

/// What the parent needs to start a generator.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// The sender's namespace.
    pub netns: String,
    /// Interface index of the sender's veth.
    pub ifindex: u32,
    /// CPU of the generating thread.
    pub cpu: usize,
    /// Flows.
    pub flows: u32,
    /// Offset of the varied word.
    pub flow_word: u32,
    /// The frame.
    pub frame: Vec<u8>,
    /// The idle interface its program is attached to (see [`GenArgs::keeper`]).
    pub keeper: Option<String>,
}

/// A running generator process, seen from the parent.
#[derive(Debug)]
pub struct Generator {
    child: Child,
    stdin: Option<ChildStdin>,
    offered: Arc<AtomicU64>,
    cpu_ns: Arc<AtomicU64>,
    pinned: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl Generator {
    /// Starts `stator bench udp-gen` (this executable) for at most `max_frames` frames and
    /// `max_seconds`, at `rate` frames a second when given.
    pub fn start(
        spec: &GenSpec,
        max_frames: u64,
        max_seconds: f64,
        rate: Option<f64>,
    ) -> Result<Self, BenchError> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::io("finding this executable to start the generator", e))?;
        let mut child = Command::new(&exe)
            .args(["bench", "udp-gen", "--netns", &spec.netns])
            .args(["--ifindex", &spec.ifindex.to_string()])
            .args(["--cpu", &spec.cpu.to_string()])
            .args(["--flows", &spec.flows.to_string()])
            .args(["--flow-word", &spec.flow_word.to_string()])
            .args(["--frame", &hex_encode(&spec.frame)])
            .args(["--max-frames", &max_frames.to_string()])
            .args(["--max-seconds", &max_seconds.to_string()])
            .args(["--rate", &rate.unwrap_or(0.0).to_string()])
            .args(
                spec.keeper
                    .iter()
                    .flat_map(|k| ["--keeper".to_string(), k.clone()]),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::io(format!("starting {} bench udp-gen", exe.display()), e))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| {
            BenchError::io("the generator's output", std::io::Error::other("no pipe"))
        })?;
        let offered = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let pinned = Arc::new(AtomicBool::new(false));
        let (o, c, p) = (
            Arc::clone(&offered),
            Arc::clone(&cpu_ns),
            Arc::clone(&pinned),
        );
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(v) = line.strip_prefix("pinned ") {
                    p.store(v == "true", Relaxed);
                    let _ = started_tx.send(());
                    continue;
                }
                let mut f = line.split_whitespace().map(|w| w.parse::<u64>().ok());
                if let (Some(Some(frames)), Some(Some(ns))) = (f.next(), f.next()) {
                    o.store(frames, Relaxed);
                    c.store(ns, Relaxed);
                }
            }
        });
        let mut generator = Self {
            child,
            stdin,
            offered,
            cpu_ns,
            pinned,
            reader: Some(reader),
        };
        // Wait until it runs (loading the program takes a moment), or report why it did not.
        if started_rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let status = generator.finish();
            return Err(BenchError::io(
                "the generator process",
                std::io::Error::other(format!(
                    "did not start ({status}); it is `{} bench udp-gen`",
                    exe.display()
                )),
            ));
        }
        Ok(generator)
    }

    /// Frames generated so far (updated every chunk of 16,384).
    pub fn offered(&self) -> u64 {
        self.offered.load(Relaxed)
    }

    /// The generating thread's CPU time so far: making the frames and, in the softirq that
    /// follows each batch on its CPU, the receiving kernel's work on them.
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_ns.load(Relaxed)
    }

    /// Whether the generating thread was pinned.
    pub fn pinned(&self) -> bool {
        self.pinned.load(Relaxed)
    }

    /// Stops it and waits for it: frames generated in all.
    pub fn stop(mut self) -> Result<u64, BenchError> {
        let status = self.finish();
        if status != "exit status: 0" {
            return Err(BenchError::io(
                "the generator process",
                std::io::Error::other(status),
            ));
        }
        // the last batch may still be in a ring
        std::thread::sleep(Duration::from_millis(20));
        Ok(self.offered())
    }

    /// Closes its input, waits (killing it after 10 s), joins the reader; its exit status.
    fn finish(&mut self) -> String {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => {
                    let _ = self.child.kill();
                    break self
                        .child
                        .wait()
                        .map_or_else(|e| e.to_string(), |s| format!("killed: {s}"));
                }
            }
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        status
    }
}

/// Several generators, one per CPU, started and stopped together; their counts are summed.
#[derive(Debug)]
pub struct Generators {
    procs: Vec<Generator>,
}

impl Generators {
    /// Starts one generator per spec, each with its share of `max_frames` and of `rate`.
    pub fn start(
        specs: &[GenSpec],
        max_frames: u64,
        max_seconds: f64,
        rate: Option<f64>,
    ) -> Result<Self, BenchError> {
        let n = specs.len().max(1);
        let procs = specs
            .iter()
            .map(|s| {
                Generator::start(
                    s,
                    max_frames.div_ceil(n as u64),
                    max_seconds,
                    rate.map(|r| r / n as f64),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { procs })
    }

    /// Frames generated so far, all generators.
    pub fn offered(&self) -> u64 {
        self.procs.iter().map(Generator::offered).sum()
    }

    /// Frames generated so far, per generator.
    pub fn offered_each(&self) -> Vec<u64> {
        self.procs.iter().map(Generator::offered).collect()
    }

    /// The generating threads' CPU time so far, all generators.
    pub fn cpu_ns(&self) -> u64 {
        self.procs.iter().map(Generator::cpu_ns).sum()
    }

    /// Whether every generating thread was pinned.
    pub fn pinned(&self) -> bool {
        self.procs.iter().all(Generator::pinned)
    }

    /// Stops them all and waits: frames generated in all, or the first failure.
    pub fn stop(self) -> Result<u64, BenchError> {
        let mut total = Ok(0);
        for p in self.procs {
            match (p.stop(), &mut total) {
                (Ok(n), Ok(t)) => *t += n,
                (Err(e), Ok(_)) => total = Err(e),
                _ => {}
            }
        }
        total
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        if self.reader.is_some() {
            let _ = self.finish();
        }
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_schedule_spaces_chunks_and_never_catches_up_in_a_burst() {
        let mut p = Pace::new(1000.0);
        let t0 = p.base;
        assert_eq!(p.claim(10, t0), t0, "the first chunk starts at once");
        assert_eq!(
            p.claim(10, t0),
            t0 + Duration::from_millis(10),
            "10 frames at 1,000/s"
        );
        assert_eq!(p.claim(10, t0), t0 + Duration::from_millis(20));
        // a claim on time keeps the schedule
        assert_eq!(
            p.claim(10, t0 + Duration::from_millis(35)),
            t0 + Duration::from_millis(30)
        );
        // 50 ms late: the schedule restarts instead of sending 50 frames at once
        let late = t0 + Duration::from_millis(90);
        assert_eq!(p.claim(5, late), late);
        assert_eq!(p.claim(5, late), late + Duration::from_millis(5));
        assert_eq!(paced_chunk(100.0), GEN_BATCH);
        assert_eq!(paced_chunk(1e6), 1000);
        assert_eq!(paced_chunk(1e12), CHUNK);
    }

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex_encode(&b), "0001abff");
        assert_eq!(hex_decode("0001abff").unwrap(), b);
        assert!(hex_decode("abc").is_none());
        assert!(hex_decode("zz").is_none());
    }
}
