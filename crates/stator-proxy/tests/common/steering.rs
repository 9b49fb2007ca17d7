//! stator-steer's SK_REUSEPORT program behind the proxy's `SourceSteering` trait (what
//! `stator-control` does in `listeners.rs`), for the proxy's steering tests.

use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, PoisonError};

use stator_proxy::{SourceSteering, SteeringGroup};
use stator_steer::{ReuseportSteering, SteeringOptions};

/// stator-steer's program as the proxy's `SourceSteering`; the test keeps a handle on the
/// loaded group to read its table.
#[derive(Debug, Default)]
pub struct TestSteering {
    pub loaded: Mutex<Option<Arc<Mutex<ReuseportSteering>>>>,
}

#[derive(Debug)]
pub struct Group(Arc<Mutex<ReuseportSteering>>);

impl Group {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut ReuseportSteering) -> Result<T, stator_steer::SteerError>,
    ) -> Result<T, String> {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner)).map_err(|e| e.to_string())
    }
}

impl SourceSteering for TestSteering {
    fn group(
        &self,
        _spec: &stator_proxy::ListenerSpec,
        workers: usize,
    ) -> Result<Box<dyn SteeringGroup>, String> {
        let s = ReuseportSteering::load(&SteeringOptions::new(workers as u32))
            .map_err(|e| e.to_string())?;
        let s = Arc::new(Mutex::new(s));
        *self.loaded.lock().unwrap() = Some(Arc::clone(&s));
        Ok(Box::new(Group(s)))
    }
}

impl SteeringGroup for Group {
    fn set_socket(&mut self, worker: usize, fd: BorrowedFd<'_>) -> Result<(), String> {
        self.with(|s| s.set_socket(worker as u32, fd))
    }
    fn attach(&mut self, fd: BorrowedFd<'_>) -> Result<(), String> {
        self.with(|s| s.attach(fd))
    }
    fn set_workers(&mut self, live: &[u32]) -> Result<(), String> {
        self.with(|s| s.set_workers(live).map(|_| ()))
    }
    fn clear_socket(&mut self, worker: usize) -> Result<(), String> {
        self.with(|s| s.clear_socket(worker as u32))
    }
}
