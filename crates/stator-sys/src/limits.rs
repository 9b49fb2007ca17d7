//! The descriptor limit (`RLIMIT_NOFILE`) and the descriptors open now.

use std::io;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The descriptor limit: soft (what applies) and hard (how far the soft one may be raised
/// without privilege). `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The limit that applies.
    pub soft: Option<u64>,
    /// The ceiling of the soft limit.
    pub hard: Option<u64>,
}

/// The descriptor limit now.
pub fn nofile() -> NofileLimit {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    NofileLimit {
        soft: current,
        hard: maximum,
    }
}

/// Raises the soft descriptor limit to the hard one (as nginx's `worker_rlimit_nofile` and
/// HAProxy do at start) and returns the limit that now applies.
///
/// # Errors
/// The kernel's, if it refuses (it should not: raising the soft limit up to the hard one
/// needs no privilege).
pub fn raise_nofile() -> io::Result<NofileLimit> {
    let now = nofile();
    if now.soft != now.hard {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: now.hard,
                maximum: now.hard,
            },
        )?;
    }
    Ok(nofile())
}

/// How many descriptors the process has open (entries of `/proc/self/fd`, less the one the
/// count itself opens).
///
/// # Errors
/// `/proc` cannot be read.
pub fn open_fds() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?
        .count()
        .saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_counting_sees_a_new_descriptor() {
        let raised = raise_nofile().unwrap();
        assert_eq!(raised.soft, raised.hard);
        let f = std::fs::File::open("/proc/self/status").unwrap();
        // Standard input, output and error, and `f` (other tests of this binary open and
        // close their own meanwhile).
        let during = open_fds().unwrap();
        drop(f);
        assert!(during >= 4, "{during} descriptors open");
    }
}
