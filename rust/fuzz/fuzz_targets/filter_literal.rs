//! `Filter` over a literal stop list (`CompiledStops::literal`), the stream every binding
//! drives: decoded text or raw bytes split anywhere (both error modes), each chunk fed the way
//! a binding may feed it (`feed`, or `pass_whole` first). After every chunk the output so far, the stop that fired, the held text and the
//! incomplete character equal a naive reading of the text decoded so far: the stop with the
//! earliest end, then the longest, then the first listed; the cut before it (through it with
//! `include_stop`); while none fired, all but the longest suffix that is a proper prefix of a
//! stop. Also: `pending`, the packed report's state id, a strict-mode error only where the
//! reading has invalid bytes before any stop (and then nothing consumed), `finish` (an
//! incomplete character is U+FFFD, or an error that changes nothing), feeding after `finish`,
//! and `reset` followed by the whole text in one chunk giving the same answer.
#![no_main]

mod common;

use common::{bounds, decode, literal_reading, to_raw, to_text, ALPHABET};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use stopstream::{CompiledStops, Detail, Filter, Status};

#[derive(Arbitrary, Debug)]
struct Input {
    stops: Vec<Vec<u8>>,
    include_stop: bool,
    bytes: bool,
    replace: bool,
    /// How each chunk is fed (see [`feed`]).
    ways: Vec<u8>,
    cuts: Vec<u16>,
    /// Last, so that it takes the rest of the input.
    text: Vec<u8>,
}

/// Feeds `chunk` the way `way` names, as the bindings do: `feed`, or `pass_whole` and then
/// `feed` if it declined. Returns the output, or the error of a failing call.
fn feed(f: &mut Filter, chunk: &[u8], way: u8) -> Result<Vec<u8>, stopstream::Error> {
    let before = (f.status(), f.held().to_vec(), f.tail().to_vec());
    if way % 2 == 1 {
        if f.pass_whole(chunk) {
            return Ok(chunk.to_vec());
        }
        let after = (f.status(), f.held().to_vec(), f.tail().to_vec());
        assert_eq!(before, after, "pass_whole declined and changed the filter");
    }
    let fed = f.feed(chunk)?;
    if fed.whole {
        assert!(fed.head.is_empty() && fed.bytes == chunk, "`whole` but not the input");
    }
    Ok([fed.head, fed.bytes].concat())
}

fuzz_target!(|input: Input| {
    let stops: Vec<Vec<u8>> =
        input.stops.iter().take(8).map(|s| to_text(s, 6)).filter(|s| !s.is_empty()).collect();
    let compiled = CompiledStops::literal(&stops).unwrap();
    let set = compiled.literal_stops().unwrap();
    let (bytes, include) = (input.bytes, input.include_stop);
    let replace = bytes && input.replace;
    let text = if bytes { to_raw(&input.text, 96, &ALPHABET) } else { to_text(&input.text, 96) };
    let cuts = bounds(&input.cuts, text.len(), (!bytes).then_some(&text[..]));
    let mut f = Filter::new(&compiled, bytes, include, replace);
    assert_eq!((f.is_bytes(), f.replace()), (bytes, replace));

    // The bytes accepted so far (a failing call consumes nothing, so its chunk is left out).
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (k, w) in cuts.windows(2).enumerate() {
        let chunk = &text[w[0]..w[1]];
        let before = (f.status(), f.pending());
        let fed = feed(&mut f, chunk, input.ways.get(k).copied().unwrap_or(0));
        let d = decode(&[&seen[..], chunk].concat(), false);
        let valid = d.valid(replace);
        let (cut, stop) = literal_reading(&stops, include, valid);
        match fed {
            Err(e) => {
                assert!(e.decode_error().is_some(), "{e}");
                assert!(!replace && d.invalid.is_some() && stop.is_none(), "raised: {e}");
                assert_eq!((f.status(), f.pending()), before, "a failing call consumed input");
                continue;
            }
            Ok(piece) => {
                assert!(replace || d.invalid.is_none() || stop.is_some(), "strict, no error");
                assert!(std::str::from_utf8(&piece).is_ok(), "emitted a partial character");
                out.extend_from_slice(&piece);
            }
        }
        seen.extend_from_slice(chunk);
        assert!(f.take_owed().is_none(), "a literal stop fires where it completes: owes nothing");
        assert_eq!(f.status().index(), stop, "the stop that fired");
        assert_eq!(&out[..], &valid[..cut], "output after {} chunks", k + 1);
        let (held, tail): (&[u8], &[u8]) = match stop {
            Some(_) => (b"", b""),
            None => (&valid[cut..], &d.tail),
        };
        assert_eq!((f.held(), f.tail()), (held, tail), "held text after {} chunks", k + 1);
        assert_eq!(f.pending(), [held, tail].concat());
        let report = f.stop_report(Detail::Pending);
        assert_eq!((report.status, report.bytes, report.pending), (f.status(), bytes, f.pending()));
        assert_eq!(f.matched(), None, "a literal list reports the item, not a match");
        let word = f.report();
        assert_eq!((word.status, word.bytes, word.composed), (f.status(), bytes, false));
        if f.status() == Status::Open && !include {
            // The held text is a function of the state id (how pulled streams publish it).
            assert_eq!(set.held(f.state_id().unwrap()), f.held());
        }
    }

    let d = decode(&seen, true);
    let valid = d.valid(replace);
    // The end releases what was held.
    let (cut, stop) = match literal_reading(&stops, include, valid) {
        (_, None) => (valid.len(), None),
        reading => reading,
    };
    let finished = f.finish().map(<[u8]>::to_vec);
    if !replace && d.invalid.is_some() && stop.is_none() {
        // Strict: the incomplete character at the end is an error that changes nothing.
        let e = finished.unwrap_err();
        assert!(e.decode_error().is_some(), "{e}");
        assert_eq!((f.status(), f.tail().is_empty()), (Status::Open, false));
        return;
    }
    out.extend_from_slice(&finished.unwrap());
    assert_eq!(&out[..], &valid[..cut], "final output");
    assert_eq!(f.status(), stop.map_or(Status::Finished, Status::Stopped));
    assert!(f.pending().is_empty() && f.take_owed().is_none());
    if !bytes {
        assert_eq!(compiled.truncate(valid, include), (cut, stop.map(|i| (i, None))));
    }
    // Closed for good: more input is an error, another finish releases nothing.
    assert!(f.feed(b"a").unwrap_err().is_finished());
    assert_eq!(f.finish().unwrap(), b"");

    // The same text in one chunk after a reset.
    f.reset();
    assert_eq!((f.status(), f.pending()), (Status::Open, Vec::new()));
    let mut again = feed(&mut f, &seen, 0).unwrap();
    again.extend_from_slice(f.finish().unwrap());
    assert_eq!((again, f.status().index()), (out, stop), "reset, then one chunk");
});
