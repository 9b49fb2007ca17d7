//! `stator decap attach|detach|status|stats`: the backend side from the command line.
//!
//! `attach` loads the decap program (reusing maps pinned by an earlier run), writes its
//! configuration (the tunnel endpoint addresses and the GUE port), attaches it to each
//! interface and pins the links, so it keeps running after this process exits. `status` and
//! `stats` only open the pinned maps and links. See docs/decap.md.
//!
//! `--vip` on `attach` and `detach` also puts the VIPs a backend serves on `lo` and takes them
//! off again, so that the packaged unit `stator-decap.service` does a backend's whole setup in
//! one command each way. List options take commas (`--addr 10.1.1.11,2001:db8::11`), so that a
//! unit can pass a list from its environment file as one word.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;
use stator_abi::{DecapCounterKind, STATOR_GUE_PORT};
use stator_core::Prefix;
use stator_xdp::{
    AttachMode, DEFAULT_DECAP_PIN_PATH, Decap, DecapConfig, DecapMaps, DecapOptions, SecondChance,
};

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
    /// Interface to attach to (repeat, or separate with commas, for several).
    #[arg(long = "iface", required = true, value_delimiter = ',')]
    ifaces: Vec<String>,
    /// An outer destination address that is this host's tunnel endpoint (repeat, or separate
    /// with commas, for several); tunnel packets to other addresses are passed to the kernel
    /// untouched. Default: any.
    #[arg(long = "addr", value_delimiter = ',')]
    addrs: Vec<IpAddr>,
    /// A VIP this backend serves, added to `lo` as a host address (/32, /128) before the
    /// program is attached (repeat, or separate with commas, for several).
    #[arg(long = "vip", value_delimiter = ',')]
    vips: Vec<IpAddr>,
    /// UDP destination port of GUE packets; 0 turns GUE off.
    #[arg(long, default_value_t = STATOR_GUE_PORT as u16)]
    gue_port: u16,
    /// Turns second chance on (docs/decap.md §7): the load balancers' source prefixes (repeat,
    /// or separate with commas) — a GUE packet from them that names a previous backend, for a
    /// connection no socket here owns, is passed on to that backend once.
    #[arg(long = "second-chance-from", value_delimiter = ',')]
    second_chance_from: Vec<Prefix>,
    /// This host's IPv4 address: the source of second-chance packets passed on over IPv4.
    #[arg(long)]
    source_v4: Option<Ipv4Addr>,
    /// This host's IPv6 address: the source of second-chance packets passed on over IPv6.
    #[arg(long)]
    source_v6: Option<Ipv6Addr>,
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
    /// Interface to detach from (repeat, or separate with commas, for several).
    #[arg(long = "iface", required_unless_present = "all", value_delimiter = ',')]
    ifaces: Vec<String>,
    /// Detach from every interface.
    #[arg(long)]
    all: bool,
    /// Then remove the pinned maps (configuration and counters).
    #[arg(long)]
    purge: bool,
    /// Then remove these VIPs from `lo` (repeat, or separate with commas, for several); one
    /// that is not there is no error.
    #[arg(long = "vip", value_delimiter = ',')]
    vips: Vec<IpAddr>,
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

/// Second chance in words: `off`, or its sources and the addresses it passes packets on from.
fn describe_second_chance(cfg: &DecapConfig) -> String {
    let Some(sc) = &cfg.second_chance else {
        return "off".into();
    };
    let from: Vec<String> = sc.from.iter().map(Prefix::to_string).collect();
    let sources: Vec<String> = [sc.source_v4.map(IpAddr::V4), sc.source_v6.map(IpAddr::V6)]
        .iter()
        .flatten()
        .map(IpAddr::to_string)
        .collect();
    format!(
        "from {}; passed on from {}",
        from.join(" "),
        sources.join(" ")
    )
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
    if a.second_chance_from.is_empty() && (a.source_v4.is_some() || a.source_v6.is_some()) {
        anyhow::bail!(
            "--source-v4/--source-v6 are for second chance: name the load balancers with \
             --second-chance-from"
        );
    }
    let cfg = DecapConfig {
        addrs: a.addrs.iter().copied().collect::<BTreeSet<_>>(),
        gue_port: (a.gue_port != 0).then_some(a.gue_port),
        second_chance: (!a.second_chance_from.is_empty()).then(|| SecondChance {
            from: a.second_chance_from.iter().copied().collect(),
            source_v4: a.source_v4,
            source_v6: a.source_v6,
        }),
    };
    cfg.validate()?;
    let opts = DecapOptions {
        pin_path: a.pin_path.clone(),
        attach_mode: a.mode,
    };
    for vip in &a.vips {
        vip_on_lo("replace", *vip)?;
        println!("{vip} on lo");
    }
    let mut decap = Decap::load(&opts)?;
    decap.configure(&cfg)?;
    for iface in &a.ifaces {
        let at = decap.attach(iface)?;
        crate::attach_out::print_attached(&at);
    }
    let (addrs, gue) = describe(&cfg);
    println!(
        "decapsulating GRE, IPIP and GUE ({gue}) to {addrs}; second chance {}; maps pinned \
         under {}",
        describe_second_chance(&cfg),
        a.pin_path.display()
    );
    Ok(())
}

fn detach(d: DetachArgs) -> Result<()> {
    let purge: fn(&std::path::Path) -> stator_xdp::Result<()> = stator_xdp::decap_purge;
    crate::attach_out::detach(&d.pin_path, &d.ifaces, d.all, d.purge.then_some(purge))?;
    for vip in &d.vips {
        if vip_on_lo("del", *vip)? {
            println!("{vip} removed from lo");
        } else {
            println!("{vip} was not on lo");
        }
    }
    Ok(())
}

/// `ip addr <verb> VIP/32 dev lo` (`/128` for IPv6); false when `del` finds no such address.
/// iproute2 rather than rtnetlink by hand: it is on every host a backend runs on, and this
/// runs twice per boot.
fn vip_on_lo(verb: &str, vip: IpAddr) -> Result<bool> {
    let len = if vip.is_ipv6() { 128 } else { 32 };
    let out = std::process::Command::new("ip")
        .args(["addr", verb, &format!("{vip}/{len}"), "dev", "lo"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| anyhow::anyhow!("running `ip addr {verb} {vip}/{len} dev lo`: {e}"))?;
    if out.status.success() {
        return Ok(true);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if verb == "del" && err.contains("Cannot assign requested address") {
        return Ok(false);
    }
    anyhow::bail!("`ip addr {verb} {vip}/{len} dev lo` failed: {}", err.trim())
}

fn status(s: ShowArgs) -> Result<()> {
    let st = stator_xdp::decap_status(&s.pin_path)?;
    if s.json {
        let v = json!({
            "pin_path": st.pin_path,
            "addrs": st.config.addrs.iter().map(IpAddr::to_string).collect::<Vec<_>>(),
            "any_addr": st.config.addrs.is_empty(),
            "gue_port": st.config.gue_port,
            "second_chance": st.config.second_chance.as_ref().map(|sc| json!({
                "from": sc.from.iter().map(Prefix::to_string).collect::<Vec<_>>(),
                "source_v4": sc.source_v4,
                "source_v6": sc.source_v6,
            })),
            "attachments": crate::attach_out::attachments_json(&st.attachments),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let (addrs, gue) = describe(&st.config);
    println!("pin path      {}", st.pin_path.display());
    println!("addresses     {addrs}");
    println!("GUE           {gue}");
    println!("second chance {}", describe_second_chance(&st.config));
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
    for (title, kind) in [
        ("rejected, by reason", DecapCounterKind::Reason),
        ("second chances delivered here", DecapCounterKind::Detail),
    ] {
        println!("{title}");
        let mut any = false;
        for (k, n) in c.iter().filter(|(k, n)| k.kind() == kind && *n != 0) {
            println!("  {:<18} {n:>14}", k.label());
            any = true;
        }
        if !any {
            println!("  (none)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: DecapCmd,
    }

    /// What `stator-decap.service` passes from `decap.env`: each list as one word, commas
    /// between the items.
    #[test]
    fn lists_take_commas_as_the_unit_passes_them() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let cli = Cli::try_parse_from([
            "decap",
            "attach",
            "--iface",
            "eth0,eth1",
            "--addr",
            "10.1.1.11,2001:db8::11",
            "--vip",
            "192.0.2.10",
            "--second-chance-from",
            "10.1.0.0/24,fd01::/64",
            "--source-v4",
            "10.1.1.11",
        ])
        .unwrap();
        let DecapCmd::Attach(a) = cli.cmd else {
            panic!("{cli:?}")
        };
        assert_eq!(a.ifaces, ["eth0", "eth1"]);
        assert_eq!(a.addrs, [ip("10.1.1.11"), ip("2001:db8::11")]);
        assert_eq!(a.vips, [ip("192.0.2.10")]);
        let from: Vec<String> = a.second_chance_from.iter().map(Prefix::to_string).collect();
        assert_eq!(from, ["10.1.0.0/24", "fd01::/64"]);
        assert_eq!(a.source_v4, Some(std::net::Ipv4Addr::new(10, 1, 1, 11)));
        // a prefix with host bits is refused with a reason, not silently widened
        let e = Cli::try_parse_from([
            "decap",
            "attach",
            "--iface",
            "eth0",
            "--second-chance-from",
            "10.1.0.7/24",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("host bits"), "{e}");
        let cli = Cli::try_parse_from([
            "decap",
            "detach",
            "--all",
            "--vip",
            "192.0.2.10,2001:db8::10",
        ])
        .unwrap();
        let DecapCmd::Detach(d) = cli.cmd else {
            panic!("{cli:?}")
        };
        assert!(d.all && !d.purge);
        assert_eq!(d.vips, [ip("192.0.2.10"), ip("2001:db8::10")]);
        assert!(
            Cli::try_parse_from(["decap", "attach", "--iface", "eth0", "--vip", "lo"]).is_err(),
            "a VIP is an address"
        );
    }
}
