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
//! minimal holdback needs is added. This automaton skips bytes that cannot leave the root with
//! no dependency from one byte to the next, a skip the crate's trait does not allow from
//! outside, and costs 2.5-3.7 ns with the holdback included (ratio 0.26-0.38 against the crate
//! with the lookup) for 4, 1 and 1,000 stops.
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
//! | stops                                  | stopstream | aho-corasick | memchr |
//! |----------------------------------------|------------|--------------|--------|
//! | 4 guard-rail (rare bytes)              | 13.56      | 13.98        | 25.6   |
//! | 1,000 words + `</`, `]]`, `##` (rare)  | 7.63       | 2.25         | 19.2   |
//! | 1,000 word pairs (table walk)          | 0.18       | 0.12         | 15.5   |
//!
//! Over three runs the 4-stop ratio to the crate was 0.97x-1.23x: both run the same skip, near
//! the memory ceiling. Long-chunk `feed` (64 KiB chunks) runs within a few percent of `truncate`.
//!
//! The crate is not used as the scanner: on the same bytes its Standard search is not faster
//! than the two paths above, and it keeps neither depth nor held text, so the exact automaton
//! would still be needed beside it (compiled twice). Its packed searcher (Teddy) has leftmost
//! semantics only, so it could serve merely as a candidate-start prefilter; at 4 stops it ran
//! at 10.3 GB/s on the same bytes, below the rare-byte skip.
//!
//! # Construction
//!
//! The trie is built in two passes over the stops in sorted order (each state numbered within
//! its depth, the children of a state consecutive, no per-state allocation), and laid out in
//! one breadth-first pass in which a failure link is one load from a dense row; the sparse
//! states' arrays are then maps over the trie's. Compiling 10,000 fresh stops (shaped like
//! `benches/corpus.py`'s generated ones) takes 25.5M instructions (callgrind on
//! `rust/examples/compile.rs`), 3.5 ms in `rust/examples/throughput.rs` (median of 5): sorting
//! once and numbering states within their depth is what keeps it there, where a comparator on
//! every pair and sparse arrays pushed to state by state cost 43.0M and 5.2-5.4 ms. Compiling
//! 100,000 stops peaks at 1.23x the heap the finished automaton keeps (26.2 against 21.3 MiB).
//!
//! What remains is mostly memory the kernel has not handed out yet: a compiled set is kept
//! (by the set cache, from Python), so each fresh one lands on new pages, some 1,800 faults for
//! 10,000 stops, which on the 2-core virtual machine cost about 3.5 us each, more than the
//! work itself when no freed memory is at hand. The dense table is 1,024 of those pages; only
//! a smaller [`DENSE_BUDGET`] would save them, at the scan cost given there.
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
    /// The bytes of `leaves_root` as a [`crate::byteset::byte_set`].
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
/// Built from the stops in sorted order, where the distinct prefixes of length `d` are runs of
/// consecutive stops: a stop adds one state per byte past its common prefix with the previous
/// stop, and the state a stop adds at depth `d` takes the next free number of that depth, whose
/// range is known from a first pass that counts the states of each depth. So the trie is made
/// in two passes over the sorted stops, with no per-state allocation, and the children of a
/// state get consecutive numbers. Measured with callgrind on `rust/examples/compile.rs` and
/// 10,000 of `benches/corpus.py`'s generated stops: building it level by level instead, a pass
/// per depth over the stops still that long, cost 15.6M instructions against 6.7M for this,
/// not counting the sort (4.0M with a comparator on every pair, 1.9M for integer keys). A
/// `Vec` of edges per state, before that, spent most of its time allocating and chasing
/// pointers.
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
        // Sort by an 8-byte prefix packed with the position (plain integers, no comparator),
        // then order each run of stops that share the prefix by the whole stop and position
        // (3,832 of the 10,000 generated stops are in such runs, of 2.5 on average).
        let key = |p: &[u8]| {
            let mut k = [0u8; 8];
            let m = p.len().min(8);
            k[..m].copy_from_slice(&p[..m]);
            u64::from_be_bytes(k)
        };
        let mut keyed: Vec<u128> = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| u128::from(key(p)) << 64 | i as u128)
            .collect();
        keyed.sort_unstable();
        let mut sorted: Vec<u32> = keyed.iter().map(|&k| k as u32).collect();
        let mut a = 0;
        while a < keyed.len() {
            let prefix = keyed[a] >> 64;
            let b = a + keyed[a..].iter().take_while(|&&k| k >> 64 == prefix).count();
            if b - a > 1 {
                sorted[a..b].sort_unstable_by(|&x, &y| {
                    patterns[x as usize].cmp(&patterns[y as usize]).then(x.cmp(&y))
                });
            }
            a = b;
        }
        drop(keyed);
        let max_len = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        // First pass: each stop's common prefix length with the previous one, and the number of
        // states of each depth (a stop adds one at each depth in `lcp + 1..=len`, counted as a
        // difference: +1 at `lcp + 1`, -1 at `len + 1`).
        let mut lcp = Vec::with_capacity(sorted.len());
        let mut diff = vec![0isize; max_len + 2];
        let mut prev: &[u8] = &[];
        for &i in &sorted {
            let p = &*patterns[i as usize];
            let l = prev.iter().zip(p).take_while(|(a, b)| a == b).count();
            lcp.push(to_u32(l));
            diff[l + 1] += 1;
            diff[p.len() + 1] -= 1;
            prev = p;
        }
        // `next[d]`: the next free number at depth `d` (the root is state 0).
        let mut next = vec![0u32; max_len + 1];
        let mut n = 1usize;
        let mut at_depth = 0isize;
        for d in 1..=max_len {
            at_depth += diff[d];
            next[d] = to_u32(n);
            n += at_depth.unsigned_abs();
        }
        drop(diff);
        let mut depth = vec![0u32; n];
        for d in 1..=max_len {
            let end = if d < max_len { next[d + 1] as usize } else { n };
            depth[next[d] as usize..end].fill(to_u32(d));
        }
        // Second pass: the states. `path[d]` is the state at depth `d` of the stop at hand
        // (shared with the previous stop up to their common prefix). `first_child[s + 1]`
        // counts the children of `s` first, then becomes a running sum.
        let mut byte = vec![0u8; n];
        let mut prefix_of = vec![0u32; n];
        let mut terminal = vec![NONE; n];
        let mut first_child = vec![0u32; n + 1];
        let mut path = vec![0u32; max_len + 1];
        for (&i, &l) in sorted.iter().zip(&lcp) {
            let p = &*patterns[i as usize];
            let mut parent = path[l as usize];
            for d in l as usize + 1..=p.len() {
                let id = next[d];
                next[d] += 1;
                byte[id as usize] = p[d - 1];
                prefix_of[id as usize] = i;
                first_child[parent as usize + 1] += 1;
                path[d] = id;
                parent = id;
            }
            let slot = &mut terminal[path[p.len()] as usize];
            if *slot == NONE {
                *slot = i; // first listed wins among duplicates
            }
        }
        first_child[0] = 1;
        for s in 1..=n {
            first_child[s] += first_child[s - 1];
        }
        Trie { byte, first_child, depth, prefix_of, terminal }
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
        let encode = |i: usize, out: &[u32]| -> u32 {
            // State numbers fit in `ID_MASK` (`MAX_TOTAL_LEN` bounds them).
            let id = if i < dense { (i << shift) as u32 } else { SPARSE | (i - dense) as u32 };
            id | if out[i] == NONE { 0 } else { MATCH_BIT }
        };
        for i in 0..n {
            let kids = children(i);
            for c in kids.clone() {
                let b = byte[c];
                let f = if i == 0 { 0 } else { layout.delta(&fail, fail[i] as usize, b) };
                fail[c] = f as u32;
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
            }
        }
        // The sparse states' edges are their trie edges, which breadth-first numbering makes
        // one run of states (`first_child[dense]..n`): each array is a map over a range,
        // made once with its exact length, not pushed to state by state in the loop above
        // (with the casts above, a build of 10,000 stops takes 25.5M instructions; 31.2M
        // pushing state by state).
        let base = first_child[dense];
        let edge_start: Vec<u32> = first_child[dense..].iter().map(|&c| c - base).collect();
        let edge_byte = byte[base as usize..].to_vec();
        let edge_target: Vec<u32> = (base as usize..n).map(|c| encode(c, &out)).collect();
        let sparse_fail: Vec<u32> =
            fail[dense..].iter().map(|&f| encode(f as usize, &out) & !MATCH_BIT).collect();
        let table = layout.table;
        drop(fail);
        drop(byte);
        drop(first_child);

        let mut leaves_root = [false; 256];
        for p in &patterns {
            leaves_root[p[0] as usize] = true;
        }
        let first_bytes =
            crate::byteset::byte_set(&patterns.iter().map(|p| p[0]).collect::<Vec<_>>());
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

    /// The stops' first bytes as a [`crate::byteset::byte_set`].
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
        reason = "left to itself the compiler calls it from `feed`: inlined, with the int read directly, a `feed` call is 414 instructions against 441 (callgrind)"
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

    /// The state to go on from after a match at `sid` that does not fire (contract §10's
    /// `min_tokens`): the state of the longest suffix of its string that is a proper prefix
    /// of a stop. A state whose string is a stop that no longer stop extends moves on exactly
    /// as that suffix's state does, so matching goes on from there, and its depth is the
    /// holdback; any other state is kept. Rare (a stop inside the first tokens), so the suffix
    /// is found by walking it again rather than by a table per state: a chain of stops each
    /// inside the next, `d` bytes long, costs O(d²) steps and 256 lookups a link, at most the
    /// longest stop's.
    pub(crate) fn unfired(&self, mut sid: u32) -> u32 {
        loop {
            let i = self.number(sid);
            let d = self.depth[i] as usize;
            let out = self.out[i];
            let extended = (0..=255u8).any(|b| self.depth(self.next(sid, b) & !MATCH_BIT) > d);
            if out == NONE || self.patterns[out as usize].len() != d || extended {
                return sid;
            }
            let string = &self.patterns[self.prefix_of[i] as usize][1..d];
            sid = string.iter().fold(Self::START, |q, &b| self.step_out(q, b).0);
        }
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
    // (checked by `LiteralStops` before building), so this cannot fail.
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

    /// The first stop to end in `text`: earliest end, then longest, then first listed.
    fn naive(stops: &[&[u8]], text: &[u8]) -> Option<(usize, usize)> {
        (1..=text.len()).find_map(|end| {
            let ends_here = |s: &[u8]| text[..end].ends_with(s);
            let best = stops.iter().filter(|s| ends_here(s)).map(|s| s.len()).max()?;
            Some((stops.iter().position(|s| ends_here(s) && s.len() == best)?, end))
        })
    }

    #[test]
    fn stops_sharing_the_sort_key_are_ordered_in_full() {
        // Equal first 8 bytes (the sort key), keys padded with NUL like a shorter stop, and
        // duplicates in either order.
        let stops: &[&[u8]] = &[
            b"</section-b>",
            b"</section-a>",
            b"</section-ab>",
            b"</section",
            b"</sectio",
            b"a\0\0",
            b"a",
            b"a\0",
            b"</section-a>",
            b"a\0",
        ];
        let pats: Vec<Box<[u8]>> = stops.iter().map(|&s| s.into()).collect();
        let prefixes: std::collections::HashSet<&[u8]> =
            stops.iter().flat_map(|s| (0..=s.len()).map(|m| &s[..m])).collect();
        for budget in [DENSE_BUDGET, 1] {
            let a = Automaton::with_budget(pats.clone(), budget);
            // One state per distinct prefix: out-of-order stops would add a prefix twice.
            assert_eq!(a.state_count(), prefixes.len());
            for x in stops {
                for y in stops {
                    let text = [b"x".as_slice(), x, y].concat();
                    let got = match a.scan(Automaton::START, &text) {
                        Step::Stop(h) => Some((h.pattern, h.end)),
                        Step::Continue(_) => None,
                    };
                    assert_eq!(got, naive(stops, &text), "{text:?} budget {budget}");
                }
            }
            let Step::Continue(s) = a.scan(Automaton::START, b"x</secti") else { panic!() };
            assert_eq!(a.held(s), b"</secti");
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
            let (set, first) = (crate::byteset::byte_set(&bytes), a.first_bytes());
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

    /// The longest suffix of `text` that is a proper prefix of a stop.
    fn naive_hold(stops: &[Vec<u8>], text: &[u8]) -> usize {
        (0..=text.len())
            .rev()
            .find(|&k| stops.iter().any(|s| k < s.len() && s.starts_with(&text[text.len() - k..])))
            .unwrap_or(0)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Passing over every hit (`unfired`) changes no later hit, and leaves exactly the
        /// minimal holdback, in dense and sparse states alike; stops over three letters nest
        /// and extend one another often.
        #[test]
        fn unfired_keeps_the_hits_and_holds_exactly(
            stops in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(b"abc".to_vec()), 1..6),
                1..6,
            ),
            text in proptest::collection::vec(proptest::sample::select(b"abcd".to_vec()), 0..30),
        ) {
            for budget in [DENSE_BUDGET, 1, 8, 16] {
                let patterns = stops.iter().map(|s| s.clone().into_boxed_slice()).collect();
                let a = Automaton::with_budget(patterns, budget);
                let (mut quiet, mut plain) = (Automaton::START, Automaton::START);
                for (i, &b) in text.iter().enumerate() {
                    let (q, hit) = a.step_out(quiet, b);
                    let (p, plain_hit) = a.step_out(plain, b);
                    plain = p;
                    proptest::prop_assert_eq!(hit, plain_hit, "budget {}", budget);
                    quiet = if hit.is_some() { a.unfired(q) } else { q };
                    let seen = &text[..=i];
                    proptest::prop_assert_eq!(a.depth(quiet), naive_hold(&stops, seen));
                    proptest::prop_assert_eq!(a.held(quiet), &seen[seen.len() - a.depth(quiet)..]);
                }
            }
        }
    }
}
