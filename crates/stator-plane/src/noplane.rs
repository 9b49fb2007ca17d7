//! The data plane of `dataplane.mode = "none"`: no packet forwarder. A proxy-only node still
//! runs the reconciler (health checks, reloads, drains, the API) over an empty snapshot, so it
//! needs a [`DataPlane`] that accepts commits and forwards nothing.

use std::sync::{Arc, Mutex, PoisonError};

use stator_core::{CtEntry, FlowKey, RealId, Snapshot, Traffic, ValidSnapshot, VipId};

use crate::PlaneError;
use crate::{AttachInfo, CommitInfo, DataPlane, PlaneCounters, PlaneReader};

/// A data plane that holds the last snapshot and forwards nothing.
#[derive(Debug, Default)]
pub struct NoPlane {
    active: Arc<Mutex<Option<Snapshot>>>,
}

impl DataPlane for NoPlane {
    fn kind(&self) -> &'static str {
        "none"
    }

    fn attach(&mut self, _ifaces: &[String]) -> Result<Vec<AttachInfo>, PlaneError> {
        Ok(Vec::new())
    }

    fn detach(&mut self, _purge: bool) -> Result<(), PlaneError> {
        Ok(())
    }

    fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitInfo, PlaneError> {
        *self.active.lock().unwrap_or_else(PoisonError::into_inner) = Some((**snap).clone());
        Ok(CommitInfo::default())
    }

    fn active_snapshot(&self) -> Result<Option<Snapshot>, PlaneError> {
        Ok(self
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    fn check(&self) -> Result<(), PlaneError> {
        Ok(())
    }

    fn reader(&self) -> Result<Arc<dyn PlaneReader>, PlaneError> {
        Ok(Arc::new(NoReader))
    }
}

/// Counters of no forwarder: all zero.
#[derive(Debug)]
struct NoReader;

impl PlaneReader for NoReader {
    fn counters(&self) -> Result<PlaneCounters, PlaneError> {
        Ok(PlaneCounters::default())
    }

    fn vip_traffic(&self, _id: VipId) -> Result<Traffic, PlaneError> {
        Ok(Traffic::default())
    }

    fn real_traffic(&self, _id: RealId) -> Result<Traffic, PlaneError> {
        Ok(Traffic::default())
    }

    fn conntrack_lookup(&self, _flow: &FlowKey) -> Result<Vec<CtEntry>, PlaneError> {
        Ok(Vec::new())
    }

    fn conntrack_scan(
        &self,
        _limit: usize,
        _f: &mut dyn FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize, PlaneError> {
        Ok(0)
    }

    fn clock_ns(&self) -> u64 {
        0
    }
}
