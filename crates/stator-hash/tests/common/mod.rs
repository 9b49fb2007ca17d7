//! Helpers shared by the integration tests: the flow-hash vector file, and building and running
//! the C drivers ([`cdriver`]).
#![allow(dead_code)] // Each test binary uses a different subset.

pub mod cdriver;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// One flow: the fields as Stator's hash API takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        proto: u8,
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
        proto: u8,
    },
    V4Frag {
        src: [u8; 4],
        dst: [u8; 4],
        proto: u8,
    },
    V6Frag {
        src: [u8; 16],
        dst: [u8; 16],
        proto: u8,
    },
}

impl Flow {
    /// The hash through the Rust API.
    pub fn hash(&self) -> u32 {
        match *self {
            Flow::V4 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => stator_hash::flow_hash_v4(src, dst, sport, dport, proto),
            Flow::V6 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => stator_hash::flow_hash_v6(src, dst, sport, dport, proto),
            Flow::V4Frag { src, dst, proto } => stator_hash::flow_hash3_v4(src, dst, proto),
            Flow::V6Frag { src, dst, proto } => stator_hash::flow_hash3_v6(src, dst, proto),
        }
    }

    /// One input line for the C driver: kind, proto, source and destination as hex of the
    /// network-order bytes, ports as decimal host-order numbers (0 for 3-tuples).
    pub fn driver_line(&self) -> String {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        match self {
            Flow::V4 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => {
                format!("v4 {proto} {} {} {sport} {dport}", hex(src), hex(dst))
            }
            Flow::V6 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => {
                format!("v6 {proto} {} {} {sport} {dport}", hex(src), hex(dst))
            }
            Flow::V4Frag { src, dst, proto } => {
                format!("v4frag {proto} {} {} 0 0", hex(src), hex(dst))
            }
            Flow::V6Frag { src, dst, proto } => {
                format!("v6frag {proto} {} {} 0 0", hex(src), hex(dst))
            }
        }
    }
}

/// Path of a file in the crate's `testdata/`.
pub fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
}

/// The vectors of `testdata/flow_hash_vectors.txt`: (line number, flow, expected hash).
pub fn flow_hash_vectors() -> Vec<(usize, Flow, u32)> {
    let path = testdata("flow_hash_vectors.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut vectors = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 7, "line {line_no}: expected 7 columns: {line}");
        let proto: u8 = f[1]
            .parse()
            .unwrap_or_else(|e| panic!("line {line_no}: proto: {e}"));
        let v4 = |s: &str| -> [u8; 4] {
            s.parse::<Ipv4Addr>()
                .unwrap_or_else(|e| panic!("line {line_no}: {s}: {e}"))
                .octets()
        };
        let v6 = |s: &str| -> [u8; 16] {
            s.parse::<Ipv6Addr>()
                .unwrap_or_else(|e| panic!("line {line_no}: {s}: {e}"))
                .octets()
        };
        let port = |s: &str| -> u16 {
            s.parse()
                .unwrap_or_else(|e| panic!("line {line_no}: {s}: {e}"))
        };
        let flow = match f[0] {
            "v4" => Flow::V4 {
                src: v4(f[2]),
                dst: v4(f[3]),
                sport: port(f[4]),
                dport: port(f[5]),
                proto,
            },
            "v6" => Flow::V6 {
                src: v6(f[2]),
                dst: v6(f[3]),
                sport: port(f[4]),
                dport: port(f[5]),
                proto,
            },
            "v4frag" => Flow::V4Frag {
                src: v4(f[2]),
                dst: v4(f[3]),
                proto,
            },
            "v6frag" => Flow::V6Frag {
                src: v6(f[2]),
                dst: v6(f[3]),
                proto,
            },
            other => panic!("line {line_no}: unknown kind {other}"),
        };
        let hash = f[6]
            .strip_prefix("0x")
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .unwrap_or_else(|| panic!("line {line_no}: bad hash {}", f[6]));
        vectors.push((line_no, flow, hash));
    }
    vectors
}
