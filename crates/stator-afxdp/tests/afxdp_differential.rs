//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! The AF_XDP forwarder against the XDP forwarder, on real frames: the differential test's
//! seeded stream (`crates/stator-xdp/tests/diff`: random valid traffic, adversarial frames,
//! stateful episodes with commits that drain, remove and re-add backends) is sent as real
//! frames into the differential lab's interfaces — whose FIB answers redirect, no-neighbour,
//! MTU, blackhole, unreachable, prohibit and forwarding-disabled — first with the XDP forwarder
//! attached, then with the AF_XDP plane (`dataplane.mode = "afxdp"`'s plane: the redirect
//! program, the sockets, the I/O thread and one packet thread). What each sends out of every
//! interface is captured on the veth peers, and the two captures must be the same frames, byte
//! for byte (as multisets: the I/O thread may interleave the interfaces' frames differently).
//!
//! One packet thread, as the XDP run has one CPU: each plane then has one connection table. With
//! two, a flow's first fragment is steered by its datagram (so its other fragments find its
//! record) while the flow's unfragmented packets are steered by their 5-tuple: it is decided on
//! a thread whose table may lack the flow's entry, and after a backend change since the entry
//! was made it gets today's Maglev choice — docs/afxdp.md "Where the planes differ"; the XDP
//! forwarder does the same with per-CPU tables when RSS spreads them (CI saw it: seed
//! 0x57470001, one datagram of a UDP flow whose backend had been removed and re-added).
//!
//! `STATOR_AFXDP_DIFF_THREADING=run_to_completion` runs the AF_XDP half in the run-to-completion
//! mode (one thread owning queue 0 of every interface) instead of the steered default.
//!
//! Real time runs here, so what depends on the clock is fixed for both runs: connection-table
//! timeouts are a day (no expiry) and the SYN-flood guard is off; the differential test with
//! an injected clock (`crates/stator-xdp/tests/xdp/differential.rs`) holds those paths equal. The
//! generator's clock moves, CPU switches and next-hop-cache toggles are therefore skipped.
//! Commits are applied when every frame sent before them has been decided, in both runs.
//!
//! Fragments that arrive before their first (docs/forwarding.md §9) are held by both planes and
//! decided again once the first fragment's record exists: XDP's holder thread (`stator_hold`,
//! re-run with `BPF_PROG_TEST_RUN`) runs during the XDP run, the packet threads' own hold during
//! the AF_XDP run; a held frame counts as decided (`act_hold`) and again when it is released.
//! Traced packets are forwarded alike; the reports themselves are `afxdp/afxdp_fragments_redirects.rs`'s business.
//!
//! `STATOR_AFXDP_DIFF_SEED` and `STATOR_AFXDP_DIFF_FRAMES` replay another seed or length.

#[path = "common/mod.rs"]
mod afx;
#[path = "../../stator-xdp/tests/common/mod.rs"]
mod common;
#[path = "xdpdiff/mod.rs"]
mod diff;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use stator_abi::Counter;
use stator_afxdp::{AfxdpConfig, AfxdpForwarder, Threading, UmemConfig};
use stator_core::{RealState, Snapshot, ValidSnapshot};
use stator_lab::netns::Netns;
use stator_lab::stator::BpfFs;
use stator_xdp::XdpOptions;

use afx::RawSock;
use diff::frames::{Change, Gen, Step};
use diff::lab::Topo;
use diff::world::{Config, SEC, Universe};

const DEFAULT_SEED: u64 = 0x5747_0001;
const DEFAULT_FRAMES: usize = 12_000;
/// The interfaces both planes are attached to (lbx stays a non-redirect egress).
const ATTACHED: [&str; 3] = ["lbin", "lbout", "lbnf"];
/// Every interface whose peer we send from and capture on.
const PEERS: [(&str, &str); 4] = [
    ("lbin", "lbinp"),
    ("lbout", "lboutp"),
    ("lbx", "lbxp"),
    ("lbnf", "lbnfp"),
];

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    Some(match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex"),
        None => v.parse().expect("number"),
    })
}

/// The plane under test.
enum Plane {
    Xdp(Box<stator_xdp::Forwarder>, Box<stator_xdp::Holder>),
    Afxdp(Box<AfxdpForwarder>),
}

impl Plane {
    fn commit(&mut self, s: &ValidSnapshot) {
        match self {
            Plane::Xdp(f, _) => drop(f.commit(s).expect("XDP commit")),
            Plane::Afxdp(p) => drop(p.commit(s).expect("AF_XDP commit")),
        }
    }

    /// Early fragments held now.
    fn holding(&self) -> usize {
        match self {
            Plane::Xdp(_, h) => h.stats().holding,
            Plane::Afxdp(p) => p
                .reader()
                .ok()
                .and_then(|r| r.hold_stats())
                .map_or(0, |h| h.holding),
        }
    }

    /// Held fragments given back to be decided again so far. Both planes count a release
    /// before its second decision, so `decided()` read first minus this read after never
    /// counts a frame twice.
    fn released(&self) -> u64 {
        match self {
            Plane::Xdp(_, h) => h.stats().queue.released,
            Plane::Afxdp(p) => p
                .reader()
                .ok()
                .and_then(|r| r.hold_stats())
                .map_or(0, |h| h.queue.released),
        }
    }

    /// Frames decided once so far: decisions minus second decisions of released fragments
    /// (a lower bound while releases are under way, never more than the truth).
    fn first_decisions(&self) -> u64 {
        let decided = self.decided();
        decided.saturating_sub(self.released())
    }

    /// Packets decided so far (every packet ends in one action counter; a held fragment in
    /// `act_hold`, and once more when it is released).
    fn decided(&self) -> u64 {
        let acts = [
            Counter::ActAborted,
            Counter::ActDrop,
            Counter::ActPass,
            Counter::ActTx,
            Counter::ActRedirect,
            Counter::ActHold,
        ];
        match self {
            Plane::Xdp(f, _) => {
                let c = f.maps().counters().expect("counters");
                acts.iter().map(|&a| c.get(a)).sum()
            }
            Plane::Afxdp(p) => {
                let k = p.kernel().maps().counters().expect("counters");
                let u: u64 = p
                    .shards()
                    .iter()
                    .map(|s| {
                        let t = s.lock().expect("shard").totals();
                        t.packets() + t.get(Counter::ActHold)
                    })
                    .sum();
                acts.iter().map(|&a| k.get(a)).sum::<u64>() + u
            }
        }
    }
}

/// Time-dependent node parameters fixed (see the module essay); checked only for fitting the
/// maps, as the XDP differential test's snapshots (they may hold a drop path's inconsistency).
fn timeless(mut s: Snapshot) -> ValidSnapshot {
    s.node.tcp_timeout_ns = 86_400 * SEC;
    s.node.udp_timeout_ns = 86_400 * SEC;
    s.node.flood_new_per_sec = 0;
    ValidSnapshot::new_lenient(s).expect("representable")
}

/// Whether a captured frame is the forwarder's output (an encapsulated packet from the node,
/// or an echo reply from a VIP) rather than something the namespace's own stack sent or
/// forwarded for a packet the forwarder passed.
fn forwarder_output(f: &[u8], vips: &[IpAddr]) -> bool {
    let (l3, et) = if f.len() >= 18 && f[12..14] == [0x81, 0x00] {
        (18, [f[16], f[17]])
    } else if f.len() >= 14 {
        (14, [f[12], f[13]])
    } else {
        return false;
    };
    let ip = &f[l3..];
    let tunnel = |p: u8| matches!(p, 47 | 4 | 41 | 17);
    match et {
        [0x08, 0x00] if ip.len() >= 20 => {
            let src = IpAddr::from([ip[12], ip[13], ip[14], ip[15]]);
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            (src == IpAddr::V4(common::SRC_V4) && tunnel(ip[9]))
                || (ip[9] == 1 && ip.get(ihl) == Some(&0) && vips.contains(&src))
        }
        [0x86, 0xdd] if ip.len() >= 40 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&ip[8..24]);
            let src = IpAddr::from(a);
            (src == IpAddr::V6(common::src_v6()) && tunnel(ip[6]))
                || (ip[6] == 58 && ip.get(40) == Some(&129) && vips.contains(&src))
        }
        _ => false,
    }
}

/// What one plane did with the stream.
struct Outcome {
    /// (egress interface, frame) → how many times.
    out: BTreeMap<(String, Vec<u8>), usize>,
    sent: usize,
    unsendable: usize,
    commits: usize,
    decided: u64,
    /// Barriers that gave up waiting after a second without progress.
    stalls: usize,
    kinds: BTreeMap<&'static str, usize>,
}

/// Sends the seed's stream through `plane` (already attached, first snapshot committed) and
/// captures what comes out.
fn drive(ns: &Netns, mut plane: Plane, u: &Universe, seed: u64, frames: usize) -> (Outcome, Plane) {
    let vips: Vec<IpAddr> = u.vips.iter().map(|v| v.key.addr).collect();
    let socks: Vec<(String, RawSock)> = PEERS
        .iter()
        .map(|(dev, peer)| {
            let p = peer.to_string();
            (
                dev.to_string(),
                ns.run_in(move || RawSock::open(&p)).expect("peer socket"),
            )
        })
        .collect();
    let mut cfg = Config::initial(u);
    let mut generation = 1;
    let mut last_changed: Option<usize> = None;
    let mut g = Gen::new(seed, u.clone());
    let mut o = Outcome {
        out: BTreeMap::new(),
        sent: 0,
        unsendable: 0,
        commits: 0,
        decided: 0,
        stalls: 0,
        kinds: BTreeMap::new(),
    };
    let base = plane.first_decisions();
    let base_decided = plane.decided();
    let mut in_flight = 0usize;
    let stalls = std::cell::Cell::new(0usize);
    let settle = |plane: &Plane, sent: usize| {
        // every frame sent so far decided once (a released fragment's second decision is not
        // counted: it would let a commit overtake a frame still in flight), or nothing moves
        // for a second: a frame veth dropped (counted and printed; a commit may then overtake
        // a frame, so a difference after a stall names the stall)
        let mut last = (plane.first_decisions(), Instant::now());
        loop {
            let now = plane.first_decisions();
            if now.saturating_sub(base) >= sent as u64 {
                // XDP's holder polls `stator_frag` every millisecond while it holds frames: let
                // it release what the frames just sent made ready before anything else changes
                // (the packet threads release in the batch that brings the first fragment)
                if plane.holding() > 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return;
            }
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > Duration::from_secs(1) {
                stalls.set(stalls.get() + 1);
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    let mut seen = 0usize;
    while seen < frames {
        for step in g.episode(&cfg) {
            match step {
                Step::Frame(f) => {
                    seen += 1;
                    // lbx is not attached (it is the egress that is not a redirect target):
                    // its frames enter through lbin
                    let ingress = if f.ingress == 2 { 0 } else { f.ingress };
                    let sock = &socks[ingress].1;
                    if sock.try_send(&f.bytes) {
                        o.sent += 1;
                        in_flight += 1;
                        *o.kinds.entry(f.kind).or_default() += 1;
                    } else {
                        o.unsendable += 1;
                    }
                    if in_flight >= 128 {
                        settle(&plane, o.sent);
                        in_flight = 0;
                    }
                }
                Step::Commit(c) => {
                    let mut rng = rand_for_commit(seed, generation);
                    match c {
                        Change::Random => cfg.randomize(u, &mut rng),
                        Change::LastReal(state) => {
                            // the real of the last forwarded frame is not known here: change
                            // a real of the first VIP instead, in the same ways
                            let i = (generation as usize) % u.vips[0].reals.len();
                            let ri = u.vips[0].reals[i];
                            if cfg.state[ri].is_some() {
                                cfg.set(u, ri, state);
                                last_changed = Some(ri);
                            }
                        }
                        Change::Restore => {
                            if let Some(i) = last_changed {
                                cfg.set(u, i, Some(RealState::Usable));
                            }
                        }
                        Change::FloodLimit(_) | Change::Cache(_) | Change::Beat(_) => continue,
                    }
                    settle(&plane, o.sent);
                    in_flight = 0;
                    generation += 1;
                    plane.commit(&timeless(cfg.snapshot(u, generation)));
                    o.commits += 1;
                }
                Step::Advance(_) | Step::Rewind(_) | Step::SwitchCpu => {}
            }
        }
    }
    settle(&plane, o.sent);
    o.decided = plane.decided() - base_decided;
    o.stalls = stalls.get();
    for (dev, s) in &socks {
        for f in s.drain(Duration::from_millis(300), Duration::from_secs(30)) {
            if forwarder_output(&f, &vips) {
                *o.out.entry((dev.clone(), f)).or_default() += 1;
            }
        }
    }
    (o, plane)
}

/// The commit generator's randomness, as the XDP differential test seeds it.
fn rand_for_commit(seed: u64, generation: u64) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[test]
fn afxdp_and_xdp_send_the_same_bytes_for_the_same_frames() {
    common::require_root();
    let seed = env_u64("STATOR_AFXDP_DIFF_SEED").unwrap_or(DEFAULT_SEED);
    let frames = env_u64("STATOR_AFXDP_DIFF_FRAMES").map_or(DEFAULT_FRAMES, |n| n as usize);
    let topo = Topo::new("afxd");
    let ns = topo.ns().clone();
    let u = Universe::new();
    let dir = stator_testkit::scratch::unique_path("sax-diff-bpf", "");
    let bpffs = BpfFs::mount(&dir).expect("bpffs");
    let first = timeless(Config::initial(&u).snapshot(&u, 1));
    let started = Instant::now();
    // The peers: no IPv6 chatter of their own (it would reach the forwarder between frames),
    // and an XDP_PASS program each, without which veth drops what XDP_TX and XDP_REDIRECT
    // send them.
    let peer_pins = dir.join("peers");
    ns.run_in({
        let (ns, pins) = (ns.clone(), peer_pins.clone());
        move || {
            for (_, peer) in PEERS {
                ns.sysctl(&format!("net.ipv6.conf.{peer}.disable_ipv6"), "1")
                    .expect("sysctl");
                stator_xdp::attach_pass(&pins, peer, stator_xdp::AttachMode::Native)
                    .expect("XDP_PASS on a peer");
            }
        }
    })
    .expect("enter the lab");

    // the XDP forwarder
    let xdp_opts = XdpOptions {
        pin_path: dir.join("xdp"),
        ct_entries: 1 << 16,
        slots_per_gen: 1 << 18,
        ..XdpOptions::default()
    };
    let xdp = ns
        .run_in({
            let (opts, first) = (xdp_opts.clone(), first.clone());
            move || {
                let mut f = stator_xdp::Forwarder::load(&opts).expect("load XDP");
                for i in ATTACHED {
                    f.attach(i).expect("attach XDP");
                }
                f.commit(&first).expect("commit");
                let holder = stator_xdp::Holder::start(
                    opts.pin_path.clone(),
                    f.program_fd_owned().expect("program fd"),
                    stator_core::HoldLimits::default(),
                )
                .expect("start XDP's holder");
                (f, holder)
            }
        })
        .expect("enter the lab");
    let (xdp, holder) = xdp;
    // the sender's CPU is the one veth runs XDP on: one CPU, one per-CPU table
    afx_pin(0);
    let (x, xdp) = drive(
        &ns,
        Plane::Xdp(Box::new(xdp), Box::new(holder)),
        &u,
        seed,
        frames,
    );
    let Plane::Xdp(xdp, holder) = xdp else {
        unreachable!("the XDP run")
    };
    let xhold = holder.stats();
    holder.stop();
    drop(xdp);
    let _ = stator_xdp::detach_all(&xdp_opts.pin_path);
    let _ = stator_xdp::purge(&xdp_opts.pin_path);

    // the AF_XDP forwarder
    let af_opts = XdpOptions {
        pin_path: dir.join("afxdp"),
        slots_per_gen: 1 << 18,
        ..XdpOptions::default()
    };
    let threading = match std::env::var("STATOR_AFXDP_DIFF_THREADING").as_deref() {
        Ok("run_to_completion") => Threading::RunToCompletion,
        Ok("steered") | Err(_) => Threading::Steered,
        Ok(other) => panic!("STATOR_AFXDP_DIFF_THREADING={other}: steered or run_to_completion"),
    };
    println!("AF_XDP threading: {}", threading.name());
    let cfg = AfxdpConfig {
        threading,
        packet_threads: 1,
        pin: false,
        queue_depth: 4096,
        ct_capacity: 1 << 16,
        umem: UmemConfig {
            frames: 4096,
            frame_size: 4096,
            check_frames: true,
        },
        ..AfxdpConfig::default()
    };
    let plane = ns
        .run_in({
            let (opts, first) = (af_opts.clone(), first.clone());
            move || {
                let mut p = AfxdpForwarder::load(&opts, cfg).expect("load AF_XDP");
                p.attach(&ATTACHED.map(String::from))
                    .expect("attach AF_XDP");
                p.commit(&first).expect("commit");
                p
            }
        })
        .expect("enter the lab");
    let (a, plane) = drive(&ns, Plane::Afxdp(Box::new(plane)), &u, seed, frames);
    let (stats, ahold) = match &plane {
        Plane::Afxdp(p) => {
            let r = p.reader().expect("reader");
            (r.stats(), r.hold_stats().expect("attached"))
        }
        Plane::Xdp(..) => unreachable!("the AF_XDP run"),
    };
    drop(plane);
    let _ = stator_xdp::detach_all(&af_opts.pin_path);
    let _ = stator_xdp::purge(&af_opts.pin_path);
    let _ = stator_xdp::detach_all(&peer_pins);
    drop(bpffs);

    let total = |o: &Outcome| o.out.values().sum::<usize>();
    println!(
        "seed {seed:#x}: {} frames sent ({} could not be sent on a veth: runts, over the MTU), \
         {} commits; decided: XDP {}, AF_XDP {}; forwarder output: XDP {} frames, AF_XDP {}; \
         {:.1} s; barriers that gave up after a second without progress: XDP {}, AF_XDP {}",
        x.sent,
        x.unsendable,
        x.commits,
        x.decided,
        a.decided,
        total(&x),
        total(&a),
        started.elapsed().as_secs_f64(),
        x.stalls,
        a.stalls
    );
    let mut by_egress: BTreeMap<&str, usize> = BTreeMap::new();
    for ((dev, _), n) in &x.out {
        *by_egress.entry(dev.as_str()).or_default() += n;
    }
    println!("  XDP output by egress: {by_egress:?}");
    println!(
        "  AF_XDP: steered {} (fallback {}), tx {}, recycled {}, user_pass {}",
        stats.io("steered"),
        stats.io("steer_fallback"),
        stats.io("tx"),
        stats.io("recycled"),
        stats.threads_total("user_pass")
    );
    println!(
        "  early fragments (held/released/expired/full): XDP {}/{}/{}/{}, AF_XDP {}/{}/{}/{}",
        xhold.queue.held,
        xhold.queue.released,
        xhold.queue.expired,
        xhold.queue.full,
        ahold.queue.held,
        ahold.queue.released,
        ahold.queue.expired,
        ahold.queue.full
    );
    println!("  frame kinds sent: {:?}", x.kinds);
    assert_eq!((x.sent, x.commits), (a.sent, a.commits), "the same stream");
    assert!(
        x.sent >= 10_000 || frames < 10_000,
        "at least 10,000 frames"
    );
    assert!(
        x.decided >= x.sent as u64 && a.decided >= a.sent as u64,
        "every frame decided in both"
    );
    assert_eq!(
        stats.io("steer_fallback"),
        0,
        "no flow left its packet thread (else its table could differ legitimately)"
    );
    let only = |l: &Outcome, r: &Outcome| -> Vec<String> {
        l.out
            .iter()
            .filter(|(k, n)| r.out.get(*k) != Some(*n))
            .take(5)
            .map(|((dev, f), n)| {
                format!(
                    "{n}× out of {dev}, {} bytes: {}",
                    f.len(),
                    f.iter().map(|b| format!("{b:02x}")).collect::<String>()
                )
            })
            .collect()
    };
    let (xo, ao) = (only(&x, &a), only(&a, &x));
    assert!(
        xo.is_empty() && ao.is_empty(),
        "outputs differ\n  only XDP:\n    {}\n  only AF_XDP:\n    {}",
        xo.join("\n    "),
        ao.join("\n    ")
    );
    assert!(total(&x) > 1000, "the stream produced forwarder output");
    assert_eq!(
        (xhold.queue.held, xhold.queue.released),
        (ahold.queue.held, ahold.queue.released),
        "both planes held and released the same early fragments"
    );
}

fn afx_pin(cpu: usize) {
    common::pin_to_cpu(cpu);
}
