//! The pattern side (contract §6): regex stops built from regex tokens (or from raw bytes, to
//! reach the parser's error paths), per-stop include flags and skip regions. Checks: compiling
//! never panics (an invalid pattern is an error naming its position); streaming never panics;
//! after every chunk, what was emitted plus what is held is exactly the input; the final output,
//! stop and stop text do not depend on the split (one chunk vs the fuzzed chunks vs one-shot
//! `truncate`); raw bytes in replace mode give what their lossy decoding gives.
#![no_main]

mod common;

use common::{bounds, to_text};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use stopstream::{ByteOut, ByteStream, MatchStream, Matcher, Status, StopKind, StopSpec};

/// Regex tokens patterns are assembled from: characters of the text alphabet, classes,
/// repetition, alternation, groups, the assertions and the inline flags.
const TOKENS: [&str; 30] = [
    "a", "b", "<", "/", ">", "é", "中", "😀", ".", "[ab]", "[^a]", r"\w", r"\W", r"\d", r"\s",
    "+", "*", "?", "{1,3}", "|", "(", ")", "(?:", r"\b", r"\B", "^", "$", "(?m)", "(?i)",
    r"(?-u:\b)",
];

#[derive(Arbitrary, Debug)]
struct Stop {
    tokens: Vec<u8>,
    raw: bool,
    regex: bool,
    include: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    stops: Vec<Stop>,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
    text: Vec<u8>,
    cuts: Vec<u16>,
}

fn run(m: &Matcher, text: &[u8], bounds: &[usize]) -> (Vec<u8>, Status, Vec<u8>) {
    let mut st = MatchStream::new(m);
    let mut out = Vec::new();
    for w in bounds.windows(2) {
        let chunk = &text[w[0]..w[1]];
        let open = st.status() == Status::Open;
        let before = out.len();
        if st.feed(m, chunk, &mut out).unwrap() == ByteOut::Input {
            out.extend_from_slice(chunk);
        }
        if open && st.status() == Status::Open {
            let mut seen = out.clone();
            seen.extend_from_slice(st.held());
            assert_eq!(&seen[..], &text[..w[1]], "emitted + held is not the input");
        }
        assert!(out.len() >= before);
    }
    st.finish(m, &mut out);
    (out, st.status(), st.stop_sequence(m).to_vec())
}

fuzz_target!(|input: Input| {
    let patterns: Vec<String> = input
        .stops
        .iter()
        .take(6)
        .map(|s| {
            if s.raw {
                String::from_utf8_lossy(&s.tokens).into_owned()
            } else {
                s.tokens.iter().take(12).map(|&t| TOKENS[t as usize % TOKENS.len()]).collect()
            }
        })
        .collect();
    let literals: Vec<Vec<u8>> = input.stops.iter().take(6).map(|s| to_text(&s.tokens, 6)).collect();
    let specs: Vec<StopSpec<'_>> = input
        .stops
        .iter()
        .take(6)
        .enumerate()
        .filter(|(i, s)| s.regex || !literals[*i].is_empty())
        .map(|(i, s)| StopSpec {
            kind: if s.regex { StopKind::Regex(&patterns[i], None) } else { StopKind::Literal(&literals[i]) },
            include: s.include,
        })
        .collect();
    let until = input.until.as_ref().map(|u| to_text(u, 3)).filter(|u| !u.is_empty());
    let skip_owned: Vec<(Vec<u8>, Vec<u8>)> = input
        .skip
        .iter()
        .take(3)
        .map(|(o, c)| (to_text(o, 3), to_text(c, 3)))
        .filter(|(o, c)| !o.is_empty() && !c.is_empty())
        .collect();
    let skip: Vec<(&[u8], &[u8])> = skip_owned.iter().map(|(o, c)| (&o[..], &c[..])).collect();
    let m = match Matcher::new(&specs, until.as_deref(), &skip) {
        Ok(m) => m,
        Err(e) => {
            assert!(e.invalid_pattern_index().is_some_and(|i| i < specs.len()), "{e}");
            return;
        }
    };
    let text = to_text(&input.text, 64);
    let split = bounds(&input.cuts, text.len(), Some(&text));
    let whole = run(&m, &text, &[0, text.len()]);
    let chunked = run(&m, &text, &split);
    assert_eq!(whole, chunked, "the split changed the result");
    let (n, stop) = m.truncate(&text);
    assert_eq!(&text[..n], &whole.0[..]);
    assert_eq!(stop.map(|s| s.1).unwrap_or_default(), whole.2);

    // Raw bytes (the text with some bytes dropped) in replace mode match their lossy decoding.
    let raw: Vec<u8> = text.iter().enumerate().filter(|(i, _)| i % 7 != 3).map(|(_, &b)| b).collect();
    let decoded = String::from_utf8_lossy(&raw).into_owned();
    let want = run(&m, decoded.as_bytes(), &[0, decoded.len()]);
    let mut bs = ByteStream::over(MatchStream::new(&m), true);
    let mut out = Vec::new();
    for w in bounds(&input.cuts, raw.len(), None).windows(2) {
        if bs.feed(&m, &raw[w[0]..w[1]], &mut out).unwrap() == ByteOut::Input {
            out.extend_from_slice(&raw[w[0]..w[1]]);
        }
    }
    bs.finish(&m, &mut out).unwrap();
    assert_eq!(out, want.0);
});
