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
//! analysis roughly doubles compile time for large Unicode patterns (`\b\w{50}\b`: 30 to 50 ms;
//! patterns like `\bend\b` compile in well under a millisecond); past [`VIABILITY_BUDGET`]
//! every state counts as viable, which only delays dropping a doomed attempt.

use regex_automata::dfa::{dense, Automaton as _, StartKind};
use regex_automata::nfa::thompson::{self, State, WhichCaptures, NFA};
use regex_automata::util::look::LookMatcher;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Hir, HirKind};

/// Largest compiled NFA for one pattern, in bytes (the `regex` crate's default).
pub const NFA_SIZE_LIMIT: usize = 10 << 20;
/// Largest dense DFA for one pattern, in bytes; a larger one runs on the NFA instead.
pub const DFA_SIZE_LIMIT: usize = 8 << 20;

/// Set on a DFA transition taken from a state in which a match ends (the match is the text up to,
/// not including, the byte of the transition).
const MATCH: u32 = 1 << 31;
/// Index of the dead state in [`Dfa::trans`].
const DEAD: u32 = 0;

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
    /// Parses and compiles `pattern` (Rust `regex` syntax, Unicode on).
    pub(crate) fn new(pattern: &str) -> Result<Pattern, PatternError> {
        let hir = parse(pattern)?;
        let max_len = max_chars(&hir);
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .utf8(true)
                    .shrink(true)
                    .which_captures(WhichCaptures::None)
                    .nfa_size_limit(Some(NFA_SIZE_LIMIT)),
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
            match Dfa::new(&nfa) {
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

/// Per-stream threads of the DFA engine.
///
/// Two threads in the same state are merged in each step (the earlier start stays), and the
/// test for "is this state taken already" is a stamp per DFA state ([`Stamps`]), so a step
/// costs the same for every thread whatever their number. It was a scan of the threads kept so
/// far, quadratic in their number: with `.{N}x` (every start in the last `N` characters a live
/// thread, each in its own state) 3.5 / 12 / 42 / 156 / 570 us per character at N = 125 / 250 /
/// 500 / 1,000 / 2,000 in 4-character chunks, a `(?s).{4000}` length cap 3.2 s for a
/// 16,000-character response, and `[\s\S]{5000}x` 6.2 ms per character. With the stamps:
/// 0.34 / 0.56 / 1.3 / 2.3 / 4.4 us, 28 ms and 25 us (`benches/regex_bench.py --quick`, release
/// build, same 2-core machine, load 1.3-3.3).
#[derive(Clone, Debug, Default)]
pub(crate) struct DfaThreads {
    live: Vec<(usize, u32)>,
    /// Which states a thread kept in the current step took.
    taken: Stamps,
}

/// A set of small integers (DFA or NFA states) that empties in constant time: `marks[i]` is
/// the round in which `i` was last marked. Scratch space, not state: a clone starts empty (so
/// copying a stream, as a strict-mode feed does to undo a failing call, does not copy an array
/// as large as the automaton), and the array grows to the automaton's size on first use.
#[derive(Debug, Default)]
struct Stamps {
    marks: Vec<u32>,
    round: u32,
}

impl Clone for Stamps {
    fn clone(&self) -> Stamps {
        Stamps::default()
    }
}

impl Stamps {
    /// Empties the set, which then holds integers below `n`.
    #[inline]
    fn clear(&mut self, n: usize) {
        if self.marks.len() < n {
            self.marks.resize(n, 0);
        }
        self.round = self.round.wrapping_add(1);
        if self.round == 0 {
            self.marks.iter_mut().for_each(|m| *m = 0);
            self.round = 1;
        }
    }

    /// Adds `i`; `false` if it was there already.
    #[inline]
    fn insert(&mut self, i: usize) -> bool {
        let slot = &mut self.marks[i];
        if *slot == self.round {
            return false;
        }
        *slot = self.round;
        true
    }
}

/// The NFA engine's test for "is this state set taken already" in a step: an open-addressing
/// table of the threads kept so far, by a hash of their (sorted) state sets, so that merging
/// threads costs the same per thread whatever their number, as [`Stamps`] does for the DFA.
/// The scan it replaced was quadratic there too: `\b.{1000}x` cost 58 us per character; now
/// about 20 ns per live thread at N = 250 to 4,000 (`\b.{1000}x` 20 us). Scratch space like
/// [`Stamps`]: a clone starts empty.
#[derive(Debug, Default)]
struct SetIndex {
    /// (hash, index + 1 into the kept threads); 0 is an empty slot.
    slots: Vec<(u64, usize)>,
}

impl Clone for SetIndex {
    fn clone(&self) -> SetIndex {
        SetIndex::default()
    }
}

impl SetIndex {
    /// Empties the table, for up to `n` entries.
    #[inline]
    fn clear(&mut self, n: usize) {
        let size = (2 * n).next_power_of_two().max(8);
        self.slots.clear();
        self.slots.resize(size, (0, 0));
    }

    /// Records `index` under `hash` unless an entry for which `same` holds is there already
    /// (then `false`).
    #[inline]
    fn insert(&mut self, hash: u64, index: usize, same: impl Fn(usize) -> bool) -> bool {
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let (h, slot) = self.slots[i];
            if slot == 0 {
                self.slots[i] = (hash, index + 1);
                return true;
            }
            if h == hash && same(slot - 1) {
                return false;
            }
            i = (i + 1) & mask;
        }
    }
}

/// Up to this many threads, the NFA engine merges them by comparing their state sets directly
/// rather than through a [`SetIndex`]. On the token corpus (`benches/regex_bench.py`, 4
/// patterns with a Unicode `\b`, rarely more than a couple of live threads each) the index
/// alone cost 2.8% more instructions per chunk than the scan it replaced; with the direct
/// comparison below this count, 1% fewer (callgrind, 117k chunks; wall-clock times on the
/// shared machine varied by 2x between runs of either build).
const SCAN_THREADS: usize = 8;

/// A hash of a state set (FxHash's step, then a finalizer that spreads it to the low bits the
/// table indexes by).
fn set_hash(set: &[StateID]) -> u64 {
    let mut h: u64 = set.len() as u64;
    for id in set {
        h = (h.rotate_left(5) ^ id.as_u64()).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
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

// ---------------------------------------------------------------------------------------------
// DFA engine

/// Per-state facts, one byte each.
const EOI_MATCH: u8 = 1;
/// The match ending at the current position holds whatever character (or the end) follows.
const ALWAYS: u8 = 2;
/// It holds for some next character or the end.
const MAYBE: u8 = 4;

/// A dense DFA copied out of `regex-automata` into a flat table whose state 0 is dead and into
/// which every state that can no longer reach a match has been folded.
#[derive(Debug)]
struct Dfa {
    classes: [u8; 256],
    stride: usize,
    /// `trans[q * stride + class]`: target index, with [`MATCH`] if a match ends before the byte.
    trans: Vec<u32>,
    info: Vec<u8>,
    /// Start state by look-behind byte; index 256 is "start of stream".
    starts: Vec<u32>,
}

impl Dfa {
    /// Builds the table, or `None` if the DFA would be too large (the NFA engine then runs it).
    fn new(nfa: &NFA) -> Option<Dfa> {
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .match_kind(MatchKind::All)
                    .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                    .determinize_size_limit(Some(DFA_SIZE_LIMIT)),
            )
            .build_from_nfa(nfa)
            .ok()?;
        let bc = dfa.byte_classes();
        let stride = bc.alphabet_len();
        let mut classes = [0u8; 256];
        for b in 0..=255u8 {
            classes[b as usize] = bc.get(b);
        }
        let reps: Vec<u8> = bc
            .representatives(0..=255)
            .filter_map(regex_automata::util::alphabet::Unit::as_u8)
            .collect();

        // Number the reachable states breadth-first; 0 stays the dead state.
        let mut index = std::collections::HashMap::<StateID, u32>::new();
        let mut ids: Vec<Option<StateID>> = vec![None];
        let mut intern = |sid: StateID, ids: &mut Vec<Option<StateID>>| -> u32 {
            if dfa.is_dead_state(sid) || dfa.is_quit_state(sid) {
                return DEAD;
            }
            *index.entry(sid).or_insert_with(|| {
                ids.push(Some(sid));
                (ids.len() - 1) as u32
            })
        };
        let mut starts = vec![DEAD; 257];
        for (i, slot) in starts.iter_mut().enumerate() {
            let lb = u8::try_from(i).ok();
            let cfg = start::Config::new().anchored(Anchored::Yes).look_behind(lb);
            if let Ok(sid) = dfa.start_state(&cfg) {
                *slot = intern(sid, &mut ids);
            }
        }
        let mut trans: Vec<u32> = vec![DEAD; stride];
        let mut eoi = vec![false];
        let mut q = 1;
        while q < ids.len() {
            let Some(sid) = ids[q] else { break };
            let row = trans.len();
            trans.resize(row + stride, DEAD);
            for &b in &reps {
                let next = dfa.next_state(sid, b);
                let flag = if dfa.is_match_state(next) { MATCH } else { 0 };
                trans[row + classes[b as usize] as usize] = intern(next, &mut ids) | flag;
            }
            eoi.push(dfa.is_match_state(dfa.next_eoi_state(sid)));
            q += 1;
        }
        let n = ids.len();
        // A state is alive if a match can still end at or after it.
        let mut alive = vec![false; n];
        let mut rev: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut queue = Vec::new();
        for q in 1..n {
            let row = &trans[q * stride..(q + 1) * stride];
            if eoi[q] || row.iter().any(|&t| t & MATCH != 0) {
                alive[q] = true;
                queue.push(q as u32);
            }
            for &t in row {
                rev[(t & !MATCH) as usize].push(q as u32);
            }
        }
        while let Some(q) = queue.pop() {
            for &p in &rev[q as usize] {
                if !alive[p as usize] {
                    alive[p as usize] = true;
                    queue.push(p);
                }
            }
        }
        for t in &mut trans {
            if !alive[(*t & !MATCH) as usize] {
                *t &= MATCH;
            }
        }
        for s in &mut starts {
            if !alive[*s as usize] {
                *s = DEAD;
            }
        }
        // Which next characters make the match ending here hold: any byte that can start a
        // character (never a continuation byte) or the end of the stream.
        let mut info = vec![0u8; n];
        for q in 1..n {
            let mut all = eoi[q];
            let mut any = eoi[q];
            for b in (0..=255u8).filter(|b| !(0x80..=0xBF).contains(b)) {
                let m = trans[q * stride + classes[b as usize] as usize] & MATCH != 0;
                all &= m;
                any |= m;
            }
            info[q] =
                (u8::from(eoi[q]) * EOI_MATCH) | (u8::from(all) * ALWAYS) | (u8::from(any) * MAYBE);
        }
        Some(Dfa { classes, stride, trans, info, starts })
    }

    #[inline]
    fn next(&self, q: u32, b: u8) -> u32 {
        self.trans[q as usize * self.stride + self.classes[b as usize] as usize]
    }

    fn on_char(&self, t: &mut DfaThreads, pos: usize, prev: &[u8], ch: &[u8]) -> Option<usize> {
        let mut matched = None;
        let start = self.starts[prev.last().map_or(256, |&b| b as usize)];
        let live = &mut t.live;
        if start != DEAD && self.next(start, ch[0]) & !MATCH != DEAD {
            live.push((pos, start));
        }
        t.taken.clear(self.info.len());
        let mut keep = 0;
        for i in 0..live.len() {
            let (s, mut q) = live[i];
            let first = self.next(q, ch[0]);
            if first & MATCH != 0 && matched.is_none() {
                matched = Some(s);
            }
            q = first & !MATCH;
            for &b in &ch[1..] {
                if q == DEAD {
                    break;
                }
                q = self.next(q, b) & !MATCH;
            }
            // Same state, same future: keep the earlier start only (threads are in start order).
            if q != DEAD && t.taken.insert(q as usize) {
                live[keep] = (s, q);
                keep += 1;
            }
        }
        live.truncate(keep);
        matched
    }
}

// ---------------------------------------------------------------------------------------------
// NFA engine

#[derive(Debug)]
#[allow(clippy::struct_field_names, reason = "the NFA of the NFA engine")]
struct Nfa {
    nfa: NFA,
    looks: LookMatcher,
    /// Per NFA state, one bit per [`CLASSES`] entry: whether, standing in this state after a
    /// character of that class, some continuation of the text still completes a match (see
    /// [`Nfa::viability`]). Threads keep only such states.
    viable: Vec<u8>,
    /// Whether some state a thread can be in is not viable (else nothing is ever dropped
    /// early, and the check is skipped: `\bend\b` and most patterns).
    prunes: bool,
    /// The Unicode word characters (`\w`), as code point ranges.
    word: Vec<(u32, u32)>,
}

/// The characters as the assertions see them: an ASCII word character, a non-ASCII word
/// character, any other character but the two line terminators, `\n`, `\r` (one
/// representative each). Every assertion of the dialect depends only on which of these the
/// characters on either side are (or on the start or end of the stream).
const CLASSES: [&[u8]; 5] = [b"a", "\u{e9}".as_bytes(), b" ", b"\n", b"\r"];
/// Every class bit of [`Nfa::viable`].
const ALL_CLASSES: u8 = (1 << CLASSES.len()) - 1;
/// Work units (closures and character paths) the viability analysis may spend on one pattern;
/// past them every state counts as viable (the attempts then live until an assertion fails, as
/// they would without the analysis).
const VIABILITY_BUDGET: usize = 1 << 21;

/// Whether the code point range `lo..=hi` meets one of `ranges` (sorted, disjoint).
fn meets(ranges: &[(u32, u32)], lo: u32, hi: u32) -> bool {
    let i = ranges.partition_point(|r| r.1 < lo);
    i < ranges.len() && ranges[i].0 <= hi
}

/// Whether some code point encoded by a sequence of byte ranges (`rect[0]` the lead byte's)
/// lies in `ranges`.
fn rect_meets(rect: &[(u8, u8)], ranges: &[(u32, u32)]) -> bool {
    fn go(rect: &[(u8, u8)], i: usize, prefix: u32, ranges: &[(u32, u32)]) -> bool {
        let k = rect.len();
        let lead_mask: u32 = [0x7F, 0x1F, 0x0F, 0x07][k - 1];
        let (lo, hi) = if i == 0 { rect[0] } else { (rect[i].0.max(0x80), rect[i].1.min(0xBF)) };
        if lo > hi {
            return false;
        }
        let then = |b: u8| {
            if i == 0 {
                u32::from(b) & lead_mask
            } else {
                (prefix << 6) | (u32::from(b) & 0x3F)
            }
        };
        let after = (k - 1 - i) as u32;
        if rect[i + 1..].iter().all(|&(l, h)| l <= 0x80 && h >= 0xBF) {
            let low = then(lo) << (6 * after);
            let high = (then(hi) << (6 * after)) | ((1u32 << (6 * after)) - 1);
            return meets(ranges, low, high);
        }
        (lo..=hi).any(|b| go(rect, i + 1, then(b), ranges))
    }
    !rect.is_empty() && go(rect, 0, 0, ranges)
}

/// A character being read: the byte-consuming state reached, the byte ranges read so far, and
/// the character's length in bytes.
type PartialChar = (StateID, Vec<(u8, u8)>, usize);

/// The transitions of a byte-consuming state as (first byte, last byte, target).
fn transitions(state: &State) -> Vec<(u8, u8, StateID)> {
    match state {
        State::ByteRange { trans } => vec![(trans.start, trans.end, trans.next)],
        State::Sparse(s) => s.transitions.iter().map(|t| (t.start, t.end, t.next)).collect(),
        State::Dense(d) => {
            let mut out: Vec<(u8, u8, StateID)> = Vec::new();
            for (b, &next) in d.transitions.iter().enumerate() {
                let b = b as u8;
                if next == StateID::ZERO {
                    continue;
                }
                match out.last_mut() {
                    Some(last) if last.2 == next && last.1 + 1 == b => last.1 = b,
                    _ => out.push((b, b, next)),
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Per-stream threads of the NFA engine: sets of NFA states reached after the last character,
/// before the assertions at the next position are evaluated. Only `live` is state; the rest is
/// scratch space for one call, which a clone does not copy.
#[derive(Debug, Default)]
pub(crate) struct NfaThreads {
    live: Vec<(usize, Vec<StateID>)>,
    /// The states an epsilon closure reached.
    seen: Stamps,
    /// The state sets of the threads kept so far in a step.
    taken: SetIndex,
    stack: Vec<StateID>,
    scratch: Vec<StateID>,
}

impl Clone for NfaThreads {
    fn clone(&self) -> NfaThreads {
        NfaThreads { live: self.live.clone(), ..NfaThreads::default() }
    }
}

/// Where an epsilon closure is taken.
#[derive(Clone, Copy)]
enum Ctx<'a> {
    /// At a character boundary: the previous and the next character, and the offset between.
    At(&'a [u8], usize),
    /// Inside a character, where no assertion holds.
    InsideChar,
    /// Every assertion taken as holding (an over-approximation, for the first-byte table).
    AnyLook,
}

/// Next characters that cover every way an assertion can look ahead: the end, an ASCII word
/// character, a non-ASCII word character (a word for Unicode `\b`, not for ASCII `\b`), a
/// non-word character, and the two line terminators.
const LOOKAHEADS: [&[u8]; 6] = [b"", b"a", "\u{e9}".as_bytes(), b" ", b"\n", b"\r"];

/// The Unicode word characters (`\w`, the class Unicode `\b` looks at), as code point ranges.
fn word_ranges() -> Vec<(u32, u32)> {
    let hir = regex_syntax::Parser::new().parse(r"\w").ok();
    match hir.as_ref().map(Hir::kind) {
        Some(HirKind::Class(regex_syntax::hir::Class::Unicode(c))) => {
            c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect()
        }
        // `\w` always parses to a Unicode class; ASCII words keep the analysis exact for them.
        _ => vec![(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    }
}

/// Code point ranges of each of [`CLASSES`].
fn class_ranges(word: &[(u32, u32)]) -> [Vec<(u32, u32)>; 5] {
    let ascii = vec![(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
    let unicode: Vec<(u32, u32)> =
        word.iter().filter(|r| r.1 >= 0x80).map(|&(l, h)| (l.max(0x80), h)).collect();
    // Everything else: the complement of the word characters and the two terminators.
    let mut taken: Vec<(u32, u32)> = word.to_vec();
    taken.extend([(0x0A, 0x0A), (0x0D, 0x0D)]);
    taken.sort_unstable();
    let mut other = Vec::new();
    let mut next = 0u32;
    for (l, h) in taken {
        if l > next {
            other.push((next, l - 1));
        }
        next = next.max(h + 1);
    }
    if next <= 0x10_FFFF {
        other.push((next, 0x10_FFFF));
    }
    [ascii, unicode, other, vec![(0x0A, 0x0A)], vec![(0x0D, 0x0D)]]
}

impl Nfa {
    fn new(nfa: NFA) -> Nfa {
        let looks = nfa.look_matcher().clone();
        let word = word_ranges();
        let mut n = Nfa { nfa, looks, viable: Vec::new(), prunes: true, word };
        (n.viable, n.prunes) = n.viability();
        n
    }

    /// The [`CLASSES`] index of a character (its UTF-8 bytes, or a lone surrogate's three).
    fn class_of(&self, ch: &[u8]) -> usize {
        match ch {
            [b'\n'] => 3,
            [b'\r'] => 4,
            [b] if b.is_ascii_alphanumeric() || *b == b'_' => 0,
            [_] => 2,
            _ => match std::str::from_utf8(ch).ok().and_then(|s| s.chars().next()) {
                Some(c) if meets(&self.word, c as u32, c as u32) => 1,
                _ => 2,
            },
        }
    }

    /// For every NFA state and class of the previous character: whether some continuation
    /// (characters, then the end of the stream or not) completes a match from there.
    ///
    /// A node is (state, class of the previous character), taken at a character boundary.
    /// It is viable if, for some class of the next character (or the end), the epsilon closure
    /// there (whose assertions see exactly those two classes) holds a match, or a
    /// byte-consuming state of it reads a whole character of that class into a viable node.
    /// Which characters a path of byte transitions reads is a set of code points per path
    /// (a sequence of byte ranges), tested against each class's code point ranges. The
    /// viable nodes are those from which a match is reachable: found backwards from the
    /// matching ones. Also returns whether a node a thread can reach is not viable.
    fn viability(&self) -> (Vec<u8>, bool) {
        let n = self.nfa.states().len();
        let classes = class_ranges(&self.word);
        let mut t = NfaThreads::default();
        let mut budget = VIABILITY_BUDGET;
        // Per byte-consuming state: the states a whole character leads to, with the classes of
        // the characters that do.
        let mut paths: std::collections::HashMap<StateID, Vec<(StateID, u8)>> =
            std::collections::HashMap::new();
        let mut seen = vec![0u8; n];
        let mut seeds: Vec<u32> = Vec::new();
        // (target node, source node): the source is viable if the target is.
        let mut edges: Vec<(u32, u32)> = Vec::new();
        let mut queue: Vec<(StateID, usize)> = Vec::new();
        let node = |s: StateID, p: usize| (s.as_usize() * CLASSES.len() + p) as u32;
        // Where threads begin: the start state after any previous character or none.
        let starts: Vec<(StateID, Option<usize>)> = std::iter::once(None)
            .chain((0..CLASSES.len()).map(Some))
            .map(|p| (self.nfa.start_anchored(), p))
            .collect();
        let mut work: Vec<(StateID, Option<usize>)> = starts;
        while let Some((s, p)) = work.pop().or_else(|| queue.pop().map(|(s, p)| (s, Some(p)))) {
            let prev: &[u8] = p.map_or(b"", |p| CLASSES[p]);
            for next in 0..=CLASSES.len() {
                let follow: &[u8] = CLASSES.get(next).copied().unwrap_or(b"");
                let mut hay = [0u8; 8];
                hay[..prev.len()].copy_from_slice(prev);
                hay[prev.len()..prev.len() + follow.len()].copy_from_slice(follow);
                let hay = &hay[..prev.len() + follow.len()];
                budget = budget.saturating_sub(1);
                if self.closure(&mut t, &[s], Ctx::At(hay, prev.len())) {
                    if let Some(p) = p {
                        seeds.push(node(s, p));
                    }
                }
                if next == CLASSES.len() {
                    continue;
                }
                let bytes = t.scratch.clone();
                for b in bytes {
                    if let std::collections::hash_map::Entry::Vacant(e) = paths.entry(b) {
                        e.insert(self.char_paths(&mut t, b, &classes, &mut budget));
                    }
                    for &(target, mask) in &paths[&b] {
                        if mask & (1 << next) == 0 {
                            continue;
                        }
                        if let Some(p) = p {
                            edges.push((node(target, next), node(s, p)));
                        }
                        if seen[target.as_usize()] & (1 << next) == 0 {
                            seen[target.as_usize()] |= 1 << next;
                            queue.push((target, next));
                        }
                    }
                }
            }
            if budget == 0 {
                return (vec![ALL_CLASSES; n], false);
            }
        }
        edges.sort_unstable();
        edges.dedup();
        let mut viable = vec![0u8; n];
        while let Some(v) = seeds.pop() {
            let (s, p) = (v as usize / CLASSES.len(), v as usize % CLASSES.len());
            if viable[s] & (1 << p) != 0 {
                continue;
            }
            viable[s] |= 1 << p;
            let from = edges.partition_point(|e| e.0 < v);
            seeds.extend(edges[from..].iter().take_while(|e| e.0 == v).map(|e| e.1));
        }
        let prunes = seen.iter().zip(&viable).any(|(&reached, &ok)| reached & !ok != 0);
        (viable, prunes)
    }

    /// The whole characters byte-consuming state `b` can read: for each state reached after
    /// the character's last byte, a bit per [`CLASSES`] entry some such character belongs to.
    fn char_paths(
        &self,
        t: &mut NfaThreads,
        b: StateID,
        classes: &[Vec<(u32, u32)>; 5],
        budget: &mut usize,
    ) -> Vec<(StateID, u8)> {
        let mut found: Vec<(StateID, u8)> = Vec::new();
        let mut stack: Vec<PartialChar> = vec![(b, Vec::new(), 0)];
        while let Some((id, rect, need)) = stack.pop() {
            for (lo, hi, next) in transitions(self.nfa.state(id)) {
                let spans: Vec<(u8, u8, usize)> = if rect.is_empty() {
                    [(0x00, 0x7F, 1), (0xC0, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF7, 4)]
                        .iter()
                        .filter(|&&(l, h, _)| lo <= h && hi >= l)
                        .map(|&(l, h, k)| (lo.max(l), hi.min(h), k))
                        .collect()
                } else {
                    vec![(lo, hi, need)]
                };
                for (l, h, k) in spans {
                    *budget = budget.saturating_sub(1);
                    if *budget == 0 {
                        return found;
                    }
                    let mut r = rect.clone();
                    r.push((l, h));
                    if r.len() == k {
                        let mut mask = 0u8;
                        for (c, ranges) in classes.iter().enumerate() {
                            if rect_meets(&r, ranges) {
                                mask |= 1 << c;
                            }
                        }
                        match found.iter_mut().find(|f| f.0 == next) {
                            Some(f) => f.1 |= mask,
                            None if mask != 0 => found.push((next, mask)),
                            None => {}
                        }
                    } else {
                        self.closure(t, &[next], Ctx::InsideChar);
                        for &b2 in &t.scratch {
                            stack.push((b2, r.clone(), k));
                        }
                    }
                }
            }
        }
        found
    }

    /// Epsilon closure of `set` at a position whose surroundings are `ctx` (previous character,
    /// then the next one) at offset `at`; `None` for a position inside a character, where no
    /// assertion can hold. Returns whether a match state is in the closure; the byte-consuming
    /// states go to `t.scratch`.
    fn closure(&self, t: &mut NfaThreads, set: &[StateID], ctx: Ctx<'_>) -> bool {
        t.seen.clear(self.nfa.states().len());
        t.scratch.clear();
        let mut matched = false;
        t.stack.clear();
        t.stack.extend(set.iter().rev());
        while let Some(id) = t.stack.pop() {
            if !t.seen.insert(id.as_usize()) {
                continue;
            }
            match self.nfa.state(id) {
                State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) => t.scratch.push(id),
                State::Look { look, next } => {
                    let holds = match ctx {
                        Ctx::At(hay, at) => self.looks.matches(*look, hay, at),
                        Ctx::InsideChar => false,
                        Ctx::AnyLook => true,
                    };
                    if holds {
                        t.stack.push(*next);
                    }
                }
                State::Union { alternates } => t.stack.extend(alternates.iter().rev()),
                State::BinaryUnion { alt1, alt2 } => {
                    t.stack.push(*alt2);
                    t.stack.push(*alt1);
                }
                State::Capture { next, .. } => t.stack.push(*next),
                State::Match { .. } => matched = true,
                State::Fail => {}
            }
        }
        matched
    }

    /// Steps the byte-consuming states in `t.scratch` over `b`, into `out` (sorted, unique).
    fn step(&self, t: &NfaThreads, b: u8, out: &mut Vec<StateID>) {
        out.clear();
        for &id in &t.scratch {
            let next = match self.nfa.state(id) {
                State::ByteRange { trans } => trans.matches_byte(b).then_some(trans.next),
                State::Sparse(s) => s.matches_byte(b),
                State::Dense(d) => d.matches_byte(b),
                _ => None,
            };
            if let Some(n) = next {
                out.push(n);
            }
        }
        out.sort_unstable();
        out.dedup();
    }

    fn on_char(
        &self,
        t: &mut NfaThreads,
        pos: usize,
        prev: &[u8],
        ch: &[u8],
        start: bool,
    ) -> Option<usize> {
        if t.live.is_empty() && !start {
            return None;
        }
        let mut ctx = [0u8; 8];
        ctx[..prev.len()].copy_from_slice(prev);
        ctx[prev.len()..prev.len() + ch.len()].copy_from_slice(ch);
        let hay = &ctx[..prev.len() + ch.len()];
        if start {
            t.live.push((pos, vec![self.nfa.start_anchored()]));
        }
        let mut matched = None;
        let mut live = std::mem::take(&mut t.live);
        // A few threads are compared directly: cheaper than hashing their sets (see `SetIndex`).
        let indexed = live.len() > SCAN_THREADS;
        if indexed {
            t.taken.clear(live.len());
        }
        let mut keep = 0;
        let (mut set, mut cur) = (Vec::new(), Vec::new());
        let class = if self.prunes { 1u8 << self.class_of(ch) } else { ALL_CLASSES };
        for i in 0..live.len() {
            let (s, ref states) = live[i];
            if self.closure(t, states, Ctx::At(hay, prev.len())) && matched.is_none() {
                matched = Some(s);
            }
            self.step(t, ch[0], &mut set);
            for &b in &ch[1..] {
                if set.is_empty() {
                    break;
                }
                std::mem::swap(&mut cur, &mut set);
                self.closure(t, &cur, Ctx::InsideChar);
                self.step(t, b, &mut set);
            }
            // States from which no continuation completes a match are dropped now, not when
            // a later assertion fails.
            if self.prunes {
                set.retain(|id| self.viable[id.as_usize()] & class != 0);
            }
            // Same state set, same future: keep the earlier start only.
            let fresh = !set.is_empty()
                && if indexed {
                    t.taken.insert(set_hash(&set), keep, |j| live[j].1 == set)
                } else {
                    !live[..keep].iter().any(|x| x.1 == set)
                };
            if fresh {
                // The slot's old set (this thread's, or a dropped one's) becomes the next
                // thread's buffer: no allocation per thread and character.
                live[keep].0 = s;
                std::mem::swap(&mut live[keep].1, &mut set);
                keep += 1;
            }
        }
        live.truncate(keep);
        t.live = live;
        matched
    }

    fn at_end(&self, t: &mut NfaThreads, prev: &[u8]) -> Option<usize> {
        let live = std::mem::take(&mut t.live);
        let found = live
            .iter()
            .find(|(_, states)| self.closure(t, states, Ctx::At(prev, prev.len())))
            .map(|x| x.0);
        t.live = live;
        found
    }

    fn pending(&self, t: &mut NfaThreads, prev: &[u8]) -> (Option<usize>, Option<usize>) {
        let live = std::mem::take(&mut t.live);
        let mut always = None;
        let mut maybe = None;
        for (s, states) in &live {
            let mut all = true;
            let mut any = false;
            for next in LOOKAHEADS {
                let mut ctx = [0u8; 8];
                ctx[..prev.len()].copy_from_slice(prev);
                ctx[prev.len()..prev.len() + next.len()].copy_from_slice(next);
                let m =
                    self.closure(t, states, Ctx::At(&ctx[..prev.len() + next.len()], prev.len()));
                all &= m;
                any |= m;
            }
            if all && always.is_none() {
                always = Some(*s);
            }
            if any && !all && maybe.is_none() {
                maybe = Some(*s);
            }
        }
        t.live = live;
        (always, maybe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_automata::util::look::Look;

    /// The classes of the viability analysis agree with the assertions' own notion of a word
    /// character on every code point (and a lone surrogate is no word character).
    #[test]
    fn classes_agree_with_the_look_matcher() {
        let Ok(Pattern { engine: Engine::Nfa(n), .. }) = Pattern::new(r"\ba") else { panic!() };
        let looks = LookMatcher::new();
        let mut buf = [0u8; 8];
        for c in (0..=0x10_FFFFu32).filter_map(char::from_u32) {
            let ch = c.encode_utf8(&mut buf[..4]).len();
            buf[ch] = b' ';
            let word = looks.matches(Look::WordUnicode, &buf[..=ch], ch);
            let class = n.class_of(&buf[..ch]);
            assert_eq!(word, class <= 1, "{c:?}");
            assert_eq!(class == 0, c.is_ascii_alphanumeric() || c == '_', "{c:?}");
        }
        assert_eq!(n.class_of(&[0xED, 0xA0, 0x80]), 2);
    }

    /// Runs the threads of `pattern` over `text`, one character at a time: after each, the
    /// number of live threads and the earliest start.
    fn live_after_each_char(pattern: &str, text: &str) -> Vec<(usize, Option<usize>)> {
        let p = Pattern::new(pattern).unwrap();
        let mut th = p.threads();
        let mut prev: &[u8] = b"";
        let mut out = Vec::new();
        for (pos, c) in text.char_indices() {
            let ch = &text.as_bytes()[pos..pos + c.len_utf8()];
            assert_eq!(p.on_char(&mut th, pos, prev, ch), None, "{pattern} matched in {text:?}");
            prev = ch;
            out.push((th.len(), th.earliest()));
        }
        out
    }

    /// Threads that reach the same state are merged, and the earliest start is the one kept:
    /// every start in a run of `a` reaches the same state of `a+b` (on the DFA; with `\b`, on
    /// the NFA), so one thread stays, from the run's first `a`, whatever the run's length.
    #[test]
    fn threads_in_one_state_merge_into_the_earliest() {
        for pattern in ["a+b", r"a+b\b", "(?:a|aa)+b", r"a+(?:b|cd)\b"] {
            let text = format!("x{}", "a".repeat(300));
            let got = live_after_each_char(pattern, &text);
            assert_eq!(got[0], (0, None), "{pattern}");
            for (i, &live) in got.iter().enumerate().skip(1) {
                assert_eq!(live, (1, Some(1)), "{pattern} after {} characters", i + 1);
            }
        }
    }

    /// With more live threads than [`SCAN_THREADS`] (merged through the DFA's stamps, or the
    /// NFA's [`SetIndex`]): in a run of `a`, the threads of `(?:a{10}|b)*c` are in 10 states
    /// (how many `a` of the current ten they have read), so 10 stay, the earliest start first.
    #[test]
    fn many_threads_merge_by_state() {
        for pattern in ["(?:a{10}|b)*c", r"(?:a{10}|b)*c\b"] {
            let text = format!("x{}", "a".repeat(100));
            for (i, &live) in live_after_each_char(pattern, &text).iter().enumerate().skip(1) {
                assert_eq!(live, (i.min(10), Some(1)), "{pattern} after {} characters", i + 1);
            }
        }
        assert!(Pattern::new(r"(?:a{10}|b)*c\b").unwrap().uses_nfa());
        assert!(!Pattern::new("(?:a{10}|b)*c").unwrap().uses_nfa());
    }

    /// Threads in different states are never merged: with `.{5}x` over text without `x`, the
    /// threads from the last 5 starts are in 5 different states (1 to 5 characters read).
    #[test]
    fn threads_in_different_states_all_stay() {
        for pattern in [".{5}x", r".{5}x\b"] {
            let got = live_after_each_char(pattern, "abcdefghij\u{e9}klmnop");
            for (i, &live) in got.iter().enumerate() {
                let want = (i + 1).min(5);
                let first = i.saturating_sub(4);
                let pos = first + usize::from(first > 10); // the byte offset (é is 2 bytes)
                assert_eq!(live, (want, Some(pos)), "{pattern} after {} characters", i + 1);
            }
        }
    }

    #[test]
    fn stamps_and_set_index_start_empty_after_a_clone_and_a_wrap() {
        let mut s = Stamps::default();
        s.clear(4);
        assert!(s.insert(3) && !s.insert(3));
        let mut c = s.clone();
        c.clear(4);
        assert!(c.insert(3));
        s.round = u32::MAX;
        s.clear(4);
        assert!(s.insert(3) && s.insert(0) && !s.insert(0));
        let mut t = SetIndex::default();
        t.clear(3);
        assert!(t.insert(7, 0, |_| true));
        assert!(!t.insert(7, 1, |j| j == 0));
        assert!(t.insert(7, 1, |_| false));
        assert!(t.insert(8, 2, |_| true));
    }

    #[test]
    fn rect_meets_decodes_byte_ranges() {
        let word = word_ranges();
        let classes = class_ranges(&word);
        // 'é' is C3 A9; C3 80..BF holds both word and non-word characters (U+00D7).
        assert!(rect_meets(&[(0xC3, 0xC3), (0xA9, 0xA9)], &classes[1]));
        assert!(!rect_meets(&[(0xC3, 0xC3), (0xA9, 0xA9)], &classes[2]));
        assert!(rect_meets(&[(0xC3, 0xC3), (0x97, 0x97)], &classes[2]));
        assert!(rect_meets(&[(b'a', b'z')], &classes[0]));
        assert!(!rect_meets(&[(b'a', b'z')], &classes[2]));
        assert!(rect_meets(&[(0xE4, 0xE4), (0xB8, 0xB8), (0x80, 0xBF)], &classes[1]));
    }
}
