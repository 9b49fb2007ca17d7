//! Clear errors: a verifier rejection carries the verifier's own words. Needs root and clang
//! (the build needs clang anyway).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use stator_sys::bpf_build::BpfCompiler;

use stator_xdp::XdpError;

/// An XDP program that reads packet memory without a bounds check.
const BAD: &str = r#"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp")
int stator_bad(struct xdp_md *ctx)
{
	return *(volatile unsigned char *)(long)ctx->data;
}
char _license[] SEC("license") = "GPL";
"#;

#[test]
fn a_verifier_rejection_shows_the_log_tail() {
    common::require_root();
    let dir = stator_testkit::scratch::unique_path("stator-bad", "");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("bad.bpf.c");
    let obj = dir.join("bad.o");
    std::fs::write(&src, BAD).unwrap();
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    BpfCompiler::new(&manifest.join("../../bpf/include"))
        .allow_warnings()
        .compile(&src, &obj, &[])
        .expect("clang (needed to build Stator) runs");
    let bytes = std::fs::read(&obj).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let err = stator_xdp::verify(&bytes, "stator_bad").unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    match &err {
        XdpError::VerifierRejected {
            program, log_tail, ..
        } => {
            assert_eq!(program, "stator_bad");
            assert!(log_tail.contains("invalid access to packet"), "{log_tail}");
        }
        other => panic!("expected a verifier rejection, got {other:?}"),
    }
    assert!(
        msg.contains("verifier rejected program `stator_bad`"),
        "{msg}"
    );

    // and our own programs pass the verifier
    stator_xdp::verify(stator_xdp::objects::BENCH, "stator_bench").unwrap();
}
