//! Token ids (contract §7) over every stop kind (§6): small vocabularies (a fixed base of whole
//! characters, parts of characters, invalid bytes, empty and special tokens and a hole, plus
//! fuzzed tokens), literal and regex stops with their own include flags, skip regions and
//! `skip_until`, stop token ids, both error modes, ids split into random feeds. Checks, none
//! needing a reference:
//! * no panic; every emitted piece is valid UTF-8;
//! * the concatenated text, the released count, the status and the stop do not depend on how
//!   the ids were split (one feed, the fuzzed feeds, one id per feed), and equal what a byte
//!   stream gives for the ids' bytes when no stop token ends the stream;
//! * released counts never exceed the ids fed, and tokens released plus tokens waiting never do
//!   either;
//! * once the stream is closed (a stop, a stop token, `finish`) nothing more is emitted or
//!   released, and a feed after `finish` is an error;
//! * a call failing on an id outside the vocabulary consumes nothing (nor one failing on invalid
//!   UTF-8 in strict mode, for lists without regex stops: with one, what the stream does when a
//!   regex waiting on the next character meets the error is the byte stream's decision);
//! * a literal list without regions gives the same, call by call, through either matcher.
#![no_main]

mod common;

use common::bounds;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use stopstream::{
    regex_max_len, ByteOut, ByteStream, MatchStream, Matcher, Status, StopKind, LiteralStops, StopSpec,
    TokenMatcher, TokenStream, Vocab,
};

/// Regex tokens patterns are assembled from (the alphabet's characters, classes, repetition,
/// alternation, assertions).
const TOKENS: [&str; 20] = [
    "a", "b", "<", ">", "é", "😀", ".", "[ab]", "[^a]", r"\w", r"\W", "+", "?", "{1,2}", "|",
    r"\b", r"\B", "$", "(?m:$)", "\u{FFFD}",
];

/// The vocabulary's first ids: whole characters and strings of the stops' alphabet, a character
/// split across two ids, invalid bytes, an empty token, a special token, a hole, a token with a
/// leading space (for the leading-space rule).
const BASE: [Option<&[u8]>; 16] = [
    Some(b"a"),
    Some(b"b"),
    Some(b"ab"),
    Some(b"<"),
    Some(b">"),
    Some(b" "),
    Some(b"\n"),
    Some("\u{e9}".as_bytes()),
    Some(b"\xc3"),
    Some(b"\xa9"),
    Some(b"\xff"),
    Some(b""),
    Some(b"<|end|>"),
    None,
    Some(b" a"),
    Some(b"b>"),
];
/// The special token of [`BASE`].
const SPECIAL: i64 = 12;

/// Characters literal stops and markers are made of (U+FFFD: what invalid bytes become).
const LETTERS: [&str; 8] = ["a", "b", "<", ">", " ", "\n", "\u{e9}", "\u{FFFD}"];

/// Maps bytes onto [`LETTERS`], at most `cap` of them.
fn text(bytes: &[u8], cap: usize) -> Vec<u8> {
    bytes.iter().take(cap).flat_map(|&b| LETTERS[b as usize % LETTERS.len()].bytes()).collect()
}

#[derive(Arbitrary, Debug)]
struct Stop {
    bytes: Vec<u8>,
    regex: bool,
    include: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Tokens after [`BASE`]: the first byte picks a hole, text of [`LETTERS`] or raw bytes.
    vocab: Vec<Vec<u8>>,
    special: Vec<u8>,
    stops: Vec<Stop>,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
    stop_ids: Vec<u8>,
    cuts: Vec<u16>,
    include_stop: bool,
    replace: bool,
    strip: bool,
    /// Last, so that it takes the rest of the input: long streams of ids, not a couple.
    ids: Vec<u8>,
}

/// Everything a run of a stream produced.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    /// Text and released count per call (the last is `finish`).
    calls: Vec<(Vec<u8>, usize)>,
    status: Status,
    stop_token: Option<i64>,
    /// A call failed (the run ends there).
    failed: bool,
}

impl Run {
    fn text(&self) -> Vec<u8> {
        self.calls.iter().flat_map(|c| c.0.iter().copied()).collect()
    }

    fn released(&self) -> usize {
        self.calls.iter().map(|c| c.1).sum()
    }
}

/// What a failing call must leave as it was.
fn snapshot<T: TokenMatcher>(st: &TokenStream<T>, set: &T::Set) -> (Vec<u8>, Vec<u8>, Status) {
    (st.held(set).to_vec(), st.tail().to_vec(), st.status())
}

fn counts<T: TokenMatcher>(st: &TokenStream<T>) -> (usize, bool, bool, Option<i64>) {
    (st.unreleased(), st.is_closed(), st.is_finished(), st.stop_token())
}

/// Feeds `calls`, then finishes, checking the invariants after every call.
fn run<T: TokenMatcher>(
    vocab: &Vocab,
    set: &T::Set,
    mut st: TokenStream<T>,
    calls: &[&[i64]],
    undo_decode: bool,
) -> Run {
    let (mut fed, mut released, mut out) = (0usize, 0usize, Vec::new());
    for ids in calls {
        let closed = st.is_closed();
        let before = (snapshot(&st, set), counts(&st));
        let mut piece = Vec::new();
        match st.feed(vocab, set, ids, &mut piece) {
            Ok(n) => {
                assert!(std::str::from_utf8(&piece).is_ok(), "emitted a partial character");
                if closed {
                    assert_eq!((n, piece.len()), (0, 0), "emitted after the stream closed");
                }
                fed += ids.len();
                released += n;
                assert!(released <= fed, "released {released} of {fed} ids");
                assert!(released + st.unreleased() <= fed);
                out.push((piece, n));
            }
            Err(e) => {
                assert!(piece.is_empty(), "a failing call emitted text");
                assert!(
                    e.invalid_token().is_some() || e.decode_error().is_some() || e.is_finished()
                );
                if e.invalid_token().is_some() || undo_decode {
                    assert_eq!((snapshot(&st, set), counts(&st)), before, "{e}");
                }
                return Run {
                    calls: out,
                    status: st.status(),
                    stop_token: st.stop_token(),
                    failed: true,
                };
            }
        }
    }
    let closed = st.is_closed();
    let mut piece = Vec::new();
    match st.finish(set, &mut piece) {
        Ok(n) => {
            assert!(std::str::from_utf8(&piece).is_ok());
            if closed {
                assert_eq!((n, piece.len()), (0, 0), "finish emitted after the stream closed");
            }
            released += n;
            assert!(released <= fed && st.unreleased() + released <= fed);
            out.push((piece, n));
        }
        Err(e) => {
            assert!(e.decode_error().is_some(), "{e}");
            return Run {
                calls: out,
                status: st.status(),
                stop_token: st.stop_token(),
                failed: true,
            };
        }
    }
    // Closed for good: more ids are an error, another finish releases nothing.
    assert!(st.feed(vocab, set, &[0], &mut Vec::new()).unwrap_err().is_finished());
    let mut again = Vec::new();
    assert_eq!(st.finish(set, &mut again).ok(), Some(0));
    assert!(again.is_empty());
    Run { calls: out, status: st.status(), stop_token: st.stop_token(), failed: false }
}

/// The three splits of `ids`: one feed, the fuzzed feeds, one id per feed.
fn splits<'a>(ids: &'a [i64], cuts: &[u16]) -> [Vec<&'a [i64]>; 3] {
    let fuzzed = bounds(cuts, ids.len(), None).windows(2).map(|w| &ids[w[0]..w[1]]).collect();
    [vec![ids], fuzzed, ids.chunks(1).collect()]
}

fuzz_target!(|input: Input| {
    // A fixed vocabulary (so that stops and tokens meet often), then up to 4 fuzzed tokens.
    let mut tokens: Vec<Option<Vec<u8>>> = BASE.iter().map(|t| t.map(<[u8]>::to_vec)).collect();
    tokens.extend(input.vocab.iter().take(4).map(|t| match t.first().map(|b| b % 4) {
        None | Some(0) => None,
        Some(1 | 2) => Some(text(&t[1..], 2)),
        _ => Some(t[1..].iter().take(3).copied().collect()),
    }));
    let n = tokens.len() as i64;
    let special: Vec<i64> = [SPECIAL]
        .into_iter()
        .chain(input.special.iter().take(1).map(|&b| i64::from(b) % n))
        .filter(|&i| tokens[i as usize].is_some())
        .collect();
    let vocab = Vocab::new(tokens, &special).unwrap().with_strip_leading_space(input.strip);

    // Stops of every kind, and the skip options.
    // Up to 5 regex tokens: nested counted repetitions of a Unicode class take seconds to
    // compile (the `patterns` target covers compiling; here the streams are the point).
    let patterns: Vec<String> = input
        .stops
        .iter()
        .take(4)
        .map(|s| s.bytes.iter().take(5).map(|&t| TOKENS[t as usize % TOKENS.len()]).collect())
        .collect();
    let literals: Vec<Vec<u8>> = input.stops.iter().take(4).map(|s| text(&s.bytes, 3)).collect();
    let specs: Vec<StopSpec<'_>> = input
        .stops
        .iter()
        .take(4)
        .enumerate()
        // Invalid patterns are the `patterns` target's: dropped here, so that the streams run.
        .filter(|(i, s)| {
            if s.regex {
                regex_max_len(&patterns[*i]).is_ok()
            } else {
                !literals[*i].is_empty()
            }
        })
        .map(|(i, s)| StopSpec {
            kind: if s.regex {
                StopKind::Regex(&patterns[i], None)
            } else {
                StopKind::Literal(&literals[i])
            },
            include: s.include,
        })
        .collect();
    let until = input.until.as_ref().map(|u| text(u, 2)).filter(|u| !u.is_empty());
    let skip_owned: Vec<(Vec<u8>, Vec<u8>)> = input
        .skip
        .iter()
        .take(2)
        .map(|(o, c)| (text(o, 2), text(c, 2)))
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
    let has_regex = specs.iter().any(|s| matches!(s.kind, StopKind::Regex(..)));
    let stop_ids: Vec<i64> = input
        .stop_ids
        .iter()
        .take(2)
        .map(|&b| i64::from(b) % n)
        .filter(|&i| vocab.get(i).is_some())
        .collect();
    let fresh =
        || TokenStream::composed(&vocab, &m, input.include_stop, input.replace, &stop_ids).unwrap();

    // Up to 24 ids, now and then one outside the vocabulary.
    let all: Vec<i64> = input.ids.iter().take(24).map(|&b| i64::from(b) % (n + 2) - 1).collect();
    let undo = !has_regex;
    // With bad ids: no panic, and a failing call consumes nothing.
    for calls in splits(&all, &input.cuts) {
        run(&vocab, &m, fresh(), &calls, undo);
    }

    // Valid ids: the split never matters.
    let ids: Vec<i64> = all.iter().copied().filter(|&i| vocab.get(i).is_some()).collect();
    let [one, fuzzed, singles] = splits(&ids, &input.cuts);
    let whole = run(&vocab, &m, fresh(), &one, undo);
    for calls in [&fuzzed, &singles] {
        let other = run(&vocab, &m, fresh(), calls, undo);
        assert_eq!(whole.failed, other.failed, "a split failed where another did not");
        if !whole.failed {
            assert_eq!(
                (whole.text(), whole.released(), whole.status, whole.stop_token),
                (other.text(), other.released(), other.status, other.stop_token),
                "the split changed the result"
            );
        }
    }

    // No stop token: the text is the byte stream's over the ids' bytes.
    if !whole.failed && !ids.iter().any(|i| stop_ids.contains(i)) {
        let mut raw = Vec::new();
        let mut first = true;
        for &id in &ids {
            let mut t: &[u8] = match vocab.get(id) {
                Some(stopstream::Token::Text(t)) => t,
                _ => &[],
            };
            if !t.is_empty() && std::mem::take(&mut first) && input.strip && t[0] == b' ' {
                t = &t[1..];
            }
            raw.extend_from_slice(t);
        }
        let mut bs = ByteStream::over(MatchStream::new(&m), input.replace);
        let mut out = Vec::new();
        if bs
            .feed(&m, &raw, &mut out)
            .expect("the byte stream failed where the token stream did not")
            == ByteOut::Input
        {
            out.extend_from_slice(&raw);
        }
        bs.finish(&m, &mut out)
            .expect("the byte stream failed at the end where the token stream did not");
        assert_eq!(whole.text(), out, "not the byte stream's text");
        assert_eq!(whole.status, bs.status());
    }

    // A literal list with one include flag and no regions: both matchers agree, call by call.
    let uniform = specs
        .iter()
        .all(|s| matches!(s.kind, StopKind::Literal(_)) && s.include == input.include_stop);
    if uniform && skip.is_empty() && until.is_none() {
        let lits: Vec<&[u8]> = specs
            .iter()
            .filter_map(|s| match s.kind {
                StopKind::Literal(l) => Some(l),
                StopKind::Regex(..) => None,
            })
            .collect();
        let set = LiteralStops::new(&lits).unwrap();
        for calls in splits(&all, &input.cuts) {
            let lit =
                TokenStream::new(&vocab, input.include_stop, input.replace, &stop_ids).unwrap();
            let a = run(&vocab, &set, lit, &calls, true);
            let b = run(&vocab, &m, fresh(), &calls, true);
            assert_eq!(a, b, "the two matchers differ");
        }
    }
});
