//! `stator decap attach|detach|status|stats`: the backend side from the command line.
//!
//! `attach` loads the decap program (reusing maps pinned by an earlier run), writes its
//! configuration (the tunnel endpoint addresses and the GUE port), attaches it to each
//! interface and pins the links, so it keeps running after this process exits. `status` and
//! `stats` only open the pinned maps and links. See docs/decap.md.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;
use stator_abi::STATOR_GUE_PORT;
use stator_xdp::{AttachMode, DEFAULT_DECAP_PIN_PATH, Decap, DecapConfig, DecapMaps, DecapOptions};

/// The backend-side decapsulation program.
#[derive(Debug, clap::Subcommand)]
pub enum DecapCmd {
    /// Load the decap program, configure it and attach it to interfaces.
    Attach(AttachArgs),
    /// Detach it from interfaces (the maps stay pinned unless --purge).
    Detach(DetachArgs),
    /// Show the configuration and the attachments.
    Status(ShowArgs),
    /// Show the counters: decapsulated, passed and rejected packets by reason.
    Stats(ShowArgs),
}

/// Options of `stator decap attach`.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// Interface to attach to (repeat for several).
    #[arg(long = "iface", required = true)]
    ifaces: Vec<String>,
    /// An outer destination address that is this host's tunnel endpoint (repeat for several);
    /// tunnel packets to other addresses are passed to the kernel untouched. Default: any.
    #[arg(long = "addr")]
    addrs: Vec<IpAddr>,
    /// UDP destination port of GUE packets; 0 turns GUE off.
    #[arg(long, default_value_t = STATOR_GUE_PORT as u16)]
    gue_port: u16,
    /// auto (native, else generic with a warning) | native | generic.
    #[arg(long, default_value = "auto")]
    mode: AttachMode,
    /// bpffs directory of the pinned maps and links.
    #[arg(long, default_value = DEFAULT_DECAP_PIN_PATH)]
    pin_path: PathBuf,
}

/// Options of `stator decap detach`.
#[derive(Debug, clap::Args)]
pub struct DetachArgs {
    /// Interface to detach from (repeat for several).
    #[arg(long = "iface", required_unless_present = "all")]
    ifaces: Vec<String>,
    /// Detach from every interface.
    #[arg(long)]
    all: bool,
    /// Then remove the pinned maps (configuration and counters).
    #[arg(long)]
    purge: bool,
    /// bpffs directory of the pinned maps and links.
    #[arg(long, default_value = DEFAULT_DECAP_PIN_PATH)]
    pin_path: PathBuf,
}

/// Options of `stator decap status` and `stats`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// bpffs directory of the pinned maps and links.
    #[arg(long, default_value = DEFAULT_DECAP_PIN_PATH)]
    pin_path: PathBuf,
}

/// Runs one `stator decap` command.
pub fn run(cmd: DecapCmd) -> Result<()> {
    match cmd {
        DecapCmd::Attach(a) => attach(a),
        DecapCmd::Detach(d) => detach(d),
        DecapCmd::Status(s) => status(s),
        DecapCmd::Stats(s) => stats(s),
    }
}

fn describe(cfg: &DecapConfig) -> (String, String) {
    let addrs = if cfg.addrs.is_empty() {
        "any".to_string()
    } else {
        cfg.addrs
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let gue = cfg
        .gue_port
        .map_or("off".to_string(), |p| format!("UDP port {p}"));
    (addrs, gue)
}

fn attach(a: AttachArgs) -> Result<()> {
    let cfg = DecapConfig {
        addrs: a.addrs.iter().copied().collect::<BTreeSet<_>>(),
        gue_port: (a.gue_port != 0).then_some(a.gue_port),
    };
    cfg.validate()?;
    let opts = DecapOptions {
        pin_path: a.pin_path.clone(),
        attach_mode: a.mode,
    };
    let mut decap = Decap::load(&opts)?;
    decap.configure(&cfg)?;
    for iface in &a.ifaces {
        let at = decap.attach(iface)?;
        crate::attach_out::print_attached(&at);
    }
    let (addrs, gue) = describe(&cfg);
    println!(
        "decapsulating GRE, IPIP and GUE ({gue}) to {addrs}; maps pinned under {}",
        a.pin_path.display()
    );
    Ok(())
}

fn detach(d: DetachArgs) -> Result<()> {
    let purge: fn(&std::path::Path) -> stator_xdp::Result<()> = stator_xdp::decap_purge;
    crate::attach_out::detach(&d.pin_path, &d.ifaces, d.all, d.purge.then_some(purge))
}

fn status(s: ShowArgs) -> Result<()> {
    let st = stator_xdp::decap_status(&s.pin_path)?;
    if s.json {
        let v = json!({
            "pin_path": st.pin_path,
            "addrs": st.config.addrs.iter().map(IpAddr::to_string).collect::<Vec<_>>(),
            "any_addr": st.config.addrs.is_empty(),
            "gue_port": st.config.gue_port,
            "attachments": crate::attach_out::attachments_json(&st.attachments),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let (addrs, gue) = describe(&st.config);
    println!("pin path      {}", st.pin_path.display());
    println!("addresses     {addrs}");
    println!("GUE           {gue}");
    crate::attach_out::print_attachments(&st.attachments);
    Ok(())
}

fn stats(s: ShowArgs) -> Result<()> {
    let c = DecapMaps::open(&s.pin_path)?.counters()?;
    if s.json {
        let v = json!({
            "counters": c.iter().map(|(k, n)| (k.label().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "decapsulated": c.decapsulated(),
            "packets": c.packets(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("outcomes (summed across CPUs)");
    for (k, n) in c.iter().filter(|(k, _)| k.is_outcome()) {
        println!("  {:<18} {n:>14}", k.label());
    }
    println!("rejected, by reason");
    let mut any = false;
    for (k, n) in c.iter().filter(|(k, n)| !k.is_outcome() && *n != 0) {
        println!("  {:<18} {n:>14}", k.label());
        any = true;
    }
    if !any {
        println!("  (none)");
    }
    Ok(())
}
