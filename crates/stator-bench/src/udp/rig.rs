//! The ladder's two namespaces and its generator.
//!
//! ```text
//!  sender ns "<p>s"                                  receiver ns "<p>r"
//!  stator_vgen ×N ─redirect─► eth0 ═══ veth, N queues ═══ eth0 (GRO on: veth NAPI) ─► UDP :4321
//!  (BPF_PROG_TEST_RUN live frames,   10.210.0.2            10.210.0.1          receiving threads
//!   one process per generator CPU)
//! ```
//!
//! Each generator is the XDP live-frames program of `stator bench veth` (`stator_vgen`), run
//! by a process of its own ([`super::generator`]) pinned to a CPU of its own: the
//! kernel builds each frame in a page of its own pool and redirects it into the sender's veth,
//! so no socket, no skb and no system call per packet is spent on the sending side. veth hands a
//! redirected frame to the peer's receive queue of the sending CPU (`smp_processor_id() %`
//! queues, so the veth has one queue per generator) and that queue's NAPI runs in the softirq of
//! the same CPU: the receiving kernel's work (skb, IP, UDP, the socket's queue) is done on the
//! generators' CPUs — the role of the article's RX-queue CPUs — and the receiving threads pay
//! only for their own system calls. Frames a queue's ring cannot take are counted by veth
//! (`ethtool -S`). Each generator sends its own share of the source ports.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use stator_lab::netns::{self, Netns};

use super::generator::{GenSpec, Generators};
use super::procnet::{NsCounters, parse_ethtool_stats};
use crate::BenchError;

/// The sender's address.
pub const SENDER: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);
/// The receiver's address.
pub const RECEIVER: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 1);
/// The receivers' port (the article's).
pub const PORT: u16 = 4321;
/// First source port; frame `i` comes from `FIRST_PORT + i % flows`.
pub const FIRST_PORT: u16 = 1024;
/// UDP payload of every datagram (the article's: 74 bytes on the wire with the headers).
pub const PAYLOAD: usize = 32;
/// The big-endian word the generator varies per flow: the last half of the destination address
/// and the source port (offset 32). Ports start at 1024, so adding fewer than 64,000 never
/// carries into the address.
const FLOW_WORD: u32 = 32;
/// Most distinct flows (source ports) a run may ask for.
pub const MAX_FLOWS: u32 = 64_000;

/// Sender and receiver namespaces joined by veth, and what its generators need; everything is
/// removed on drop.
#[derive(Debug)]
pub struct Rig {
    /// The sender's namespace.
    pub sender: Netns,
    /// The receiver's namespace.
    pub receiver: Netns,
    prefix: String,
    specs: Vec<GenSpec>,
}

impl Rig {
    /// Builds the namespaces, joined by a veth with one queue per generator, for generators on
    /// `gen_cpus` (at least one) that share `flows` source ports between them: generator `k`
    /// sends ports `FIRST_PORT + k·flows/n …`, its own share.
    pub fn new(flows: u32, gen_cpus: &[usize]) -> Result<Self, BenchError> {
        let gens = gen_cpus.len().max(1);
        let queues = gens.to_string();
        let queues = queues.as_str();
        // a prefix of this rig's own: rigs in one process (the smoke tests) run side by side
        let prefix = format!("{}-", stator_testkit::scratch::unique_name("sbu"));
        let sender = Netns::create(&format!("{prefix}s"))?;
        let receiver = Netns::create(&format!("{prefix}r"))?;
        let mut rig_ns = NsGuard(Some(prefix.clone()));
        netns::ip([
            "link",
            "add",
            "eth0",
            "netns",
            sender.name(),
            "numtxqueues",
            queues,
            "numrxqueues",
            queues,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            receiver.name(),
            "numtxqueues",
            queues,
            "numrxqueues",
            queues,
        ])?;
        sender.ip(["link", "set", "eth0", "up"])?;
        receiver.ip(["link", "set", "eth0", "up"])?;
        sender.addr_add("eth0", &format!("{SENDER}/24"))?;
        receiver.addr_add("eth0", &format!("{RECEIVER}/24"))?;
        // veth runs a NAPI instance for frames redirected into it only with GRO (or XDP) on
        receiver.exec("ethtool", ["-K", "eth0", "gro", "on"])?;
        let flows = flows.clamp(1, MAX_FLOWS);
        let share = (flows / gens as u32).max(1);
        let (ifindex, dst, src) = (
            sender.ifindex("eth0")?,
            receiver.mac("eth0")?,
            sender.mac("eth0")?,
        );
        // an idle veth pair per generator, to hold its program in the XDP dispatcher
        for k in 0..gens {
            sender.ip([
                "link",
                "add",
                &format!("gk{k}a"),
                "type",
                "veth",
                "peer",
                "name",
                &format!("gk{k}b"),
            ])?;
        }
        let specs = gen_cpus
            .iter()
            .enumerate()
            .map(|(k, &cpu)| {
                let first = FIRST_PORT + u16::try_from(k as u32 * share).unwrap_or(0);
                GenSpec {
                    keeper: Some(format!("gk{k}a")),
                    netns: sender.name().to_string(),
                    ifindex,
                    cpu,
                    flows: share,
                    flow_word: FLOW_WORD,
                    frame: frame(dst, src, first),
                }
            })
            .collect();
        rig_ns.0 = None;
        Ok(Self {
            sender,
            receiver,
            prefix,
            specs,
        })
    }

    /// The CPUs the generators run on.
    pub fn gen_cpus(&self) -> Vec<usize> {
        self.specs.iter().map(|s| s.cpu).collect()
    }

    /// The address the receivers bind.
    pub fn receiver_addr() -> SocketAddr {
        SocketAddr::from((RECEIVER, PORT))
    }

    /// Opens `count` receiving sockets in the receiver's namespace (with `SO_REUSEPORT` when
    /// asked; `count > 1` needs it).
    pub fn bind(
        &self,
        count: usize,
        reuseport: bool,
        rcvbuf: Option<usize>,
    ) -> Result<Vec<UdpSocket>, BenchError> {
        let addr = Self::receiver_addr();
        self.receiver
            .run_in(move || {
                (0..count)
                    .map(|_| super::recv::bind(addr, reuseport, rcvbuf))
                    .collect::<std::io::Result<Vec<_>>>()
            })?
            .map_err(|e| BenchError::io("binding the receiving sockets", e))
    }

    /// The receiver namespace's UDP sockets and MIB, now.
    pub fn ns_counters(&self) -> Result<NsCounters, BenchError> {
        self.receiver
            .run_in(NsCounters::read)?
            .map_err(|e| BenchError::io("reading the receiver's /proc/net", e))
    }

    /// The sender veth's XDP transmit counters: frames the receiver's ring took, and refused.
    pub fn veth_counters(&self) -> Result<(u64, u64), BenchError> {
        let stats = parse_ethtool_stats(&self.sender.exec("ethtool", ["-S", "eth0"])?);
        let sum = |suffix: &str| {
            stats
                .iter()
                .filter(|(k, _)| k.starts_with("tx_queue_") && k.ends_with(suffix))
                .map(|(_, v)| *v)
                .sum::<u64>()
        };
        Ok((sum("_xdp_xmit"), sum("_xdp_xmit_errors")))
    }

    /// Starts the generator processes: frames until stopped, `max_frames` or `max_seconds`,
    /// whichever comes first, at `rate` frames a second in all when given (else as fast as
    /// they can); each generator has its share of the frames and the rate.
    pub fn start_generators(
        &self,
        max_frames: u64,
        max_seconds: f64,
        rate: Option<f64>,
    ) -> Result<Generators, BenchError> {
        Generators::start(&self.specs, max_frames, max_seconds, rate)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = netns::cleanup(&self.prefix);
    }
}

/// Removes the namespaces of a rig that failed half-way through construction.
struct NsGuard(Option<String>);

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = netns::cleanup(p);
        }
    }
}

/// A generator's frame: Ethernet, IPv4, UDP from `SENDER:first_port` to `RECEIVER:PORT`,
/// 32 zero bytes of payload (as the article's sender: `"\x00" * 32`), 74 bytes. The UDP
/// checksum is 0 ("none", allowed over IPv4), so varying the source port keeps it valid.
pub fn frame(dst_mac: [u8; 6], src_mac: [u8; 6], first_port: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(74);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let udp_len = 8 + PAYLOAD as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&SENDER.octets());
    ip.extend_from_slice(&RECEIVER.octets());
    let c = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&first_port.to_be_bytes());
    f.extend_from_slice(&PORT.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0u8; PAYLOAD]);
    f
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut s: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_is_74_bytes_of_valid_ipv4_udp() {
        let f = frame([2; 6], [4; 6], FIRST_PORT);
        assert_eq!(f.len(), 74);
        assert_eq!(ipv4_checksum(&f[14..34]), 0, "header checksum verifies");
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 60);
        assert_eq!(f[23], 17);
        assert_eq!(u16::from_be_bytes([f[34], f[35]]), FIRST_PORT);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), PORT);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 40);
        // the varied word's low half is the source port
        assert_eq!(
            &f[FLOW_WORD as usize + 2..FLOW_WORD as usize + 4],
            &f[34..36]
        );
    }
}
