//! Compiles `bpf/stator_reuseport.bpf.c` and `bpf/stator_rss.bpf.c` with clang for the BPF
//! target into `$OUT_DIR/<name>.o` (the programs this crate carries; stator-xdp builds the
//! rest), with stator-sys's `BpfCompiler` (the flags every object is built with).
use std::path::PathBuf;

use stator_sys::bpf_build::BpfCompiler;

const PROGRAMS: [&str; 2] = ["stator_reuseport", "stator_rss"];

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let bpf_dir = manifest.join("../../bpf").canonicalize()?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let clang = BpfCompiler::new(&bpf_dir.join("include"));
    clang.rerun_if_changed()?;
    for program in PROGRAMS {
        let src = bpf_dir.join(format!("{program}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        clang.compile(&src, &out_dir.join(format!("{program}.o")), &[])?;
    }
    Ok(())
}
