//! The differential test's driver: applies every step to both implementations — the XDP
//! program through BPF_PROG_TEST_RUN (`commit`, `set_test_clock`, `test_run` on a pinned CPU)
//! and `stator_core::Forwarder::process` (`CompiledSnapshot`, `now`, the same CPU index, the
//! lab's FIB) — and compares, per frame: the action, the redirect interface (the XDP side's from
//! the output's Ethernet source), the real (the XDP side's from its per-real counter delta), the
//! output bytes, every counter delta (global, drops, per VIP, per real), the flow's
//! connection-table entry on this CPU and the flood-guard window; and for Maglev §4.2–4.4 the
//! fragment-table record of a fragment's datagram, what the program wrote to its ring buffers
//! (a held frame, a tracer report) against what the core returned (`Forwarder::held`,
//! `take_trace`). Held fragments are run again through both once their record exists, as the
//! holder does.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use stator_abi::{
    Beat, Counter, CtEntry, DropReason, Flood, FragEntry, HoldHdr, TraceEvent, Traffic,
};
use stator_core::{
    Action, CompiledSnapshot, CtMode, Forwarder as Core, ForwarderConfig, FragKey, RealId,
    RealState, StaticFib, ValidSnapshot, VecPacketBuf, Verdict, VipId,
};
use stator_xdp::testrun::TestRunOpts;
use stator_xdp::{Forwarder as Xdp, HoldRing, TraceRing};

use crate::common::pin_to_cpu;
use crate::diff::frames::{Change, Class, Frame, Gen, Step};
use crate::diff::lab::Iface;
use crate::diff::world::{Config, SEC, Universe};

/// Counters of one side, in one shape.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Tally {
    global: Vec<u64>,
    drops: Vec<u64>,
    vips: Vec<Traffic>,
    reals: Vec<Traffic>,
}

impl Tally {
    fn since(&self, before: &Tally) -> Tally {
        let sub = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(x, y)| x.wrapping_sub(*y)).collect();
        let subt = |a: &[Traffic], b: &[Traffic]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| Traffic {
                    packets: x.packets.wrapping_sub(y.packets),
                    bytes: x.bytes.wrapping_sub(y.bytes),
                })
                .collect()
        };
        Tally {
            global: sub(&self.global, &before.global),
            drops: sub(&self.drops, &before.drops),
            vips: subt(&self.vips, &before.vips),
            reals: subt(&self.reals, &before.reals),
        }
    }
}

/// What one side did with a frame.
#[derive(Debug, Clone)]
struct Outcome {
    action: u32,
    redirect: Option<u32>,
    real: Option<u32>,
    out: Vec<u8>,
    delta: Tally,
    ct: CtEntry,
    flood: Flood,
    /// The frame's datagram's fragment-table record.
    frag: Option<FragEntry>,
    /// What was held: the datagram, the ingress interface and the frame.
    held: Option<(FragKey, u32, Vec<u8>)>,
    /// The tracer's reports.
    traces: Vec<TraceEvent>,
}

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;

fn action_code(a: Action) -> u32 {
    match a {
        Action::Drop(_) | Action::Hold => XDP_DROP,
        Action::Pass => XDP_PASS,
        Action::Tx => XDP_TX,
        Action::Redirect { .. } => XDP_REDIRECT,
    }
}

fn action_name(code: u32) -> &'static str {
    match code {
        XDP_DROP => "DROP",
        XDP_PASS => "PASS",
        XDP_TX => "TX",
        XDP_REDIRECT => "REDIRECT",
        _ => "ABORTED?",
    }
}

pub fn hex_rows(b: &[u8]) -> String {
    let mut s = String::new();
    for (i, row) in b.chunks(32).enumerate() {
        let _ = write!(s, "\n    {:04x}: ", i * 32);
        for x in row {
            let _ = write!(s, "{x:02x}");
        }
    }
    s
}

/// Options of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunOpts {
    pub seed: u64,
    pub frames: usize,
    /// Connection-table flavour (the XDP object loaded and the core's mode).
    pub ct_mode: CtMode,
    /// Keep going after a mismatch (report them all at the end).
    pub keep_going: bool,
}

/// Figures of a finished run.
#[derive(Debug, Default)]
pub struct Report {
    pub by_class: BTreeMap<&'static str, usize>,
    pub by_kind: BTreeMap<(&'static str, &'static str), usize>,
    pub actions: BTreeMap<&'static str, usize>,
    pub drops: BTreeMap<&'static str, u64>,
    pub events: BTreeMap<&'static str, u64>,
    pub commits: usize,
    /// Frames run on each CPU.
    pub per_cpu: BTreeMap<usize, usize>,
    pub mismatches: Vec<String>,
}

/// Both implementations and everything they share.
pub struct Run<'a> {
    opts: RunOpts,
    u: &'a Universe,
    ifaces: &'a [Iface],
    fib: &'a StaticFib,
    cpu: usize,
    /// The CPUs the test may move to (SwitchCpu), in order.
    allowed: Vec<usize>,
    xdp: Xdp,
    core: Core,
    csnap: CompiledSnapshot,
    cfg: Config,
    generation: u64,
    now: u64,
    cache: bool,
    last_real: Option<u32>,
    last_changed: Option<usize>,
    xdp_tally: Tally,
    vip_ids: Vec<u32>,
    real_ids: Vec<u32>,
    history: VecDeque<String>,
    report: Report,
    hold_ring: HoldRing,
    trace_ring: TraceRing,
    /// Frames the core held, waiting for their datagram's record: (datagram, frame).
    pending: Vec<(FragKey, Frame)>,
}

impl<'a> Run<'a> {
    pub fn new(
        opts: RunOpts,
        u: &'a Universe,
        ifaces: &'a [Iface],
        fib: &'a StaticFib,
        xdp: Xdp,
        allowed: Vec<usize>,
        cpus: usize,
    ) -> Self {
        let cfg = Config::initial(u);
        let cpu = allowed[0];
        pin_to_cpu(cpu);
        let core = Core::new(ForwarderConfig {
            cpus,
            ct_mode: opts.ct_mode,
            ct_capacity: 1 << 20,
            ct_seed: opts.seed,
            ..ForwarderConfig::default()
        });
        let pins = xdp.options().pin_path.clone();
        let hold_ring = HoldRing::open(&pins).expect("open stator_hold");
        let trace_ring = TraceRing::open(&pins).expect("open stator_trace");
        let snap = ValidSnapshot::new_lenient(cfg.snapshot(u, 1)).expect("representable");
        let csnap = CompiledSnapshot::new(&snap);
        let mut r = Self {
            opts,
            u,
            ifaces,
            fib,
            cpu,
            allowed,
            xdp,
            core,
            csnap,
            cfg,
            generation: 1,
            now: 1_000 * SEC,
            cache: false,
            last_real: None,
            last_changed: None,
            xdp_tally: Tally::default(),
            vip_ids: u.vip_ids(),
            real_ids: u.real_ids(),
            history: VecDeque::new(),
            report: Report::default(),
            hold_ring,
            trace_ring,
            pending: Vec::new(),
        };
        r.xdp.set_fib_cache(None).unwrap();
        r.xdp.commit(&snap).expect("commit the first snapshot");
        r.xdp_tally = r.read_xdp();
        r
    }

    /// Runs the seed's stream until `opts.frames` frames have been compared.
    pub fn run(mut self) -> Report {
        let mut g = Gen::new(self.opts.seed, self.u.clone());
        let mut frames = 0;
        while frames < self.opts.frames {
            for step in g.episode(&self.cfg) {
                if let Step::Frame(_) = step {
                    frames += 1;
                }
                self.step(step, frames);
                frames += self.release_held(frames);
                if !self.opts.keep_going && !self.report.mismatches.is_empty() {
                    panic!("{}", self.report.mismatches[0]);
                }
            }
        }
        self.xdp.set_test_clock(None);
        self.report
    }

    /// Runs again, through both, the held frames whose datagram now has a fresh record (what
    /// the holder does), and forgets those held longer than the timeout. Returns the number
    /// of frames run.
    fn release_held(&mut self, n: usize) -> usize {
        if self.pending.is_empty() {
            return 0;
        }
        let timeout = self.cfg.node.frag_timeout_ns;
        let now = self.now;
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(k, _)| self.core.frag_table().is_fresh(k, now, timeout));
        self.pending = wait;
        self.pending.truncate(64);
        let mut ran = 0;
        for (_, mut f) in ready {
            f.class = Class::Stateful;
            f.kind = "held_release";
            ran += 1;
            self.frame(&f, n + ran);
        }
        ran
    }

    fn remember(&mut self, s: String) {
        if self.history.len() == 12 {
            self.history.pop_front();
        }
        self.history.push_back(s);
    }

    fn step(&mut self, step: Step, n: usize) {
        match step {
            Step::Advance(dt) => self.now += dt,
            Step::Rewind(dt) => self.now = self.now.saturating_sub(dt).max(1),
            Step::Commit(c) => self.commit(c),
            Step::Frame(f) => self.frame(&f, n),
            Step::SwitchCpu => {
                let at = self
                    .allowed
                    .iter()
                    .position(|&c| c == self.cpu)
                    .unwrap_or(0);
                self.cpu = self.allowed[(at + 1) % self.allowed.len()];
                pin_to_cpu(self.cpu);
                self.remember(format!("now on CPU {}", self.cpu));
            }
        }
    }

    fn commit(&mut self, change: Change) {
        let mut g = rand_for_commit(self.opts.seed, self.generation);
        match change {
            Change::Cache(on) => {
                self.cache = on;
                let life = on.then(|| std::time::Duration::from_secs(1));
                self.xdp.set_fib_cache(life).unwrap();
                self.remember(format!("next-hop cache {}", if on { "on" } else { "off" }));
                return;
            }
            Change::Beat(after) => {
                let beat = Beat {
                    refreshed_ns: self.now,
                    stale_after_ns: after,
                };
                self.xdp.set_beat(beat).expect("set the heartbeat");
                self.core.set_beat(beat);
                self.remember(format!(
                    "heartbeat at {} ns, stale after {after} ns",
                    self.now
                ));
                return;
            }
            Change::Random => self.cfg.randomize(self.u, &mut g),
            Change::FloodLimit(l) => self.cfg.node.flood_new_per_sec = l,
            Change::LastReal(state) => {
                let Some(id) = self.last_real else { return };
                let Some(i) = self
                    .u
                    .reals
                    .iter()
                    .enumerate()
                    .position(|(i, r)| r.id == id && self.cfg.state[i].is_some())
                else {
                    return;
                };
                self.cfg.set(self.u, i, state);
                self.last_changed = Some(i);
            }
            Change::Restore => {
                let Some(i) = self.last_changed else { return };
                self.cfg.set(self.u, i, Some(RealState::Usable));
            }
        }
        self.generation += 1;
        let snap = ValidSnapshot::new_lenient(self.cfg.snapshot(self.u, self.generation))
            .expect("representable");
        self.csnap = CompiledSnapshot::new(&snap);
        self.xdp.commit(&snap).expect("commit");
        self.report.commits += 1;
        self.remember(format!("commit gen {} ({change:?})", self.generation));
    }

    fn read_xdp(&self) -> Tally {
        let m = self.xdp.maps();
        let c = m.counters().unwrap();
        Tally {
            global: Counter::ALL.iter().map(|&k| c.get(k)).collect(),
            drops: DropReason::ALL.iter().map(|&r| c.drops(r)).collect(),
            vips: self
                .vip_ids
                .iter()
                .map(|&i| m.vip_traffic(i).unwrap())
                .collect(),
            reals: self
                .real_ids
                .iter()
                .map(|&i| m.real_traffic(i).unwrap())
                .collect(),
        }
    }

    fn core_tally(&self) -> Tally {
        let c = self.core.counters(self.cpu);
        Tally {
            global: Counter::ALL.iter().map(|&k| c.get(k)).collect(),
            drops: DropReason::ALL.iter().map(|&r| c.drops(r)).collect(),
            vips: self.vip_ids.iter().map(|&i| c.vip(VipId(i))).collect(),
            reals: self.real_ids.iter().map(|&i| c.real(RealId(i))).collect(),
        }
    }

    /// The real whose packet counter moved (the XDP side's real), if exactly one did.
    fn counted_real(&self, d: &Tally) -> Option<u32> {
        let moved: Vec<u32> = self
            .real_ids
            .iter()
            .zip(&d.reals)
            .filter(|(_, t)| t.packets != 0)
            .map(|(&id, _)| id)
            .collect();
        (moved.len() == 1).then(|| moved[0])
    }

    fn frame(&mut self, f: &Frame, n: usize) {
        let ingress = self.ifaces[f.ingress].ifindex;
        // XDP
        assert_eq!(current_cpu(), self.cpu, "the test thread left its CPU");
        self.xdp.set_test_clock(Some(self.now));
        let out = self
            .xdp
            .test_run(
                &f.bytes,
                TestRunOpts {
                    ingress_ifindex: ingress,
                    ..TestRunOpts::default()
                },
            )
            .unwrap_or_else(|e| panic!("test run of frame {n}: {e}"));
        let after = self.read_xdp();
        let xdelta = after.since(&self.xdp_tally);
        self.xdp_tally = after;
        // core
        let before = self.core_tally();
        let mut buf = VecPacketBuf::with_xdp_headroom(&f.bytes);
        let v = self
            .core
            .process(&self.csnap, self.now, self.cpu, ingress, self.fib, &mut buf);
        let cdelta = self.core_tally().since(&before);

        let (xct, cct) = match v.flow {
            Some(key) => {
                // one value per CPU (per-CPU table), or one (shared table)
                let slot = match self.opts.ct_mode {
                    CtMode::PerCpu => self.cpu,
                    CtMode::Shared => 0,
                };
                let x = self
                    .xdp
                    .maps()
                    .conntrack_lookup(&key)
                    .unwrap()
                    .get(slot)
                    .copied()
                    .unwrap_or_default();
                let c = self.core.conn_table(self.cpu).get(&key).unwrap_or_default();
                (x, c)
            }
            None => (CtEntry::default(), CtEntry::default()),
        };
        let xflood = self.xdp.maps().flood_windows().unwrap()[self.cpu];
        let cflood = self.core.flood_guard(self.cpu).state();
        let (xfrag, cfrag) = match &f.frag {
            Some(k) => (
                self.xdp.maps().frag_lookup(k).unwrap(),
                self.core.frag_table().get(k),
            ),
            None => (None, None),
        };
        let mut xtraces = Vec::new();
        while let Some(e) = self.trace_ring.next_event() {
            xtraces.push(e);
        }
        let mut xheld: Option<(FragKey, u32, Vec<u8>)> = None;
        while let Some((h, bytes)) = self.hold_ring.next_frame() {
            let HoldHdr {
                key,
                ingress_ifindex,
                ..
            } = h;
            xheld = Some((key, ingress_ifindex, bytes));
        }
        let cheld = self.core.held().map(|k| (k, ingress, f.bytes.clone()));
        let ctraces: Vec<TraceEvent> = self.core.take_trace().into_iter().collect();
        if let (Action::Hold, Some(k)) = (v.action, self.core.held()) {
            self.pending.push((k, f.clone()));
        }

        let x = Outcome {
            action: out.action,
            redirect: (out.action == XDP_REDIRECT).then(|| {
                out.data
                    .get(6..12)
                    .and_then(|m| self.ifaces.iter().find(|i| i.mac == m))
                    .map_or(0, |i| i.ifindex)
            }),
            real: self.counted_real(&xdelta),
            out: out.data,
            delta: xdelta,
            ct: xct,
            flood: xflood,
            frag: xfrag,
            held: xheld,
            traces: xtraces,
        };
        let c = Outcome {
            action: action_code(v.action),
            redirect: match v.action {
                Action::Redirect { ifindex } => Some(ifindex),
                _ => None,
            },
            real: self.counted_real(&cdelta),
            out: buf.to_vec(),
            delta: cdelta,
            ct: cct,
            flood: cflood,
            frag: cfrag,
            held: cheld,
            traces: ctraces,
        };
        self.account(f, &v, &c);
        let diffs = self.differences(&x, &c, &v);
        if !diffs.is_empty() {
            let msg = self.mismatch(f, n, ingress, &x, &c, &v, &diffs);
            self.report.mismatches.push(msg);
        }
        self.last_real = v.real.map(|r| r.0);
        self.remember(format!(
            "frame {n} {}/{} → {}",
            f.class.name(),
            f.kind,
            action_name(c.action)
        ));
    }

    fn account(&mut self, f: &Frame, v: &Verdict, c: &Outcome) {
        *self.report.by_class.entry(f.class.name()).or_default() += 1;
        *self.report.per_cpu.entry(self.cpu).or_default() += 1;
        *self
            .report
            .by_kind
            .entry((f.class.name(), f.kind))
            .or_default() += 1;
        *self
            .report
            .actions
            .entry(action_name(action_code(v.action)))
            .or_default() += 1;
        for (r, d) in DropReason::ALL.iter().zip(&c.delta.drops) {
            *self.report.drops.entry(r.label()).or_default() += d;
        }
        for (k, d) in Counter::ALL.iter().zip(&c.delta.global) {
            *self.report.events.entry(k.label()).or_default() += d;
        }
    }

    fn differences(&self, x: &Outcome, c: &Outcome, v: &Verdict) -> Vec<String> {
        let mut d = Vec::new();
        if x.action != c.action {
            d.push(format!(
                "action: xdp {} core {} ({:?})",
                action_name(x.action),
                action_name(c.action),
                v.action
            ));
        }
        if x.redirect != c.redirect {
            d.push(format!(
                "redirect ifindex: xdp {:?} core {:?}",
                x.redirect, c.redirect
            ));
        }
        if x.real != c.real {
            d.push(format!(
                "real (counted): xdp {:?} core {:?}",
                x.real, c.real
            ));
        }
        if (c.action == XDP_TX || c.action == XDP_REDIRECT) && v.real.map(|r| r.0) != c.real {
            d.push(format!(
                "core verdict real {:?} is not the real it counted {:?}",
                v.real, c.real
            ));
        }
        if x.out != c.out {
            let first = x.out.iter().zip(&c.out).position(|(a, b)| a != b);
            d.push(format!(
                "output bytes: xdp {} bytes, core {} bytes, first difference at {:?}",
                x.out.len(),
                c.out.len(),
                first.or(Some(x.out.len().min(c.out.len())))
            ));
        }
        for ((k, a), b) in Counter::ALL
            .iter()
            .zip(&x.delta.global)
            .zip(&c.delta.global)
        {
            if a != b {
                d.push(format!("counter {}: xdp +{a} core +{b}", k.label()));
            }
        }
        for ((r, a), b) in DropReason::ALL
            .iter()
            .zip(&x.delta.drops)
            .zip(&c.delta.drops)
        {
            if a != b {
                d.push(format!("drop {}: xdp +{a} core +{b}", r.label()));
            }
        }
        for ((id, a), b) in self.vip_ids.iter().zip(&x.delta.vips).zip(&c.delta.vips) {
            if a != b {
                d.push(format!("vip {id} traffic: xdp {a:?} core {b:?}"));
            }
        }
        for ((id, a), b) in self.real_ids.iter().zip(&x.delta.reals).zip(&c.delta.reals) {
            if a != b {
                d.push(format!("real {id} traffic: xdp {a:?} core {b:?}"));
            }
        }
        if x.ct != c.ct {
            d.push(format!(
                "conntrack entry of the flow on cpu {}: xdp {:?} core {:?}",
                self.cpu, x.ct, c.ct
            ));
        }
        if x.flood != c.flood {
            d.push(format!(
                "flood window on cpu {}: xdp {:?} core {:?}",
                self.cpu, x.flood, c.flood
            ));
        }
        if x.frag != c.frag {
            d.push(format!(
                "fragment-table record: xdp {:?} core {:?}",
                x.frag, c.frag
            ));
        }
        if x.held != c.held {
            d.push(format!(
                "held: xdp {:?} core {:?}",
                x.held.as_ref().map(|(k, i, b)| (k, i, b.len())),
                c.held.as_ref().map(|(k, i, b)| (k, i, b.len()))
            ));
        }
        if x.traces != c.traces {
            d.push(format!(
                "tracer reports: xdp {:?} core {:?}",
                x.traces, c.traces
            ));
        }
        d
    }

    #[allow(clippy::too_many_arguments)]
    fn mismatch(
        &self,
        f: &Frame,
        n: usize,
        ingress: u32,
        x: &Outcome,
        c: &Outcome,
        v: &Verdict,
        diffs: &[String],
    ) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "XDP and stator-core disagree: seed {:#x} ({:?} connection table), frame {n} ({}/{}), \
             CPU {}, ingress {} ({}), now {} ns, snapshot generation {}, next-hop cache {}",
            self.opts.seed,
            self.opts.ct_mode,
            f.class.name(),
            f.kind,
            self.cpu,
            ingress,
            self.ifaces
                .iter()
                .find(|i| i.ifindex == ingress)
                .map_or("?", |i| i.name),
            self.now,
            self.generation,
            if self.cache { "on" } else { "off" },
        );
        let _ = writeln!(
            s,
            "  frame ({} bytes):{}",
            f.bytes.len(),
            hex_rows(&f.bytes)
        );
        let _ = writeln!(
            s,
            "  xdp : {} real {:?} redirect {:?} ct {:?}\n    output ({} bytes):{}",
            action_name(x.action),
            x.real,
            x.redirect,
            x.ct,
            x.out.len(),
            hex_rows(&x.out)
        );
        let _ = writeln!(
            s,
            "  core: {v:?}\n    ct {:?}\n    output ({} bytes):{}",
            c.ct,
            c.out.len(),
            hex_rows(&c.out)
        );
        let _ = writeln!(s, "  differences:");
        for d in diffs {
            let _ = writeln!(s, "    - {d}");
        }
        let _ = writeln!(s, "  recent steps:");
        for h in &self.history {
            let _ = writeln!(s, "    {h}");
        }
        let _ = writeln!(
            s,
            "  replay: STATOR_DIFF_SEED={:#x} STATOR_DIFF_FRAMES={n} cargo test --release -p stator-xdp --test xdp -- --nocapture differential::",
            self.opts.seed
        );
        s
    }
}

/// The CPU the calling thread runs on.
pub fn current_cpu() -> usize {
    stator_sys::cpu::current_cpu().expect("sched_getcpu")
}

/// A generator for configuration changes, derived from the seed and the generation (so that
/// changes do not shift the frame stream).
fn rand_for_commit(seed: u64, generation: u64) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}
