//! The crate's one error type.

use std::net::SocketAddr;

/// What can go wrong starting or changing listeners.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// A listening socket could not be set up.
    #[error("listener {listener}: cannot listen on {address}: {source}")]
    Bind {
        /// The listener.
        listener: String,
        /// Its address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A worker thread or its runtime could not start.
    #[error("listener {listener}: cannot start worker {worker}: {source}")]
    Worker {
        /// The listener.
        listener: String,
        /// The worker.
        worker: usize,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The scheduler refused the upstreams.
    #[error("listener {listener}: scheduler: {reason}")]
    Scheduler {
        /// The listener.
        listener: String,
        /// Why.
        reason: String,
    },
    /// `steering = "source"` or `"cpu"` could not be set up.
    #[error("listener {listener}: steering = \"{steering}\": {reason}")]
    Steering {
        /// The listener.
        listener: String,
        /// `source` or `cpu`.
        steering: &'static str,
        /// Why.
        reason: String,
    },
    /// No listener has this name.
    #[error("no listener is named {0:?}")]
    UnknownListener(String),
}
