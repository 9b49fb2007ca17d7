//! The forwarder: per-CPU state, [`Forwarder::process`] (docs/forwarding.md §§1–6 for one
//! frame) and [`Forwarder::explain`] (the same decision for a flow, without effects). The
//! steps one frame goes through live in `pipeline`; this module owns the state they change.

use stator_abi::{
    Beat, Counter, FragKey, STATOR_DEFAULT_CT_ENTRIES, STATOR_DEFAULT_FRAG_ENTRIES, TraceEvent,
};

use crate::compiled::{CompiledSnapshot, IPPROTO_TCP};
use crate::conntrack::{ConnTable, CtMode};
use crate::counters::Counters;
use crate::fib::NextHops;
use crate::flow::{Flow, Tuple};
use crate::frag::FragTable;
use crate::guard::FloodGuard;
use crate::icmp::{IcmpKind, classify, quoted_flow};
use crate::packet::PacketBuf;
use crate::parse::{IPPROTO_GRE, L4, Stop, parse_eth, parse_l3, parse_l4};
use crate::pipeline::{Disposition, ProcessEnv, RingWrites, redirect_inner, run};
use crate::select::{Ask, match_vip, plan};
use crate::snapshot::{RealId, VipId};
use crate::tracer::ReportWindow;
use crate::verdict::{Action, Insert, Selection, Trace, TraceOutcome, Verdict, VipMatch};

/// How to build a [`Forwarder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwarderConfig {
    /// CPU indexes (per-CPU state slots); at least 1.
    pub cpus: usize,
    /// One connection table per CPU, or one shared.
    pub ct_mode: CtMode,
    /// Entries per connection table.
    pub ct_capacity: usize,
    /// Seed of the connection tables' hash (choose it randomly in a data plane).
    pub ct_seed: u64,
    /// Entries of the fragment table (one for all CPUs, docs/forwarding.md §9).
    pub frag_capacity: usize,
}

impl Default for ForwarderConfig {
    /// One CPU, per-CPU tables of `STATOR_DEFAULT_CT_ENTRIES`, seed 0, a fragment table of
    /// `STATOR_DEFAULT_FRAG_ENTRIES`.
    fn default() -> Self {
        Self {
            cpus: 1,
            ct_mode: CtMode::PerCpu,
            ct_capacity: STATOR_DEFAULT_CT_ENTRIES as usize,
            ct_seed: 0,
            frag_capacity: STATOR_DEFAULT_FRAG_ENTRIES as usize,
        }
    }
}

/// The state of one CPU index that is always per CPU (`stator_flood`, the counter arrays).
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuState {
    pub(crate) guard: FloodGuard,
    pub(crate) counters: Counters,
}

/// The forwarding decision with its mutable state: connection tables, SYN-flood guard windows
/// and counters, per CPU index.
///
/// CPU indexes wrap: `cpu` is taken modulo [`cpus`](Self::cpus).
#[derive(Debug, Clone)]
pub struct Forwarder {
    cpus: Vec<CpuState>,
    /// One per CPU ([`CtMode::PerCpu`]) or one ([`CtMode::Shared`]).
    tables: Vec<ConnTable>,
    mode: CtMode,
    /// The fragment table (`stator_frag`), one for all CPUs.
    frags: FragTable,
    /// The tracer's report window (`stator_trl`), one for all CPUs.
    window: ReportWindow,
    /// The controller's heartbeat (`stator_beat[0]`, §3.2); off until set.
    beat: Beat,
    ring_writes: RingWrites,
}

impl Forwarder {
    /// A forwarder with empty tables, fresh guard windows and zero counters.
    pub fn new(cfg: ForwarderConfig) -> Self {
        let n = cfg.cpus.max(1);
        let tables = match cfg.ct_mode {
            CtMode::PerCpu => n,
            CtMode::Shared => 1,
        };
        Self {
            cpus: vec![CpuState::default(); n],
            tables: (0..tables)
                .map(|_| ConnTable::new(cfg.ct_capacity, cfg.ct_seed))
                .collect(),
            mode: cfg.ct_mode,
            frags: FragTable::new(cfg.frag_capacity),
            window: ReportWindow::default(),
            beat: Beat::default(),
            ring_writes: RingWrites::default(),
        }
    }

    /// Sets the controller's heartbeat (`stator_beat[0]`, docs/forwarding.md §3.2): while it is
    /// stale, VIP traffic is passed, counted `stale_pass`.
    pub fn set_beat(&mut self, beat: Beat) {
        self.beat = beat;
    }

    /// The heartbeat [`process`](Self::process) checks.
    pub fn beat(&self) -> Beat {
        self.beat
    }

    /// The fragment table (`stator_frag`).
    pub fn frag_table(&self) -> &FragTable {
        &self.frags
    }

    /// The fragment table, writable (to clear it, or to seed it in tests).
    pub fn frag_table_mut(&mut self) -> &mut FragTable {
        &mut self.frags
    }

    /// The report the last [`process`](Self::process) wrote, if it traced a packet: what the
    /// XDP program writes to `stator_trace`. Taking it leaves `None`.
    pub fn take_trace(&mut self) -> Option<TraceEvent> {
        self.ring_writes.trace.take()
    }

    /// The datagram of the fragment the last [`process`](Self::process) held
    /// ([`Action::Hold`]): the data plane keeps the frame (a [`HoldQueue`](crate::HoldQueue))
    /// until [`FragTable::is_fresh`] says its record exists, then processes it again.
    pub fn held(&self) -> Option<FragKey> {
        self.ring_writes.hold
    }

    /// The number of CPU indexes.
    pub fn cpus(&self) -> usize {
        self.cpus.len()
    }

    /// The connection-table mode.
    pub fn ct_mode(&self) -> CtMode {
        self.mode
    }

    /// One CPU's counters.
    pub fn counters(&self, cpu: usize) -> &Counters {
        &self.cpus[self.cpu_index(cpu)].counters
    }

    /// The counters of every CPU, summed (what `stator_counters` etc. read as totals).
    pub fn totals(&self) -> Counters {
        let mut t = Counters::new();
        for c in &self.cpus {
            t.add(&c.counters);
        }
        t
    }

    /// The connection table `cpu` uses.
    pub fn conn_table(&self, cpu: usize) -> &ConnTable {
        &self.tables[self.table_index(cpu)]
    }

    /// The connection table `cpu` uses, writable (to clear it, or to seed it in tests).
    pub fn conn_table_mut(&mut self, cpu: usize) -> &mut ConnTable {
        let t = self.table_index(cpu);
        &mut self.tables[t]
    }

    /// One CPU's SYN-flood guard window.
    pub fn flood_guard(&self, cpu: usize) -> &FloodGuard {
        &self.cpus[self.cpu_index(cpu)].guard
    }

    #[inline]
    fn cpu_index(&self, cpu: usize) -> usize {
        let n = self.cpus.len();
        // No division on the hot path; cpus is never empty (new() makes at least one).
        if cpu < n { cpu } else { cpu % n }
    }

    #[inline]
    fn table_index(&self, cpu: usize) -> usize {
        match self.mode {
            CtMode::PerCpu => self.cpu_index(cpu),
            CtMode::Shared => 0,
        }
    }

    /// Processes one frame received on `ingress_ifindex` by CPU `cpu` at `now_ns`, under
    /// `snap`, with `fib` as the FIB and devmap: docs/forwarding.md §§1–6. Rewrites `frame` in
    /// place when the action is [`Action::Tx`] or [`Action::Redirect`] (and for the `tx_port`
    /// drop, which happens after the rewrite); leaves it untouched otherwise. Counts the packet
    /// in `cpu`'s counters.
    pub fn process<N, B>(
        &mut self,
        snap: &CompiledSnapshot,
        now_ns: u64,
        cpu: usize,
        ingress_ifindex: u32,
        fib: &N,
        frame: &mut B,
    ) -> Verdict
    where
        N: NextHops + ?Sized,
        B: PacketBuf + ?Sized,
    {
        let c = self.cpu_index(cpu);
        let t = self.table_index(cpu);
        self.ring_writes = RingWrites::default();
        let mut env = ProcessEnv {
            snap,
            now: now_ns,
            ingress: ingress_ifindex,
            fib,
            st: &mut self.cpus[c],
            table: &mut self.tables[t],
            frags: &mut self.frags,
            window: &mut self.window,
            beat: self.beat,
            ring_writes: &mut self.ring_writes,
            len: frame.data().len(),
        };
        let mut v = Verdict::new(Action::Pass);
        let disposition = run(&mut env, frame, &mut v);
        let counters = &mut env.st.counters;
        v.action = match disposition {
            Disposition::Stop(Stop::NonIp) => {
                counters.inc(Counter::NonIp);
                Action::Pass
            }
            Disposition::Stop(Stop::NonVip) => {
                counters.inc(Counter::NonVip);
                Action::Pass
            }
            Disposition::Stop(Stop::Stale) => {
                counters.inc(Counter::StalePass);
                Action::Pass
            }
            Disposition::Stop(Stop::Drop(r)) => {
                counters.inc_drop(r);
                Action::Drop(r)
            }
            Disposition::Tx => Action::Tx,
            Disposition::Redirect(ifindex) => Action::Redirect { ifindex },
            Disposition::Hold => Action::Hold,
        };
        counters.inc(v.action.counter());
        v
    }

    /// Which real `flow` would get now on CPU `cpu` under `snap`, and why, as a packet of it
    /// would be decided by [`process`](Self::process) (a TCP SYN without ACK when `syn`).
    /// Changes nothing: no counter, no table entry, no LRU order, no guard window.
    pub fn explain(
        &self,
        snap: &CompiledSnapshot,
        now_ns: u64,
        cpu: usize,
        flow: &Flow,
        syn: bool,
    ) -> Trace {
        let tuple = flow.tuple();
        let mut t = Trace {
            flow: tuple.map(|t| t.key()),
            hash: tuple.map_or(0, |t| t.flow_hash()),
            vip: None,
            ct_entry: None,
            selection: None,
            outcome: TraceOutcome::NotVip,
        };
        let Some(tuple) = tuple else {
            return t;
        };
        let vaddr = snap.vaddr_flags(flow.dst);
        let Some(m) = match_vip(snap, vaddr, tuple.family, tuple.dst, flow.dport, flow.proto)
        else {
            return t;
        };
        let vip = m.vip;
        t.vip = Some(VipMatch {
            id: VipId(vip.id),
            wildcard: m.wildcard,
        });
        let table = self.conn_table(cpu);
        let words = tuple.words();
        let p = plan(
            snap,
            vip,
            table,
            &Ask {
                words,
                proto: tuple.proto,
                ct_hash: table.hash(&words),
                hash: t.hash,
                now: now_ns,
                syn: syn && flow.proto == IPPROTO_TCP,
                icmp_error: false,
                frag: false,
            },
        );
        let insert = match (p.insert, p.real.is_ok()) {
            (true, true) => {
                let limit = snap.node.flood_new_per_sec;
                if self.flood_guard(cpu).would_admit(now_ns, limit) {
                    Insert::Inserted
                } else {
                    Insert::GuardHeld
                }
            }
            _ => Insert::NotAttempted,
        };
        t.ct_entry = p.found.map(|(_, e)| e);
        t.selection = Some(Selection {
            cause: p.cause,
            slot: p.slot,
            insert,
        });
        t.outcome = match p.real {
            Ok((id, _)) => TraceOutcome::Real(RealId(id)),
            Err(r) => TraceOutcome::Drop(r),
        };
        t
    }
}

/// The flow hash of the connection-table key `frame` would be decided under by
/// [`Forwarder::process`] with `snap` — its own parse: the 5-tuple (of the inner packet of a
/// Stator redirect, §10.2), or for an ICMP error (fragmentation needed, packet too big) the
/// quoted flow reversed — or `None` for a frame that would not reach a connection table (not
/// VIP traffic, malformed, other ICMP). A fragment (§9) hashes its datagram (addresses,
/// protocol, identification), so all fragments of one datagram meet the same fragment table.
///
/// A data plane that gives each packet thread its own table (AF_XDP, the paper's §3.1) steers
/// with this hash, so that every packet of a connection, and every error about it, meets the
/// same table. Changes nothing; costs a parse.
pub fn table_hash(snap: &CompiledSnapshot, frame: &[u8]) -> Option<u32> {
    let (mut ethertype, mut l3) = parse_eth(frame).ok()?;
    let mut redirected = false;
    let ip = loop {
        let ip = parse_l3(frame, l3, ethertype, snap).ok()?;
        if ip.frag.is_none() && ip.proto == IPPROTO_GRE && !redirected {
            let (et, inner) = redirect_inner(frame, &ip)?;
            (ethertype, l3, redirected) = (et, inner, true);
            continue;
        }
        break ip;
    };
    if let Some(f) = ip.frag {
        return Some(
            Tuple {
                src: ip.src,
                dst: ip.dst,
                sport: (f.id >> 16) as u16,
                dport: f.id as u16,
                proto: f.proto,
                family: ip.family,
            }
            .flow_hash(),
        );
    }
    match parse_l4(frame, &ip).ok()? {
        L4::Ports { sport, dport, .. } => Some(ip.tuple(sport, dport).flow_hash()),
        L4::Icmp { ty, code } => match classify(ip.family, ty, code) {
            IcmpKind::TooBig => quoted_flow(frame, &ip).ok().map(|q| q.flow_hash()),
            _ => None,
        },
    }
}
