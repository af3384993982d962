//! Raw byte streams split anywhere, both error modes: chunk invariance against one-shot
//! `truncate` of the decoded text, every emitted piece valid UTF-8, holdback at most the
//! longest stop minus one byte plus an incomplete character, a failing call consumes nothing,
//! no panic.
#![no_main]

mod common;

use common::{bounds, stops, Input};
use libfuzzer_sys::fuzz_target;
use stopstream::{ByteOut, ByteStream, Status, LiteralStops};

fuzz_target!(|input: Input| {
    let stops = stops(&input);
    let raw: Vec<u8> = input.text.iter().take(256).copied().collect();
    // Odd inputs also exercise the sparse layout of large stop lists.
    let set = if input.cuts.len() % 2 == 0 {
        LiteralStops::new(&stops).unwrap()
    } else {
        LiteralStops::with_dense_budget(&stops, 1 + input.cuts.len() * 16).unwrap()
    };
    // What the whole input decodes to (lossy = maximal subparts, as CPython), and in strict
    // mode how much of it is valid.
    let decoded = String::from_utf8_lossy(&raw).into_owned();
    let valid = std::str::from_utf8(&raw).map_or_else(|e| e.valid_up_to(), |_| raw.len());
    let mut st = ByteStream::new(input.include_stop, input.replace);
    let mut out = Vec::new();
    let mut failed = false;
    for w in bounds(&input.cuts, raw.len(), None).windows(2) {
        let chunk = &raw[w[0]..w[1]];
        let before = st;
        let mut piece = Vec::new();
        match st.feed(&set, chunk, &mut piece) {
            Ok(ByteOut::Input) => piece = chunk.to_vec(),
            Ok(ByteOut::Buffer) => {}
            Err(e) => {
                assert!(!input.replace, "replace mode never fails");
                assert!(e.decode_error().is_some());
                assert_eq!(st, before, "a failing call must consume nothing");
                assert!(piece.is_empty());
                failed = true;
                break;
            }
        }
        assert!(std::str::from_utf8(&piece).is_ok(), "emitted a partial character");
        out.extend_from_slice(&piece);
        assert!(st.held(&set).len() < set.max_len().max(1));
        assert!(st.tail().len() <= 3);
    }
    if input.replace {
        st.finish(&set, &mut out).unwrap();
        let (cut, _) = set.truncate(decoded.as_bytes(), input.include_stop);
        assert_eq!(&out[..], &decoded.as_bytes()[..cut]);
        return;
    }
    // Strict: a stop inside the valid prefix wins over any later error.
    let (cut, stop) = set.truncate(&raw[..valid], input.include_stop);
    if failed {
        assert_eq!(stop, None, "raised although a stop completed before the error");
        assert!(valid < raw.len());
        return;
    }
    let finished = st.finish(&set, &mut out);
    if stop.is_some() {
        assert!(matches!(st.status(), Status::Stopped(_)));
        assert_eq!(&out[..], &raw[..cut]);
    } else if valid == raw.len() {
        finished.unwrap();
        assert_eq!(&out[..], &raw[..cut]);
    } else {
        // Only an incomplete character at the very end can get this far; finish rejects it.
        assert!(finished.is_err());
    }
});
