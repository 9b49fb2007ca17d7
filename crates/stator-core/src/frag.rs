//! docs/forwarding.md §9: fragments. The fragment table ([`FragTable`], `stator_frag` in XDP)
//! and the decision for a fragment: opt-in, the 3-tuple owner among the peers, the first
//! fragment decided and recorded like an unfragmented packet, the others following the record
//! or held until it exists.

use std::collections::{HashMap, VecDeque};

use foldhash::fast::FixedState;
use stator_abi::{
    Counter, DropReason, FragEntry, FragKey, STATOR_CLASS_F_FRAGS, STATOR_HOLD_FRAME_MAX,
    STATOR_NO_REAL, STATOR_REAL_F_DRAINING, STATOR_REAL_F_USABLE, STATOR_VADDR_F_FRAGS, TraceKind,
};

use crate::compiled::{IPPROTO_TCP, IPPROTO_UDP};
use crate::fib::NextHops;
use crate::flow::Tuple;
use crate::packet::PacketBuf;
use crate::parse::{Frag, Ip, L4, Stop, parse_l4};
use crate::pipeline::{Disposition, PacketMeta, ProcessEnv, forward, redirect, select_and_forward};
use crate::select::match_vip;
use crate::snapshot::{RealId, VipId};
use crate::tracer::Decision;
use crate::verdict::Verdict;

/// The fragment table: a datagram's first-fragment decision by `(src, dst, id, proto)`,
/// bounded; when full, the oldest record goes (the kernel's `LRU_HASH` evicts approximately
/// the least recently used, which a record written once and read by its datagram's few other
/// fragments nearly is).
#[derive(Debug, Clone)]
pub struct FragTable {
    capacity: usize,
    map: HashMap<FragKey, (FragEntry, u64), FixedState>,
    order: VecDeque<(FragKey, u64)>,
    seq: u64,
}

impl FragTable {
    /// An empty table of `capacity` records (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            map: HashMap::default(),
            order: VecDeque::new(),
            seq: 0,
        }
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The record of a datagram, fresh or not.
    pub fn get(&self, key: &FragKey) -> Option<FragEntry> {
        self.map.get(key).map(|(e, _)| *e)
    }

    /// Writes a record (replacing any), evicting the oldest when full.
    pub fn insert(&mut self, key: FragKey, entry: FragEntry) {
        self.seq += 1;
        if self.map.insert(key, (entry, self.seq)).is_none() {
            while self.map.len() > self.capacity {
                let Some((old, seq)) = self.order.pop_front() else {
                    break;
                };
                if self.map.get(&old).is_some_and(|(_, s)| *s == seq) {
                    self.map.remove(&old);
                }
            }
        }
        self.order.push_back((key, self.seq));
        // Stale queue entries (replaced records) are skipped above; keep the queue bounded.
        if self.order.len() > 2 * self.capacity + 16 {
            let map = &self.map;
            self.order
                .retain(|(k, s)| map.get(k).is_some_and(|(_, cur)| cur == s));
        }
    }

    /// Removes every record.
    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    /// Whether the datagram has a fresh record at `now_ns` (what a held fragment waits for):
    /// written at most `timeout_ns` ago, and not in the future.
    pub fn is_fresh(&self, key: &FragKey, now_ns: u64, timeout_ns: u64) -> bool {
        self.get(key).is_some_and(|e| fresh(&e, now_ns, timeout_ns))
    }
}

#[inline]
fn fresh(e: &FragEntry, now: u64, timeout: u64) -> bool {
    now >= e.created_ns && now - e.created_ns <= timeout
}

/// The datagram of a fragment.
fn frag_key(ip: &Ip, f: Frag) -> FragKey {
    FragKey {
        src: ip.src.to_be_bytes(),
        dst: ip.dst.to_be_bytes(),
        id: f.id.to_be_bytes(),
        proto: f.proto,
        family: ip.family as u8,
        _pad0: [0; 2],
    }
}

/// §9 for one fragment.
#[cold]
pub(crate) fn fragment<N, B>(
    env: &mut ProcessEnv<'_, N>,
    frame: &mut B,
    v: &mut Verdict,
    ip: &Ip,
    f: Frag,
    mut meta: PacketMeta,
) -> Disposition
where
    N: NextHops + ?Sized,
    B: PacketBuf + ?Sized,
{
    let snap = env.snap;
    // 1. opt-in: the address, or its class.
    let by_addr = ip.vaddr.unwrap_or(0) & STATOR_VADDR_F_FRAGS != 0;
    let by_class = || {
        snap.has_groups()
            && snap
                .class_of(ip.family, ip.dst)
                .is_some_and(|c| c.flags & STATOR_CLASS_F_FRAGS != 0)
    };
    if !by_addr && !by_class() {
        return DropReason::Fragment.into();
    }
    // 2. the L4 header of a first fragment; the protocol of the others.
    let data = frame.data();
    let ports = if f.first {
        if ip.proto != IPPROTO_TCP && ip.proto != IPPROTO_UDP {
            return Stop::NonVip.into();
        }
        match parse_l4(data, ip) {
            Ok(L4::Ports { sport, dport, syn }) => {
                meta.mark = env.traced(data, ip);
                Some((sport, dport, syn))
            }
            Ok(L4::Icmp { .. }) => return Stop::NonVip.into(),
            Err(s) => return s.into(),
        }
    } else {
        if f.proto != IPPROTO_TCP && f.proto != IPPROTO_UDP {
            return Stop::NonVip.into();
        }
        None
    };
    if env.stale() {
        return Stop::Stale.into();
    }
    let key = frag_key(ip, f);
    let three = Tuple {
        src: ip.src,
        dst: ip.dst,
        sport: 0,
        dport: 0,
        proto: f.proto,
        family: ip.family,
    };
    // 3. the 3-tuple owner.
    if !snap.peer_table.is_empty() {
        let h3 = three.flow_hash();
        let p = snap.peer_table[h3 as usize % snap.peer_table.len()];
        let Some(peer) = snap.peers.get(p as usize) else {
            return DropReason::BadConfig.into();
        };
        if !peer.is_self {
            if !meta.redirected {
                if let (Some(mark), Some((sport, dport, _))) = (&meta.mark, ports) {
                    let flow = Tuple {
                        sport,
                        dport,
                        proto: ip.proto,
                        ..three
                    };
                    let d = Decision {
                        target: Some(peer.addr),
                        fragment: true,
                        ..Decision::new(TraceKind::FragRedirect)
                    };
                    env.report(mark, false, flow.key(), &d);
                }
                return redirect(env, frame, ip, peer.addr, h3, Counter::FragRedirect);
            }
            env.st.counters.inc(Counter::RedirectAgain);
        }
    }
    // 4. the first fragment: decided as unfragmented, and recorded.
    if let Some((sport, dport, syn)) = ports {
        let Some(m) = match_vip(snap, ip.vaddr, ip.family, ip.dst, dport, ip.proto) else {
            return Stop::NonVip.into();
        };
        if m.group {
            env.st.counters.inc(Counter::GroupMatch);
        }
        let tuple = Tuple {
            sport,
            dport,
            proto: ip.proto,
            ..three
        };
        if !m.vip.fragments {
            env.record(
                key,
                STATOR_NO_REAL,
                m.vip.id,
                DropReason::Fragment as u32,
                0,
            );
            if let Some(mark) = &meta.mark {
                let d = Decision {
                    vip_id: Some(m.vip.id),
                    reason: DropReason::Fragment as u8,
                    fragment: true,
                    ..Decision::new(TraceKind::Drop)
                };
                env.report(mark, meta.redirected, tuple.key(), &d);
            }
            return DropReason::Fragment.into();
        }
        meta.first_frag = Some(key);
        return select_and_forward(env, frame, v, ip, m.vip, &tuple, syn, false, meta);
    }
    // 5. the others: the record, or the holder.
    match env.frags.get(&key) {
        Some(r) if fresh(&r, env.now, snap.node.frag_timeout_ns) => {
            if r.reason != 0 {
                return DropReason::from_code(r.reason)
                    .unwrap_or(DropReason::BadConfig)
                    .into();
            }
            match snap.real(r.real_id) {
                Some(real)
                    if u32::from(real.flags) & (STATOR_REAL_F_USABLE | STATOR_REAL_F_DRAINING)
                        != 0
                        && real.vip_id == r.vip_id =>
                {
                    env.st.counters.count_vip(r.vip_id, env.len);
                    env.st.counters.inc(Counter::FragHit);
                    v.vip = Some(VipId(r.vip_id));
                    v.real = Some(RealId(r.real_id));
                    forward(env, frame, ip, r.real_id, real, r.hash, None)
                }
                _ => DropReason::NoBackend.into(),
            }
        }
        _ if env.len > STATOR_HOLD_FRAME_MAX as usize => DropReason::FragHold.into(),
        _ => env.hold(key),
    }
}
