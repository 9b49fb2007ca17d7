//! `stator bench decap`: what the backend's decap program costs per packet under
//! BPF_PROG_TEST_RUN, and what second chance adds to it (docs/decap.md, "Benchmark"):
//!
//! - `not_tunnel`: a TCP packet that is not for a tunnel — classified and passed (the floor:
//!   the call itself and the classification);
//! - `gue`: GUE to this host, decapsulated and passed (what every tunnel packet costs);
//! - `gue_private`: GUE variant 0 with 8 bytes of private data that are not a second chance
//!   (skipped): the cost of the longer header, without anything second chance does;
//! - `gue_sc_hop1`: a second chance already passed on (hop 1): the socket lookup (to count it
//!   delivered or orphaned), delivered;
//! - `gue_sc_local`: a second chance (hop 0) whose connection a socket here owns: the socket
//!   lookup (`bpf_skc_lookup_tcp`) finds it, delivered — the lookup's cost over `gue`;
//! - `gue_sc_pass_on`: a second chance no socket here owns (only a listener): the lookup, the
//!   outer header rewritten and a FIB lookup, sent on (XDP_TX).
//!
//! Each figure is the mean of the kernel's duration over `calls` single runs (the program
//! rewrites the frame, so the kernel's own repeat would run it on its own output), the best of
//! `--rounds`; every run's outcome is checked against its expected counter. All in a network
//! namespace of its own, on one CPU. Benchmarks never fail on a timing.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;
use stator_abi::DecapCounter as C;
use stator_lab::netns::{self, Netns};
use stator_lab::stator::BpfFs;
use stator_testkit::expect::{Outer, Tunnel, encapsulated};
use stator_testkit::{Packet, tcp_flags};
use stator_xdp::testrun::{TestRunOpts, run_xdp};
use stator_xdp::{Decap, DecapConfig, DecapOptions, SecondChance};

use crate::error::{Context, Result, bail};
use crate::pin::pin_to_cpu;
use crate::report::{cpu_model, write_report};

/// Options of `stator bench decap`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchDecapArgs {
    /// Print the report as JSON on stdout (it is always written to --out too).
    #[arg(long)]
    json: bool,
    /// A short smoke run (the figures are not meaningful).
    #[arg(long)]
    quick: bool,
    /// Where to write the JSON report.
    #[arg(long, default_value = "target/bench/decap.json")]
    out: PathBuf,
    /// Measure every figure this many times and keep the best.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const VIP_PORT: u16 = 8080;
/// This backend's tunnel address (on `bin`).
const HERE: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);
/// The load balancer the packets come from (allowed to ask for a second chance).
const NODE: Ipv4Addr = Ipv4Addr::new(10, 30, 0, 2);
/// The previous backend named, routed back out of `bin`.
const PREV: Ipv4Addr = Ipv4Addr::new(10, 20, 0, 7);
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

/// One measured row.
struct Row {
    name: &'static str,
    what: &'static str,
    ns: f64,
}

/// The namespace: `bin` carries this backend's tunnel address; the previous backend's subnet
/// is routed back out of it through a static neighbour, so the FIB answers with `bin` itself
/// (XDP_TX); the VIP on `lo` with one established connection to it.
struct Lab {
    ns: Netns,
    ifindex: u32,
}

impl Lab {
    fn new() -> Result<Self> {
        let ns = Netns::create(&stator_testkit::scratch::unique_name("stator-bdecap"))?;
        netns::veth(&ns, "bin", &ns, "binp")?;
        ns.sysctl("net.ipv4.conf.all.forwarding", "1")?;
        ns.sysctl("net.ipv4.conf.bin.forwarding", "1")?;
        ns.addr_add("bin", "10.10.0.1/24")?;
        ns.addr_add("lo", "10.0.0.10/32")?;
        ns.ip(["link", "set", "lo", "up"])?;
        ns.ip([
            "neigh",
            "replace",
            "10.10.0.2",
            "lladdr",
            "02:aa:00:00:00:02",
            "dev",
            "bin",
        ])?;
        ns.ip([
            "route",
            "add",
            "10.20.0.0/16",
            "via",
            "10.10.0.2",
            "dev",
            "bin",
        ])?;
        let ifindex = ns.ifindex("bin")?;
        Ok(Self { ns, ifindex })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.ns.clone().delete();
    }
}

/// A frame from the node to this backend: `inner` in GUE, with a second chance naming
/// [`PREV`] at `hop` when `sc` is set.
fn frame(inner: &Packet, sc: Option<u8>) -> Vec<u8> {
    let tunnel = match sc {
        None => Tunnel::Gue {
            port: stator_abi::STATOR_GUE_PORT as u16,
        },
        Some(_) => Tunnel::GueSc {
            port: stator_abi::STATOR_GUE_PORT as u16,
            prev: IpAddr::V4(PREV),
        },
    };
    let mut f = encapsulated(
        &Outer {
            dmac: [0x02, 0, 0, 0, 0, 1],
            smac: [0x02, 0, 0, 0, 0, 2],
            src: IpAddr::V4(NODE),
            dst: IpAddr::V4(HERE),
            ttl: 64,
            tunnel,
            hash: 0x1234,
            tos: None,
            df: None,
        },
        &inner.ip_bytes(),
        0,
    );
    if let Some(hop) = sc {
        // Ethernet 14, IPv4 20, UDP 8, GUE 4, then "SC", family, hop
        f[14 + 20 + 8 + 4 + 3] = hop;
    }
    f
}

fn measure(calls: u64, rounds: u32, ifindex: u32) -> Result<Vec<Row>> {
    pin_to_cpu(0);
    let bpffs = BpfFs::mount(&stator_testkit::scratch::unique_path(
        "stator-bench-decap",
        "",
    ))?;
    let mut decap = Decap::load(&DecapOptions::with_pin_path(bpffs.path().join("decap")))
        .context("loading stator_decap")?;
    decap
        .configure(&DecapConfig {
            addrs: [IpAddr::V4(HERE)].into_iter().collect(),
            second_chance: Some(SecondChance {
                from: [
                    stator_core::Prefix::new(IpAddr::V4(Ipv4Addr::new(10, 30, 0, 0)), 24)
                        .context("the nodes' prefix")?,
                ]
                .into_iter()
                .collect(),
                source_v4: Some(HERE),
                source_v6: None,
            }),
            ..DecapConfig::default()
        })
        .context("configuring stator_decap")?;
    // an established connection to the VIP (both ends here): the lookup's hit
    let at = SocketAddr::new(IpAddr::V4(VIP), VIP_PORT);
    let listener = TcpListener::bind(at).context("listening on the VIP")?;
    let client = TcpStream::connect(at).context("connecting to the VIP")?;
    let (_server, _) = listener.accept().context("accepting")?;
    let owned = client.local_addr().context("the client's port")?.port();
    let nobody = owned.wrapping_add(1).max(1024);
    let ack = |sport: u16| {
        Packet::tcp(
            IpAddr::V4(VIP),
            sport,
            IpAddr::V4(VIP),
            VIP_PORT,
            tcp_flags::ACK,
        )
    };
    let plain = Packet::tcp(
        IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1)),
        40000,
        IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)),
        80,
        tcp_flags::ACK,
    )
    .frame();
    let mut private = frame(&ack(owned), Some(0));
    // Ethernet 14, IPv4 20, UDP 8, GUE 4: "SC" becomes other private data
    private[14 + 20 + 8 + 4..14 + 20 + 8 + 4 + 2].copy_from_slice(b"XY");
    let cases: [(&str, &str, Vec<u8>, u32, C); 6] = [
        (
            "not_tunnel",
            "not for a tunnel: classified, passed",
            plain,
            XDP_PASS,
            C::Pass,
        ),
        (
            "gue",
            "GUE, decapsulated",
            frame(&ack(owned), None),
            XDP_PASS,
            C::Gue,
        ),
        (
            "gue_private",
            "GUE with private data that is not a second chance",
            private,
            XDP_PASS,
            C::Gue,
        ),
        (
            "gue_sc_hop1",
            "second chance at hop 1: lookup, delivered",
            frame(&ack(owned), Some(1)),
            XDP_PASS,
            C::ScDelivered,
        ),
        (
            "gue_sc_local",
            "second chance, a socket here owns it: lookup hit, delivered",
            frame(&ack(owned), Some(0)),
            XDP_PASS,
            C::ScLocal,
        ),
        (
            "gue_sc_pass_on",
            "second chance, no socket: lookup, rewrite, FIB, sent on",
            frame(&ack(nobody), Some(0)),
            XDP_TX,
            C::ScForwarded,
        ),
    ];
    let prog = decap.program();
    let opts = TestRunOpts {
        repeat: 1,
        ingress_ifindex: ifindex,
        ..TestRunOpts::default()
    };
    let mut rows = Vec::new();
    for (name, what, f, action, counter) in cases {
        // the outcome, checked once: a figure for the wrong path would flatter
        let before = decap.counters()?;
        let out = run_xdp(prog, &f, opts).context("BPF_PROG_TEST_RUN")?;
        let delta = decap.counters()?.since(&before);
        if out.action != action || delta.get(counter) != 1 {
            bail!(
                "{name}: action {} (want {action}), counters {:?} (want {})",
                out.action,
                delta.nonzero(),
                counter.label()
            );
        }
        let mut best = f64::MAX;
        for _ in 0..rounds {
            let mut total = 0u64;
            for _ in 0..calls {
                total += u64::from(
                    run_xdp(prog, &f, opts)
                        .context("BPF_PROG_TEST_RUN")?
                        .duration_ns,
                );
            }
            best = best.min(total as f64 / calls as f64);
        }
        rows.push(Row {
            name,
            what,
            ns: best,
        });
    }
    drop(decap);
    drop(bpffs);
    Ok(rows)
}

/// Runs the benchmark.
///
/// # Errors
/// Not root, the namespace or the program cannot be set up, a run takes another path than
/// its row says.
pub fn run(args: BenchDecapArgs) -> Result<()> {
    if !stator_xdp::is_root() {
        bail!(
            "stator bench decap loads a BPF program and creates a network namespace: run as root"
        );
    }
    let (calls, rounds) = if args.quick {
        (2_000u64, 1)
    } else {
        (200_000, args.rounds.max(1))
    };
    let started = Instant::now();
    let lab = Lab::new().context("setting up the benchmark namespace")?;
    let ifindex = lab.ifindex;
    let rows = lab.ns.run_in(move || measure(calls, rounds, ifindex))??;
    drop(lab);
    let by = |n: &str| rows.iter().find(|r| r.name == n).map_or(f64::NAN, |r| r.ns);
    let report = json!({
        "bench": "decap",
        "quick": args.quick,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpu_model": cpu_model(),
        "method": {
            "per_call": format!("repeat=1, {calls} calls, mean of the kernel's duration (includes per-call overhead)"),
            "rounds": rounds,
            "figure": "the best of `rounds` measurements",
            "loadavg_at_start": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        },
        "rows": rows.iter().map(|r| json!({
            "name": r.name, "what": r.what, "ns": r.ns, "over_gue_ns": r.ns - by("gue"),
        })).collect::<Vec<_>>(),
        "second_chance_hit_over_private_ns": by("gue_sc_local") - by("gue_private"),
        "pass_on_over_private_ns": by("gue_sc_pass_on") - by("gue_private"),
        "elapsed_s": started.elapsed().as_secs_f64(),
    });
    if write_report(&args.out, args.json, &report)? {
        return Ok(());
    }
    println!(
        "stator bench decap: ns per packet, BPF_PROG_TEST_RUN, mean of {calls} calls, best of {rounds}"
    );
    println!("{:<16} {:>8} {:>10}  what", "row", "ns", "over gue");
    for r in &rows {
        println!(
            "{:<16} {:>8.1} {:>+10.1}  {}",
            r.name,
            r.ns,
            r.ns - by("gue"),
            r.what
        );
    }
    println!("\nreport written to {}", args.out.display());
    Ok(())
}
