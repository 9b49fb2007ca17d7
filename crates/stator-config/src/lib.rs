//! # stator-config — the configuration of a Stator node, parsed and validated
//!
//! Layer: the bottom of the control plane. A TOML file (or the admin API's body) comes in;
//! either a complete, valid [`Config`] comes out, or every problem found, each with its field
//! path in TOML terms and its line and column (`vip[2].table_size: 65536 is not prime`).
//! `stator-control` builds Snapshots, health checks and BGP announcements from a `Config`;
//! `stator check` prints a [`CheckReport`].
//!
//! How: serde reads the text into raw structs ([`raw`]) that reject unknown keys but otherwise
//! accept almost anything, so that validation ([`validate()`], `Config::try_from`) can collect
//! *all* errors in one pass rather than stopping at the first; validated types ([`types`]) can
//! only be built by validation, so holding a [`Config`] means holding a valid one ("parse,
//! don't validate"). Pools are flattened ([`flatten`]) and health checks deduplicated
//! ([`health`]) by pure functions the controller calls on the `Config`.
//!
//! Contract:
//! - a `Config` satisfies every rule in `docs/config.md`, including the limits compiled into
//!   the data plane (`stator-abi`): VIPs, (VIP, backend) pairs and Maglev slots;
//! - the same file gives the same `Config` on every node — in particular the same backend
//!   stable names and order, from which every node derives identical Maglev tables;
//! - no input makes it panic.
//!
//! What it must never do: apply anything, or hand out part of a configuration that has an
//! error ("a bad config never replaces a running one" is the caller's rule, and this crate
//! makes it easy: there is nothing to apply until everything is valid); touch the network or
//! the clock; read files other than the one [`load_file`] / [`check_file`] are given (a
//! `token_file` is read by the API layer, at its own time); depend on tokio, aya or libc.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod defaults;
pub mod descriptors;
pub mod duration;
pub mod error;
pub mod flatten;
pub mod health;
pub mod json;
mod parse;
pub mod raw;
pub mod types;
mod validate;
mod warnings;

use std::path::Path;

pub use check::{
    CheckReport, Diagnostic, Host, Summary, VipSummary, check_file, check_file_on, check_str,
    check_str_on,
};
pub use descriptors::{DescriptorPlan, Fit, Part, PartKind};
pub use error::{
    ConfigError, ConfigErrors, Error, FieldPath, Location, MAX_REPORTED, Segment, Warning,
    WarningKind,
};
pub use flatten::{FlatMember, Flattened, WeightConflict, flatten};
pub use health::{
    CheckId, HealthCheck, HealthPlan, HealthSpec, HttpProbe, HttpsProbe, Probe, StatusRange,
    Timing, TlsSpec, UdpProbe, health_plan,
};
pub use json::toml_from_json;
pub use raw::RawConfig;
/// An address prefix (`10.0.0.0/8`), as prefix groups, cluster receivers and trusted proxies
/// are written: stator-core's.
pub use stator_core::Prefix;
pub use types::{
    AccessLevel, AccessLog, AccessLogFormat, Afxdp, AfxdpBindMode, AfxdpThreading, Api, Backend,
    BackendId, Bgp, Config, ConntrackMode, Dataplane, DataplaneMode, Encap, EncapDefaults,
    ForwardedMode, HttpOptions, Listener, ListenerProtocol, ListenerTimeouts, Log, LogFormat,
    LogLevel, Member, Neighbor, Node, OnExit, Persistence, Pool, PoolId, Proto, Scheduler, Secret,
    SocketGroup, Steering, Token, UdpOptions, Upgrade, Upstream, Vip, VipFlags, VipKey, XdpMode,
};
pub use validate::validate;

/// The default `upgrade.socket`: beside the admin API's socket, named after it
/// (`/run/stator/api.sock` → `/run/stator/api.upgrade.sock`), so that nodes whose API sockets
/// differ never share one.
pub fn upgrade_socket_beside(api_socket: &std::path::Path) -> std::path::PathBuf {
    let stem = api_socket
        .file_stem()
        .map_or_else(|| "stator".into(), |s| s.to_string_lossy());
    api_socket.with_file_name(format!("{stem}.upgrade.sock"))
}

/// Parses and validates configuration text. On failure, every error, located in the text
/// (`file` names it in messages: `"stator.toml"`, `"<admin API>"`).
pub fn from_toml_str(file: &str, text: &str) -> Result<Config, ConfigErrors> {
    let fail = |errors| ConfigErrors {
        file: file.to_owned(),
        errors,
    };
    let parsed = parse::parse(text).map_err(fail)?;
    validate(&parsed.raw).map_err(|mut errors| {
        parsed.doc.locate_all(&mut errors);
        check::sort_by_location(&mut errors, |e| e.location);
        error::bound_errors(&mut errors);
        fail(errors)
    })
}

/// Reads and validates a configuration file — the only I/O in this crate.
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => from_toml_str(&file, &text),
        Err(e) => Err(ConfigErrors {
            errors: vec![read_error(&file, &e)],
            file,
        }),
    }
}

/// The error for a file that cannot be read.
pub(crate) fn read_error(file: &str, e: &std::io::Error) -> ConfigError {
    ConfigError::new(
        FieldPath::root(),
        Error::Read {
            file: file.to_owned(),
            reason: e.to_string(),
        },
    )
}
