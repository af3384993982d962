//! Decoded-text streams: chunk invariance against one-shot `truncate`, exactly minimal
//! holdback after every chunk, holdback bounded by the longest stop, no panic.
#![no_main]

mod common;

use common::{bounds, naive_holdback, stops, to_text, Input};
use libfuzzer_sys::fuzz_target;
use stopstream::{Status, LiteralStops, TextStream};

fuzz_target!(|input: Input| {
    let stops = stops(&input);
    let text = to_text(&input.text, 256);
    // Odd inputs also exercise the sparse layout of large stop lists.
    let set = if input.cuts.len() % 2 == 0 {
        LiteralStops::new(&stops).unwrap()
    } else {
        LiteralStops::with_dense_budget(&stops, 1 + input.cuts.len() * 16).unwrap()
    };
    let (cut, stop) = set.truncate(&text, input.include_stop);
    let mut st = TextStream::new(input.include_stop);
    let mut out = Vec::new();
    let bounds = bounds(&input.cuts, text.len(), Some(&text));
    for w in bounds.windows(2) {
        let chunk = &text[w[0]..w[1]];
        let held = st.held(&set).to_vec();
        let e = st.feed(&set, chunk).unwrap();
        out.extend_from_slice(&held[..e.from_held]);
        out.extend_from_slice(&chunk[..e.from_input]);
        let held = st.held(&set);
        assert!(held.len() < set.max_len().max(1));
        if st.status() == Status::Open {
            let seen = &text[..w[1]];
            let keep = if input.include_stop { 0 } else { naive_holdback(&stops, seen) };
            assert_eq!(out.len() + keep, seen.len(), "holdback is not minimal");
            assert_eq!(held, &seen[seen.len() - keep..]);
        }
    }
    out.extend_from_slice(st.finish(&set));
    assert_eq!(&out[..], &text[..cut]);
    match st.status() {
        Status::Stopped(p) => assert_eq!(Some(p), stop),
        _ => assert_eq!(stop, None),
    }
    assert!(std::str::from_utf8(&out).is_ok());
});
