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
//! # Long inputs
//!
//! `truncate` and chunks of 64 bytes or more take one of two paths, fixed when the stops are
//! compiled (`prefilter.rs` says how the bytes are chosen and why skipping is exact):
//!
//! * up to three bytes, rare in model output, one of which every stop contains (or the stops'
//!   first bytes when those are rare): `memchr2`/`memchr3` finds the next one, the automaton
//!   resumes from the root at the earliest position a stop holding it could start, and walks
//!   on until it is back at the root. This is the shape of the `aho-corasick` crate's own
//!   prefilter for Standard semantics; the winner and the held state stay exact.
//! * otherwise, when every state is dense, a plain table walk with nothing else in the loop
//!   (the short-input loop's root test mispredicts at every word boundary when the stops start
//!   like words).
//!
//! Measured with `rust/examples/throughput.rs` (16 MiB of pydoc prose with no match, both
//! crates in one process on the same bytes, fastest of 15 rounds; 2 cores shared with other
//! work, so only the ratios hold), GB/s of `truncate` / the crate's best kind / `memchr`:
//!
//! | stops                                  | before | now   | aho-corasick | memchr |
//! |----------------------------------------|--------|-------|--------------|--------|
//! | 4 guard-rail (rare bytes)              | 1.45   | 13.56 | 13.98        | 25.6   |
//! | 1,000 words + `</`, `]]`, `##` (rare)  | 0.10   | 7.63  | 2.25         | 19.2   |
//! | 1,000 word pairs (table walk)          | 0.14   | 0.18  | 0.12         | 15.5   |
//!
//! ("before": the previous scan, a first-byte skip when there were at most three first bytes
//! and the short-input loop otherwise, from an earlier run of the same example.) Over three
//! runs the 4-stop ratio to the crate was 0.97x-1.23x: both run the same skip, near the memory
//! ceiling.
//! Long-chunk `feed` (64 KiB chunks) runs within a few percent of `truncate`.
//!
//! The crate is not used as the scanner: on the same bytes its Standard search is not faster
//! than the two paths above, and it keeps neither depth nor held text, so the exact automaton
//! would still be needed beside it (compiled twice). Its packed searcher (Teddy) has leftmost
//! semantics only, so it could serve merely as a candidate-start prefilter; at 4 stops it ran
//! at 10.3 GB/s on the same bytes, below the rare-byte skip.
//!
//! # Construction
//!
//! The trie is built level by level from the stops in sorted order (the children of a state
//! get consecutive numbers, so there is no per-state allocation), and laid out in one
//! breadth-first pass in which a failure link is one load from a dense row. Compiling 10,000
//! fresh stops (shaped like `benches/corpus.py`'s generated ones) then took 6 ms of CPU time
//! in the example (median of 5), and `benches/compare.py`'s figure from Python went from 29.4
//! to 10.3 ms (medians, wall time on the loaded machine); the previous build kept a `Vec` of
//! edges per state and found failure links by walking them. Compiling 100,000 stops peaks at
//! 1.23x the heap the finished automaton keeps (26.2 against 21.3 MiB; previously 81 MiB,
//! 3.4x).
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

use crate::prefilter::Prefilter;

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
    /// Skips ahead in long inputs while at the root (`None` when candidates would be frequent).
    prefilter: Option<Prefilter>,
    /// Per byte: whether it leaves the root. While at the root, the scan only tests this, with
    /// no dependency from one byte to the next (unlike the table walk), so the processor runs
    /// many bytes at once: most chunks never leave the root.
    leaves_root: [bool; 256],
    /// The bytes of `leaves_root` as a [`crate::tokens::byte_set`].
    first_bytes: [u64; 2],
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

/// The trie, numbered breadth-first (by depth, then by string), before it is laid out.
///
/// Built level by level from the stops in sorted order: the distinct prefixes of length `d`
/// are then runs of consecutive stops, and the children of each state get consecutive numbers,
/// so the trie needs no per-state allocation (the previous build, a `Vec` of edges per state
/// with failure links found by walking them, spent most of its time allocating and chasing
/// pointers).
struct Trie {
    /// Per state: the byte of the edge into it.
    byte: Vec<u8>,
    /// The children of state `s` are the states `first_child[s]..first_child[s + 1]`, in byte
    /// order (`n + 1` entries).
    first_child: Vec<u32>,
    depth: Vec<u32>,
    prefix_of: Vec<u32>,
    /// Per state: the stop it completes (first listed among equal ones), or `NONE`.
    terminal: Vec<u32>,
}

impl Trie {
    fn new(patterns: &[Box<[u8]>]) -> Trie {
        // Sort by an 8-byte prefix first (most comparisons end there), then by the whole stop
        // and its position; then copy the stops, in that order, into one buffer that each
        // level below reads front to back.
        let key = |p: &[u8]| {
            let mut k = [0u8; 8];
            let m = p.len().min(8);
            k[..m].copy_from_slice(&p[..m]);
            u64::from_be_bytes(k)
        };
        let mut keyed: Vec<(u64, u32)> =
            patterns.iter().enumerate().map(|(i, p)| (key(p), to_u32(i))).collect();
        keyed.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| patterns[a.1 as usize].cmp(&patterns[b.1 as usize]))
                .then(a.1.cmp(&b.1))
        });
        let sorted: Vec<u32> = keyed.iter().map(|&(_, i)| i).collect();
        drop(keyed);
        let mut flat = Vec::with_capacity(patterns.iter().map(|p| p.len()).sum());
        let mut ends = Vec::with_capacity(sorted.len() + 1);
        ends.push(0usize);
        for &i in &sorted {
            flat.extend_from_slice(&patterns[i as usize]);
            ends.push(flat.len());
        }
        let pat = |k: usize| &flat[ends[k]..ends[k + 1]];
        // Common prefix length of each stop with the previous one in sorted order.
        let lcp: Vec<u32> = (0..sorted.len())
            .map(|k| {
                if k == 0 {
                    return 0;
                }
                let (x, y) = (pat(k - 1), pat(k));
                to_u32(x.iter().zip(y).take_while(|(a, b)| a == b).count())
            })
            .collect();
        // Each stop adds one state per byte past its common prefix with the previous one.
        let n = 1 + (0..sorted.len()).map(|k| pat(k).len() - lcp[k] as usize).sum::<usize>();
        let mut trie = Trie {
            byte: Vec::with_capacity(n),
            first_child: Vec::with_capacity(n + 1),
            depth: Vec::with_capacity(n),
            prefix_of: Vec::with_capacity(n),
            terminal: Vec::with_capacity(n),
        };
        trie.push(0, 0, NONE);
        // The stops at least `level` bytes long (sorted positions), and the state each has reached.
        let mut active: Vec<u32> = (0..to_u32(sorted.len())).collect();
        let mut cur = vec![0u32; sorted.len()];
        let mut level = 1usize;
        while !active.is_empty() {
            let mut prev: Option<usize> = None;
            let mut id = 0u32;
            let mut kept = 0;
            for j in 0..active.len() {
                let k = active[j] as usize;
                let p = pat(k);
                // A new prefix of length `level` unless the previous stop in sorted order shares it
                // (a stop between two that share it would share it too).
                if prev.is_none_or(|q| q + 1 != k || (lcp[k] as usize) < level) {
                    let parent = cur[k] as usize;
                    id = to_u32(trie.byte.len());
                    while trie.first_child.len() <= parent {
                        trie.first_child.push(id);
                    }
                    trie.push(p[level - 1], to_u32(level), sorted[k]);
                }
                cur[k] = id;
                if p.len() == level {
                    let slot = &mut trie.terminal[id as usize];
                    if *slot == NONE {
                        *slot = sorted[k]; // first listed wins among duplicates
                    }
                } else {
                    active[kept] = to_u32(k);
                    kept += 1;
                }
                prev = Some(k);
            }
            active.truncate(kept);
            level += 1;
        }
        debug_assert_eq!(trie.byte.len(), n);
        while trie.first_child.len() <= n {
            trie.first_child.push(to_u32(n));
        }
        trie
    }

    fn push(&mut self, byte: u8, depth: u32, prefix_of: u32) {
        self.byte.push(byte);
        self.depth.push(depth);
        self.prefix_of.push(prefix_of);
        self.terminal.push(NONE);
    }
}

/// The dense table while it is being filled, with what the full transition function needs.
struct Layout<'a> {
    table: Vec<u32>,
    classes: &'a [u16; 256],
    shift: u32,
    dense: usize,
    byte: &'a [u8],
    first_child: &'a [u32],
}

impl Layout<'_> {
    /// The state number reached from state `f` on byte `b`: one table load from a dense state
    /// (whose row is complete, since rows are filled in breadth-first order and `f` is shallower
    /// than the state being laid out), else `f`'s trie edges and then its failure link.
    fn delta(&self, fail: &[u32], mut f: usize, b: u8) -> usize {
        loop {
            if f < self.dense {
                let e = self.table[(f << self.shift) + self.classes[b as usize] as usize];
                return if e & SPARSE == 0 {
                    ((e & ID_MASK) >> self.shift) as usize
                } else {
                    self.dense + (e & ID_MASK) as usize
                };
            }
            let (lo, hi) = (self.first_child[f] as usize, self.first_child[f + 1] as usize);
            if let Some(j) = self.byte[lo..hi].iter().position(|&x| x == b) {
                return lo + j;
            }
            f = fail[f] as usize;
        }
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
        let prefilter = Prefilter::new(&patterns);
        let trie = Trie::new(&patterns);
        let n = trie.byte.len();

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

        // One pass in breadth-first order. Processing state `i` fixes its children's failure
        // links and outputs (a failure link is shallower, so its row or edges are complete),
        // then lays out `i`: a dense row (its failure state's row with its own edges on top)
        // or sparse edges.
        let Trie { byte, first_child, depth, prefix_of, terminal: mut out } = trie;
        let children = |s: usize| first_child[s] as usize..first_child[s + 1] as usize;
        let mut fail = vec![0u32; n];
        let mut layout = Layout {
            // Filled row by row below, never zeroed first, so each entry is written once. What
            // remains of a large table's cost is touching its fresh pages: for 1,000 stops (all
            // 15,000 states dense, 3.9 MB) the row copies were a fifth of a compile's profile
            // from Python, where the pages are new (the set cache keeps older tables alive).
            table: Vec::with_capacity(dense * stride),
            classes: &classes,
            shift,
            dense,
            byte: &byte,
            first_child: &first_child,
        };
        let mut edge_start = Vec::with_capacity(n - dense + 1);
        let mut edge_byte = Vec::with_capacity(n - dense);
        let mut edge_target = Vec::with_capacity(n - dense);
        let mut sparse_fail = Vec::with_capacity(n - dense);
        let encode = |i: usize, out: &[u32]| -> u32 {
            let id = if i < dense { to_u32(i << shift) } else { SPARSE | to_u32(i - dense) };
            id | if out[i] == NONE { 0 } else { MATCH_BIT }
        };
        for i in 0..n {
            let kids = children(i);
            for c in kids.clone() {
                let b = byte[c];
                let f = if i == 0 { 0 } else { layout.delta(&fail, fail[i] as usize, b) };
                fail[c] = to_u32(f);
                if out[c] == NONE {
                    out[c] = out[f];
                }
            }
            if i < dense {
                if i == 0 {
                    layout.table.resize(stride, 0);
                } else {
                    let f = fail[i] as usize;
                    layout.table.extend_from_within(f * stride..(f + 1) * stride);
                }
                for c in kids {
                    layout.table[i * stride + classes[byte[c] as usize] as usize] = encode(c, &out);
                }
            } else {
                edge_start.push(to_u32(edge_byte.len()));
                for c in kids {
                    edge_byte.push(byte[c]);
                    edge_target.push(encode(c, &out));
                }
                sparse_fail.push(encode(fail[i] as usize, &out) & !MATCH_BIT);
            }
        }
        edge_start.push(to_u32(edge_byte.len()));
        let table = layout.table;
        drop(fail);
        drop(byte);
        drop(first_child);

        let mut leaves_root = [false; 256];
        for p in &patterns {
            leaves_root[p[0] as usize] = true;
        }
        let first_bytes =
            crate::tokens::byte_set(&patterns.iter().map(|p| p[0]).collect::<Vec<_>>());
        let max_len = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        Automaton {
            depth,
            prefix_of,
            out,
            patterns,
            classes,
            table,
            shift,
            dense,
            edge_start,
            edge_byte,
            edge_target,
            fail: sparse_fail,
            max_len,
            prefilter,
            leaves_root,
            first_bytes,
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
            + self.prefilter.as_ref().map_or(0, |_| 1024)
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

    /// The stops' first bytes as a [`crate::tokens::byte_set`].
    #[inline]
    pub(crate) fn first_bytes(&self) -> [u64; 2] {
        self.first_bytes
    }

    /// Whether a scan of `bytes` from the root stays there: no byte of it can start a stop.
    #[inline]
    pub(crate) fn stays_at_root(&self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| !self.leaves_root[b as usize])
    }

    /// [`Automaton::stays_at_root`] of `bytes`, whose first bytes are `head` (past its end, any
    /// bytes): a token of up to 8 bytes is tested without a branch per byte. The byte loop's
    /// exit, at a different count for each token, was a stall of its own in a profile of a
    /// batch step.
    #[allow(
        clippy::inline_always,
        reason = "left to itself the compiler calls it from `feed`, whose call went from 441 to 414 instructions with it inlined and the int read directly (callgrind)"
    )]
    #[inline(always)]
    pub(crate) fn stays_at_root_head(&self, head: [u8; 8], bytes: &[u8]) -> bool {
        let mut leaves = false;
        for (k, &b) in head.iter().enumerate() {
            leaves |= self.leaves_root[b as usize] & (k < bytes.len());
        }
        !leaves && (bytes.len() <= head.len() || self.stays_at_root(&bytes[head.len()..]))
    }

    /// Scans `bytes` from state `sid`, stopping at the first (earliest-ending) stop.
    #[inline]
    pub fn scan(&self, sid: u32, bytes: &[u8]) -> Step {
        if bytes.len() >= SKIP_MIN_LEN && (self.prefilter.is_some() || self.fail.is_empty()) {
            return self.scan_long(sid, bytes);
        }
        self.scan_short(sid, bytes)
    }

    /// `scan` of a long input: the prefilter's skip, or the dense walk. Kept out of line so
    /// that the short-input loop inlines into its callers (a token-sized chunk is the common
    /// case; the call cost was about a tenth of the per-chunk time of `wrap`).
    #[inline(never)]
    fn scan_long(&self, sid: u32, bytes: &[u8]) -> Step {
        match &self.prefilter {
            Some(pre) => self.scan_prefiltered(pre, sid, bytes),
            None => self.walk_dense(sid, bytes),
        }
    }

    /// `scan` byte by byte, skipping at the root over bytes that cannot start a stop.
    #[allow(
        clippy::inline_always,
        reason = "left to itself the compiler calls it; inlined, a token-sized chunk's scan runs a third fewer instructions"
    )]
    #[inline(always)]
    fn scan_short(&self, sid: u32, bytes: &[u8]) -> Step {
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
            let next = self.step(s, bytes[i]);
            i += 1;
            if next & MATCH_BIT != 0 {
                return Step::Stop(self.hit(next & !MATCH_BIT, i));
            }
            s = next;
        }
    }

    /// One transition (the result carries the flags).
    #[inline]
    fn step(&self, sid: u32, b: u8) -> u32 {
        if self.fail.is_empty() {
            // Every state is dense: one load per byte.
            self.table[sid as usize + self.classes[b as usize] as usize]
        } else {
            self.next(sid, b)
        }
    }

    /// One transition through the sparse states' failure links (the result carries the flags).
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

    /// Scan for long inputs when every state is dense and no prefilter applies: the plain table
    /// walk, one load and one test per byte with nothing else in the loop.
    fn walk_dense(&self, sid: u32, bytes: &[u8]) -> Step {
        let table = &self.table[..];
        let classes = &self.classes;
        let mut s = sid as usize;
        for (i, &b) in bytes.iter().enumerate() {
            let t = table[s + classes[b as usize] as usize];
            if t & MATCH_BIT != 0 {
                return Step::Stop(self.hit(t & !MATCH_BIT, i + 1));
            }
            s = t as usize;
        }
        Step::Continue(s as u32)
    }

    /// Scan for long inputs: while at the root, jump to where the next stop could start (see
    /// `prefilter.rs` for why no stop can start earlier), then walk the automaton from there
    /// through the candidate byte and on until it is back at the root.
    fn scan_prefiltered(&self, pre: &Prefilter, sid: u32, bytes: &[u8]) -> Step {
        if self.fail.is_empty() {
            self.prefiltered::<true>(pre, sid, bytes)
        } else {
            self.prefiltered::<false>(pre, sid, bytes)
        }
    }

    /// [`Automaton::scan_prefiltered`], with `DENSE` telling whether every state is dense (so
    /// that the test is made once per input, not once per byte).
    #[inline]
    fn prefiltered<const DENSE: bool>(&self, pre: &Prefilter, sid: u32, bytes: &[u8]) -> Step {
        let n = bytes.len();
        let step = |s: u32, b: u8| {
            if DENSE {
                self.table[s as usize + self.classes[b as usize] as usize]
            } else {
                self.next(s, b)
            }
        };
        let mut s = sid;
        let mut i = 0;
        // Read bytes `i..until`, then on until the root; `Err` is a completed stop.
        let walk = |s: &mut u32, i: &mut usize, until: usize| -> Result<(), Hit> {
            while *i < until || (*s != Self::START && *i < n) {
                let next = step(*s, bytes[*i]);
                *i += 1;
                if next & MATCH_BIT != 0 {
                    return Err(self.hit(next & !MATCH_BIT, *i));
                }
                *s = next;
            }
            Ok(())
        };
        loop {
            // At the root at `i`, or still inside a stop begun before the input.
            if let Err(hit) = walk(&mut s, &mut i, 0) {
                return Step::Stop(hit);
            }
            if i == n {
                return Step::Continue(s);
            }
            let until = match pre.find(bytes, i) {
                Some(q) => {
                    i = i.max(q - pre.back(bytes[q]).min(q));
                    q + 1
                }
                None if pre.starts() => return Step::Continue(Self::START),
                None => {
                    // No stop occurs in the rest; one may have begun in its last bytes.
                    i = i.max(n - (self.max_len - 1).min(n));
                    n
                }
            };
            if let Err(hit) = walk(&mut s, &mut i, until) {
                return Step::Stop(hit);
            }
        }
    }

    /// One transition for callers that step byte by byte and need the state after a match too
    /// (the composed matcher of `matcher.rs`): the next state, and the stop that completes there.
    #[inline]
    pub(crate) fn step_out(&self, sid: u32, b: u8) -> (u32, Option<usize>) {
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The test of a token's first 8 bytes agrees with the byte loop, whatever the padding
        /// past the token's end, on both sides of 8 bytes; so does the byte-set test, where it
        /// answers.
        #[test]
        fn stays_at_root_head_agrees(
            stops in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(BYTES.to_vec()), 1..4),
                0..7,
            ),
            bytes in proptest::collection::vec(proptest::sample::select(BYTES.to_vec()), 1..12),
            pad in proptest::array::uniform8(proptest::num::u8::ANY),
        ) {
            let a = Automaton::new(stops.into_iter().map(Vec::into_boxed_slice).collect());
            let mut head = pad;
            let n = bytes.len().min(8);
            head[..n].copy_from_slice(&bytes[..n]);
            proptest::prop_assert_eq!(a.stays_at_root_head(head, &bytes), a.stays_at_root(&bytes));
            // The byte sets: disjoint proves the bytes stay at the root, and for ASCII it is
            // exact.
            let (set, first) = (crate::tokens::byte_set(&bytes), a.first_bytes());
            let disjoint = (set[0] & first[0]) | (set[1] & first[1]) == 0;
            if disjoint {
                proptest::prop_assert!(a.stays_at_root(&bytes));
            }
            if bytes.is_ascii() && a.patterns().iter().all(|p| p[0].is_ascii()) {
                proptest::prop_assert_eq!(disjoint, a.stays_at_root(&bytes));
            }
        }
    }

    /// The bytes of the property test: a few, so that stops and input meet often.
    const BYTES: [u8; 8] = [0, 1, 0x80, 0x81, 0xbc, 0xff, b'<', b'a'];
}
