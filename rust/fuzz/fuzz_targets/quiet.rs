//! Quiet composed streams (the vLLM plugin's `min_tokens`): literal stops with include flags,
//! quiet over the chunks before a drawn one. The output, the stop and the text held after every
//! chunk equal a naive reading: no stop completing while quiet fires, the winner among those
//! completing after it, and as holdback the longest suffix that is a proper prefix of a
//! flag-off stop.
#![no_main]

mod common;

use common::{bounds, stops, to_text, Input};
use libfuzzer_sys::fuzz_target;
use stopstream::{ByteOut, MatchStream, Matcher, Status, StopKind, StopSpec};

/// The cut and the stop that fires in `text` when no stop ending at or before `floor` does.
fn naive(stops: &[Vec<u8>], include: &[bool], text: &[u8], floor: usize) -> (usize, Option<usize>) {
    for end in 1..=text.len() {
        if end <= floor {
            continue;
        }
        // The longest stop ending here, the first listed among equal ones.
        let mut best: Option<usize> = None;
        for (i, s) in stops.iter().enumerate() {
            if text[..end].ends_with(s) && best.is_none_or(|b| s.len() > stops[b].len()) {
                best = Some(i);
            }
        }
        if let Some(i) = best {
            return (if include[i] { end } else { end - stops[i].len() }, Some(i));
        }
    }
    (text.len(), None)
}

fuzz_target!(|input: Input| {
    let stops = stops(&input);
    if stops.is_empty() {
        return;
    }
    let text = to_text(&input.text, 256);
    let include: Vec<bool> = (0..stops.len())
        .map(|i| input.cuts.get(i).map_or(input.include_stop, |&c| c & 1 == 1))
        .collect();
    let specs: Vec<StopSpec<'_>> = stops
        .iter()
        .zip(&include)
        .map(|(s, &include)| StopSpec { kind: StopKind::Literal(s), include })
        .collect();
    let m = Matcher::new(&specs, None, &[]).unwrap();
    let bounds = bounds(&input.cuts, text.len(), Some(&text));
    // The chunk from which stops fire (past the last one: never).
    let loud = input.cuts.last().map_or(bounds.len(), |&c| c as usize % (bounds.len() + 1));
    let mut st = MatchStream::new(&m);
    st.quiet(&m, true).unwrap();
    let mut floor = usize::MAX;
    let mut out = Vec::new();
    for (i, w) in bounds.windows(2).enumerate() {
        if i == loud {
            st.quiet(&m, false).unwrap();
            floor = w[0];
        }
        let chunk = &text[w[0]..w[1]];
        let mut buf = Vec::new();
        match st.feed(&m, chunk, &mut buf).unwrap() {
            ByteOut::Input => out.extend_from_slice(chunk),
            ByteOut::Buffer => out.extend_from_slice(&buf),
        }
        if st.status() == Status::Open {
            let seen = &text[..w[1]];
            let keep = (0..=seen.len())
                .rev()
                .find(|&k| {
                    stops.iter().zip(&include).any(|(s, &inc)| {
                        !inc && k < s.len() && s.starts_with(&seen[seen.len() - k..])
                    })
                })
                .unwrap_or(0);
            assert_eq!(out.len() + keep, seen.len(), "holdback is not minimal");
            assert_eq!(st.held(), &seen[seen.len() - keep..]);
        }
    }
    let mut buf = Vec::new();
    st.finish(&m, &mut buf);
    out.extend_from_slice(&buf);
    let (cut, stop) = naive(&stops, &include, &text, floor);
    assert_eq!(&out[..], &text[..cut]);
    match st.status() {
        Status::Stopped(p) => assert_eq!(Some(p), stop),
        _ => assert_eq!(stop, None),
    }
});
