//! Property tests of the SSE decoder and encoder: any data written with `frame` decodes back to
//! itself (line endings normalised to `\n`) however the bytes are split, and any bytes at all
//! decode without a panic, within the bound. Seeded: `PROPTEST_RNG_SEED` overrides.
#![allow(clippy::unwrap_used)]

use gateway_wire::sse::{Decoder, Event, KEEP_ALIVE, TooLarge, frame};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, contextualize_config};

fn config(cases: u32) -> Config {
    contextualize_config(Config {
        cases,
        rng_seed: RngSeed::Fixed(0x5_5e),
        failure_persistence: None,
        ..Config::default()
    })
}

fn feed_split(bytes: &[u8], cuts: &[usize], limit: usize) -> (Vec<Event>, Result<(), TooLarge>) {
    let mut decoder = Decoder::new(limit);
    let mut out = Vec::new();
    let mut start = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.push(bytes.len());
    for end in points {
        if end < start {
            continue;
        }
        if let Err(e) = decoder.feed(&bytes[start..end], &mut out) {
            return (out, Err(e));
        }
        start = end;
    }
    (out, Ok(()))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn frames_decode_back_to_their_data_however_split(
        datas in proptest::collection::vec(".{0,40}", 1..5),
        event in proptest::option::of("[a-z.]{1,12}"),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut wire = Vec::new();
        for d in &datas {
            wire.extend_from_slice(&frame(Some("e_1"), event.as_deref(), d));
            wire.extend_from_slice(KEEP_ALIVE);
        }
        let (got, fed) = feed_split(&wire, &cuts, 1 << 16);
        prop_assert!(fed.is_ok());
        let want: Vec<Event> = datas
            .iter()
            .map(|d| Event {
                event: event.clone().unwrap_or_else(|| "message".into()),
                data: d.replace("\r\n", "\n").replace('\r', "\n"),
            })
            .collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn any_bytes_decode_the_same_however_split_and_within_the_bound(
        bytes in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '), any::<u8>()], 0..300),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        limit in 1usize..200,
    ) {
        let (whole, whole_fed) = feed_split(&bytes, &[], limit);
        let (split, split_fed) = feed_split(&bytes, &cuts, limit);
        for e in &split {
            prop_assert!(e.data.len() <= 3 * limit + 3, "an event beyond the bound: {}", e.data.len());
        }
        if whole_fed.is_ok() && split_fed.is_ok() {
            prop_assert_eq!(whole, split);
        }
    }
}
