//! The C Toeplitz hash (`bpf/include/toeplitz.h`) against the Rust one, bit for bit.
//!
//! The test compiles `tests/c/toeplitz_driver.c` with the host C compiler(s), feeds it the shared
//! vectors (`testdata/toeplitz_vectors.txt`) and 100,000 seeded random (key, input) pairs of 0 to
//! 44 bytes, and compares every hash with [`stator_hash::Toeplitz`]. The driver also checks each
//! hash against a literal transcription of the definition. The BPF half — the same header
//! compiled for the BPF target, verified and run by the kernel — is
//! `crates/stator-steer/tests/steer/steer_toeplitz_bpf.rs` (it needs root). A missing compiler fails
//! the test with a message: it never skips silently.
#[allow(unused_imports)]
use crate::common;

use crate::common::cdriver::{ScratchDir, driver_hashes, host_compilers};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stator_hash::{RSS_DEFAULT_KEY, Toeplitz};
use std::path::Path;

const RANDOM_INPUTS: usize = 100_000;

/// One (key, input, expected hash) line of the vector file.
struct Vector {
    line: usize,
    key: [u8; 40],
    input: Vec<u8>,
    hash: u32,
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".to_owned();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

fn vectors() -> Vec<Vector> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/toeplitz_vectors.txt");
    let text = std::fs::read_to_string(&path).expect("read toeplitz_vectors.txt");
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .map(|(i, l)| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "line {}: {l}", i + 1);
            let key = if f[0] == "ms" {
                RSS_DEFAULT_KEY
            } else {
                unhex(f[0]).try_into().expect("40-byte key")
            };
            Vector {
                line: i + 1,
                key,
                input: unhex(f[1]),
                hash: u32::from_str_radix(f[2], 16).expect("hex hash"),
            }
        })
        .collect()
}

#[test]
fn the_vector_file_agrees_with_rust() {
    let vectors = vectors();
    assert!(vectors.len() >= 50, "only {} vectors", vectors.len());
    for v in &vectors {
        assert_eq!(
            Toeplitz::new(v.key).hash(&v.input),
            v.hash,
            "toeplitz_vectors.txt line {}",
            v.line
        );
    }
}

#[test]
fn c_header_matches_rust_on_vectors_and_random_inputs() {
    let scratch = ScratchDir::new("toeplitz-c");
    let mut cases: Vec<([u8; 40], Vec<u8>)> =
        vectors().into_iter().map(|v| (v.key, v.input)).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(0x7e0_91172);
    for i in 0..RANDOM_INPUTS {
        // a fresh key every 100 inputs; Microsoft's for a tenth of them
        let key = if i % 10 == 0 {
            RSS_DEFAULT_KEY
        } else {
            let mut k = [0u8; 40];
            let mut seeded = ChaCha8Rng::seed_from_u64((i / 100) as u64);
            seeded.fill(&mut k);
            k
        };
        let len = rng.random_range(0..=44);
        let input: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        cases.push((key, input));
    }
    let text: String = cases
        .iter()
        .map(|(k, input)| format!("{} {}\n", hex(k), hex(input)))
        .collect();
    let input_path = scratch.0.join("input.txt");
    std::fs::write(&input_path, text).expect("write driver input");

    for compiler in
        host_compilers("the Toeplitz hash must be checked against bpf/include/toeplitz.h")
    {
        let hashes = driver_hashes(
            &compiler,
            "toeplitz_driver.c",
            &scratch,
            &input_path,
            "Toeplitz",
        );
        assert_eq!(
            hashes.len(),
            cases.len(),
            "{compiler}: driver output length"
        );
        for (i, ((key, input), c_hash)) in cases.iter().zip(&hashes).enumerate() {
            assert_eq!(
                *c_hash,
                Toeplitz::new(*key).hash(input),
                "{compiler}: C and Rust disagree on case {i}: key {} input {}",
                hex(key),
                hex(input)
            );
        }
    }
}
