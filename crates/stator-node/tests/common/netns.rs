//! Root-only infrastructure: a network namespace per test with addresses on a veth,
//! pin directories on a private bpffs, a runtime whose threads live in the namespace, and a
//! node started over the real XDP forwarder.

use std::path::{Path, PathBuf};

use stator_lab::netns::Netns;
use stator_lab::stator::BpfFs;
use stator_node::{Node, NodeOptions};
use stator_xdp::XdpPlane;
use stator_xdp::{ConntrackMode, XdpOptions};

pub use stator_lab::netns::require_root;

/// A network namespace `sct-<tag>-<pid>` with an interface `d0` (one end of a veth pair
/// whose other end, `d1`, is in the same namespace: this kernel has no dummy driver) holding
/// `10.<net>.0.1` to `10.<net>.0.20` (/24), forwarding on. Removed when dropped.
#[derive(Debug)]
pub struct Lab {
    pub ns: Netns,
    pub net: u8,
}

impl Lab {
    pub fn new(tag: &str, net: u8) -> Self {
        require_root();
        let name = format!("sct-{tag}-{}", std::process::id() % 100_000);
        let ns = Netns::create(&name).unwrap();
        ns.ip(["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
            .unwrap();
        ns.ip(["link", "set", "d1", "up"]).unwrap();
        for host in 1..=20 {
            ns.ip(["addr", "add", &format!("10.{net}.0.{host}/24"), "dev", "d0"])
                .unwrap();
        }
        ns.ip(["link", "set", "d0", "up"]).unwrap();
        ns.sysctl("net.ipv4.conf.all.forwarding", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        Self { ns, net }
    }

    /// `10.<net>.0.<host>`.
    pub fn addr(&self, host: u8) -> String {
        format!("10.{}.0.{host}", self.net)
    }

    /// Runs `f` on a thread inside the namespace (threads and sockets it creates stay there).
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        self.ns.run_in(f).unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.ns.clone().delete();
    }
}

/// A pin directory on a bpffs of its own (under the temp directory, never the host's
/// `/sys/fs/bpf`), purged and unmounted when dropped.
#[derive(Debug)]
pub struct Pins {
    pub path: PathBuf,
    fs: Option<BpfFs>,
}

impl Pins {
    pub fn new(tag: &str) -> Self {
        require_root();
        // unique per test and process: tests of one binary run in parallel
        let mount = stator_testkit::scratch::unique_path(&format!("stator-ctl-{tag}"), "");
        let fs = BpfFs::mount(&mount).unwrap();
        let path = mount.join("pins");
        Self { path, fs: Some(fs) }
    }

    /// Loader options: shared connection table, small maps.
    pub fn options(&self, slots_per_gen: u32) -> XdpOptions {
        xdp_options(&self.path, slots_per_gen)
    }
}

/// Loader options for pins at `path`: shared connection table, small maps.
pub fn xdp_options(path: &Path, slots_per_gen: u32) -> XdpOptions {
    XdpOptions {
        pin_path: path.to_path_buf(),
        conntrack: ConntrackMode::Shared,
        ct_entries: 4096,
        slots_per_gen,
        ..XdpOptions::default()
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.path);
        let _ = stator_xdp::purge(&self.path);
        drop(self.fs.take());
    }
}

/// The `[node]` and `[dataplane]` of a test node in `lab` (pins, shared table).
pub fn node_toml(lab: &Lab, pins: &Pins, slots: u32) -> String {
    format!(
        "[node]\nname = \"t\"\naddress_v4 = \"{}\"\n[dataplane]\ninterfaces = [\"d0\"]\n\
         pin_path = \"{}\"\nconntrack = \"shared\"\nconntrack_entries = 4096\n\
         slots_per_generation = {slots}\n",
        lab.addr(1),
        pins.path.display()
    )
}

/// Starts a node over the real XDP forwarder (loaded with `opts`, not attached), its API on
/// a private Unix socket. Call inside the lab's thread, with the lab's runtime.
pub fn start_node(rt: &tokio::runtime::Runtime, toml: &str, opts: &XdpOptions) -> Node {
    let plane = XdpPlane::load(opts).unwrap();
    rt.block_on(Node::start(
        toml.to_owned(),
        "test.toml".into(),
        NodeOptions {
            plane: Some(Box::new(plane)),
            no_attach: true,
            no_preflight: true,
            socket: Some(super::api_socket_path()),
            ..NodeOptions::default()
        },
    ))
    .unwrap()
}

/// Reads the active snapshot back from the pinned maps (what packets see).
pub fn active_snapshot(pins: &Path) -> stator_core::Snapshot {
    stator_xdp::Maps::open(pins)
        .unwrap()
        .active_snapshot()
        .unwrap()
        .expect("a snapshot is committed")
}
