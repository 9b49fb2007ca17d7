//! Source hashing on a Maglev table (stator-hash): the client key picks a slot, the slot names a
//! peer. Every worker and every node with the same pool derives the same table, so a client
//! keeps its peer without a session table; when the pool changes, Maglev moves few clients.

use std::net::IpAddr;

use stator_hash::{MaglevBackend, MaglevTable, next_prime, siphash24};

use crate::peer::check_peers;
use crate::{NoUpstream, Peer, PeerView, Request, SchedError, Schedule};

/// SipHash-2-4 key of [`client_key`]. Fixed, so every node maps a client to the same slot.
pub const CLIENT_KEY_SIPHASH_KEY: [u8; 16] = *b"stator-src-hash!";

/// Slots per peer: Maglev's shares are within 1% of the weights when M ≥ 100·N.
const SLOTS_PER_PEER: u32 = 100;

/// The smallest table, for tiny pools.
const MIN_TABLE_SIZE: u32 = 1009;

/// The source-hash key of a client address: SipHash-2-4 under a fixed key (the same on every
/// node and every run), folded to 32 bits.
pub fn client_key(addr: IpAddr) -> u32 {
    let h = match addr {
        IpAddr::V4(a) => siphash24(CLIENT_KEY_SIPHASH_KEY, &a.octets()),
        IpAddr::V6(a) => siphash24(CLIENT_KEY_SIPHASH_KEY, &a.octets()),
    };
    (h ^ (h >> 32)) as u32
}

/// Source hashing over a pool: the peers and their Maglev table (immutable, shared).
#[derive(Debug, Clone)]
pub struct SourceHash {
    peers: Vec<Peer>,
    table: MaglevTable,
}

/// Source hashing keeps no per-worker state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceHashState;

impl SourceHash {
    /// Source hashing over `peers` (weights ≥ 1, unique ids, unique non-empty names); the table
    /// has the smallest prime number of slots ≥ max(100·N, 1009).
    ///
    /// # Errors
    /// [`SchedError::ZeroWeight`], [`SchedError::DuplicateId`], [`SchedError::TooManyPeers`],
    /// [`SchedError::Table`] (empty or repeated names).
    pub fn new(peers: &[Peer]) -> Result<Self, SchedError> {
        check_peers(peers)?;
        let wanted = (peers.len() as u32)
            .saturating_mul(SLOTS_PER_PEER)
            .max(MIN_TABLE_SIZE);
        // At most MAX_PEERS·100 ≈ 6.6 M, so the next prime is far below MaglevTable::MAX_SIZE.
        let size = next_prime(wanted)
            .filter(|&s| s <= MaglevTable::MAX_SIZE)
            .unwrap_or(MaglevTable::DEFAULT_SIZE);
        let backends: Vec<MaglevBackend<'_>> = peers
            .iter()
            .zip(0u32..)
            .map(|(p, i)| MaglevBackend::new(&p.name, p.weight, i))
            .collect();
        Ok(Self {
            peers: peers.to_vec(),
            table: MaglevTable::build(&backends, size)?,
        })
    }

    /// The Maglev table (slots hold peer indices).
    pub fn table(&self) -> &MaglevTable {
        &self.table
    }
}

impl Schedule for SourceHash {
    type State = SourceHashState;

    fn peers(&self) -> &[Peer] {
        &self.peers
    }

    fn new_state(&self, _seed: u64) -> SourceHashState {
        SourceHashState
    }

    /// `slots[key mod M]`; if that peer is unusable or tried, the next slots' peers (at most N
    /// slots), then the first candidate in pool order from `key mod N` — deterministic, so
    /// every worker sends a client whose peer is down to the same substitute.
    fn pick<V: PeerView + ?Sized>(
        &self,
        _state: &mut SourceHashState,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        let n = self.peers.len();
        if n == 0 {
            return Err(NoUpstream);
        }
        let size = self.table.size();
        let slots = self.table.slots();
        let mut slot = (req.key % size) as usize;
        for _ in 0..n {
            if let Some(&id) = slots.get(slot) {
                let peer = id as usize;
                if id != MaglevTable::NO_BACKEND && req.candidate(peer) {
                    return Ok(peer);
                }
            }
            slot += 1;
            if slot == slots.len() {
                slot = 0;
            }
        }
        let first = req.key as usize % n;
        (first..n)
            .chain(0..first)
            .find(|&i| req.candidate(i))
            .ok_or(NoUpstream)
    }
}
