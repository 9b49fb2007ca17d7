//! Karger et al.'s consistent hashing ring (STOC '97), as the paper's §5.3 compares it with Maglev.
//!
//! Every backend is placed at `views` pseudo-random points of a 64-bit ring (the paper's "views";
//! usually called virtual nodes); a key belongs to the first point at or after it, clockwise. To
//! compare with Maglev the ring is turned into an M-entry lookup table: entry `i` is the key at
//! ring position `floor(i * 2^64 / M)`, i.e. the ring cut into M equal arcs, which is the ring's
//! answer for the flows whose hash falls in that arc.

use crate::maglev::sorted_by_name;
use crate::{MaglevBackend, MaglevError, siphash24};

/// SipHash-2-4 key for the ring positions: point `v` of backend `name` is at
/// `siphash24(KARGER_KEY, name || v as 4 little-endian bytes)`.
const KARGER_KEY: [u8; 16] = *b"stator-karger-v1";

/// The most points a ring may hold (backends × views), to bound memory.
const MAX_POINTS: u64 = 1 << 26;

/// A consistent-hashing ring with a fixed number of points per backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KargerRing {
    /// (position, backend id), sorted by position then id.
    points: Vec<(u64, u32)>,
}

impl KargerRing {
    /// Places `views` points per backend with non-zero weight on the ring.
    ///
    /// # Errors
    /// The backend-set errors of [`crate::MaglevTable::build`]; [`MaglevError::ZeroViews`];
    /// [`MaglevError::UnequalWeights`] if the non-zero weights differ (the ring has no weights);
    /// [`MaglevError::TooManyPoints`] if backends × views exceeds 2^26.
    pub fn build(backends: &[MaglevBackend<'_>], views: u32) -> Result<Self, MaglevError> {
        let order = sorted_by_name(backends)?;
        if views == 0 {
            return Err(MaglevError::ZeroViews);
        }
        check_equal_weights(backends, "karger")?;
        let members: Vec<&MaglevBackend<'_>> = order
            .iter()
            .map(|&i| &backends[i])
            .filter(|b| b.weight > 0)
            .collect();
        let total = members.len() as u64 * u64::from(views);
        if total > MAX_POINTS {
            return Err(MaglevError::TooManyPoints {
                points: total,
                max: MAX_POINTS,
            });
        }
        let mut points = Vec::with_capacity(total as usize);
        let mut buf = Vec::new();
        for b in members {
            for v in 0..views {
                buf.clear();
                buf.extend_from_slice(b.name.as_bytes());
                buf.extend_from_slice(&v.to_le_bytes());
                points.push((siphash24(KARGER_KEY, &buf), b.id));
            }
        }
        points.sort_unstable();
        Ok(Self { points })
    }

    /// Number of points on the ring.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the ring has no points (no backend with non-zero weight).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The backend owning ring position `position`: the first point at or after it, wrapping.
    pub fn lookup(&self, position: u64) -> Option<u32> {
        let i = self.points.partition_point(|&(p, _)| p < position);
        self.points
            .get(i)
            .or_else(|| self.points.first())
            .map(|&(_, id)| id)
    }

    /// The M-entry lookup table: entry `i` is [`Self::lookup`] of `floor(i * 2^64 / size)`.
    /// Empty ring → all entries [`crate::MaglevTable::NO_BACKEND`].
    pub fn table(&self, size: u32) -> Vec<u32> {
        let Some(&(_, first_id)) = self.points.first() else {
            return vec![crate::MaglevTable::NO_BACKEND; size as usize];
        };
        let mut table = Vec::with_capacity(size as usize);
        let mut cursor = 0;
        for i in 0..size {
            // i < size, so the quotient is below 2^64.
            let position = ((u128::from(i) << 64) / u128::from(size)) as u64;
            while cursor < self.points.len() && self.points[cursor].0 < position {
                cursor += 1;
            }
            table.push(self.points.get(cursor).map_or(first_id, |&(_, id)| id));
        }
        table
    }
}

/// The comparison methods treat every backend alike; refuse weights they would silently ignore.
pub(crate) fn check_equal_weights(
    backends: &[MaglevBackend<'_>],
    method: &'static str,
) -> Result<(), MaglevError> {
    let mut weights = backends.iter().map(|b| b.weight).filter(|&w| w > 0);
    match weights.next() {
        Some(first) if weights.any(|w| w != first) => Err(MaglevError::UnequalWeights { method }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:80", i / 256, i % 256))
            .collect()
    }

    fn backends(names: &[String]) -> Vec<MaglevBackend<'_>> {
        names
            .iter()
            .zip(0..)
            .map(|(n, id)| MaglevBackend::new(n, 1, id))
            .collect()
    }

    #[test]
    fn table_matches_lookup_and_covers_every_backend() {
        let names = names(20);
        let ring = KargerRing::build(&backends(&names), 100).unwrap();
        assert_eq!(ring.len(), 2000);
        let size = 1009;
        let table = ring.table(size);
        for (i, &id) in table.iter().enumerate() {
            let position = ((i as u128) << 64) / u128::from(size);
            assert_eq!(ring.lookup(position as u64), Some(id));
        }
        for id in 0..20 {
            assert!(table.contains(&id), "backend {id} has no entry");
        }
    }

    #[test]
    fn removing_a_backend_moves_only_its_entries() {
        let names = names(50);
        let all = backends(&names);
        let before = KargerRing::build(&all, 64).unwrap().table(4099);
        let without: Vec<_> = all.iter().copied().filter(|b| b.id != 7).collect();
        let after = KargerRing::build(&without, 64).unwrap().table(4099);
        for (b, a) in before.iter().zip(&after) {
            assert!(b == a || *b == 7, "entry moved from {b} to {a}");
        }
    }

    #[test]
    fn independent_of_input_order_and_rejects_bad_input() {
        let names = names(10);
        let mut all = backends(&names);
        let table = KargerRing::build(&all, 10).unwrap().table(101);
        all.reverse();
        assert_eq!(KargerRing::build(&all, 10).unwrap().table(101), table);
        assert_eq!(KargerRing::build(&all, 0), Err(MaglevError::ZeroViews));
        all[0].weight = 2;
        assert_eq!(
            KargerRing::build(&all, 10),
            Err(MaglevError::UnequalWeights { method: "karger" })
        );
        all[0].weight = 0;
        let ring = KargerRing::build(&all, 10).unwrap();
        assert_eq!(ring.len(), 90);
        let empty = KargerRing::build(&[], 10).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.lookup(5), None);
        assert_eq!(empty.table(3), vec![u32::MAX; 3]);
    }
}
