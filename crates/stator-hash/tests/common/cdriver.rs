//! The C drivers of `tests/c` (each reads one input a line and prints one hash a line in hex):
//! where the sources and `bpf/include` are, a scratch directory, the host C compilers to build
//! them with, and building and running one. A missing compiler fails the test with a message:
//! it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The repository's `bpf/include`.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bpf/include")
}

/// A source file of `tests/c`.
pub fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(name)
}

/// A scratch directory for this test binary, removed when dropped.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(label: &str) -> Self {
        let dir = stator_testkit::scratch::unique_path(&format!("stator-{label}"), "");
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn has_compiler(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `$CC` (or `cc`), plus `clang` and `gcc` when installed and different. Panics if there is
/// none, saying `why` one is needed.
pub fn host_compilers(why: &str) -> Vec<String> {
    let primary = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let mut compilers = Vec::new();
    for candidate in [primary.as_str(), "clang", "gcc"] {
        if !compilers.iter().any(|c: &String| c == candidate) && has_compiler(candidate) {
            compilers.push(candidate.to_owned());
        }
    }
    assert!(
        !compilers.is_empty(),
        "no C compiler found (tried $CC={primary:?}, clang, gcc): {why}; install one with \
         `make deps`"
    );
    compilers
}

/// Runs `command`, panicking with `what` and its output unless it succeeds; its stdout.
pub fn run(command: &mut Command, what: &str) -> Vec<u8> {
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

/// Builds `tests/c/<source>` with `compiler` (C11, -O2, every warning an error) into `scratch`
/// and runs it on the file `input`: the hashes it prints. `what` names the driver in messages.
pub fn driver_hashes(
    compiler: &str,
    source: &str,
    scratch: &ScratchDir,
    input: &Path,
    what: &str,
) -> Vec<u32> {
    let driver = scratch.0.join(format!("driver-{compiler}"));
    run(
        Command::new(compiler)
            .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(include_dir())
            .arg(c_source(source))
            .arg("-o")
            .arg(&driver),
        &format!("compiling the {what} driver with {compiler}"),
    );
    let stdin = std::fs::File::open(input).expect("open driver input");
    let output = run(
        Command::new(&driver).stdin(stdin),
        &format!("the {what} driver built with {compiler}"),
    );
    let output = String::from_utf8(output).expect("driver prints ASCII");
    output
        .lines()
        .map(|l| u32::from_str_radix(l, 16).expect("driver prints hex"))
        .collect()
}
