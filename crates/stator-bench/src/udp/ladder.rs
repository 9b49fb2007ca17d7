//! The article's receivers, one step at a time, each against the same generator in the same
//! run: what a step receives, what was offered, where the rest was dropped, and what the
//! receiving threads paid per datagram.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::generator::Generators;
use stator_steer::{HashFields, ReuseportSteering, SteeringOptions};

use super::procnet::NsCounters;
use super::recv::{self, MAX_BATCH, Method, Receiver};
use super::rig::Rig;
use crate::BenchError;

/// A rung of the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// 1: one thread, `recvfrom` per datagram, not pinned.
    Naive,
    /// 2: the same, pinned to a core.
    Pinned,
    /// 3: one pinned thread, `recvmmsg` in batches of up to 1,024 (`MSG_WAITFORONE`).
    Mmsg,
    /// 4: two pinned threads reading one socket with `recvmmsg`.
    TwoThreads,
    /// 5: `SO_REUSEPORT`, one socket and one pinned thread per core, `recvmmsg`; the kernel's
    /// 4-tuple hash picks the socket.
    Reuseport,
    /// 6: step 5 with the socket picked by Stator's `SK_REUSEPORT` program (`stator-steer`): a
    /// Maglev table over the threads keyed by the Toeplitz hash of the client's address and
    /// port (the generator has one address and thousands of ports).
    Steered,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 6] = [
        Self::Naive,
        Self::Pinned,
        Self::Mmsg,
        Self::TwoThreads,
        Self::Reuseport,
        Self::Steered,
    ];

    /// The step's number in the issue (1–6).
    pub fn number(self) -> u8 {
        match self {
            Self::Naive => 1,
            Self::Pinned => 2,
            Self::Mmsg => 3,
            Self::TwoThreads => 4,
            Self::Reuseport => 5,
            Self::Steered => 6,
        }
    }

    /// The step of a number.
    pub fn from_number(n: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.number() == n)
    }

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Pinned => "pinned",
            Self::Mmsg => "recvmmsg",
            Self::TwoThreads => "2 threads, 1 socket",
            Self::Reuseport => "SO_REUSEPORT",
            Self::Steered => "reuseport BPF",
        }
    }

    /// What the step's receiver does.
    pub fn what(self) -> &'static str {
        match self {
            Self::Naive => "one thread, recvfrom per datagram, not pinned",
            Self::Pinned => "one thread, recvfrom per datagram, pinned to a core",
            Self::Mmsg => "one pinned thread, recvmmsg batches of up to 1,024, MSG_WAITFORONE",
            Self::TwoThreads => "two pinned threads reading one socket with recvmmsg",
            Self::Reuseport => {
                "one socket (SO_REUSEPORT) and one pinned thread per core, recvmmsg; the kernel's \
                 hash picks the socket"
            }
            Self::Steered => {
                "step 5 with the socket picked by Stator's SK_REUSEPORT program: Maglev table \
                 over the threads, Toeplitz hash of the client address and port"
            }
        }
    }
}

/// How a run is measured.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Measured seconds per step (one line each).
    pub seconds: u32,
    /// Traffic before the measurement starts.
    pub warmup: Duration,
    /// CPUs for receiving threads, in the order they are handed out: the CPUs other than the
    /// generator's first, the generator's last.
    pub rx_cpus: Vec<usize>,
    /// Threads (and sockets) of steps 5 and 6.
    pub threads: usize,
    /// The generators' bound on frames per second of a step (with the time, their count bound).
    pub max_rate: f64,
    /// The offered rate, frames per second in all, when it is fixed (else the generators send
    /// as fast as they can).
    pub rate: Option<f64>,
    /// Receive buffer of every socket (`None`: the kernel's default).
    pub rcvbuf: Option<usize>,
}

/// One thread's share of a step.
#[derive(Debug, Clone, Default)]
pub struct ThreadResult {
    /// The socket it read (index within the step).
    pub socket: usize,
    /// CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Whether the pinning was accepted.
    pub pinned: bool,
    /// Datagrams it read.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// System calls that returned datagrams.
    pub calls: u64,
    /// Its CPU time during the measurement, ns.
    pub cpu_ns: u64,
}

/// One second of a step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Line {
    /// Length of the interval, s.
    pub secs: f64,
    /// Frames generated in it.
    pub offered: u64,
    /// Datagrams read in it.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

impl Line {
    /// The article's line (`0.352M pps  10.730MiB /  90.010Mb`) and the offered rate.
    pub fn render(&self) -> String {
        let s = self.secs.max(1e-9);
        let bps = self.bytes as f64 / s;
        format!(
            "{:7.3}M pps {:7.3}MiB / {:7.3}Mb   (offered {:6.3}M pps)",
            self.packets as f64 / s / 1e6,
            bps / (1024.0 * 1024.0),
            bps * 8.0 / 1e6,
            self.offered as f64 / s / 1e6,
        )
    }
}

/// Counters of the receiver namespace's UDP MIB over a step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mib {
    /// Datagrams delivered to applications.
    pub in_datagrams: u64,
    /// Datagrams to a port nobody listens on.
    pub no_ports: u64,
    /// Datagrams dropped on receive, every reason (includes `RcvbufErrors`).
    pub in_errors: u64,
    /// Datagrams dropped because a socket's receive buffer was full.
    pub rcvbuf_errors: u64,
}

/// Everything measured of one step.
#[derive(Debug, Clone)]
pub struct StepResult {
    /// The step.
    pub step: Step,
    /// Measured time, s.
    pub secs: f64,
    /// Frames the generators made.
    pub offered: u64,
    /// Frames each generator made.
    pub offered_each: Vec<u64>,
    /// Frames the receiver's veth ring took.
    pub veth_delivered: u64,
    /// Frames the receiver's veth ring refused (full).
    pub veth_dropped: u64,
    /// Sockets of the step.
    pub sockets: usize,
    /// Drops counted by the sockets (`/proc/net/udp`), per socket.
    pub socket_drops: Vec<u64>,
    /// The namespace's UDP MIB.
    pub mib: Mib,
    /// Per thread.
    pub threads: Vec<ThreadResult>,
    /// One line per second.
    pub lines: Vec<Line>,
    /// Whether the generator was pinned.
    pub gen_pinned: bool,
    /// The generator thread's CPU time during the measurement, ns (its frames and the
    /// receiving kernel's softirq work done on its CPU after each batch).
    pub gen_cpu_ns: u64,
    /// Step 6: the steering program's decisions over the whole step, by outcome.
    pub steer_counters: Vec<(&'static str, u64)>,
}

impl StepResult {
    /// Datagrams read by all threads.
    pub fn received(&self) -> u64 {
        self.threads.iter().map(|t| t.packets).sum()
    }

    /// Datagrams read per second.
    pub fn pps(&self) -> f64 {
        self.received() as f64 / self.secs.max(1e-9)
    }

    /// Frames offered per second.
    pub fn offered_pps(&self) -> f64 {
        self.offered as f64 / self.secs.max(1e-9)
    }

    /// The receiving threads' CPU time per datagram read, ns.
    pub fn cpu_ns_per_packet(&self) -> f64 {
        let cpu: u64 = self.threads.iter().map(|t| t.cpu_ns).sum();
        cpu as f64 / self.received().max(1) as f64
    }

    /// The receiving threads' CPU time as a share of one CPU over the measurement, percent.
    pub fn cpu_percent(&self) -> f64 {
        let cpu: u64 = self.threads.iter().map(|t| t.cpu_ns).sum();
        100.0 * cpu as f64 / 1e9 / self.secs.max(1e-9)
    }

    /// Share of the offered frames that no receiving thread read, percent.
    pub fn lost_percent(&self) -> f64 {
        100.0 * self.offered.saturating_sub(self.received()) as f64 / self.offered.max(1) as f64
    }

    /// The generators' CPU time as a share of one CPU, percent.
    pub fn gen_cpu_percent(&self) -> f64 {
        100.0 * self.gen_cpu_ns as f64 / 1e9 / self.secs.max(1e-9)
    }

    /// Each thread's share of the datagrams, percent.
    pub fn split(&self) -> Vec<f64> {
        let total = self.received().max(1) as f64;
        self.threads
            .iter()
            .map(|t| 100.0 * t.packets as f64 / total)
            .collect()
    }
}

/// Which sockets and threads a step uses.
struct Layout {
    sockets: usize,
    reuseport: bool,
    method: Method,
    /// (socket, CPU) per thread.
    threads: Vec<(usize, Option<usize>)>,
}

fn layout(step: Step, plan: &Plan) -> Layout {
    let cpu = |i: usize| plan.rx_cpus.get(i % plan.rx_cpus.len().max(1)).copied();
    let mmsg = Method::RecvMmsg(MAX_BATCH);
    match step {
        Step::Naive => Layout {
            sockets: 1,
            reuseport: false,
            method: Method::RecvFrom,
            threads: vec![(0, None)],
        },
        Step::Pinned => Layout {
            sockets: 1,
            reuseport: false,
            method: Method::RecvFrom,
            threads: vec![(0, cpu(0))],
        },
        Step::Mmsg => Layout {
            sockets: 1,
            reuseport: false,
            method: mmsg,
            threads: vec![(0, cpu(0))],
        },
        Step::TwoThreads => Layout {
            sockets: 1,
            reuseport: false,
            method: mmsg,
            threads: vec![(0, cpu(0)), (0, cpu(1))],
        },
        Step::Reuseport | Step::Steered => Layout {
            sockets: plan.threads,
            reuseport: true,
            method: mmsg,
            threads: (0..plan.threads).map(|i| (i, cpu(i))).collect(),
        },
    }
}

/// What is read at the start and the end of a measurement.
struct Sample {
    at: Instant,
    offered: u64,
    offered_each: Vec<u64>,
    gen_cpu: u64,
    threads: Vec<(u64, u64, u64, u64)>,
    ns: NsCounters,
    veth: (u64, u64),
}

type Counts = (Instant, u64, Vec<(u64, u64, u64, u64)>);

fn counts(generator: &Generators, receivers: &[Receiver]) -> Counts {
    let threads = receivers
        .iter()
        .map(|r| {
            (
                r.counts.packets.load(Relaxed),
                r.counts.bytes.load(Relaxed),
                r.counts.calls.load(Relaxed),
                r.cpu_time().map_or(0, |d| d.as_nanos() as u64),
            )
        })
        .collect();
    (Instant::now(), generator.offered(), threads)
}

fn sample(rig: &Rig, generator: &Generators, receivers: &[Receiver]) -> Result<Sample, BenchError> {
    let (at, offered, threads) = counts(generator, receivers);
    Ok(Sample {
        at,
        offered,
        offered_each: generator.offered_each(),
        gen_cpu: generator.cpu_ns(),
        threads,
        ns: rig.ns_counters()?,
        veth: rig.veth_counters()?,
    })
}

/// Runs one step: binds its sockets, starts its threads and the generator, prints a line a
/// second, and returns the figures. Threads, generator and sockets are gone when it returns.
pub fn run_step(
    rig: &Rig,
    step: Step,
    plan: &Plan,
    print: &mut dyn FnMut(&str),
) -> Result<StepResult, BenchError> {
    let layout = layout(step, plan);
    let socks: Vec<Arc<UdpSocket>> = rig
        .bind(layout.sockets, layout.reuseport, plan.rcvbuf)?
        .into_iter()
        .map(Arc::new)
        .collect();
    let steering = if step == Step::Steered {
        Some(steer(&socks)?)
    } else {
        None
    };
    let steer_before = steering
        .as_ref()
        .map(ReuseportSteering::counters)
        .transpose()?;
    let inodes = socks
        .iter()
        .map(|s| recv::inode(&**s))
        .collect::<std::io::Result<Vec<u64>>>()
        .map_err(|e| BenchError::io("reading a socket's inode", e))?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut receivers = Vec::new();
    let mut spawned = Ok(());
    for (i, &(sock, cpu)) in layout.threads.iter().enumerate() {
        match Receiver::spawn(
            format!("udp-rx{i}"),
            Arc::clone(&socks[sock]),
            layout.method,
            cpu,
            Arc::clone(&stop),
        ) {
            Ok(r) => receivers.push(r),
            Err(e) => {
                spawned = Err(BenchError::io("starting a receiving thread", e));
                break;
            }
        }
    }
    let measured = spawned.and_then(|()| measure(rig, plan, &receivers, print));
    stop.store(true, Relaxed);
    let pinned: Vec<bool> = receivers.iter().map(|r| r.pinned).collect();
    let mut ended = Ok(());
    for r in receivers {
        if let Err(e) = r.join() {
            ended = Err(BenchError::io("a receiving thread", e));
        }
    }
    let (start, end, lines, gen_pinned) = measured?;
    ended?;
    let steer_counters = match (&steering, steer_before) {
        (Some(s), Some(before)) => s
            .counters()?
            .since(&before)
            .iter()
            .map(|(c, v)| (c.label(), v))
            .collect(),
        _ => Vec::new(),
    };
    let threads = layout
        .threads
        .iter()
        .zip(start.threads.iter().zip(&end.threads))
        .zip(pinned)
        .map(|((&(socket, cpu), (a, b)), pinned)| ThreadResult {
            socket,
            cpu,
            pinned: cpu.is_some() && pinned,
            packets: b.0 - a.0,
            bytes: b.1 - a.1,
            calls: b.2 - a.2,
            cpu_ns: b.3.saturating_sub(a.3),
        })
        .collect();
    let mib = |name: &str| end.ns.mib(name).saturating_sub(start.ns.mib(name));
    Ok(StepResult {
        step,
        secs: (end.at - start.at).as_secs_f64(),
        offered: end.offered - start.offered,
        offered_each: end
            .offered_each
            .iter()
            .zip(&start.offered_each)
            .map(|(b, a)| b.saturating_sub(*a))
            .collect(),
        veth_delivered: end.veth.0.saturating_sub(start.veth.0),
        veth_dropped: end.veth.1.saturating_sub(start.veth.1),
        sockets: socks.len(),
        socket_drops: inodes
            .iter()
            .map(|&i| {
                end.ns
                    .socket_drops(i)
                    .saturating_sub(start.ns.socket_drops(i))
            })
            .collect(),
        mib: Mib {
            in_datagrams: mib("InDatagrams"),
            no_ports: mib("NoPorts"),
            in_errors: mib("InErrors"),
            rcvbuf_errors: mib("RcvbufErrors"),
        },
        threads,
        lines,
        gen_pinned,
        gen_cpu_ns: end.gen_cpu.saturating_sub(start.gen_cpu),
        steer_counters,
    })
}

/// Loads Stator's steering program for `socks` (worker `i` = socket `i`) and attaches it to
/// their group; the group keeps it while a socket is open.
fn steer(socks: &[Arc<UdpSocket>]) -> Result<ReuseportSteering, BenchError> {
    let workers = u32::try_from(socks.len()).unwrap_or(u32::MAX);
    let mut s = ReuseportSteering::load(&SteeringOptions {
        fields: HashFields::AddrPort,
        ..SteeringOptions::new(workers)
    })?;
    for (i, sock) in (0u32..).zip(socks) {
        s.set_socket(i, &**sock)?;
    }
    s.attach(&*socks[0])?;
    Ok(s)
}

type Measured = (Sample, Sample, Vec<Line>, bool);

fn measure(
    rig: &Rig,
    plan: &Plan,
    receivers: &[Receiver],
    print: &mut dyn FnMut(&str),
) -> Result<Measured, BenchError> {
    let total = plan.warmup + Duration::from_secs(u64::from(plan.seconds)) + Duration::from_secs(1);
    let generator = rig.start_generators(
        (plan.rate.unwrap_or(plan.max_rate) * total.as_secs_f64()) as u64,
        total.as_secs_f64(),
        plan.rate,
    )?;
    let mut run = || -> Result<(Sample, Sample, Vec<Line>), BenchError> {
        std::thread::sleep(plan.warmup);
        let start = sample(rig, &generator, receivers)?;
        let mut lines = Vec::new();
        let mut prev = (start.at, start.offered, start.threads.clone());
        for i in 1..=plan.seconds {
            let due = start.at + Duration::from_secs(u64::from(i));
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let now = counts(&generator, receivers);
            let line = Line {
                secs: (now.0 - prev.0).as_secs_f64(),
                offered: now.1 - prev.1,
                packets: now.2.iter().zip(&prev.2).map(|(b, a)| b.0 - a.0).sum(),
                bytes: now.2.iter().zip(&prev.2).map(|(b, a)| b.1 - a.1).sum(),
            };
            print(&line.render());
            lines.push(line);
            prev = now;
        }
        let end = sample(rig, &generator, receivers)?;
        Ok((start, end, lines))
    };
    let result = run();
    let pinned = generator.pinned();
    generator.stop()?;
    let (start, end, lines) = result?;
    Ok((start, end, lines, pinned))
}
