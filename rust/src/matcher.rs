//! The composed matcher (contract §6): literal stops, regex stops, per-stop include flags and
//! skip regions over one stream.
//!
//! * Literal stops stay on the Aho-Corasick automaton of `automaton.rs`; regex stops run as
//!   threads (`regex.rs`). Both report matches by (end, start), and the winner is the smallest
//!   `(end, -length, index)`: earliest end, then smallest start, then first listed.
//! * A literal match is certain when it completes; a regex match ending at `e` may depend on the
//!   character at `e`, so the winner at `e` is decided when that character arrives, or at once
//!   when every match that could still beat it is already known not to (see
//!   [`MatchStream::feed`]).
//! * Holdback is the earliest start of a match attempt of a stop whose include flag is off: the
//!   literal automaton's depth (over the flag-off literals), a completed but unsettled flag-off
//!   literal, and the earliest live thread of each flag-off regex.
//! * Skip regions (`region.rs`): outside a region, opening markers run in their own automaton;
//!   one that completes no later than every stop starts a region, drops every match attempt and
//!   hands the stream to the region's closing marker.
//! * A literal list (with or without skip regions) with nothing held or pending takes a fast
//!   path ([`MatchStream::feed_clear`]): when no byte of the chunk can begin a stop or an
//!   opening marker, nothing is scanned at all (one lead-byte test per byte, the same skip the
//!   automaton's own scan makes at its root, once for both automata); otherwise both run over
//!   the chunk, and only a chunk in which one completes, or that ends in a partial stop, goes
//!   the general way. The general way's cost is per-call work (the character loop's set-up,
//!   the look-behind character, the holdback and buffer bookkeeping), not the second scan:
//!   over 4-byte chunks (`examples/matcher.rs`, release build) 4 literal stops cost 8.2 ns per
//!   chunk on this path and 18.2 ns the general way, with a skip region 9.0 against 22.0 ns,
//!   and the literal path 5.6-6.6 ns. Through `wrap` on the cl100k token corpus
//!   (`benches/regex_bench.py`, best of 30), 4 literal stops with a skip region cost 1.13x the
//!   literal path (1.35x the general way), and with `skip_until` (before the marker: a chunk
//!   without it passes whole, with one scan for the marker) 0.84x (1.06x). Merging the
//!   markers into the stops' automaton would save the second scan only for the few chunks
//!   holding a lead byte, and would need a second depth per state (holdback ignores partial
//!   markers), so they stay apart.
//!
//! The stream keeps the text it has not emitted (plus, for a flag-on regex, the text of a match
//! attempt, which `stop_sequence` reports), because a regex's holdback can be longer than any
//! stop; a chunk that passes through whole is never copied.

use crate::automaton::{Automaton, Step};
use crate::byte_stream::{ByteOut, TextMatcher};
use crate::error::Error;
use crate::literal_state::Status;
use crate::regex::{Pattern, PatternError, Threads};
use crate::region::{Regions, Zone};
use crate::utf8::char_len;

/// One stop of a [`Matcher`]'s list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopKind<'a> {
    /// A literal stop, as UTF-8 bytes.
    Literal(&'a [u8]),
    /// A regex stop in Rust `regex` syntax, with the most heap its compiled form may take
    /// (`None`: the engine's default; see [`Matcher::new`]).
    Regex(&'a str, Option<usize>),
}

/// A stop with its include flag (already resolved against the filter's `include_stop`).
///
/// ```
/// use stopstream::{StopKind, StopSpec};
///
/// // The filter's `include_stop` is already applied: each stop carries its own flag.
/// let keep = StopSpec { kind: StopKind::Literal(b"<|end|>"), include: true };
/// let cut = StopSpec { kind: StopKind::Regex(r"\n\nUser:", None), include: false };
/// assert_ne!(keep, cut);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopSpec<'a> {
    /// What the stop matches.
    pub kind: StopKind<'a>,
    /// Whether the output runs through the match (else it ends before it).
    pub include: bool,
}

#[derive(Debug)]
enum Kind {
    /// Index into the literal automaton's patterns.
    Literal(usize),
    /// Index into `Matcher::regexes`.
    Regex(usize),
}

/// Holdback over literal stops.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "one per stop list, never moved in a hot path")]
enum Hold {
    /// No literal stop has its flag off.
    None,
    /// Every literal stop has its flag off: the matching automaton's depth is the holdback.
    Same,
    /// Mixed flags: an automaton over the flag-off literals only.
    Separate(Automaton),
}

/// A compiled stop list with include flags and skip regions. Immutable; shared by any number
/// of streams.
///
/// ```
/// use stopstream::{ByteOut, MatchStream, Matcher, StopKind, StopSpec};
///
/// let specs = [StopSpec { kind: StopKind::Regex(r"</answer\s*>", None), include: false }];
/// // No stop fires between `<think>` and `</think>`.
/// let m = Matcher::new(&specs, None, &[(b"<think>", b"</think>")]).unwrap();
/// let mut stream = MatchStream::new(&m);
/// let mut out = Vec::new();
/// for chunk in ["<think></answer></think>ok</answer ", ">rest"] {
///     // `Input`: the output is the chunk itself, not copied into `out`.
///     if stream.feed(&m, chunk.as_bytes(), &mut out).unwrap() == ByteOut::Input {
///         out.extend_from_slice(chunk.as_bytes());
///     }
/// }
/// assert_eq!(out, b"<think></answer></think>ok");
/// ```
#[derive(Debug)]
pub struct Matcher {
    kinds: Vec<Kind>,
    include: Vec<bool>,
    literals: Automaton,
    /// Literal automaton pattern → stop index.
    literal_stop: Vec<usize>,
    hold: Hold,
    /// (stop index, pattern).
    regexes: Vec<(usize, Pattern)>,
    regions: Regions,
    /// Bytes that can begin a literal stop, an opening marker or a regex match: while nothing
    /// is in progress, the scan skips every other byte.
    leads: [bool; 256],
}

impl Matcher {
    /// Compiles a stop list and skip regions. An empty literal, an invalid or empty-matching
    /// pattern, a pattern over the size limit, or an empty marker is an error naming its
    /// position.
    pub fn new(
        stops: &[StopSpec<'_>],
        skip_until: Option<&[u8]>,
        skip: &[(&[u8], &[u8])],
    ) -> Result<Matcher, Error> {
        let mut kinds = Vec::with_capacity(stops.len());
        let mut include = Vec::with_capacity(stops.len());
        let mut lits: Vec<Box<[u8]>> = Vec::new();
        let mut literal_stop = Vec::new();
        let mut off_lits: Vec<Box<[u8]>> = Vec::new();
        let mut regexes = Vec::new();
        let mut total = 0usize;
        for (i, s) in stops.iter().enumerate() {
            include.push(s.include);
            match s.kind {
                StopKind::Literal(text) => {
                    if text.is_empty() {
                        return Err(Error::empty_stop(i));
                    }
                    total = total.saturating_add(text.len());
                    if total > crate::automaton::MAX_TOTAL_LEN {
                        return Err(Error::too_large(total));
                    }
                    kinds.push(Kind::Literal(lits.len()));
                    lits.push(text.into());
                    literal_stop.push(i);
                    if !s.include {
                        off_lits.push(text.into());
                    }
                }
                StopKind::Regex(p, size_limit) => {
                    let pat = Pattern::new(p, size_limit).map_err(|e| match e {
                        PatternError::Invalid(msg) => Error::invalid_pattern(i, msg),
                        PatternError::TooBig(_) => Error::invalid_pattern(
                            i,
                            format!(
                                "the compiled pattern is over its size limit of {} bytes",
                                size_limit.unwrap_or(crate::regex::NFA_SIZE_LIMIT)
                            ),
                        ),
                        PatternError::Empty => Error::invalid_pattern(i, EMPTY_MATCH.to_owned()),
                    })?;
                    kinds.push(Kind::Regex(regexes.len()));
                    regexes.push((i, pat));
                }
            }
        }
        let hold = if off_lits.is_empty() {
            Hold::None
        } else if off_lits.len() == lits.len() {
            Hold::Same
        } else {
            Hold::Separate(Automaton::new(off_lits))
        };
        let mut leads = [false; 256];
        for l in
            lits.iter().map(|l| l[0]).chain(skip.iter().filter_map(|(o, _)| o.first().copied()))
        {
            leads[l as usize] = true;
        }
        for (_, p) in &regexes {
            for b in 0..=255u8 {
                leads[b as usize] |= p.can_start(b);
            }
        }
        Ok(Matcher {
            kinds,
            include,
            literals: Automaton::new(lits),
            literal_stop,
            hold,
            regexes,
            regions: Regions::new(skip_until, skip)?,
            leads,
        })
    }

    /// Number of stops.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether there are no stops.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The include flag of each stop.
    pub fn include(&self) -> &[bool] {
        &self.include
    }

    /// The longest match of stop `i` in code points (`None` if unbounded).
    pub fn max_len(&self, i: usize) -> Option<usize> {
        match self.kinds[i] {
            Kind::Literal(k) => Some(
                std::str::from_utf8(&self.literals.patterns()[k])
                    .map_or(self.literals.patterns()[k].len(), |s| s.chars().count()),
            ),
            Kind::Regex(r) => self.regexes[r].1.max_len(),
        }
    }

    /// Whether regex stop `i` runs on the NFA engine (see `regex.rs`); false for literals.
    pub fn uses_nfa(&self, i: usize) -> bool {
        match self.kinds[i] {
            Kind::Literal(_) => false,
            Kind::Regex(r) => self.regexes[r].1.uses_nfa(),
        }
    }

    /// Approximate heap bytes.
    pub fn heap_bytes(&self) -> usize {
        self.literals.heap_bytes()
            + self.regexes.iter().map(|r| r.1.heap_bytes()).sum::<usize>()
            + self.regions.heap_bytes()
    }

    /// The stop text of literal stop `i`.
    fn literal(&self, i: usize) -> &[u8] {
        match self.kinds[i] {
            Kind::Literal(k) => &self.literals.patterns()[k],
            Kind::Regex(_) => &[],
        }
    }

    /// One-shot cut of a whole text: the length of the output, and the stop that fired with the
    /// text it matched.
    pub fn truncate(&self, text: &[u8]) -> (usize, Option<(usize, Vec<u8>)>) {
        let mut st = MatchStream::new(self);
        let mut out = Vec::new();
        // Feeding cannot fail on a fresh stream.
        if let Ok(ByteOut::Input) = st.feed(self, text, &mut out) {
            out.clear();
            out.extend_from_slice(text);
        }
        st.finish(self, &mut out);
        let stop = match st.status {
            Status::Stopped(i) => Some((i, st.stop_sequence(self).to_vec())),
            _ => None,
        };
        (out.len(), stop)
    }
}

/// Checks a regex stop's pattern without building its automaton: the longest match in code
/// points (`None` if unbounded), or the parser's message (also for a pattern that matches the
/// empty string).
pub fn regex_max_len(pattern: &str) -> Result<Option<usize>, String> {
    crate::regex::check(pattern).map_err(|e| match e {
        PatternError::Invalid(msg) | PatternError::TooBig(msg) => msg,
        PatternError::Empty => EMPTY_MATCH.to_owned(),
    })
}

const EMPTY_MATCH: &str = "the pattern matches the empty string";

/// The winning match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Win {
    start: usize,
    end: usize,
    index: usize,
}

impl Win {
    fn key(&self) -> (usize, usize) {
        (self.start, self.index)
    }
}

#[allow(clippy::unnecessary_wraps, reason = "folds over an optional best so far")]
fn better(a: Option<Win>, b: Win) -> Option<Win> {
    match a {
        Some(a) if a.key() <= b.key() => Some(a),
        _ => Some(b),
    }
}

/// The last character of `bytes` (up to 4 bytes), or empty.
fn last_char(bytes: &[u8]) -> &[u8] {
    let n = bytes.len();
    let mut k = n;
    while k > 0 && n - k < 4 {
        k -= 1;
        if bytes[k] & 0xC0 != 0x80 {
            break;
        }
    }
    &bytes[k..]
}

/// Per-stream state of a [`Matcher`].
#[derive(Clone, Debug)]
pub struct MatchStream {
    status: Status,
    finished: bool,
    /// Stream offset (bytes) of the end of the input so far.
    pos: usize,
    /// Stream offset up to which output was emitted.
    emitted: usize,
    /// `T[buf_start..pos]`: what was not emitted, plus the text of flag-on match attempts.
    buf: Vec<u8>,
    buf_start: usize,
    /// The last character of the input (look-behind for assertions).
    prev: [u8; 4],
    prev_len: u8,
    zone: Zone,
    ac: u32,
    hold_ac: u32,
    open_ac: u32,
    /// A literal match ending at `pos`, not yet settled: (start, stop index).
    cand: Option<(usize, usize)>,
    threads: Vec<Threads>,
    /// The matched text of a regex winner.
    matched: Vec<u8>,
    /// No stop fires ([`MatchStream::quiet`]).
    quiet: bool,
}

impl MatchStream {
    /// A fresh stream.
    pub fn new(m: &Matcher) -> MatchStream {
        MatchStream {
            status: Status::Open,
            finished: false,
            pos: 0,
            emitted: 0,
            buf: Vec::new(),
            buf_start: 0,
            prev: [0; 4],
            prev_len: 0,
            zone: m.regions.initial(),
            ac: Automaton::START,
            hold_ac: Automaton::START,
            open_ac: Automaton::START,
            cand: None,
            threads: m.regexes.iter().map(|r| r.1.threads()).collect(),
            matched: Vec::new(),
            quiet: false,
        }
    }

    /// Where the stream stands.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Whether `finish` was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The text held back right now.
    pub fn held(&self) -> &[u8] {
        if self.status != Status::Open {
            return &[];
        }
        self.buf.get(self.emitted - self.buf_start..).unwrap_or_default()
    }

    /// The text of the match that fired (the stop itself for a literal), empty while open.
    pub fn stop_sequence<'a>(&'a self, m: &'a Matcher) -> &'a [u8] {
        match self.status {
            Status::Stopped(i) => match m.kinds[i] {
                Kind::Literal(_) => m.literal(i),
                Kind::Regex(_) => &self.matched,
            },
            _ => &[],
        }
    }

    /// Whether the stream is inside a skip region or before the `skip_until` marker.
    pub fn in_skip(&self) -> bool {
        !matches!(self.zone, Zone::Outside)
    }

    /// Whether stops fire: while the stream is quiet, none does (contract §10's `min_tokens`:
    /// no stop that completes within the first tokens fires), and the holdback stays minimal:
    /// a complete stop that no longer stop extends is not held. A literal stop is decided where
    /// it completes, so a match that completed while quiet never fires later.
    ///
    /// Literal stops only (an error otherwise): a regex match is decided a character late, and
    /// whether an attempt can still end later than now, rather than only here, is not a fact
    /// the regex engines keep.
    pub fn quiet(&mut self, m: &Matcher, on: bool) -> Result<(), Error> {
        if !m.regexes.is_empty() {
            return Err(Error::quiet());
        }
        self.quiet = on;
        Ok(())
    }

    /// Starts over (not quiet).
    pub fn reset(&mut self, m: &Matcher) {
        *self = MatchStream::new(m);
    }

    fn set_prev(&mut self, ch: &[u8]) {
        if !ch.is_empty() {
            self.prev[..ch.len()].copy_from_slice(ch);
            self.prev_len = ch.len() as u8;
        }
    }

    /// Appends `T[a..b]` (stream offsets) to `out`, where `T[buf_start..pos0]` is in the buffer
    /// and `T[pos0..]` in `input`.
    fn copy(&self, input: &[u8], pos0: usize, a: usize, b: usize, out: &mut Vec<u8>) {
        // The offsets are always within the kept text; `get` keeps a broken invariant from
        // becoming a panic (it would show as missing output in the tests instead).
        if a >= b {
            return;
        }
        if a < pos0 {
            let (lo, hi) = (a.saturating_sub(self.buf_start), b.min(pos0) - self.buf_start);
            out.extend_from_slice(self.buf.get(lo..hi).unwrap_or_default());
        }
        if b > pos0 {
            out.extend_from_slice(input.get(a.max(pos0) - pos0..b - pos0).unwrap_or_default());
        }
    }

    /// Feeds a chunk of whole characters, appending what is now safe to emit to `out`, or
    /// returning [`ByteOut::Input`] when that is exactly the input (nothing appended). After a
    /// stop fired the input is ignored; after `finish` it is an error.
    pub fn feed(&mut self, m: &Matcher, input: &[u8], out: &mut Vec<u8>) -> Result<ByteOut, Error> {
        if self.finished {
            return Err(Error::finished());
        }
        if self.status != Status::Open {
            return Ok(ByteOut::Buffer);
        }
        if let Zone::Before(s) = self.zone {
            // Nothing is held before the `skip_until` marker: a chunk without it passes whole.
            if let Some(Step::Continue(s)) = m.regions.until().map(|u| u.scan(s, input)) {
                self.zone = Zone::Before(s);
                if !m.regexes.is_empty() {
                    self.set_prev(last_char(input));
                }
                self.pos += input.len();
                self.emitted = self.pos;
                self.buf_start = self.pos;
                return Ok(ByteOut::Input);
            }
        }
        if self.clear(m) {
            if let Some(out) = self.feed_clear(m, input) {
                return Ok(out);
            }
        }
        let pos0 = self.pos;
        let fired = self.scan(m, input);
        let pos1 = pos0 + input.len();
        self.pos = pos1;
        let pending = self.cand.is_some() || !m.regexes.is_empty();
        let win = if pending { fired.or_else(|| self.settle(m)) } else { fired };
        if let Some(w) = win {
            let cut = if m.include[w.index] { w.end } else { w.start };
            if matches!(m.kinds[w.index], Kind::Regex(_)) {
                let mut text = Vec::new();
                self.copy(input, pos0, w.start, w.end, &mut text);
                self.matched = text;
            }
            self.copy(input, pos0, self.emitted, cut, out);
            self.emitted = cut.max(self.emitted);
            self.stop(w.index);
            return Ok(ByteOut::Buffer);
        }
        let (hold, keep) = self.holdback(m);
        let hold = hold.max(self.emitted);
        if self.buf.is_empty() && self.emitted == pos0 && hold == pos1 && keep >= pos1 {
            self.emitted = pos1;
            self.buf_start = pos1;
            return Ok(ByteOut::Input);
        }
        self.copy(input, pos0, self.emitted, hold, out);
        self.emitted = hold;
        let keep = keep.min(hold);
        if keep >= pos0 {
            self.buf.clear();
            self.buf.extend_from_slice(&input[keep - pos0..]);
        } else {
            self.buf.drain(..keep - self.buf_start);
            self.buf.extend_from_slice(input);
        }
        self.buf_start = keep;
        Ok(ByteOut::Buffer)
    }

    /// `feed` of the commonest chunk, decided inline by the caller: a literal list, nothing
    /// held or pending, outside any region, and no byte of `input` can begin a stop or an
    /// opening marker. Then `input` passes whole (`true`, the stream moved past it); otherwise
    /// nothing changed (`false`) and `feed` decides. For a token stream with a skip region
    /// `wrap`'s step costs 53 ns this way, 61 ns through `feed` and its general checks, against
    /// 40 ns for the same stops without the region.
    #[inline]
    pub fn pass_clear(&mut self, m: &Matcher, input: &[u8]) -> bool {
        let pass = !self.finished
            && self.status == Status::Open
            && self.clear(m)
            && self.no_lead(m, input);
        if pass {
            self.pass(input.len());
        }
        pass
    }

    /// A literal list with nothing held or pending, outside any region: what `feed_clear`
    /// needs.
    #[inline]
    fn clear(&self, m: &Matcher) -> bool {
        m.regexes.is_empty()
            && self.zone == Zone::Outside
            && self.cand.is_none()
            && self.buf.is_empty()
            && self.emitted == self.pos
    }

    /// Every automaton at its root, and no byte of `input` can begin a stop or a marker: they
    /// all stay there.
    #[inline]
    fn no_lead(&self, m: &Matcher, input: &[u8]) -> bool {
        self.ac == Automaton::START
            && self.open_ac == Automaton::START
            && self.hold_ac == Automaton::START
            && !input.iter().any(|&b| m.leads[b as usize])
    }

    /// Moves past `len` bytes that pass whole.
    #[inline]
    fn pass(&mut self, len: usize) {
        self.pos += len;
        self.emitted = self.pos;
        self.buf_start = self.pos;
    }

    /// [`MatchStream::feed`] for the common case of a literal list with nothing held or
    /// pending: the chunk passes through whole unless a stop or an opening marker completes in
    /// it, or it ends with a partial stop; `None` (nothing changed) sends it down the general
    /// path. This skips the character loop, the buffer and the look-behind character, which
    /// only regex stops read.
    #[inline]
    fn feed_clear(&mut self, m: &Matcher, input: &[u8]) -> Option<ByteOut> {
        if self.no_lead(m, input) {
            self.pass(input.len());
            return Some(ByteOut::Input);
        }
        let Step::Continue(a) = m.literals.scan(self.ac, input) else { return None };
        let open = match m.regions.opens() {
            Some(o) => match o.scan(self.open_ac, input) {
                Step::Continue(s) => s,
                Step::Stop(_) => return None,
            },
            None => Automaton::START,
        };
        let (held, hold_ac) = match &m.hold {
            Hold::None => (0, Automaton::START),
            Hold::Same => (m.literals.depth(a), Automaton::START),
            Hold::Separate(h) => match h.scan(self.hold_ac, input) {
                Step::Continue(s) => (h.depth(s), s),
                Step::Stop(_) => return None,
            },
        };
        if held != 0 {
            return None;
        }
        self.ac = a;
        self.open_ac = open;
        self.hold_ac = hold_ac;
        self.pos += input.len();
        self.emitted = self.pos;
        self.buf_start = self.pos;
        Some(ByteOut::Input)
    }

    fn stop(&mut self, index: usize) {
        self.status = Status::Stopped(index);
        self.buf = Vec::new();
        self.buf_start = self.pos;
        self.cand = None;
        self.threads.iter_mut().for_each(Threads::clear);
    }

    /// Ends the stream, appending what was held back, or what precedes the cut if the end of the
    /// stream settles a stop.
    pub fn finish(&mut self, m: &Matcher, out: &mut Vec<u8>) {
        if self.status == Status::Open && !self.stop_at_end(m, out) {
            let pos = self.pos;
            self.copy(&[], pos, self.emitted, pos, out);
            self.status = Status::Finished;
            self.buf = Vec::new();
            self.emitted = pos;
        }
        self.finished = true;
    }

    /// Fires the stop that the end of the stream, if it came now, would fire (`\bend\b` after
    /// `"the end"`, `x$`), as [`MatchStream::finish`] does, but without finishing the stream:
    /// appends what precedes the cut to `out` and returns `true`. Returns `false`, changing
    /// nothing, when the end would fire no stop (or the stream is not open). Strict decoding
    /// calls it where the input turns out invalid: an error is not a character, so the text
    /// ends there for the stops' look-around (contract §9.9).
    pub fn stop_at_end(&mut self, m: &Matcher, out: &mut Vec<u8>) -> bool {
        if self.status != Status::Open || self.finished || !matches!(self.zone, Zone::Outside) {
            return false;
        }
        let pos = self.pos;
        let mut win = self.cand.map(|(start, index)| Win { start, end: pos, index });
        let prev = self.prev;
        let prev = &prev[..self.prev_len as usize];
        for (ri, (index, pat)) in m.regexes.iter().enumerate() {
            if let Some(start) = pat.at_end(&mut self.threads[ri], prev) {
                win = better(win, Win { start, end: pos, index: *index });
            }
        }
        let Some(w) = win else { return false };
        let cut = if m.include[w.index] { w.end } else { w.start };
        if matches!(m.kinds[w.index], Kind::Regex(_)) {
            let mut text = Vec::new();
            self.copy(&[], pos, w.start, w.end, &mut text);
            self.matched = text;
        }
        self.copy(&[], pos, self.emitted, cut, out);
        self.stop(w.index);
        self.emitted = pos;
        true
    }

    /// Matches `input`, returning the winner if one is decided inside it.
    fn scan(&mut self, m: &Matcher, input: &[u8]) -> Option<Win> {
        if m.regexes.is_empty() && self.zone == Zone::Outside && self.cand.is_none() {
            // Literal stops and markers only: each automaton runs over the whole chunk with its
            // own skip loop. A chunk in which neither completes (nearly all of them) needs
            // nothing else; otherwise it is matched again character by character below, from
            // the same states, which decides who wins and where a region starts.
            let lit = m.literals.scan(self.ac, input);
            let open = m.regions.opens().map(|o| o.scan(self.open_ac, input));
            if let (Step::Continue(a), None | Some(Step::Continue(_))) = (lit, open) {
                if let Some(Step::Continue(o)) = open {
                    self.open_ac = o;
                }
                if let Hold::Separate(h) = &m.hold {
                    if let Step::Continue(s) = h.scan(self.hold_ac, input) {
                        self.hold_ac = s;
                    }
                }
                self.ac = a;
                self.set_prev(last_char(input));
                return None;
            }
        }
        self.scan_chars(m, input)
    }

    /// [`MatchStream::scan`], one character at a time.
    fn scan_chars(&mut self, m: &Matcher, input: &[u8]) -> Option<Win> {
        let pos0 = self.pos;
        let mut j = 0;
        while j < input.len() {
            match self.zone {
                Zone::Before(s) | Zone::Inside(_, s) => {
                    let auto = match self.zone {
                        Zone::Inside(k, _) => m.regions.close(k),
                        _ => m.regions.until(),
                    };
                    let Some(auto) = auto else {
                        self.zone = Zone::Outside;
                        continue;
                    };
                    let rest = &input[j..];
                    match auto.scan(s, rest) {
                        Step::Continue(s2) => {
                            self.zone = match self.zone {
                                Zone::Inside(k, _) => Zone::Inside(k, s2),
                                _ => Zone::Before(s2),
                            };
                            self.set_prev(last_char(rest));
                            j = input.len();
                        }
                        Step::Stop(hit) => {
                            self.set_prev(last_char(&rest[..hit.end]));
                            j += hit.end;
                            self.zone = Zone::Outside;
                            self.ac = Automaton::START;
                            self.hold_ac = Automaton::START;
                            self.open_ac = Automaton::START;
                        }
                    }
                }
                Zone::Outside => {
                    if self.cand.is_none()
                        && self.ac == Automaton::START
                        && self.hold_ac == Automaton::START
                        && self.open_ac == Automaton::START
                        && self.threads.iter().all(|t| t.len() == 0)
                    {
                        // Nothing in progress: jump to the next byte that can begin something
                        // (never a continuation byte, so it starts a character).
                        let rest = &input[j..];
                        let k =
                            rest.iter().position(|&b| m.leads[b as usize]).unwrap_or(rest.len());
                        if k > 0 {
                            self.set_prev(last_char(&rest[..k]));
                            j += k;
                            continue;
                        }
                    }
                    let n = char_len(input[j]).min(input.len() - j);
                    let ch = &input[j..j + n];
                    let pos = pos0 + j;
                    let mut win =
                        self.cand.take().map(|(start, index)| Win { start, end: pos, index });
                    let prev = self.prev;
                    let prev = &prev[..self.prev_len as usize];
                    for (ri, (index, pat)) in m.regexes.iter().enumerate() {
                        if let Some(start) = pat.on_char(&mut self.threads[ri], pos, prev, ch) {
                            win = better(win, Win { start, end: pos, index: *index });
                        }
                    }
                    if win.is_some() {
                        return win;
                    }
                    let mut opened = None;
                    for (k, &b) in ch.iter().enumerate() {
                        let (s, hit) = m.literals.step_out(self.ac, b);
                        self.ac = s;
                        if let Hold::Separate(h) = &m.hold {
                            self.hold_ac = h.step_out(self.hold_ac, b).0;
                        }
                        if let Some(p) = hit {
                            if self.quiet {
                                self.pass_over(m);
                            } else {
                                let len = m.literals.patterns()[p].len();
                                self.cand = Some((pos + k + 1 - len, m.literal_stop[p]));
                            }
                        }
                        if let Some(opens) = m.regions.opens() {
                            let (s, hit) = opens.step_out(self.open_ac, b);
                            self.open_ac = s;
                            if hit.is_some() {
                                opened = hit;
                            }
                        }
                    }
                    self.set_prev(ch);
                    j += n;
                    if let Some(k) = opened {
                        // The marker wins over a stop ending where it ends, and no stop may
                        // reach into the region: every attempt is dropped.
                        self.cand = None;
                        self.threads.iter_mut().for_each(Threads::clear);
                        self.zone = Zone::Inside(k, Automaton::START);
                    }
                }
            }
        }
        None
    }

    /// A stop completed while quiet: passed over, and not held either (a stop no longer one
    /// extends). Out of line: the usual hit ends the stream, and this one is rare.
    #[cold]
    #[inline(never)]
    fn pass_over(&mut self, m: &Matcher) {
        self.ac = m.literals.unfired(self.ac);
        if let Hold::Separate(h) = &m.hold {
            self.hold_ac = h.unfired(self.hold_ac);
        }
    }

    /// At the end of the input: a match ending here that holds whatever comes next, if no match
    /// that could beat it is still undecided.
    fn settle(&mut self, m: &Matcher) -> Option<Win> {
        if !matches!(self.zone, Zone::Outside) {
            return None;
        }
        let pos = self.pos;
        let mut certain = self.cand.map(|(start, index)| Win { start, end: pos, index });
        let mut open: Option<(usize, usize)> = None;
        let prev = self.prev;
        let prev = &prev[..self.prev_len as usize];
        for (ri, (index, pat)) in m.regexes.iter().enumerate() {
            if self.threads[ri].len() == 0 {
                continue;
            }
            let (always, maybe) = pat.pending(&mut self.threads[ri], prev);
            if let Some(start) = always {
                certain = better(certain, Win { start, end: pos, index: *index });
            }
            if let Some(start) = maybe {
                let k = (start, *index);
                open = Some(open.map_or(k, |o| o.min(k)));
            }
        }
        let c = certain?;
        match open {
            Some(o) if o < c.key() => None,
            _ => Some(c),
        }
    }

    /// (hold, keep): the offset from which the text must be held back, and from which it must be
    /// kept (for the matched text of flag-on regex attempts).
    fn holdback(&self, m: &Matcher) -> (usize, usize) {
        let pos = self.pos;
        if !matches!(self.zone, Zone::Outside) {
            return (pos, pos);
        }
        let mut hold = pos;
        match &m.hold {
            Hold::None => {}
            Hold::Same => hold -= m.literals.depth(self.ac),
            Hold::Separate(h) => hold -= h.depth(self.hold_ac),
        }
        if let Some((start, index)) = self.cand {
            if !m.include[index] {
                hold = hold.min(start);
            }
        }
        let mut keep = pos;
        for (ri, (index, _)) in m.regexes.iter().enumerate() {
            if let Some(s) = self.threads[ri].earliest() {
                if m.include[*index] {
                    keep = keep.min(s);
                } else {
                    hold = hold.min(s);
                }
            }
        }
        (hold, keep.min(hold))
    }
}

impl TextMatcher for MatchStream {
    type Set = Matcher;

    fn status(&self) -> Status {
        self.status
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn holds_nothing(&self, _: &Matcher) -> bool {
        self.held().is_empty()
    }

    fn feed_text(&mut self, m: &Matcher, text: &[u8], out: &mut Vec<u8>) -> Result<ByteOut, Error> {
        self.feed(m, text, out)
    }

    fn finish_text(&mut self, m: &Matcher, out: &mut Vec<u8>) {
        self.finish(m, out);
    }

    fn stop_at_end(&mut self, m: &Matcher, out: &mut Vec<u8>) -> bool {
        MatchStream::stop_at_end(self, m, out)
    }

    fn mark_finished(&mut self) {
        self.finished = true;
    }
}

#[cfg(test)]
#[path = "matcher_tests.rs"]
mod tests;
