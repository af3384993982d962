//! A compiled stop list of either kind ([`CompiledStops`]), and the one process-wide cache of
//! compiled lists: a gateway builds a filter per request, usually from the same few lists, and
//! compiles each once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::Error;
use crate::literal_stops::LiteralStops;
use crate::matcher::{Matcher, StopKind, StopSpec};

/// The stop a whole-text cut found: its index, and for a composed list the text it matched.
pub type Fired = (usize, Option<Vec<u8>>);

/// A compiled stop list of either kind, shared by reference count.
///
/// ```
/// use stopstream::{CompiledStops, StopKind, StopSpec};
///
/// // A regex stop, and a literal one whose own text stays in the output.
/// let specs = [
///     StopSpec { kind: StopKind::Regex(r"User:\s", None), include: false },
///     StopSpec { kind: StopKind::Literal(b"<|end|>"), include: true },
/// ];
/// let stops = CompiledStops::composed(&specs, None, &[]).unwrap();
/// assert!(stops.is_composed());
/// // A whole text cut at once: the same answer as streaming it.
/// let (cut, fired) = stops.truncate(b"done<|end|> more", false);
/// assert_eq!(cut, 11);
/// assert_eq!(fired, Some((1, Some(b"<|end|>".to_vec()))));
/// ```
#[derive(Clone, Debug)]
pub enum CompiledStops {
    /// Plain strings: the literal automaton.
    Literal(Arc<LiteralStops>),
    /// `Stop` or `Regex` items, or skip regions: the composed matcher (contract §6).
    Composed(Arc<Matcher>),
}

impl CompiledStops {
    /// Compiles plain stops, or returns the same list compiled recently (the cache below,
    /// bounded: emptied past 512 lists or 16 MiB).
    pub fn literal<B: AsRef<[u8]>>(stops: &[B]) -> Result<CompiledStops, Error> {
        // The kind first: an empty literal list and an empty composed one have no field.
        let mut key = vec![LITERAL];
        for s in stops {
            push_field(&mut key, 7, s.as_ref());
        }
        get_or_compile(&key, || {
            LiteralStops::new(stops).map(|s| CompiledStops::Literal(Arc::new(s)))
        })
    }

    /// Compiles a composed list (see [`Matcher::new`]), or returns the same list and regions
    /// compiled recently: a gateway that builds a filter per request from the same `Regex`
    /// stops compiles their automata once.
    pub fn composed(
        specs: &[StopSpec<'_>],
        until: Option<&[u8]>,
        pairs: &[(&[u8], &[u8])],
    ) -> Result<CompiledStops, Error> {
        let mut key = vec![COMPOSED];
        for s in specs {
            let include = u8::from(s.include);
            match s.kind {
                StopKind::Literal(b) => push_field(&mut key, include, b),
                StopKind::Regex(p, limit) => {
                    push_field(&mut key, 2 + include, p.as_bytes());
                    if let Some(l) = limit {
                        push_field(&mut key, 8, &l.to_le_bytes());
                    }
                }
            }
        }
        if let Some(u) = until {
            push_field(&mut key, 4, u);
        }
        for (o, c) in pairs {
            push_field(&mut key, 5, o);
            push_field(&mut key, 6, c);
        }
        get_or_compile(&key, || {
            Matcher::new(specs, until, pairs).map(|m| CompiledStops::Composed(Arc::new(m)))
        })
    }

    /// The number of stops.
    pub fn len(&self) -> usize {
        match self {
            CompiledStops::Literal(s) => s.len(),
            CompiledStops::Composed(m) => m.len(),
        }
    }

    /// Whether the list has no stop.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this is the composed matcher.
    pub fn is_composed(&self) -> bool {
        matches!(self, CompiledStops::Composed(_))
    }

    /// Cuts a whole text at the stop that fires (`include_stop` is a literal list's flag; a
    /// composed list carries one per stop): the length of the output, and the stop that fired,
    /// as its index and, for a composed list, the text it matched.
    pub fn truncate(&self, text: &[u8], include_stop: bool) -> (usize, Option<Fired>) {
        match self {
            CompiledStops::Literal(s) => {
                let (n, hit) = s.truncate(text, include_stop);
                (n, hit.map(|i| (i, None)))
            }
            CompiledStops::Composed(m) => {
                let (n, hit) = m.truncate(text);
                (n, hit.map(|(i, matched)| (i, Some(matched))))
            }
        }
    }

    /// The heap the compiled list holds, in bytes (what caches of compiled lists count).
    pub fn heap_bytes(&self) -> usize {
        match self {
            CompiledStops::Literal(s) => s.heap_bytes(),
            CompiledStops::Composed(m) => m.heap_bytes(),
        }
    }

    /// The literal automaton, when the list is literal.
    pub fn literal_stops(&self) -> Option<&Arc<LiteralStops>> {
        match self {
            CompiledStops::Literal(s) => Some(s),
            CompiledStops::Composed(_) => None,
        }
    }

    /// The composed matcher, when the list is composed.
    pub fn matcher(&self) -> Option<&Arc<Matcher>> {
        match self {
            CompiledStops::Composed(m) => Some(m),
            CompiledStops::Literal(_) => None,
        }
    }
}

/// The first byte of a cache key: the kind of list it names.
const LITERAL: u8 = b'L';
const COMPOSED: u8 = b'C';

/// Lists kept before the cache is emptied.
const MAX_ENTRIES: usize = 512;
/// Compiled bytes kept before the cache is emptied. A list of 1,000 word-like stops compiles
/// to about 1.7 MiB, one of 10,000 to 7.8 MiB, so this keeps the lists a gateway reuses. At
/// 64 MiB a server sent fresh lists of 32 KiB of stops (4.2 MiB each) grew by 17 MiB a
/// process between its 50th and 100th request: a bound that large is not reached soon enough
/// to keep memory flat.
const MAX_BYTES: usize = 16 << 20;

/// A cached list and the key it was compiled from (which starts with the list's kind).
type Entry = (Box<[u8]>, CompiledStops);

#[derive(Default)]
struct Cache {
    /// By the hash of the key: each key in full, with its list.
    map: HashMap<u64, Vec<Entry>>,
    entries: usize,
    bytes: usize,
}

/// The list compiled from what `key` encodes (compared in full on a hit), compiling it with
/// `compile` outside the lock (a 10,000-stop list must not stall other threads) when it is not
/// cached.
fn get_or_compile(
    key: &[u8],
    compile: impl FnOnce() -> Result<CompiledStops, Error>,
) -> Result<CompiledStops, Error> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Cache::default()));
    let hash = hash(key);
    {
        let guard = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, hit)) = guard.map.get(&hash).and_then(|v| v.iter().find(|e| *e.0 == *key)) {
            return Ok(hit.clone());
        }
    }
    let compiled = compile()?;
    let size = compiled.heap_bytes();
    let mut guard = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if guard.entries >= MAX_ENTRIES || guard.bytes + size > MAX_BYTES {
        *guard = Cache::default();
    }
    guard.entries += 1;
    guard.bytes += size;
    guard.map.entry(hash).or_default().push((Box::from(key), compiled.clone()));
    Ok(compiled)
}

/// Appends one length-prefixed field to a cache key.
fn push_field(key: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    key.push(tag);
    key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    key.extend_from_slice(bytes);
}

/// A fast, non-cryptographic hash of a key (compared in full on a hit, so collisions only cost
/// a comparison). SipHash, the standard library's default, was a tenth of the cost of
/// constructing a filter for a short, cached list.
fn hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut h = mix(0, key.len() as u64);
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        h = mix(h, u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    mix(h, u64::from_le_bytes(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_each_kind_apart() {
        // Compiled in both orders: empty lists of the two kinds have no field to tell them apart
        // but the key's kind.
        let none: &[&[u8]] = &[];
        let composed = || CompiledStops::composed(&[], None, &[]).unwrap();
        assert!(composed().is_composed());
        assert!(!CompiledStops::literal(none).unwrap().is_composed());
        assert!(composed().is_composed());
        let one = [StopSpec { kind: StopKind::Literal(b"ab"), include: false }];
        assert!(CompiledStops::composed(&one, None, &[]).unwrap().is_composed());
        assert!(!CompiledStops::literal(&["ab"]).unwrap().is_composed());
    }
}
