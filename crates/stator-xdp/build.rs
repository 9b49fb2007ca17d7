//! Compiles every `bpf/*.bpf.c` with clang for the BPF target into `$OUT_DIR/<name>.o`, plus the
//! variants in [`VARIANTS`] (the same source with extra defines), with stator-sys's
//! `BpfCompiler` (the flags every object is built with).
use std::path::PathBuf;

use stator_sys::bpf_build::BpfCompiler;

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
    let clang = BpfCompiler::new(&bpf_dir.join("include"));
    clang.rerun_if_changed()?;
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
        clang.compile(&path, &out_dir.join(format!("{stem}.o")), &[])?;
        for (_, out_stem, defines) in VARIANTS.iter().filter(|(src, _, _)| *src == stem) {
            clang.compile(&path, &out_dir.join(format!("{out_stem}.o")), defines)?;
        }
    }
    Ok(())
}
