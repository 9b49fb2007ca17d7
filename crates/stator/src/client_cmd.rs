//! `stator status|vips|backends|drain|undrain|trace|apply`: the admin API from the command
//! line, as aligned tables (or the API's JSON with `--json`). See docs/api.md.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use stator_api::client::ApiClient;

use crate::table::{Table, human};

/// How to reach the API (every client command takes these). The default is the node's Unix
/// socket, which needs no token (root, or a member of the group `stator`); `--api` asks the
/// TCP endpoint instead, with a token.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// The admin API's Unix socket (or $STATOR_SOCKET).
    #[arg(long, default_value = DEFAULT_SOCKET, conflicts_with = "api")]
    socket: PathBuf,
    /// The admin API's TCP address instead of its socket (or $STATOR_API), e.g.
    /// 127.0.0.1:9180; needs a token.
    #[arg(long)]
    api: Option<String>,
    /// Bearer token for --api (or $STATOR_TOKEN).
    #[arg(long)]
    token: Option<String>,
    /// A file holding the bearer token for --api.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Print the API's JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// `api.socket`'s default.
const DEFAULT_SOCKET: &str = "/run/stator/api.sock";

impl ApiArgs {
    fn client(&self) -> Result<ApiClient> {
        let api = self
            .api
            .clone()
            .or_else(|| std::env::var("STATOR_API").ok().filter(|a| !a.is_empty()));
        let Some(api) = api else {
            let socket = std::env::var_os("STATOR_SOCKET")
                .filter(|_| self.socket.as_os_str() == DEFAULT_SOCKET)
                .map_or_else(|| self.socket.clone(), PathBuf::from);
            if self.token.is_some() || self.token_file.is_some() {
                anyhow::bail!(
                    "--token and --token-file are for the TCP endpoint (--api ADDR); the socket \
                     checks who calls"
                );
            }
            return Ok(ApiClient::unix(socket));
        };
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("reading {}", f.display()))?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => std::env::var("STATOR_TOKEN").ok(),
        };
        Ok(ApiClient::new(&api, token)?)
    }
}

/// The client commands.
#[derive(Debug, clap::Subcommand)]
pub enum ClientCmd {
    /// The node: config and snapshot generations, forwarder health, checks, BGP.
    Status(ApiArgs),
    /// VIPs: backends usable / draining / absent, announcement, traffic.
    Vips(ApiArgs),
    /// Backends: health, drain, per VIP: state, weight, table share, connections, traffic.
    Backends(ApiArgs),
    /// Proxy listeners: address, protocol, workers, steering, scheduler; per backend: state,
    /// weight, active, requests, errors.
    Listeners(ApiArgs),
    /// Drain a backend: no new connections; existing ones kept until they end or the timeout.
    Drain(DrainArgs),
    /// End a drain.
    Undrain(UndrainArgs),
    /// Which backend a flow gets on this node, and why (connection table or Maglev slot).
    Trace(TraceArgs),
    /// Apply a configuration file to the running node (validated, committed atomically).
    Apply(ApplyArgs),
}

/// `stator drain`.
#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// The backend's stable name (its `id`, else address:port).
    id: String,
    /// How long existing connections are kept (default: api.drain_timeout).
    #[arg(long)]
    timeout: Option<String>,
    #[command(flatten)]
    api: ApiArgs,
}

/// `stator undrain`.
#[derive(Debug, clap::Args)]
pub struct UndrainArgs {
    /// The backend's stable name.
    id: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `stator trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// The VIP: its name or address (an address with --send).
    #[arg(long)]
    vip: String,
    /// The client's address (required without --send; with it, the default is the source
    /// the route to the VIP uses).
    #[arg(long)]
    src: Option<String>,
    /// The client's port.
    #[arg(long, default_value_t = 40000)]
    sport: u16,
    /// The destination port (default: the VIP's; 80 with --send).
    #[arg(long)]
    dport: Option<u16>,
    /// tcp or udp (default: the VIP's; tcp with --send).
    #[arg(long)]
    proto: Option<String>,
    /// Trace a TCP SYN (a new connection: Maglev decides, the table is not consulted).
    #[arg(long)]
    syn: bool,
    /// Send a marked packet through the network instead of asking the API: every Stator
    /// node it crosses reports its decision to this process (the paper's packet tracer).
    #[arg(long)]
    send: bool,
    /// With --send: the UDP datagram as two IP fragments (shows fragment redirection).
    #[arg(long, requires = "send")]
    fragment: bool,
    /// With --send: where reports go (default: the route's source address, a free port).
    #[arg(long, requires = "send")]
    listen: Option<std::net::SocketAddr>,
    /// With --send: how long to wait for reports, in milliseconds.
    #[arg(long, default_value_t = 2000, requires = "send")]
    wait_ms: u64,
    /// With --send: the cluster's tracer key file (the nodes' tracer.key_file): the mark is
    /// sealed with its first key.
    #[arg(long, default_value = "/etc/stator/trace.key", requires = "send")]
    key_file: PathBuf,
    #[command(flatten)]
    api: ApiArgs,
}

impl TraceArgs {
    fn send_opts(&self) -> Result<crate::trace_send::SendOpts> {
        let vip: std::net::IpAddr = self
            .vip
            .parse()
            .with_context(|| format!("--send needs the VIP's address, not {:?}", self.vip))?;
        let src = self
            .src
            .as_deref()
            .map(str::parse)
            .transpose()
            .context("--src is not an IP address")?;
        let tcp = match self.proto.as_deref() {
            None | Some("tcp") => true,
            Some("udp") => false,
            Some(p) => anyhow::bail!("--proto must be tcp or udp, not {p:?}"),
        };
        Ok(crate::trace_send::SendOpts {
            vip,
            dport: self.dport.unwrap_or(80),
            tcp,
            src,
            sport: self.sport,
            fragment: self.fragment,
            listen: self.listen,
            wait: std::time::Duration::from_millis(self.wait_ms),
            json: self.api.json,
            key: crate::trace_send::read_key(&self.key_file)?,
        })
    }
}

/// `stator apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The configuration file (TOML).
    file: PathBuf,
    /// Apply only if the running config has this generation (optimistic concurrency).
    #[arg(long)]
    if_match: Option<u64>,
    #[command(flatten)]
    api: ApiArgs,
}

/// Runs a client command; an error is printed as one line and exits with status 1 (2 when
/// the API could not be reached).
pub fn run(cmd: ClientCmd) -> Result<()> {
    if let Err(e) = dispatch(cmd) {
        let unreachable = e
            .downcast_ref::<stator_control::ControlError>()
            .is_some_and(|c| matches!(c, stator_control::ControlError::Io { .. }));
        eprintln!("error: {e:#}");
        std::process::exit(if unreachable { 2 } else { 1 });
    }
    Ok(())
}

fn dispatch(cmd: ClientCmd) -> Result<()> {
    match cmd {
        ClientCmd::Status(a) => show(&a, "/v1/status", print_status),
        ClientCmd::Vips(a) => show(&a, "/v1/vips", print_vips),
        ClientCmd::Backends(a) => show(&a, "/v1/backends", print_backends),
        ClientCmd::Listeners(a) => show(&a, "/v1/listeners", print_listeners),
        ClientCmd::Drain(d) => {
            let body = d.timeout.as_ref().map(|t| json!({ "timeout": t }));
            let v = d.api.client()?.post_json(
                &format!("/v1/backends/{}/drain", encode(&d.id)),
                body.as_ref(),
            )?;
            output(&d.api, &v, |v| {
                println!("{}: draining ({})", d.id, drain_text(&v["drain"]))
            })
        }
        ClientCmd::Undrain(u) => {
            let v = u
                .api
                .client()?
                .post_json(&format!("/v1/backends/{}/undrain", encode(&u.id)), None)?;
            output(&u.api, &v, |_| println!("{}: undrained", u.id))
        }
        ClientCmd::Trace(t) if t.send => crate::trace_send::run(&t.send_opts()?),
        ClientCmd::Trace(t) => {
            let Some(src) = &t.src else {
                anyhow::bail!("--src is required (the client's address), unless --send");
            };
            let mut q = format!(
                "/v1/trace?vip={}&src={}&sport={}",
                encode(&t.vip),
                encode(src),
                t.sport
            );
            if let Some(p) = t.dport {
                q += &format!("&dport={p}");
            }
            if let Some(p) = &t.proto {
                q += &format!("&proto={}", encode(p));
            }
            if t.syn {
                q += "&syn=true";
            }
            show(&t.api, &q, print_trace)
        }
        ClientCmd::Apply(a) => {
            let text = std::fs::read_to_string(&a.file)
                .with_context(|| format!("reading {}", a.file.display()))?;
            let v = a.api.client()?.put_config(&text, a.if_match)?;
            output(&a.api, &v, |v| {
                println!(
                    "applied {}: config generation {}, snapshot generation {} ({} VIPs, {} reals; \
                     build {:.1} ms, commit {:.1} ms, {} table(s) rebuilt)",
                    a.file.display(),
                    v["config_generation"],
                    v["generation"],
                    v["vips"],
                    v["reals"],
                    v["build_seconds"].as_f64().unwrap_or(0.0) * 1e3,
                    v["commit_seconds"].as_f64().unwrap_or(0.0) * 1e3,
                    v["tables_rebuilt"],
                );
                for w in v["warnings"].as_array().into_iter().flatten() {
                    println!("warning: {}", w.as_str().unwrap_or_default());
                }
            })
        }
    }
}

/// Percent-encodes a path segment or query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn show(args: &ApiArgs, path: &str, print: fn(&Value)) -> Result<()> {
    let v = args.client()?.get_json(path)?;
    output(args, &v, print)
}

fn output(args: &ApiArgs, v: &Value, print: impl FnOnce(&Value)) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        print(v);
    }
    Ok(())
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn ms(v: &Value) -> String {
    format!("{:.1} ms", v.as_f64().unwrap_or(0.0) * 1e3)
}

fn drain_text(d: &Value) -> String {
    match d["state"].as_str() {
        Some("draining") => format!(
            "{:.0}s left",
            d["remaining_seconds"].as_f64().unwrap_or(0.0)
        ),
        Some("drained") => "drained".into(),
        _ => "-".into(),
    }
}

fn print_status(v: &Value) {
    println!(
        "node        {} (stator {}), {}",
        s(&v["node"]),
        s(&v["version"]),
        s(&v["phase"])
    );
    let c = &v["config"];
    println!(
        "config      generation {} from {} ({} reloads applied, {} refused)",
        c["generation"],
        s(&c["source"]),
        c["reloads_ok"],
        c["reloads_failed"]
    );
    let n = &v["snapshot"];
    println!(
        "snapshot    generation {}: {} VIPs, {} reals; last build {}, commit {}",
        n["generation"],
        n["vips"],
        n["reals"],
        ms(&n["last_build_seconds"]),
        ms(&n["last_commit_seconds"])
    );
    let f = &v["forwarder"];
    let ifaces: Vec<String> = f["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    println!(
        "forwarder   {} {} on {}{}",
        s(&f["kind"]),
        if f["healthy"] == true {
            "healthy"
        } else {
            "UNHEALTHY"
        },
        if ifaces.is_empty() {
            "-".into()
        } else {
            ifaces.join(", ")
        },
        f["reason"]
            .as_str()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    let h = &v["health"];
    println!(
        "health      {} checks: {} up, {} down, {} unknown",
        h["checks"], h["up"], h["down"], h["unknown"]
    );
    let b = &v["bgp"];
    if b["enabled"] == true {
        let sessions: Vec<String> = b["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| format!("{} {}", s(&x["name"]), s(&x["state"])))
            .collect();
        let announced: Vec<String> = b["announced"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        println!(
            "bgp         BIRD {}; sessions: {}; announced: {}",
            if b["bird_reachable"] == true {
                "reachable"
            } else {
                "UNREACHABLE"
            },
            if sessions.is_empty() {
                "-".into()
            } else {
                sessions.join(", ")
            },
            if announced.is_empty() {
                "-".into()
            } else {
                announced.join(", ")
            },
        );
    } else {
        println!("bgp         off");
    }
    if let Some(e) = v["last_error"]["message"].as_str() {
        println!("last error  {e}");
    }
}

fn print_vips(v: &Value) {
    let mut t = Table::new(&[
        "VIP", "ADDRESS", "PORT", "PROTO", "USABLE", "DRAINING", "ABSENT", "ANNOUNCE", "PACKETS",
        "BYTES",
    ]);
    for x in v["vips"].as_array().into_iter().flatten() {
        let port = match x["port"].as_u64() {
            Some(0) => "any".into(),
            _ => s(&x["port"]),
        };
        t.row(vec![
            s(&x["name"]),
            s(&x["address"]),
            port,
            s(&x["protocol"]),
            s(&x["backends"]["usable"]),
            s(&x["backends"]["draining"]),
            s(&x["backends"]["absent"]),
            if x["announce"] == true {
                "yes".into()
            } else {
                "no".into()
            },
            human(x["traffic"]["packets"].as_u64().unwrap_or(0)),
            human(x["traffic"]["bytes"].as_u64().unwrap_or(0)),
        ]);
    }
    print!("{}", t.render());
}

fn print_backends(v: &Value) {
    let mut t = Table::new(&[
        "BACKEND", "ADDRESS", "HEALTH", "DRAIN", "VIP", "STATE", "WEIGHT", "SHARE", "CONNS",
        "PACKETS",
    ]);
    for b in v["backends"].as_array().into_iter().flatten() {
        let vips: Vec<&Value> = b["vips"].as_array().into_iter().flatten().collect();
        let first = |x: Option<&&Value>| -> [String; 6] {
            match x {
                None => std::array::from_fn(|_| "-".into()),
                Some(x) => [
                    s(&x["vip"]),
                    s(&x["plan"]["state"]),
                    s(&x["weight"]),
                    format!("{:.1}%", x["table_share"].as_f64().unwrap_or(0.0) * 100.0),
                    s(&x["connections"]),
                    human(x["traffic"]["packets"].as_u64().unwrap_or(0)),
                ],
            }
        };
        let [vip, state, weight, share, conns, packets] = first(vips.first());
        t.row(vec![
            s(&b["id"]),
            s(&b["address"]),
            s(&b["health"]),
            drain_text(&b["drain"]),
            vip,
            state,
            weight,
            share,
            conns,
            packets,
        ]);
        for x in vips.iter().skip(1) {
            let [vip, state, weight, share, conns, packets] = first(Some(x));
            t.row(vec![
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                vip,
                state,
                weight,
                share,
                conns,
                packets,
            ]);
        }
    }
    print!("{}", t.render());
    if v["conntrack"]["complete"] == false {
        println!(
            "(connections counted over the first {} flows of the connection table)",
            v["conntrack"]["flows_walked"]
        );
    }
}

fn print_listeners(v: &Value) {
    let mut t = Table::new(&[
        "LISTENER",
        "ADDRESS",
        "PROTO",
        "WORKERS",
        "STEERING",
        "SCHEDULER",
        "BACKEND",
        "STATE",
        "WEIGHT",
        "ACTIVE",
        "REQUESTS",
        "ERRORS",
    ]);
    for l in v["listeners"].as_array().into_iter().flatten() {
        let backends: Vec<&Value> = l["backends"].as_array().into_iter().flatten().collect();
        for (i, b) in backends.iter().enumerate() {
            let errors: u64 = b["errors"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, n)| n.as_u64())
                .sum();
            let head = if i == 0 {
                vec![
                    s(&l["name"]),
                    s(&l["address"]),
                    s(&l["protocol"]),
                    s(&l["workers"]),
                    s(&l["steering"]),
                    s(&l["scheduler"]),
                ]
            } else {
                vec![String::new(); 6]
            };
            let mut row = head;
            row.extend([
                s(&b["id"]),
                s(&b["state"]),
                s(&b["weight"]),
                s(&b["active"]),
                human(b["requests"].as_u64().unwrap_or(0)),
                human(errors),
            ]);
            t.row(row);
        }
    }
    print!("{}", t.render());
    for l in v["listeners"].as_array().into_iter().flatten() {
        println!(
            "{}: {} connections ({} open), {} requests, {} retries",
            s(&l["name"]),
            l["connections"]["total"],
            l["connections"]["active"],
            l["requests"],
            l["retries"]
        );
    }
}

fn print_trace(v: &Value) {
    let f = &v["flow"];
    println!(
        "flow      {} {}:{} -> {}:{}{}  (hash {})",
        s(&f["proto"]),
        s(&f["src"]),
        f["sport"],
        s(&f["dst"]),
        f["dport"],
        if f["syn"] == true { " SYN" } else { "" },
        v["hash"]
    );
    match v["vip"]["name"].as_str() {
        Some(name) => println!(
            "vip       {name} (id {}{})",
            v["vip"]["id"],
            if v["vip"]["wildcard"] == true {
                ", any-port entry"
            } else {
                ""
            }
        ),
        None => println!("vip       none: not for a VIP, passed to the kernel"),
    }
    for e in v["conntrack"].as_array().into_iter().flatten() {
        println!(
            "conntrack cpu {}: {} (real {}), idle {:.1}s: {}",
            e["cpu"],
            s(&e["backend"]["id"]),
            e["backend"]["real_id"],
            e["idle_seconds"].as_f64().unwrap_or(0.0),
            s(&e["verdict"])
        );
    }
    let m = &v["maglev"];
    if !m["slot"].is_null() {
        println!(
            "maglev    slot {} of {}: {}",
            m["slot"],
            m["table_size"],
            s(&m["backend"]["id"])
        );
        let p = &m["previous"];
        if !p.is_null() {
            let (before, now) = (&p["backend"]["real_id"], &m["backend"]["real_id"]);
            println!(
                "previous  slot {}: {} for {:.0}s more{}",
                m["slot"],
                s(&p["backend"]["id"]),
                p["until_seconds"].as_f64().unwrap_or(0.0),
                if before == now {
                    ": the same backend"
                } else {
                    ": a miss that is not a SYN goes to the current one with a second chance to it"
                }
            );
        }
    }
    let chosen = &v["backend"];
    match v["decision"].as_str() {
        Some("conntrack") => println!(
            "=> {} ({}), connection-table hit on cpu {}",
            s(&chosen["id"]),
            s(&chosen["address"]),
            v["conntrack_cpu"]
        ),
        Some("maglev") => println!(
            "=> {} ({}), Maglev slot {}",
            s(&chosen["id"]),
            s(&chosen["address"]),
            m["slot"]
        ),
        Some("drop") => println!("=> dropped: {}", s(&v["drop_reason"])),
        _ => println!("=> passed to the kernel"),
    }
}
