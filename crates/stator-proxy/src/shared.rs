//! What a listener's workers share: the spec, the scheduler, which upstreams are usable, the
//! upstreams' counters. Immutable once built except for the usable set and the states (which
//! health changes flip in place); a reload builds a new one and swaps it (`ArcSwap`), and
//! workers pick the new one up on their next connection or request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use stator_sched::{AtomicPeerSet, Peer, PeerView, Scheduler};

use crate::error::ProxyError;
use crate::passive::{Passive, now_ns};
use crate::spec::{ListenerSpec, UpstreamState};
use crate::stats::{ListenerStats, UpstreamStats};

/// One listener's shared state, as of one reload.
#[derive(Debug)]
pub(crate) struct ListenerShared {
    pub spec: ListenerSpec,
    pub scheduler: Arc<Scheduler>,
    /// Usable upstreams by index (state usable and weight > 0).
    pub usable: AtomicPeerSet,
    /// Each upstream's [`UpstreamState`], for the API.
    pub states: Box<[AtomicU8]>,
    /// Counters by upstream index (kept across reloads by name).
    pub stats: Vec<Arc<UpstreamStats>>,
    /// Upstream index by address (session entries name addresses).
    pub by_addr: HashMap<SocketAddr, usize>,
    /// Upstreams excluded after failures (`max_fails` / `fail_timeout`).
    pub passive: Passive,
}

impl ListenerShared {
    /// Builds the shared state of `spec`, reusing `previous`'s scheduler when the upstreams
    /// and algorithm did not change (workers keep their cursors) and its states by name.
    pub fn build(
        spec: ListenerSpec,
        stats: &ListenerStats,
        previous: Option<&ListenerShared>,
    ) -> Result<Self, ProxyError> {
        let same_peers = previous.is_some_and(|p| {
            p.spec.algorithm == spec.algorithm && p.spec.upstreams == spec.upstreams
        });
        let scheduler = match previous {
            Some(p) if same_peers => Arc::clone(&p.scheduler),
            _ => {
                // The scheduler rejects weight 0: a weight-0 upstream is built with weight 1
                // and kept out of the usable set (draining).
                let peers: Vec<Peer> = spec
                    .upstreams
                    .iter()
                    .enumerate()
                    .map(|(i, u)| Peer::new(i as u32, u.name.clone(), u.weight.max(1)))
                    .collect();
                Arc::new(Scheduler::new(spec.algorithm, &peers).map_err(|e| {
                    ProxyError::Scheduler {
                        listener: spec.name.clone(),
                        reason: e.to_string(),
                    }
                })?)
            }
        };
        let n = spec.upstreams.len();
        let usable = AtomicPeerSet::new(n, false);
        let states: Box<[AtomicU8]> = (0..n).map(|_| AtomicU8::new(0)).collect();
        let old_state = |name: &str| {
            previous.and_then(|p| {
                p.spec
                    .upstreams
                    .iter()
                    .position(|u| u.name == name)
                    .map(|i| p.state(i))
            })
        };
        let shared = Self {
            stats: spec
                .upstreams
                .iter()
                .map(|u| stats.upstream(&u.name))
                .collect(),
            by_addr: spec
                .upstreams
                .iter()
                .enumerate()
                .map(|(i, u)| (u.addr, i))
                .collect(),
            scheduler,
            usable,
            states,
            passive: Passive::new(n, spec.passive),
            spec,
        };
        let now = now_ns();
        for i in 0..n {
            let name = &shared.spec.upstreams[i].name;
            shared.set_state(i, old_state(name).unwrap_or(UpstreamState::Usable));
            if let Some(p) = previous
                && let Some(j) = p.spec.upstreams.iter().position(|u| u.name == *name)
            {
                shared.passive.carry(i, &p.passive, j, now);
            }
        }
        Ok(shared)
    }

    /// Sets upstream `i`'s state; it is usable when the state is and its weight is not 0.
    pub fn set_state(&self, i: usize, state: UpstreamState) {
        let Some(slot) = self.states.get(i) else {
            return;
        };
        slot.store(state as u8, Ordering::Relaxed);
        let usable = state == UpstreamState::Usable && self.spec.upstreams[i].weight > 0;
        self.usable.set(i, usable);
    }

    /// Upstream `i`'s state as last set (weight 0 shows as draining).
    pub fn state(&self, i: usize) -> UpstreamState {
        let s = match self.states.get(i).map(|s| s.load(Ordering::Relaxed)) {
            Some(0) => UpstreamState::Usable,
            Some(1) => UpstreamState::Draining,
            _ => UpstreamState::Absent,
        };
        if s == UpstreamState::Usable && self.spec.upstreams[i].weight == 0 {
            UpstreamState::Draining
        } else {
            s
        }
    }

    /// The schedulers' view: usable set (less the upstreams excluded after failures, when
    /// `passive`) and active counts.
    pub fn view(&self, passive: bool) -> View<'_> {
        View {
            shared: self,
            passive,
        }
    }

    /// Whether upstream `i` may take new work now: usable, and not excluded after failures.
    pub fn usable_now(&self, i: usize) -> bool {
        self.usable.usable(i) && !self.passive.excluded(i, now_ns)
    }

    /// Counts a failure of upstream `i` towards its exclusion (`max_fails`); counted in its
    /// stats when it excludes it.
    pub fn failed(&self, i: usize) {
        if self.passive.fail(i, now_ns())
            && let Some(s) = self.stats.get(i)
        {
            s.passive_excluded
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(listener = %self.spec.name, backend = %self.spec.upstreams[i].name,
                           for_ = ?self.spec.passive.fail_timeout,
                           "upstream failed: left out of picks (passive health)");
        }
    }
}

/// A [`PeerView`] over a listener's usable set and its upstreams' active counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    shared: &'a ListenerShared,
    passive: bool,
}

impl PeerView for View<'_> {
    #[inline]
    fn usable(&self, index: usize) -> bool {
        self.shared.usable.usable(index)
            && !(self.passive && self.shared.passive.excluded(index, now_ns))
    }

    #[inline]
    fn active(&self, index: usize) -> u32 {
        self.shared
            .stats
            .get(index)
            .map_or(0, |s| s.active.load(Ordering::Relaxed))
    }
}
