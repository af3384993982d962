//! Stop sequences for streaming text: exact, incremental, with minimal holdback.
//!
//! Text arrives in chunks. A [`StopSet`] (the compiled stop list, immutable and shared) and a
//! small per-stream state ([`TextStream`] for decoded text, [`ByteStream`] for raw UTF-8 bytes)
//! decide after every chunk how much of the text is certain to be output:
//!
//! * the stop that fires is the one ending earliest in the text; among stops ending at the same
//!   place the longest wins, then the first listed;
//! * the output is cut right before that stop (or right after it, with `include_stop`);
//! * until then, exactly the longest suffix of the text that is a proper prefix of some stop is
//!   held back: emitting less would stall the client, emitting more would leak part of a stop.
//!
//! The answer never depends on how the text was split into chunks.
//!
//! Serving engines hold token ids rather than text: a [`Vocab`] and a [`TokenStream`] decode
//! ids and match in one pass (over a [`ByteStream`], with either matcher: literal stops or the
//! composed [`Matcher`]), and report how many input tokens the emitted text covers, so that
//! text, ids and logprobs stay aligned.
//!
//! ```
//! use stopstream::{StopSet, TextStream, Status};
//!
//! let set = StopSet::new(["</answer>"]).unwrap();
//! let mut stream = TextStream::new(false);
//! let mut out = Vec::new();
//! for chunk in ["Hello </ans", "wer> tail"] {
//!     let held = stream.held(&set);
//!     let emit = stream.feed(&set, chunk.as_bytes()).unwrap();
//!     out.extend_from_slice(&held[..emit.from_held]);
//!     out.extend_from_slice(&chunk.as_bytes()[..emit.from_input]);
//! }
//! assert_eq!(out, b"Hello ");
//! assert_eq!(stream.status(), Status::Stopped(0));
//! ```
//!
//! # Performance choices
//!
//! * Per chunk the work is one pass of a byte-class DFA (one table load per byte) whatever the
//!   number of stops; no per-chunk allocation when the chunk passes through whole.
//! * Per-stream state is a state id plus a status (and up to 3 carried bytes for raw input): the
//!   held-back text is read out of the stop it is a prefix of, never buffered.
//! * Stop lists are compiled once and shared ([`StopSet::cached`]), because a gateway builds a
//!   filter per request, usually with the same few stops.
//! * Long inputs (64 bytes or more) skip ahead with `memchr` to up to three rare bytes that
//!   every stop contains, then run the automaton from the earliest position a stop could start
//!   at; without such bytes they take a plain table walk. Both keep the exact winner and the
//!   minimal holdback, and run at least as fast as the `aho-corasick` crate on the same bytes
//!   (`rust/examples/throughput.rs`).

// `unsafe` appears only in the Python bindings: their try-lock (`lock.rs`) and reading a `str`
// in place (`py/convert.rs`), each with its safety argument.
#![deny(unsafe_code)]

mod automaton;
mod error;
mod matcher;
mod prefilter;
mod regex;
mod region;
pub mod sse;
mod stream;
mod tokens;
mod utf8;

#[cfg(any(feature = "python", test))]
mod lock;
#[cfg(feature = "python")]
mod py;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::automaton::{Hit, Step};
pub use crate::error::{DecodeError, Error};
pub use crate::matcher::{regex_max_len, MatchStream, Matcher, StopKind, StopSpec};
pub use crate::stream::{ByteOut, ByteStream, Emit, Status, TextMatcher, TextStream};
pub use crate::tokens::{Fed, Token, TokenMatcher, TokenStream, Vocab};
pub use crate::utf8::encode_code_points;

use crate::automaton::Automaton;

/// A compiled stop list. Immutable: one instance serves any number of streams on any number of
/// threads.
#[derive(Debug)]
pub struct StopSet {
    automaton: Automaton,
}

impl StopSet {
    /// Compiles a stop list given as UTF-8 bytes (lone surrogates may be encoded as three bytes
    /// the way CPython's `surrogatepass` does). An empty stop is an error naming its position;
    /// duplicates are allowed (the first listed wins).
    pub fn new<I, B>(stops: I) -> Result<StopSet, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        Ok(StopSet { automaton: Automaton::new(Self::patterns(stops)?) })
    }

    /// Like [`StopSet::new`] with at most `entries` dense transitions (at least the root's
    /// row), so that tests and fuzzers exercise the sparse layout that large stop lists use.
    #[doc(hidden)]
    pub fn with_dense_budget<I, B>(stops: I, entries: usize) -> Result<StopSet, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        Ok(StopSet { automaton: Automaton::with_budget(Self::patterns(stops)?, entries) })
    }

    fn patterns<I, B>(stops: I) -> Result<Vec<Box<[u8]>>, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let mut patterns = Vec::new();
        let mut total = 0usize;
        for (i, s) in stops.into_iter().enumerate() {
            let s = s.as_ref();
            if s.is_empty() {
                return Err(Error::empty_stop(i));
            }
            total = total.saturating_add(s.len());
            if total > automaton::MAX_TOTAL_LEN {
                return Err(Error::too_large(total));
            }
            patterns.push(Box::from(s));
        }
        Ok(patterns)
    }

    /// Like [`StopSet::new`], but returns a shared instance when the same list was compiled
    /// recently. The cache is bounded (it is emptied when it grows past 512 lists or 64 MiB).
    pub fn cached<B: AsRef<[u8]>>(stops: &[B]) -> Result<Arc<StopSet>, Error> {
        static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
        let key = hash_stops(stops);
        let cache = CACHE.get_or_init(|| Mutex::new(Cache::default()));
        {
            let guard = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(hit) = guard.map.get(&key).and_then(|v| v.iter().find(|s| s.is(stops))) {
                return Ok(Arc::clone(hit));
            }
        }
        // Compile outside the lock: a 10,000-stop list must not stall other threads.
        let set = Arc::new(StopSet::new(stops)?);
        let mut guard = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let size = set.automaton.heap_bytes();
        if guard.entries >= 512 || guard.bytes + size > 64 << 20 {
            *guard = Cache::default();
        }
        guard.entries += 1;
        guard.bytes += size;
        guard.map.entry(key).or_default().push(Arc::clone(&set));
        Ok(set)
    }

    fn is<B: AsRef<[u8]>>(&self, stops: &[B]) -> bool {
        let pats = self.automaton.patterns();
        pats.len() == stops.len() && pats.iter().zip(stops).all(|(p, s)| **p == *s.as_ref())
    }

    /// The empty stop list, shared.
    pub(crate) fn none() -> &'static StopSet {
        static NONE: OnceLock<StopSet> = OnceLock::new();
        NONE.get_or_init(|| StopSet { automaton: Automaton::new(Vec::new()) })
    }

    pub(crate) fn automaton(&self) -> &Automaton {
        &self.automaton
    }

    /// The stops as bytes, in the order given.
    pub fn stops(&self) -> &[Box<[u8]>] {
        self.automaton.patterns()
    }

    /// Number of stops.
    pub fn len(&self) -> usize {
        self.stops().len()
    }

    /// Whether the list is empty (every chunk then passes through unchanged).
    pub fn is_empty(&self) -> bool {
        self.stops().is_empty()
    }

    /// Length in bytes of the longest stop.
    pub fn max_len(&self) -> usize {
        self.automaton.max_len()
    }

    /// Number of automaton states: one per distinct prefix of the stops, plus the root.
    pub fn state_count(&self) -> usize {
        self.automaton.state_count()
    }

    /// Approximate heap bytes of the compiled automaton.
    pub fn heap_bytes(&self) -> usize {
        self.automaton.heap_bytes()
    }

    /// Scans `text` from `state` (a state of this set's automaton; start with 0), stopping at
    /// the first stop to complete.
    pub fn scan(&self, state: u32, text: &[u8]) -> Step {
        self.automaton.scan(state, text)
    }

    /// The text held back in `state`: the longest suffix of the input so far that is a proper
    /// prefix of some stop.
    pub fn held(&self, state: u32) -> &[u8] {
        self.automaton.held(state)
    }

    /// One-shot cut of a whole text: the length of the output and the stop that fired, if any.
    pub fn truncate(&self, text: &[u8], include_stop: bool) -> (usize, Option<usize>) {
        match self.automaton.scan(Automaton::START, text) {
            Step::Continue(_) => (text.len(), None),
            Step::Stop(hit) if include_stop => (hit.end, Some(hit.pattern)),
            Step::Stop(hit) => (hit.end - self.stops()[hit.pattern].len(), Some(hit.pattern)),
        }
    }
}

#[derive(Default)]
struct Cache {
    map: HashMap<u64, Vec<Arc<StopSet>>>,
    entries: usize,
    bytes: usize,
}

/// A fast, non-cryptographic hash of a stop list (the key is compared in full on a hit, so
/// collisions only cost a comparison). SipHash, the standard library's default, was a tenth of
/// the cost of constructing a filter for a short, cached list.
fn hash_stops<B: AsRef<[u8]>>(stops: &[B]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut h = mix(0, stops.len() as u64);
    for s in stops {
        let s = s.as_ref();
        h = mix(h, s.len() as u64);
        let mut words = s.chunks_exact(8);
        for w in &mut words {
            h = mix(h, u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        }
        let mut last = [0u8; 8];
        last[..words.remainder().len()].copy_from_slice(words.remainder());
        h = mix(h, u64::from_le_bytes(last));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            let set = StopSet::with_dense_budget(&stops_b, budget).unwrap();
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
            let set = StopSet::new(&stops_b).unwrap();
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
            let set = StopSet::with_dense_budget(&stops, budget).unwrap();
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
            let set = StopSet::with_dense_budget(&stops, budget).unwrap();
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
            let set = StopSet::new(&stops).unwrap();
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

    #[test]
    fn empty_stop_names_its_position() {
        let err = StopSet::new(["a", "", "b"]).unwrap_err();
        assert_eq!(err.empty_stop_index(), Some(1));
        assert_eq!(err.to_string(), "stop sequence at position 1 is empty");
    }

    #[test]
    fn cache_returns_the_same_set() {
        let a = StopSet::cached(&["x", "yz"]).unwrap();
        let b = StopSet::cached(&[b"x".to_vec(), b"yz".to_vec()]).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = StopSet::cached(&["x", "y"]).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn many_stops_use_the_sparse_form_and_still_match() {
        let stops: Vec<String> = (0..100_000).map(|i| format!("stop-{i:06}-end")).collect();
        let set = StopSet::new(&stops).unwrap();
        let text = "lorem stop-012345-en ipsum stop-099999-end".as_bytes();
        assert_eq!(set.truncate(text, false), (27, Some(99_999)));
    }
}
