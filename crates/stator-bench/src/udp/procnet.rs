//! Where a datagram can be lost on its way to a receiver, read from the kernel's own counters:
//! the sender's veth (`ethtool -S`: frames the peer's ring refused, the `rx_nodesc_drop_cnt` of
//! the article's NIC), the receiving sockets (`/proc/net/udp`: `drops`, `rx_queue`) and the
//! namespace's UDP MIB (`/proc/net/snmp`: `RcvbufErrors`, `InErrors`, `NoPorts`, as
//! `netstat -s --udp` prints them). The parsers are pure; the readers run in the namespace.

use std::collections::HashMap;

/// One line of `/proc/net/udp` (the fields the benchmark reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpSocketLine {
    /// Local port.
    pub local_port: u16,
    /// Bytes waiting in the receive queue.
    pub rx_queue: u64,
    /// The socket's inode (`stat` of its descriptor gives the same number).
    pub inode: u64,
    /// Datagrams the socket dropped (receive buffer full, mostly).
    pub drops: u64,
}

/// Parses `/proc/net/udp` (or `udp6`); lines that do not parse are skipped.
pub fn parse_udp_sockets(text: &str) -> Vec<UdpSocketLine> {
    text.lines().skip(1).filter_map(parse_udp_line).collect()
}

fn parse_udp_line(line: &str) -> Option<UdpSocketLine> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 13 {
        return None;
    }
    let (_, port) = f[1].rsplit_once(':')?;
    let (_, rx) = f[4].split_once(':')?;
    Some(UdpSocketLine {
        local_port: u16::from_str_radix(port, 16).ok()?,
        rx_queue: u64::from_str_radix(rx, 16).ok()?,
        inode: f[9].parse().ok()?,
        drops: f[12].parse().ok()?,
    })
}

/// The `Udp:` counters of `/proc/net/snmp`, by name (`InDatagrams`, `RcvbufErrors`, …).
pub fn parse_snmp_udp(text: &str) -> HashMap<String, u64> {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return HashMap::new();
    };
    names
        .split_whitespace()
        .skip(1)
        .zip(values.split_whitespace().skip(1))
        .filter_map(|(n, v)| Some((n.to_string(), v.parse().ok()?)))
        .collect()
}

/// `name: value` lines of `ethtool -S` output.
pub fn parse_ethtool_stats(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(':')?;
            Some((name.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// What the benchmark reads in the receiver's namespace at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NsCounters {
    /// Every UDP socket of the namespace.
    pub sockets: Vec<UdpSocketLine>,
    /// The namespace's `Udp:` MIB.
    pub snmp: HashMap<String, u64>,
}

impl NsCounters {
    /// Reads both files as the calling thread's namespace sees them (`/proc/thread-self/net`:
    /// `/proc/net` would show the namespace of the process's main thread).
    pub fn read() -> std::io::Result<Self> {
        let udp = std::fs::read_to_string("/proc/thread-self/net/udp")?;
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
        Ok(Self {
            sockets: parse_udp_sockets(&udp),
            snmp: parse_snmp_udp(&snmp),
        })
    }

    /// Drops of the socket with this inode (0 when it is not listed).
    pub fn socket_drops(&self, inode: u64) -> u64 {
        self.sockets
            .iter()
            .find(|s| s.inode == inode)
            .map_or(0, |s| s.drops)
    }

    /// A counter of the UDP MIB (0 when absent).
    pub fn mib(&self, name: &str) -> u64 {
        self.snmp.get(name).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  119: 00000000:10E1 00000000:0000 07 00000000:00034000 00:00000000 00000000     0        0 4242 2 0000000000000000 1234
  120: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 77 2 0000000000000000 0
garbage line
";

    #[test]
    fn udp_lines() {
        let s = parse_udp_sockets(UDP);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            UdpSocketLine {
                local_port: 4321,
                rx_queue: 0x34000,
                inode: 4242,
                drops: 1234
            }
        );
        assert_eq!(s[1].local_port, 53);
        let ns = NsCounters {
            sockets: s,
            snmp: HashMap::new(),
        };
        assert_eq!(ns.socket_drops(4242), 1234);
        assert_eq!(ns.socket_drops(1), 0);
    }

    #[test]
    fn snmp_udp() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\nUdp: 100 2 30 0 30 0 0 0 0\nUdpLite: InDatagrams\nUdpLite: 0\n";
        let m = parse_snmp_udp(text);
        assert_eq!(m["InDatagrams"], 100);
        assert_eq!(m["RcvbufErrors"], 30);
        assert_eq!(m["NoPorts"], 2);
        assert_eq!(m.len(), 9);
        assert!(parse_snmp_udp("nothing").is_empty());
    }

    #[test]
    fn ethtool() {
        let text = "NIC statistics:\n     peer_ifindex: 2\n     tx_queue_0_xdp_xmit: 1000\n     tx_queue_0_xdp_xmit_errors: 7\n";
        let m = parse_ethtool_stats(text);
        assert_eq!(m["tx_queue_0_xdp_xmit"], 1000);
        assert_eq!(m["tx_queue_0_xdp_xmit_errors"], 7);
        assert!(!m.contains_key("NIC statistics"));
    }
}
