//! The forwarder's ring buffers, read from their pins: `stator_hold` (fragments that came
//! before their first, docs/forwarding.md §9) and `stator_trace` (the tracer's reports, §11).
//! Records that do not parse are skipped and counted, never trusted.

use std::path::Path;

use aya::maps::{Map, MapData, RingBuf};
use stator_abi::{HoldHdr, TraceEvent};

use crate::error::{Result, XdpError};

fn open_ring(pin_path: &Path, name: &'static str) -> Result<RingBuf<MapData>> {
    let md = MapData::from_pin(pin_path.join(name))
        .map_err(|e| XdpError::map(name, "opening the pin", e))?;
    RingBuf::try_from(Map::RingBuf(md)).map_err(|e| XdpError::map(name, "opening", e))
}

/// `stator_hold`: held frames with their datagram and ingress interface.
pub struct HoldRing {
    ring: RingBuf<MapData>,
    malformed: u64,
}

impl std::fmt::Debug for HoldRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldRing")
            .field("malformed", &self.malformed)
            .finish_non_exhaustive()
    }
}

impl HoldRing {
    /// Opens the ring pinned under `pin_path`.
    pub fn open(pin_path: &Path) -> Result<Self> {
        Ok(Self {
            ring: open_ring(pin_path, "stator_hold")?,
            malformed: 0,
        })
    }

    /// The next held frame, if any: its header and the frame as received.
    pub fn next_frame(&mut self) -> Option<(HoldHdr, Vec<u8>)> {
        loop {
            let item = self.ring.next()?;
            match HoldHdr::parse(&item) {
                Some((h, frame)) => return Some((h, frame.to_vec())),
                None => self.malformed += 1,
            }
        }
    }

    /// Records that did not parse.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}

/// `stator_trace`: the tracer's events.
pub struct TraceRing {
    ring: RingBuf<MapData>,
    malformed: u64,
}

impl std::fmt::Debug for TraceRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceRing")
            .field("malformed", &self.malformed)
            .finish_non_exhaustive()
    }
}

impl TraceRing {
    /// Opens the ring pinned under `pin_path`.
    pub fn open(pin_path: &Path) -> Result<Self> {
        Ok(Self {
            ring: open_ring(pin_path, "stator_trace")?,
            malformed: 0,
        })
    }

    /// The next event, if any.
    pub fn next_event(&mut self) -> Option<TraceEvent> {
        loop {
            let item = self.ring.next()?;
            match TraceEvent::from_bytes(&item) {
                Some(e) => return Some(e),
                None => self.malformed += 1,
            }
        }
    }

    /// Records that did not parse.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}

impl stator_plane::TraceSource for TraceRing {
    fn next_event(&mut self) -> Option<TraceEvent> {
        TraceRing::next_event(self)
    }
}
