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
        set_nofile(NofileLimit {
            soft: now.hard,
            hard: now.hard,
        })?;
    }
    Ok(nofile())
}

/// Sets the descriptor limit to `limit` (`setrlimit(RLIMIT_NOFILE)`; `None` is unlimited).
///
/// # Errors
/// The kernel's: `EPERM` when raising the hard limit without `CAP_SYS_RESOURCE`, `EINVAL`
/// for a soft limit above the hard one or beyond `fs.nr_open`.
pub fn set_nofile(limit: NofileLimit) -> io::Result<()> {
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.soft,
            maximum: limit.hard,
        },
    )
    .map_err(io::Error::from)
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
        let e = set_nofile(NofileLimit {
            soft: Some(2),
            hard: Some(1),
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }
}
