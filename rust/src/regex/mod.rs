//! Regex stops (contract §6.3): compiling a pattern, and the per-stream set of live match
//! attempts ("threads") that gives both the earliest-ending match and the exact holdback.
//!
//! # How a stream is matched
//!
//! A stop may begin at any character boundary, so a thread starts there: the pattern's
//! *anchored* automaton, run from that start. A thread is dropped as soon as no continuation of
//! the text can take it to a match, and two threads in the same automaton state have the same
//! future, so only the earlier (whose match would be longer) is kept. The live set is therefore
//! bounded by the automaton's state count, never by the length of the text, and each character
//! is looked at once per live thread: held text is never scanned again. Whether a state is taken
//! already is a lookup, not a scan of the other threads, so a character costs the same per live
//! thread however many there are ([`DfaThreads`] has the measurement).
//!
//! Matches are reported one character late: whether `T[s:e]` matches can depend on the character
//! at `e` (`\b`, `(?m:$)`), so the match ending at `e` is decided when that character arrives, or
//! at the end of the stream. What is known earlier is classified per state: a state whose match
//! at `e` holds whatever comes next ([`Threads::always`]) lets a stop fire without waiting.
//!
//! # Two engines
//!
//! Most patterns run on a dense DFA built by `regex-automata` and copied into a flat table here,
//! together with three facts per state computed once at build time: whether a match is still
//! reachable (else the state is dead), and whether the match ending at the current position
//! holds for every, or for some, next character.
//!
//! DFAs cannot evaluate a *Unicode* word boundary (`\b` with Unicode on, the default) next to a
//! non-ASCII character: `regex-automata` refuses to build them, or, on request, gives up ("quits")
//! at the first non-ASCII byte. A stream of LLM output meets non-ASCII text all the time, so
//! quitting is no option, and an error would reject the flagship example `\bend\b`. Patterns with
//! a Unicode word boundary therefore run on a simulation of the pattern's Thompson NFA instead
//! (threads are sets of NFA states, deduplicated the same way), with the assertions evaluated on
//! the actual neighbouring characters. Measured (`examples/matcher.rs`, 4-byte chunks of this
//! crate's source, release build, busy 2-core machine): 4 such patterns cost 112 ns per chunk
//! against 75 ns for 4 DFA patterns and 7 ns for the literal path; through `wrap` on the token
//! corpus (`benches/regex_bench.py`) 1.7-1.9x the literal path against 1.6-1.8x for DFA ones. That
//! is affordable, so every pattern with a Unicode boundary takes this engine, on ASCII text too,
//! rather than switching engines mid-stream. `(?-u:\b)` keeps a pattern on the DFA when ASCII
//! word characters are what is meant. A pattern whose DFA would exceed [`DFA_SIZE_LIMIT`] also
//! runs on the NFA, which is small; only a pattern whose NFA exceeds [`NFA_SIZE_LIMIT`] is
//! rejected.
//!
//! # Exact holdback on the NFA engine
//!
//! An NFA attempt must be dropped as soon as no continuation can complete it, also when the
//! assertion that dooms it is still ahead (`a-\Ba`: after `a-`, `\B` needs a non-word character
//! next and the pattern a word one; `a^`: `^` never holds after a character), or its text would
//! be held for nothing. Every assertion of the dialect looks only at the class of the character
//! on each side: an ASCII word character, a non-ASCII word character, `\n`, `\r`, any other, or
//! the start or end of the stream ([`CLASSES`]). So whether an NFA state, reached after a
//! character of class `p`, can still lead to a match is a fixed fact of (state, `p`), computed
//! once when the pattern is compiled ([`Nfa::viability`]): the look-behind half of each
//! assertion is evaluated with `p`, the look-ahead half with each class the next character can
//! have, and a path of byte transitions counts for a class only if some character of that class
//! reads along it (its code points, from the byte ranges, meet the class's ranges). After each
//! character the threads keep only viable states, and a thread with none is dropped (a pattern
//! none of whose reachable states can be doomed, such as `\bend\b`, skips the check). The
//! analysis roughly doubles compile time for large Unicode patterns (`\b\w{50}\b`: 50 ms, 30
//! without it;
//! patterns like `\bend\b` compile in well under a millisecond); past [`VIABILITY_BUDGET`]
//! every state counts as viable, which only delays dropping a doomed attempt.

mod dfa;
mod nfa;
#[cfg(test)]
mod tests;

use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_syntax::hir::{Hir, HirKind};

use dfa::{Dfa, DfaThreads, ALWAYS, DEAD, EOI_MATCH, MATCH, MAYBE};
use nfa::{Ctx, Nfa, NfaThreads};

/// Largest compiled NFA for one pattern, in bytes (the `regex` crate's default).
pub const NFA_SIZE_LIMIT: usize = 10 << 20;
/// Largest dense DFA for one pattern, in bytes; a larger one runs on the NFA instead.
pub const DFA_SIZE_LIMIT: usize = 8 << 20;

/// Why a pattern was rejected; the caller adds the stop's position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PatternError {
    /// The parser (or compiler) message.
    Invalid(String),
    /// The pattern matches the empty string.
    Empty,
    /// The compiled pattern exceeds the size limit.
    TooBig(String),
}

/// A compiled regex stop.
#[derive(Debug)]
pub(crate) struct Pattern {
    max_len: Option<usize>,
    engine: Engine,
    /// [`Pattern::first_bytes`], computed once.
    first: [bool; 256],
}

#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "one per pattern, never moved in a hot path")]
enum Engine {
    Dfa(Dfa),
    Nfa(Nfa),
}

/// Parses `pattern`, rejecting one that can match the empty string.
fn parse(pattern: &str) -> Result<Hir, PatternError> {
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(true)
        .unicode(true)
        .build()
        .parse(pattern)
        .map_err(|e| PatternError::Invalid(e.to_string()))?;
    if hir.properties().minimum_len() == Some(0) {
        return Err(PatternError::Empty);
    }
    Ok(hir)
}

/// Checks `pattern` without compiling it: the longest match in code points.
pub(crate) fn check(pattern: &str) -> Result<Option<usize>, PatternError> {
    parse(pattern).map(|h| max_chars(&h))
}

impl Pattern {
    /// Parses and compiles `pattern` (Rust `regex` syntax, Unicode on). `size_limit` bounds
    /// the heap the compiled pattern may take (`None`: [`NFA_SIZE_LIMIT`]): an NFA over it is
    /// [`PatternError::TooBig`], and a DFA is built only within it (and within
    /// [`DFA_SIZE_LIMIT`]), else the pattern runs on its NFA. Compiling stops as soon as a limit
    /// is passed, so a small limit also bounds the time a hostile pattern can take.
    pub(crate) fn new(pattern: &str, size_limit: Option<usize>) -> Result<Pattern, PatternError> {
        let hir = parse(pattern)?;
        let max_len = max_chars(&hir);
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .utf8(true)
                    .shrink(true)
                    .which_captures(WhichCaptures::None)
                    .nfa_size_limit(Some(size_limit.unwrap_or(NFA_SIZE_LIMIT))),
            )
            .build_from_hir(&hir)
            .map_err(|e| {
                let msg = e.to_string();
                if msg.contains("exceeded") {
                    PatternError::TooBig(msg)
                } else {
                    PatternError::Invalid(msg)
                }
            })?;
        let engine = if nfa.look_set_any().contains_word_unicode() {
            Engine::Nfa(Nfa::new(nfa))
        } else {
            match Dfa::new(&nfa, size_limit.map_or(DFA_SIZE_LIMIT, |l| l.min(DFA_SIZE_LIMIT))) {
                Some(dfa) => Engine::Dfa(dfa),
                None => Engine::Nfa(Nfa::new(nfa)),
            }
        };
        let mut pattern = Pattern { max_len, engine, first: [true; 256] };
        pattern.first = pattern.first_bytes();
        Ok(pattern)
    }

    /// The longest match in code points, `None` if matches are unbounded.
    pub(crate) fn max_len(&self) -> Option<usize> {
        self.max_len
    }

    /// Whether the pattern runs on the NFA simulation (Unicode word boundaries, huge DFAs).
    pub(crate) fn uses_nfa(&self) -> bool {
        matches!(self.engine, Engine::Nfa(_))
    }

    /// Approximate heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.engine {
            Engine::Dfa(d) => d.trans.len() * 4 + d.info.len(),
            Engine::Nfa(n) => n.nfa.memory_usage(),
        }
    }

    /// Whether a match can begin with byte `b`, whatever precedes it.
    #[inline]
    pub(crate) fn can_start(&self, b: u8) -> bool {
        self.first[b as usize]
    }

    /// Bytes a match can begin with (whatever precedes it): elsewhere no thread is started.
    fn first_bytes(&self) -> [bool; 256] {
        let mut first = [false; 256];
        match &self.engine {
            Engine::Dfa(d) => {
                for &q in &d.starts {
                    if q != DEAD {
                        for b in 0..=255u8 {
                            first[b as usize] |= d.next(q, b) & !MATCH != DEAD;
                        }
                    }
                }
            }
            Engine::Nfa(n) => {
                let mut t = match self.threads() {
                    Threads::Nfa(t) => t,
                    Threads::Dfa(_) => return [true; 256],
                };
                n.closure(&mut t, &[n.nfa.start_anchored()], Ctx::AnyLook);
                let mut out = Vec::new();
                for b in 0..=255u8 {
                    n.step(&t, b, &mut out);
                    first[b as usize] = !out.is_empty();
                }
            }
        }
        first
    }

    /// Fresh per-stream threads for this pattern.
    pub(crate) fn threads(&self) -> Threads {
        match &self.engine {
            Engine::Dfa(_) => Threads::Dfa(DfaThreads::default()),
            Engine::Nfa(_) => Threads::Nfa(NfaThreads::default()),
        }
    }

    /// Advances over one character `ch` that starts at stream offset `pos`, whose preceding
    /// character is `prev` (empty at the start of the stream). Returns the smallest start of a
    /// match ending at `pos` (decided now that `ch` is known), then steps every thread over `ch`
    /// and starts a new one at `pos`.
    pub(crate) fn on_char(
        &self,
        th: &mut Threads,
        pos: usize,
        prev: &[u8],
        ch: &[u8],
    ) -> Option<usize> {
        match (&self.engine, th) {
            (Engine::Dfa(d), Threads::Dfa(t)) => d.on_char(t, pos, prev, ch),
            (Engine::Nfa(n), Threads::Nfa(t)) => {
                n.on_char(t, pos, prev, ch, self.first[ch[0] as usize])
            }
            _ => None,
        }
    }

    /// The smallest start of a match ending at the end of the stream.
    pub(crate) fn at_end(&self, th: &mut Threads, prev: &[u8]) -> Option<usize> {
        match (&self.engine, th) {
            (Engine::Dfa(d), Threads::Dfa(t)) => {
                t.live.iter().find(|&&(_, q)| d.info[q as usize] & EOI_MATCH != 0).map(|t| t.0)
            }
            (Engine::Nfa(n), Threads::Nfa(t)) => n.at_end(t, prev),
            _ => None,
        }
    }

    /// For the threads as they stand after `prev` (the last character): the smallest start of a
    /// match ending here that holds whatever comes next, and the smallest start of one that holds
    /// for some next character (or the end) but maybe not for all.
    pub(crate) fn pending(&self, th: &mut Threads, prev: &[u8]) -> (Option<usize>, Option<usize>) {
        match (&self.engine, th) {
            (Engine::Dfa(d), Threads::Dfa(t)) => {
                let always = t.live.iter().find(|t| d.info[t.1 as usize] & ALWAYS != 0);
                let maybe = t.live.iter().find(|t| {
                    let i = d.info[t.1 as usize];
                    i & MAYBE != 0 && i & ALWAYS == 0
                });
                (always.map(|t| t.0), maybe.map(|t| t.0))
            }
            (Engine::Nfa(n), Threads::Nfa(t)) => n.pending(t, prev),
            _ => (None, None),
        }
    }
}

impl Threads {
    /// The earliest start of a live thread: the text from there on may still become a match.
    pub(crate) fn earliest(&self) -> Option<usize> {
        match self {
            Threads::Dfa(t) => t.live.first().map(|t| t.0),
            Threads::Nfa(t) => t.live.first().map(|t| t.0),
        }
    }

    /// Drops every thread (a skip region began, or the stream starts over).
    pub(crate) fn clear(&mut self) {
        match self {
            Threads::Dfa(t) => t.live.clear(),
            Threads::Nfa(t) => t.live.clear(),
        }
    }

    /// Number of live threads.
    pub(crate) fn len(&self) -> usize {
        match self {
            Threads::Dfa(t) => t.live.len(),
            Threads::Nfa(t) => t.live.len(),
        }
    }
}

/// Per-stream match attempts of one pattern, ordered by start.
#[derive(Clone, Debug)]
pub(crate) enum Threads {
    /// (start, DFA state) pairs.
    Dfa(DfaThreads),
    /// NFA state sets.
    Nfa(NfaThreads),
}

/// Longest match in code points, `None` if unbounded.
fn max_chars(hir: &Hir) -> Option<usize> {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Some(0),
        HirKind::Literal(lit) => {
            Some(std::str::from_utf8(&lit.0).map_or(lit.0.len(), |s| s.chars().count()))
        }
        HirKind::Class(_) => Some(1),
        HirKind::Repetition(rep) => {
            let sub = max_chars(&rep.sub);
            match (rep.max, sub) {
                (_, Some(0)) => Some(0),
                (Some(m), Some(s)) => s.checked_mul(m as usize),
                _ => None,
            }
        }
        HirKind::Capture(cap) => max_chars(&cap.sub),
        HirKind::Concat(subs) => {
            subs.iter().try_fold(0usize, |acc, h| acc.checked_add(max_chars(h)?))
        }
        HirKind::Alternation(subs) => {
            subs.iter().try_fold(0usize, |acc, h| Some(acc.max(max_chars(h)?)))
        }
    }
}
