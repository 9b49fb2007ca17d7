//! The compiled BPF objects, embedded at build time (build.rs runs clang on `bpf/*.bpf.c`).

/// The forwarder with a per-CPU connection table (`LRU_PERCPU_HASH`).
pub static FORWARDER: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_fwd.o"));

/// The forwarder with one shared connection table (`LRU_HASH` + `BPF_F_NO_COMMON_LRU`).
pub static FORWARDER_SHARED: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_fwd_shared.o"));

/// Baselines: `stator_pass` (XDP_PASS) and `stator_swap_tx` (MAC swap + XDP_TX).
pub static PASS: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_pass.o"));

/// The clock probe (`stator_clock_probe`), run before the forwarder is loaded (`clock.rs`).
pub static CLOCK: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_clock.o"));

/// The kernel-repeat benchmark wrapper (`stator_bench`).
pub static BENCH: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_bench.o"));

/// The backend-side decap program (`stator_decap`).
pub static DECAP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_decap.o"));

/// The end-to-end veth benchmark's generator, sink and plain-forwarding baseline.
pub static VETH_BENCH: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_veth.o"));

/// The AF_XDP plane's redirect program (`stator_xsk`) and FIB query program (`stator_fibq`).
pub static XSK: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_xsk.o"));

#[cfg(test)]
mod tests {
    use super::*;

    /// What `license_is_gpl_compatible()` (include/linux/license.h) accepts.
    const KERNEL_GPL_COMPATIBLE: [&str; 6] = [
        "GPL",
        "GPL v2",
        "GPL and additional rights",
        "Dual BSD/GPL",
        "Dual MIT/GPL",
        "Dual MPL/GPL",
    ];

    /// The sources' SPDX line, and the one license string naming its half the kernel knows.
    const SPDX: &str = "/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */";
    const LICENSE: &str = "GPL v2";

    #[test]
    fn every_object_declares_the_gpl_half_of_its_sources_license() {
        assert!(KERNEL_GPL_COMPATIBLE.contains(&LICENSE));
        for (name, object) in [
            ("stator_fwd", FORWARDER),
            ("stator_fwd_shared", FORWARDER_SHARED),
            ("stator_pass", PASS),
            ("stator_bench", BENCH),
            ("stator_clock", CLOCK),
            ("stator_decap", DECAP),
            ("stator_veth", VETH_BENCH),
            ("stator_xsk", XSK),
        ] {
            let obj = aya_obj::Object::parse(object).unwrap();
            assert_eq!(obj.license.to_str(), Ok(LICENSE), "{name}");
        }
        let bpf = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
        let mut sources = 0;
        for dir in [bpf.clone(), bpf.join("include")] {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.display().to_string();
                if !(name.ends_with(".c") || name.ends_with(".h")) {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                assert_eq!(text.lines().next(), Some(SPDX), "{name}");
                if name.ends_with(".bpf.c") {
                    sources += 1;
                    assert!(
                        text.contains("SEC(\"license\") = STATOR_BPF_LICENSE;"),
                        "{name} declares its license through license.h"
                    );
                }
            }
        }
        assert!(sources >= 6, "every program source was checked ({sources})");
        let header = std::fs::read_to_string(bpf.join("include/license.h")).unwrap();
        assert!(header.contains(&format!("#define STATOR_BPF_LICENSE \"{LICENSE}\"")));
    }
}
