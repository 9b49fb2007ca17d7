//! The one error type of stator-control. Each variant says what went wrong in words an operator
//! can act on, and maps to one HTTP status in the admin API ([`ControlError::http_status`]).

use std::path::PathBuf;

use stator_config::ConfigErrors;

/// What can go wrong in the controller, its API and its client.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The configuration is invalid (every error, with field paths).
    #[error("{0}")]
    Config(ConfigErrors),

    /// A request body is not what the endpoint takes (bad JSON, wrong type, unknown field).
    #[error("{reason}")]
    BadRequest {
        /// What is wrong.
        reason: String,
        /// The field (a query parameter, a JSON key, or a TOML path), when one is to blame.
        field: Option<String>,
    },

    /// A request body of a type the endpoint does not take.
    #[error(
        "unsupported content type {given:?}: send application/toml or application/json \
         (with curl: -H 'Content-Type: application/toml')"
    )]
    UnsupportedType {
        /// The `Content-Type` given.
        given: String,
    },

    /// The configuration is valid but this node cannot apply it without a restart.
    #[error("{field}: {reason}")]
    RestartRequired {
        /// The TOML path of the setting that changed.
        field: String,
        /// Why it cannot change at run time.
        reason: String,
    },

    /// A configuration from the API names a file the running one does not: files come from
    /// the configuration file only.
    #[error(
        "{field}: {path} is a file the node reads or writes as root: it can only be set in the \
         configuration file (reload or restart), never through the API"
    )]
    FileSetting {
        /// The TOML path of the setting.
        field: String,
        /// The file it names.
        path: std::path::PathBuf,
    },

    /// The host is not set up for what the configuration asks (a sysctl, an interface).
    #[error("{field}: {reason}")]
    Host {
        /// The TOML path of the setting that needs it.
        field: String,
        /// What is missing and how to fix it.
        reason: String,
    },

    /// `If-Match` named another generation than the running one.
    #[error("If-Match names generation {expected}, but the running config is generation {current}")]
    GenerationMismatch {
        /// The generation the caller expected.
        expected: u64,
        /// The running config's generation.
        current: u64,
    },

    /// No backend has this stable name.
    #[error("no backend named `{id}` in the running config")]
    UnknownBackend {
        /// The name asked for.
        id: String,
    },

    /// No VIP has this name or address.
    #[error("no VIP `{vip}` in the running config")]
    UnknownVip {
        /// What was asked for.
        vip: String,
    },

    /// The ids a compiled data plane has room for are used up.
    #[error("no free {what} id: all {limit} are in use or in quarantine")]
    IdsExhausted {
        /// `VIP` or `real`.
        what: &'static str,
        /// How many the data plane has.
        limit: u32,
    },

    /// Building a Maglev table failed (the configuration layer should prevent it).
    #[error("building the Maglev table of VIP {vip}: {source}")]
    Table {
        /// The VIP's name.
        vip: String,
        /// The table builder's error.
        #[source]
        source: stator_hash::MaglevError,
    },

    /// The data plane refused or failed an operation; the previous state is in force.
    #[error("data plane: {op} failed: {source}")]
    DataPlane {
        /// What was attempted (`commit`, `self-test`, `attach`, …).
        op: &'static str,
        /// The data plane's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A planned snapshot breaks a forwarding rule (stator-core's validation): the
    /// configuration's checks should have refused its cause, so this is a bug to report.
    #[error("the planned snapshot breaks a forwarding rule: {source}")]
    Snapshot {
        /// The rule.
        #[source]
        source: stator_core::SnapshotError,
    },

    /// The data plane has no room for a snapshot (more Maglev slots than it was created
    /// with); the previous snapshot is in force.
    #[error("data plane: commit refused: {reason}")]
    Refused {
        /// What does not fit.
        reason: String,
    },

    /// The forwarder is not healthy (not attached, maps not answering, self-test failed).
    #[error("forwarder unhealthy: {reason}")]
    Unhealthy {
        /// What the check found.
        reason: String,
    },

    /// Stator must run as root (BPF, XDP, network namespaces).
    #[error("{what} needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN); run as root")]
    NotRoot {
        /// What needs it.
        what: String,
    },

    /// The node is shutting down and takes no more changes.
    #[error("the node is shutting down")]
    ShuttingDown,

    /// A successor process is starting (an upgrade): no change is taken until it serves
    /// (then ask it) or fails (then this node runs on).
    #[error("an upgrade is in progress: the node's successor is starting; try again in a moment")]
    Upgrading,

    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// Another I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// The admin API answered a client request with an error.
    #[error("{status}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The `error` of the JSON body (or the body itself).
        message: String,
        /// The `field` of the JSON body, if any.
        field: Option<String>,
    },

    /// The admin API's answer could not be understood.
    #[error("unexpected answer from the admin API: {reason}")]
    Protocol {
        /// What was wrong with it.
        reason: String,
    },
}

impl ControlError {
    /// The HTTP status the admin API answers with for this error.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Config(_) | Self::BadRequest { .. } => 400,
            Self::UnknownBackend { .. } | Self::UnknownVip { .. } => 404,
            Self::GenerationMismatch { .. } => 412,
            Self::UnsupportedType { .. } => 415,
            Self::RestartRequired { .. } | Self::Host { .. } | Self::FileSetting { .. } => 422,
            Self::ShuttingDown | Self::Upgrading | Self::Unhealthy { .. } => 503,
            Self::Api { status, .. } => *status,
            _ => 500,
        }
    }

    /// The field to blame, in TOML path terms (the first error's path for a config).
    pub fn field(&self) -> Option<String> {
        match self {
            Self::Config(errors) => errors.errors.first().map(|e| e.path.to_string()),
            Self::BadRequest { field, .. } | Self::Api { field, .. } => field.clone(),
            Self::RestartRequired { field, .. }
            | Self::Host { field, .. }
            | Self::FileSetting { field, .. } => Some(field.clone()),
            Self::UnsupportedType { .. } => Some("Content-Type".into()),
            _ => None,
        }
    }

    /// A bad request with a field to blame.
    pub fn bad_request(reason: impl Into<String>, field: Option<&str>) -> Self {
        Self::BadRequest {
            reason: reason.into(),
            field: field.map(str::to_owned),
        }
    }

    /// A data-plane failure.
    pub fn data_plane(op: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::DataPlane {
            op,
            source: Box::new(e),
        }
    }

    /// An I/O failure, with what was attempted.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<stator_plane::PlaneError> for ControlError {
    fn from(e: stator_plane::PlaneError) -> Self {
        use stator_plane::PlaneError as P;
        match e {
            P::Failed { op, source } => Self::DataPlane { op, source },
            P::Refused { reason } => Self::Refused { reason },
            P::Unhealthy { reason } => Self::Unhealthy { reason },
            P::NotRoot { what } => Self::NotRoot { what },
            P::Io { what, source } => Self::Io { what, source },
        }
    }
}
