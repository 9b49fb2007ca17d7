//! Compiling Stator's BPF C for the BPF target, the one way every object is built: clang
//! (`$CLANG`, else `clang`) with `-O2 -g -target bpf -mcpu=v3 -Wall -Werror`, `bpf/include`
//! and, where Debian keeps `asm/types.h`, the multiarch include directory. Used by the build
//! scripts that embed objects (stator-xdp, stator-steer) and by tests that build a probe of
//! their own; no system call of its own, only the compiler run as a process.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A clang invocation for the BPF target, with the flags every Stator object is built with.
#[derive(Debug, Clone)]
pub struct BpfCompiler {
    clang: String,
    includes: Vec<PathBuf>,
    warnings_are_errors: bool,
}

impl BpfCompiler {
    /// The compiler for sources that include `bpf_include` (the repository's `bpf/include`).
    pub fn new(bpf_include: &Path) -> Self {
        let mut includes = vec![bpf_include.to_path_buf()];
        includes.extend(multiarch_include());
        Self {
            clang: std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string()),
            includes,
            warnings_are_errors: true,
        }
    }

    /// Lets warnings through (`-Wall -Werror` off): for a test that compiles a program meant
    /// to be wrong.
    pub fn allow_warnings(mut self) -> Self {
        self.warnings_are_errors = false;
        self
    }

    /// The `cargo:` lines a build script prints so that it reruns when the compiler or a
    /// header changes (sources are the caller's to name).
    pub fn rerun_if_changed(&self) -> io::Result<()> {
        println!("cargo:rerun-if-env-changed=CLANG");
        let headers = &self.includes[0];
        println!("cargo:rerun-if-changed={}", headers.display());
        for entry in std::fs::read_dir(headers)? {
            println!("cargo:rerun-if-changed={}", entry?.path().display());
        }
        Ok(())
    }

    /// Compiles `src` into the object `out`, with `-D` for each of `defines`. A compiler that
    /// cannot run, or fails, is an error whose message says which and why (clang's own
    /// words).
    pub fn compile(&self, src: &Path, out: &Path, defines: &[&str]) -> io::Result<()> {
        let mut cmd = Command::new(&self.clang);
        cmd.args(["-O2", "-g", "-target", "bpf", "-mcpu=v3"]);
        if self.warnings_are_errors {
            cmd.args(["-Wall", "-Werror"]);
        }
        for inc in &self.includes {
            cmd.arg("-I").arg(inc);
        }
        for d in defines {
            cmd.arg(format!("-D{d}"));
        }
        cmd.arg("-c").arg(src).arg("-o").arg(out);
        let output = cmd.output().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("running {} (install clang: `make deps`): {e}", self.clang),
            )
        })?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "clang failed on {}:\n{}",
                src.display(),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(())
    }
}

/// Debian keeps `asm/types.h` under the multiarch directory, which `-target bpf` does not
/// search.
fn multiarch_include() -> Option<PathBuf> {
    let out = Command::new("gcc").arg("-print-multiarch").output().ok()?;
    let triple = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let dir = PathBuf::from("/usr/include").join(&triple);
    dir.is_dir().then_some(dir).or_else(|| {
        let d = PathBuf::from("/usr/include/x86_64-linux-gnu");
        d.is_dir().then_some(d)
    })
}
