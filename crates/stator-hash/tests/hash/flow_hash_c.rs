//! The C flow hash (`bpf/include/flow_hash.h`) against the Rust one, bit for bit.
//!
//! The test compiles `tests/c/flow_hash_driver.c` with the host C compiler(s), feeds it the shared
//! vectors and 100,000 seeded random tuples, and compares every hash with the Rust API. It also
//! compiles the header for the BPF target (`clang -target bpf -O2 -Wall -Werror`). A missing
//! compiler fails the test with a message: it never skips silently.
#[allow(unused_imports)]
use crate::common;

use crate::common::cdriver::{
    ScratchDir, c_source, driver_hashes, has_compiler, host_compilers, include_dir, run,
};
use crate::common::{Flow, flow_hash_vectors};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::Command;

const RANDOM_TUPLES: usize = 100_000;

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

    for compiler in host_compilers("the flow hash must be checked against bpf/include/flow_hash.h")
    {
        let hashes = driver_hashes(
            &compiler,
            "flow_hash_driver.c",
            &scratch,
            &input_path,
            "flow-hash",
        );
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
