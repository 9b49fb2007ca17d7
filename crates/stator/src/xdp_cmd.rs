//! `stator xdp attach|detach|status|stats`: the XDP data plane from the command line.
//!
//! `attach` loads the forwarder (reusing maps pinned by an earlier run), programs an empty
//! snapshot if nothing is active (the controller programs real ones), attaches to each
//! interface and pins the links, so the forwarder keeps running after this process exits.
//! `status` and `stats` only open the pinned maps and links.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;
use stator_core::{Proto, RealState, Snapshot};
use stator_xdp::{AttachMode, ConntrackMode, DEFAULT_PIN_PATH, Forwarder, Maps, XdpOptions};

/// The XDP data plane.
#[derive(Debug, clap::Subcommand)]
pub enum XdpCmd {
    /// Load the forwarder (reusing pinned maps) and attach it to interfaces.
    Attach(AttachArgs),
    /// Detach the forwarder from interfaces (the maps stay pinned unless --purge).
    Detach(DetachArgs),
    /// Show what is loaded and attached, the mode, program ids and the active generation.
    Status(ShowArgs),
    /// Show counters, drops by reason, and per-VIP / per-real traffic, summed across CPUs.
    Stats(ShowArgs),
}

/// Options of `stator xdp attach`.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// Interface to attach to (repeat for several).
    #[arg(long = "iface", required = true)]
    ifaces: Vec<String>,
    /// auto (native, else generic with a warning) | native | generic.
    #[arg(long, default_value = "auto")]
    mode: AttachMode,
    /// Connection table: percpu (one table per CPU: IPv4 in Stator's own 4-way bucket array
    /// `stator_ct4`, IPv6 in an LRU_PERCPU_HASH) | shared (one LRU_HASH for both families,
    /// per-CPU LRU lists).
    #[arg(long, default_value = "percpu")]
    conntrack: ConntrackMode,
    /// Connection-table capacity (entries).
    #[arg(long)]
    ct_entries: Option<u32>,
    /// Maglev slots per generation.
    #[arg(long)]
    slots_per_gen: Option<u32>,
    /// Reuse a successful FIB answer per CPU and backend for this many milliseconds (default
    /// 1000); 0 looks the next hop up for every packet.
    #[arg(long)]
    fib_cache_ms: Option<u64>,
    /// Another interface the forwarder may redirect to (repeat for several); attached
    /// interfaces are added automatically.
    #[arg(long = "tx-port")]
    tx_ports: Vec<String>,
    /// bpffs directory of the pinned maps and links.
    #[arg(long, default_value = DEFAULT_PIN_PATH)]
    pin_path: PathBuf,
}

/// Options of `stator xdp detach`.
#[derive(Debug, clap::Args)]
pub struct DetachArgs {
    /// Interface to detach from (repeat for several).
    #[arg(long = "iface", required_unless_present = "all")]
    ifaces: Vec<String>,
    /// Detach from every interface.
    #[arg(long)]
    all: bool,
    /// Then remove the pinned maps (connection table, counters, configuration).
    #[arg(long)]
    purge: bool,
    /// bpffs directory of the pinned maps and links.
    #[arg(long, default_value = DEFAULT_PIN_PATH)]
    pin_path: PathBuf,
}

/// Options of `stator xdp status` and `stats`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// bpffs directory of the pinned maps and links.
    #[arg(long, default_value = DEFAULT_PIN_PATH)]
    pin_path: PathBuf,
}

/// Runs one `stator xdp` command.
pub fn run(cmd: XdpCmd) -> Result<()> {
    match cmd {
        XdpCmd::Attach(a) => attach(a),
        XdpCmd::Detach(d) => detach(d),
        XdpCmd::Status(s) => status(s),
        XdpCmd::Stats(s) => stats(s),
    }
}

fn attach(a: AttachArgs) -> Result<()> {
    let defaults = XdpOptions::default();
    let opts = XdpOptions {
        pin_path: a.pin_path.clone(),
        conntrack: a.conntrack,
        ct_entries: a.ct_entries.unwrap_or(defaults.ct_entries),
        slots_per_gen: a.slots_per_gen.unwrap_or(defaults.slots_per_gen),
        attach_mode: a.mode,
        fib_cache: match a.fib_cache_ms {
            None => defaults.fib_cache,
            Some(0) => None,
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
        },
        ..defaults
    };
    let mut fwd = Forwarder::load(&opts)?;
    if fwd.ensure_programmed()? {
        println!(
            "no active configuration: programmed an empty snapshot (generation {})",
            fwd.active_generation()
        );
    }
    for iface in &a.ifaces {
        let at = fwd.attach(iface)?;
        crate::attach_out::print_attached(&at);
    }
    for port in &a.tx_ports {
        let idx = stator_xdp::ifindex(port)
            .with_context(|| format!("tx port `{port}` does not exist"))?;
        fwd.add_tx_port(idx)?;
        println!("redirect target {port} ({idx})");
    }
    let st = fwd.self_test()?;
    println!(
        "self-test ok: generation {} (config generation {}) answers; maps pinned under {}",
        st.active_gen,
        st.config_generation,
        a.pin_path.display()
    );
    Ok(())
}

fn detach(d: DetachArgs) -> Result<()> {
    let purge: fn(&std::path::Path) -> stator_xdp::Result<()> = stator_xdp::purge;
    crate::attach_out::detach(&d.pin_path, &d.ifaces, d.all, d.purge.then_some(purge))
}

fn iface_name(idx: u32) -> String {
    stator_xdp::ifname(idx).unwrap_or_else(|| "?".into())
}

fn status(s: ShowArgs) -> Result<()> {
    let st = stator_xdp::status(&s.pin_path)?;
    if s.json {
        let v = json!({
            "pin_path": st.pin_path,
            "active_gen": st.active_gen,
            "config_generation": st.config_generation,
            "programmed": st.programmed,
            "conntrack": st.conntrack.name(),
            "ct_entries": st.ct_entries,
            "ct4": st.ct4.map(|(buckets, o)| json!({
                "buckets_per_cpu": buckets,
                "ways": o.ways,
                "used": o.used,
                "full_buckets": o.full_buckets,
            })),
            "slots_per_gen": st.slots_per_gen,
            "fib_cache_us": st.fib_cache.map(|d| d.as_micros() as u64),
            "tx_ports": st.tx_ports.iter().map(|i| json!({"ifindex": i, "name": iface_name(*i)})).collect::<Vec<_>>(),
            "attachments": crate::attach_out::attachments_json(&st.attachments),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("pin path          {}", st.pin_path.display());
    println!(
        "active generation {} (config generation {}{})",
        st.active_gen,
        st.config_generation,
        if st.programmed {
            ""
        } else {
            ", never programmed"
        }
    );
    println!(
        "conntrack         {} ({} entries)",
        st.conntrack.name(),
        st.ct_entries
    );
    if let Some((buckets, o)) = st.ct4 {
        println!(
            "ipv4 table        stator_ct4, {buckets} buckets of 4 per CPU: {} of {} ways used, \
             {} buckets full",
            o.used, o.ways, o.full_buckets
        );
    }
    println!("maglev slots      {} per generation", st.slots_per_gen);
    match st.fib_cache {
        Some(d) => println!("next hops         cached per CPU for {d:?}"),
        None => println!("next hops         bpf_fib_lookup for every packet"),
    }
    let ports: Vec<String> = st
        .tx_ports
        .iter()
        .map(|i| format!("{}({i})", iface_name(*i)))
        .collect();
    println!(
        "tx ports          {}",
        if ports.is_empty() {
            "-".into()
        } else {
            ports.join(" ")
        }
    );
    crate::attach_out::print_attachments(&st.attachments);
    Ok(())
}

fn vip_label(addr: IpAddr, port: u16, proto: Proto) -> String {
    let p = proto;
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}/{p}"),
        IpAddr::V6(a) => format!("[{a}]:{port}/{p}"),
    }
}

fn stats(s: ShowArgs) -> Result<()> {
    let maps = Maps::open(&s.pin_path)?;
    let c = maps.counters()?;
    let snap = maps.active_snapshot()?.unwrap_or_else(Snapshot::default);
    let mut vips = Vec::new();
    for (k, v) in &snap.vips {
        let t = maps.vip_traffic(v.id.0)?;
        vips.push((vip_label(k.addr, k.port, k.proto), v.id.0, t));
    }
    let mut reals = Vec::new();
    for (id, r) in &snap.reals {
        let t = maps.real_traffic(id.0)?;
        let state = match r.state {
            RealState::Usable => "usable",
            RealState::Draining => "draining",
            RealState::Previous => "previous",
        };
        reals.push((id.0, r.addr, r.vip.0, state, t));
    }
    if s.json {
        let v = json!({
            "counters": c.iter().map(|(k, n)| (k.label().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "drops": c.iter_drops().map(|(r, n)| (r.label().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "vips": vips.iter().map(|(label, id, t)| json!({"vip": label, "id": id, "packets": t.packets, "bytes": t.bytes})).collect::<Vec<_>>(),
            "reals": reals.iter().map(|(id, addr, vip, state, t)| json!({
                "id": id, "addr": addr, "vip_id": vip, "state": state, "packets": t.packets, "bytes": t.bytes,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("counters (summed across CPUs)");
    for (k, n) in c.iter() {
        println!("  {:<18} {n:>14}", k.label());
    }
    println!("drops by reason");
    let mut any = false;
    for (r, n) in c.iter_drops().filter(|(_, n)| *n != 0) {
        println!("  {:<18} {n:>14}", r.label());
        any = true;
    }
    if !any {
        println!("  (none)");
    }
    if !vips.is_empty() {
        println!(
            "\n{:<34} {:>5} {:>14} {:>16}",
            "VIP", "ID", "PACKETS", "BYTES"
        );
        for (label, id, t) in &vips {
            println!("{label:<34} {id:>5} {:>14} {:>16}", t.packets, t.bytes);
        }
        println!(
            "\n{:>6} {:<28} {:>6} {:<9} {:>14} {:>16}",
            "REAL", "BACKEND", "VIP", "STATE", "PACKETS", "BYTES"
        );
        for (id, addr, vip, state, t) in &reals {
            println!(
                "{id:>6} {:<28} {vip:>6} {state:<9} {:>14} {:>16}",
                addr.to_string(),
                t.packets,
                t.bytes
            );
        }
    }
    Ok(())
}
