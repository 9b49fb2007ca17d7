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
//!   the API's endpoints or the log output cannot change while running; a reload that changes
//!   one is refused with the field and "restart needed".
//! - **Files come from the file.** A configuration put through the API may not name a file
//!   the running one does not ([`api_files_unchanged`]): BIRD's file and socket, token files,
//!   CA files, the pin directory — a caller of the API never chooses what the node, as root,
//!   writes or reads. Token files readable by other users, and inline tokens in a
//!   configuration file other users can read, are refused.

use std::net::IpAddr;

use std::path::PathBuf;

use stator_config::{Config, Token};

use crate::tokens::Tokens;

use crate::error::ControlError;

/// Fails unless the process runs as root.
pub fn require_root(what: &str) -> Result<(), ControlError> {
    if stator_sys::users::is_root() {
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
        if stator_sys::iface::index(iface).is_none() {
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

/// The admin API's tokens: inline, or read from their files (trimmed). A token file that
/// other users can read or write is refused: the token would be theirs.
pub fn resolve_tokens(config: &Config) -> Result<Tokens, ControlError> {
    Ok(Tokens {
        admin: resolve_token(config.api.token.as_ref(), "api.token_file")?,
        read: resolve_token(config.api.read_token.as_ref(), "api.read_token_file")?,
    })
}

fn resolve_token(token: Option<&Token>, field: &str) -> Result<Option<String>, ControlError> {
    use std::os::unix::fs::PermissionsExt;
    let refuse = |reason: String| ControlError::Host {
        field: field.into(),
        reason,
    };
    match token {
        None => Ok(None),
        Some(Token::Inline(s)) => Ok(Some(s.expose().to_owned())),
        Some(Token::File(path)) => {
            let file = std::fs::File::open(path)
                .map_err(|e| refuse(format!("cannot read {}: {e}", path.display())))?;
            let mode = file
                .metadata()
                .map_err(|e| refuse(format!("cannot inspect {}: {e}", path.display())))?
                .permissions()
                .mode();
            if mode & 0o006 != 0 {
                return Err(refuse(format!(
                    "{} can be read or written by every user (mode {:o}): the token would be \
                     theirs; chmod 600 it",
                    path.display(),
                    mode & 0o7777
                )));
            }
            let mut text = String::new();
            std::io::Read::read_to_string(&mut { file }, &mut text)
                .map_err(|e| refuse(format!("cannot read {}: {e}", path.display())))?;
            let token = text.trim();
            if token.is_empty() {
                return Err(refuse(format!("{} is empty", path.display())));
            }
            Ok(Some(token.to_owned()))
        }
    }
}

/// The tracer's keys from `tracer.key_file` (none when the tracer is off): one or two keys of
/// 16 bytes, 32 hex digits a line (`#` starts a comment). A key file other users can read or
/// write is refused: whoever reads it can make every node report to the receivers.
pub fn trace_keys(config: &Config) -> Result<stator_abi::TraceKeys, ControlError> {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = &config.tracer.key_file else {
        return Ok(stator_abi::TraceKeys::default());
    };
    let refuse = |reason: String| ControlError::Host {
        field: "tracer.key_file".into(),
        reason,
    };
    let file = std::fs::File::open(path)
        .map_err(|e| refuse(format!("cannot read {}: {e}", path.display())))?;
    let mode = file
        .metadata()
        .map_err(|e| refuse(format!("cannot inspect {}: {e}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o006 != 0 {
        return Err(refuse(format!(
            "{} can be read or written by every user (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o7777
        )));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut { file }, &mut text)
        .map_err(|e| refuse(format!("cannot read {}: {e}", path.display())))?;
    let keys =
        parse_trace_keys(&text).map_err(|why| refuse(format!("{}: {why}", path.display())))?;
    Ok(stator_abi::TraceKeys::from_keys(&keys))
}

/// The keys of a tracer key file's text (see [`trace_keys`]).
pub fn parse_trace_keys(text: &str) -> Result<Vec<[u8; 16]>, String> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bytes: Option<Vec<u8>> = (line.len() == 32)
            .then(|| {
                (0..16)
                    .map(|i| u8::from_str_radix(line.get(2 * i..2 * i + 2)?, 16).ok())
                    .collect()
            })
            .flatten();
        let Some(bytes) = bytes else {
            return Err(format!("line {}: a key is 32 hex digits (16 bytes)", n + 1));
        };
        let mut key = [0u8; 16];
        key.copy_from_slice(&bytes);
        keys.push(key);
    }
    let most = stator_abi::STATOR_TRACE_KEYS as usize;
    match keys.len() {
        0 => Err("no key (32 hex digits a line)".into()),
        n if n > most => Err(format!(
            "{n} keys: at most {most} (the current one and the one being rotated out)"
        )),
        _ => Ok(keys),
    }
}

/// Refuses a configuration file that holds an inline token (`api.token`, `api.read_token`)
/// and can be read by other users: they would read the token. `stator run` checks its file;
/// a configuration given through the API lives in memory only.
pub fn config_file_secrets(path: &std::path::Path, config: &Config) -> Result<(), ControlError> {
    use std::os::unix::fs::PermissionsExt;
    let inline = [
        ("api.token", &config.api.token),
        ("api.read_token", &config.api.read_token),
    ]
    .into_iter()
    .find(|(_, t)| matches!(t, Some(Token::Inline(_))));
    let Some((field, _)) = inline else {
        return Ok(());
    };
    let mode = std::fs::metadata(path)
        .map_err(|source| ControlError::File {
            path: path.to_owned(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        return Err(ControlError::Host {
            field: field.into(),
            reason: format!(
                "{} can be read by every user (mode {:o}) and holds the token: move it to a \
                 file of mode 0600 named by {field}_file, or chmod o-r {}",
                path.display(),
                mode & 0o7777,
                path.display()
            ),
        });
    }
    Ok(())
}

/// Every file path the configuration names, by where it is named: the key is stable across
/// reorderings (a pool by its name), the value the field path and the file.
pub fn file_settings(config: &Config) -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    let mut push = |key: String, field: String, path: &PathBuf| {
        out.push((key, field, path.clone()));
    };
    push(
        "dataplane.pin_path".into(),
        "dataplane.pin_path".into(),
        &config.dataplane.pin_path,
    );
    push("api.socket".into(), "api.socket".into(), &config.api.socket);
    push(
        "upgrade.socket".into(),
        "upgrade.socket".into(),
        &config.upgrade.socket,
    );
    for (key, token) in [
        ("api.token_file", &config.api.token),
        ("api.read_token_file", &config.api.read_token),
    ] {
        if let Some(Token::File(p)) = token {
            push(key.into(), key.into(), p);
        }
    }
    if let Some(k) = &config.tracer.key_file {
        push("tracer.key_file".into(), "tracer.key_file".into(), k);
    }
    if let Some(p) = config.access_log.as_ref().and_then(|a| a.path.as_ref()) {
        push("access_log.path".into(), "access_log.path".into(), p);
    }
    if let Some(bgp) = &config.bgp {
        push(
            "bgp.bird_config".into(),
            "bgp.bird_config".into(),
            &bgp.bird_config,
        );
        push(
            "bgp.bird_socket".into(),
            "bgp.bird_socket".into(),
            &bgp.bird_socket,
        );
    }
    for (i, pool) in config.pools.iter().enumerate() {
        if let Some(stator_config::HealthSpec {
            probe: stator_config::Probe::Https(h),
            ..
        }) = &pool.health
            && let Some(ca) = &h.tls.ca_file
        {
            push(
                format!("pool {:?} health.ca_file", pool.name),
                format!("pool[{i}].health.ca_file"),
                ca,
            );
        }
    }
    out
}

/// Refuses a configuration from the API that names a file the running one does not name at
/// the same place: files the node reads or writes as root come from the configuration file on
/// disk only (a reload or restart), never from a caller of the API. Dropping one is allowed
/// (the default takes its place, which is no file of the caller's choosing).
pub fn api_files_unchanged(running: &Config, new: &Config) -> Result<(), ControlError> {
    let old = file_settings(running);
    for (key, field, path) in file_settings(new) {
        let same = old.iter().any(|(k, _, p)| *k == key && *p == path);
        if !same {
            return Err(ControlError::FileSetting { field, path });
        }
    }
    Ok(())
}

/// Every HTTPS check's `ca_file` can be read and holds usable certificates, as `tls` reads
/// them (checked at start and on reload, so that a bad file is refused with its field path
/// instead of making every probe of the check fail).
pub fn tls_files(tls: &dyn stator_health::Tls, config: &Config) -> Result<(), ControlError> {
    tls.check_ca_files(config)
        .map_err(|(field, reason)| ControlError::Host { field, reason })
}

/// Fails when `new` changes a setting that needs a restart.
pub fn reloadable(old: &Config, new: &Config) -> Result<(), ControlError> {
    if old.receive_steering != new.receive_steering {
        return Err(ControlError::RestartRequired {
            field: "receive_steering".to_owned(),
            reason: "receive steering (its interfaces, CPUs and programs) cannot change while \
                     running; restart stator to change it"
                .into(),
        });
    }
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
    if a.stale_after != b.stale_after {
        // the heartbeat's thread is started with the bound (and only when there is one)
        return restart("dataplane.stale_after", "the data-plane heartbeat's bound");
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
    // Sized when the data plane is loaded (the BPF fragment table and the holder's ring) or
    // when the holder starts (its bounds): a change would be accepted and do nothing.
    let (f, g) = (&old.fragments, &new.fragments);
    if f.table_entries != g.table_entries {
        return restart("fragments.table_entries", "the fragment table's size");
    }
    if f.hold_frames != g.hold_frames {
        return restart("fragments.hold_frames", "the bound on held early fragments");
    }
    if f.hold_bytes != g.hold_bytes {
        return restart(
            "fragments.hold_bytes",
            "the bound on held bytes and the size of the holder's ring",
        );
    }
    if old.api.listen != new.api.listen {
        return restart("api.listen", "the admin API's address");
    }
    if old.api.socket != new.api.socket {
        return restart("api.socket", "the admin API's socket");
    }
    if old.upgrade.socket != new.upgrade.socket {
        return restart("upgrade.socket", "the upgrade socket");
    }
    if old.api.socket_group != new.api.socket_group {
        return restart("api.socket_group", "the admin API's socket group");
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
            ("next_hop_cache = \"0s\"", "", "dataplane.next_hop_cache"),
            ("stale_after = \"30s\"", "", "dataplane.stale_after"),
            (
                "",
                "[fragments]\ntable_entries = 2048",
                "fragments.table_entries",
            ),
            ("", "[fragments]\nhold_frames = 16", "fragments.hold_frames"),
            (
                "",
                "[fragments]\nhold_bytes = 65536",
                "fragments.hold_bytes",
            ),
            (
                "",
                "[dataplane.afxdp]\npacket_threads = 2",
                "dataplane.afxdp",
            ),
            (
                "",
                "[api]\nlisten = \"127.0.0.1:9181\"\nread_token = \"r\"",
                "api.listen",
            ),
            ("", "[api]\nsocket = \"/run/other.sock\"", "api.socket"),
            ("", "[api]\nsocket_group = \"adm\"", "api.socket_group"),
            ("", "[log]\nformat = \"json\"", "log"),
        ] {
            let err = reloadable(&base, &config(dataplane, extra)).unwrap_err();
            assert_eq!(err.field().as_deref(), Some(field), "{err}");
            assert_eq!(err.http_status(), 422);
        }
    }

    #[test]
    fn tokens_resolve_and_open_token_files_are_refused() {
        assert_eq!(resolve_tokens(&config("", "")).unwrap(), Tokens::default());
        let c = config("", "[api]\ntoken = \"s3cret\"\nread_token = \"r3ad\"");
        let t = resolve_tokens(&c).unwrap();
        assert_eq!(t.admin.as_deref(), Some("s3cret"));
        assert_eq!(t.read.as_deref(), Some("r3ad"));
        let c = config("", "[api]\ntoken_file = \"/nonexistent/stator.token\"");
        assert_eq!(
            resolve_tokens(&c).unwrap_err().field().as_deref(),
            Some("api.token_file")
        );
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "stator-host-tokens-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("read-token");
        std::fs::write(&file, "r3ad-from-file\n").unwrap();
        let toml = format!("[api]\nread_token_file = {:?}", file.display().to_string());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve_tokens(&config("", &toml)).unwrap_err();
        assert_eq!(e.field().as_deref(), Some("api.read_token_file"));
        assert!(e.to_string().contains("every user"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let t = resolve_tokens(&config("", &toml)).unwrap();
        assert_eq!(t.read.as_deref(), Some("r3ad-from-file"));
        // An inline token in a file every user can read is refused; the same file closed
        // to others is not.
        let conf = dir.join("stator.toml");
        std::fs::write(&conf, "").unwrap();
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
        let inline = config("", "[api]\ntoken = \"s3cret\"");
        let e = config_file_secrets(&conf, &inline).unwrap_err();
        assert_eq!(e.field().as_deref(), Some("api.token"));
        assert!(config_file_secrets(&conf, &config("", "")).is_ok());
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(config_file_secrets(&conf, &inline).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tracer_key_files_hold_one_or_two_keys() {
        let k1 = "000102030405060708090a0b0c0d0e0f";
        let k2 = "f0e0d0c0b0a090807060504030201000";
        let one = parse_trace_keys(&format!("# current\n{k1}\n")).unwrap();
        assert_eq!(
            one,
            vec![[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]
        );
        assert_eq!(
            parse_trace_keys(&format!("{k2}\n{k1} # old\n"))
                .unwrap()
                .len(),
            2
        );
        assert!(parse_trace_keys("").unwrap_err().contains("no key"));
        assert!(
            parse_trace_keys(&format!("{k1}\n{k1}\n{k1}"))
                .unwrap_err()
                .contains("at most 2")
        );
        assert!(parse_trace_keys("0011").unwrap_err().contains("line 1"));
        assert!(parse_trace_keys(&k1.replace('0', "z")).is_err());
        assert_eq!(
            trace_keys(&config("", "")).unwrap(),
            stator_abi::TraceKeys::default(),
            "no key file: the tracer is off"
        );
    }

    #[test]
    fn the_api_cannot_name_new_files() {
        let base = config("", "");
        assert!(api_files_unchanged(&base, &base).is_ok());
        for (extra, field) in [
            ("[api]\ntoken_file = \"/etc/shadow\"", "api.token_file"),
            ("[api]\nsocket = \"/tmp/x.sock\"", "api.socket"),
            (
                "[bgp]\nlocal_as = 65000\nbird_config = \"/etc/cron.d/x\"\n[[bgp.neighbor]]\n\
                 address = \"10.0.0.1\"\nremote_as = 65001",
                "bgp.bird_config",
            ),
        ] {
            let e = api_files_unchanged(&base, &config("", extra)).unwrap_err();
            assert_eq!(e.field().as_deref(), Some(field), "{e}");
            assert_eq!(e.http_status(), 422);
        }
        let pinned = config("pin_path = \"/sys/fs/bpf/other\"", "");
        assert_eq!(
            api_files_unchanged(&base, &pinned)
                .unwrap_err()
                .field()
                .as_deref(),
            Some("dataplane.pin_path")
        );
        // Dropping a file setting is allowed: the default is no file of the caller's.
        let with = config("", "[api]\nread_token_file = \"/etc/stator/read-token\"");
        assert!(api_files_unchanged(&with, &base).is_ok());
        assert!(api_files_unchanged(&with, &with).is_ok());
    }
}
