//! `stator trace --send`: the paper's packet tracer (§4.4, docs/operations.md "Tracing a
//! packet"). Crafts a TCP SYN or UDP datagram to a VIP whose payload starts with a
//! `struct stator_trace_mark` naming a receiver (this process), sends it through a raw socket
//! with the chosen source and ports — optionally as two IP fragments — so it is routed like
//! any client's packet, then listens for the reports every Stator node it crosses sends and
//! prints the path hop by hop. The mark is sealed with the cluster's tracer key (its MAC covers
//! the receiver and the flow: docs/forwarding.md §11.1), and the packet is padded to 1,200
//! bytes so that every report fits in it (a node never sends a report longer than the packet
//! that caused it). Needs root (raw sockets), the key file, and a route back from the nodes to
//! the receiver address, inside their `tracer.receivers`.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use stator_abi::{STATOR_TRACE_MAGIC, TraceMark};
use stator_wire::ipv6ext::{Ipv6FragmentHeader, Ipv6FragmentRepr};
use stator_wire::{
    FragmentInfo, IpPair, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpFlags,
    TcpPacket, TcpRepr, UdpPacket, UdpRepr,
};

/// What to send.
#[derive(Debug, Clone)]
pub struct SendOpts {
    /// The VIP's address.
    pub vip: IpAddr,
    /// Its port.
    pub dport: u16,
    /// TCP (a SYN) or UDP.
    pub tcp: bool,
    /// The source address (default: the one the route to the VIP uses).
    pub src: Option<IpAddr>,
    /// The source port.
    pub sport: u16,
    /// Send the datagram as two fragments (UDP only).
    pub fragment: bool,
    /// Where reports go (default: the route's source address, a free port).
    pub listen: Option<SocketAddr>,
    /// How long to listen for reports.
    pub wait: Duration,
    /// Print every report's JSON instead of a table.
    pub json: bool,
    /// The tracer key the mark is sealed with (the key file's first).
    pub key: [u8; 16],
}

/// The traced packet's payload length: reports are never longer than the packet they answer,
/// and a report (JSON naming the node, VIP and backend) fits in this.
pub const TRACE_PAYLOAD: usize = 1200;

/// The key `stator trace --send` seals marks with: the first of `path`'s keys (the same file
/// format as `tracer.key_file`).
pub fn read_key(path: &std::path::Path) -> Result<[u8; 16]> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading the tracer key {} (--key-file; the cluster's tracer.key_file)",
            path.display()
        )
    })?;
    let keys = stator_control::host::parse_trace_keys(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(keys[0])
}

/// One report as received.
#[derive(Debug, Clone)]
pub struct Report {
    /// Its JSON.
    pub json: Value,
    /// When it arrived, after the send.
    pub after: Duration,
}

/// The address the kernel would send from toward `dst`.
fn route_source(dst: IpAddr, port: u16) -> Result<IpAddr> {
    let any: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let s = UdpSocket::bind(any)?;
    s.connect(SocketAddr::new(dst, port.max(1)))
        .with_context(|| format!("no route to {dst}"))?;
    Ok(s.local_addr()?.ip())
}

/// The L4 segment (header + payload) with its checksum over `src`, `dst`.
fn segment(o: &SendOpts, src: IpAddr, payload: &[u8]) -> Result<Vec<u8>> {
    let pair = match (src, o.vip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpPair::V4 { src: s, dst: d },
        (IpAddr::V6(s), IpAddr::V6(d)) => IpPair::V6 { src: s, dst: d },
        _ => bail!(
            "--src {src} and the VIP {} are of different families",
            o.vip
        ),
    };
    if o.tcp {
        let repr = TcpRepr {
            src_port: o.sport,
            dst_port: o.dport,
            seq_number: rand::random(),
            ack_number: 0,
            flags: TcpFlags::SYN,
            window_len: 64240,
            urgent_at: 0,
            options: &[],
            payload,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &pair)
            .map_err(|e| anyhow::anyhow!("building the TCP segment: {e}"))?;
        Ok(buf)
    } else {
        let repr = UdpRepr {
            src_port: o.sport,
            dst_port: o.dport,
            payload_len: payload.len(),
        };
        let mut buf = vec![0u8; 8 + payload.len()];
        buf[8..].copy_from_slice(payload);
        repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), Some(&pair))
            .map_err(|e| anyhow::anyhow!("building the UDP datagram: {e}"))?;
        Ok(buf)
    }
}

/// The IP packets carrying `l4`: one, or (with `fragment`) two fragments cut after
/// `first_len` bytes of it.
fn packets(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8], fragment: bool) -> Result<Vec<Vec<u8>>> {
    let id: u32 = rand::random();
    let cut = if fragment {
        (l4.len() / 2).max(8) / 8 * 8
    } else {
        l4.len()
    };
    let pieces: Vec<(usize, &[u8], bool)> = if fragment {
        vec![(0, &l4[..cut], true), (cut, &l4[cut..], false)]
    } else {
        vec![(0, l4, false)]
    };
    let mut out = Vec::new();
    for (offset, data, more) in pieces {
        let pkt = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let repr = Ipv4Repr {
                    src_addr: s,
                    dst_addr: d,
                    protocol: IpProtocol(proto),
                    payload_len: data.len(),
                    ttl: 64,
                    tos: 0,
                    ident: id as u16,
                    dont_frag: !fragment,
                    more_frags: more,
                    frag_offset: offset as u16,
                };
                let mut buf = vec![0u8; repr.buffer_len()];
                buf[repr.header_len()..].copy_from_slice(data);
                repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]))
                    .map_err(|e| anyhow::anyhow!("building the IPv4 header: {e}"))?;
                buf
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ext = if fragment { 8 } else { 0 };
                let repr = Ipv6Repr {
                    src_addr: s,
                    dst_addr: d,
                    next_header: IpProtocol(if fragment { 44 } else { proto }),
                    payload_len: ext + data.len(),
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                };
                let mut buf = vec![0u8; 40 + ext + data.len()];
                repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]))
                    .map_err(|e| anyhow::anyhow!("building the IPv6 header: {e}"))?;
                if fragment {
                    Ipv6FragmentRepr {
                        next_header: IpProtocol(proto),
                        info: FragmentInfo {
                            id,
                            offset: offset as u16,
                            more,
                        },
                    }
                    .emit(&mut Ipv6FragmentHeader::new_unchecked(&mut buf[40..48]))
                    .map_err(|e| anyhow::anyhow!("building the fragment header: {e}"))?;
                }
                buf[40 + ext..].copy_from_slice(data);
                buf
            }
            _ => bail!("mixed families"),
        };
        out.push(pkt);
    }
    Ok(out)
}

/// Sends the traced packet and collects the reports with its trace id for `o.wait`.
pub fn trace(o: &SendOpts) -> Result<(u32, SocketAddr, Vec<Report>)> {
    if o.fragment && o.tcp {
        bail!("--fragment sends a UDP datagram in two fragments: add --proto udp");
    }
    let listen = match o.listen {
        Some(l) => l,
        None => SocketAddr::new(route_source(o.vip, o.dport)?, 0),
    };
    let rx =
        UdpSocket::bind(listen).with_context(|| format!("listening for reports on {listen}"))?;
    let receiver = rx.local_addr()?;
    let src = match o.src {
        Some(s) => s,
        None => route_source(o.vip, o.dport)?,
    };
    let trace_id: u32 = rand::random();
    let mut mark = TraceMark {
        magic: STATOR_TRACE_MAGIC,
        receiver_port: receiver.port().to_be_bytes(),
        trace_id,
        ..TraceMark::default()
    };
    match receiver.ip() {
        IpAddr::V4(a) => {
            mark.receiver[..4].copy_from_slice(&a.octets());
            mark.receiver_family = 4;
        }
        IpAddr::V6(a) => {
            mark.receiver = a.octets();
            mark.receiver_family = 6;
        }
    }
    let proto = if o.tcp { 6 } else { 17 };
    mark.mac = stator_core::trace_seal(&mark, &o.key, src, o.vip, o.sport, o.dport, proto);
    let mut payload = mark.to_bytes().to_vec();
    payload.resize(TRACE_PAYLOAD, 0);
    let l4 = segment(o, src, &payload)?;
    let domain = if o.vip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    // IPPROTO_RAW: we write the IP header ourselves (IP_HDRINCL), source address included.
    let raw = Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))
        .context("opening a raw socket (stator trace --send needs root)")?;
    let to = SockAddr::from(SocketAddr::new(o.vip, 0));
    let sent_at = Instant::now();
    for p in packets(src, o.vip, proto, &l4, o.fragment)? {
        raw.send_to(&p, &to)
            .with_context(|| format!("sending the traced packet to {}", o.vip))?;
    }
    let mut reports = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = o.wait.saturating_sub(sent_at.elapsed());
        if left.is_zero() {
            break;
        }
        rx.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        let Ok((n, _)) = rx.recv_from(&mut buf) else {
            continue;
        };
        let Ok(json) = serde_json::from_slice::<Value>(&buf[..n]) else {
            continue;
        };
        if json["trace_id"].as_u64() == Some(u64::from(trace_id)) {
            reports.push(Report {
                json,
                after: sent_at.elapsed(),
            });
        }
    }
    reports.sort_by_key(|r| (r.json["hop"].as_u64(), r.after));
    Ok((trace_id, receiver, reports))
}

/// `stator trace --send`: trace and print.
pub fn run(o: &SendOpts) -> Result<()> {
    let (id, receiver, reports) = trace(o)?;
    if o.json {
        for r in &reports {
            println!("{}", r.json);
        }
        return Ok(());
    }
    println!(
        "trace {id:#010x}: {} {}{}:{} -> {}:{}, reports to {receiver}",
        if o.tcp { "tcp syn" } else { "udp" },
        if o.fragment { "(2 fragments) " } else { "" },
        o.src
            .map_or_else(|| "(route source)".into(), |s| s.to_string()),
        o.sport,
        o.vip,
        o.dport
    );
    for r in &reports {
        println!("  {}", line(&r.json));
    }
    println!(
        "{} report(s) in {:.1} s",
        reports.len(),
        o.wait.as_secs_f64()
    );
    Ok(())
}

/// One report as a line: hop, node, decision, VIP, backend.
pub fn line(j: &Value) -> String {
    let s = |k: &str| j[k].as_str().unwrap_or("-").to_owned();
    let mut out = format!("hop {} node {:<8} {:<13}", j["hop"], s("node"), s("kind"));
    if let Some(v) = j["vip"].as_str() {
        out += &format!(" vip {v}");
    }
    if let Some(b) = j["backend"].as_str() {
        out += &format!(" backend {b} ({})", s("backend_addr"));
    }
    if let Some(c) = j["cause"].as_str() {
        out += &format!(" cause {c}");
    }
    if let Some(slot) = j["slot"].as_u64() {
        out += &format!(" slot {slot}");
    }
    if let Some(t) = j["target"].as_str() {
        out += &format!(" to {t}");
    }
    if let Some(r) = j["reason"].as_str() {
        out += &format!(" reason {r}");
    }
    if j["fragment"].as_bool() == Some(true) {
        out += " (fragment)";
    }
    out
}
