//! `feed_batch`, the batched token feeding behind `stopstream.feed_batch` (contract §7): up to 4
//! token streams over two vocabularies (one with the leading-space rule and fuzzed tokens),
//! each literal or composed, replace or strict, with or without a stop token id, fed batch
//! after batch; an entry may name a stream another entry of the batch names too, carry ids
//! outside its vocabulary, or feed a stream finished between batches; a batch takes the
//! one-pass `safe` path when it may (each stream given once, none able to fail). The naive
//! reading is the contract's: feeding each entry alone, in order, to a copy of its stream:
//!
//! * when every entry succeeds alone, the batch succeeds, each entry's text (the token's own
//!   text when the batch says `whole`) and released count equal the lone feed's, and every
//!   stream ends as its copy did (the same status, stop token, held and matched text and
//!   report, the same literal stream, and the same answer to more ids and `finish`);
//! * otherwise the batch fails naming the entry that failed first alone, with the same error,
//!   and no stream changes.
#![no_main]

mod common;

use common::{vocab, Drawn, StopInput};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use stopstream::host::{feed_batch, AnyTokenStream, BatchEntry};
use stopstream::{CompiledStops, Detail, Fed, LiteralStops, TokenStream, Vocab};

#[derive(Arbitrary, Debug)]
struct Stream {
    /// The second vocabulary.
    other: bool,
    composed: bool,
    include_stop: bool,
    replace: bool,
    stop_id: Option<u8>,
}

#[derive(Arbitrary, Debug)]
struct Batch {
    /// A stream to finish before the batch.
    finish: Option<u8>,
    safe: bool,
    /// (stream, ids) per entry.
    entries: Vec<(u8, Vec<u8>)>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    vocab: Vec<Vec<u8>>,
    special: Option<u8>,
    stops: Vec<StopInput>,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
    streams: Vec<Stream>,
    /// Last, so that it takes the rest of the input.
    batches: Vec<Batch>,
}

/// What a stream shows and what it does next, for comparing streams: its status, stop token,
/// held and matched text and report, then on a copy the result of feeding `probe` and
/// finishing. (Its debug form is no measure: a copy leaves out the regex engines' scratch.)
fn state(s: &AnyTokenStream, v: &Vocab, set: &LiteralStops, probe: &[i64]) -> String {
    let report = s.stop_report(set, Detail::Pending);
    let now = (s.status(), s.stop_token(), s.is_finished(), s.held(set), s.matched(), report);
    let (mut copy, mut out) = (s.clone(), Vec::new());
    let fed = copy.feed(v, set, probe, &mut out).map_err(|e| e.to_string());
    let end = copy.finish(set, &mut out).map_err(|e| e.to_string());
    format!("{now:?} then {fed:?} {end:?} {out:?} {:?} {:?}", copy.status(), copy.stop_token())
}

/// [`state`] of every stream, with two probes: every id of its vocabulary, and every id whose
/// text is whole characters; and the literal streams themselves.
fn states(
    streams: &[AnyTokenStream],
    config: &[(&Vocab, &LiteralStops)],
) -> Vec<(String, String, TokenStream)> {
    streams
        .iter()
        .zip(config)
        .map(|(s, &(v, set))| {
            let ids: Vec<i64> = (0..v.len() as i64).filter(|&i| v.get(i).is_some()).collect();
            let whole: Vec<i64> = ids.iter().copied().filter(|&i| v.whole(i).is_some()).collect();
            (state(s, v, set, &ids), state(s, v, set, &whole), s.literal.clone())
        })
        .collect()
}

fuzz_target!(|input: Input| {
    let vocabs = [vocab(&[], None, false), vocab(&input.vocab, input.special, true)];
    let drawn = Drawn::new(&input.stops, input.until.as_deref(), &input.skip);
    let literal = CompiledStops::literal(&drawn.literals()).unwrap();
    let composed = CompiledStops::composed(&drawn.specs(), drawn.until(), &drawn.skip()).ok();
    // A composed stream takes no literal list: any will do.
    let none = LiteralStops::new(Vec::<Vec<u8>>::new()).unwrap();
    let mut streams = Vec::new();
    // Per stream: its vocabulary and the literal list its entries pass (unused when composed).
    let mut config: Vec<(&Vocab, &LiteralStops)> = Vec::new();
    for s in input.streams.iter().take(4) {
        let v = &vocabs[usize::from(s.other)];
        let stops = match &composed {
            Some(c) if s.composed => c,
            _ => &literal,
        };
        let stop_ids: Vec<i64> = s
            .stop_id
            .map(|b| i64::from(b) % v.len() as i64)
            .filter(|&i| v.get(i).is_some())
            .into_iter()
            .collect();
        streams.push(AnyTokenStream::new(v, stops, s.include_stop, s.replace, &stop_ids).unwrap());
        config.push((v, stops.literal_stops().map_or(&none, |s| &**s)));
    }
    if streams.is_empty() {
        return;
    }

    for batch in input.batches.iter().take(8) {
        if let Some(k) = batch.finish {
            let k = usize::from(k) % streams.len();
            let _ = streams[k].finish(config[k].1, &mut Vec::new());
        }
        // The entries: stream, and ids (now and then one outside the stream's vocabulary).
        let plan: Vec<(usize, Vec<i64>)> = batch
            .entries
            .iter()
            .take(6)
            .map(|(slot, ids)| {
                let slot = usize::from(*slot) % streams.len();
                let n = config[slot].0.len() as i64;
                (slot, ids.iter().take(4).map(|&b| i64::from(b) % (n + 2) - 1).collect())
            })
            .collect();

        // Each entry alone, in order, on copies.
        let mut alone = streams.clone();
        let mut want = Vec::new();
        let mut failed = None;
        for (i, (slot, ids)) in plan.iter().enumerate() {
            let (v, set) = config[*slot];
            let mut out = Vec::new();
            match alone[*slot].feed(v, set, ids, &mut out) {
                Ok(n) => want.push((out, n)),
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }

        // The batch.
        let flat: Vec<i64> = plan.iter().flat_map(|(_, ids)| ids.iter().copied()).collect();
        let mut start = 0;
        let mut entries: Vec<BatchEntry<'_>> = plan
            .iter()
            .map(|(slot, ids)| {
                start += ids.len();
                BatchEntry {
                    vocab: config[*slot].0,
                    set: config[*slot].1,
                    slot: *slot,
                    ids: start - ids.len()..start,
                    out: 0..0,
                    fed: Fed { released: 0, whole: false },
                }
            })
            .collect();
        let mut once = vec![0; streams.len()];
        plan.iter().for_each(|(slot, _)| once[*slot] += 1);
        let safe = batch.safe
            && once.iter().all(|&k| k <= 1)
            && plan.iter().all(|(slot, ids)| streams[*slot].cannot_fail(config[*slot].0, ids));
        let before = states(&streams, &config);
        let result = {
            let mut refs: Vec<&mut AnyTokenStream> = streams.iter_mut().collect();
            feed_batch(&mut entries, &flat, &mut refs, safe)
        };
        match (result, failed) {
            (Ok(out), None) => {
                for (i, (e, (text, n))) in entries.iter().zip(&want).enumerate() {
                    let got = if e.fed.whole {
                        assert!(e.out.is_empty(), "entry {i}: `whole`, and text written");
                        let [id] = flat[e.ids.clone()] else {
                            panic!("entry {i}: `whole` for many ids")
                        };
                        e.vocab.whole(id).expect("`whole` for a token that is not").to_vec()
                    } else {
                        out[e.out.clone()].to_vec()
                    };
                    assert_eq!((&got, e.fed.released), (text, *n), "entry {i} of {plan:?}");
                }
                let (got, want) = (states(&streams, &config), states(&alone, &config));
                assert_eq!(got, want, "the streams after {plan:?}");
            }
            (Err((i, e)), Some((j, alone_e))) => {
                assert!(!safe, "the safe path failed");
                assert_eq!(i, j, "the failing entry of {plan:?}");
                assert_eq!(
                    (e.invalid_token(), e.decode_error(), e.is_finished()),
                    (alone_e.invalid_token(), alone_e.decode_error(), alone_e.is_finished()),
                    "the error of {plan:?}"
                );
                assert_eq!(states(&streams, &config), before, "a failing batch changed a stream");
            }
            (Ok(_), Some((j, e))) => panic!("entry {j} fails alone ({e}), the batch succeeded"),
            (Err((i, e)), None) => {
                panic!("the batch failed at entry {i} ({e}), every entry alone succeeds")
            }
        }
    }
});
