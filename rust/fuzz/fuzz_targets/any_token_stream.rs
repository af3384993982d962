//! `AnyTokenStream`, the token filter the bindings drive, over a literal list or a composed one
//! (contract §6, §7): small vocabularies (a fixed base and fuzzed tokens), stop token ids, both
//! error modes, the leading-space rule, ids (now and then outside the vocabulary) split into
//! calls of `feed` or `feed_id`. Checks:
//!
//! * call by call it equals the concrete stream it wraps (`TokenStream` over the `LiteralStops`, or
//!   over the `Matcher`), built directly: the result (released count, `whole`, or the error),
//!   the text, and then the status, stop token, held text, settings, matched text (the literal
//!   stream compared whole);
//! * its report agrees with its accessors (`stopped` counts a stop token, the reason, the held
//!   text as `pending`, the matched text once a stop sequence fired), and a feed it says
//!   `cannot_fail` does not fail;
//! * a naive reading of the decoded text (the ids' bytes, special tokens without text, one
//!   leading space dropped by the rule, up to a stop token, decoded as CPython does): for a
//!   literal list after every call the output, the stop, the held text and the incomplete
//!   character (§2 over the text so far; a stop token ends the text as `finish`, then its own
//!   text follows with `include_stop`); for a composed list the output plus the held text is
//!   the text so far, and at the end the output, the stop and its matched text are the naive
//!   reading's of `naive.rs`; without a stop sequence every token is released (a stop token
//!   only when it has no text or `include_stop`);
//! * closed for good after `finish`; `reset`, then the accepted ids in one call, gives the same.
#![no_main]

mod common;
mod naive;

use common::{bounds, decode, literal_reading, token_bytes, vocab, Drawn, StopInput};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use naive::List;
use stopstream::host::AnyTokenStream;
use stopstream::{
    CompiledStops, Detail, Error, Fed, MatchStream, Matcher, Status, LiteralStops, Token, TokenStream,
    Vocab,
};

#[derive(Arbitrary, Debug)]
struct Input {
    vocab: Vec<Vec<u8>>,
    special: Option<u8>,
    stops: Vec<StopInput>,
    /// A composed list (else the literal stops alone, under `include_stop`).
    composed: bool,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
    stop_ids: Vec<u8>,
    include_stop: bool,
    replace: bool,
    strip: bool,
    /// How each call is made: `feed`, or `feed_id` when it has one id.
    ways: Vec<u8>,
    cuts: Vec<u16>,
    /// Last, so that it takes the rest of the input.
    ids: Vec<u8>,
}

/// The stream an `AnyTokenStream` wraps, built directly.
enum Concrete<'a> {
    Literal(TokenStream, &'a LiteralStops),
    Composed(TokenStream<MatchStream>, &'a Matcher),
}

/// What a stream shows between calls.
#[derive(Debug, PartialEq, Eq)]
struct View {
    status: Status,
    stop_token: Option<i64>,
    finished: bool,
    held: Vec<u8>,
    replace: bool,
    include_stop: bool,
    stop_ids: Vec<i64>,
    matched: Option<Vec<u8>>,
}

impl Concrete<'_> {
    fn feed(&mut self, v: &Vocab, ids: &[i64], out: &mut Vec<u8>) -> Result<usize, Error> {
        match self {
            Concrete::Literal(t, s) => t.feed(v, s, ids, out),
            Concrete::Composed(t, m) => t.feed(v, m, ids, out),
        }
    }

    fn feed_id(&mut self, v: &Vocab, id: i64, out: &mut Vec<u8>) -> Result<Fed, Error> {
        match self {
            Concrete::Literal(t, s) => t.feed_id(v, s, id, out),
            Concrete::Composed(t, m) => t.feed_id(v, m, id, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<usize, Error> {
        match self {
            Concrete::Literal(t, s) => t.finish(s, out),
            Concrete::Composed(t, m) => t.finish(m, out),
        }
    }

    fn reset(&mut self) {
        match self {
            Concrete::Literal(t, s) => t.reset(s),
            Concrete::Composed(t, m) => t.reset(m),
        }
    }

    fn view(&self) -> View {
        match self {
            Concrete::Literal(t, s) => View {
                status: t.status(),
                stop_token: t.stop_token(),
                finished: t.is_finished(),
                held: t.held(s).to_vec(),
                replace: t.replace(),
                include_stop: t.include_stop(),
                stop_ids: t.stop_ids().to_vec(),
                matched: None,
            },
            Concrete::Composed(t, m) => View {
                status: t.status(),
                stop_token: t.stop_token(),
                finished: t.is_finished(),
                held: t.held(m).to_vec(),
                replace: t.replace(),
                include_stop: t.include_stop(),
                stop_ids: t.stop_ids().to_vec(),
                matched: Some(t.matcher().stop_sequence(m).to_vec()),
            },
        }
    }

    fn tail(&self) -> &[u8] {
        match self {
            Concrete::Literal(t, _) => t.tail(),
            Concrete::Composed(t, _) => t.tail(),
        }
    }
}

fn view(a: &AnyTokenStream, set: &LiteralStops) -> View {
    View {
        status: a.status(),
        stop_token: a.stop_token(),
        finished: a.is_finished(),
        held: a.held(set).to_vec(),
        replace: a.replace(),
        include_stop: a.include_stop(),
        stop_ids: a.stop_ids().to_vec(),
        matched: a.matched().map(<[u8]>::to_vec),
    }
}

/// The same error from both streams.
fn same_error(a: &Error, b: &Error) {
    assert_eq!(a.invalid_token(), b.invalid_token(), "{a} / {b}");
    assert_eq!(a.decode_error(), b.decode_error(), "{a} / {b}");
    assert_eq!(a.is_finished(), b.is_finished(), "{a} / {b}");
    assert!(a.invalid_token().is_some() || a.decode_error().is_some() || a.is_finished(), "{a}");
}

/// One call (`None`: `finish`) to both streams: the text and released count, or the error.
fn call(
    any: &mut AnyTokenStream,
    con: &mut Concrete<'_>,
    v: &Vocab,
    set: &LiteralStops,
    ids: Option<&[i64]>,
    by_id: bool,
) -> Result<(Vec<u8>, usize), Error> {
    let (mut a, mut c) = (Vec::new(), Vec::new());
    let results = match ids {
        Some(&[id]) if by_id => {
            let (x, y) = (any.feed_id(v, set, id, &mut a), con.feed_id(v, id, &mut c));
            for (fed, text) in [(&x, &mut a), (&y, &mut c)] {
                if let Ok(Fed { whole: true, .. }) = fed {
                    // The text is the token's own, not appended.
                    assert!(text.is_empty(), "`whole`, and text appended");
                    text.extend_from_slice(v.whole(id).expect("`whole` for a token that is not"));
                }
            }
            assert_eq!(x.as_ref().ok(), y.as_ref().ok(), "feed_id of {id}");
            (x.map(|f| f.released), y.map(|f| f.released))
        }
        Some(ids) => {
            let cannot_fail = any.cannot_fail(v, ids);
            let r = (any.feed(v, set, ids, &mut a), con.feed(v, ids, &mut c));
            assert!(!cannot_fail || r.0.is_ok(), "failed where cannot_fail said it could not");
            r
        }
        None => (any.finish(set, &mut a), con.finish(&mut c)),
    };
    assert_eq!(a, c, "text of {ids:?}");
    match results {
        (Ok(x), Ok(y)) => {
            assert_eq!(x, y, "released by {ids:?}");
            assert!(std::str::from_utf8(&a).is_ok(), "emitted a partial character");
            Ok((a, x))
        }
        (Err(x), Err(y)) => {
            same_error(&x, &y);
            assert!(a.is_empty(), "a failing call emitted text");
            Err(x)
        }
        (x, y) => panic!("{x:?} against {y:?} for {ids:?}"),
    }
}

/// Compares the two streams' state, and the wrapper's report with its accessors.
fn compare(any: &AnyTokenStream, con: &Concrete<'_>, set: &LiteralStops) {
    let v = view(any, set);
    assert_eq!(v, con.view());
    if let Concrete::Literal(t, _) = con {
        assert!(any.literal == *t, "the literal stream differs");
    }
    let reason = match (v.stop_token, v.status) {
        (Some(_), _) => Some("stop_token"),
        (None, Status::Stopped(_)) => Some("stop_sequence"),
        (None, Status::Finished) => Some("end"),
        (None, Status::Open) => v.finished.then_some("end"),
    };
    assert_eq!(any.stop_reason(), reason);
    let stopped = matches!(v.status, Status::Stopped(_));
    let r = any.stop_report(set, Detail::Pending);
    assert_eq!(
        (r.status, r.stopped, r.reason, r.bytes),
        (v.status, stopped || v.stop_token.is_some(), reason, false)
    );
    assert_eq!(r.pending, v.held);
    let r = any.stop_report(set, Detail::Matched);
    assert_eq!(r.matched, v.matched.filter(|_| stopped));
    assert!(!any.engine_ready() || (!any.is_composed() && !v.finished && v.replace));
}

/// A run's totals: text, released, status, stop token.
type Totals = (Vec<u8>, usize, Status, Option<i64>);

fuzz_target!(|input: Input| {
    let vocab = vocab(&input.vocab, input.special, input.strip);
    let n = vocab.len() as i64;
    let drawn = Drawn::new(&input.stops, input.until.as_deref(), &input.skip);
    let (specs, until, skip) = (drawn.specs(), drawn.until(), drawn.skip());
    let literals = drawn.literals();
    let compiled = if input.composed {
        match CompiledStops::composed(&specs, until, &skip) {
            Ok(c) => c,
            Err(e) => {
                assert!(e.invalid_pattern_index().is_some(), "{e}");
                return;
            }
        }
    } else {
        CompiledStops::literal(&literals).unwrap()
    };
    let (include, replace) = (input.include_stop, input.replace);
    let stop_ids: Vec<i64> = input
        .stop_ids
        .iter()
        .take(2)
        .map(|&b| i64::from(b) % n)
        .filter(|&i| vocab.get(i).is_some())
        .collect();
    // A composed stream takes no literal list: any will do.
    let none = LiteralStops::new(Vec::<Vec<u8>>::new()).unwrap();
    let set = compiled.literal_stops().map_or(&none, |s| &**s);
    let mut any = AnyTokenStream::new(&vocab, &compiled, include, replace, &stop_ids).unwrap();
    assert_eq!(any.is_composed(), compiled.is_composed());
    let matcher = compiled.matcher();
    let mut con = match matcher {
        Some(m) => Concrete::Composed(
            TokenStream::composed(&vocab, m, include, replace, &stop_ids).unwrap(),
            m,
        ),
        None => {
            Concrete::Literal(TokenStream::new(&vocab, include, replace, &stop_ids).unwrap(), set)
        }
    };
    let list = matcher.map(|_| List::new(&specs, until, &skip));
    compare(&any, &con, set);

    // Up to 24 ids, now and then one outside the vocabulary.
    let all: Vec<i64> = input.ids.iter().take(24).map(|&b| i64::from(b) % (n + 2) - 1).collect();
    let cuts = bounds(&input.cuts, all.len(), None);
    let (mut text, mut released, mut accepted) = (Vec::new(), 0, Vec::new());
    let calls = cuts.windows(2).map(|w| Some(&all[w[0]..w[1]])).chain([None]);
    for (k, ids) in calls.enumerate() {
        let before = view(&any, set);
        let by_id = input.ways.get(k).is_some_and(|w| w % 2 == 1);
        match call(&mut any, &mut con, &vocab, set, ids, by_id) {
            Err(_) => {
                assert_eq!(view(&any, set), before, "a failing call changed the stream");
                compare(&any, &con, set);
                if ids.is_none() {
                    // Strict, and an incomplete character at the end.
                    return;
                }
                continue;
            }
            Ok((piece, n)) => {
                text.extend_from_slice(&piece);
                released += n;
            }
        }
        compare(&any, &con, set);
        accepted.extend_from_slice(ids.unwrap_or_default());
        let ended = ids.is_none();
        let (raw, stop_at) = token_bytes(&vocab, &accepted, &stop_ids);
        // A stop token ends the text as `finish` does.
        let d = decode(&raw, ended || stop_at.is_some());
        let valid = d.valid(replace);
        let status = any.status();
        if let Some(list) = &list {
            // Composed: output + held is the text so far, while it goes on.
            if status == Status::Open && stop_at.is_none() {
                assert_eq!([&text[..], any.held(set)].concat(), valid, "output + held");
                assert_eq!(con.tail(), &d.tail[..]);
            }
            if !ended {
                continue;
            }
            let hits = list.matches(valid);
            let (cut, win) = list.cut(valid, &hits);
            let mut want = valid[..cut].to_vec();
            if win.is_none() {
                want.extend_from_slice(&own_text(&vocab, &accepted, stop_at, include));
            }
            assert_eq!(text, want, "final output");
            assert_eq!(status, win.map_or(Status::Finished, |w| Status::Stopped(w.stop)));
            assert_eq!(any.stop_token(), stop_at.filter(|_| win.is_none()).map(|j| accepted[j]));
            let matched = win.map_or(&[][..], |w| &valid[w.start..w.end]);
            assert_eq!(any.matched(), Some(matched));
            if win.is_none() {
                assert_eq!(released, all_released(&vocab, &accepted, stop_at, include));
            }
            continue;
        }
        // Literal: §2 over the text so far, after every call.
        let (mut cut, stop) = literal_reading(&literals, include, valid);
        assert!(
            replace || d.invalid.is_none() || stop.is_some(),
            "strict, invalid bytes, no error"
        );
        let closed = ended || stop_at.is_some();
        if closed && stop.is_none() {
            cut = valid.len();
        }
        let mut want = valid[..cut].to_vec();
        if stop.is_none() {
            want.extend_from_slice(&own_text(&vocab, &accepted, stop_at, include));
        }
        assert_eq!(text, want, "output after {} calls", k + 1);
        let want_status = match stop {
            Some(i) => Status::Stopped(i),
            None if closed => Status::Finished,
            None => Status::Open,
        };
        assert_eq!(status, want_status);
        assert_eq!(any.stop_token(), stop_at.filter(|_| stop.is_none()).map(|j| accepted[j]));
        if status == Status::Open {
            assert_eq!((any.held(set), any.literal.tail()), (&valid[cut..], &d.tail[..]), "held");
        }
        if closed && stop.is_none() {
            assert_eq!(released, all_released(&vocab, &accepted, stop_at, include));
        }
    }
    let totals: Totals = (text, released, any.status(), any.stop_token());

    // Closed for good.
    let mut out = Vec::new();
    assert!(any.feed(&vocab, set, &[0], &mut out).unwrap_err().is_finished());
    assert_eq!((any.finish(set, &mut out).ok(), out.len()), (Some(0), 0));
    let _ = con.finish(&mut out);

    // The accepted ids in one call, after a reset.
    any.reset(set);
    con.reset();
    compare(&any, &con, set);
    assert_eq!((any.status(), any.stop_token(), any.is_finished()), (Status::Open, None, false));
    let first = call(&mut any, &mut con, &vocab, set, Some(&accepted), false).unwrap();
    let last = call(&mut any, &mut con, &vocab, set, None, false).unwrap();
    let again = ([first.0, last.0].concat(), first.1 + last.1, any.status(), any.stop_token());
    assert_eq!(again, totals, "reset, then one call");
});

/// A stop token's own text, emitted after the text with `include_stop` (decoded on its own).
fn own_text(vocab: &Vocab, ids: &[i64], stop_at: Option<usize>, include: bool) -> Vec<u8> {
    match stop_at.map(|j| vocab.get(ids[j])) {
        Some(Some(Token::Text(t))) if include => decode(t, true).text,
        _ => Vec::new(),
    }
}

/// Every token released, when no stop sequence fired: all of them, or up to a stop token,
/// which is released when it has no text or with `include_stop`.
fn all_released(vocab: &Vocab, ids: &[i64], stop_at: Option<usize>, include: bool) -> usize {
    match stop_at {
        None => ids.len(),
        Some(j) => {
            let no_text = !matches!(vocab.get(ids[j]), Some(Token::Text(t)) if !t.is_empty());
            j + usize::from(no_text || include)
        }
    }
}
