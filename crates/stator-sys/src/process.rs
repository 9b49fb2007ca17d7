//! The process's own standing: its session.

use std::io;

/// Makes the calling process the leader of a new session (`setsid(2)`), so of a new process
/// group and, with autogroup scheduling, of a scheduling group of its own. Fails (`EPERM`)
/// for a process that already leads a process group.
pub fn new_session() -> io::Result<()> {
    rustix::process::setsid().map(drop).map_err(io::Error::from)
}
