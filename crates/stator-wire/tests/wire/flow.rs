//! `parse_flow` against an independent model (frames written byte by byte from a spec), and
//! against the views on the same bytes.

#[allow(unused_imports)]
use crate::common;

use crate::common::{exercise, frames};
use proptest::prelude::*;
use stator_wire::{Error, parse_flow};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn parse_flow_matches_the_model(spec in frames::frame_spec()) {
        let (frame, expected) = frames::build(&spec);
        prop_assert_eq!(parse_flow(&frame), Ok(expected));
        exercise::flow(&frame);
    }

    #[test]
    fn every_cut_before_the_ip_end_is_truncated(spec in frames::frame_spec(), cut in any::<usize>()) {
        let (frame, expected) = frames::build(&spec);
        let cut = cut % expected.l3_end;
        prop_assert_eq!(parse_flow(&frame[..cut]), Err(Error::Truncated));
    }

    #[test]
    fn the_views_agree_on_mutated_frames(
        spec in frames::frame_spec(),
        mutations in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let (mut frame, _) = frames::build(&spec);
        for (at, byte) in mutations {
            let len = frame.len();
            frame[at % len] = byte;
        }
        exercise::flow(&frame);
    }
}
