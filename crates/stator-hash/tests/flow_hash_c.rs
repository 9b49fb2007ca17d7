//! The C flow hash (`bpf/include/flow_hash.h`) against the Rust one, bit for bit.
//!
//! The test compiles `tests/c/flow_hash_driver.c` with the host C compiler(s), feeds it the shared
//! vectors and 100,000 seeded random tuples, and compares every hash with the Rust API. It also
//! compiles the header for the BPF target (`clang -target bpf -O2 -Wall -Werror`). A missing
//! compiler fails the test with a message: it never skips silently.
mod common;

use common::{Flow, flow_hash_vectors};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const RANDOM_TUPLES: usize = 100_000;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn include_dir() -> PathBuf {
    repo_root().join("bpf/include")
}

fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(name)
}

/// A scratch directory for this test binary, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(label: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("stator-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn has_compiler(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The host compilers to test with: `$CC` (or `cc`), plus `clang` if it is installed and
/// different. Panics if there is none.
fn host_compilers() -> Vec<String> {
    let primary = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let mut compilers = Vec::new();
    for candidate in [primary.as_str(), "clang", "gcc"] {
        if !compilers.iter().any(|c: &String| c == candidate) && has_compiler(candidate) {
            compilers.push(candidate.to_owned());
        }
    }
    assert!(
        !compilers.is_empty(),
        "no C compiler found (tried $CC={primary:?}, clang, gcc): the flow hash must be checked \
         against bpf/include/flow_hash.h; install one with `make deps`"
    );
    compilers
}

fn run(command: &mut Command, what: &str) -> Vec<u8> {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn random_flows(count: usize) -> Vec<Flow> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5ca1_ab1e);
    (0..count)
        .map(|_| {
            let proto: u8 = rng.random();
            match rng.random_range(0..4) {
                0 => Flow::V4 {
                    src: rng.random(),
                    dst: rng.random(),
                    sport: rng.random(),
                    dport: rng.random(),
                    proto,
                },
                1 => Flow::V6 {
                    src: rng.random(),
                    dst: rng.random(),
                    sport: rng.random(),
                    dport: rng.random(),
                    proto,
                },
                2 => Flow::V4Frag {
                    src: rng.random(),
                    dst: rng.random(),
                    proto,
                },
                _ => Flow::V6Frag {
                    src: rng.random(),
                    dst: rng.random(),
                    proto,
                },
            }
        })
        .collect()
}

#[test]
fn c_header_matches_rust_on_vectors_and_random_tuples() {
    let scratch = ScratchDir::new("flow-hash-c");
    let vectors = flow_hash_vectors();
    let mut flows: Vec<Flow> = vectors.iter().map(|(_, flow, _)| *flow).collect();
    flows.extend(random_flows(RANDOM_TUPLES));
    let input: String = flows.iter().map(|f| f.driver_line() + "\n").collect();
    let input_path = scratch.0.join("input.txt");
    std::fs::write(&input_path, input).expect("write driver input");

    for compiler in host_compilers() {
        let driver = scratch.0.join(format!("driver-{compiler}"));
        run(
            Command::new(&compiler)
                .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
                .arg("-I")
                .arg(include_dir())
                .arg(c_source("flow_hash_driver.c"))
                .arg("-o")
                .arg(&driver),
            &format!("compiling the flow-hash driver with {compiler}"),
        );
        let stdin = std::fs::File::open(&input_path).expect("open driver input");
        let output = run(
            Command::new(&driver).stdin(stdin),
            &format!("the flow-hash driver built with {compiler}"),
        );
        let output = String::from_utf8(output).expect("driver prints ASCII");
        let hashes: Vec<u32> = output
            .lines()
            .map(|l| u32::from_str_radix(l, 16).expect("driver prints hex"))
            .collect();
        assert_eq!(
            hashes.len(),
            flows.len(),
            "{compiler}: driver output length"
        );
        for (i, (flow, c_hash)) in flows.iter().zip(&hashes).enumerate() {
            assert_eq!(
                *c_hash,
                flow.hash(),
                "{compiler}: C and Rust disagree on input {i}: {flow:?}"
            );
        }
        for (line, _, want) in &vectors {
            let i = vectors.iter().position(|(l, _, _)| l == line).unwrap();
            assert_eq!(hashes[i], *want, "{compiler}: vector file line {line}");
        }
    }
}

/// Debian keeps `asm/types.h` under the multiarch include directory, which `-target bpf` does not
/// search; add it the way BPF builds usually do.
fn multiarch_include() -> Option<PathBuf> {
    let triple = Command::new("gcc")
        .arg("-print-multiarch")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| format!("{}-linux-gnu", std::env::consts::ARCH));
    let dir = Path::new("/usr/include").join(triple);
    dir.is_dir().then_some(dir)
}

#[test]
fn c_header_compiles_for_bpf() {
    assert!(
        has_compiler("clang"),
        "clang not found: it is needed to prove bpf/include/flow_hash.h compiles for the BPF \
         target; install it with `make deps`"
    );
    let scratch = ScratchDir::new("flow-hash-bpf");
    let object = scratch.0.join("flow_hash_probe.o");
    let mut command = Command::new("clang");
    command
        .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c"])
        .arg("-I")
        .arg(include_dir());
    if let Some(dir) = multiarch_include() {
        command.arg("-I").arg(dir);
    }
    run(
        command
            .arg(c_source("flow_hash_probe.bpf.c"))
            .arg("-o")
            .arg(&object),
        "compiling flow_hash.h for the BPF target",
    );
    let size = std::fs::metadata(&object).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "clang produced no BPF object");
}
