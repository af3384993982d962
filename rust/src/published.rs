//! What a pulled stream reports, published after every step so that its attributes can be read
//! from anywhere (another thread, or the upstream's own code during a pull) without waiting for
//! the step in progress.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::filter::{Detail, Filter, Report, StopReport};
use crate::literal_state::Status;
use crate::literal_stops::LiteralStops;

/// A stream's published report.
///
/// A literal list's report is one word (the automaton state gives the held text) and, over
/// bytes, a second for the incomplete character: `wrap` publishes it after every chunk with
/// two stores. A composed list's held and matched text are copied beside it, and only when
/// there is something to copy (or to clear).
#[derive(Debug, Default)]
pub struct Published {
    word: AtomicU64,
    tail: AtomicU32,
    /// A composed list's held text (with a bytes stream's incomplete character), and the
    /// matched text of the stop that fired.
    composed: Mutex<(Vec<u8>, Option<Vec<u8>>)>,
    /// Whether `composed` holds anything.
    composed_set: AtomicBool,
}

impl Published {
    /// Before the first step: open, not started.
    #[must_use]
    pub fn new() -> Published {
        Published::default()
    }

    /// Publishes `filter`'s report, or (`None`) that the stream has not started.
    #[allow(
        clippy::inline_always,
        reason = "after every chunk of `wrap`: out of line it was 43 instructions of a 4-stop chunk's 646, against 27 inline (callgrind)"
    )]
    #[inline(always)]
    pub fn publish(&self, filter: Option<&Filter>) {
        let Some(f) = filter else {
            self.word.store(Report::UNSTARTED.pack(), Ordering::Release);
            return;
        };
        let report = f.report();
        if report.composed {
            // Nearly every chunk of a composed list: open, nothing held now or before, so
            // nothing to copy (a call and the held text's lookups otherwise: 66 instructions a
            // chunk, callgrind).
            let clear = report.status == Status::Open
                && !self.composed_set.load(Ordering::Relaxed)
                && f.held().is_empty()
                && f.tail().is_empty();
            if !clear {
                self.publish_composed(f.held(), f.tail(), f.matched().unwrap_or_default());
            }
        } else if report.bytes {
            self.tail.store(pack_tail(f.tail()), Ordering::Relaxed);
        }
        self.word.store(report.pack(), Ordering::Release);
    }

    fn publish_composed(&self, held: &[u8], tail: &[u8], matched: &[u8]) {
        let empty = held.is_empty() && tail.is_empty() && matched.is_empty();
        if empty && !self.composed_set.load(Ordering::Relaxed) {
            return;
        }
        let mut g = self.composed.lock().unwrap_or_else(PoisonError::into_inner);
        g.0.clear();
        g.0.extend_from_slice(held);
        g.0.extend_from_slice(tail);
        g.1 = (!matched.is_empty()).then(|| matched.to_vec());
        self.composed_set.store(!empty, Ordering::Relaxed);
    }

    /// The report last published.
    #[must_use]
    pub fn report(&self) -> Report {
        Report::unpack(self.word.load(Ordering::Acquire))
    }

    /// The report, and a composed list's matched text once a stop fired (`None` for a literal
    /// list, whose stop is named by its index).
    #[must_use]
    pub fn matched(&self) -> (Report, Option<Vec<u8>>) {
        let report = self.report();
        if !report.composed || !matches!(report.status, Status::Stopped(_)) {
            return (report, None);
        }
        (report, self.composed.lock().unwrap_or_else(PoisonError::into_inner).1.clone())
    }

    /// The report, and the text held back (with a bytes stream's incomplete character); `set`
    /// is the literal list the stream runs over.
    #[must_use]
    pub fn pending(&self, set: &LiteralStops, include_stop: bool) -> (Report, Vec<u8>) {
        let report = self.report();
        let mut held = Vec::new();
        if report.status != Status::Open {
            return (report, held);
        }
        if report.composed {
            held.extend_from_slice(&self.composed.lock().unwrap_or_else(PoisonError::into_inner).0);
            return (report, held);
        }
        if !include_stop {
            held.extend_from_slice(set.held(report.state_id));
        }
        if report.bytes {
            let (tail, len) = unpack_tail(self.tail.load(Ordering::Relaxed));
            held.extend_from_slice(&tail[..len]);
        }
        (report, held)
    }

    /// The report last published, as [`StopReport`] (see [`Filter::stop_report`]); `set` and
    /// `include_stop` are the literal list the stream runs over and its flag.
    #[inline]
    #[must_use]
    pub fn stop_report(
        &self,
        set: &LiteralStops,
        include_stop: bool,
        detail: Detail,
    ) -> StopReport {
        let (report, matched, pending) = match detail {
            Detail::Status => (self.report(), None, Vec::new()),
            Detail::Matched => {
                let (report, matched) = self.matched();
                (report, matched, Vec::new())
            }
            Detail::Pending => {
                let (report, pending) = self.pending(set, include_stop);
                (report, None, pending)
            }
        };
        StopReport { bytes: report.bytes, matched, pending, ..StopReport::of(report.status) }
    }
}

/// The incomplete character a bytes stream carries ([`Filter::tail`]), packed in a word:
/// its length in the low byte, then its bytes.
pub(crate) fn pack_tail(tail: &[u8]) -> u32 {
    let mut word = tail.len() as u32;
    for (i, &byte) in tail.iter().take(3).enumerate() {
        word |= u32::from(byte) << (8 * (i + 1));
    }
    word
}

/// The bytes [`pack_tail`] packed.
pub(crate) fn unpack_tail(word: u32) -> ([u8; 3], usize) {
    let b = word.to_le_bytes();
    ([b[1], b[2], b[3]], (b[0] as usize).min(3))
}

#[cfg(test)]
mod tests {
    use super::{pack_tail, unpack_tail, Published};
    use crate::{CompiledStops, Detail, Filter, Status, StopKind, StopReport, StopSpec};

    #[test]
    fn literal_and_bytes() {
        let stops = CompiledStops::literal(&["STOP"]).unwrap();
        let set = stops.literal_stops().unwrap();
        let p = Published::new();
        assert!(!p.report().started);
        let mut f = Filter::new(&stops, true, false, false);
        f.feed(b"a ST\xc3").unwrap();
        p.publish(Some(&f));
        assert_eq!(p.pending(set, false).1, b"ST\xc3");
        assert_eq!(p.matched().1, None);
        f.feed(b"\xa9OP").unwrap();
        p.publish(Some(&f));
        assert!(p.pending(set, false).1.is_empty());
    }

    #[test]
    fn a_tail_survives_its_word() {
        assert_eq!(unpack_tail(pack_tail(b"\xe2\x82")), ([0xe2, 0x82, 0], 2));
        assert_eq!(unpack_tail(pack_tail(b"")), ([0, 0, 0], 0));
    }

    /// A filter's report and the one its publication gives agree at every step: open with
    /// text held, with a bytes stream's incomplete character, stopped, finished.
    #[test]
    fn a_filter_and_its_publication_report_alike() {
        let spec = [StopSpec { kind: StopKind::Regex("S[T]OP", None), include: false }];
        let lists = [
            CompiledStops::literal(&["STOP"]).unwrap(),
            CompiledStops::composed(&spec, None, &[]).unwrap(),
        ];
        for stops in &lists {
            let set = stops.literal_stops().map_or(crate::LiteralStops::none(), |s| s);
            for (bytes, include) in [(false, false), (false, true), (true, false), (true, true)] {
                let p = Published::new();
                assert_eq!(
                    p.stop_report(set, include, Detail::Pending),
                    StopReport::of(Status::Open)
                );
                let mut f = Filter::new(stops, bytes, include, false);
                let chunks: &[&[u8]] =
                    if bytes { &[b"a \xc3", b"\xa9 ST", b"OP!"] } else { &[b"a ST", b"OP!"] };
                for chunk in chunks {
                    f.feed(chunk).unwrap();
                    p.publish(Some(&f));
                    for detail in [Detail::Status, Detail::Matched, Detail::Pending] {
                        assert_eq!(p.stop_report(set, include, detail), f.stop_report(detail));
                    }
                }
                let r = f.stop_report(Detail::Matched);
                assert_eq!(
                    (r.status, r.stopped, r.reason, r.bytes),
                    (Status::Stopped(0), true, Some("stop_sequence"), bytes)
                );
                assert_eq!(r.matched.is_some(), stops.is_composed());
                let mut g = Filter::new(stops, bytes, include, false);
                g.feed(b"ST").unwrap();
                p.publish(Some(&g));
                // A literal list's stop kept in the output holds nothing back (a composed list
                // carries the flag per stop: off here).
                let held: &[u8] = if include && !stops.is_composed() { b"" } else { b"ST" };
                assert_eq!(g.stop_report(Detail::Pending).pending, held);
                assert_eq!(p.stop_report(set, include, Detail::Pending).pending, held);
                assert!(g.stop_report(Detail::Matched).pending.is_empty());
                g.finish().unwrap();
                p.publish(Some(&g));
                let r = p.stop_report(set, include, Detail::Pending);
                assert_eq!((r.stopped, r.reason, r.pending.len()), (false, Some("end"), 0));
            }
        }
    }

    #[test]
    fn composed() {
        let spec = [StopSpec { kind: StopKind::Regex("b+c", None), include: false }];
        let stops = CompiledStops::composed(&spec, None, &[]).unwrap();
        let p = Published::new();
        let mut f = Filter::new(&stops, false, false, false);
        f.feed(b"abb").unwrap();
        p.publish(Some(&f));
        assert_eq!(p.pending(crate::LiteralStops::none(), false).1, b"bb");
        f.feed(b"c").unwrap();
        p.publish(Some(&f));
        assert_eq!(p.report().status, Status::Stopped(0));
        assert_eq!(p.matched().1.as_deref(), Some(&b"bbc"[..]));
        assert!(p.pending(crate::LiteralStops::none(), false).1.is_empty());
    }
}
