//! A node over the core plane: no root, no BPF — the decision the XDP program is proven
//! equal to, on a clock the test may drive. Backends have documentation addresses
//! (198.51.100.0/24) that no process here can own; their health probes are routed to real
//! servers on loopback ([`ProbeRoutes`]), so every probe is a real one.
//!
//! Paused time: a test on a paused current-thread runtime creates a [`Hold`] first; while it
//! lives, tokio's clock moves only by `tokio::time::advance`, never by itself while the
//! runtime waits for real I/O (a probe's reply, an API request) — so a probe never times out
//! because the test was slow, and each step of the test is exactly the time it names.
//! [`settle`] waits in real time, without moving the clock, for the effects of a step.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use stator_core::{NextHop, StaticFib, VecPacketBuf, Verdict};
use stator_health::ProbeRoutes;
use stator_node::{Node, NodeOptions};
use stator_plane::DataPlane;
use stator_plane::coreplane::{Clock, CoreOptions, CorePlane, CoreState, TokioClock};
use stator_testkit::{Packet, tcp_flags};

/// The node's outer source address.
pub const NODE: &str = "203.0.113.1";

/// `198.51.100.<host>`: a backend address no process here owns.
pub fn backend(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, host))
}

/// The `[node]` and `[dataplane]` of a core-plane node: a shared connection table of 4,096
/// entries, `slots` Maglev slots per generation.
pub fn node_toml(slots: u32, extra_dataplane: &str) -> String {
    format!(
        "[node]\nname = \"t\"\naddress_v4 = \"{NODE}\"\n[dataplane]\ninterfaces = [\"sim0\"]\n\
         conntrack = \"shared\"\nconntrack_entries = 4096\nslots_per_generation = {slots}\n\
         {extra_dataplane}\n"
    )
}

/// A core-plane state for a node: `threads` packet threads with a shared table, `slots`
/// Maglev slots, on tokio's clock (the test's when paused).
pub fn state(slots: u32) -> Arc<CoreState> {
    CoreState::new(
        CoreOptions {
            threads: 2,
            ct_mode: stator_core::CtMode::Shared,
            ct_entries: 4096,
            slots_per_gen: slots,
            ct_seed: 7,
        },
        Arc::new(TokioClock::new()) as Arc<dyn Clock>,
    )
}

/// Starts a node over a core plane on `state`, its API on a private Unix socket, its
/// probes routed by `routes`. Call inside a runtime.
pub async fn start(
    toml: &str,
    state: &Arc<CoreState>,
    routes: ProbeRoutes,
) -> Result<Node, stator_control::ControlError> {
    start_with(toml, Box::new(CorePlane::new(Arc::clone(state))), routes).await
}

/// Starts a node over `plane` (not attached, no host checks), its API on a private Unix
/// socket, its probes routed by `routes`. Call inside a runtime.
pub async fn start_with(
    toml: &str,
    plane: Box<dyn DataPlane>,
    routes: ProbeRoutes,
) -> Result<Node, stator_control::ControlError> {
    start_opts(toml, plane, routes, None).await
}

/// [`start`], with the API's TCP endpoint on an ephemeral loopback port as well (the
/// configuration must set a token).
pub async fn start_tcp(
    toml: &str,
    state: &Arc<CoreState>,
    routes: ProbeRoutes,
) -> Result<Node, stator_control::ControlError> {
    let plane = Box::new(CorePlane::new(Arc::clone(state)));
    start_opts(toml, plane, routes, Some("127.0.0.1:0".parse().unwrap())).await
}

async fn start_opts(
    toml: &str,
    plane: Box<dyn DataPlane>,
    routes: ProbeRoutes,
    listen: Option<SocketAddr>,
) -> Result<Node, stator_control::ControlError> {
    Node::start(
        toml.to_owned(),
        "test.toml".into(),
        NodeOptions {
            plane: Some(plane),
            no_attach: true,
            no_preflight: true,
            socket: Some(super::api_socket_path()),
            listen,
            probe_routes: routes,
            ..NodeOptions::default()
        },
    )
    .await
}

/// A FIB in which every IPv4 destination is one hop away through interface 2.
pub fn fib() -> StaticFib {
    let hop = NextHop {
        ifindex: 2,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        mtu: 1500,
    };
    StaticFib::new().default_route(backend(1), Ok(hop))
}

/// A TCP packet from `client:sport` to `vip:dport` through the node's packet thread 0.
pub fn send_tcp(
    state: &CoreState,
    client: IpAddr,
    sport: u16,
    vip: IpAddr,
    dport: u16,
    flags: u8,
) -> Verdict {
    let frame = Packet::tcp(client, sport, vip, dport, flags).frame();
    state.process(0, 2, &fib(), &mut VecPacketBuf::with_xdp_headroom(&frame))
}

/// A SYN (see [`send_tcp`]).
pub fn send_syn(state: &CoreState, client: IpAddr, sport: u16, vip: IpAddr, dport: u16) -> Verdict {
    send_tcp(state, client, sport, vip, dport, tcp_flags::SYN)
}

/// Routes for backends `(address, port)` to the given local servers.
pub fn routes(pairs: &[(IpAddr, u16, SocketAddr)]) -> ProbeRoutes {
    pairs.iter().fold(ProbeRoutes::new(), |r, (a, p, to)| {
        r.route(SocketAddr::new(*a, *p), *to)
    })
}

/// Keeps tokio's paused clock from moving by itself (see the module documentation). Create
/// it first thing in a paused test; drop it to let the clock auto-advance again.
#[derive(Debug)]
pub struct Hold {
    release: Option<std::sync::mpsc::Sender<()>>,
}

impl Hold {
    /// Holds the clock (a blocking task waits until the hold is dropped).
    pub fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let _ = rx.recv();
        });
        Self { release: Some(tx) }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.release.take();
    }
}

/// Waits in real time, without moving the paused clock, until `f` holds; panics after
/// 10 s of real time.
pub async fn settle(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if f() {
            return;
        }
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5)))
            .await
            .unwrap();
    }
    panic!("{what}: still not the case after 10 s of real time");
}

/// Lets every task that can run do so (a few rounds of the scheduler, and one real wait for
/// I/O), without moving the paused clock.
pub async fn idle() {
    for _ in 0..3 {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5)))
            .await
            .unwrap();
    }
}

/// Runs a blocking call (an [`ApiClient`](stator_api::client::ApiClient) request) on a
/// blocking thread: the runtime keeps serving the node meanwhile, and a paused clock stays
/// still.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}
