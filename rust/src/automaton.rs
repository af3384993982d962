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
//! build, 2-core machine, best of 5): the crate's `dfa::DFA` driven through its `Automaton`
//! trait costs 5.9-6.1 ns per chunk to step and 9.3-9.6 ns once the state-id → depth lookup that
//! minimal holdback needs is added. The first version of this automaton, the same table walk,
//! cost 6.0-6.3 ns with the holdback included (ratio 0.65-0.68 against the crate with the
//! lookup). The current one skips bytes that cannot leave the root with no dependency from one
//! byte to the next and costs 2.5-3.7 ns (ratio 0.26-0.38) for 4, 1 and 1,000 stops, a skip the
//! crate's trait does not allow from outside.
//!
//! # Representation
//!
//! Bytes are first mapped to classes: every byte that occurs in some stop gets its own class and
//! all other bytes share class 0 (from any state they lead back to the root).
//!
//! States are numbered breadth-first, so shallow states come first. The shallow ones, where a
//! scan spends nearly all its time, get full rows in a dense table of `u32` transitions with
//! premultiplied ids (one load per byte), as many as fit a memory budget.
//! Deeper states, typically the single-child tails of long stops, are stored sparsely: their
//! trie edges in one flat array plus a failure link, which ends in a dense row. Per-chunk cost
//! thus stays nearly flat from one stop to tens of thousands, and memory stays linear in the
//! total length of the stops.
//!
//! Every transition carries two flags: [`MATCH_BIT`] (the target completes a stop) and
//! [`SPARSE`] (the target is a sparse state, whose id is then an index into the sparse arrays).

use std::fmt;

/// Set on a transition whose target state completes a stop.
const MATCH_BIT: u32 = 1 << 31;
/// Set on the id of a sparse (deep) state; the low bits are its sparse index.
const SPARSE: u32 = 1 << 30;
/// The id bits.
const ID_MASK: u32 = SPARSE - 1;
/// Marks "no stop ends here" in [`Automaton::out`].
const NONE: u32 = u32::MAX;
/// Largest dense table, in entries (4 bytes each): 4 MiB. Measured on real token streams with
/// 1,000 and 10,000 word-like stops, a `wrap` step cost 62 / 76 ns with a 256 KiB budget and
/// 56 / 69 ns with this one, and `truncate` ran at 0.34 / 0.15 GB/s against 0.47 / 0.22 GB/s:
/// denser beats smaller, while the bound keeps huge stop lists from costing gigabytes.
const DENSE_BUDGET: usize = 1 << 20;
/// Inputs at least this long skip ahead with `memchr` while at the root.
const SKIP_MIN_LEN: usize = 64;

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
    /// Byte → class (up to 256 used bytes plus the shared class 0, so `u16`).
    classes: [u16; 256],
    /// Dense rows: `table[sid + class]` for a dense state id `sid` (premultiplied by
    /// `1 << shift`).
    table: Vec<u32>,
    shift: u32,
    /// Number of dense states; sparse index `k` is state number `dense + k`.
    dense: usize,
    /// Sparse states: edges of sparse index `k` are `edge_start[k]..edge_start[k + 1]`, sorted
    /// by byte.
    edge_start: Vec<u32>,
    edge_byte: Vec<u8>,
    /// Encoded target ids (with flags).
    edge_target: Vec<u32>,
    /// Encoded failure target of each sparse state.
    fail: Vec<u32>,
    /// Per state number: length of the state's string.
    depth: Vec<u32>,
    /// Per state number: a stop of which the state's string is a prefix.
    prefix_of: Vec<u32>,
    /// Per state number: the longest stop that is a suffix of the state's string (first listed
    /// among equal strings), or `NONE`.
    out: Vec<u32>,
    /// Longest stop in bytes.
    max_len: usize,
    /// Bytes that leave the root; used to skip ahead in long inputs.
    first_bytes: Vec<u8>,
    /// Per byte: whether it leaves the root. While at the root, the scan only tests this, with
    /// no dependency from one byte to the next (unlike the table walk), so the processor runs
    /// many bytes at once: most chunks never leave the root.
    leaves_root: [bool; 256],
}

impl fmt::Debug for Automaton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Automaton")
            .field("patterns", &self.patterns.len())
            .field("states", &self.depth.len())
            .field("dense", &self.dense)
            .finish_non_exhaustive()
    }
}

/// The trie with failure links, before it is laid out.
struct Trie {
    edges: Vec<Vec<(u8, u32)>>,
    fail: Vec<u32>,
    depth: Vec<u32>,
    prefix_of: Vec<u32>,
    out: Vec<u32>,
    /// States in breadth-first order.
    order: Vec<u32>,
}

impl Trie {
    fn new(patterns: &[Box<[u8]>]) -> Trie {
        let mut edges: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
        let mut depth: Vec<u32> = vec![0];
        let mut prefix_of: Vec<u32> = vec![NONE];
        let mut out: Vec<u32> = vec![NONE];
        for (pid, pat) in patterns.iter().enumerate() {
            let pid = to_u32(pid);
            let mut s = 0usize;
            for &b in &**pat {
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
        Trie { edges, fail, depth, prefix_of, out, order }
    }
}

impl Automaton {
    /// Builds the automaton. Every pattern must be non-empty (checked by the caller, which knows
    /// how to name the offending position).
    pub(crate) fn new(patterns: Vec<Box<[u8]>>) -> Automaton {
        Self::with_budget(patterns, DENSE_BUDGET)
    }

    /// Builds with at most `dense_budget` dense table entries (at least the root's row).
    pub(crate) fn with_budget(patterns: Vec<Box<[u8]>>, dense_budget: usize) -> Automaton {
        debug_assert!(patterns.iter().all(|p| !p.is_empty()));
        let trie = Trie::new(&patterns);
        let n = trie.edges.len();

        let mut classes = [0u16; 256];
        let mut nclasses = 1usize;
        for pat in &patterns {
            for &b in &**pat {
                if classes[b as usize] == 0 {
                    classes[b as usize] = nclasses as u16;
                    nclasses += 1;
                }
            }
        }
        // A power-of-two stride makes a dense id's state number a shift away.
        let stride = nclasses.next_power_of_two();
        let shift = stride.trailing_zeros();
        let dense = (dense_budget / stride).clamp(1, n);

        // Renumber breadth-first: number `i` is the i-th state in BFS order.
        let mut number = vec![0u32; n];
        for (i, &old) in trie.order.iter().enumerate() {
            number[old as usize] = to_u32(i);
        }
        let encode = |old: u32| -> u32 {
            let i = number[old as usize] as usize;
            let id = if i < dense { to_u32(i << shift) } else { SPARSE | to_u32(i - dense) };
            id | if trie.out[old as usize] == NONE { 0 } else { MATCH_BIT }
        };
        let permute =
            |v: &[u32]| -> Vec<u32> { trie.order.iter().map(|&o| v[o as usize]).collect() };

        // Dense rows, in BFS order so a failure state's row is complete when it is copied.
        let mut table = vec![0u32; dense * stride];
        for (i, &old) in trie.order.iter().take(dense).enumerate() {
            if i != 0 {
                let f = number[trie.fail[old as usize] as usize] as usize;
                table.copy_within(f * stride..(f + 1) * stride, i * stride);
            }
            for &(b, t) in &trie.edges[old as usize] {
                table[i * stride + classes[b as usize] as usize] = encode(t);
            }
        }
        // Sparse states.
        let mut edge_start = Vec::with_capacity(n - dense + 1);
        let mut edge_byte = Vec::new();
        let mut edge_target = Vec::new();
        let mut fail = Vec::with_capacity(n - dense);
        for &old in &trie.order[dense..] {
            edge_start.push(to_u32(edge_byte.len()));
            for &(b, t) in &trie.edges[old as usize] {
                edge_byte.push(b);
                edge_target.push(encode(t));
            }
            fail.push(encode(trie.fail[old as usize]) & !MATCH_BIT);
        }
        edge_start.push(to_u32(edge_byte.len()));

        let first_bytes: Vec<u8> = trie.edges[0].iter().map(|&(b, _)| b).collect();
        let mut leaves_root = [false; 256];
        for &b in &first_bytes {
            leaves_root[b as usize] = true;
        }
        let max_len = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        Automaton {
            depth: permute(&trie.depth),
            prefix_of: permute(&trie.prefix_of),
            out: permute(&trie.out),
            patterns,
            classes,
            table,
            shift,
            dense,
            edge_start,
            edge_byte,
            edge_target,
            fail,
            max_len,
            first_bytes,
            leaves_root,
        }
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
        pats + self.depth.len() * 12
            + self.table.len() * 4
            + self.edge_start.len() * 4
            + self.edge_byte.len() * 5
            + self.fail.len() * 4
    }

    /// The state number of an id.
    fn number(&self, sid: u32) -> usize {
        if sid & SPARSE == 0 {
            (sid >> self.shift) as usize
        } else {
            self.dense + (sid & ID_MASK) as usize
        }
    }

    /// Length of the state's string: how many trailing bytes of the text could still be the
    /// start of a stop.
    #[inline]
    pub fn depth(&self, sid: u32) -> usize {
        self.depth[self.number(sid)] as usize
    }

    /// The state's string: the trailing bytes of the text that could still start a stop.
    pub fn held(&self, sid: u32) -> &[u8] {
        let i = self.number(sid);
        let d = self.depth[i] as usize;
        if d == 0 {
            return &[];
        }
        &self.patterns[self.prefix_of[i] as usize][..d]
    }

    /// Scans `bytes` from state `sid`, stopping at the first (earliest-ending) stop.
    #[inline]
    pub fn scan(&self, sid: u32, bytes: &[u8]) -> Step {
        if bytes.len() >= SKIP_MIN_LEN && self.first_bytes.len() <= 3 {
            return self.scan_skipping(sid, bytes);
        }
        let mut s = sid;
        let mut i = 0;
        let n = bytes.len();
        loop {
            if s == Self::START {
                while i < n && !self.leaves_root[bytes[i] as usize] {
                    i += 1;
                }
            }
            if i == n {
                return Step::Continue(s);
            }
            let b = bytes[i];
            i += 1;
            let next = if self.fail.is_empty() {
                // Every state is dense: one load per byte.
                self.table[s as usize + self.classes[b as usize] as usize]
            } else {
                self.next(s, b)
            };
            if next & MATCH_BIT != 0 {
                return Step::Stop(self.hit(next & !MATCH_BIT, i));
            }
            s = next;
        }
    }

    /// One transition (the result carries the flags).
    #[inline]
    fn next(&self, sid: u32, b: u8) -> u32 {
        let class = self.classes[b as usize] as usize;
        let mut s = sid;
        loop {
            if s & SPARSE == 0 {
                return self.table[s as usize + class];
            }
            let k = (s & ID_MASK) as usize;
            let (lo, hi) = (self.edge_start[k] as usize, self.edge_start[k + 1] as usize);
            let bytes = &self.edge_byte[lo..hi];
            let found = if bytes.len() <= 8 {
                bytes.iter().position(|&e| e == b)
            } else {
                bytes.binary_search(&b).ok()
            };
            if let Some(j) = found {
                return self.edge_target[lo + j];
            }
            s = self.fail[k];
        }
    }

    /// Scan for long inputs: while at the root, jump to the next byte that can start a stop with
    /// `memchr` (up to three distinct first bytes), which runs at memory speed.
    fn scan_skipping(&self, sid: u32, bytes: &[u8]) -> Step {
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
            if s == Self::START {
                match find(&bytes[i..]) {
                    Some(j) => i += j,
                    None => return Step::Continue(Self::START),
                }
            }
            let next = self.next(s, bytes[i]);
            i += 1;
            if next & MATCH_BIT != 0 {
                return Step::Stop(self.hit(next & !MATCH_BIT, i));
            }
            s = next;
        }
        Step::Continue(s)
    }

    /// One transition for callers that step byte by byte and need the state after a match too
    /// (the composed matcher of `matcher.rs`): the next state, and the stop that completes there.
    #[inline]
    pub(crate) fn step(&self, sid: u32, b: u8) -> (u32, Option<usize>) {
        let next = self.next(sid, b);
        let s = next & !MATCH_BIT;
        (s, (next & MATCH_BIT != 0).then(|| self.out[self.number(s)] as usize))
    }

    fn hit(&self, sid: u32, end: usize) -> Hit {
        Hit { pattern: self.out[self.number(sid)] as usize, end }
    }
}

/// The largest total length of the stops: it bounds the number of states, whose ids must stay
/// below [`SPARSE`]. (Past it, the tables alone would take tens of GiB.)
pub(crate) const MAX_TOTAL_LEN: usize = (SPARSE as usize) - 2;

fn to_u32(n: usize) -> u32 {
    // Every number converted here is at most the state count, which `MAX_TOTAL_LEN` bounds
    // (checked by `StopSet` before building), so this cannot fail.
    u32::try_from(n).ok().filter(|&v| v < SPARSE).unwrap_or(ID_MASK)
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
        for budget in [DENSE_BUDGET, 1] {
            for (stops, text, want) in cases {
                let a = build(stops, budget);
                assert_eq!(first_stop(&a, text), *want, "{stops:?} {text:?} budget {budget}");
            }
        }
    }

    #[test]
    fn depth_is_longest_suffix_that_is_a_prefix() {
        for budget in [DENSE_BUDGET, 1] {
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
    fn every_byte_value_gets_its_own_class() {
        // 256 used bytes: the class numbers must not wrap onto class 0.
        let stops: Vec<Box<[u8]>> = (0..=255u8).map(|b| vec![b, b].into()).collect();
        for budget in [DENSE_BUDGET, 1] {
            let a = Automaton::with_budget(stops.clone(), budget);
            for b in 0..=255u8 {
                match a.scan(Automaton::START, &[b.wrapping_add(1), b, b]) {
                    Step::Stop(h) => assert_eq!((h.pattern, h.end), (b as usize, 3)),
                    Step::Continue(_) => panic!("byte {b} missed"),
                }
            }
        }
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Automaton>();
        assert_send_sync::<Hit>();
        assert_send_sync::<Step>();
    }
}
