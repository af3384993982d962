//! Skipping ahead in long inputs: up to three bytes, at least one of which every stop contains,
//! found with `memchr`, which runs at memory speed.
//!
//! # Why it is sound for earliest-end semantics
//!
//! The scan consults the prefilter only at the root, at some position `i`, where no stop that
//! starts before `i` can still complete. Let `q` be the first position at or after `i` holding
//! one of the chosen bytes. A stop occurrence `[s, e)` with `s >= i` contains a chosen byte at
//! some `q' >= s`, so `q' >= q` and `e > q`. Either `s > q`, or `s <= q < e` and `text[q]` is a
//! byte of that stop at offset `q - s`, so `s >= q - back[text[q]]`, where `back[b]` is the
//! largest offset of byte `b` in any stop. Both ways no stop starts before
//! `q - back[text[q]]`: the automaton resumes there, from the root, and finds the exact winner
//! (earliest end, then longest, then first listed) as if it had read every byte. Nothing is
//! assumed about where a stop starts, so a stop ending before the candidate's own stop does is
//! found too. When the chosen bytes are the first bytes of the stops, `back` is 0 for all.
//!
//! When no chosen byte remains, no stop occurs in the rest of the input, but one may have begun
//! near its end: the held state is that of the root after the last `max_len - 1` bytes, which
//! the automaton reads (its string is at most that long, and cannot start before `i`).
//!
//! # Choosing the bytes
//!
//! [`FREQ`] estimates how often each byte occurs in model output. The first bytes of the stops
//! (if at most three) and the cheapest set of up to three bytes that hits every stop (a small
//! exhaustive search over the rare bytes of each stop) are priced by their summed frequency, and
//! the cheaper one is used if a candidate is expected less often than every [`MAX_COST`] bytes.
//! Measured with `rust/examples/throughput.rs` (16 MiB of pydoc text, no match; one process,
//! same bytes): see the figures in `automaton.rs`.

/// Estimated occurrences of each byte per million bytes of model output (at least 1): byte
/// counts over CPython's pydoc topics (English prose), 13 standard library modules (code) and
/// CPython's CJK codec test texts, each corpus weighted equally; capped at `u16::MAX`.
#[rustfmt::skip]
const FREQ: [u16; 256] = [
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 21031, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    65535, 651, 7371, 2897, 5, 308, 21, 3248, 5195, 5199, 3366, 933, 6712, 10731, 8463, 399,
    919, 1066, 559, 424, 205, 162, 114, 110, 125, 266, 3236, 257, 362, 5899, 1067, 262,
    61, 1040, 641, 1254, 289, 951, 675, 466, 178, 1151, 59, 71, 249, 328, 1044, 362,
    1717, 7, 580, 959, 1735, 226, 140, 225, 56, 55, 25, 1058, 356, 1059, 71, 9470,
    167, 31977, 6767, 15024, 13931, 53063, 11510, 8307, 13892, 30609, 1240, 2263, 19229, 10240,
    32292, 28665,
    11510, 749, 27654, 29997, 41276, 12440, 2825, 3772, 3019, 6911, 410, 308, 1125, 310, 201, 1,
    11238, 14948, 6849, 4443, 6433, 2175, 1111, 833, 3795, 2869, 2915, 3980, 6294, 3471, 972,
    2314,
    2268, 1666, 879, 1860, 2698, 3378, 2360, 2221, 2476, 3205, 4535, 2314, 3962, 3501, 1851,
    2871,
    2684, 1759, 602, 833, 2545, 1573, 3208, 2963, 5507, 1897, 1897, 1712, 1620, 2082, 4396,
    3841,
    3610, 1392, 1249, 2036, 2499, 509, 879, 1712, 5738, 1851, 2453, 1620, 3517, 2777, 1666,
    2314,
    1, 1, 143, 234, 46, 1, 1, 1, 1, 1, 1, 1, 93, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1242, 23092, 4998, 14670, 8191, 9348, 8376, 3656, 2499, 5877, 8191, 3517, 1, 1620,
    185, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
];

/// The largest summed frequency (per million bytes) worth a prefilter: a candidate costs a
/// `memchr` restart and a few automaton steps, some tens of nanoseconds, so at one candidate in
/// 25 bytes skipping is no faster than the table walk (about a nanosecond per byte). A rough
/// bound, not a measured optimum; the figures in `automaton.rs` are all far below it.
const MAX_COST: u32 = 40_000;

/// The largest frequency (per million) of a byte the rare-byte search considers, and so the
/// largest cost of a rare-byte set: three such bytes already mean a candidate every 30 bytes.
/// Stops made of common letters only are then rejected at once instead of searched.
const MAX_RARE: u32 = 10_000;

/// Rare bytes are chosen jointly only when the stops' first bytes cost at least this much more:
/// resuming `back` bytes early and reading the tail costs a little extra per candidate.
const RARE_GAIN: u32 = 2;

/// The chosen bytes and how far before each one a stop can start.
#[derive(Clone, Debug)]
pub(crate) struct Prefilter {
    bytes: [u8; 3],
    len: u8,
    /// Per byte: the largest offset at which it occurs in some stop (0 when the bytes are the
    /// stops' first bytes).
    back: Box<[u32; 256]>,
    /// The bytes are the stops' first bytes: when none remains, the scan ends at the root.
    starts: bool,
}

impl Prefilter {
    /// Picks the bytes for `patterns` (all non-empty), or `None` when a candidate would be too
    /// frequent for skipping to pay.
    pub(crate) fn new(patterns: &[Box<[u8]>]) -> Option<Prefilter> {
        if patterns.is_empty() {
            return None;
        }
        let mut firsts = [false; 256];
        for p in patterns {
            firsts[p[0] as usize] = true;
        }
        let firsts: Vec<u8> = (0..=255u8).filter(|&b| firsts[b as usize]).collect();
        let start_cost = if firsts.len() <= 3 { cost(&firsts) } else { u32::MAX };
        let rare = rare_bytes(patterns, start_cost / RARE_GAIN);
        let (bytes, starts) = match rare {
            Some(r) => (r, false),
            None if start_cost <= MAX_COST => (firsts, true),
            None => return None,
        };
        let mut back = Box::new([0u32; 256]);
        if !starts {
            for p in patterns {
                for (j, &b) in p.iter().enumerate() {
                    let slot = &mut back[b as usize];
                    *slot = (*slot).max(u32::try_from(j).unwrap_or(u32::MAX));
                }
            }
        }
        let mut arr = [0u8; 3];
        arr[..bytes.len()].copy_from_slice(&bytes);
        Some(Prefilter { bytes: arr, len: bytes.len() as u8, back, starts })
    }

    /// Whether the chosen bytes are the stops' first bytes.
    pub(crate) fn starts(&self) -> bool {
        self.starts
    }

    /// Position in `hay` of the first chosen byte at or after `from`.
    #[inline]
    pub(crate) fn find(&self, hay: &[u8], from: usize) -> Option<usize> {
        let h = &hay[from..];
        let b = self.bytes;
        let found = match self.len {
            1 => memchr::memchr(b[0], h),
            2 => memchr::memchr2(b[0], b[1], h),
            _ => memchr::memchr3(b[0], b[1], b[2], h),
        };
        found.map(|j| from + j)
    }

    /// How far before an occurrence of `byte` a stop can start.
    #[inline]
    pub(crate) fn back(&self, byte: u8) -> usize {
        self.back[byte as usize] as usize
    }
}

fn cost(bytes: &[u8]) -> u32 {
    bytes.iter().map(|&b| u32::from(FREQ[b as usize])).sum()
}

/// The cheapest set of at most three bytes such that every pattern contains one, if it costs
/// less than `limit` (and at most [`MAX_COST`]).
fn rare_bytes(patterns: &[Box<[u8]>], limit: u32) -> Option<Vec<u8>> {
    let limit = limit.min(MAX_RARE + 1);
    // Each pattern as the set of its bytes that could be part of a cheap enough answer.
    let mut masks = Vec::with_capacity(patterns.len());
    for p in patterns {
        let mut m = [0u64; 4];
        for &b in &**p {
            if u32::from(FREQ[b as usize]) < limit {
                m[(b >> 6) as usize] |= 1 << (b & 63);
            }
        }
        if m == [0; 4] {
            return None;
        }
        masks.push(m);
    }
    let all: Vec<u32> = (0..to_u32(masks.len())).collect();
    let mut search =
        Search { masks: &masks, best: limit, found: None, chosen: Vec::new(), work: SEARCH_WORK };
    search.run(&all, 0);
    search.found
}

/// Pattern tests the search may spend (a fraction of a millisecond); past it, the best set found
/// so far is used. Any set that hits every stop is sound, so this only trades skipping speed.
const SEARCH_WORK: usize = 1 << 18;

/// Bytes tried per pattern, rarest first.
const SEARCH_WIDTH: usize = 4;

struct Search<'a> {
    masks: &'a [[u64; 4]],
    /// Pattern tests left.
    work: usize,
    /// Cost of the best set found so far (or the limit).
    best: u32,
    found: Option<Vec<u8>>,
    chosen: Vec<u8>,
}

impl Search<'_> {
    /// Extends `chosen` (costing `spent`) to cover the patterns in `uncovered`.
    fn run(&mut self, uncovered: &[u32], spent: u32) {
        let Some(&first) = uncovered.first() else {
            if spent < self.best {
                self.best = spent;
                self.found = Some(self.chosen.clone());
            }
            return;
        };
        if self.chosen.len() == 2 {
            // The last byte must be in every pattern left: take the rarest such byte.
            if self.work < uncovered.len() {
                return;
            }
            self.work -= uncovered.len();
            let mut common = [u64::MAX; 4];
            for &j in uncovered {
                let m = &self.masks[j as usize];
                for w in 0..4 {
                    common[w] &= m[w];
                }
            }
            let last = (0..=255u8)
                .filter(|&b| common[(b >> 6) as usize] & (1 << (b & 63)) != 0)
                .min_by_key(|&b| FREQ[b as usize]);
            if let Some(b) = last {
                let total = spent + u32::from(FREQ[b as usize]);
                if total < self.best {
                    self.best = total;
                    let mut found = self.chosen.clone();
                    found.push(b);
                    self.found = Some(found);
                }
            }
            return;
        }
        // Every answer contains a byte of the first uncovered pattern: try each, rarest first.
        let m = self.masks[first as usize];
        let mut options: Vec<u8> =
            (0..=255u8).filter(|&b| m[(b >> 6) as usize] & (1 << (b & 63)) != 0).collect();
        options.sort_by_key(|&b| FREQ[b as usize]);
        for b in options.into_iter().take(SEARCH_WIDTH) {
            let total = spent + u32::from(FREQ[b as usize]);
            if total >= self.best || self.work < uncovered.len() {
                break;
            }
            self.work -= uncovered.len();
            let (w, bit) = ((b >> 6) as usize, 1u64 << (b & 63));
            let rest: Vec<u32> = uncovered
                .iter()
                .copied()
                .filter(|&j| self.masks[j as usize][w] & bit == 0)
                .collect();
            self.chosen.push(b);
            self.run(&rest, total);
            self.chosen.pop();
        }
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(stops: &[&str]) -> Option<Prefilter> {
        let pats: Vec<Box<[u8]>> = stops.iter().map(|s| s.as_bytes().into()).collect();
        Prefilter::new(&pats)
    }

    fn chosen(p: &Prefilter) -> Vec<u8> {
        p.bytes[..p.len as usize].to_vec()
    }

    #[test]
    fn picks_rare_bytes_that_hit_every_stop() {
        let p = pre(&["</answer>", "\n\nUser:", "###END", "<|im_end|>"]).unwrap();
        assert!(!p.starts());
        let got = chosen(&p);
        for stop in ["</answer>", "\n\nUser:", "###END", "<|im_end|>"] {
            assert!(stop.bytes().any(|b| got.contains(&b)), "{stop:?} missed by {got:?}");
        }
        // `#` occurs at offsets 0, 1 and 2 of `###END`.
        assert_eq!(p.back(b'#'), 2);
    }

    #[test]
    fn first_bytes_when_they_are_rare() {
        let p = pre(&["<|im_end|>", "<|endoftext|>", "</s>"]).unwrap();
        assert!(p.starts());
        assert_eq!(chosen(&p), b"<");
        assert_eq!(p.back(b'<'), 0);
    }

    #[test]
    fn none_for_ordinary_words() {
        assert!(pre(&["set", "tea"]).is_none());
        assert!(pre(&[]).is_none());
    }
}
