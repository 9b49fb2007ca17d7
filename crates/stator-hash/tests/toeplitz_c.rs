//! The C Toeplitz hash (`bpf/include/toeplitz.h`) against the Rust one, bit for bit.
//!
//! The test compiles `tests/c/toeplitz_driver.c` with the host C compiler(s), feeds it the shared
//! vectors (`testdata/toeplitz_vectors.txt`) and 100,000 seeded random (key, input) pairs of 0 to
//! 44 bytes, and compares every hash with [`stator_hash::Toeplitz`]. The driver also checks each
//! hash against a literal transcription of the definition. The BPF half — the same header
//! compiled for the BPF target, verified and run by the kernel — is
//! `crates/stator-steer/tests/steer_toeplitz_bpf.rs` (it needs root). A missing compiler fails
//! the test with a message: it never skips silently.
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stator_hash::{RSS_DEFAULT_KEY, Toeplitz};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// `$CC` (or `cc`), plus `clang` and `gcc` when installed and different. Panics if there is none.
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
        "no C compiler found (tried $CC={primary:?}, clang, gcc): the Toeplitz hash must be \
         checked against bpf/include/toeplitz.h; install one with `make deps`"
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
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bpf/include");

    for compiler in host_compilers() {
        let driver = scratch.0.join(format!("driver-{compiler}"));
        run(
            Command::new(&compiler)
                .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
                .arg("-I")
                .arg(&include)
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/toeplitz_driver.c"))
                .arg("-o")
                .arg(&driver),
            &format!("compiling the Toeplitz driver with {compiler}"),
        );
        let stdin = std::fs::File::open(&input_path).expect("open driver input");
        let output = run(
            Command::new(&driver).stdin(stdin),
            &format!("the Toeplitz driver built with {compiler}"),
        );
        let output = String::from_utf8(output).expect("driver prints ASCII");
        let hashes: Vec<u32> = output
            .lines()
            .map(|l| u32::from_str_radix(l, 16).expect("driver prints hex"))
            .collect();
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
