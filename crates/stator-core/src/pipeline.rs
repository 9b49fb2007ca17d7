//! One frame's path through the forwarder (docs/forwarding.md §§1–6, §9's dispatch and §10's
//! failover and redirects): the steps [`Forwarder::process`](crate::Forwarder::process) drives,
//! from the parse to the transmit. Each step takes the call's [`ProcessEnv`] (its inputs and
//! the per-CPU state it may change), what is known of the packet so far ([`PacketMeta`]), and
//! returns a [`Disposition`], which `process` turns into an action and counts.

use stator_abi::{
    Beat, Counter, CtEntry, DropReason, Encap, FlowKey, FragEntry, FragKey, STATOR_GRE_REDIRECT,
    STATOR_NO_REAL, STATOR_NO_VIP, STATOR_REAL_F_USABLE, TraceEvent, TraceKind,
};

use crate::compiled::{Addr, CompiledReal, CompiledSnapshot, CompiledVip};
use crate::conntrack::ConnTable;
use crate::encap::{Tunnel, encapsulate};
use crate::fib::NextHops;
use crate::flow::Tuple;
use crate::forwarder::CpuState;
use crate::frag::FragTable;
use crate::icmp::{IcmpKind, classify, echo_reply, quoted_flow};
use crate::packet::PacketBuf;
use crate::parse::{
    ETH_P_IP, ETH_P_IPV6, IPPROTO_GRE, Ip, L4, Stop, parse_eth, parse_l3, parse_l4,
};
use crate::select::{Ask, Second, match_vip, plan};
use crate::snapshot::{RealId, VipId};
use crate::tracer::{Decision, ReportWindow, Traced, event, mark_of};
use crate::verdict::{Insert, Selection, Verdict};

/// What the last [`Forwarder::process`](crate::Forwarder::process) produced besides its
/// verdict: what the XDP program writes to its ring buffers (`stator_trace`, `stator_hold`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RingWrites {
    pub(crate) trace: Option<TraceEvent>,
    pub(crate) hold: Option<FragKey>,
}

/// What becomes of the packet — how processing ended, before `process` turns it into an
/// action and counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    Stop(Stop),
    Tx,
    Redirect(u32),
    /// A fragment handed to the holder (§9): `XDP_DROP` after a copy, counted `act_hold`.
    Hold,
}

impl From<Stop> for Disposition {
    fn from(s: Stop) -> Self {
        Disposition::Stop(s)
    }
}

impl From<DropReason> for Disposition {
    fn from(r: DropReason) -> Self {
        Disposition::Stop(Stop::Drop(r))
    }
}

/// The environment of one [`Forwarder::process`](crate::Forwarder::process) call: its inputs
/// besides the frame, and the per-CPU state it may change.
pub(crate) struct ProcessEnv<'a, N: ?Sized> {
    pub(crate) snap: &'a CompiledSnapshot,
    pub(crate) now: u64,
    pub(crate) ingress: u32,
    pub(crate) fib: &'a N,
    pub(crate) st: &'a mut CpuState,
    pub(crate) table: &'a mut ConnTable,
    pub(crate) frags: &'a mut FragTable,
    pub(crate) window: &'a mut ReportWindow,
    /// The controller's heartbeat (§3.2).
    pub(crate) beat: Beat,
    pub(crate) ring_writes: &'a mut RingWrites,
    /// The frame's length as received.
    pub(crate) len: usize,
}

impl<N: ?Sized> ProcessEnv<'_, N> {
    /// §3.2: the controller's heartbeat is stale — VIP traffic is passed.
    #[inline]
    pub(crate) fn stale(&self) -> bool {
        self.beat.stale(self.now)
    }

    /// Writes `stator_frag[key]` (§9 step 4), counting `frag_record` for a decision.
    pub(crate) fn record(
        &mut self,
        key: FragKey,
        real_id: u32,
        vip_id: u32,
        reason: u32,
        hash: u32,
    ) {
        self.frags.insert(
            key,
            FragEntry {
                real_id,
                vip_id,
                created_ns: self.now,
                reason,
                hash,
            },
        );
        if reason == 0 {
            self.st.counters.inc(Counter::FragRecord);
        }
    }

    /// §11.1: the packet's mark, if it has one.
    pub(crate) fn traced(&mut self, data: &[u8], ip: &Ip) -> Option<Traced> {
        mark_of(data, ip, ip.proto)
    }

    /// §11.1–§11.2, where the decision is made: the node's window admits the mark (else
    /// `trace_limited`: a flood of marks costs at most `trace_per_sec` MAC checks a second),
    /// then its MAC must verify (else `trace_unauth`), then the report.
    pub(crate) fn report(&mut self, mark: &Traced, redirected: bool, flow: FlowKey, d: &Decision) {
        if !self.window.admit(self.now, self.snap.node.trace_per_sec) {
            self.st.counters.inc(Counter::TraceLimited);
            return;
        }
        if !mark.authentic(&self.snap.node.trace_keys) {
            self.st.counters.inc(Counter::TraceUnauth);
            return;
        }
        self.ring_writes.trace = Some(event(mark, redirected, flow, self.now, d));
        self.st.counters.inc(Counter::TraceReport);
    }

    /// §9 step 5: hand the frame to the holder.
    pub(crate) fn hold(&mut self, key: FragKey) -> Disposition {
        self.ring_writes.hold = Some(key);
        Disposition::Hold
    }
}

/// What is known about the packet besides its headers: whether it is the inner packet of a
/// redirect (§10.2), its trace mark (§11.1), and, for a first fragment, its datagram (§9).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PacketMeta {
    pub redirected: bool,
    pub mark: Option<Traced>,
    pub first_frag: Option<FragKey>,
}

/// A stop the inner packet of a redirect may not end in: a PASS would hand the kernel a GRE
/// packet it cannot use (§10.2).
#[inline]
fn inner_stop(disposition: Disposition, redirected: bool) -> Disposition {
    match disposition {
        Disposition::Stop(Stop::NonIp | Stop::NonVip | Stop::Stale) if redirected => {
            DropReason::Redirect.into()
        }
        e => e,
    }
}

/// §§1–3, the dispatch to §4–§6 and §9, and §10.2's second pass over a redirect's inner packet.
#[inline]
pub(crate) fn run<N, B>(env: &mut ProcessEnv<'_, N>, frame: &mut B, v: &mut Verdict) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let (mut ethertype, mut l3) = match parse_eth(frame.data()) {
        Ok(x) => x,
        Err(s) => return s.into(),
    };
    let mut meta = PacketMeta::default();
    loop {
        let ip = match parse_l3(frame.data(), l3, ethertype, env.snap) {
            Ok(ip) => ip,
            Err(s) => return inner_stop(s.into(), meta.redirected),
        };
        if let Some(f) = ip.frag {
            let disposition = crate::frag::fragment(env, frame, v, &ip, f, meta);
            return inner_stop(disposition, meta.redirected);
        }
        if ip.proto == IPPROTO_GRE {
            match redirect_inner(frame.data(), &ip) {
                None => return inner_stop(Stop::NonVip.into(), meta.redirected),
                Some(_) if meta.redirected => return DropReason::Redirect.into(),
                Some((et, inner)) => {
                    env.st.counters.inc(Counter::RedirectRx);
                    ethertype = et;
                    l3 = inner;
                    meta.redirected = true;
                    continue;
                }
            }
        }
        let disposition = l4_decision(env, frame, v, &ip, meta);
        return inner_stop(disposition, meta.redirected);
    }
}

/// §10.2: a Stator redirect's GRE header (`01 00` + an IP protocol type) at `l4`; the inner
/// packet's ethertype and offset.
#[inline]
pub(crate) fn redirect_inner(data: &[u8], ip: &Ip) -> Option<(u16, usize)> {
    let g = data.get(ip.l4..ip.ip_end)?.first_chunk::<4>()?;
    let proto = u16::from_be_bytes([g[2], g[3]]);
    let word = u16::from_be_bytes([g[0], g[1]]);
    (word == STATOR_GRE_REDIRECT as u16 && (proto == ETH_P_IP || proto == ETH_P_IPV6))
        .then_some((proto, ip.l4 + 4))
}

/// §3 and §6 for an unfragmented packet: TCP/UDP to selection, ICMP to its rules.
#[inline]
fn l4_decision<N, B>(
    env: &mut ProcessEnv<'_, N>,
    frame: &mut B,
    v: &mut Verdict,
    ip: &Ip,
    mut meta: PacketMeta,
) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let data = frame.data();
    match parse_l4(data, ip) {
        Err(s) => s.into(),
        Ok(L4::Ports { sport, dport, syn }) => {
            let Some(m) = match_vip(env.snap, ip.vaddr, ip.family, ip.dst, dport, ip.proto) else {
                return Stop::NonVip.into();
            };
            if m.group {
                env.st.counters.inc(Counter::GroupMatch);
            }
            if env.stale() {
                return Stop::Stale.into();
            }
            meta.mark = env.traced(data, ip);
            let tuple = ip.tuple(sport, dport);
            select_and_forward(env, frame, v, ip, m.vip, &tuple, syn, false, meta)
        }
        Ok(L4::Icmp { ty, code }) => match classify(ip.family, ty, code) {
            IcmpKind::TooBig => {
                let q = match quoted_flow(data, ip) {
                    Ok(q) => q,
                    Err(r) => return r.into(),
                };
                // The reversed quoted flow's destination is the VIP (inner.src, inner.sport).
                let Some(m) = match_vip(env.snap, ip.vaddr, ip.family, q.dst, q.dport, q.proto)
                else {
                    return DropReason::Icmp.into();
                };
                if m.group {
                    env.st.counters.inc(Counter::GroupMatch);
                }
                select_and_forward(env, frame, v, ip, m.vip, &q, false, true, meta)
            }
            // Only errors are served inside a redirect (§6).
            _ if meta.redirected => DropReason::Redirect.into(),
            IcmpKind::Echo if env.snap.node.icmp_echo => {
                echo_reply(frame.data_mut(), ip);
                env.st.counters.inc(Counter::IcmpEchoReply);
                Disposition::Tx
            }
            IcmpKind::Echo | IcmpKind::NeighbourDiscovery => Stop::NonVip.into(),
            IcmpKind::Other => DropReason::Icmp.into(),
        },
    }
}

/// The selection cause's trace code, the slot, and the chosen real of a plan, for a report.
fn forward_decision(
    vip: &CompiledVip,
    sel: &Selection,
    real: Option<u32>,
    fragment: bool,
) -> Decision {
    Decision {
        cause: Some(sel.cause),
        slot: sel.slot,
        real_id: real,
        vip_id: Some(vip.id),
        fragment,
        ..Decision::new(TraceKind::Forward)
    }
}

/// §3's VIP accounting, §4 (or §6's error variant), the "no backend" rules (failover, §10.1),
/// the first-fragment record (§9 step 4), the report (§11.2), then §5.
#[allow(clippy::too_many_arguments)] // the steps' inputs; grouping them would only rename them
#[inline]
pub(crate) fn select_and_forward<N, B>(
    env: &mut ProcessEnv<'_, N>,
    frame: &mut B,
    v: &mut Verdict,
    ip: &Ip,
    vip: &CompiledVip,
    tuple: &Tuple,
    syn: bool,
    icmp_error: bool,
    meta: PacketMeta,
) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    env.st.counters.count_vip(vip.id, env.len);
    let hash = tuple.flow_hash();
    v.vip = Some(VipId(vip.id));
    v.flow = Some(tuple.key());
    v.hash = Some(hash);
    let words = tuple.words();
    // NO_CT never touches the table, so it need not hash for it either.
    let ct_hash = if vip.no_ct { 0 } else { env.table.hash(&words) };
    let p = plan(
        env.snap,
        vip,
        env.table,
        &Ask {
            words,
            proto: tuple.proto,
            ct_hash,
            hash,
            now: env.now,
            syn,
            icmp_error,
            frag: meta.first_frag.is_some(),
        },
    );
    if let Some(c) = p.cause.counter() {
        env.st.counters.inc(c);
    }
    let sc = match p.second {
        Second::No => None,
        Second::Unsupported => {
            env.st.counters.inc(Counter::ScUnsupported);
            None
        }
        Second::Sent(prev) => {
            env.st.counters.inc(Counter::ScSent);
            env.snap.real(prev).map(|r| r.addr)
        }
    };
    if let Some((i, _)) = p.found {
        env.table.touch(i, p.refresh.then_some(env.now));
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
            return no_backend(env, frame, ip, vip, tuple, hash, reason, meta);
        }
    };
    v.real = Some(RealId(real_id));
    if p.insert {
        if env.st.guard.admit(env.now, env.snap.node.flood_new_per_sec) {
            let entry = CtEntry {
                real_id,
                hash,
                last_seen_ns: env.now,
            };
            env.table.insert_hashed(words, ct_hash, entry);
            env.st.counters.inc(Counter::CtInsert);
            selection.insert = Insert::Inserted;
        } else {
            env.st.counters.inc(Counter::CtGuard);
            selection.insert = Insert::GuardHeld;
        }
    }
    v.selection = Some(selection);
    if icmp_error {
        env.st.counters.inc(Counter::IcmpErrorFwd);
    }
    if let Some(key) = meta.first_frag {
        env.record(key, real_id, vip.id, 0, hash);
    }
    if let Some(mark) = &meta.mark {
        let d = forward_decision(vip, &selection, Some(real_id), meta.first_frag.is_some());
        env.report(mark, meta.redirected, tuple.key(), &d);
    }
    forward(env, frame, ip, real_id, real, hash, sc)
}

/// §4 "No backend" (and `bad_config`): failover once, else the drop; a first fragment records
/// the refusal instead (fragments never fail over).
#[allow(clippy::too_many_arguments)]
#[cold]
fn no_backend<N, B>(
    env: &mut ProcessEnv<'_, N>,
    frame: &mut B,
    ip: &Ip,
    vip: &CompiledVip,
    tuple: &Tuple,
    hash: u32,
    reason: DropReason,
    meta: PacketMeta,
) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    if let Some(key) = meta.first_frag {
        env.record(key, STATOR_NO_REAL, vip.id, reason as u32, 0);
    }
    let failover = match vip.failover {
        Some(target) if reason == DropReason::NoBackend && meta.first_frag.is_none() => {
            if meta.redirected {
                env.st.counters.inc(Counter::RedirectAgain);
                None
            } else {
                Some(target)
            }
        }
        _ => None,
    };
    if let Some(mark) = &meta.mark {
        let d = match failover {
            Some(target) => Decision {
                vip_id: Some(vip.id),
                target: Some(target),
                ..Decision::new(TraceKind::Failover)
            },
            None => Decision {
                vip_id: Some(vip.id),
                reason: reason as u8,
                fragment: meta.first_frag.is_some(),
                ..Decision::new(TraceKind::Drop)
            },
        };
        env.report(mark, meta.redirected, tuple.key(), &d);
    }
    match failover {
        Some(target) => redirect(env, frame, ip, target, hash, Counter::Failover),
        None => reason.into(),
    }
}

/// §5: encapsulate (with a second chance naming `sc`, §12.3), count the real, and choose TX,
/// REDIRECT or the `tx_port` drop.
#[inline]
pub(crate) fn forward<N, B>(
    env: &mut ProcessEnv<'_, N>,
    frame: &mut B,
    ip: &Ip,
    real_id: u32,
    real: &CompiledReal,
    hash: u32,
    sc: Option<Addr>,
) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let egress = match encapsulate(
        &env.snap.node,
        real,
        ip,
        hash,
        env.ingress,
        env.fib,
        frame,
        Tunnel {
            redirect: false,
            sc,
        },
    ) {
        Ok(egress) => egress,
        Err(r) => return r.into(),
    };
    env.st.counters.count_real(real_id, env.len);
    transmit(env, egress)
}

/// Step 7 of §5.
#[inline]
fn transmit<N: NextHops + ?Sized>(env: &ProcessEnv<'_, N>, egress: u32) -> Disposition {
    if egress == env.ingress {
        Disposition::Tx
    } else if env.fib.is_tx_port(egress) {
        Disposition::Redirect(egress)
    } else {
        DropReason::TxPort.into()
    }
}

/// §10.1: GRE (recursion control 1) to another Stator node, counted in `counter` once
/// encapsulated.
#[cold]
pub(crate) fn redirect<N, B>(
    env: &mut ProcessEnv<'_, N>,
    frame: &mut B,
    ip: &Ip,
    target: Addr,
    hash: u32,
    counter: Counter,
) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let to = CompiledReal {
        addr: target,
        vip_id: STATOR_NO_VIP,
        flags: STATOR_REAL_F_USABLE as u16,
        encap: Encap::Gre,
    };
    let egress = match encapsulate(
        &env.snap.node,
        &to,
        ip,
        hash,
        env.ingress,
        env.fib,
        frame,
        Tunnel {
            redirect: true,
            sc: None,
        },
    ) {
        Ok(egress) => egress,
        Err(r) => return r.into(),
    };
    env.st.counters.inc(counter);
    transmit(env, egress)
}
