//! The compiled literal stop list ([`StopSet`]) and the process-wide cache of recent lists.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::automaton::{self, Automaton, Step};
use crate::error::Error;

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
