//! The compiled literal stop list ([`LiteralStops`]).

use std::sync::OnceLock;

use crate::automaton::{self, Automaton, Step};
use crate::error::Error;

/// A compiled list of plain-string stops (the literal automaton; [`CompiledStops`](crate::CompiledStops) holds
/// either kind). Immutable: one instance serves any number of streams on any number of
/// threads.
///
/// ```
/// use stopstream::{Status, LiteralStops, TextStream};
///
/// let set = LiteralStops::new(["</answer>", "\n\nUser:"]).unwrap();
/// // The stream is a state id and a status: held text is read out of the stop list.
/// let mut stream = TextStream::new(false);
/// let mut out = Vec::new();
/// for chunk in ["Hello </ans", "wer> tail"] {
///     let held = stream.held(&set);
///     let emit = stream.feed(&set, chunk.as_bytes()).unwrap();
///     out.extend_from_slice(&held[..emit.from_held]);
///     out.extend_from_slice(&chunk.as_bytes()[..emit.from_input]);
/// }
/// assert_eq!(out, b"Hello ");
/// assert_eq!(stream.status(), Status::Stopped(0));
/// ```
#[derive(Debug)]
pub struct LiteralStops {
    automaton: Automaton,
}

impl LiteralStops {
    /// Compiles a stop list given as UTF-8 bytes (lone surrogates may be encoded as three bytes
    /// the way CPython's `surrogatepass` does). An empty stop is an error naming its position;
    /// duplicates are allowed (the first listed wins).
    pub fn new<I, B>(stops: I) -> Result<LiteralStops, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        Ok(LiteralStops { automaton: Automaton::new(Self::patterns(stops)?) })
    }

    /// Like [`LiteralStops::new`] with at most `entries` dense transitions (at least the root's
    /// row), so that tests and fuzzers exercise the sparse layout that large stop lists use.
    #[doc(hidden)]
    pub fn with_dense_budget<I, B>(stops: I, entries: usize) -> Result<LiteralStops, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        Ok(LiteralStops { automaton: Automaton::with_budget(Self::patterns(stops)?, entries) })
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

    /// The empty stop list, shared.
    pub(crate) fn none() -> &'static LiteralStops {
        static NONE: OnceLock<LiteralStops> = OnceLock::new();
        NONE.get_or_init(|| LiteralStops { automaton: Automaton::new(Vec::new()) })
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn empty_stop_names_its_position() {
        let err = LiteralStops::new(["a", "", "b"]).unwrap_err();
        assert_eq!(err.empty_stop_index(), Some(1));
        assert_eq!(err.to_string(), "stop sequence at position 1 is empty");
    }

    #[test]
    fn cache_returns_the_same_set() {
        let set = |c: crate::CompiledStops| c.literal_stops().cloned().unwrap();
        let a = set(crate::CompiledStops::literal(&["x", "yz"]).unwrap());
        let b = set(crate::CompiledStops::literal(&[b"x".to_vec(), b"yz".to_vec()]).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        let c = set(crate::CompiledStops::literal(&["x", "y"]).unwrap());
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn many_stops_use_the_sparse_form_and_still_match() {
        let stops: Vec<String> = (0..100_000).map(|i| format!("stop-{i:06}-end")).collect();
        let set = LiteralStops::new(&stops).unwrap();
        let text = "lorem stop-012345-en ipsum stop-099999-end".as_bytes();
        assert_eq!(set.truncate(text, false), (27, Some(99_999)));
    }
}
