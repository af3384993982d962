//! Skip regions (contract §6.4): text the stops must not see, such as a model's reasoning.
//!
//! The markers are literal strings, each in an Aho-Corasick automaton of its own kind: the
//! `skip_until` marker alone, the opening markers together (among those ending at the same place
//! the longest wins, then the first listed, which is the automaton's own rule), and one
//! automaton per closing marker, because inside a region only that region's closing marker is
//! sought. A stream's region state is a [`Zone`]: one word of automaton state, no buffer, since
//! nothing is held back inside a region or before the `skip_until` marker.

use crate::automaton::Automaton;
use crate::error::Error;

/// Where a stream stands with respect to skip regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Zone {
    /// Before the `skip_until` marker (its automaton's state).
    Before(u32),
    /// Stops are sought.
    Outside,
    /// Inside region `k` (the index of its pair), with its closing marker's automaton state.
    Inside(usize, u32),
}

/// The compiled markers.
#[derive(Debug)]
pub(crate) struct Regions {
    until: Option<Automaton>,
    opens: Option<Automaton>,
    closes: Vec<Automaton>,
}

impl Regions {
    /// Compiles the markers; an empty one is an error naming it.
    pub(crate) fn new(
        skip_until: Option<&[u8]>,
        skip: &[(&[u8], &[u8])],
    ) -> Result<Regions, Error> {
        let until = match skip_until {
            Some([]) => return Err(Error::empty_marker("skip_until".to_owned())),
            Some(m) => Some(Automaton::new(vec![m.into()])),
            None => None,
        };
        let mut opens = Vec::with_capacity(skip.len());
        let mut closes = Vec::with_capacity(skip.len());
        for (i, (open, close)) in skip.iter().enumerate() {
            if open.is_empty() {
                return Err(Error::empty_marker(format!("skip[{i}] opening marker")));
            }
            if close.is_empty() {
                return Err(Error::empty_marker(format!("skip[{i}] closing marker")));
            }
            opens.push(Box::from(*open));
            closes.push(Automaton::new(vec![Box::from(*close)]));
        }
        let opens = (!opens.is_empty()).then(|| Automaton::new(opens));
        Ok(Regions { until, opens, closes })
    }

    /// The zone a fresh stream starts in.
    pub(crate) fn initial(&self) -> Zone {
        if self.until.is_some() {
            Zone::Before(Automaton::START)
        } else {
            Zone::Outside
        }
    }

    /// The `skip_until` marker's automaton.
    pub(crate) fn until(&self) -> Option<&Automaton> {
        self.until.as_ref()
    }

    /// The opening markers' automaton, if there are pairs.
    pub(crate) fn opens(&self) -> Option<&Automaton> {
        self.opens.as_ref()
    }

    /// The closing marker of pair `k`.
    pub(crate) fn close(&self, k: usize) -> Option<&Automaton> {
        self.closes.get(k)
    }

    /// Approximate heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.until.as_ref().map_or(0, Automaton::heap_bytes)
            + self.opens.as_ref().map_or(0, Automaton::heap_bytes)
            + self.closes.iter().map(Automaton::heap_bytes).sum::<usize>()
    }
}
