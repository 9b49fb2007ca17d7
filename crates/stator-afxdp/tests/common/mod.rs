//! The AF_XDP tests' lab: a generator namespace, the load balancer's namespace and a sink
//! namespace joined by veth pairs, with the LB's ingress veth given several queues, a bpffs of
//! its own for the pins, and raw `AF_PACKET` sockets to send arbitrary frames and capture what
//! comes out. Everything carries a name of the lab's own and is removed on drop.
//!
//! ```text
//!  gen ns                 LB ns                                    sink ns
//!  eth0 (10.200.1.2) ══ in0 (10.200.1.1)    out0 (10.200.2.1) ══ eth0 (10.200.2.2)
//!                        routes: 10.201.0.0/16 (backends) via 10.200.2.2
//! ```
#![allow(dead_code)] // each test file uses a part

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use stator_abi::Encap;
use stator_core::{BackendSpec, NodeParams, Proto, SnapshotBuilder, ValidSnapshot};
use stator_lab::netns::{self, Netns};
use stator_lab::stator::BpfFs;

pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 202, 0, 10);
pub const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
pub const BACKEND2: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 2);
pub const LB_IN: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
pub const LB_OUT: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 1);
pub const SINK: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 2);

pub use stator_lab::netns::require_root;

/// The three namespaces, the bpffs and the MACs.
pub struct Lab {
    pub gen_ns: Netns,
    pub lb: Netns,
    pub sink: Netns,
    pub prefix: String,
    pub bpffs: Option<BpfFs>,
    pub pin_path: PathBuf,
    /// MAC of the LB's in0 (the generator's frames go there).
    pub lb_in_mac: [u8; 6],
    /// MAC of the generator's eth0.
    pub gen_mac: [u8; 6],
    pub lb_out_mac: [u8; 6],
    pub sink_mac: [u8; 6],
}

impl Lab {
    /// A lab whose LB ingress veth has `queues` RX and TX queues.
    pub fn new(tag: &str, queues: u32) -> Self {
        require_root();
        // a prefix of this lab's own: the tests of a binary run side by side
        let prefix = format!(
            "{}-",
            stator_testkit::scratch::unique_name(&format!("sax{tag}"))
        );
        let gen_ns = Netns::create(&format!("{prefix}g")).expect("gen ns");
        let lb = Netns::create(&format!("{prefix}l")).expect("lb ns");
        let sink = Netns::create(&format!("{prefix}s")).expect("sink ns");
        let q = queues.to_string();
        netns::ip([
            "link",
            "add",
            "eth0",
            "netns",
            gen_ns.name(),
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            "in0",
            "netns",
            lb.name(),
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
        ])
        .expect("ingress veth");
        gen_ns.ip(["link", "set", "eth0", "up"]).expect("up");
        lb.ip(["link", "set", "in0", "up"]).expect("up");
        netns::veth(&lb, "out0", &sink, "eth0").expect("egress veth");
        gen_ns
            .addr_add("eth0", &format!("{CLIENT}/24"))
            .expect("addr");
        lb.addr_add("in0", &format!("{LB_IN}/24")).expect("addr");
        lb.addr_add("out0", &format!("{LB_OUT}/24")).expect("addr");
        sink.addr_add("eth0", &format!("{SINK}/24")).expect("addr");
        for (k, v) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.conf.all.forwarding", "1"),
            ("net.ipv4.conf.in0.forwarding", "1"),
            ("net.ipv6.conf.all.disable_ipv6", "1"),
        ] {
            lb.sysctl(k, v).expect("sysctl");
        }
        for ns in [&gen_ns, &sink] {
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")
                .expect("sysctl");
        }
        let mac = |ns: &Netns, dev: &str| ns.mac(dev).expect("mac");
        let (lb_in_mac, gen_mac) = (mac(&lb, "in0"), mac(&gen_ns, "eth0"));
        let (lb_out_mac, sink_mac) = (mac(&lb, "out0"), mac(&sink, "eth0"));
        let hex = |m: [u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        lb.ip([
            "neigh",
            "replace",
            &SINK.to_string(),
            "lladdr",
            &hex(sink_mac),
            "dev",
            "out0",
            "nud",
            "permanent",
        ])
        .expect("neigh");
        lb.ip([
            "neigh",
            "replace",
            &CLIENT.to_string(),
            "lladdr",
            &hex(gen_mac),
            "dev",
            "in0",
            "nud",
            "permanent",
        ])
        .expect("neigh");
        lb.ip([
            "route",
            "add",
            "10.201.0.0/16",
            "via",
            &SINK.to_string(),
            "dev",
            "out0",
        ])
        .expect("route");
        let dir = std::env::temp_dir().join(format!("{prefix}bpf"));
        let bpffs = BpfFs::mount(&dir).expect("mount a bpffs");
        let pin_path = dir.join("stator");
        Self {
            gen_ns,
            lb,
            sink,
            prefix,
            bpffs: Some(bpffs),
            pin_path,
            lb_in_mac,
            gen_mac,
            lb_out_mac,
            sink_mac,
        }
    }

    /// The LB's options for the redirect program (pins in the lab's bpffs).
    pub fn xdp_options(&self) -> stator_xdp::XdpOptions {
        stator_xdp::XdpOptions {
            pin_path: self.pin_path.clone(),
            slots_per_gen: 1 << 16,
            ..stator_xdp::XdpOptions::default()
        }
    }

    /// Starts an AF_XDP plane in the LB namespace with `cfg`, attached to in0 and out0, with
    /// `snap` committed.
    pub fn start_plane(
        &self,
        cfg: stator_afxdp::AfxdpConfig,
        snap: ValidSnapshot,
    ) -> stator_afxdp::AfxdpForwarder {
        let opts = self.xdp_options();
        self.lb
            .run_in(move || {
                let mut p =
                    stator_afxdp::AfxdpForwarder::load(&opts, cfg).expect("load the AF_XDP plane");
                p.attach(&["in0".into(), "out0".into()]).expect("attach");
                p.commit(&snap).expect("commit");
                p
            })
            .expect("enter the LB namespace")
    }

    /// Sends `frames` from the generator's eth0.
    pub fn send(&self, frames: Vec<Vec<u8>>) {
        self.gen_ns
            .run_in(move || {
                let s = RawSock::open("eth0");
                for f in &frames {
                    s.send(f);
                }
            })
            .expect("enter the generator namespace");
    }

    /// A raw socket on the sink's eth0, capturing what reaches the backends.
    pub fn capture(&self) -> RawSock {
        self.sink
            .run_in(|| RawSock::open("eth0"))
            .expect("enter the sink namespace")
    }

    /// Ethernet header bytes of a frame from the generator to the LB, followed by `ip`.
    pub fn to_lb(&self, ip: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(14 + ip.len());
        f.extend_from_slice(&self.lb_in_mac);
        f.extend_from_slice(&self.gen_mac);
        let ethertype: u16 = if ip.first().is_some_and(|b| b >> 4 == 6) {
            0x86dd
        } else {
            0x0800
        };
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.pin_path);
        let _ = stator_xdp::purge(&self.pin_path);
        let _ = netns::cleanup(&self.prefix);
        drop(self.bpffs.take());
    }
}

/// One VIP (`VIP`:80/tcp and `VIP`:53/udp) on backends routed into the sink namespace.
pub fn snapshot(generation: u64, backends: &[Ipv4Addr]) -> ValidSnapshot {
    let node = NodeParams {
        src_v4: Some(LB_OUT),
        ..NodeParams::default()
    };
    let specs: Vec<BackendSpec> = backends
        .iter()
        .map(|b| BackendSpec::new(IpAddr::V4(*b)).encap(Encap::Gre))
        .collect();
    SnapshotBuilder::new(node)
        .generation(generation)
        .vip(VIP.into(), 80, Proto::Tcp, 251, specs.clone())
        .vip(VIP.into(), 53, Proto::Udp, 251, specs)
        .build()
        .expect("snapshot")
        .validated()
        .expect("a valid snapshot")
}

/// A raw `AF_PACKET` socket on one interface (of the calling thread's namespace) that captures
/// what arrives there, not what leaves (`PACKET_IGNORE_OUTGOING`).
pub struct RawSock {
    sock: socket2::Socket,
    ifindex: u32,
}

impl RawSock {
    pub fn open(ifname: &str) -> Self {
        use stator_sys::socket::{packet_socket, set_opt};
        use std::os::fd::AsFd as _;
        let ifindex = stator_xdp::ifindex(ifname).expect("interface");
        let fd = packet_socket(ifindex).expect("AF_PACKET socket");
        set_opt(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &1i32,
        )
        .expect("PACKET_IGNORE_OUTGOING");
        // room for bursts: the default receive buffer holds about 256 small frames (best
        // effort, as before)
        let _ = set_opt(
            fd.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &(64i32 << 20),
        );
        Self {
            sock: socket2::Socket::from(fd),
            ifindex,
        }
    }

    pub fn send(&self, frame: &[u8]) {
        let sent = self.sock.send(frame).expect("send");
        assert_eq!(sent, frame.len(), "send: short write");
    }

    /// Sends `frame`; false when the kernel refuses it (shorter than an Ethernet header,
    /// longer than the MTU).
    pub fn try_send(&self, frame: &[u8]) -> bool {
        self.sock.send(frame).is_ok_and(|n| n == frame.len())
    }

    /// The next frame received within `timeout` (outgoing copies excluded by the socket).
    pub fn recv(&self, timeout: Duration) -> Option<Vec<u8>> {
        use std::io::Read as _;
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 10_000];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .expect("SO_RCVTIMEO");
            match (&self.sock).read(&mut buf) {
                Ok(n) => return Some(buf[..n].to_vec()),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None;
                }
                Err(_) => continue,
            }
        }
    }

    /// Every frame received until `quiet` passes without one (at most `max` time).
    pub fn drain(&self, quiet: Duration, max: Duration) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + max;
        let mut out = Vec::new();
        while Instant::now() < deadline {
            match self.recv(quiet) {
                Some(f) => out.push(f),
                None => break,
            }
        }
        out
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
}

/// Whether `f` is an IPv4 GRE packet (what the forwarder sends to a GRE backend).
pub fn is_gre(f: &[u8]) -> bool {
    f.len() > 34 && f[12..14] == [0x08, 0x00] && f[23] == 47
}

/// Polls `cond` every 5 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A global counter of the plane: the kernel half's plus every packet thread's.
pub fn counter(
    plane: &stator_afxdp::AfxdpForwarder,
    reader: &stator_afxdp::ForwarderReader,
    c: stator_abi::Counter,
) -> u64 {
    let k = reader.kernel_counters().expect("kernel counters").get(c);
    plane
        .shards()
        .iter()
        .map(|s| s.lock().expect("shard").totals().get(c))
        .sum::<u64>()
        + k
}
