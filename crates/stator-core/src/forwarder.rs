//! The forwarder: per-CPU state, [`Forwarder::process`] (docs/forwarding.md §§1–6 for one
//! frame) and [`Forwarder::explain`] (the same decision for a flow, without effects).

use stator_abi::{Counter, CtEntry, DropReason, STATOR_DEFAULT_CT_ENTRIES};

use crate::compiled::{CReal, CVip, CompiledSnapshot, IPPROTO_TCP};
use crate::conntrack::{ConnTable, CtMode};
use crate::counters::Counters;
use crate::encap::encapsulate;
use crate::fib::NextHops;
use crate::flow::{Flow, Tuple};
use crate::guard::FloodGuard;
use crate::icmp::{IcmpKind, classify, echo_reply, quoted_flow};
use crate::packet::PacketBuf;
use crate::parse::{Ip, L4, Stop, parse_ip, parse_l4};
use crate::select::{Ask, match_vip, plan};
use crate::snapshot::{RealId, VipId};
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
}

impl Default for ForwarderConfig {
    /// One CPU, per-CPU tables of `STATOR_DEFAULT_CT_ENTRIES`, seed 0.
    fn default() -> Self {
        Self {
            cpus: 1,
            ct_mode: CtMode::PerCpu,
            ct_capacity: STATOR_DEFAULT_CT_ENTRIES as usize,
            ct_seed: 0,
        }
    }
}

/// The state of one CPU index that is always per CPU (`stator_flood`, the counter arrays).
#[derive(Debug, Clone, Default)]
struct CpuState {
    guard: FloodGuard,
    counters: Counters,
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
}

/// How processing ended, before it is turned into an action and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Stop(Stop),
    Tx,
    Redirect(u32),
}

impl From<Stop> for End {
    fn from(s: Stop) -> Self {
        End::Stop(s)
    }
}

impl From<DropReason> for End {
    fn from(r: DropReason) -> Self {
        End::Stop(Stop::Drop(r))
    }
}

/// One packet's inputs and the state it may change.
struct Cx<'a, N: ?Sized> {
    snap: &'a CompiledSnapshot,
    now: u64,
    ingress: u32,
    fib: &'a N,
    st: &'a mut CpuState,
    table: &'a mut ConnTable,
    /// The frame's length as received.
    len: usize,
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
        }
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
        let mut cx = Cx {
            snap,
            now: now_ns,
            ingress: ingress_ifindex,
            fib,
            st: &mut self.cpus[c],
            table: &mut self.tables[t],
            len: frame.data().len(),
        };
        let mut v = Verdict::new(Action::Pass);
        let end = run(&mut cx, frame, &mut v);
        let counters = &mut cx.st.counters;
        v.action = match end {
            End::Stop(Stop::NonIp) => {
                counters.inc(Counter::NonIp);
                Action::Pass
            }
            End::Stop(Stop::NonVip) => {
                counters.inc(Counter::NonVip);
                Action::Pass
            }
            End::Stop(Stop::Drop(r)) => {
                counters.inc_drop(r);
                Action::Drop(r)
            }
            End::Tx => Action::Tx,
            End::Redirect(ifindex) => Action::Redirect { ifindex },
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
        let Some(vaddr) = snap.vaddr_flags(flow.dst) else {
            return t;
        };
        let Some((vip, wildcard)) =
            match_vip(snap, vaddr, tuple.family, tuple.dst, flow.dport, flow.proto)
        else {
            return t;
        };
        t.vip = Some(VipMatch {
            id: VipId(vip.id),
            wildcard,
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
/// [`Forwarder::process`] with `snap` — its own parse: the 5-tuple, or for an ICMP error
/// (fragmentation needed, packet too big) the quoted flow reversed — or `None` for a frame that
/// would not reach a connection table (not VIP traffic, malformed, a fragment, other ICMP).
///
/// A data plane that gives each packet thread its own table (AF_XDP, the paper's §3.1) steers
/// with this hash, so that every packet of a connection, and every error about it, meets the
/// same table. Changes nothing; costs a parse.
pub fn table_hash(snap: &CompiledSnapshot, frame: &[u8]) -> Option<u32> {
    let ip = parse_ip(frame, snap).ok()?;
    match parse_l4(frame, &ip).ok()? {
        L4::Ports { sport, dport, .. } => Some(
            Tuple {
                src: ip.src,
                dst: ip.dst,
                sport,
                dport,
                proto: ip.proto,
                family: ip.family,
            }
            .flow_hash(),
        ),
        L4::Icmp { ty, code } => match classify(ip.family, ty, code) {
            IcmpKind::TooBig => quoted_flow(frame, &ip).ok().map(|q| q.flow_hash()),
            _ => None,
        },
    }
}

/// §§1–3 and the dispatch to §4–§6.
#[inline]
fn run<N, B>(cx: &mut Cx<'_, N>, frame: &mut B, v: &mut Verdict) -> End
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let data = frame.data();
    let ip = match parse_ip(data, cx.snap) {
        Ok(ip) => ip,
        Err(s) => return s.into(),
    };
    match parse_l4(data, &ip) {
        Err(s) => s.into(),
        Ok(L4::Ports { sport, dport, syn }) => {
            let Some((vip, _)) = match_vip(cx.snap, ip.vaddr, ip.family, ip.dst, dport, ip.proto)
            else {
                return Stop::NonVip.into();
            };
            let tuple = Tuple {
                src: ip.src,
                dst: ip.dst,
                sport,
                dport,
                proto: ip.proto,
                family: ip.family,
            };
            select_and_forward(cx, frame, v, &ip, vip, &tuple, syn, false)
        }
        Ok(L4::Icmp { ty, code }) => match classify(ip.family, ty, code) {
            IcmpKind::Echo if cx.snap.node.icmp_echo => {
                echo_reply(frame.data_mut(), &ip);
                cx.st.counters.inc(Counter::IcmpEchoReply);
                End::Tx
            }
            IcmpKind::Echo | IcmpKind::NeighbourDiscovery => Stop::NonVip.into(),
            IcmpKind::Other => DropReason::Icmp.into(),
            IcmpKind::TooBig => {
                let q = match quoted_flow(data, &ip) {
                    Ok(q) => q,
                    Err(r) => return r.into(),
                };
                // The reversed quoted flow's destination is the VIP (inner.src, inner.sport).
                let Some((vip, _)) =
                    match_vip(cx.snap, ip.vaddr, ip.family, q.dst, q.dport, q.proto)
                else {
                    return DropReason::Icmp.into();
                };
                select_and_forward(cx, frame, v, &ip, vip, &q, false, true)
            }
        },
    }
}

/// §3's VIP accounting, §4 (or §6's error variant), then §5.
#[allow(clippy::too_many_arguments)] // the steps' inputs; grouping them would only rename them
#[inline]
fn select_and_forward<N, B>(
    cx: &mut Cx<'_, N>,
    frame: &mut B,
    v: &mut Verdict,
    ip: &Ip,
    vip: &CVip,
    tuple: &Tuple,
    syn: bool,
    icmp_error: bool,
) -> End
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    cx.st.counters.count_vip(vip.id, cx.len);
    let hash = tuple.flow_hash();
    v.vip = Some(VipId(vip.id));
    v.flow = Some(tuple.key());
    v.hash = Some(hash);
    let words = tuple.words();
    // NO_CT never touches the table, so it need not hash for it either.
    let ct_hash = if vip.no_ct { 0 } else { cx.table.hash(&words) };
    let p = plan(
        cx.snap,
        vip,
        cx.table,
        &Ask {
            words,
            proto: tuple.proto,
            ct_hash,
            hash,
            now: cx.now,
            syn,
            icmp_error,
        },
    );
    if let Some(c) = p.cause.counter() {
        cx.st.counters.inc(c);
    }
    if let Some((i, _)) = p.found {
        cx.table.touch(i, p.refresh.then_some(cx.now));
    }
    let mut selection = Selection {
        cause: p.cause,
        slot: p.slot,
        insert: Insert::NotAttempted,
    };
    let (real_id, real) = match p.real {
        Ok(r) => r,
        Err(reason) => {
            v.selection = Some(selection);
            return reason.into();
        }
    };
    v.real = Some(RealId(real_id));
    if p.insert {
        if cx.st.guard.admit(cx.now, cx.snap.node.flood_new_per_sec) {
            let entry = CtEntry {
                real_id,
                _pad0: 0,
                last_seen_ns: cx.now,
            };
            cx.table.insert_hashed(words, ct_hash, entry);
            cx.st.counters.inc(Counter::CtInsert);
            selection.insert = Insert::Inserted;
        } else {
            cx.st.counters.inc(Counter::CtGuard);
            selection.insert = Insert::GuardHeld;
        }
    }
    v.selection = Some(selection);
    if icmp_error {
        cx.st.counters.inc(Counter::IcmpErrorFwd);
    }
    forward(cx, frame, ip, real_id, real, hash)
}

/// §5: encapsulate, count the real, and choose TX, REDIRECT or the `tx_port` drop.
#[inline]
fn forward<N, B>(
    cx: &mut Cx<'_, N>,
    frame: &mut B,
    ip: &Ip,
    real_id: u32,
    real: &CReal,
    hash: u32,
) -> End
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let egress = match encapsulate(&cx.snap.node, real, ip, hash, cx.ingress, cx.fib, frame) {
        Ok(egress) => egress,
        Err(r) => return r.into(),
    };
    cx.st.counters.count_real(real_id, cx.len);
    if egress == cx.ingress {
        End::Tx
    } else if cx.fib.is_tx_port(egress) {
        End::Redirect(egress)
    } else {
        DropReason::TxPort.into()
    }
}
