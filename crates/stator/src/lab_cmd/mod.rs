//! `stator lab up|down|status|demo`: a whole Maglev deployment in network namespaces on this
//! machine (`stator_lab::deploy`), the live view of it, and the demo that fails a node and a
//! backend in front of the viewer. See docs/lab.md.
//!
//! Everything a lab creates carries its prefix (`--prefix`, default `stlab-`) and keeps its
//! state in one directory (`/run/stator-lab/<prefix>`), so `down` removes it even after a
//! crash, and two labs with different prefixes run side by side.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use stator_lab::deploy::{self, DeploySpec, Deployment};
use stator_lab::netns::{Netns, is_root};
use stator_lab::serve::Server;
use stator_xdp::AttachMode;

mod demo;
mod view;

/// The lab: a deployment of Stator nodes, a router and backends in namespaces.
#[derive(Debug, clap::Subcommand)]
pub enum LabCmd {
    /// Build the lab and start everything; return once the router routes the VIPs over every
    /// node (the lab stays up until `stator lab down`).
    Up(UpArgs),
    /// Remove the lab: processes, namespaces, pins, state (idempotent).
    Down(LabArgs),
    /// Show the nodes, the router's routes and the backends of a running lab.
    Status(LabArgs),
    /// Bring the lab up, drive traffic, fail a node and a backend with a live view, tear down.
    Demo(DemoArgs),
    /// A backend's servers (started by the lab in the backend's namespace).
    #[command(hide = true)]
    Serve(ServeArgs),
}

/// Which lab.
#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// Prefix of the lab's namespaces (and of its state directory's name).
    #[arg(long, default_value = "stlab-")]
    prefix: String,
    /// State directory; default /run/stator-lab/<prefix>.
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl LabArgs {
    fn dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| Path::new("/run/stator-lab").join(self.prefix.trim_end_matches('-')))
    }
}

/// Options of `stator lab up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// `S` of the lab's addresses 10.S.x.y and fd00:S:x::y.
    #[arg(long, default_value_t = 42)]
    subnet: u8,
    /// Stator nodes (1–8).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Backends (1–16).
    #[arg(long, default_value_t = 4)]
    backends: usize,
    /// How many of the nodes (the last ones) run the AF_XDP data plane instead of XDP.
    #[arg(long, default_value_t = 0)]
    afxdp_nodes: usize,
    #[command(flatten)]
    extras: Extras,
}

/// What a lab runs besides the nodes, router and backends.
#[derive(Debug, Clone, clap::Args)]
pub struct Extras {
    /// Run Prometheus in the router's namespace, scraping every node's /metrics every second
    /// and evaluating Stator's alerting rules (examples/stator-alerts.yml).
    #[arg(long)]
    prometheus: bool,
    /// BGP hold timers only: no BFD between the router and the nodes (with BFD, the default,
    /// a dead node is dropped in about 0.3 s; with the 3 s hold time, in 2-3 s).
    #[arg(long)]
    no_bfd: bool,
}

/// Options of `stator lab demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    lab: LabArgs,
    /// `S` of the lab's addresses.
    #[arg(long, default_value_t = 42)]
    subnet: u8,
    /// Leave the lab up at the end (remove it with `stator lab down`).
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    extras: Extras,
}

/// Options of the hidden `stator lab serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The name the servers answer with.
    #[arg(long)]
    name: String,
    /// The network namespace the process runs in (by name).
    #[arg(long)]
    netns: String,
    /// An HTTP server's address (repeat for several).
    #[arg(long)]
    http: Vec<SocketAddr>,
    /// A long-lived TCP echo server's address (repeat for several).
    #[arg(long)]
    echo: Vec<SocketAddr>,
    /// A UDP echo server's address (repeat for several).
    #[arg(long)]
    udp: Vec<SocketAddr>,
    /// Where to write the counters (`http=N echo=N udp=N`, rewritten every 200 ms).
    #[arg(long)]
    stats: PathBuf,
}

/// Runs a `stator lab` subcommand.
pub fn run(cmd: LabCmd) -> Result<()> {
    if !matches!(cmd, LabCmd::Serve(_)) && !is_root() {
        bail!("stator lab creates network namespaces and loads XDP programs: run it as root");
    }
    match cmd {
        LabCmd::Up(args) => up(&args),
        LabCmd::Down(args) => {
            let r = deploy::down(&args.prefix, &args.dir())?;
            if r.is_empty() {
                println!("no lab with prefix {} is up", args.prefix);
            } else {
                println!(
                    "lab {} down: {} namespaces removed, {} processes killed by pid file{}",
                    args.prefix,
                    r.namespaces,
                    r.processes,
                    if r.unmounted { ", bpffs unmounted" } else { "" }
                );
            }
            Ok(())
        }
        LabCmd::Status(args) => view::status(&args.prefix, &args.dir()),
        LabCmd::Demo(args) => demo::run(&args),
        LabCmd::Serve(args) => serve(&args),
    }
}

/// The spec of a lab from the command line, with this binary as the nodes' `stator`.
fn spec(
    lab: &LabArgs,
    subnet: u8,
    nodes: usize,
    backends: usize,
    extras: &Extras,
) -> Result<DeploySpec> {
    if !(1..=8).contains(&nodes) || !(1..=16).contains(&backends) {
        bail!("--nodes must be 1-8 and --backends 1-16");
    }
    let binary = std::env::current_exe().context("finding the stator binary")?;
    let mut spec = DeploySpec::new(&lab.prefix, subnet, &lab.dir(), &binary);
    spec.nodes = nodes;
    spec.backends = backends;
    spec.weights = vec![1; backends];
    spec.prometheus = extras.prometheus;
    if !extras.no_bfd {
        spec.bfd_nodes = (0..nodes).collect();
    }
    Ok(spec)
}

/// Attaches the pass-through XDP program on a router port facing a node (docs/xdp.md: veth
/// delivers a node's XDP_TX frames only to a peer with an XDP program).
pub fn peer_xdp(router: &Netns, port: &str, pin: &Path) -> std::result::Result<(), String> {
    let (pin, port) = (pin.to_owned(), port.to_owned());
    router
        .run_in(move || stator_xdp::attach_pass(&pin, &port, AttachMode::Native))
        .map_err(|e| e.to_string())?
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn up(args: &UpArgs) -> Result<()> {
    let mut spec = spec(
        &args.lab,
        args.subnet,
        args.nodes,
        args.backends,
        &args.extras,
    )?;
    if args.afxdp_nodes > spec.nodes {
        bail!("--afxdp-nodes must be at most --nodes");
    }
    spec.afxdp_nodes = args.afxdp_nodes;
    println!(
        "building lab {} ({} nodes, {} of them AF_XDP, {} backends, {}{}) in {} …",
        spec.prefix,
        spec.nodes,
        spec.afxdp_nodes,
        spec.backends,
        if spec.bfd_nodes.is_empty() {
            "BGP hold timers only"
        } else {
            "BFD"
        },
        if spec.prometheus { ", Prometheus" } else { "" },
        spec.dir.display()
    );
    let started = std::time::Instant::now();
    let d = Deployment::up(&spec, &peer_xdp).context("bringing the lab up")?;
    println!("lab up in {:.1}s", started.elapsed().as_secs_f64());
    view::print_guide(&d);
    d.persist();
    Ok(())
}

/// Runs a backend's servers until killed, writing their counters every 200 ms.
fn serve(args: &ServeArgs) -> Result<()> {
    let ns = Netns::existing(&args.netns);
    let mut http = Vec::new();
    let mut echo = Vec::new();
    let mut udp = Vec::new();
    for &a in &args.http {
        http.push(Server::http(&ns, a, &args.name).with_context(|| format!("HTTP on {a}"))?);
    }
    for &a in &args.echo {
        echo.push(Server::tcp_echo(&ns, a, &args.name).with_context(|| format!("echo on {a}"))?);
    }
    for &a in &args.udp {
        udp.push(Server::udp_echo(&ns, a, &args.name).with_context(|| format!("UDP on {a}"))?);
    }
    let tmp = args.stats.with_extension("tmp");
    loop {
        let sum = |v: &[Server]| v.iter().map(Server::served).sum::<u64>();
        let text = format!(
            "http={} echo={} udp={}\n",
            sum(&http),
            sum(&echo),
            sum(&udp)
        );
        std::fs::write(&tmp, text).context("writing the counters")?;
        std::fs::rename(&tmp, &args.stats).context("writing the counters")?;
        std::thread::sleep(Duration::from_millis(200));
    }
}
