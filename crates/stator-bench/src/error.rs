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
}
