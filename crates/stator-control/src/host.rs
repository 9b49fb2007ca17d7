//! What the host must provide for a configuration, checked at start and on every reload,
//! and what a reload may not change.
//!
//! Decisions (see `docs/operations.md`):
//! - **Forwarding sysctls are checked, never set.** `bpf_fib_lookup` answers "forwarding
//!   disabled" on an ingress interface whose `forwarding` is 0, so every encapsulated packet
//!   of that family would be dropped (`fib`). Stator refuses to start (or to apply a config
//!   that adds a backend of that family) and prints the `sysctl` to run, rather than flipping
//!   it itself: turning on IPv6 forwarding also stops the kernel from accepting router
//!   advertisements on that interface, which can take a node's IPv6 default route away. That
//!   is the operator's call.
//! - Settings that size or place the data plane's maps, choose its program, its interfaces,
//!   the API's socket or the log output cannot change while running; a reload that changes
//!   one is refused with the field and "restart needed".

use std::net::IpAddr;

use stator_config::{Config, Token};

use crate::error::ControlError;

/// Fails unless the process runs as root.
pub fn require_root(what: &str) -> Result<(), ControlError> {
    if stator_xdp::is_root() {
        Ok(())
    } else {
        Err(ControlError::NotRoot {
            what: what.to_owned(),
        })
    }
}

/// Fails when a configured interface does not exist in this network namespace.
pub fn interfaces_exist(config: &Config) -> Result<(), ControlError> {
    for (i, iface) in config.dataplane.interfaces.iter().enumerate() {
        if stator_xdp::ifindex(iface).is_none() {
            return Err(ControlError::Host {
                field: format!("dataplane.interfaces[{i}]"),
                reason: format!(
                    "network interface `{iface}` does not exist (in this network namespace)"
                ),
            });
        }
    }
    Ok(())
}

/// The address families of the configuration's backends: (IPv4, IPv6).
pub fn backend_families(config: &Config) -> (bool, bool) {
    let v4 = config.backends.iter().any(|b| b.address.is_ipv4());
    let v6 = config
        .backends
        .iter()
        .any(|b| matches!(b.address, IpAddr::V6(_)));
    (v4, v6)
}

/// Fails when forwarding is off on a configured interface for a family some backend has.
pub fn forwarding_enabled(config: &Config) -> Result<(), ControlError> {
    let (v4, v6) = backend_families(config);
    for (i, iface) in config.dataplane.interfaces.iter().enumerate() {
        for (family, wanted) in [("ipv4", v4), ("ipv6", v6)] {
            if !wanted {
                continue;
            }
            let path = format!("/proc/sys/net/{family}/conf/{iface}/forwarding");
            let on = std::fs::read_to_string(&path).is_ok_and(|v| v.trim() == "1");
            if !on {
                return Err(ControlError::Host {
                    field: format!("dataplane.interfaces[{i}]"),
                    reason: format!(
                        "{family} forwarding is off on `{iface}`: the XDP forwarder's FIB lookups \
                         would fail and every packet to an {family} backend would be dropped; \
                         run `sysctl -w net.{family}.conf.{iface}.forwarding=1`"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Everything the host must provide for `config`. A proxy-only node (`dataplane.mode =
/// "none"`) needs nothing but root for `steering = "source"` (a BPF program).
pub fn preflight(config: &Config) -> Result<(), ControlError> {
    if config.dataplane.mode == stator_config::DataplaneMode::None {
        if config
            .listeners
            .iter()
            .any(|l| l.steering == stator_config::Steering::Source)
        {
            require_root("steering = \"source\" (a reuseport BPF program)")?;
        }
        return Ok(());
    }
    require_root("stator run")?;
    interfaces_exist(config)?;
    forwarding_enabled(config)
}

/// The admin API's token: inline, or read from its file (trimmed).
pub fn resolve_token(config: &Config) -> Result<Option<String>, ControlError> {
    match &config.api.token {
        None => Ok(None),
        Some(Token::Inline(s)) => Ok(Some(s.expose().to_owned())),
        Some(Token::File(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| ControlError::Host {
                field: "api.token_file".into(),
                reason: format!("cannot read {}: {e}", path.display()),
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(ControlError::Host {
                    field: "api.token_file".into(),
                    reason: format!("{} is empty", path.display()),
                });
            }
            Ok(Some(token.to_owned()))
        }
    }
}

/// Every HTTPS check's `ca_file` can be read and holds usable certificates (checked at start
/// and on reload, so that a bad file is refused with its field path instead of making every
/// probe of the check fail).
pub fn tls_files(config: &Config) -> Result<(), ControlError> {
    for (i, pool) in config.pools.iter().enumerate() {
        let Some(stator_config::HealthSpec {
            probe: stator_config::Probe::Https(h),
            ..
        }) = &pool.health
        else {
            continue;
        };
        if let Some(path) = &h.tls.ca_file {
            crate::health::tls::load_ca_file(path).map_err(|reason| ControlError::Host {
                field: format!("pool[{i}].health.ca_file"),
                reason,
            })?;
        }
    }
    Ok(())
}

/// Fails when `new` changes a setting that needs a restart.
pub fn reloadable(old: &Config, new: &Config) -> Result<(), ControlError> {
    let (a, b) = (&old.dataplane, &new.dataplane);
    let restart = |field: &str, what: &str| {
        Err(ControlError::RestartRequired {
            field: field.to_owned(),
            reason: format!("{what} cannot change while running; restart stator to change it"),
        })
    };
    if a.mode != b.mode {
        return restart("dataplane.mode", "the data plane");
    }
    if a.interfaces != b.interfaces {
        return restart(
            "dataplane.interfaces",
            "the interfaces the data plane is attached to",
        );
    }
    if a.xdp_mode != b.xdp_mode {
        return restart("dataplane.xdp_mode", "the XDP attach mode");
    }
    if a.pin_path != b.pin_path {
        return restart(
            "dataplane.pin_path",
            "the pin directory of the data plane's maps",
        );
    }
    if a.conntrack != b.conntrack {
        return restart("dataplane.conntrack", "the connection-table flavour");
    }
    if a.conntrack_entries != b.conntrack_entries {
        return restart("dataplane.conntrack_entries", "the connection-table size");
    }
    if a.next_hop_cache != b.next_hop_cache {
        return restart("dataplane.next_hop_cache", "the next-hop cache lifetime");
    }
    if a.slots_per_generation != b.slots_per_generation {
        return restart(
            "dataplane.slots_per_generation",
            "the size of the Maglev slot map",
        );
    }
    if a.afxdp != b.afxdp {
        return restart(
            "dataplane.afxdp",
            "the AF_XDP forwarder's threads, packet pool and rings",
        );
    }
    if old.api.listen != new.api.listen {
        return restart("api.listen", "the admin API's address");
    }
    if old.log != new.log {
        return restart("log", "the log format and level");
    }
    if old.node.name != new.node.name {
        return restart("node.name", "the node's name");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_config::from_toml_str;

    fn config(extra_dataplane: &str, extra: &str) -> Config {
        from_toml_str(
            "t.toml",
            &format!(
                "[node]\nname = \"n\"\naddress_v4 = \"10.0.0.10\"\n[dataplane]\n\
                 interfaces = [\"eth0\"]\n{extra_dataplane}\n{extra}\n[[pool]]\nname = \"p\"\n\
                 [[pool.backend]]\naddress = \"10.1.0.1\"\nport = 80\n[[vip]]\n\
                 address = \"192.0.2.1\"\nport = 80\nprotocol = \"tcp\"\npools = [\"p\"]\n"
            ),
        )
        .unwrap()
    }

    #[test]
    fn runtime_settings_reload_and_sizing_needs_a_restart() {
        let base = config("", "");
        assert!(
            reloadable(
                &base,
                &config("tcp_timeout = \"5m\"\nicmp_echo = false", "")
            )
            .is_ok()
        );
        assert!(reloadable(&base, &config("on_exit = \"keep\"", "")).is_ok());
        assert!(reloadable(&base, &config("", "[api]\ntoken = \"x\"")).is_ok());
        for (dataplane, extra, field) in [
            ("conntrack = \"shared\"", "", "dataplane.conntrack"),
            (
                "slots_per_generation = 1000003",
                "",
                "dataplane.slots_per_generation",
            ),
            ("pin_path = \"/sys/fs/bpf/other\"", "", "dataplane.pin_path"),
            ("", "[api]\nlisten = \"127.0.0.1:9181\"", "api.listen"),
            ("", "[log]\nformat = \"json\"", "log"),
        ] {
            let err = reloadable(&base, &config(dataplane, extra)).unwrap_err();
            assert_eq!(err.field().as_deref(), Some(field), "{err}");
            assert_eq!(err.http_status(), 422);
        }
    }

    #[test]
    fn inline_tokens_resolve() {
        assert_eq!(resolve_token(&config("", "")).unwrap(), None);
        let c = config("", "[api]\ntoken = \"s3cret\"");
        assert_eq!(resolve_token(&c).unwrap().as_deref(), Some("s3cret"));
        let c = config("", "[api]\ntoken_file = \"/nonexistent/stator.token\"");
        assert_eq!(
            resolve_token(&c).unwrap_err().field().as_deref(),
            Some("api.token_file")
        );
    }
}
