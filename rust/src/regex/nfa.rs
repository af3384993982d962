//! The NFA engine: a simulation of the pattern's Thompson NFA, with the assertions evaluated on
//! the actual neighbouring characters, and the viability analysis that keeps its holdback exact.

use regex_automata::nfa::thompson::{State, NFA};
use regex_automata::util::look::LookMatcher;
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Hir, HirKind};

use super::dfa::Stamps;

/// The NFA engine's test for "is this state set taken already" in a step: an open-addressing
/// table of the threads kept so far, by a hash of their (sorted) state sets, so that merging
/// threads costs the same per thread whatever their number, as [`Stamps`] does for the DFA.
/// About 20 ns per live thread at N = 250 to 4,000 (`\b.{1000}x`: 20 us a character, where a
/// linear scan of the kept threads, quadratic in their number, took 58 us). Scratch space like
/// [`Stamps`]: a clone starts empty.
#[derive(Debug, Default)]
pub(super) struct SetIndex {
    /// (hash, index + 1 into the kept threads); 0 is an empty slot.
    pub(super) slots: Vec<(u64, usize)>,
}

impl Clone for SetIndex {
    fn clone(&self) -> SetIndex {
        SetIndex::default()
    }
}

impl SetIndex {
    /// Empties the table, for up to `n` entries.
    #[inline]
    pub(super) fn clear(&mut self, n: usize) {
        let size = (2 * n).next_power_of_two().max(8);
        self.slots.clear();
        self.slots.resize(size, (0, 0));
    }

    /// Records `index` under `hash` unless an entry for which `same` holds is there already
    /// (then `false`).
    #[inline]
    pub(super) fn insert(&mut self, hash: u64, index: usize, same: impl Fn(usize) -> bool) -> bool {
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
pub(super) const SCAN_THREADS: usize = 8;

/// A hash of a state set (FxHash's step, then a finalizer that spreads it to the low bits the
/// table indexes by).
pub(super) fn set_hash(set: &[StateID]) -> u64 {
    let mut h: u64 = set.len() as u64;
    for id in set {
        h = (h.rotate_left(5) ^ id.as_u64()).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[derive(Debug)]
#[allow(clippy::struct_field_names, reason = "the NFA of the NFA engine")]
pub(super) struct Nfa {
    pub(super) nfa: NFA,
    pub(super) looks: LookMatcher,
    /// Per NFA state, one bit per [`CLASSES`] entry: whether, standing in this state after a
    /// character of that class, some continuation of the text still completes a match (see
    /// [`Nfa::viability`]). Threads keep only such states.
    pub(super) viable: Vec<u8>,
    /// Whether some state a thread can be in is not viable (else nothing is ever dropped
    /// early, and the check is skipped: `\bend\b` and most patterns).
    pub(super) prunes: bool,
    /// The Unicode word characters (`\w`), as code point ranges.
    pub(super) word: Vec<(u32, u32)>,
}

/// The characters as the assertions see them: an ASCII word character, a non-ASCII word
/// character, any other character but the two line terminators, `\n`, `\r` (one
/// representative each). Every assertion of the dialect depends only on which of these the
/// characters on either side are (or on the start or end of the stream).
pub(super) const CLASSES: [&[u8]; 5] = [b"a", "\u{e9}".as_bytes(), b" ", b"\n", b"\r"];
/// Every class bit of [`Nfa::viable`].
pub(super) const ALL_CLASSES: u8 = (1 << CLASSES.len()) - 1;
/// Work units (closures and character paths) the viability analysis may spend on one pattern;
/// past them every state counts as viable (the attempts then live until an assertion fails, as
/// they would without the analysis).
pub(super) const VIABILITY_BUDGET: usize = 1 << 21;

/// Whether the code point range `lo..=hi` meets one of `ranges` (sorted, disjoint).
pub(super) fn meets(ranges: &[(u32, u32)], lo: u32, hi: u32) -> bool {
    let i = ranges.partition_point(|r| r.1 < lo);
    i < ranges.len() && ranges[i].0 <= hi
}

/// Whether some code point encoded by a sequence of byte ranges (`rect[0]` the lead byte's)
/// lies in `ranges`.
pub(super) fn rect_meets(rect: &[(u8, u8)], ranges: &[(u32, u32)]) -> bool {
    pub(super) fn go(rect: &[(u8, u8)], i: usize, prefix: u32, ranges: &[(u32, u32)]) -> bool {
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
pub(super) type PartialChar = (StateID, Vec<(u8, u8)>, usize);

/// The transitions of a byte-consuming state as (first byte, last byte, target).
pub(super) fn transitions(state: &State) -> Vec<(u8, u8, StateID)> {
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
    pub(super) live: Vec<(usize, Vec<StateID>)>,
    /// The states an epsilon closure reached.
    pub(super) seen: Stamps,
    /// The state sets of the threads kept so far in a step.
    pub(super) taken: SetIndex,
    pub(super) stack: Vec<StateID>,
    pub(super) scratch: Vec<StateID>,
}

impl Clone for NfaThreads {
    fn clone(&self) -> NfaThreads {
        NfaThreads { live: self.live.clone(), ..NfaThreads::default() }
    }
}

/// Where an epsilon closure is taken.
#[derive(Clone, Copy)]
pub(super) enum Ctx<'a> {
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
pub(super) const LOOKAHEADS: [&[u8]; 6] = [b"", b"a", "\u{e9}".as_bytes(), b" ", b"\n", b"\r"];

/// The Unicode word characters (`\w`, the class Unicode `\b` looks at), as code point ranges.
pub(super) fn word_ranges() -> Vec<(u32, u32)> {
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
pub(super) fn class_ranges(word: &[(u32, u32)]) -> [Vec<(u32, u32)>; 5] {
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
    pub(super) fn new(nfa: NFA) -> Nfa {
        let looks = nfa.look_matcher().clone();
        let word = word_ranges();
        let mut n = Nfa { nfa, looks, viable: Vec::new(), prunes: true, word };
        (n.viable, n.prunes) = n.viability();
        n
    }

    /// The [`CLASSES`] index of a character (its UTF-8 bytes, or a lone surrogate's three).
    pub(super) fn class_of(&self, ch: &[u8]) -> usize {
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
    pub(super) fn viability(&self) -> (Vec<u8>, bool) {
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
    pub(super) fn char_paths(
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
    pub(super) fn closure(&self, t: &mut NfaThreads, set: &[StateID], ctx: Ctx<'_>) -> bool {
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
    pub(super) fn step(&self, t: &NfaThreads, b: u8, out: &mut Vec<StateID>) {
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

    pub(super) fn on_char(
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

    pub(super) fn at_end(&self, t: &mut NfaThreads, prev: &[u8]) -> Option<usize> {
        let live = std::mem::take(&mut t.live);
        let found = live
            .iter()
            .find(|(_, states)| self.closure(t, states, Ctx::At(prev, prev.len())))
            .map(|x| x.0);
        t.live = live;
        found
    }

    pub(super) fn pending(
        &self,
        t: &mut NfaThreads,
        prev: &[u8],
    ) -> (Option<usize>, Option<usize>) {
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
