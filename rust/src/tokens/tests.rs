//! The token stream against a model of the release rule, over both kinds of list.

use super::batch::{feed_batch, AnyTokenStream, BatchEntry};
use super::*;
use crate::compiled::CompiledStops;
use crate::filter::Detail;
use crate::literal_state::Status;
use crate::literal_stops::LiteralStops;
use crate::matcher::Matcher;
use proptest::prelude::*;
use std::sync::Arc;

/// The test vocabulary: characters whole and split across tokens, invalid bytes, an empty
/// token, two special tokens and a hole.
const PIECES: &[Option<&[u8]>] = &[
    Some(b"a"),                // 0
    Some(b"b"),                // 1
    Some(b"<"),                // 2
    Some(b"/"),                // 3
    Some(b"</"),               // 4
    Some(b"a>"),               // 5
    Some("\u{e9}".as_bytes()), // 6
    Some(b"\xc3"),             // 7  first byte of é
    Some(b"\xa9"),             // 8  last byte of é
    Some(b"\xf0\x9f"),         // 9  first half of 😀
    Some(b"\x98\x80"),         // 10 second half of 😀
    Some(b"\xff"),             // 11 never valid
    Some(b"\xe2\x82"),         // 12 a prefix of €
    Some(b""),                 // 13 no text
    Some(b"<|end|>"),          // 14 special
    None,                      // 15 hole
    Some(b"<|eot|>"),          // 16 special
    Some(b"\xacb"),            // 17 completes € after 12, then b
    Some(b"\n"),               // 18
    Some(b" "),                // 19
    Some(b" a"),               // 20
];
const SPECIAL: &[i64] = &[14, 16];
/// One past the last id.
const END: i64 = 21;

fn vocab(strip: bool) -> Vocab {
    assert_eq!(usize::try_from(END).unwrap(), PIECES.len());
    Vocab::new(PIECES.iter().copied(), SPECIAL).unwrap().with_strip_leading_space(strip)
}

#[test]
fn a_compiled_list_picks_its_stream_and_reports_why_it_ended() {
    let v = vocab(false);
    let literal = CompiledStops::literal(&["a>"]).unwrap();
    let composed = CompiledStops::composed(
        &[StopSpec { kind: crate::matcher::StopKind::Regex("a>", None), include: false }],
        None,
        &[],
    )
    .unwrap();
    for (stops, is_composed) in [(&literal, false), (&composed, true)] {
        let mut s = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
        assert_eq!(s.is_composed(), is_composed);
        assert_eq!(s.stop_reason(), None);
        let mut out = Vec::new();
        let set = stops.literal_stops().map_or(LiteralStops::none(), |s| s);
        s.feed(&v, set, &[4, 5], &mut out).unwrap();
        assert_eq!((out.as_slice(), s.stop_reason()), (&b"</"[..], Some("stop_sequence")));
        let mut t = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
        t.feed(&v, set, &[0, 14], &mut out).unwrap();
        assert_eq!(t.stop_reason(), Some("stop_token"));
        let mut u = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
        u.finish(set, &mut out).unwrap();
        assert_eq!(u.stop_reason(), Some("end"));
    }
}

#[test]
fn the_report_reads_stops_tokens_and_held_text() {
    let v = vocab(false);
    let literal = CompiledStops::literal(&["a>"]).unwrap();
    let spec = [StopSpec { kind: crate::matcher::StopKind::Regex("a>", None), include: false }];
    let composed = CompiledStops::composed(&spec, None, &[]).unwrap();
    for (stops, matched) in [(&literal, None), (&composed, Some(b"a>".to_vec()))] {
        let set = stops.literal_stops().map_or(LiteralStops::none(), |s| s);
        let (mut s, mut out) =
            (AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap(), vec![]);
        s.feed(&v, set, &[1, 0], &mut out).unwrap();
        let held = s.stop_report(set, Detail::Pending);
        assert_eq!((held.stopped, held.reason, held.pending.as_slice()), (false, None, &b"a"[..]));
        assert!(s.stop_report(set, Detail::Status).pending.is_empty(), "texts are read when asked");
        s.feed(&v, set, &[5], &mut out).unwrap();
        let r = s.stop_report(set, Detail::Matched);
        assert_eq!(
            (r.status, r.stopped, r.reason),
            (Status::Stopped(0), true, Some("stop_sequence"))
        );
        assert_eq!((r.matched, r.bytes), (matched, false));
        assert!(s.stop_report(set, Detail::Pending).pending.is_empty());
        let mut t = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
        t.feed(&v, set, &[0, 14], &mut out).unwrap();
        let r = t.stop_report(set, Detail::Matched);
        assert_eq!((r.status.index(), r.stopped, r.reason), (None, true, Some("stop_token")));
        assert_eq!(r.matched, None, "a stop token matched no text");
    }
}

fn text_of(id: i64) -> &'static [u8] {
    if SPECIAL.contains(&id) {
        return b"";
    }
    PIECES[usize::try_from(id).unwrap()].unwrap()
}

/// A decoded unit: raw byte range and decoded UTF-8 range.
struct Unit {
    raw: (usize, usize),
    dec: (usize, usize),
    invalid: bool,
    /// The byte whose arrival decides the unit (past the end for a final U+FFFD): its last
    /// byte, or for a valid lead cut short, the byte that broke it.
    settle: usize,
}

/// Decodes `raw` unit by unit the obvious way, with the standard library's UTF-8 validation
/// on a window of at most 4 bytes. An incomplete end is a U+FFFD unit when `last`, else left
/// out (the tail).
fn decode_units(raw: &[u8], last: bool) -> (Vec<Unit>, Vec<u8>) {
    let (mut i, mut units, mut text) = (0, Vec::new(), Vec::new());
    while i < raw.len() {
        let w = &raw[i..raw.len().min(i + 4)];
        let (n, ok, settle) = match std::str::from_utf8(w) {
            Ok(s) => (s.chars().next().unwrap().len_utf8(), true, 0),
            Err(e) if e.valid_up_to() > 0 => {
                let s = std::str::from_utf8(&w[..e.valid_up_to()]).unwrap();
                (s.chars().next().unwrap().len_utf8(), true, 0)
            }
            Err(e) => match e.error_len() {
                Some(n) if (0xC2..=0xF4).contains(&w[0]) => (n, false, 1),
                Some(n) => (n, false, 0),
                None if last => (w.len(), false, 1),
                None => break,
            },
        };
        let d = text.len();
        text.extend_from_slice(if ok { &raw[i..i + n] } else { "\u{FFFD}".as_bytes() });
        let settle = i + n - 1 + settle;
        units.push(Unit { raw: (i, i + n), dec: (d, text.len()), invalid: !ok, settle });
        i += n;
    }
    (units, text)
}

fn first_stop(stops: &[Vec<u8>], text: &[u8]) -> Option<(usize, usize)> {
    (1..=text.len()).find_map(|end| {
        let mut best: Option<usize> = None;
        for (i, s) in stops.iter().enumerate() {
            if text[..end].ends_with(s) && best.is_none_or(|b| s.len() > stops[b].len()) {
                best = Some(i);
            }
        }
        best.map(|b| (b, end))
    })
}

fn holdback(stops: &[Vec<u8>], text: &[u8]) -> usize {
    (0..=text.len())
        .rev()
        .find(|&k| stops.iter().any(|s| k < s.len() && s.starts_with(&text[text.len() - k..])))
        .unwrap_or(0)
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Cumulative text, released count, closed.
    Ok(Vec<u8>, usize, bool),
    Error,
}

/// The contract for all of `ids` fed so far (`last`: finish was called), from scratch.
#[allow(
    clippy::too_many_arguments,
    clippy::fn_params_excessive_bools,
    reason = "the test's whole configuration"
)]
fn model(
    strip: bool,
    stops: &[Vec<u8>],
    include: bool,
    replace: bool,
    stop_ids: &[i64],
    all: &[i64],
    last: bool,
) -> Outcome {
    let stop_at = all.iter().position(|i| stop_ids.contains(i));
    let ids = &all[..stop_at.unwrap_or(all.len())];
    let last = last || stop_at.is_some();
    let mut raw = Vec::new();
    let mut ranges = Vec::new();
    let mut first = true;
    for &id in ids {
        let a = raw.len();
        let mut t = text_of(id);
        if !t.is_empty() && std::mem::take(&mut first) && strip && t[0] == b' ' {
            t = &t[1..];
        }
        raw.extend_from_slice(t);
        ranges.push((a, raw.len()));
    }
    let (units, text) = decode_units(&raw, last);
    let found = first_stop(stops, &text);
    if !replace {
        // Strict: an invalid unit is an error unless a stop ends before it.
        let bad = units.iter().find(|u| u.invalid).map(|u| u.dec.0);
        if bad.is_some_and(|b| found.is_none_or(|(_, end)| end > b)) {
            return Outcome::Error;
        }
    }
    let unit_of = |byte: usize| units.iter().find(|u| u.raw.0 <= byte && byte < u.raw.1);
    // Where a token's text ends: the end of the unit holding its last byte (for a token
    // without text, the byte before it); `None` while that unit is the tail.
    let end_of = |(_, b): (usize, usize)| {
        if b == 0 {
            Some(0)
        } else {
            unit_of(b - 1).map(|u| u.dec.1)
        }
    };
    if let Some((p, end)) = found {
        let cut = if include { end } else { end - stops[p].len() };
        // Ids after the one whose bytes complete the stop are never looked at.
        let settle = units.iter().find(|u| u.dec.1 == end).unwrap().settle;
        let last_fed = ranges.iter().position(|&(a, b)| a <= settle && settle < b);
        let n = ranges
            .iter()
            .take(last_fed.map_or(ranges.len(), |k| k + 1))
            .filter(|&&(a, b)| {
                if a < b {
                    unit_of(a).is_some_and(|u| u.dec.0 < cut)
                } else {
                    end_of((a, b)).is_some_and(|e| e <= cut)
                }
            })
            .count();
        return Outcome::Ok(text[..cut].to_vec(), n, true);
    }
    let emit = if last || include { text.len() } else { text.len() - holdback(stops, &text) };
    let mut n = ranges.iter().filter(|&&r| end_of(r).is_some_and(|e| e <= emit)).count();
    let mut out = text[..emit].to_vec();
    if let Some(j) = stop_at {
        let own = text_of(all[j]);
        if include && !own.is_empty() {
            let (u, t) = decode_units(own, true);
            if !replace && u.iter().any(|u| u.invalid) {
                return Outcome::Error;
            }
            out.extend_from_slice(&t);
        }
        n += usize::from(own.is_empty() || include);
    }
    Outcome::Ok(out, n, stop_at.is_some())
}

/// Feeds `calls` (each a list of ids; `None` is `finish`) to a stream and to the model,
/// comparing after every call. A call the model rejects must fail and change nothing.
fn check(
    strip: bool,
    stops: &[Vec<u8>],
    include: bool,
    replace: bool,
    stop_ids: &[i64],
    calls: &[Option<Vec<i64>>],
) -> Result<(), TestCaseError> {
    let vocab = vocab(strip);
    let set = LiteralStops::new(stops).unwrap();
    let mut st = TokenStream::new(&vocab, include, replace, stop_ids).unwrap();
    let (mut fed, mut out, mut released) = (Vec::new(), Vec::new(), 0usize);
    let mut finished = false;
    for call in calls {
        let before = st.clone();
        let mark = out.len();
        let (result, want) = if let Some(ids) = call {
            let r = st.feed(&vocab, &set, ids, &mut out);
            // An invalid id fails the call unless the stream closes before it.
            let bad = ids.iter().position(|&i| vocab.get(i).is_none());
            let mut upto = fed.clone();
            upto.extend_from_slice(&ids[..bad.unwrap_or(ids.len())]);
            let mut want = model(strip, stops, include, replace, stop_ids, &upto, finished);
            if bad.is_some() && !matches!(want, Outcome::Ok(_, _, true)) {
                want = Outcome::Error;
            }
            if finished {
                want = Outcome::Error;
            }
            if want != Outcome::Error {
                fed = upto;
            }
            (r, want)
        } else {
            let r = st.finish(&set, &mut out);
            let want = model(strip, stops, include, replace, stop_ids, &fed, true);
            if want != Outcome::Error {
                finished = true;
            }
            (r, want)
        };
        match want {
            Outcome::Error => {
                prop_assert!(result.is_err(), "{call:?} should fail");
                prop_assert_eq!(&st, &before);
                prop_assert_eq!(out.len(), mark);
            }
            Outcome::Ok(text, n, closed) => {
                released += result.map_err(|e| TestCaseError::fail(format!("{call:?}: {e}")))?;
                prop_assert_eq!(&out, &text, "text after {:?}", call);
                prop_assert_eq!(released, n, "released after {:?}", call);
                prop_assert_eq!(st.is_closed(), closed || finished);
                prop_assert!(released + st.unreleased() <= fed.len().max(released));
            }
        }
    }
    Ok(())
}

fn stop_word() -> impl Strategy<Value = Vec<u8>> {
    let alphabet = prop::sample::select(vec![
        "a",
        "b",
        "<",
        "/",
        ">",
        "\u{e9}",
        "\u{1F600}",
        "\u{FFFD}",
        "\u{20AC}",
        "\n",
    ]);
    prop::collection::vec(alphabet, 1..4).prop_map(|v| v.concat().into_bytes())
}

fn calls() -> impl Strategy<Value = Vec<Option<Vec<i64>>>> {
    let id = prop_oneof![
        20 => 0i64..END,
        1 => prop::sample::select(vec![-1i64, 15, END, i64::MAX, i64::MIN]),
    ];
    let call = prop_oneof![
        12 => prop::collection::vec(id, 0..5).prop_map(Some),
        1 => Just(None),
    ];
    prop::collection::vec(call, 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn matches_the_model(
        stops in prop::collection::vec(stop_word(), 0..4),
        include in any::<bool>(),
        replace in any::<bool>(),
        strip in any::<bool>(),
        stop_ids in prop::collection::vec(prop::sample::select(vec![1i64, 4, 8, 13, 14, 11]), 0..2),
        calls in calls(),
    ) {
        check(strip, &stops, include, replace, &stop_ids, &calls)?;
    }
}

fn run(stops: &[&str], include: bool, stop_ids: &[i64], calls: &[&[i64]]) -> Vec<(String, usize)> {
    let vocab = vocab(false);
    let set = LiteralStops::new(stops.iter().map(|s| s.as_bytes())).unwrap();
    let mut st = TokenStream::new(&vocab, include, true, stop_ids).unwrap();
    let mut got = Vec::new();
    for ids in calls {
        let mut out = Vec::new();
        let n = st.feed(&vocab, &set, ids, &mut out).unwrap();
        got.push((String::from_utf8(out).unwrap(), n));
    }
    let mut out = Vec::new();
    let n = st.finish(&set, &mut out).unwrap();
    got.push((String::from_utf8(out).unwrap(), n));
    got
}

#[test]
#[allow(clippy::type_complexity, reason = "a table of literal cases")]
fn released_table() {
    // (stops, include_stop, stop ids, calls, (text, released) per call then finish)
    let cases: &[(&[&str], bool, &[i64], &[&[i64]], &[(&str, usize)])] = &[
        // Held text holds its tokens back; a stop releases those with emitted text.
        (&["</a>"], false, &[], &[&[0, 4], &[5, 1]], &[("a", 1), ("", 0), ("", 0)]),
        (&["</a>"], true, &[], &[&[0, 4], &[5, 1]], &[("a</", 2), ("a>", 1), ("", 0)]),
        (&["</a>"], false, &[], &[&[0, 4], &[1]], &[("a", 1), ("</b", 2), ("", 0)]),
        // A stop inside a token: the token is released (its first text was emitted).
        (&["/a"], false, &[], &[&[4, 5]], &[("<", 1), ("", 0)]),
        // A special token is released with the text before it, never after a cut.
        (&["</a>"], false, &[], &[&[0, 14, 4, 16, 5]], &[("a", 2), ("", 0)]),
        (&["</a>"], false, &[], &[&[0, 4, 14], &[1]], &[("a", 1), ("</b", 3), ("", 0)]),
        // A character split across tokens: both wait for it.
        (
            &[],
            false,
            &[],
            &[&[7], &[8], &[9], &[10]],
            &[("", 0), ("é", 2), ("", 0), ("😀", 2), ("", 0)],
        ),
        (&[], false, &[], &[&[7, 14], &[8]], &[("", 0), ("é", 3), ("", 0)]),
        // Invalid bytes: U+FFFD, and a broken prefix settles when the next byte comes.
        (&[], false, &[], &[&[12], &[0]], &[("", 0), ("\u{FFFD}a", 2), ("", 0)]),
        (&[], false, &[], &[&[12], &[17]], &[("", 0), ("€b", 2), ("", 0)]),
        (&[], false, &[], &[&[7]], &[("", 0), ("\u{FFFD}", 1)]),
        // Stop tokens: held text released, own text dropped unless include_stop.
        (&["</a>"], false, &[4], &[&[0, 2, 4, 1]], &[("a<", 2), ("", 0)]),
        (&["</a>"], true, &[4], &[&[0, 2, 4, 1]], &[("a<</", 3), ("", 0)]),
        (&[], false, &[14], &[&[0, 14, 1]], &[("a", 2), ("", 0)]),
        // Ids after a stop are ignored unchecked.
        (&["a"], false, &[], &[&[1, 0, -5, 15]], &[("b", 1), ("", 0)]),
    ];
    for (stops, include, stop_ids, calls, want) in cases {
        let got = run(stops, *include, stop_ids, calls);
        let want: Vec<(String, usize)> = want.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
        assert_eq!(got, want, "{stops:?} {calls:?}");
    }
}

#[test]
fn invalid_ids_consume_nothing() {
    let vocab = vocab(false);
    let set = LiteralStops::new(["</a>"]).unwrap();
    let mut st = TokenStream::new(&vocab, false, true, &[]).unwrap();
    let mut out = Vec::new();
    st.feed(&vocab, &set, &[0, 4], &mut out).unwrap();
    for bad in [-1, 15, END, i64::MAX, i64::MIN] {
        let before = st.clone();
        let err = st.feed(&vocab, &set, &[1, 7, bad, 0], &mut out).unwrap_err();
        assert_eq!(err.invalid_token(), Some((2, bad)));
        assert_eq!(st, before);
        assert_eq!(out, b"a");
    }
    assert_eq!(
        TokenStream::new(&vocab, false, true, &[3, 15]).unwrap_err().invalid_token(),
        Some((1, 15))
    );
    assert_eq!(Vocab::new([Some(b"a")], &[1]).unwrap_err().invalid_token(), Some((0, 1)));
}

#[test]
fn strict_errors_consume_nothing() {
    let vocab = vocab(false);
    let set = LiteralStops::new(["</a>"]).unwrap();
    let mut st = TokenStream::new(&vocab, false, false, &[]).unwrap();
    let mut out = Vec::new();
    st.feed(&vocab, &set, &[0, 7], &mut out).unwrap();
    let before = st.clone();
    assert!(st.feed(&vocab, &set, &[8, 0, 11], &mut out).unwrap_err().decode_error().is_some());
    assert_eq!(st, before);
    assert!(st.finish(&set, &mut out).unwrap_err().decode_error().is_some());
    assert_eq!(st, before);
    // A stop before the invalid byte wins.
    assert_eq!(st.feed(&vocab, &set, &[8, 4, 5, 11], &mut out).unwrap(), 2);
    assert_eq!(out, "aé".as_bytes());
}

#[test]
fn reset_reopens() {
    let vocab = vocab(false);
    let set = LiteralStops::new(["b"]).unwrap();
    let mut st = TokenStream::new(&vocab, false, true, &[14]).unwrap();
    let mut out = Vec::new();
    st.feed(&vocab, &set, &[0, 14], &mut out).unwrap();
    assert_eq!(st.stop_token(), Some(14));
    assert_eq!(st.feed(&vocab, &set, &[0], &mut out).unwrap(), 0);
    st.finish(&set, &mut out).unwrap();
    assert!(st.feed(&vocab, &set, &[0], &mut out).unwrap_err().is_finished());
    st.reset(&set);
    assert_eq!(st.stop_token(), None);
    assert_eq!(st.feed(&vocab, &set, &[0, 1, 0], &mut out).unwrap(), 1);
    assert_eq!(st.status(), Status::Stopped(0));
}

use crate::matcher::{StopKind, StopSpec};

fn literal(s: &[u8], include: bool) -> StopSpec<'_> {
    StopSpec { kind: StopKind::Literal(s), include }
}

fn regex(p: &str, include: bool) -> StopSpec<'_> {
    StopSpec { kind: StopKind::Regex(p, None), include }
}

/// Feeds `calls` to a composed stream (then `finish`): per call the text and the released
/// count, and the final status with the matched text.
fn run_composed(
    m: &Matcher,
    stop_ids: &[i64],
    calls: &[&[i64]],
) -> (Vec<(String, usize)>, Status, String, Option<i64>) {
    let vocab = vocab(false);
    let mut st = TokenStream::composed(&vocab, m, false, true, stop_ids).unwrap();
    let mut got = Vec::new();
    for ids in calls {
        let mut out = Vec::new();
        let n = st.feed(&vocab, m, ids, &mut out).unwrap();
        got.push((String::from_utf8(out).unwrap(), n));
    }
    let mut out = Vec::new();
    let n = st.finish(m, &mut out).unwrap();
    got.push((String::from_utf8(out).unwrap(), n));
    let matched = String::from_utf8(st.matcher().stop_sequence(m).to_vec()).unwrap();
    (got, st.status(), matched, st.stop_token())
}

#[test]
#[allow(clippy::type_complexity, reason = "a table of literal cases")]
fn composed_released_table() {
    let word_end = [regex(r"ab\b", false)];
    let word_end_on = [regex(r"ab\b", true)];
    let per_stop = [literal(b"</a>", true), literal(b"b", false)];
    let at_end = [regex("b$", false)];
    // (stops, skip, stop ids, calls, (text, released) per call then finish, status, matched)
    let cases: &[(
        &[StopSpec<'_>],
        &[(&[u8], &[u8])],
        &[i64],
        &[&[i64]],
        &[(&str, usize)],
        Status,
        &str,
    )] = &[
        // A regex settled by the next token: the tokens holding the match are not
        // released (none of their text was emitted); the one settling it is after the cut.
        (
            &word_end,
            &[],
            &[],
            &[&[0], &[1], &[19]],
            &[("", 0), ("", 0), ("", 0), ("", 0)],
            Status::Stopped(0),
            "ab",
        ),
        // Its flag on: nothing is held, each token is released as it comes.
        (
            &word_end_on,
            &[],
            &[],
            &[&[0], &[1], &[19]],
            &[("a", 1), ("b", 1), ("", 0), ("", 0)],
            Status::Stopped(0),
            "ab",
        ),
        // A special token between the match and the character settling it sits at the
        // cut: released with the flag on (all the text before it was emitted), not without.
        (
            &word_end_on,
            &[],
            &[],
            &[&[0, 1, 14, 19, 0]],
            &[("ab", 3), ("", 0)],
            Status::Stopped(0),
            "ab",
        ),
        (&word_end, &[], &[], &[&[0, 1, 14, 19, 0]], &[("", 0), ("", 0)], Status::Stopped(0), "ab"),
        // `finish` settles it: the stop fires there, and releases nothing more.
        (&word_end, &[], &[], &[&[19, 0, 1]], &[(" ", 1), ("", 0)], Status::Stopped(0), "ab"),
        (&at_end, &[], &[], &[&[0, 1]], &[("a", 1), ("", 0)], Status::Stopped(0), "b"),
        (&at_end, &[], &[], &[&[1, 0]], &[("ba", 2), ("", 0)], Status::Finished, ""),
        // Per-stop include: the winner's flag decides the cut and the released tokens.
        (
            &per_stop,
            &[],
            &[],
            &[&[0, 4, 5, 1]],
            &[("a</a>", 3), ("", 0)],
            Status::Stopped(0),
            "</a>",
        ),
        (&per_stop, &[], &[], &[&[0, 4, 1, 5]], &[("a</", 2), ("", 0)], Status::Stopped(1), "b"),
        // A skip region: nothing inside it is held or matched.
        (
            &[literal(b"a", false)],
            &[(b"<", b">")],
            &[],
            &[&[2, 0, 5], &[0]],
            &[("<aa>", 3), ("", 0), ("", 0)],
            Status::Stopped(0),
            "a",
        ),
        // A stop token ends the text as `finish` would: the regex it settles came first.
        (&word_end, &[], &[14], &[&[0, 1, 14, 0]], &[("", 0), ("", 0)], Status::Stopped(0), "ab"),
        (&word_end, &[], &[14], &[&[0, 14, 1]], &[("a", 2), ("", 0)], Status::Finished, ""),
    ];
    for (stops, skip, stop_ids, calls, want, status, matched) in cases {
        let m = Matcher::new(stops, None, skip).unwrap();
        let (got, st, seq, _) = run_composed(&m, stop_ids, calls);
        let want: Vec<(String, usize)> = want.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
        assert_eq!(got, want, "{stops:?} {calls:?}");
        assert_eq!((st, seq.as_str()), (*status, *matched), "{stops:?} {calls:?}");
    }
}

#[test]
fn composed_stop_tokens() {
    let m = Matcher::new(&[regex(r"ab\b", false)], None, &[]).unwrap();
    // Nothing pending: the stream ends as a stop token.
    let (_, st, _, token) = run_composed(&m, &[14], &[&[0, 14, 1]]);
    assert_eq!((st, token), (Status::Finished, Some(14)));
    // A match the end of the text settles wins over the stop token.
    let (_, st, _, token) = run_composed(&m, &[14], &[&[0, 1, 14, 0]]);
    assert_eq!((st, token), (Status::Stopped(0), None));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A composed list of literal stops (one include flag for all, no regions) behaves
    /// exactly as the literal path, call by call: text, released counts, errors (which
    /// consume nothing), held text and state.
    #[test]
    fn composed_literals_match_the_literal_path(
        stops in prop::collection::vec(stop_word(), 0..4),
        include in any::<bool>(),
        replace in any::<bool>(),
        strip in any::<bool>(),
        stop_ids in prop::collection::vec(prop::sample::select(vec![1i64, 4, 8, 13, 14, 11]), 0..2),
        calls in calls(),
    ) {
        let vocab = vocab(strip);
        let set = LiteralStops::new(&stops).unwrap();
        let specs: Vec<StopSpec<'_>> = stops.iter().map(|s| literal(s, include)).collect();
        let m = Matcher::new(&specs, None, &[]).unwrap();
        let mut lit = TokenStream::new(&vocab, include, replace, &stop_ids).unwrap();
        let mut com = TokenStream::composed(&vocab, &m, include, replace, &stop_ids).unwrap();
        for call in &calls {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let (ra, rb) = match call {
                Some(ids) => (lit.feed(&vocab, &set, ids, &mut a), com.feed(&vocab, &m, ids, &mut b)),
                None => (lit.finish(&set, &mut a), com.finish(&m, &mut b)),
            };
            prop_assert_eq!(ra.is_ok(), rb.is_ok(), "{:?}", call);
            if let (Ok(x), Ok(y)) = (&ra, &rb) {
                prop_assert_eq!(x, y, "released after {:?}", call);
            }
            prop_assert_eq!(&a, &b, "text after {:?}", call);
            prop_assert_eq!(lit.held(&set), com.held(&m));
            prop_assert_eq!(lit.tail(), com.tail());
            prop_assert_eq!(
                (lit.status(), lit.stop_token(), lit.is_closed(), lit.unreleased()),
                (com.status(), com.stop_token(), com.is_closed(), com.unreleased())
            );
        }
    }
}

/// A batch as `(stream, ids)` entries.
type Entries<'a> = &'a [(usize, Vec<i64>)];

/// Streams of each kind for the batch tests: literal (replace), composed (replace),
/// literal (strict).
fn batch_streams(v: &Vocab) -> Vec<AnyTokenStream> {
    let spec = StopSpec { kind: StopKind::Literal(b"</a>"), include: false };
    let m = Arc::new(Matcher::new(&[spec], None, &[]).unwrap());
    vec![
        AnyTokenStream::literal(TokenStream::new(v, false, true, &[]).unwrap()),
        AnyTokenStream::composed(v, m, false, true, &[]).unwrap(),
        AnyTokenStream::literal(TokenStream::new(v, false, false, &[]).unwrap()),
    ]
}

/// Runs `batch` (`(stream, ids)` entries) through [`feed_batch`]: each entry's text, or the
/// failing entry's index.
fn run_batch(
    v: &Vocab,
    set: &LiteralStops,
    states: &mut [AnyTokenStream],
    batch: &[(usize, Vec<i64>)],
    safe: bool,
) -> Result<Vec<(Vec<u8>, usize)>, usize> {
    let flat: Vec<i64> = batch.iter().flat_map(|(_, ids)| ids.iter().copied()).collect();
    let mut start = 0;
    let mut entries: Vec<BatchEntry<'_>> = batch
        .iter()
        .map(|(slot, ids)| {
            start += ids.len();
            BatchEntry {
                vocab: v,
                set,
                slot: *slot,
                ids: start - ids.len()..start,
                out: 0..0,
                fed: Fed { released: 0, whole: false },
            }
        })
        .collect();
    let mut refs: Vec<&mut AnyTokenStream> = states.iter_mut().collect();
    let out = feed_batch(&mut entries, &flat, &mut refs, safe).map_err(|(i, _)| i)?;
    // A whole step appends nothing: its text is the token's own.
    let text = |e: &BatchEntry<'_>| match flat[e.ids.clone()] {
        [id] if e.fed.whole => v.whole(id).unwrap().to_vec(),
        _ => out[e.out.clone()].to_vec(),
    };
    Ok(entries.iter().map(|e| (text(e), e.fed.released)).collect())
}

/// The batch transaction: each entry gives what feeding its stream alone gives (a stream
/// given twice takes its entries in order), on the safe path and the checked one; an entry
/// that fails names itself and leaves every stream as it was.
#[test]
fn feed_batch_is_all_or_nothing() {
    let v = vocab(false);
    let set = LiteralStops::new(["</a>"]).unwrap();
    let alone = |states: &mut [AnyTokenStream], batch: &[(usize, Vec<i64>)]| {
        let mut got = Vec::new();
        for (slot, ids) in batch {
            let mut out = Vec::new();
            let n = states[*slot].feed(&v, &set, ids, &mut out).unwrap();
            got.push((out, n));
        }
        got
    };
    let ok: &[Entries<'_>] = &[
        &[(0, vec![4, 5]), (1, vec![4, 5]), (2, vec![0, 1])],
        &[(0, vec![4]), (1, vec![0, 2, 3]), (0, vec![5, 1]), (2, vec![6])],
        &[(2, vec![7]), (2, vec![8, 0]), (1, vec![13, 14, 0])],
    ];
    for batch in ok {
        for safe in [false, true] {
            // The safe path is only for batches that cannot fail: one entry per stream, none
            // of them strict.
            let once = batch.iter().map(|e| e.0).collect::<std::collections::HashSet<_>>();
            if safe && (once.len() != batch.len() || batch.iter().any(|e| e.0 == 2)) {
                continue;
            }
            let mut want_states = batch_streams(&v);
            let want = alone(&mut want_states, batch);
            let mut states = batch_streams(&v);
            let got = run_batch(&v, &set, &mut states, batch, safe).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.0, w.0, "{batch:?}");
                assert_eq!(g.1, w.1, "{batch:?}");
            }
            assert_eq!(format!("{states:?}"), format!("{want_states:?}"), "{batch:?}");
        }
    }
    // A hole, an id past the end, an invalid byte in strict mode: nothing changes.
    let failing: &[(Entries<'_>, usize)] = &[
        (&[(0, vec![0]), (1, vec![15]), (2, vec![0])], 1),
        (&[(0, vec![4]), (1, vec![0]), (0, vec![END])], 2),
        (&[(0, vec![0]), (2, vec![0, 11, 0]), (1, vec![4])], 1),
    ];
    for (batch, bad) in failing {
        let mut states = batch_streams(&v);
        run_batch(&v, &set, &mut states, &[(0, vec![0, 4]), (1, vec![2])], false).unwrap();
        let before = format!("{states:?}");
        assert_eq!(run_batch(&v, &set, &mut states, batch, false), Err(*bad), "{batch:?}");
        assert_eq!(format!("{states:?}"), before, "{batch:?}");
    }
    // A finished stream cannot be fed: the stream fed before it in the batch is unchanged.
    let mut states = batch_streams(&v);
    states[1].finish(&set, &mut Vec::new()).unwrap();
    let before = format!("{states:?}");
    assert_eq!(run_batch(&v, &set, &mut states, &[(0, vec![0]), (1, vec![0])], false), Err(1));
    assert_eq!(format!("{states:?}"), before);
}
