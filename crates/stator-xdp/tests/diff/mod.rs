//! The differential test's parts: the world (lab routes, VIPs, snapshots), the generator and
//! the driver that runs both implementations and compares them.

pub mod frames;
pub mod lab;
pub mod run;
pub mod world;
