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
//! (`setsid`), loads `stator_vgen`, generates from a thread in the sender's namespace pinned to
//! its CPU, and writes `<frames> <cpu_ns>` after every chunk; it stops at end of its standard
//! input (the parent closed it, or died), after `--max-frames`, or after `--max-seconds`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stator_lab::netns::Netns;
use stator_xdp::testrun::run_xdp_live;
use stator_xdp::veth_bench::VethBench;

use crate::BenchError;

/// Frames per generator system call (the kernel transmits them in batches of [`GEN_BATCH`]).
const CHUNK: u32 = 16_384;
/// Frames per batch inside one call: the kernel flushes redirects (and runs the receiving
/// softirq) after each.
const GEN_BATCH: u32 = 64;

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
}

/// The child's side: generates until told to stop; see the module documentation.
///
/// # Errors
/// [`BenchError`] when the program cannot be loaded or run.
pub fn run_child(args: &GenArgs) -> Result<(), BenchError> {
    // A session of its own, so an autogroup of its own. (A child of `stator bench udp` is not a
    // process-group leader, so this cannot fail; if it did, the generator would merely share
    // the parent's group.)
    // SAFETY: setsid(2) takes no pointers and changes only this process's session.
    #[allow(unsafe_code)]
    unsafe {
        libc::setsid();
    }
    let frame = hex_decode(&args.frame).ok_or_else(|| BenchError::Options {
        reason: "--frame: not hex".into(),
    })?;
    let mut bench = VethBench::load()?;
    bench.set_frame(&frame, args.flows, args.flow_word, args.ifindex)?;
    let fd = bench.generator()?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    // end of standard input: the parent closed it or is gone
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        s.store(true, Relaxed);
    });
    let (max_frames, ifindex, cpu) = (args.max_frames, args.ifindex, args.cpu);
    let deadline = Instant::now() + Duration::from_secs_f64(args.max_seconds.max(0.0));
    let worker = Netns::existing(&args.netns).spawn_thread(move || -> std::io::Result<()> {
        let pinned = crate::pin::pin_to_cpu(cpu);
        let mut out = std::io::stdout().lock();
        writeln!(out, "pinned {pinned}")?;
        let mut sent = 0u64;
        while !stop.load(Relaxed) && sent < max_frames && Instant::now() < deadline {
            let n = CHUNK.min(u32::try_from(max_frames - sent).unwrap_or(CHUNK));
            run_xdp_live(&fd, &frame, n, GEN_BATCH, ifindex)?;
            sent += u64::from(n);
            let cpu_ns = super::recv::own_cpu_time().as_nanos();
            writeln!(out, "{sent} {cpu_ns}")?;
            out.flush()?;
        }
        Ok(())
    })?;
    worker
        .join()
        .map_err(|_| BenchError::io("the generator", std::io::Error::other("panicked")))?
        .map_err(|e| BenchError::io("BPF_PROG_TEST_RUN in live-frames mode", e))
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
    /// `max_seconds`.
    pub fn start(spec: &GenSpec, max_frames: u64, max_seconds: f64) -> Result<Self, BenchError> {
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
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex_encode(&b), "0001abff");
        assert_eq!(hex_decode("0001abff").unwrap(), b);
        assert!(hex_decode("abc").is_none());
        assert!(hex_decode("zz").is_none());
    }
}
