//! A naive reading of a composed stop list (contract §6: literal and regex stops with their own
//! include flags, `skip_until`, skip regions) over a whole text, brute force:
//!
//! * every match of every stop: literal occurrences by comparison; for a regex, from every
//!   character boundary `s`, an anchored search of `regex-automata`'s PikeVM (a different engine
//!   from the stream's) with `MatchKind::All`, which reports the longest match within its span:
//!   the longest ending by the end of the text, then the longest ending before that one's end,
//!   and so on. Assertions see the whole text, whose end is the end of the stream;
//! * the regions and the winner, walked through from the start: after the `skip_until` marker,
//!   the earliest-ending stop match (then the longest, then the first listed) against the
//!   earliest-ending opening marker (then the longest, then the first listed), the marker
//!   winning a tie; a region runs to the first closing marker after its opening one, and stops
//!   and markers start only after it.
#![allow(dead_code, reason = "each target reads what it needs")]

use regex_automata::nfa::thompson::pikevm::PikeVM;
use regex_automata::{Anchored, Input, MatchKind};
use stopstream::{regex_max_len, StopKind, StopSpec};

enum Kind {
    Literal(Vec<u8>),
    Regex(Box<PikeVM>),
}

struct Stop {
    kind: Kind,
    include: bool,
    /// The longest match in code points (`None`: unbounded).
    max_len: Option<usize>,
}

/// A match of stop (or marker pair) `stop` over `text[start..end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub stop: usize,
    pub start: usize,
    pub end: usize,
}

/// Where a text leaves the stops (no stop having fired in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    /// Before the `skip_until` marker.
    Before,
    /// Inside a skip region.
    Inside,
    /// Stops may start from this offset on.
    Outside(usize),
}

pub struct List {
    stops: Vec<Stop>,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
}

fn find(text: &[u8], what: &[u8], from: usize) -> Option<usize> {
    (from..=text.len().saturating_sub(what.len())).find(|&p| text[p..].starts_with(what))
}

impl List {
    /// The reading of a list the stream compiled (so every pattern is valid).
    pub fn new(specs: &[StopSpec<'_>], until: Option<&[u8]>, skip: &[(&[u8], &[u8])]) -> List {
        let stops = specs
            .iter()
            .map(|s| match s.kind {
                StopKind::Literal(l) => Stop {
                    kind: Kind::Literal(l.to_vec()),
                    include: s.include,
                    max_len: Some(std::str::from_utf8(l).unwrap().chars().count()),
                },
                StopKind::Regex(p, _) => Stop {
                    kind: Kind::Regex(Box::new(
                        PikeVM::builder()
                            .configure(PikeVM::config().match_kind(MatchKind::All))
                            .build(p)
                            .unwrap(),
                    )),
                    include: s.include,
                    max_len: regex_max_len(p).unwrap(),
                },
            })
            .collect();
        let skip = skip.iter().map(|(o, c)| (o.to_vec(), c.to_vec())).collect();
        List { stops, until: until.map(<[u8]>::to_vec), skip }
    }

    pub fn has_regex(&self) -> bool {
        self.stops.iter().any(|s| matches!(s.kind, Kind::Regex(_)))
    }

    pub fn include(&self, i: usize) -> bool {
        self.stops[i].include
    }

    /// The flag-off literal stops (the ones a partial match holds text for).
    pub fn held_literals(&self) -> Vec<Vec<u8>> {
        self.stops
            .iter()
            .filter_map(|s| match &s.kind {
                Kind::Literal(l) if !s.include => Some(l.clone()),
                _ => None,
            })
            .collect()
    }

    /// The longest match of a flag-off stop, in code points: `Some(0)` when there is none,
    /// `None` when one is unbounded.
    pub fn held_max(&self) -> Option<usize> {
        self.stops.iter().filter(|s| !s.include).try_fold(0, |m, s| Some(m.max(s.max_len?)))
    }

    /// Every match of every stop in `text`, a whole stream.
    pub fn matches(&self, text: &[u8]) -> Vec<Hit> {
        let mut hits = Vec::new();
        for (stop, s) in self.stops.iter().enumerate() {
            match &s.kind {
                Kind::Literal(l) => {
                    for start in 0..text.len() {
                        if text[start..].starts_with(l) {
                            hits.push(Hit { stop, start, end: start + l.len() });
                        }
                    }
                }
                Kind::Regex(re) => {
                    let mut cache = re.create_cache();
                    let starts = (0..text.len()).filter(|&p| text[p] & 0xC0 != 0x80);
                    for start in starts {
                        let mut limit = text.len();
                        while limit > start {
                            let input =
                                Input::new(text).range(start..limit).anchored(Anchored::Yes);
                            let Some(m) = re.find(&mut cache, input) else { break };
                            hits.push(Hit { stop, start, end: m.end() });
                            limit = m.end() - 1;
                        }
                    }
                }
            }
        }
        hits
    }

    /// The opening marker that comes first from `from` on: the earliest end, then the longest,
    /// then the first listed.
    fn first_open(&self, text: &[u8], from: usize) -> Option<Hit> {
        self.skip
            .iter()
            .enumerate()
            .filter_map(|(k, (o, _))| {
                find(text, o, from).map(|start| Hit { stop: k, start, end: start + o.len() })
            })
            .min_by_key(|h| (h.end, h.start, h.stop))
    }

    /// Where the region opened by `open` ends, if it does in `text`.
    fn close(&self, text: &[u8], open: Hit) -> Option<usize> {
        let close = &self.skip[open.stop].1;
        find(text, close, open.end).map(|p| p + close.len())
    }

    /// Where the `skip_until` marker ends (0 without one).
    fn after_until(&self, text: &[u8]) -> Option<usize> {
        match &self.until {
            None => Some(0),
            Some(u) => find(text, u, 0).map(|p| p + u.len()),
        }
    }

    /// The zone at the end of `text`, in which no stop fired.
    pub fn zone(&self, text: &[u8]) -> Zone {
        let Some(mut from) = self.after_until(text) else { return Zone::Before };
        while let Some(open) = self.first_open(text, from) {
            match self.close(text, open) {
                Some(end) => from = end,
                None => return Zone::Inside,
            }
        }
        Zone::Outside(from)
    }

    /// Where the next region after `from` begins in `text` (its length if none does).
    pub fn next_region(&self, text: &[u8], from: usize) -> usize {
        self.first_open(text, from).map_or(text.len(), |h| h.start)
    }

    /// The cut of `text`, a whole stream with `hits` its matches, and the match that fired.
    pub fn cut(&self, text: &[u8], hits: &[Hit]) -> (usize, Option<Hit>) {
        let Some(mut from) = self.after_until(text) else { return (text.len(), None) };
        loop {
            let stop =
                hits.iter().filter(|h| h.start >= from).min_by_key(|h| (h.end, h.start, h.stop));
            match self.first_open(text, from) {
                Some(open) if stop.is_none_or(|s| open.end <= s.end) => {
                    match self.close(text, open) {
                        Some(end) => from = end,
                        None => return (text.len(), None),
                    }
                }
                _ => {
                    return match stop {
                        Some(&h) => (if self.include(h.stop) { h.end } else { h.start }, Some(h)),
                        None => (text.len(), None),
                    }
                }
            }
        }
    }
}
