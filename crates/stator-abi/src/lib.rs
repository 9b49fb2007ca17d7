//! # stator-abi — the user-space mirror of `bpf/include/stator_abi.h`
//!
//! Layer: the bottom of the data-plane stack, beside `stator-wire`. Everything the BPF programs
//! and user space exchange through maps — keys, values, limits, flags, counter indices and drop
//! reasons — is defined once, in C, in `bpf/include/stator_abi.h`. This crate mirrors it:
//!
//! - [`generated`] is produced *from the header* by `gen/abi_gen.c` (`make abi`): every constant,
//!   every enum value with its metric label, every struct size and field offset. It is checked in
//!   (the build needs no C compiler) and the test `generated_is_fresh` fails if it is stale.
//! - The `#[repr(C)]` structs in the modules below (one per concern: codes, node, service, flow,
//!   frag, groups, afxdp, probe, decap, reuseport, trace) are the hand-written Rust shapes,
//!   re-exported at the crate root; each is asserted at compile time against the generated size
//!   and offsets, so a drift between C and Rust does not build.
//! - [`DropReason`] and [`Counter`] take their discriminants from the generated constants.
//!
//! Contract: pure data, no I/O, no `unsafe`. Byte-order conventions follow the header: fields
//! named `addr`, `port`, `src`, `dst`, `gue_port` hold network-order bytes (`[u8; N]` here, so
//! nobody has to remember which integers are swapped).
#![forbid(unsafe_code)]

#[rustfmt::skip]
pub mod generated;

pub use generated::*;

macro_rules! assert_layout {
    ($ty:ty, $size:expr, $( $field:ident => $off:expr ),* $(,)?) => {
        const _: () = assert!(size_of::<$ty>() == $size, concat!("size of ", stringify!($ty)));
        $( const _: () = assert!(offset_of!($ty, $field) == $off,
            concat!("offset of ", stringify!($ty), ".", stringify!($field))); )*
    };
}

mod afxdp;
mod codes;
mod decap;
mod flow;
mod frag;
mod groups;
mod node;
mod probe;
mod reuseport;
mod service;
mod trace;

pub use afxdp::{FibQueryRec, XskCfg};
pub use codes::{Counter, DropReason, Encap, Exported, Family};
pub use decap::{DecapAddr, DecapCfg, DecapCounter, DecapCounterKind, DecapPrefix};
pub use flow::{Ct4Bucket, Ct4Entry, CtEntry, Flood, FlowKey, Nh};
pub use frag::{FragEntry, FragKey, HoldHdr};
pub use groups::{AddrRec, Class, ClassKey, Peer, PrevRec, SfxKey, low_bits};
pub use node::{Beat, Ctl, NodeCfg};
pub use probe::{BenchFrame, Probe};
pub use reuseport::{RpCfg, RpCounter, RssCounter};
pub use service::{Real, Traffic, Vaddr, VaddrVip, Vip, VipKey, vtab_hash};
pub use trace::{TraceCause, TraceEvent, TraceKeys, TraceKind, TraceMark};

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// `vtab_hash` gives the home slots the C header computed.
    #[test]
    #[cfg(target_endian = "little")] // the vectors were computed on a little-endian host
    fn vtab_hash_agrees_with_the_header() {
        for (words, family, seed, home) in VTAB_HASH_VECTORS {
            let mut addr = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                addr[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            assert_eq!(
                vtab_hash(&addr, family, seed),
                home,
                "{words:x?} {family} {seed:#x}"
            );
            assert!(home < STATOR_VTAB_SLOTS);
        }
    }

    /// Regenerates `generated.rs` from the C header and fails if the checked-in copy differs.
    /// Needs a host C compiler (`cc`); fails loudly, never skips, when there is none.
    #[test]
    fn generated_is_fresh() {
        let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let include = crate_dir.join("../../bpf/include");
        let out = stator_testkit::scratch::unique_path("stator_abi_gen", "");
        let status = Command::new("cc")
            .args(["-Wall", "-Werror", "-I"])
            .arg(&include)
            .arg(crate_dir.join("gen/abi_gen.c"))
            .arg("-o")
            .arg(&out)
            .status()
            .expect("running `cc` (a host C compiler is needed to check the ABI mirror)");
        assert!(status.success(), "compiling gen/abi_gen.c failed");
        let fresh = Command::new(&out).output().expect("running abi_gen");
        let _ = std::fs::remove_file(&out);
        assert!(
            fresh.status.success(),
            "abi_gen failed: {}",
            String::from_utf8_lossy(&fresh.stderr)
        );
        let checked_in = std::fs::read_to_string(crate_dir.join("src/generated.rs")).unwrap();
        assert_eq!(
            String::from_utf8(fresh.stdout).unwrap(),
            checked_in,
            "crates/stator-abi/src/generated.rs is stale: run `make abi`"
        );
    }

    #[test]
    fn drop_reasons_round_trip_and_have_labels() {
        for r in DropReason::ALL {
            assert_eq!(DropReason::from_code(r.code()), Some(r));
            assert!(!r.label().is_empty());
        }
        assert_eq!(DropReason::from_code(0), None);
        assert_eq!(DropReason::ALL.len() + 1, STATOR_DROP_MAX as usize);
        assert_eq!(DropReason::NoBackend.label(), "no_backend");
    }

    #[test]
    fn counter_labels() {
        assert_eq!(Counter::CtHit.label(), "ct_hit");
        assert_eq!(Counter::SelfTest.label(), "self_test");
        assert_eq!(Counter::ScUnsupported as u32 + 1, STATOR_CNT_MAX);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index() as usize, i);
        }
    }

    #[test]
    fn decap_counters_are_outcomes_then_reasons() {
        for (i, c) in DecapCounter::ALL.iter().enumerate() {
            assert_eq!(c.index() as usize, i);
            assert_eq!(DecapCounter::from_label(c.label()), Some(*c));
        }
        assert!(DecapCounter::Rejected.is_outcome());
        for (i, c) in RpCounter::ALL.iter().enumerate() {
            assert_eq!(c.index() as usize, i);
            assert_eq!(RpCounter::from_label(c.label()), Some(*c));
        }
        assert!(RpCounter::NotConfigured.is_outcome() && !RpCounter::CpuLocal.is_outcome());
        for (i, c) in RssCounter::ALL.iter().enumerate() {
            assert_eq!((c.index() as usize, RSS_COUNTER_NAMES[i]), (i, c.label()));
        }
        assert!(!DecapCounter::BadOuter.is_outcome() && DecapCounter::BadOuter.is_reason());
        assert!(DecapCounter::ScForwarded.is_outcome() && DecapCounter::ScMtu.is_reason());
        assert!(!DecapCounter::ScLocal.is_outcome() && !DecapCounter::ScLocal.is_reason());
        assert!(!DecapCounter::ScMalformed.is_reason() && DecapCounter::Adjust.is_reason());
        assert_eq!(DecapCounter::NotOurs.label(), "not_ours");
    }

    #[test]
    fn probe_magic_spells_statorp1_and_round_trips() {
        assert_eq!(&STATOR_PROBE_MAGIC.to_le_bytes(), b"STATORP1");
        let p = Probe {
            magic: STATOR_PROBE_MAGIC,
            nonce: 7,
            answer: !7,
            addr: [1; 16],
            family: STATOR_FAMILY_V6 as u8,
            active_gen: 1,
            result: 3,
            vaddr_flags: 5,
            config_generation: 42,
            ..Probe::default()
        };
        assert_eq!(Probe::from_bytes(&p.to_bytes()), Some(p));
    }
}
