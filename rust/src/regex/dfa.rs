//! The DFA engine: a dense DFA from `regex-automata`, copied into a flat table with three facts
//! per state, and its per-stream threads merged by a stamp per state.

use regex_automata::dfa::{dense, Automaton as _, StartKind};
use regex_automata::nfa::thompson::NFA;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

/// Set on a DFA transition taken from a state in which a match ends (the match is the text up to,
/// not including, the byte of the transition).
pub(super) const MATCH: u32 = 1 << 31;
/// Index of the dead state in [`Dfa::trans`].
pub(super) const DEAD: u32 = 0;

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
    pub(super) live: Vec<(usize, u32)>,
    /// Which states a thread kept in the current step took.
    pub(super) taken: Stamps,
}

/// A set of small integers (DFA or NFA states) that empties in constant time: `marks[i]` is
/// the round in which `i` was last marked. Scratch space, not state: a clone starts empty (so
/// copying a stream, as a strict-mode feed does to undo a failing call, does not copy an array
/// as large as the automaton), and the array grows to the automaton's size on first use.
#[derive(Debug, Default)]
pub(super) struct Stamps {
    pub(super) marks: Vec<u32>,
    pub(super) round: u32,
}

impl Clone for Stamps {
    fn clone(&self) -> Stamps {
        Stamps::default()
    }
}

impl Stamps {
    /// Empties the set, which then holds integers below `n`.
    #[inline]
    pub(super) fn clear(&mut self, n: usize) {
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
    pub(super) fn insert(&mut self, i: usize) -> bool {
        let slot = &mut self.marks[i];
        if *slot == self.round {
            return false;
        }
        *slot = self.round;
        true
    }
}

/// Per-state facts, one byte each.
pub(super) const EOI_MATCH: u8 = 1;
/// The match ending at the current position holds whatever character (or the end) follows.
pub(super) const ALWAYS: u8 = 2;
/// It holds for some next character or the end.
pub(super) const MAYBE: u8 = 4;

/// A dense DFA copied out of `regex-automata` into a flat table whose state 0 is dead and into
/// which every state that can no longer reach a match has been folded.
#[derive(Debug)]
pub(super) struct Dfa {
    pub(super) classes: [u8; 256],
    pub(super) stride: usize,
    /// `trans[q * stride + class]`: target index, with [`MATCH`] if a match ends before the byte.
    pub(super) trans: Vec<u32>,
    pub(super) info: Vec<u8>,
    /// Start state by look-behind byte; index 256 is "start of stream".
    pub(super) starts: Vec<u32>,
}

impl Dfa {
    /// Builds the table, or `None` if the DFA would take more than `limit` bytes (the NFA engine
    /// then runs it).
    pub(super) fn new(nfa: &NFA, limit: usize) -> Option<Dfa> {
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .match_kind(MatchKind::All)
                    .dfa_size_limit(Some(limit))
                    .determinize_size_limit(Some(limit)),
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
    pub(super) fn next(&self, q: u32, b: u8) -> u32 {
        self.trans[q as usize * self.stride + self.classes[b as usize] as usize]
    }

    /// One character for every live thread; the smallest start of a match ending before it.
    ///
    /// With no live thread (most characters, for most stops) nothing else is read. Otherwise
    /// what every thread reads the same (the character's byte classes, the table, the round of
    /// the marks) is read once per character, not once per thread: 4 regex stops over 4-byte
    /// chunks cost 67 ns a chunk against 70-71 before, `.{1000}x` 2.5 µs a character against
    /// 2.7 (`benches/regex_bench.py`'s streams, alternated runs, load 0.7).
    pub(super) fn on_char(
        &self,
        t: &mut DfaThreads,
        pos: usize,
        prev: &[u8],
        ch: &[u8],
    ) -> Option<usize> {
        let start = self.starts[prev.last().map_or(256, |&b| b as usize)];
        let DfaThreads { live, taken } = t;
        if start != DEAD && self.next(start, ch[0]) & !MATCH != DEAD {
            live.push((pos, start));
        }
        if live.is_empty() {
            return None;
        }
        taken.clear(self.info.len());
        let (trans, stride, round) = (&self.trans[..], self.stride, taken.round);
        let marks = &mut taken.marks[..];
        let first = self.classes[ch[0] as usize] as usize;
        let mut rest = [0usize; 3];
        for (class, &b) in rest.iter_mut().zip(&ch[1..]) {
            *class = self.classes[b as usize] as usize;
        }
        let rest = &rest[..ch.len() - 1];
        let mut matched = None;
        let mut keep = 0;
        for i in 0..live.len() {
            let (s, q) = live[i];
            let next = trans[q as usize * stride + first];
            if next & MATCH != 0 && matched.is_none() {
                matched = Some(s);
            }
            let mut q = next & !MATCH;
            for &class in rest {
                if q == DEAD {
                    break;
                }
                q = trans[q as usize * stride + class] & !MATCH;
            }
            // Same state, same future: keep the earlier start only (threads are in start order).
            if q != DEAD && marks[q as usize] != round {
                marks[q as usize] = round;
                live[keep] = (s, q);
                keep += 1;
            }
        }
        live.truncate(keep);
        matched
    }
}
