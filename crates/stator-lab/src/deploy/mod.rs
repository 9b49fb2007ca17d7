//! A whole Maglev deployment — the paper's Figure 2 — built from [`crate::topo`]: clients, a
//! router running BIRD with ECMP, Stator nodes each running `stator run` (XDP on its uplink,
//! BIRD peering with the router), and backends that decapsulate with `stator decap` and answer
//! straight to the clients.
//!
//! ```text
//!  client <p>c0 ── router <p>r (BIRD, merge paths on) ──┬─ l0 <p>l0  stator run + BIRD  10.S.1.11
//!  64 addresses     ECMP by 5-tuple over the nodes      ├─ l1 <p>l1                    10.S.1.12
//!  10.S.100.2…                                          ├─ l2 <p>l2                    10.S.1.13
//!                                    backend LAN brbe ──┴─ b0…b3 <p>b0  stator decap, VIP on lo,
//!                                                          `stator lab serve`          10.S.2.11…
//! ```
//!
//! Every node runs the same configuration (only `[node]`, the BGP files and BFD differ): the
//! VIPs [`VIP_V4`] and [`VIP_V6`], each with HTTP on port [`HTTP_PORT`], a long-lived TCP echo
//! on [`ECHO_PORT`] and a UDP echo on [`UDP_PORT`], over the backends with their weights
//! (`pool web4` / `web6`, HTTP health checks on each backend's own address), and the proxy
//! tier: an HTTP `[[listener]]` `web4` on the node's IPv4 address, port [`LISTENER_PORT`],
//! in front of `pool web4` (a client reaches it through the router). Nodes announce
//! the VIPs to the router with BGP hold time [`DeploySpec::hold_time`], so a node that dies is
//! withdrawn in seconds — or, for the nodes in [`DeploySpec::bfd_nodes`], with BFD beside the
//! session, in about 0.3 s. With [`DeploySpec::prometheus`], Prometheus runs in the router's
//! namespace and scrapes every node's admin API at the node's address.
//!
//! State lives in one directory ([`DeploySpec::dir`]): configurations, logs, BIRD sockets and
//! pid files, each process's pid file, the backends' served counters, and the bpffs every pin
//! goes to (mounted there). [`down`] finds everything from the prefix and that directory alone,
//! so it cleans up after a crashed run too, and is idempotent.
//!
//! Handles for scenarios: stop a node's `stator run` gracefully ([`Deployment::node_stop`]) or
//! kill it ([`Deployment::node_kill`]) and start it again ([`Deployment::node_start`]); cut and
//! restore a node's uplink ([`Deployment::cut`], [`Deployment::restore`]); stop and start a
//! backend's servers ([`Deployment::backend_stop`], [`Deployment::backend_start`]); change
//! weights or membership and reload every node with the same configuration
//! ([`Deployment::set_weight`], [`Deployment::set_in_config`], [`Deployment::reload_all`]);
//! read each node's admin API ([`Deployment::api`]) and the router's next hops.
//!
//! This module loads no BPF itself: the caller passes the hook that attaches an XDP program to
//! the router's ports facing the nodes (see [`crate::topo`]), and the `stator` binary, which
//! the nodes and backends run.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bird::{Bird, kernel_next_hops, wait_next_hops};
use crate::lan::{RouterBgp, node_bird_config, router_bird_config};
use crate::netns::{ChildGuard, Netns, NetnsError, Result, is_root};
use crate::prometheus::Prometheus;
use crate::stator::{ApiAnswer, BpfFs, StatorRun, api_request, write_private};
use crate::supervise::UnitTiming;
use crate::topo::{DsrLab, DsrSpec, Host};
use crate::wait::wait_until;

mod backends;
mod config;
mod state;

pub use state::{DownReport, LabState, down, read_served, read_state, served_path};
use state::{write_pid, write_state};

/// The IPv4 VIP.
pub const VIP_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// The IPv6 VIP.
pub const VIP_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10);
/// Port of the HTTP service (TCP): one request per connection, `X-Backend` says who answered.
pub const HTTP_PORT: u16 = 80;
/// Port of the TCP echo service: long-lived connections, every line answered.
pub const ECHO_PORT: u16 = 7;
/// Port of the UDP echo service.
pub const UDP_PORT: u16 = 7;
/// Port of each node's HTTP `[[listener]]` `web4` (the proxy tier, on the node's own IPv4
/// address, in front of `pool web4`): not a VIP port, so Maglev never sees its traffic.
pub const LISTENER_PORT: u16 = 8080;
/// The router's AS.
pub const ROUTER_AS: u32 = 65000;
/// The nodes' AS.
pub const NODE_AS: u32 = 65010;
/// Where each node's admin API listens on TCP (inside the node's namespace, on every address:
/// the lab's Prometheus scrapes it from the router with the read token).
pub const NODE_API: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9180);
/// The lab's `admin` token file, in its directory (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "api-token";
/// The lab's `read` token file, in its directory (mode 0600; Prometheus runs as root here).
pub const READ_TOKEN_FILE: &str = "read-token";

/// The lab's tracer key file, in its directory (mode 0600): every node's `tracer.key_file`,
/// and what `stator trace --send --key-file` reads in the lab.
pub const TRACE_KEY_FILE: &str = "trace.key";

/// Node `j`'s admin API socket in the lab's directory `dir`.
pub fn node_socket(dir: &Path, j: usize) -> PathBuf {
    dir.join(format!("stator-n{j}.sock"))
}

/// A token of 32 random hex digits (from the kernel's generator).
fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|source| NetnsError::File {
            path: "/dev/urandom".into(),
            source,
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The lab's token of `file` ([`ADMIN_TOKEN_FILE`] or [`READ_TOKEN_FILE`]) in `dir`.
pub fn lab_token(dir: &Path, file: &str) -> Result<String> {
    let path = dir.join(file);
    std::fs::read_to_string(&path)
        .map(|t| t.trim().to_owned())
        .map_err(|source| NetnsError::File { path, source })
}

/// How long a node may take to start, and the router to learn it.
const START: Duration = Duration::from_secs(60);

/// The shape of a deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploySpec {
    /// Prefix of every namespace (`<prefix>r`, `<prefix>c0`, `<prefix>l0`, `<prefix>b0`).
    pub prefix: String,
    /// `S` of the lab's addresses (`10.S.x.y`, `fd00:S:x::y`).
    pub subnet: u8,
    /// Stator nodes.
    pub nodes: usize,
    /// Backends.
    pub backends: usize,
    /// Source addresses of the client (of each family).
    pub addrs_per_client: usize,
    /// Weight of each backend (missing entries are 1).
    pub weights: Vec<u16>,
    /// The state directory (configurations, logs, pid files, the bpffs).
    pub dir: PathBuf,
    /// The `stator` binary the nodes and backends run.
    pub binary: PathBuf,
    /// BGP hold time between nodes and router, seconds (keepalive a third, at least 1).
    pub hold_time: u16,
    /// Maglev table size of every VIP (prime).
    pub table_size: u32,
    /// Interval of the backends' health checks, milliseconds (fall and rise 2).
    pub health_interval_ms: u32,
    /// Nodes whose BGP sessions with the router run BFD (100 ms, multiplier 3, on both
    /// sides): the router drops such a node about 0.3 s after it dies, instead of when the
    /// hold time expires.
    pub bfd_nodes: Vec<usize>,
    /// Run Prometheus in the router's namespace, scraping every node's `/metrics` every
    /// second and evaluating Stator's alerting rules ([`crate::prometheus`]).
    pub prometheus: bool,
    /// How many nodes run the AF_XDP data plane (`dataplane.mode = "afxdp"`): the last ones;
    /// the others run XDP.
    pub afxdp_nodes: usize,
    /// Fragments (docs/forwarding.md §9): the nodes of a cluster list each other as
    /// `fragments.peers` (with permanent neighbour entries between them: XDP resolves none)
    /// and the UDP VIPs accept fragments.
    pub fragments: bool,
    /// Clusters the nodes and backends are split into, in order (1: the usual lab). Cluster
    /// `c` has its own VIP addresses ([`cluster_vip`]), its nodes announce only those and
    /// forward only to its backends; one class holds every cluster's addresses (prefix groups
    /// `192.0.2.0/24` with 4-bit suffixes and `2001:db8:100::/48` with 64-bit ones) and each
    /// VIP fails over to the next cluster's address (docs/forwarding.md §3.1, §10).
    pub clusters: usize,
    /// Supervise every node's `stator run` the way the packaged systemd unit does
    /// ([`crate::supervise`]: readiness, watchdog, `stator withdraw` after an unclean stop,
    /// restart on failure), with this timing; `None`: plain processes.
    pub supervise: Option<UnitTiming>,
    /// Second chance (docs/forwarding.md §12): the VIPs encapsulate with GUE, the nodes keep
    /// previous tables (room for them in `slots_per_generation`), and the backends pass on
    /// what they do not own (`stator decap attach --second-chance-from` the nodes).
    pub second_chance: bool,
    /// `dataplane.on_exit = "keep"` (the packaged configuration's choice) without
    /// supervision: a stopped node's program keeps forwarding, and the node started again
    /// reuses its maps (connection table, active snapshot: previous tables seeded from it).
    pub keep_on_exit: bool,
}

/// The address of a VIP in cluster `c` (cluster 0: [`VIP_V4`] / [`VIP_V6`]): the same suffix
/// in each cluster's prefix (`192.0.2.16c/28`, `2001:db8:100:c::/64`). Cluster 2 is the one
/// no node is configured for ([`UNTOLD_CLUSTER`]).
pub fn cluster_vip(c: usize, v6: bool) -> IpAddr {
    if v6 {
        let mut seg = VIP_V6.segments();
        seg[3] = c as u16;
        IpAddr::V6(Ipv6Addr::from(seg))
    } else {
        let o = VIP_V4.octets();
        IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3] + 16 * c as u8))
    }
}

/// The cluster of the class whose addresses no node is told about: its VIP addresses are
/// matched only by prefix group and suffix.
pub const UNTOLD_CLUSTER: usize = 2;

impl DeploySpec {
    /// Three nodes, four backends of weight 1, 64 client addresses, hold time 3 s and no BFD,
    /// tables of 65537 slots, health checks every 500 ms, no Prometheus; state in `dir`.
    pub fn new(prefix: &str, subnet: u8, dir: &Path, binary: &Path) -> Self {
        Self {
            prefix: prefix.to_owned(),
            subnet,
            nodes: 3,
            backends: 4,
            addrs_per_client: 64,
            weights: vec![1; 4],
            dir: dir.to_owned(),
            binary: binary.to_owned(),
            hold_time: 3,
            table_size: 65537,
            health_interval_ms: 500,
            bfd_nodes: Vec::new(),
            prometheus: false,
            afxdp_nodes: 0,
            fragments: false,
            clusters: 1,
            supervise: None,
            second_chance: false,
            keep_on_exit: false,
        }
    }

    /// Whether node `j` runs the AF_XDP data plane.
    pub fn is_afxdp(&self, j: usize) -> bool {
        j + self.afxdp_nodes >= self.nodes
    }

    /// The cluster of node `j`.
    pub fn node_cluster(&self, j: usize) -> usize {
        j * self.clusters.max(1) / self.nodes.max(1)
    }

    /// The cluster of backend `k`.
    pub fn backend_cluster(&self, k: usize) -> usize {
        k * self.clusters.max(1) / self.backends.max(1)
    }

    /// The VIP addresses backends answer on: every cluster's, and the untold cluster's when
    /// there are clusters.
    pub fn served_vips(&self, v6: bool) -> Vec<IpAddr> {
        let n = if self.clusters > 1 {
            UNTOLD_CLUSTER + 1
        } else {
            1
        };
        (0..n.max(self.clusters))
            .map(|c| cluster_vip(c, v6))
            .collect()
    }

    /// Backend `k`'s configured weight (1 where [`DeploySpec::weights`] has no entry).
    pub fn weight(&self, k: usize) -> u16 {
        self.weights.get(k).copied().unwrap_or(1)
    }
}

/// The hook that attaches an XDP program to router port `port` (the router's namespace, the
/// port's name, a directory on the lab's bpffs for its pins).
pub type PeerXdp<'a> = &'a dyn Fn(&Netns, &str, &Path) -> std::result::Result<(), String>;

/// A Stator node: its host, BIRD and `stator run`.
#[derive(Debug)]
pub struct Node {
    /// The node's namespace and addresses.
    pub host: Host,
    /// Its BIRD.
    pub bird: Bird,
    /// Its `stator run`.
    pub run: StatorRun,
}

/// A backend: its host, its servers' process, its place in the configuration.
#[derive(Debug)]
pub struct Backend {
    /// The backend's namespace and addresses.
    pub host: Host,
    /// Its weight in the nodes' configuration.
    pub weight: u16,
    /// Whether the nodes' configuration lists it.
    pub in_config: bool,
    serve: Option<ChildGuard>,
}

/// What a backend's servers have answered (from its counters file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// HTTP requests.
    pub http: u64,
    /// TCP echo lines.
    pub echo: u64,
    /// UDP datagrams.
    pub udp: u64,
}

/// A running deployment. Dropping it tears everything down (see [`Deployment::persist`]).
#[derive(Debug)]
pub struct Deployment {
    spec: DeploySpec,
    /// The nodes, in order (`l0`, `l1`, …).
    pub nodes: Vec<Node>,
    /// The backends, in order (`b0`, `b1`, …).
    pub backends: Vec<Backend>,
    router: Option<Bird>,
    lab: Option<DsrLab>,
    bpffs: Option<BpfFs>,
    prometheus: Option<Prometheus>,
    persistent: bool,
    /// Held (never read: the open file is the lock) from the start of [`Deployment::up`] until the deployment is torn down (fields
    /// drop after `Drop::drop` has run): one deployment is built and driven at a time.
    _one_at_a_time: OneAtATime,
}

/// An exclusive `flock` on `/run/stator-lab/deploy.lock`: whole deployments load both cores
/// and their tests measure failover times, so two of them never run at once — not two tests of
/// one binary, not two test binaries, not a test beside `stator lab demo`.
#[derive(Debug)]
struct OneAtATime(#[allow(dead_code)] std::fs::File);

impl OneAtATime {
    const PATH: &str = "/run/stator-lab/deploy.lock";

    fn acquire() -> Result<Self> {
        let path = Path::new(Self::PATH);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(file_err(dir))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(file_err(path))?;
        // std's file locks are flock(2) locks on Linux: held by the open file, released when
        // it closes (also when the process dies), shared with every other process that locks
        // the same path this way
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!("stator-lab: another deployment is running; waiting for it to finish");
                file.lock().map_err(file_err(path))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(file_err(path)(e)),
        }
        Ok(Self(file))
    }
}

pub(crate) fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> NetnsError + '_ {
    move |source| NetnsError::File {
        path: path.to_owned(),
        source,
    }
}

impl Deployment {
    /// Builds and starts the whole deployment; returns once every node runs and the router
    /// routes both VIPs over every node. Whatever a lab of the same prefix and directory left
    /// behind is removed first ([`down`]).
    pub fn up(spec: &DeploySpec, peer_xdp: PeerXdp<'_>) -> Result<Self> {
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        let one_at_a_time = OneAtATime::acquire()?;
        down(&spec.prefix, &spec.dir)?;
        std::fs::create_dir_all(&spec.dir).map_err(file_err(&spec.dir))?;
        write_state(spec)?;
        // 32 hex digits: the tokens, and the tracer key (16 bytes)
        for file in [ADMIN_TOKEN_FILE, READ_TOKEN_FILE, TRACE_KEY_FILE] {
            write_private(&spec.dir.join(file), &(new_token()? + "\n"))?;
        }
        let mut d = Self {
            spec: spec.clone(),
            nodes: Vec::new(),
            backends: Vec::new(),
            router: None,
            lab: None,
            bpffs: None,
            prometheus: None,
            persistent: false,
            _one_at_a_time: one_at_a_time,
        };
        // from here on, a failure drops `d`, which tears down what was built
        let bpffs = BpfFs::mount(&spec.dir.join("bpffs"))?;
        let pins = bpffs.path().to_owned();
        d.bpffs = Some(bpffs);
        let mut dsr = DsrSpec::new(&spec.prefix, spec.subnet, 1, spec.nodes, spec.backends);
        dsr.addrs_per_client = spec.addrs_per_client;
        dsr.backend_xdp = spec.second_chance;
        let lab = DsrLab::create_with(&dsr, |router, port| {
            peer_xdp(router, port, &pins.join(format!("peer-{port}")))
        })?;
        let lab = d.lab.insert(lab);
        // Static bridge entries for the nodes: when a node's port goes down ("cut"), frames
        // for it are dropped, not flooded to the other ports — where the other nodes' XDP
        // programs, which see frames for any MAC on veth, would forward them.
        for h in &lab.lbs {
            let mac = h
                .mac
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            lab.router.exec(
                "bridge",
                ["fdb", "replace", &mac, "dev", &h.name, "master", "static"],
            )?;
        }
        if spec.fragments {
            // XDP resolves no neighbours: a node redirecting a fragment to a peer needs it
            lab.permanent_neighbours_between_lbs()?;
        }
        if spec.second_chance {
            // ... nor does a backend passing a packet on to another (docs/decap.md §7)
            lab.permanent_neighbours_between_backends()?;
        }
        let s = spec.subnet;
        let router_conf = router_bird_config(
            Ipv4Addr::new(10, s, 1, 1),
            &lab.lbs
                .iter()
                .map(|h| (h.v4[0], h.v6[0]))
                .collect::<Vec<_>>(),
            &RouterBgp {
                local_as: ROUTER_AS,
                node_as: NODE_AS,
                hold_time: spec.hold_time,
                keepalive: (spec.hold_time / 3).max(1),
                bfd_nodes: spec.bfd_nodes.clone(),
                accept_v4: vec!["192.0.2.0/24".into()],
                accept_v6: vec!["2001:db8:100::/48".into()],
            },
            &spec.dir.join("router.log"),
        );
        // (BIRD writes its own pid file, <dir>/router.pid)
        let router = Bird::start(&lab.router, &spec.dir, "router", &router_conf)?;
        d.router = Some(router);
        let (lbs, backends) = (lab.lbs.clone(), lab.backends.clone());
        for (k, host) in backends.into_iter().enumerate() {
            d.setup_backend(k, &host)?;
            d.backends.push(Backend {
                host,
                weight: spec.weight(k),
                in_config: true,
                serve: None,
            });
            d.backend_start(k)?;
        }
        for (j, host) in lbs.into_iter().enumerate() {
            let name = format!("n{j}");
            let bird_conf = node_bird_config(
                host.v4[0],
                &spec.dir.join(format!("{name}-stator.conf")),
                &spec.dir.join(format!("{name}.log")),
            );
            let bird = Bird::start(&host.ns, &spec.dir, &name, &bird_conf)?;
            let config = d.node_config(j, &host);
            let run = match &spec.supervise {
                None => StatorRun::start(
                    &host.ns,
                    &spec.binary,
                    &spec.dir,
                    &format!("stator-{name}"),
                    &config,
                    &node_socket(&spec.dir, j),
                )?,
                Some(timing) => StatorRun::start_supervised(
                    &host.ns,
                    &spec.binary,
                    &spec.dir,
                    &format!("stator-{name}"),
                    &config,
                    &node_socket(&spec.dir, j),
                    bird.socket(),
                    timing.clone(),
                )?,
            };
            write_pid(&spec.dir, &format!("stator-{name}"), run.pid())?;
            d.nodes.push(Node { host, bird, run });
        }
        for n in &mut d.nodes {
            n.run.wait_ready(START)?;
        }
        for (c, v6) in (0..spec.clusters.max(1)).flat_map(|c| [(c, false), (c, true)]) {
            let mine: Vec<usize> = (0..spec.nodes)
                .filter(|&j| spec.node_cluster(j) == c)
                .collect();
            if let Err(e) = d.wait_routed_vip(cluster_vip(c, v6), &mine, START) {
                let e = d.explain(e);
                if std::env::var_os("STATOR_LAB_KEEP_FAILED").is_some() {
                    d.persistent = true;
                }
                return Err(e);
            }
        }
        if spec.prometheus {
            let targets: Vec<(String, SocketAddr)> = d
                .nodes
                .iter()
                .enumerate()
                .map(|(j, n)| {
                    (
                        format!("n{j}"),
                        SocketAddr::new(IpAddr::V4(n.host.v4[0]), NODE_API.port()),
                    )
                })
                .collect();
            let p = Prometheus::start(
                d.router(),
                &spec.dir,
                &targets,
                &spec.dir.join(READ_TOKEN_FILE),
            )?;
            write_pid(&spec.dir, "prometheus", p.pid())?;
            d.prometheus = Some(p);
        }
        Ok(d)
    }

    /// Adds what the router's BIRD and the nodes' logs say to a timeout.
    fn explain(&self, e: NetnsError) -> NetnsError {
        let NetnsError::Timeout { what, waited } = e else {
            return e;
        };
        let mut what = what;
        if let Some(r) = &self.router {
            for cmd in ["show protocols", "show route"] {
                what.push_str(&format!(
                    "\nrouter: birdc {cmd}:\n{}",
                    r.birdc(cmd).unwrap_or_default()
                ));
            }
            what.push_str(&format!("\nrouter log:\n{}", r.log_tail(10)));
        }
        for (j, n) in self.nodes.iter().enumerate() {
            what.push_str(&format!(
                "\nnode n{j}: birdc show protocols:\n{}\nnode n{j} log:\n{}",
                n.bird.birdc("show protocols").unwrap_or_default(),
                n.run.log_tail(8)
            ));
        }
        NetnsError::Timeout { what, waited }
    }

    /// The lab's Prometheus, when the spec asked for one.
    pub fn prometheus(&self) -> Option<&Prometheus> {
        self.prometheus.as_ref()
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &DeploySpec {
        &self.spec
    }

    /// The topology (router, client, hosts).
    pub fn lab(&self) -> &DsrLab {
        self.lab.as_ref().expect("a running deployment has its lab")
    }

    /// The client.
    pub fn client(&self) -> &Host {
        &self.lab().clients[0]
    }

    /// The router's namespace.
    pub fn router(&self) -> &Netns {
        &self.lab().router
    }

    /// The VIP of a family.
    pub fn vip(v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(VIP_V6)
        } else {
            IpAddr::V4(VIP_V4)
        }
    }

    /// Keeps everything running when this value is dropped (for `stator lab up`); [`down`]
    /// removes it later.
    pub fn persist(mut self) {
        self.persistent = true;
    }

    // ---- nodes ----

    fn pins(&self) -> PathBuf {
        self.spec.dir.join("bpffs")
    }

    /// Sends `method path` to node `j`'s admin API.
    pub fn api(&self, j: usize, method: &str, path: &str) -> Result<ApiAnswer> {
        api_request(self.nodes[j].run.socket(), method, path)
    }

    /// Stops node `j`'s `stator run` gracefully (SIGTERM: it withdraws its VIPs, then
    /// detaches); its BIRD keeps running. Returns the exit status.
    pub fn node_stop(&mut self, j: usize, timeout: Duration) -> Result<std::process::ExitStatus> {
        self.nodes[j].run.terminate(timeout)
    }

    /// Kills node `j`'s `stator run` (SIGKILL), as a crash would: XDP stays attached and
    /// nothing is withdrawn (a supervised node is then withdrawn by its supervisor and
    /// restarted).
    pub fn node_kill(&mut self, j: usize) {
        self.nodes[j].run.kill();
    }

    /// Replaces node `j`'s `stator run` process without closing a connection (`stator
    /// upgrade`: docs/operations.md, "Upgrades"); returns the successor's pid once it serves.
    /// The replaced process drains and exits by itself.
    pub fn node_upgrade(&mut self, j: usize) -> Result<u32> {
        let dir = self.spec.dir.clone();
        let node = &mut self.nodes[j];
        let pid = node.run.upgrade()?;
        write_pid(&dir, &format!("stator-n{j}"), Some(pid))?;
        node.run.wait_ready(START)?;
        Ok(pid)
    }

    /// Starts node `j`'s `stator run` again; returns once its API says `running`.
    pub fn node_start(&mut self, j: usize) -> Result<Duration> {
        let dir = self.spec.dir.clone();
        let node = &mut self.nodes[j];
        node.run.restart()?;
        write_pid(&dir, &format!("stator-n{j}"), node.run.pid())?;
        node.run.wait_ready(START)
    }

    /// Cuts node `j`'s uplink (the router's bridge port goes down; the bridge stays up), as
    /// when the machine dies: the router learns it only when the BGP hold time expires.
    pub fn cut(&self, j: usize) -> Result<()> {
        self.router()
            .ip(["link", "set", &format!("l{j}"), "down"])
            .map(|_| ())
    }

    /// Restores node `j`'s uplink.
    pub fn restore(&self, j: usize) -> Result<()> {
        self.router()
            .ip(["link", "set", &format!("l{j}"), "up"])
            .map(|_| ())
    }

    /// The router's next hops for the VIP of a family (sorted).
    pub fn next_hops(&self, v6: bool) -> Result<Vec<IpAddr>> {
        kernel_next_hops(self.router(), &vip_prefix(v6))
    }

    /// Node indices the router currently routes the VIP of a family to.
    pub fn routed_nodes(&self, v6: bool) -> Result<Vec<usize>> {
        let hops = self.next_hops(v6)?;
        Ok((0..self.nodes.len())
            .filter(|&j| hops.contains(&self.nodes[j].host.addr(v6)))
            .collect())
    }

    /// Waits until the router routes `vip` over exactly `nodes`.
    pub fn wait_routed_vip(
        &self,
        vip: IpAddr,
        nodes: &[usize],
        timeout: Duration,
    ) -> Result<Duration> {
        let want: Vec<IpAddr> = nodes
            .iter()
            .map(|&j| self.nodes[j].host.addr(vip.is_ipv6()))
            .collect();
        let prefix = if vip.is_ipv6() {
            format!("{vip}/128")
        } else {
            format!("{vip}/32")
        };
        wait_next_hops(self.router(), &prefix, &want, timeout)
    }

    /// The router's next hops for `vip` (sorted).
    pub fn next_hops_vip(&self, vip: IpAddr) -> Result<Vec<IpAddr>> {
        let prefix = if vip.is_ipv6() {
            format!("{vip}/128")
        } else {
            format!("{vip}/32")
        };
        kernel_next_hops(self.router(), &prefix)
    }

    /// Waits until the router routes the VIP of a family over exactly `nodes`.
    pub fn wait_routed(&self, v6: bool, nodes: &[usize], timeout: Duration) -> Result<Duration> {
        let want: Vec<IpAddr> = nodes.iter().map(|&j| self.nodes[j].host.addr(v6)).collect();
        wait_next_hops(self.router(), &vip_prefix(v6), &want, timeout)
    }

    /// What another process reads of this lab ([`read_state`]).
    pub fn state(&self) -> LabState {
        LabState {
            prefix: self.spec.prefix.clone(),
            subnet: self.spec.subnet,
            nodes: self.spec.nodes,
            backends: self.spec.backends,
        }
    }

    // ---- configuration ----

    /// Rewrites every node's configuration file and reloads the nodes that run (SIGHUP);
    /// returns once each of them runs the new configuration. Nodes that do not run pick it
    /// up when started. Nothing happens when the configuration did not change.
    pub fn reload_all(&mut self) -> Result<Duration> {
        let start = Instant::now();
        let mut waiting = Vec::new();
        for j in 0..self.nodes.len() {
            let text = self.node_config(j, &self.nodes[j].host);
            let path = self.nodes[j].run.config_path().to_owned();
            if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
                continue;
            }
            std::fs::write(&path, text).map_err(file_err(&path))?;
            if self.nodes[j].run.is_running() {
                let before = self.config_generation(j);
                self.nodes[j].run.reload()?;
                waiting.push((j, before));
            }
        }
        for (j, before) in waiting {
            wait_until(
                &format!("node n{j} to apply its new configuration"),
                Duration::from_secs(15),
                Duration::from_millis(50),
                || self.config_generation(j).is_some_and(|g| Some(g) > before),
            )?;
        }
        Ok(start.elapsed())
    }

    /// The config generation node `j` runs (`None` when its API does not answer).
    pub fn config_generation(&self, j: usize) -> Option<u64> {
        let body = self.api(j, "GET", "/v1/status").ok()?.body;
        let at = body.find("\"config\"")?;
        let rest = &body[at..];
        let g = rest.find("\"generation\":")? + "\"generation\":".len();
        let digits: String = rest[g..]
            .chars()
            .skip_while(|c| c.is_whitespace())
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }

    fn teardown(&mut self) {
        self.prometheus = None;
        for n in &mut self.nodes {
            n.run.kill();
            n.bird.kill();
        }
        for k in 0..self.backends.len() {
            self.backend_stop(k);
        }
        if let Some(mut r) = self.router.take() {
            r.kill();
        }
        self.nodes.clear();
        self.lab = None;
        self.bpffs = None;
        let _ = std::fs::remove_dir_all(&self.spec.dir);
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if self.persistent {
            // leave every process, namespace and mount in place; `down` removes them
            std::mem::forget(std::mem::take(&mut self.nodes));
            std::mem::forget(std::mem::take(&mut self.backends));
            std::mem::forget(self.router.take());
            std::mem::forget(self.lab.take());
            std::mem::forget(self.bpffs.take());
            std::mem::forget(self.prometheus.take());
        } else {
            self.teardown();
        }
    }
}

pub(crate) fn vip_prefix(v6: bool) -> String {
    if v6 {
        format!("{VIP_V6}/128")
    } else {
        format!("{VIP_V4}/32")
    }
}
