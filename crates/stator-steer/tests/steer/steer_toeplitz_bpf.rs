//! The Toeplitz hash as the kernel runs it, against the Rust one, bit for bit.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! `tests/bpf/toeplitz_probe.bpf.c` wraps `bpf/include/toeplitz.h` and the steering program's
//! client hash (`bpf/include/reuseport.h`) in an XDP program; this test compiles it for the BPF
//! target, has the kernel verify it, and runs it through `BPF_PROG_TEST_RUN` on the shared vectors
//! (`crates/stator-hash/testdata/toeplitz_vectors.txt`) and 100,000 seeded random inputs — raw
//! byte strings of every length the program and the vectors use, and client addresses (IPv4 and
//! IPv6, with and without the port) — comparing each hash with `stator_hash::Toeplitz` and
//! `SteeringTable::hash`. The host-compiled half is `crates/stator-hash/tests/hash/toeplitz_c.rs`.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use aya::programs::Xdp;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stator_hash::{RSS_DEFAULT_KEY, Toeplitz};
use stator_steer::{HashFields, RssKey, SteeringTable};
use stator_sys::bpf_build::BpfCompiler;
use stator_xdp::testrun::{TestRunOpts, run_xdp};

const RANDOM_INPUTS: usize = 100_000;
/// The raw lengths the probe instantiates.
const RAW_LENGTHS: [usize; 12] = [0, 1, 4, 6, 8, 12, 16, 18, 32, 36, 40, 44];
const XDP_PASS: u32 = 2;

/// One run of the probe.
#[derive(Debug, Clone)]
enum Case {
    Raw {
        key: [u8; 40],
        input: Vec<u8>,
    },
    Client {
        key: [u8; 40],
        fields: HashFields,
        client: SocketAddr,
    },
}

impl Case {
    fn frame(&self) -> Vec<u8> {
        let mut f = vec![0u8; 104];
        match self {
            Case::Raw { key, input } => {
                f[..40].copy_from_slice(key);
                f[56] = 0;
                f[57] = input.len() as u8;
                f[60..60 + input.len()].copy_from_slice(input);
            }
            Case::Client {
                key,
                fields,
                client,
            } => {
                f[..40].copy_from_slice(key);
                let flags = match fields {
                    HashFields::Addr => 0u32,
                    HashFields::AddrPort => stator_abi::STATOR_RP_F_PORT,
                };
                f[44..48].copy_from_slice(&flags.to_ne_bytes());
                f[56] = 1;
                f[58..60].copy_from_slice(&client.port().to_be_bytes());
                match client.ip() {
                    IpAddr::V4(a) => {
                        f[57] = 4;
                        f[60..64].copy_from_slice(&a.octets());
                    }
                    IpAddr::V6(a) => {
                        f[57] = 6;
                        f[60..76].copy_from_slice(&a.octets());
                    }
                }
            }
        }
        f
    }

    /// The hash through the Rust API.
    fn expected(&self) -> u32 {
        match self {
            Case::Raw { key, input } => Toeplitz::new(*key).hash(input),
            Case::Client {
                key,
                fields,
                client,
            } => SteeringTable::new(1, 1009, RssKey::new(*key), *fields)
                .expect("a one-worker table")
                .hash(*client),
        }
    }
}

fn unhex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The shared vectors: (line, case, expected hash).
fn vectors() -> Vec<(usize, Case, u32)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../stator-hash/testdata/toeplitz_vectors.txt");
    let text = std::fs::read_to_string(&path).expect("read toeplitz_vectors.txt");
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .map(|(i, l)| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let key = if f[0] == "ms" {
                RSS_DEFAULT_KEY
            } else {
                unhex(f[0]).try_into().expect("40-byte key")
            };
            let input = unhex(f[1]);
            let hash = u32::from_str_radix(f[2], 16).expect("hex hash");
            (i + 1, Case::Raw { key, input }, hash)
        })
        .collect()
}

fn random_cases(count: usize) -> Vec<Case> {
    let mut rng = ChaCha8Rng::seed_from_u64(0xb9f_7e0);
    let mut key = RSS_DEFAULT_KEY;
    (0..count)
        .map(|i| {
            if i % 100 == 99 {
                rng.fill(&mut key);
            }
            match rng.random_range(0..6) {
                0 | 1 => {
                    let len = RAW_LENGTHS[rng.random_range(0..RAW_LENGTHS.len())];
                    Case::Raw {
                        key,
                        input: (0..len).map(|_| rng.random()).collect(),
                    }
                }
                k => {
                    let ip = if k % 2 == 0 {
                        IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()))
                    } else {
                        IpAddr::V6(Ipv6Addr::from(rng.random::<u128>()))
                    };
                    let fields = if k < 4 {
                        HashFields::Addr
                    } else {
                        HashFields::AddrPort
                    };
                    Case::Client {
                        key,
                        fields,
                        client: SocketAddr::new(ip, rng.random()),
                    }
                }
            }
        })
        .collect()
}

/// Compiles the probe into `dir` and returns the object's path.
fn compile_probe(dir: &Path) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let object = dir.join("toeplitz_probe.o");
    BpfCompiler::new(&manifest.join("../../bpf/include"))
        .compile(
            &manifest.join("tests/bpf/toeplitz_probe.bpf.c"),
            &object,
            &[],
        )
        .unwrap_or_else(|e| panic!("compiling the probe failed: {e}"));
    object
}

#[test]
fn bpf_toeplitz_matches_rust_on_vectors_and_random_inputs() {
    assert!(
        stator_lab::netns::is_root(),
        "this test needs root (CAP_BPF) to load and run a BPF program; run as root"
    );
    let dir = stator_testkit::scratch::unique_path("stator-steer-probe", "");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let object = compile_probe(&dir);
    let mut ebpf = aya::Ebpf::load_file(&object).expect("load the probe object");
    let _ = std::fs::remove_dir_all(&dir);
    let prog: &mut Xdp = ebpf
        .program_mut("toeplitz_probe")
        .expect("program toeplitz_probe")
        .try_into()
        .expect("an XDP program");
    prog.load().expect("the verifier accepts the probe");
    let fd = prog.fd().expect("loaded program fd");

    let run = |case: &Case| -> u32 {
        let out = run_xdp(fd, &case.frame(), TestRunOpts::default()).expect("BPF_PROG_TEST_RUN");
        assert_eq!(out.action, XDP_PASS, "the probe rejected {case:?}");
        u32::from_ne_bytes(out.data[..4].try_into().expect("4 bytes"))
    };

    let vectors = vectors();
    assert!(vectors.len() >= 50, "only {} vectors", vectors.len());
    for (line, case, want) in &vectors {
        assert_eq!(
            run(case),
            *want,
            "toeplitz_vectors.txt line {line}: {case:?}"
        );
    }
    let cases = random_cases(RANDOM_INPUTS);
    let mut clients = 0;
    for (i, case) in cases.iter().enumerate() {
        clients += usize::from(matches!(case, Case::Client { .. }));
        assert_eq!(run(case), case.expected(), "random case {i}: {case:?}");
    }
    println!(
        "BPF Toeplitz = Rust on {} vectors and {} random inputs ({clients} client hashes)",
        vectors.len(),
        cases.len()
    );
}
