//! The compiled stop set: an Aho-Corasick automaton over UTF-8 bytes with *standard*
//! (earliest-ending) semantics, plus the two facts per state that the stream needs.
//!
//! # Why a hand-written automaton
//!
//! Minimal holdback needs, after every chunk, the length of the longest suffix of the text that is
//! a proper prefix of some stop. In an Aho-Corasick automaton that is exactly the *depth* of the
//! current state (the length of the trie string it stands for). The `aho-corasick` crate does not
//! expose depth, nor which pattern a state is a prefix of (needed to rebuild the held-back text
//! without a per-stream buffer), and recovering them means a BFS over its opaque state ids plus a
//! side table indexed by them. Writing the automaton here costs ~250 lines and gives:
//!
//! * depth and "longest stop ending here" in two flat arrays, computed during construction;
//! * the match flag folded into the high bit of each transition, so the per-byte loop is one
//!   table load, one test and one move;
//! * per-stream state of one `u32`: the held-back text is a prefix of a known stop, so it is
//!   never copied into a per-stream buffer.
//!
//! Measured with `rust/examples/automaton.rs` (4 MiB of source text in 4-byte chunks, release
//! build, 2-core machine): stepping this DFA and reading the holdback costs 6.0-6.3 ns per chunk
//! for 4, 1 and 1,000 stops; the crate's `dfa::DFA` driven through its `Automaton` trait costs
//! 5.9-6.1 ns for the stepping alone (ratio 1.02-1.05) and 9.3-9.4 ns once the state-id → depth
//! lookup that minimal holdback needs is added (ratio 0.65-0.68). Same speed for the same work,
//! and the hand-written tables also give the held-back text for free.
//!
//! # Representation
//!
//! Bytes are first mapped to classes: every byte that occurs in some stop gets its own class and
//! all other bytes share class 0 (from any state they lead back to the root). When
//! `states × classes` fits the budget, transitions are a dense table of `u32` with premultiplied
//! state ids. Past the budget (tens of thousands of long stops over a wide alphabet), the trie is
//! kept sparse and stepped through failure links, with a dense row for the root where nearly all
//! of the time is spent; that keeps memory linear in the total length of the stops.

use std::fmt;

/// Set on a transition whose target state completes a stop.
const MATCH_BIT: u32 = 1 << 31;
/// Marks "no stop ends here" in [`Automaton::out`].
const NONE: u32 = u32::MAX;
/// Largest dense table, in entries (4 bytes each): 32 MiB.
const DENSE_BUDGET: usize = 8 << 20;

/// A stop that completed: which one, and how long it is in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Index of the winning stop in the list as given.
    pub pattern: usize,
    /// Bytes of input consumed up to and including the stop's last byte.
    pub end: usize,
}

/// Outcome of scanning a run of bytes from some state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// No stop completed; the automaton is now in this state.
    Continue(u32),
    /// A stop completed; scanning stopped there.
    Stop(Hit),
}

/// The automaton for one stop list. Immutable once built, so one instance serves any number of
/// streams on any number of threads.
pub struct Automaton {
    /// The stops as UTF-8 bytes (lone surrogates encoded as three bytes, like CPython's
    /// `surrogatepass`), in the order given.
    patterns: Vec<Box<[u8]>>,
    /// Byte → class.
    classes: [u8; 256],
    /// Per state index: length of the state's string.
    depth: Vec<u32>,
    /// Per state index: a stop of which the state's string is a prefix.
    prefix_of: Vec<u32>,
    /// Per state index: the longest stop that is a suffix of the state's string (first listed
    /// among equal strings), or `NONE`.
    out: Vec<u32>,
    /// Longest stop in bytes.
    max_len: usize,
    /// Bytes that leave the root; used to skip ahead in long inputs.
    first_bytes: Vec<u8>,
    repr: Repr,
}

enum Repr {
    /// `table[sid + class]`, `sid` premultiplied by the stride `1 << shift` (a power of two, so
    /// the state index is a shift away, not a division); high bit = target completes a stop.
    Dense { table: Vec<u32>, shift: u32 },
    /// Trie edges sorted by byte, failure links, and a dense root row.
    Sparse { edges: Vec<Vec<(u8, u32)>>, fail: Vec<u32>, root: Box<[u32; 256]> },
}

impl fmt::Debug for Automaton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Automaton")
            .field("patterns", &self.patterns.len())
            .field("states", &self.depth.len())
            .field("dense", &matches!(self.repr, Repr::Dense { .. }))
            .finish_non_exhaustive()
    }
}

impl Automaton {
    /// Builds the automaton. Every pattern must be non-empty (checked by the caller, which knows
    /// how to name the offending position).
    pub(crate) fn new(patterns: Vec<Box<[u8]>>) -> Automaton {
        Self::with_budget(patterns, DENSE_BUDGET)
    }

    fn with_budget(patterns: Vec<Box<[u8]>>, dense_budget: usize) -> Automaton {
        debug_assert!(patterns.iter().all(|p| !p.is_empty()));
        // Trie.
        let mut edges: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
        let mut depth: Vec<u32> = vec![0];
        let mut prefix_of: Vec<u32> = vec![NONE];
        let mut out: Vec<u32> = vec![NONE];
        let mut used = [false; 256];
        for (pid, pat) in patterns.iter().enumerate() {
            let pid = to_u32(pid);
            let mut s = 0usize;
            for &b in &**pat {
                used[b as usize] = true;
                s = match edges[s].binary_search_by_key(&b, |&(k, _)| k) {
                    Ok(i) => edges[s][i].1 as usize,
                    Err(i) => {
                        let t = edges.len();
                        edges[s].insert(i, (b, to_u32(t)));
                        edges.push(Vec::new());
                        depth.push(depth[s] + 1);
                        prefix_of.push(pid);
                        out.push(NONE);
                        t
                    }
                };
            }
            if out[s] == NONE {
                out[s] = pid; // first listed wins among duplicates
            }
        }
        // Failure links in BFS order; `out` inherits the longest suffix stop from the failure
        // state, which is final by the time it is read because BFS visits shallower states first.
        let n = edges.len();
        let mut fail = vec![0u32; n];
        let mut order = Vec::with_capacity(n);
        order.push(0u32);
        let mut head = 0;
        while head < order.len() {
            let s = order[head] as usize;
            head += 1;
            for &(b, t) in &edges[s] {
                let t_us = t as usize;
                if s != 0 {
                    let mut f = fail[s] as usize;
                    fail[t_us] = loop {
                        if let Ok(i) = edges[f].binary_search_by_key(&b, |&(k, _)| k) {
                            break edges[f][i].1;
                        }
                        if f == 0 {
                            break 0;
                        }
                        f = fail[f] as usize;
                    };
                    if out[t_us] == NONE {
                        out[t_us] = out[fail[t_us] as usize];
                    }
                }
                order.push(t);
            }
        }

        let mut classes = [0u8; 256];
        let mut nclasses = 1usize;
        for (b, &u) in used.iter().enumerate() {
            if u {
                classes[b] = nclasses as u8;
                nclasses += 1;
            }
        }
        let first_bytes: Vec<u8> = edges[0].iter().map(|&(b, _)| b).collect();
        let max_len = patterns.iter().map(|p| p.len()).max().unwrap_or(0);

        let stride = nclasses.next_power_of_two();
        let repr = if n.saturating_mul(stride) <= dense_budget {
            Self::dense(&edges, &fail, &order, &out, &classes, stride)
        } else {
            let mut root = Box::new([0u32; 256]);
            for &(b, t) in &edges[0] {
                root[b as usize] = t;
            }
            Repr::Sparse { edges, fail, root }
        };
        Automaton { patterns, classes, depth, prefix_of, out, max_len, first_bytes, repr }
    }

    /// Full DFA: `delta(s, c) = trie edge if any, else delta(fail(s), c)`, filled in BFS order
    /// so the failure state's row is complete when it is copied from.
    fn dense(
        edges: &[Vec<(u8, u32)>],
        fail: &[u32],
        order: &[u32],
        out: &[u32],
        classes: &[u8; 256],
        stride: usize,
    ) -> Repr {
        let n = edges.len();
        let mut table = vec![0u32; n * stride];
        for &s in order {
            let s = s as usize;
            if s != 0 {
                let f = fail[s] as usize;
                table.copy_within(f * stride..(f + 1) * stride, s * stride);
            }
            for &(b, t) in &edges[s] {
                table[s * stride + classes[b as usize] as usize] = t;
            }
        }
        for entry in &mut table {
            let t = *entry as usize;
            *entry = to_u32(t * stride) | if out[t] == NONE { 0 } else { MATCH_BIT };
        }
        Repr::Dense { table, shift: stride.trailing_zeros() }
    }

    /// The root state, where every stream starts.
    pub const START: u32 = 0;

    /// The stops as bytes, in the order given.
    pub fn patterns(&self) -> &[Box<[u8]>] {
        &self.patterns
    }

    /// Length in bytes of the longest stop (0 when there are none).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Number of automaton states (a size measure).
    pub fn state_count(&self) -> usize {
        self.depth.len()
    }

    /// Approximate heap bytes held by the automaton.
    pub fn heap_bytes(&self) -> usize {
        let pats: usize = self.patterns.iter().map(|p| p.len() + 16).sum();
        let per_state = self.depth.len() * 12;
        let repr = match &self.repr {
            Repr::Dense { table, .. } => table.len() * 4,
            Repr::Sparse { edges, fail, .. } => {
                edges.iter().map(|e| e.len() * 8 + 24).sum::<usize>() + fail.len() * 4 + 1024
            }
        };
        pats + per_state + repr
    }

    fn index(&self, sid: u32) -> usize {
        match &self.repr {
            Repr::Dense { shift, .. } => (sid >> shift) as usize,
            Repr::Sparse { .. } => sid as usize,
        }
    }

    /// Length of the state's string: how many trailing bytes of the text could still be the
    /// start of a stop.
    pub fn depth(&self, sid: u32) -> usize {
        self.depth[self.index(sid)] as usize
    }

    /// The state's string: the trailing bytes of the text that could still start a stop.
    pub fn held(&self, sid: u32) -> &[u8] {
        let i = self.index(sid);
        let d = self.depth[i] as usize;
        if d == 0 {
            return &[];
        }
        &self.patterns[self.prefix_of[i] as usize][..d]
    }

    /// Scans `bytes` from state `sid`, stopping at the first (earliest-ending) stop.
    #[inline]
    pub fn scan(&self, sid: u32, bytes: &[u8]) -> Step {
        match &self.repr {
            Repr::Dense { table, .. } => {
                if bytes.len() >= 64 && self.first_bytes.len() <= 3 {
                    return self.scan_dense_skipping(table, sid, bytes);
                }
                let mut s = sid;
                for (i, &b) in bytes.iter().enumerate() {
                    let next = table[s as usize + self.classes[b as usize] as usize];
                    if next & MATCH_BIT != 0 {
                        return Step::Stop(self.hit(next & !MATCH_BIT, i + 1));
                    }
                    s = next;
                }
                Step::Continue(s)
            }
            Repr::Sparse { edges, fail, root } => {
                let mut s = sid;
                for (i, &b) in bytes.iter().enumerate() {
                    s = Self::sparse_next(edges, fail, root, s, b);
                    if self.out[s as usize] != NONE {
                        return Step::Stop(self.hit(s, i + 1));
                    }
                }
                Step::Continue(s)
            }
        }
    }

    /// Dense scan for long inputs: while at the root, jump to the next byte that can start a
    /// stop with `memchr` (up to three distinct first bytes), which runs at memory speed.
    fn scan_dense_skipping(&self, table: &[u32], sid: u32, bytes: &[u8]) -> Step {
        let fb = &self.first_bytes;
        let find = |hay: &[u8]| match fb.len() {
            0 => None,
            1 => memchr::memchr(fb[0], hay),
            2 => memchr::memchr2(fb[0], fb[1], hay),
            _ => memchr::memchr3(fb[0], fb[1], fb[2], hay),
        };
        let mut s = sid;
        let mut i = 0;
        while i < bytes.len() {
            if s == 0 {
                match find(&bytes[i..]) {
                    Some(j) => i += j,
                    None => return Step::Continue(0),
                }
            }
            let next = table[s as usize + self.classes[bytes[i] as usize] as usize];
            i += 1;
            if next & MATCH_BIT != 0 {
                return Step::Stop(self.hit(next & !MATCH_BIT, i));
            }
            s = next;
        }
        Step::Continue(s)
    }

    fn sparse_next(
        edges: &[Vec<(u8, u32)>],
        fail: &[u32],
        root: &[u32; 256],
        sid: u32,
        b: u8,
    ) -> u32 {
        let mut s = sid as usize;
        loop {
            if s == 0 {
                return root[b as usize];
            }
            if let Ok(i) = edges[s].binary_search_by_key(&b, |&(k, _)| k) {
                return edges[s][i].1;
            }
            s = fail[s] as usize;
        }
    }

    fn hit(&self, sid: u32, end: usize) -> Hit {
        Hit { pattern: self.out[self.index(sid)] as usize, end }
    }
}

fn to_u32(n: usize) -> u32 {
    // The state count is bounded by the total length of the stops; 2^31 states would need tens
    // of GiB of tables, far past any real stop list.
    u32::try_from(n)
        .ok()
        .filter(|&v| v < MATCH_BIT)
        .expect("stop list too large for a u32 state id")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(stops: &[&str], budget: usize) -> Automaton {
        Automaton::with_budget(stops.iter().map(|s| s.as_bytes().into()).collect(), budget)
    }

    fn first_stop(a: &Automaton, text: &str) -> Option<(usize, usize)> {
        match a.scan(Automaton::START, text.as_bytes()) {
            Step::Stop(h) => Some((h.pattern, h.end)),
            Step::Continue(_) => None,
        }
    }

    #[test]
    #[allow(clippy::type_complexity, reason = "a table of literal cases")]
    fn table() {
        // (stops, text, expected (pattern, end))
        let cases: &[(&[&str], &str, Option<(usize, usize)>)] = &[
            (&["</answer>"], "Hello </answer> tail", Some((0, 15))),
            (&["abcd", "bc"], "abcd", Some((1, 3))),
            (&["bc", "abc"], "xabc", Some((1, 4))),
            (&["c", "bc", "abc"], "abc", Some((2, 3))),
            (&["ab", "ab"], "xab", Some((0, 3))),
            (&["b", "ab", "ab"], "ab", Some((1, 2))),
            (&["aaa"], "aaaa", Some((0, 3))),
            (&["é"], "café", Some((0, 5))),
            (&["中文"], "中中文", Some((0, 9))),
            (&["😀!"], "a😀😀!", Some((0, 10))),
            (&["x"], "", None),
            (&["abc"], "ababab", None),
        ];
        for budget in [DENSE_BUDGET, 0] {
            for (stops, text, want) in cases {
                let a = build(stops, budget);
                assert_eq!(first_stop(&a, text), *want, "{stops:?} {text:?} budget {budget}");
            }
        }
    }

    #[test]
    fn depth_is_longest_suffix_that_is_a_prefix() {
        for budget in [DENSE_BUDGET, 0] {
            let a = build(&["</answer>", "\n\nUser:"], budget);
            let Step::Continue(s) = a.scan(Automaton::START, b"hi </ans") else { panic!() };
            assert_eq!(a.held(s), b"</ans");
            let Step::Continue(s) = a.scan(s, b"\n") else { panic!() };
            assert_eq!(a.held(s), b"\n");
            let Step::Continue(s) = a.scan(s, b"x") else { panic!() };
            assert_eq!(a.depth(s), 0);
        }
    }

    #[test]
    fn long_input_skip_matches_plain_scan() {
        let a = build(&["</a>"], DENSE_BUDGET);
        let mut text = "x".repeat(1000);
        text.push_str("<</a");
        let Step::Continue(s) = a.scan(Automaton::START, text.as_bytes()) else { panic!() };
        assert_eq!(a.held(s), b"</a");
        text.push_str(">yy");
        assert_eq!(first_stop(&a, &text), Some((0, 1005)));
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Automaton>();
        assert_send_sync::<Hit>();
        assert_send_sync::<Step>();
    }
}
