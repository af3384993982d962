//! The literal path against the contract written the slow and obvious way: the stop that
//! fires, the holdback, and the cut, over text and bytes split anywhere (the public API only).

use proptest::prelude::*;
use stopstream::{ByteOut, ByteStream, LiteralStops, Status, TextStream};

/// The contract, written the slow and obvious way: the first end position at which any stop
/// ends, the longest stop there, the first listed among equals.
fn naive_first_stop(stops: &[Vec<u8>], text: &[u8]) -> Option<(usize, usize)> {
    for end in 1..=text.len() {
        let mut best: Option<usize> = None;
        for (i, s) in stops.iter().enumerate() {
            if text[..end].ends_with(s) && best.is_none_or(|b| s.len() > stops[b].len()) {
                best = Some(i);
            }
        }
        if let Some(b) = best {
            return Some((b, end));
        }
    }
    None
}

fn naive_holdback(stops: &[Vec<u8>], text: &[u8]) -> usize {
    (0..=text.len())
        .rev()
        .find(|&k| stops.iter().any(|s| k < s.len() && s.starts_with(&text[text.len() - k..])))
        .unwrap_or(0)
}

fn alphabet() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "<", "/", "\n", "é", "€", "中", "😀", "\u{301}"])
        .prop_map(str::to_owned)
}

fn word(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(alphabet(), 1..=max).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn matches_naive(
        stops in prop::collection::vec(word(4), 0..8),
        text in prop::collection::vec(alphabet(), 0..40),
        cuts in prop::collection::vec(0usize..40, 0..6),
        include in any::<bool>(),
        budget in prop::sample::select(vec![1usize, 64, 1 << 16]),
    ) {
        let text: String = text.concat();
        let stops_b: Vec<Vec<u8>> = stops.iter().map(|s| s.as_bytes().to_vec()).collect();
        let set = LiteralStops::with_dense_budget(&stops_b, budget).unwrap();
        // Split at character boundaries.
        let mut bounds: Vec<usize> = cuts
            .iter()
            .map(|&c| text.char_indices().nth(c).map_or(text.len(), |(i, _)| i))
            .collect();
        bounds.push(0);
        bounds.push(text.len());
        bounds.sort_unstable();
        let tb = text.as_bytes();
        let first = naive_first_stop(&stops_b, tb);
        let mut st = TextStream::new(include);
        let mut out = Vec::new();
        for w in bounds.windows(2) {
            let chunk = &tb[w[0]..w[1]];
            let held = st.held(&set).to_vec();
            let e = st.feed(&set, chunk).unwrap();
            out.extend_from_slice(&held[..e.from_held]);
            out.extend_from_slice(&chunk[..e.from_input]);
            if st.status() == Status::Open {
                // Minimal holdback: exactly the longest suffix that is a proper stop prefix.
                let seen = &tb[..w[1]];
                let want = if include { seen.len() } else { seen.len() - naive_holdback(&stops_b, seen) };
                prop_assert_eq!(out.len(), want);
                prop_assert_eq!(&out[..], &seen[..want]);
            }
        }
        out.extend_from_slice(st.finish(&set));
        match first {
            None => {
                prop_assert_eq!(st.status(), Status::Finished);
                prop_assert_eq!(&out[..], tb);
            }
            Some((p, end)) => {
                prop_assert_eq!(st.status(), Status::Stopped(p));
                let cut = if include { end } else { end - stops_b[p].len() };
                prop_assert_eq!(&out[..], &tb[..cut]);
            }
        }
        let (n, p) = set.truncate(tb, include);
        prop_assert_eq!(&tb[..n], &out[..]);
        prop_assert_eq!(p, first.map(|f| f.0));
    }

    #[test]
    fn bytes_replace_matches_lossy_decoding(
        stops in prop::collection::vec(word(3), 0..5),
        raw in prop::collection::vec(prop::sample::select(vec![
            b"a".to_vec(), b"<".to_vec(), "é".as_bytes().to_vec(), "😀".as_bytes().to_vec(),
            b"\xff".to_vec(), b"\xe2\x82".to_vec(), b"\xf0\x9f".to_vec(), b"\xed\xa0\x80".to_vec(),
        ]), 0..20),
        cuts in prop::collection::vec(0usize..60, 0..8),
    ) {
        let raw: Vec<u8> = raw.concat();
        let mut stops_b: Vec<Vec<u8>> = stops.iter().map(|s| s.as_bytes().to_vec()).collect();
        stops_b.push("\u{FFFD}b".as_bytes().to_vec());
        let set = LiteralStops::new(&stops_b).unwrap();
        let decoded = String::from_utf8_lossy(&raw).into_owned();
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(raw.len())).collect();
        bounds.push(0);
        bounds.push(raw.len());
        bounds.sort_unstable();
        let mut st = ByteStream::new(false, true);
        let mut out = Vec::new();
        for w in bounds.windows(2) {
            let chunk = &raw[w[0]..w[1]];
            let mut buf = Vec::new();
            match st.feed(&set, chunk, &mut buf).unwrap() {
                ByteOut::Input => out.extend_from_slice(chunk),
                ByteOut::Buffer => out.extend_from_slice(&buf),
            }
            prop_assert!(std::str::from_utf8(&out).is_ok());
        }
        st.finish(&set, &mut out).unwrap();
        let (n, _) = set.truncate(decoded.as_bytes(), false);
        prop_assert_eq!(&out[..], &decoded.as_bytes()[..n]);
    }
}

/// Bytes for the long-input tests: frequent ones (no prefilter can use them), rare ones
/// (chosen as start or rare bytes), and a shared first byte.
fn long_alphabet() -> impl Strategy<Value = u8> {
    prop::sample::select(b"ee t a<<#|U:\nE".to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Long inputs take the prefilter (start bytes or rare bytes) or the plain table walk;
    /// every feed's output must still be the minimal-holdback one and the winner exact.
    #[test]
    fn long_inputs_match_naive(
        stops in prop::collection::vec(prop::collection::vec(long_alphabet(), 1..6), 1..24),
        text in prop::collection::vec(long_alphabet(), 0..700),
        planted in prop::collection::vec((0usize..24, 0usize..700), 0..3),
        cuts in prop::collection::vec(0usize..700, 0..5),
        include in any::<bool>(),
        budget in prop::sample::select(vec![1usize, 64, 1 << 16]),
    ) {
        // Mostly filler, so that skipping happens, with a few stops (or parts of them)
        // planted anywhere, including right at chunk ends.
        let mut text: Vec<u8> =
            text.iter().map(|&b| if b"<#|U:\nE".contains(&b) { b'e' } else { b }).collect();
        for &(k, at) in &planted {
            let stop = &stops[k % stops.len()];
            let at = at.min(text.len());
            let part = if k % 3 == 0 { &stop[..stop.len().div_ceil(2)] } else { &stop[..] };
            text.splice(at..at, part.iter().copied());
        }
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(text.len())).collect();
        for &(_, at) in &planted {
            bounds.push(at.min(text.len()));
        }
        bounds.push(0);
        bounds.push(text.len());
        bounds.sort_unstable();
        let set = LiteralStops::with_dense_budget(&stops, budget).unwrap();
        let first = naive_first_stop(&stops, &text);
        let mut st = TextStream::new(include);
        let mut out = Vec::new();
        for w in bounds.windows(2) {
            let chunk = &text[w[0]..w[1]];
            let held = st.held(&set).to_vec();
            let e = st.feed(&set, chunk).unwrap();
            out.extend_from_slice(&held[..e.from_held]);
            out.extend_from_slice(&chunk[..e.from_input]);
            if st.status() == Status::Open {
                let seen = &text[..w[1]];
                let held = if include { 0 } else { naive_holdback(&stops, seen) };
                let want = seen.len() - held;
                prop_assert_eq!(&out[..], &seen[..want]);
            }
        }
        out.extend_from_slice(st.finish(&set));
        let cut = first
            .map_or(text.len(), |(p, end)| if include { end } else { end - stops[p].len() });
        prop_assert_eq!(&out[..], &text[..cut]);
        prop_assert_eq!(st.status(), first.map_or(Status::Finished, |f| Status::Stopped(f.0)));
        prop_assert_eq!(set.truncate(&text, include), (cut, first.map(|f| f.0)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Many stops that start like words and hold one rare marker byte each (the rare-byte
    /// path with large back offsets, dense and sparse layouts), over long texts fed in big
    /// and small chunks.
    #[test]
    fn many_marked_stops_match_naive(
        stops in prop::collection::vec(
            (
                prop::collection::vec(prop::sample::select(b"eta ".to_vec()), 0..6),
                prop::sample::select(b"<#|".to_vec()),
                prop::collection::vec(prop::sample::select(b"eta ".to_vec()), 0..3),
            ),
            1..300,
        ),
        text in prop::collection::vec(prop::sample::select(b"eta <#|".to_vec()), 0..600),
        cuts in prop::collection::vec(0usize..600, 0..4),
        budget in prop::sample::select(vec![1usize, 256, 1 << 20]),
    ) {
        let stops: Vec<Vec<u8>> = stops
            .into_iter()
            .map(|(mut a, m, b)| {
                a.push(m);
                a.extend(b);
                a
            })
            .collect();
        let set = LiteralStops::with_dense_budget(&stops, budget).unwrap();
        let first = naive_first_stop(&stops, &text);
        let cut = first.map_or(text.len(), |(p, end)| end - stops[p].len());
        prop_assert_eq!(set.truncate(&text, false), (cut, first.map(|f| f.0)));
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(text.len())).collect();
        bounds.push(0);
        bounds.push(text.len());
        bounds.sort_unstable();
        let mut st = TextStream::new(false);
        let mut out = Vec::new();
        for w in bounds.windows(2) {
            let chunk = &text[w[0]..w[1]];
            let held = st.held(&set).to_vec();
            let e = st.feed(&set, chunk).unwrap();
            out.extend_from_slice(&held[..e.from_held]);
            out.extend_from_slice(&chunk[..e.from_input]);
            if st.status() == Status::Open {
                let seen = &text[..w[1]];
                prop_assert_eq!(out.len(), seen.len() - naive_holdback(&stops, seen));
            }
        }
        out.extend_from_slice(st.finish(&set));
        prop_assert_eq!(&out[..], &text[..cut]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Strict mode: a stop inside the valid prefix wins; otherwise invalid input fails in
    /// the call that sees it, and that call changes nothing.
    #[test]
    fn bytes_strict_fails_exactly_when_no_stop_precedes_the_error(
        stops in prop::collection::vec(word(3), 0..4),
        raw in prop::collection::vec(prop::sample::select(vec![
            b"a".to_vec(), b"<".to_vec(), "\u{e9}".as_bytes().to_vec(), b"\xff".to_vec(),
            b"\xe2\x82".to_vec(), b"\xe2\x82\xac".to_vec(), b"\xdb".to_vec(), b"\x80".to_vec(),
        ]), 0..16),
        cuts in prop::collection::vec(0usize..40, 0..6),
    ) {
        let raw: Vec<u8> = raw.concat();
        let set = LiteralStops::new(&stops).unwrap();
        let valid = std::str::from_utf8(&raw).map_or_else(|e| e.valid_up_to(), |_| raw.len());
        let (cut, stop) = set.truncate(&raw[..valid], false);
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(raw.len())).collect();
        bounds.push(0);
        bounds.push(raw.len());
        bounds.sort_unstable();
        let mut st = ByteStream::new(false, false);
        let mut out = Vec::new();
        let mut failed = false;
        for w in bounds.windows(2) {
            let before = st;
            let mark = out.len();
            match st.feed(&set, &raw[w[0]..w[1]], &mut out) {
                Ok(ByteOut::Input) => out.extend_from_slice(&raw[w[0]..w[1]]),
                Ok(ByteOut::Buffer) => {}
                Err(e) => {
                    let d = e.decode_error().unwrap();
                    prop_assert!(d.start < d.end && d.end <= d.object.len());
                    prop_assert_eq!(st, before);
                    prop_assert_eq!(out.len(), mark);
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            prop_assert!(stop.is_none());
        } else if stop.is_some() || valid == raw.len() {
            st.finish(&set, &mut out).unwrap();
            prop_assert_eq!(&out[..], &raw[..cut]);
        } else {
            prop_assert!(st.finish(&set, &mut out).is_err());
        }
    }
}
