//! `Filter` over a composed stop list (`CompiledStops::composed`: literal stops with their own
//! include flags, regex stops, `skip_until`, skip regions), decoded text or raw bytes split
//! anywhere (both error modes), each chunk fed the way a binding may feed it (`feed`, or
//! `pass_whole` first). Checked against the naive reading of `naive.rs` over the text:
//!
//! * at the end: the output, the stop that fired and the text it matched; strict decoding ends
//!   the text at the first invalid bytes (contract §9.9), and `finish` fails, changing nothing,
//!   when that end fires no stop;
//! * a strict-mode error only where the text up to the invalid bytes, ended there, fires no
//!   stop, and then nothing is consumed; an owed error only with a stop ending right there;
//! * after every chunk: output plus held text plus the incomplete character is the input so
//!   far; the stop fired no earlier than its match ended and no later than the character after
//!   it arrived (with literal stops and markers alone: exactly when it completed), and did not
//!   wait for that character when no next character (nor the end) could change the winner (one
//!   character of each class the stops tell apart is tried); nothing is held before the
//!   `skip_until` marker or in a region, nor from before the last region; the held text covers
//!   the longest suffix that is a proper prefix of a flag-off literal and every match of a
//!   flag-off stop in the text that is still in progress, and with regex stops is no longer
//!   than the longest flag-off match (`max_len`); without regex stops it is exactly that
//!   suffix;
//! * `reset`, then the whole input in one chunk, gives the same answer.
#![no_main]

mod common;
mod naive;

use common::{bounds, decode, letters, naive_holdback, to_raw, Drawn, StopInput, LETTERS};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use naive::{List, Zone};
use stopstream::{CompiledStops, Detail, Error, Filter, Status};

/// One character of each class the stops and markers tell apart (`x`: any other word
/// character), to try as the next character.
const NEXT: [&str; 10] = ["a", "b", "<", ">", " ", "\n", "é", "😀", "\u{FFFD}", "x"];

#[derive(Arbitrary, Debug)]
struct Input {
    stops: Vec<StopInput>,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: bool,
    replace: bool,
    /// How each chunk is fed (see [`feed`]).
    ways: Vec<u8>,
    cuts: Vec<u16>,
    /// Last, so that it takes the rest of the input.
    text: Vec<u8>,
}

/// The filter after one chunk.
struct Snapshot {
    /// The text so far (decoded, without the incomplete character; under strict decoding up
    /// to invalid bytes).
    text: Vec<u8>,
    out_len: usize,
    held: Vec<u8>,
    status: Status,
    owed: bool,
}

/// Feeds `chunk` as a binding may: `feed`, or `pass_whole` and then `feed` if it declined.
fn feed(f: &mut Filter, chunk: &[u8], way: u8) -> Result<Vec<u8>, Error> {
    let before = (f.status(), f.pending());
    if way % 2 == 1 {
        if f.pass_whole(chunk) {
            return Ok(chunk.to_vec());
        }
        assert_eq!((f.status(), f.pending()), before, "pass_whole declined and changed the filter");
    }
    let fed = f.feed(chunk)?;
    if fed.whole {
        assert!(fed.head.is_empty() && fed.bytes == chunk, "`whole` but not the input");
    }
    Ok([fed.head, fed.bytes].concat())
}

fuzz_target!(|input: Input| {
    let drawn = Drawn::new(&input.stops, input.until.as_deref(), &input.skip);
    let (specs, until, skip) = (drawn.specs(), drawn.until(), drawn.skip());
    let compiled = match CompiledStops::composed(&specs, until, &skip) {
        Ok(c) => c,
        Err(e) => {
            assert!(e.invalid_pattern_index().is_some_and(|i| i < specs.len()), "{e}");
            return;
        }
    };
    let list = List::new(&specs, until, &skip);
    let regex = list.has_regex();

    let bytes = input.bytes;
    let replace = bytes && input.replace;
    let raw = if bytes { to_raw(&input.text, 48, &LETTERS) } else { letters(&input.text, 48) };
    let cuts = bounds(&input.cuts, raw.len(), (!bytes).then_some(&raw[..]));
    let mut f = Filter::new(&compiled, bytes, false, replace);

    let mut seen = Vec::new();
    let mut out = Vec::new();
    let mut snapshots = Vec::new();
    for (k, w) in cuts.windows(2).enumerate() {
        let chunk = &raw[w[0]..w[1]];
        let before = (f.status(), f.pending());
        let fed = feed(&mut f, chunk, input.ways.get(k).copied().unwrap_or(0));
        let d = decode(&[&seen[..], chunk].concat(), false);
        let now = d.valid(replace).to_vec();
        match fed {
            Err(e) => {
                // The text ends at the invalid bytes; that end must fire no stop.
                assert!(e.decode_error().is_some(), "{e}");
                assert!(!replace && d.invalid.is_some(), "raised without invalid bytes: {e}");
                let hits = list.matches(&now);
                assert_eq!(list.cut(&now, &hits).1, None, "raised, but a stop fires first");
                assert_eq!((f.status(), f.pending()), before, "a failing call consumed input");
                continue;
            }
            Ok(piece) => {
                assert!(std::str::from_utf8(&piece).is_ok(), "emitted a partial character");
                out.extend_from_slice(&piece);
            }
        }
        seen.extend_from_slice(chunk);
        let owed = f.take_owed();
        if let Some(e) = &owed {
            assert!(e.decode_error().is_some() && !replace && d.invalid.is_some(), "owed {e}");
        }
        let status = f.status();
        if !replace && d.invalid.is_some() {
            assert!(
                matches!(status, Status::Stopped(_)),
                "invalid bytes, and neither an error nor a stop"
            );
        }
        let held = f.held().to_vec();
        if status == Status::Open {
            assert_eq!([&out[..], &held[..]].concat(), now, "output + held is not the input");
            assert_eq!(f.tail(), &d.tail[..]);
        } else {
            assert!(held.is_empty() && f.tail().is_empty());
        }
        assert_eq!(f.pending(), [&held[..], f.tail()].concat());
        let report = f.stop_report(Detail::Pending);
        assert_eq!((report.status, report.bytes, report.pending), (status, bytes, f.pending()));
        assert!(f.report().composed && f.state_id().is_none());
        snapshots.push(Snapshot {
            text: now,
            out_len: out.len(),
            held,
            status,
            owed: owed.is_some(),
        });
    }

    // The whole text: under strict decoding it ends at the first invalid bytes (here also an
    // incomplete character at the end).
    let d = decode(&seen, true);
    let t = d.valid(replace).to_vec();
    let hits = list.matches(&t);
    let (cut, win) = list.cut(&t, &hits);
    let finished = f.finish().map(<[u8]>::to_vec);
    if !replace && d.invalid.is_some() && win.is_none() {
        let e = finished.unwrap_err();
        assert!(e.decode_error().is_some(), "{e}");
        assert_eq!(f.status(), Status::Open, "a failing finish changed the filter");
    } else {
        out.extend_from_slice(&finished.unwrap());
        let owed = f.take_owed();
        if owed.is_some() {
            assert!(!replace && win.is_some_and(|w| w.end == t.len()), "owed without its stop");
        }
        assert_eq!(&out[..], &t[..cut], "final output");
        assert_eq!(f.status(), win.map_or(Status::Finished, |w| Status::Stopped(w.stop)));
        let matched = win.map(|w| t[w.start..w.end].to_vec());
        assert_eq!(f.matched(), Some(matched.as_deref().unwrap_or_default()));
        assert_eq!(f.stop_report(Detail::Matched).matched, matched);
        assert!(f.pending().is_empty());
        if !bytes {
            let one_shot = compiled.truncate(&t, false);
            assert_eq!(one_shot, (cut, win.map(|w| (w.stop, matched))), "truncate");
        }
        assert!(f.feed(b"a").unwrap_err().is_finished());
        assert_eq!(f.finish().unwrap(), b"");
    }

    for s in &snapshots {
        let n = s.text.len();
        assert_eq!(&s.text[..], &t[..n], "the reading's texts disagree");
        if let Status::Stopped(i) = s.status {
            let w = win.expect("stopped, but the reading fires no stop");
            assert_eq!((i, s.out_len), (w.stop, cut), "the stop or its cut");
            assert!(w.end <= n, "fired before its match ended");
            assert!(!s.owed || w.end == n, "owed an error, but the stop ended elsewhere");
            continue;
        }
        if let Some(w) = win {
            assert!(n <= w.end, "the character after the stop came, and it did not fire");
            assert!(regex || n < w.end, "a literal stop completed, and it did not fire");
            if n == w.end {
                // Whatever comes next (or the end), the winner is the same: it had to fire.
                let winner = |text: &[u8]| list.cut(text, &list.matches(text)).1;
                let now = winner(&s.text);
                let certain = now.is_some_and(|w| w.end <= n)
                    && NEXT.iter().all(|c| winner(&[&s.text[..], c.as_bytes()].concat()) == now);
                assert!(!certain, "the winner {now:?} was settled, and it did not fire");
            }
        }
        let held = s.held.len();
        match list.zone(&s.text) {
            Zone::Before | Zone::Inside => {
                assert_eq!(held, 0, "held before the marker or in a region")
            }
            Zone::Outside(from) => {
                assert!(held <= n - from, "held text from before the last region");
                let partial = naive_holdback(&list.held_literals(), &s.text[from..]);
                let region = list.next_region(&t, from);
                let attempts = hits
                    .iter()
                    .filter(|h| !list.include(h.stop) && from <= h.start && h.start < n)
                    .filter(|h| n <= h.end && h.end <= region)
                    .map(|h| n - h.start);
                let least = attempts.fold(partial, usize::max);
                assert!(held >= least, "leaked: held {held} bytes, {least} could still be a stop");
                if !regex {
                    assert_eq!(held, least, "held more than the holdback");
                } else if let Some(most) = list.held_max() {
                    let chars = std::str::from_utf8(&s.held).unwrap().chars().count();
                    assert!(
                        chars <= most,
                        "held {chars} characters, no flag-off match is longer than {most}"
                    );
                }
            }
        }
    }

    // The same input in one chunk after a reset.
    f.reset();
    assert_eq!(
        (f.status(), f.pending(), f.take_owed().is_none()),
        (Status::Open, Vec::new(), true)
    );
    let one = feed(&mut f, &seen, 0);
    let again = one.and_then(|mut o| {
        o.extend_from_slice(f.finish()?);
        Ok(o)
    });
    match again {
        Ok(again) => assert_eq!(
            (again, f.status()),
            (out, win.map_or(Status::Finished, |w| Status::Stopped(w.stop)))
        ),
        Err(e) => assert!(!replace && d.invalid.is_some() && win.is_none(), "{e}"),
    }
});
