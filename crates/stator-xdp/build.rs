//! Compiles every `bpf/*.bpf.c` with clang for the BPF target into `$OUT_DIR/<name>.o`, plus the
//! variants in [`VARIANTS`] (the same source with extra defines).
use std::path::{Path, PathBuf};
use std::process::Command;

/// Programs other crates build and carry: `stator_reuseport` belongs to `crates/stator-steer`.
const BUILT_ELSEWHERE: &[&str] = &["stator_reuseport"];

/// (source stem, output stem, defines): extra builds of a program.
const VARIANTS: &[(&str, &str, &[&str])] = &[
    // one connection table shared by all CPUs (LRU_HASH with per-CPU LRU lists)
    ("stator_fwd", "stator_fwd_shared", &["STATOR_CT_SHARED"]),
];

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let bpf_dir = manifest.join("../../bpf").canonicalize()?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let arch_include = multiarch_include();

    println!("cargo:rerun-if-env-changed=CLANG");
    println!(
        "cargo:rerun-if-changed={}",
        bpf_dir.join("include").display()
    );
    for entry in std::fs::read_dir(bpf_dir.join("include"))? {
        println!("cargo:rerun-if-changed={}", entry?.path().display());
    }
    for entry in std::fs::read_dir(&bpf_dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".bpf.c") else {
            continue;
        };
        if BUILT_ELSEWHERE.contains(&stem) {
            continue;
        }
        println!("cargo:rerun-if-changed={}", path.display());
        compile(
            &clang,
            &bpf_dir,
            arch_include.as_deref(),
            &path,
            &out_dir.join(format!("{stem}.o")),
            &[],
        )?;
        for (_, out_stem, defines) in VARIANTS.iter().filter(|(src, _, _)| *src == stem) {
            compile(
                &clang,
                &bpf_dir,
                arch_include.as_deref(),
                &path,
                &out_dir.join(format!("{out_stem}.o")),
                defines,
            )?;
        }
    }
    Ok(())
}

fn compile(
    clang: &str,
    bpf_dir: &Path,
    arch_include: Option<&Path>,
    src: &Path,
    out: &Path,
    defines: &[&str],
) -> anyhow::Result<()> {
    let mut cmd = Command::new(clang);
    cmd.args([
        "-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-mcpu=v3",
    ])
    .arg("-I")
    .arg(bpf_dir.join("include"));
    if let Some(inc) = arch_include {
        cmd.arg("-I").arg(inc);
    }
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    cmd.arg("-c").arg(src).arg("-o").arg(out);
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
