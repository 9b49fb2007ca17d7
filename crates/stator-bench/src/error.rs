//! The crate's one error type: why a benchmark could not run (never a timing).

/// A benchmark could not run or could not write its report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A scheduler could not be built for a benchmark case.
    #[error("building the {algorithm} scheduler for {backends} backends: {source}")]
    Sched {
        /// The algorithm's name.
        algorithm: &'static str,
        /// Pool size of the case.
        backends: usize,
        /// What the scheduler rejected.
        #[source]
        source: stator_sched::SchedError,
    },
    /// Writing a report failed.
    #[error("writing {path}: {source}")]
    Write {
        /// Where.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A process, file or socket a benchmark needs failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A benchmark could not run (a tool missing, a rival that did not start).
    #[error("{what}")]
    Failed {
        /// What went wrong.
        what: String,
    },
    /// Encoding the JSON report failed.
    #[error("encoding the JSON report: {0}")]
    Json(#[from] serde_json::Error),
    /// The benchmark needs root (namespaces, BPF).
    #[error("{what} needs root (network namespaces, BPF programs): run it as root")]
    NotRoot {
        /// The benchmark.
        what: &'static str,
    },
    /// Setting up or reading a namespace failed.
    #[error(transparent)]
    Netns(#[from] stator_lab::netns::NetnsError),
    /// Loading or driving a BPF program failed.
    #[error(transparent)]
    Xdp(#[from] stator_xdp::XdpError),
    /// The AF_XDP plane failed.
    #[error(transparent)]
    Afxdp(#[from] stator_afxdp::AfxdpError),
    /// Loading or driving the reuseport steering program failed.
    #[error(transparent)]
    Steer(#[from] stator_steer::SteerError),
    /// A step of a benchmark failed (setting up a namespace, loading a program, measuring a
    /// row); the source says why.
    #[error("{what}")]
    Step {
        /// The step.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Options that cannot be run.
    #[error("invalid options: {reason}")]
    Options {
        /// What is wrong.
        reason: String,
    },
}

impl BenchError {
    /// An [`BenchError::Io`] saying what was being done.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// The crate's result.
pub(crate) type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Naming the step that failed, as a [`BenchError::Step`] over the error (or, for a missing
/// value, a [`BenchError::Failed`]).
pub(crate) trait Context<T> {
    /// Fails as step `what`.
    fn context(self, what: impl Into<String>) -> Result<T>;
    /// Fails as the step `what` names (built only on failure).
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| BenchError::Step {
            what: what.into(),
            source: Box::new(e),
        })
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| BenchError::Step {
            what: what().into(),
            source: Box::new(e),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| BenchError::Failed { what: what.into() })
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| BenchError::Failed {
            what: what().into(),
        })
    }
}

/// Returns a [`BenchError::Failed`] with a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::BenchError::Failed { what: format!($($arg)*) })
    };
}
pub(crate) use bail;
