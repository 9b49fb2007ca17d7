//! One type over all schedulers, for the proxy to hold in an `ArcSwap`, and the per-worker
//! handle that renews its state when a reload swaps the scheduler.

use std::fmt;
use std::sync::Arc;

use crate::{
    LeastConn, LeastConnState, NoUpstream, P2c, P2cState, Peer, PeerView, Request, Rng, SchedError,
    Schedule, SourceHash, SourceHashState, Swrr, SwrrState, Vnswrr, VnswrrState,
};

/// The scheduling algorithms, by the names the configuration uses (`stator-config` takes this
/// type as its `Scheduler`: one definition, serialized and parsed by these names).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Tengine's virtual-node smooth weighted round-robin (`vnswrr`, the default).
    #[default]
    Vnswrr,
    /// nginx's smooth weighted round-robin (`swrr`).
    Swrr,
    /// Weighted least-connections (`least_conn`).
    LeastConn,
    /// Power of two choices (`p2c`).
    P2c,
    /// Source hashing on a Maglev table (`source_hash`).
    SourceHash,
}

impl Algorithm {
    /// Every algorithm, in documentation order.
    pub const ALL: [Self; 5] = [
        Self::Vnswrr,
        Self::Swrr,
        Self::LeastConn,
        Self::P2c,
        Self::SourceHash,
    ];

    /// The configuration's name for it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Vnswrr => "vnswrr",
            Self::Swrr => "swrr",
            Self::LeastConn => "least_conn",
            Self::P2c => "p2c",
            Self::SourceHash => "source_hash",
        }
    }

    /// The algorithm with configuration name `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Any scheduler: what a pool's `ArcSwap` holds.
#[derive(Debug, Clone)]
pub enum Scheduler {
    /// See [`Vnswrr`].
    Vnswrr(Vnswrr),
    /// See [`Swrr`].
    Swrr(Swrr),
    /// See [`LeastConn`].
    LeastConn(LeastConn),
    /// See [`P2c`].
    P2c(P2c),
    /// See [`SourceHash`].
    SourceHash(SourceHash),
}

/// Any scheduler's per-worker state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickerState {
    /// See [`VnswrrState`].
    Vnswrr(VnswrrState),
    /// See [`SwrrState`].
    Swrr(SwrrState),
    /// See [`LeastConnState`].
    LeastConn(LeastConnState),
    /// See [`P2cState`].
    P2c(P2cState),
    /// See [`SourceHashState`].
    SourceHash(SourceHashState),
}

impl Scheduler {
    /// Builds the `algorithm` scheduler over `peers`.
    ///
    /// # Errors
    /// Whatever that scheduler's constructor rejects (see [`SchedError`]).
    pub fn new(algorithm: Algorithm, peers: &[Peer]) -> Result<Self, SchedError> {
        Ok(match algorithm {
            Algorithm::Vnswrr => Self::Vnswrr(Vnswrr::new(peers)?),
            Algorithm::Swrr => Self::Swrr(Swrr::new(peers)?),
            Algorithm::LeastConn => Self::LeastConn(LeastConn::new(peers)?),
            Algorithm::P2c => Self::P2c(P2c::new(peers)?),
            Algorithm::SourceHash => Self::SourceHash(SourceHash::new(peers)?),
        })
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Self::Vnswrr(_) => Algorithm::Vnswrr,
            Self::Swrr(_) => Algorithm::Swrr,
            Self::LeastConn(_) => Algorithm::LeastConn,
            Self::P2c(_) => Algorithm::P2c,
            Self::SourceHash(_) => Algorithm::SourceHash,
        }
    }
}

impl Schedule for Scheduler {
    type State = PickerState;

    fn peers(&self) -> &[Peer] {
        match self {
            Self::Vnswrr(s) => s.peers(),
            Self::Swrr(s) => s.peers(),
            Self::LeastConn(s) => s.peers(),
            Self::P2c(s) => s.peers(),
            Self::SourceHash(s) => s.peers(),
        }
    }

    fn new_state(&self, seed: u64) -> PickerState {
        match self {
            Self::Vnswrr(s) => PickerState::Vnswrr(s.new_state(seed)),
            Self::Swrr(s) => PickerState::Swrr(s.new_state(seed)),
            Self::LeastConn(s) => PickerState::LeastConn(s.new_state(seed)),
            Self::P2c(s) => PickerState::P2c(s.new_state(seed)),
            Self::SourceHash(s) => PickerState::SourceHash(s.new_state(seed)),
        }
    }

    /// Dispatches to the algorithm. A state made by another algorithm's scheduler is a bug in
    /// the caller ([`Picker`] cannot make it); it gives [`NoUpstream`] rather than a panic.
    fn pick<V: PeerView + ?Sized>(
        &self,
        state: &mut PickerState,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        match (self, state) {
            (Self::Vnswrr(s), PickerState::Vnswrr(st)) => s.pick(st, req),
            (Self::Swrr(s), PickerState::Swrr(st)) => s.pick(st, req),
            (Self::LeastConn(s), PickerState::LeastConn(st)) => s.pick(st, req),
            (Self::P2c(s), PickerState::P2c(st)) => s.pick(st, req),
            (Self::SourceHash(s), PickerState::SourceHash(st)) => s.pick(st, req),
            _ => {
                debug_assert!(false, "scheduler and worker state of different algorithms");
                Err(NoUpstream)
            }
        }
    }
}

/// One worker's picker: the pool's shared scheduler and this worker's own state (cursor,
/// weights, randomness) — what a proxy worker thread keeps per pool.
///
/// ```
/// use std::sync::Arc;
/// use stator_sched::{Algorithm, AllUsable, Peer, Request, Scheduler, Picker};
///
/// let peers = [Peer::new(1, "a", 5), Peer::new(2, "b", 1), Peer::new(3, "c", 1)];
/// let current = Arc::new(Scheduler::new(Algorithm::Vnswrr, &peers).unwrap());
/// let mut picker = Picker::new(current.clone(), 7);
/// // per request: adopt a reloaded scheduler if there is one (the proxy loads it from its
/// // ArcSwap), then pick.
/// picker.sync(&current);
/// let index = picker.pick(&Request::new(&AllUsable)).unwrap();
/// assert!(index < 3);
/// ```
#[derive(Debug)]
pub struct Picker {
    scheduler: Arc<Scheduler>,
    state: PickerState,
    seeds: Rng,
}

impl Picker {
    /// A picker using `scheduler`, its randomness drawn from `seed` (give each worker's its own).
    pub fn new(scheduler: Arc<Scheduler>, seed: u64) -> Self {
        let mut seeds = Rng::new(seed);
        let state = scheduler.new_state(seeds.next_u64());
        Self {
            scheduler,
            state,
            seeds,
        }
    }

    /// Adopts `current` if it is not the scheduler this worker uses (a reload swapped it): new
    /// state, with a fresh random start. Returns whether it changed. Cheap when nothing changed
    /// (a pointer compare); allocates only on a change.
    pub fn sync(&mut self, current: &Arc<Scheduler>) -> bool {
        if Arc::ptr_eq(&self.scheduler, current) {
            return false;
        }
        self.scheduler = Arc::clone(current);
        self.state = self.scheduler.new_state(self.seeds.next_u64());
        true
    }

    /// Picks a peer for `req` (see [`Schedule::pick`]).
    #[inline]
    pub fn pick<V: PeerView + ?Sized>(
        &mut self,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        self.scheduler.pick(&mut self.state, req)
    }

    /// The scheduler in use.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// The peer at `index` of the scheduler in use.
    pub fn peer(&self, index: usize) -> Option<&Peer> {
        self.scheduler.peers().get(index)
    }

    /// This worker's state (e.g. VNSWRR's start and built count, for status pages).
    pub fn state(&self) -> &PickerState {
        &self.state
    }
}
