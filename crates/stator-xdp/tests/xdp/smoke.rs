//! Loads the baseline programs and runs them through BPF_PROG_TEST_RUN. Needs root (CAP_BPF).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
use aya::{Ebpf, programs::Xdp};
use stator_xdp::testrun::{TestRunOpts, TestRunOutput, run_xdp};

/// A 64-byte frame from 02:02:02:02:02:02 to 01:01:01:01:01:01, IPv4 ethertype, counting bytes.
fn frame() -> Vec<u8> {
    let mut frame = vec![0u8; 64];
    frame[..6].copy_from_slice(&[1, 1, 1, 1, 1, 1]);
    frame[6..12].copy_from_slice(&[2, 2, 2, 2, 2, 2]);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14..]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    frame
}

/// Runs `program` of `stator_pass.o` once on `frame`.
fn run_pass_program(program: &str, frame: &[u8]) -> TestRunOutput {
    assert!(
        stator_xdp::is_root(),
        "this test needs root (CAP_BPF, CAP_NET_ADMIN) to load BPF programs; run as root"
    );
    let mut bpf = Ebpf::load(stator_xdp::objects::PASS).expect("load stator_pass.o");
    let prog: &mut Xdp = bpf
        .program_mut(program)
        .unwrap_or_else(|| panic!("{program} in stator_pass.o"))
        .try_into()
        .unwrap();
    prog.load().unwrap();
    run_xdp(prog.fd().unwrap(), frame, TestRunOpts::default()).unwrap()
}

#[test]
fn baselines_run_under_test_run() {
    let out = run_pass_program("stator_swap_tx", &frame());
    assert_eq!(out.action, 3, "XDP_TX");
    assert_eq!(&out.data[..12], &[2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1]);
}

#[test]
fn grow_baseline_prepends_an_ethernet_header_in_24_bytes_of_room() {
    let frame = frame();
    let out = run_pass_program("stator_grow_tx", &frame);
    assert_eq!(out.action, 3, "XDP_TX");
    assert_eq!(out.data.len(), frame.len() + 24);
    assert_eq!(
        &out.data[..14],
        &[2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0x08, 0x00]
    );
    assert_eq!(
        &out.data[24..],
        &frame[..],
        "the original frame follows the room"
    );
}
