//! "Any bytes → no panic" for every parser, and the oracles of `common::exercise`, on random
//! bytes and on realistic frames with random damage (so the parsers are reached deep, not only
//! rejected at the first length check).

#[allow(unused_imports)]
use crate::common;

use crate::common::{exercise, frames};
use proptest::collection::vec;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn any_bytes(data in vec(any::<u8>(), 0..160)) {
        exercise::all(&data);
    }

    #[test]
    fn damaged_frames_at_every_layer(
        spec in frames::frame_spec(),
        mutations in vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        let (mut frame, flow) = frames::build(&spec);
        for (at, byte) in mutations {
            let len = frame.len();
            frame[at % len] = byte;
        }
        frame.truncate(cut % (frame.len() + 1));
        exercise::all(&frame);
        // Feed every layer to every parser: the IP packet to the IP parsers, the L4 bytes to
        // the transport and tunnel parsers.
        exercise::all(frame.get(flow.l3_offset..).unwrap_or(&[]));
        exercise::all(frame.get(flow.l4_offset..).unwrap_or(&[]));
    }
}
