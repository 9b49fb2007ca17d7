//! Compiles `bpf/stator_reuseport.bpf.c` with clang for the BPF target into
//! `$OUT_DIR/stator_reuseport.o` (the only program this crate carries; stator-xdp builds the rest).
use std::path::PathBuf;
use std::process::Command;

const PROGRAM: &str = "stator_reuseport";

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let bpf_dir = manifest.join("../../bpf").canonicalize()?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let src = bpf_dir.join(format!("{PROGRAM}.bpf.c"));

    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-changed={}", src.display());
    for entry in std::fs::read_dir(bpf_dir.join("include"))? {
        println!("cargo:rerun-if-changed={}", entry?.path().display());
    }

    let mut cmd = Command::new(&clang);
    cmd.args([
        "-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-mcpu=v3",
    ])
    .arg("-I")
    .arg(bpf_dir.join("include"));
    if let Some(inc) = multiarch_include() {
        cmd.arg("-I").arg(inc);
    }
    cmd.arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(out_dir.join(format!("{PROGRAM}.o")));
    let output = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("running {clang} (install clang: `make deps`): {e}"))?;
    if !output.status.success() {
        anyhow::bail!(
            "clang failed on {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Debian keeps `asm/types.h` under the multiarch directory, which `-target bpf` does not search.
fn multiarch_include() -> Option<PathBuf> {
    let out = Command::new("gcc").arg("-print-multiarch").output().ok()?;
    let triple = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let dir = PathBuf::from("/usr/include").join(&triple);
    dir.is_dir().then_some(dir).or_else(|| {
        let d = PathBuf::from("/usr/include/x86_64-linux-gnu");
        d.is_dir().then_some(d)
    })
}
