//! One stream type over either kind of compiled stop list, for decoded text or raw bytes.
//!
//! [`CompiledStops`] (in `compiled.rs`) is a compiled list: the literal automaton
//! ([`LiteralStops`]) when every stop is a plain string, else the composed matcher of contract §6
//! ([`Matcher`]: `Stop` and `Regex` items, skip regions). [`Filter`] is a stream over one, taking `str` chunks (as UTF-8) or
//! bytes split anywhere; its [`Filter::feed`] returns the output directly, borrowed from the
//! input when it is a prefix of it (nearly every chunk) and from the filter's own buffer
//! otherwise. Every binding (the push filters, the pull stream, the adapters' stage) drives
//! this one type, so none of them branches on the kind of list or of input.

use std::sync::Arc;

use crate::byte_stream::{ByteOut, ByteStream};
use crate::compiled::CompiledStops;
use crate::error::Error;
use crate::literal_state::{Status, TextStream};
use crate::literal_stops::LiteralStops;
use crate::matcher::{MatchStream, Matcher};

/// What one [`Filter::feed`] emits: `head`, then `bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output<'a> {
    /// Held text released first (a literal text stream's, read from the stop list: never
    /// copied); empty otherwise.
    pub head: &'a [u8],
    /// The rest of the text to emit (possibly empty).
    pub bytes: &'a [u8],
    /// The output is the whole input, unchanged: a caller may hand the input object on.
    pub whole: bool,
}

impl Output<'_> {
    /// Whether nothing is emitted.
    pub fn is_empty(&self) -> bool {
        self.head.is_empty() && self.bytes.is_empty()
    }
}

/// What a filter or stream tells of its stop: what its `stopped`, `stop_index`, `stop_reason`,
/// `stop_sequence` and `pending` attributes read. The push filters ([`Filter::stop_report`]),
/// and the bindings' pulled streams and token filter, each give one, so the bindings read the
/// attributes one way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopReport {
    /// Where the stream stands (open before it started).
    pub status: Status,
    /// A stop sequence (or a stop token) ended the text.
    pub stopped: bool,
    /// Why the text ended, as the contract names it (`None` while it goes on).
    pub reason: Option<&'static str>,
    /// The input is raw bytes, so `pending` is bytes rather than text.
    pub bytes: bool,
    /// A composed list's matched text, once its stop fired (`None` for a literal list, whose
    /// stop is named by its item); read for [`Detail::Matched`] only.
    pub matched: Option<Vec<u8>>,
    /// What the stream holds back (with a bytes stream's incomplete character; a token
    /// stream's held text only); read for [`Detail::Pending`] only.
    pub pending: Vec<u8>,
}

/// Which text a [`StopReport`] copies: each is read by one attribute, and copying both for
/// every read doubled the cost of `stop_sequence` (24 against 50 ns a read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Neither: `stopped`, `stop_index` and `stop_reason` (the adapters read these per event).
    Status,
    /// The matched text (`stop_sequence`).
    Matched,
    /// The held text (`pending`).
    Pending,
}

impl StopReport {
    /// A report of `status` over text, and nothing held or matched.
    #[inline]
    #[must_use]
    pub fn of(status: Status) -> StopReport {
        StopReport {
            status,
            stopped: matches!(status, Status::Stopped(_)),
            reason: status.reason(),
            bytes: false,
            matched: None,
            pending: Vec::new(),
        }
    }
}

/// What a stream reports, packed in one word ([`Report::pack`]) so that a driver can publish it
/// after every chunk and readers can take it from anywhere without a lock: whether the stream
/// has started and on which input, its status, and a literal list's automaton state, which
/// with the list gives the held text ([`LiteralStops::held`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// Where the stream stands (open before it started).
    pub status: Status,
    /// The input is raw bytes (`false`: decoded text, or not started).
    pub bytes: bool,
    /// The stream has a filter (an item was fed, or the upstream ended).
    pub started: bool,
    /// The list is composed: the held text is not a function of a state id.
    pub composed: bool,
    /// A literal list's automaton state (0 for a composed list).
    pub state_id: u32,
}

impl Report {
    /// Before the first item.
    pub const UNSTARTED: Report =
        Report { status: Status::Open, bytes: false, started: false, composed: false, state_id: 0 };

    /// The report in a word: state id (32 bits), started, bytes and composed (3 bits), status
    /// (29 bits: 0 open, 1 finished, 2 + i stopped by stop i).
    pub fn pack(self) -> u64 {
        let status: u64 = match self.status {
            Status::Open => 0,
            Status::Finished => 1,
            Status::Stopped(i) => 2 + i as u64,
        };
        let flags =
            u64::from(self.started) | u64::from(self.bytes) << 1 | u64::from(self.composed) << 2;
        u64::from(self.state_id) | flags << 32 | status << 35
    }

    /// The report [`Report::pack`] made `word` of.
    pub fn unpack(word: u64) -> Report {
        let status = match word >> 35 {
            0 => Status::Open,
            1 => Status::Finished,
            i => Status::Stopped(usize::try_from(i - 2).unwrap_or(usize::MAX)),
        };
        let flags = word >> 32;
        Report {
            status,
            bytes: flags & 2 != 0,
            started: flags & 1 != 0,
            composed: flags & 4 != 0,
            state_id: word as u32,
        }
    }
}

#[cfg(any(feature = "python", test))]
/// A literal text stream's state, saved by [`Filter::feed_unless_stop`] for [`Filter::restore`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved(TextStream);

#[derive(Clone, Debug)]
enum Kind {
    Text(Arc<LiteralStops>, TextStream),
    Bytes(Arc<LiteralStops>, ByteStream),
    // Boxed: a composed stream is 176 bytes or more against a literal one's 24, and every
    // filter (a literal one per request, nearly always) is moved into its Python object whole.
    ComposedText(Arc<Matcher>, Box<MatchStream>),
    ComposedBytes(Arc<Matcher>, Box<ByteStream<MatchStream>>),
}

/// A stream over a [`CompiledStops`]: decoded text (whole characters per chunk) or raw UTF-8
/// bytes (split anywhere, decoded with CPython's `strict` or `replace` rules).
///
/// ```
/// use stopstream::{CompiledStops, Filter};
///
/// let stops = CompiledStops::literal(&["é!"]).unwrap();
/// // Raw bytes split inside a character: the filter carries the incomplete one.
/// let mut filter = Filter::new(&stops, true, false, false);
/// assert_eq!(filter.feed(b"caf\xc3").unwrap().bytes, b"caf");
/// // "é" may start the stop: held back until the next character shows it does not.
/// assert_eq!(filter.feed(b"\xa9").unwrap().bytes, b"");
/// assert_eq!(filter.pending(), "é".as_bytes());
/// assert_eq!(filter.feed(b".").unwrap().bytes, "é.".as_bytes());
/// ```
#[derive(Clone, Debug)]
pub struct Filter {
    kind: Kind,
    /// Under strict decoding, the error of an invalid sequence whose place ended the text and
    /// so fired a stop (contract §9.9), for the caller to raise after that stop's output.
    /// Boxed, as the composed streams are: rare, and 56 bytes inline.
    owed: Option<Box<Error>>,
    /// Output that is not a prefix of the input; its capacity is kept between calls.
    buf: Vec<u8>,
}

impl Filter {
    /// A fresh stream over `stops`, for bytes (`bytes`) or decoded text. `include_stop` is the
    /// literal list's flag (a composed list carries one per stop); `replace` selects
    /// `errors="replace"` for bytes.
    #[inline]
    pub fn new(stops: &CompiledStops, bytes: bool, include_stop: bool, replace: bool) -> Filter {
        let kind = match (stops, bytes) {
            (CompiledStops::Literal(s), false) => {
                Kind::Text(Arc::clone(s), TextStream::new(include_stop))
            }
            (CompiledStops::Literal(s), true) => {
                Kind::Bytes(Arc::clone(s), ByteStream::new(include_stop, replace))
            }
            (CompiledStops::Composed(m), false) => {
                Kind::ComposedText(Arc::clone(m), Box::new(MatchStream::new(m)))
            }
            (CompiledStops::Composed(m), true) => {
                let stream = ByteStream::over(MatchStream::new(m), replace);
                Kind::ComposedBytes(Arc::clone(m), Box::new(stream))
            }
        };
        Filter { kind, owed: None, buf: Vec::new() }
    }

    /// Makes the stream quiet, or no longer quiet ([`MatchStream::quiet`]); a literal list's
    /// stream, on the literal automaton alone, cannot be (an error). Over raw bytes, a
    /// character split across the change is matched after it, when it completes.
    pub fn quiet(&mut self, on: bool) -> Result<(), Error> {
        match &mut self.kind {
            Kind::ComposedText(m, t) => t.quiet(m, on),
            Kind::ComposedBytes(m, b) => b.text_mut().quiet(m, on),
            Kind::Text(..) | Kind::Bytes(..) => Err(Error::quiet()),
        }
    }

    /// Starts over with the same stops and settings.
    pub fn reset(&mut self) {
        match &mut self.kind {
            Kind::Text(_, t) => t.reset(),
            Kind::Bytes(_, b) => b.reset(),
            Kind::ComposedText(m, t) => t.reset(m),
            Kind::ComposedBytes(m, b) => **b = ByteStream::over(MatchStream::new(m), b.replace()),
        }
        self.owed = None;
    }

    /// Where the stream stands.
    #[inline]
    pub fn status(&self) -> Status {
        match &self.kind {
            Kind::Text(_, t) => t.status(),
            Kind::Bytes(_, b) => b.status(),
            Kind::ComposedText(_, t) => t.status(),
            Kind::ComposedBytes(_, b) => b.status(),
        }
    }

    /// Whether the stream takes raw bytes.
    #[inline]
    pub fn is_bytes(&self) -> bool {
        matches!(self.kind, Kind::Bytes(..) | Kind::ComposedBytes(..))
    }

    /// Whether invalid bytes become U+FFFD (`false` for decoded text).
    pub fn replace(&self) -> bool {
        match &self.kind {
            Kind::Bytes(_, b) => b.replace(),
            Kind::ComposedBytes(_, b) => b.replace(),
            Kind::Text(..) | Kind::ComposedText(..) => false,
        }
    }

    /// What the stream reports, for [`Report::pack`].
    #[inline]
    pub fn report(&self) -> Report {
        let (status, bytes, composed, state_id) = match &self.kind {
            Kind::Text(_, t) => (t.status(), false, false, t.state_id()),
            Kind::Bytes(_, b) => (b.status(), true, false, b.text().state_id()),
            Kind::ComposedText(_, t) => (t.status(), false, true, 0),
            Kind::ComposedBytes(_, b) => (b.status(), true, true, 0),
        };
        Report { status, bytes, started: true, composed, state_id }
    }

    /// For a literal list, the automaton state, which with the list determines the held text
    /// ([`LiteralStops::held`]): a stream's report then fits in a word. `None` for a composed list.
    #[inline]
    pub fn state_id(&self) -> Option<u32> {
        match &self.kind {
            Kind::Text(_, t) => Some(t.state_id()),
            Kind::Bytes(_, b) => Some(b.text().state_id()),
            Kind::ComposedText(..) | Kind::ComposedBytes(..) => None,
        }
    }

    /// The decoded text held back right now.
    #[inline]
    pub fn held(&self) -> &[u8] {
        match &self.kind {
            Kind::Text(s, t) => t.held(s),
            Kind::Bytes(s, b) => b.held(s),
            Kind::ComposedText(_, t) => t.held(),
            Kind::ComposedBytes(_, b) => b.text().held(),
        }
    }

    /// The incomplete character carried at the end of raw input (0 to 3 bytes).
    #[inline]
    pub fn tail(&self) -> &[u8] {
        match &self.kind {
            Kind::Bytes(_, b) => b.tail(),
            Kind::ComposedBytes(_, b) => b.tail(),
            Kind::Text(..) | Kind::ComposedText(..) => &[],
        }
    }

    /// What the stream holds: the held text, then the incomplete character.
    pub fn pending(&self) -> Vec<u8> {
        // Not `concat`: its general loop was 57 of a `pending` read's 380 instructions.
        let (held, tail) = (self.held(), self.tail());
        let mut out = Vec::with_capacity(held.len() + tail.len());
        out.extend_from_slice(held);
        out.extend_from_slice(tail);
        out
    }

    /// The text that the composed list's stop matched, once one fired (a regex's match, or the
    /// literal itself); `None` for a literal list, whose caller reports the item as given.
    pub fn matched(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::ComposedText(m, t) => Some(t.stop_sequence(m)),
            Kind::ComposedBytes(m, b) => Some(b.text().stop_sequence(m)),
            Kind::Text(..) | Kind::Bytes(..) => None,
        }
    }

    /// What the filter tells of its stop, with the text `detail` names.
    #[inline]
    #[must_use]
    pub fn stop_report(&self, detail: Detail) -> StopReport {
        let mut report = StopReport { bytes: self.is_bytes(), ..StopReport::of(self.status()) };
        match detail {
            Detail::Status => {}
            Detail::Matched => report.matched = self.matched().map(<[u8]>::to_vec),
            Detail::Pending => report.pending = self.pending(),
        }
        report.matched = report.matched.filter(|_| report.stopped);
        report
    }

    /// Feeds `input` when it passes through whole without the scan's bookkeeping: the stream
    /// is open, holds and carries nothing, and no byte of `input` can begin a stop (or a skip
    /// marker). Then it moves past `input` and returns `true`; otherwise nothing changed and
    /// [`Filter::feed`] decides. The common chunk of a token stream: for `wrap` over `str` the
    /// step costs about a third less this way than through `feed`.
    #[allow(
        clippy::inline_always,
        reason = "every chunk of `wrap` and `awrap`: out of line it was 50 instructions of a 4-stop `wrap` chunk's 646 (callgrind)"
    )]
    #[inline(always)]
    pub fn pass_whole(&mut self, input: &[u8]) -> bool {
        match &mut self.kind {
            Kind::Text(s, t) => t.passes_whole(s, input),
            Kind::Bytes(s, b) => b.passes_whole(s, input),
            Kind::ComposedText(m, t) => t.pass_clear(m, input),
            Kind::ComposedBytes(..) => false,
        }
    }

    /// Feeds a chunk: UTF-8 of whole characters for a text stream, any bytes for a bytes stream.
    /// On error nothing is consumed. Under strict decoding, an invalid sequence that ends the
    /// text where a stop fires succeeds with that stop's output and leaves the decoding error
    /// owed ([`Filter::take_owed`], contract §9.9).
    #[allow(
        clippy::inline_always,
        reason = "every binding's per-chunk step: out of line it was a call per chunk, 63 instructions of a 100-stop `wrap` chunk's 530 (callgrind)"
    )]
    #[inline(always)]
    pub fn feed<'a>(&'a mut self, input: &'a [u8]) -> Result<Output<'a>, Error> {
        self.buf.clear();
        let fed = match &mut self.kind {
            Kind::Text(s, t) => {
                let before = *t;
                let e = t.feed(s, input)?;
                // Read only when some is released: most chunks release none.
                let head = if e.from_held == 0 { &[][..] } else { &before.held(s)[..e.from_held] };
                let whole = e.from_held == 0 && e.from_input == input.len();
                return Ok(Output { head, bytes: &input[..e.from_input], whole });
            }
            Kind::ComposedText(m, t) => t.feed(m, input, &mut self.buf)?,
            Kind::Bytes(s, b) => {
                let (fed, owed) = b.feed_deferring(s, input, &mut self.buf)?;
                self.owed = owed.map(Box::new).or(self.owed.take());
                fed
            }
            Kind::ComposedBytes(m, b) => {
                let (fed, owed) = b.feed_deferring(m, input, &mut self.buf)?;
                self.owed = owed.map(Box::new).or(self.owed.take());
                fed
            }
        };
        Ok(match fed {
            ByteOut::Input => Output { head: &[], bytes: input, whole: true },
            ByteOut::Buffer => Output { head: &[], bytes: &self.buf, whole: false },
        })
    }

    /// Ends the stream and returns what it still held (or, when the end of the text fires a
    /// stop, what precedes the cut). Strict decoding of an incomplete character at the end is
    /// an error that changes nothing, unless the end before it fires a stop (then it is owed,
    /// as in [`Filter::feed`]).
    pub fn finish(&mut self) -> Result<&[u8], Error> {
        self.buf.clear();
        match &mut self.kind {
            Kind::Text(s, t) => self.buf.extend_from_slice(t.finish(s)),
            Kind::ComposedText(m, t) => t.finish(m, &mut self.buf),
            Kind::Bytes(s, b) => {
                let owed = b.finish_deferring(s, &mut self.buf)?;
                self.owed = owed.map(Box::new).or(self.owed.take());
            }
            Kind::ComposedBytes(m, b) => {
                let owed = b.finish_deferring(m, &mut self.buf)?;
                self.owed = owed.map(Box::new).or(self.owed.take());
            }
        }
        Ok(&self.buf)
    }

    /// The decoding error owed after a stop (contract §9.9), taken.
    #[inline]
    pub fn take_owed(&mut self) -> Option<Error> {
        // Checked first: the usual chunk owes nothing, and then nothing is written.
        self.owed.as_ref()?;
        self.owed.take().map(|owed| *owed)
    }

    #[cfg(any(feature = "python", test))]
    /// [`Filter::feed`] of a literal text stream when it fires no stop: appends the output to
    /// `out` and returns the state from before, for [`Filter::restore`]. `None`, with nothing
    /// changed, when the text would fire a stop or fail, or the stream is not a literal text
    /// stream: the caller then takes the path that handles every case. The adapters' common
    /// event (a text delta that fires no stop, of one of several streams of one event, all fed
    /// or none).
    pub(crate) fn feed_unless_stop(&mut self, input: &[u8], out: &mut Vec<u8>) -> Option<Saved> {
        let Kind::Text(s, t) = &mut self.kind else { return None };
        let before = *t;
        match t.feed(s, input) {
            Ok(e) if !matches!(t.status(), Status::Stopped(_)) => {
                out.extend_from_slice(&before.held(s)[..e.from_held]);
                out.extend_from_slice(&input[..e.from_input]);
                Some(Saved(before))
            }
            _ => {
                *t = before;
                None
            }
        }
    }

    #[cfg(any(feature = "python", test))]
    /// Puts back a state saved by [`Filter::feed_unless_stop`].
    pub(crate) fn restore(&mut self, saved: Saved) {
        if let Kind::Text(_, t) = &mut self.kind {
            *t = saved.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{StopKind, StopSpec};

    fn literal(stops: &[&str]) -> CompiledStops {
        CompiledStops::literal(stops).unwrap()
    }

    fn composed(stops: &[&str], regex: &[&str]) -> CompiledStops {
        let mut specs: Vec<StopSpec<'_>> = stops
            .iter()
            .map(|s| StopSpec { kind: StopKind::Literal(s.as_bytes()), include: false })
            .collect();
        specs.extend(
            regex.iter().map(|r| StopSpec { kind: StopKind::Regex(r, None), include: false }),
        );
        CompiledStops::composed(&specs, None, &[]).unwrap()
    }

    /// Feeds `chunks` through a filter, returning every output joined, and the final status.
    fn run(stops: &CompiledStops, bytes: bool, chunks: &[&[u8]]) -> (Vec<u8>, Status) {
        let mut f = Filter::new(stops, bytes, false, false);
        let mut out = Vec::new();
        for c in chunks {
            if f.clone().pass_whole(c) {
                assert!(f.pass_whole(c));
                out.extend_from_slice(c);
                continue;
            }
            let fed = f.feed(c).unwrap();
            out.extend_from_slice(fed.head);
            out.extend_from_slice(fed.bytes);
        }
        out.extend_from_slice(f.finish().unwrap());
        (out, f.status())
    }

    #[test]
    fn every_kind_gives_one_answer() {
        let chunks: [&[u8]; 4] = [b"Hello <", b"/an", b"swer> tail", b"!"];
        let cases = [
            (literal(&["</answer>"]), false),
            (literal(&["</answer>"]), true),
            (composed(&["</answer>"], &[]), false),
            (composed(&["</answer>"], &[]), true),
            (composed(&[], &["</ans[w]er>"]), false),
            (composed(&[], &["</ans[w]er>"]), true),
        ];
        for (stops, bytes) in &cases {
            let (out, status) = run(stops, *bytes, &chunks);
            assert_eq!(out, b"Hello ", "{stops:?} bytes={bytes}");
            assert_eq!(status, Status::Stopped(0));
        }
    }

    #[test]
    fn output_borrows_the_input_when_it_can() {
        let stops = literal(&["xyz"]);
        let mut f = Filter::new(&stops, false, false, false);
        assert_eq!(f.feed(b"abc").unwrap(), Output { head: b"", bytes: b"abc", whole: true });
        assert_eq!(f.feed(b"dx").unwrap(), Output { head: b"", bytes: b"d", whole: false });
        assert_eq!(f.held(), b"x");
        // Held text released: read from the stop list, then the input.
        assert_eq!(f.feed(b"a").unwrap(), Output { head: b"x", bytes: b"a", whole: false });
        let composed = composed(&["xyz"], &[]);
        let mut f = Filter::new(&composed, false, false, false);
        assert!(f.feed(b"dx").unwrap().bytes == b"d");
        // A composed list's output is in the filter's buffer.
        assert_eq!(f.feed(b"a").unwrap(), Output { head: b"", bytes: b"xa", whole: false });
    }

    #[test]
    fn a_deferred_decoding_error_is_owed_after_the_stop() {
        let stops = composed(&[], &[r"end\b"]);
        let mut f = Filter::new(&stops, true, false, false);
        assert_eq!(f.feed(b"the end").unwrap().bytes, b"the ");
        let out = f.feed(b"\xff").unwrap().bytes.to_vec();
        assert!(out.is_empty());
        assert_eq!(f.status(), Status::Stopped(0));
        assert!(f.take_owed().is_some());
        assert!(f.take_owed().is_none());
    }

    #[test]
    fn feed_unless_stop_changes_nothing_when_a_stop_would_fire() {
        let stops = literal(&["xyz"]);
        let mut f = Filter::new(&stops, false, false, false);
        let mut out = Vec::new();
        let saved = f.feed_unless_stop(b"ax", &mut out).unwrap();
        assert_eq!((out.as_slice(), f.held()), (&b"a"[..], &b"x"[..]));
        assert!(f.feed_unless_stop(b"yz", &mut out).is_none());
        assert_eq!((f.held(), f.status()), (&b"x"[..], Status::Open));
        f.restore(saved);
        assert_eq!(f.held(), b"");
        let composed = composed(&["xyz"], &[]);
        assert!(Filter::new(&composed, false, false, false)
            .feed_unless_stop(b"a", &mut out)
            .is_none());
    }

    #[test]
    fn a_report_survives_its_word() {
        let stopped = [Status::Stopped(0), Status::Stopped(9_999)];
        for status in [Status::Open, Status::Finished].into_iter().chain(stopped) {
            for (bytes, started, state_id) in [(false, false, 0), (true, true, u32::MAX)] {
                let report = Report { status, bytes, started, composed: bytes, state_id };
                assert_eq!(Report::unpack(report.pack()), report);
            }
        }
    }

    #[test]
    fn pending_is_held_text_then_the_incomplete_character() {
        let stops = literal(&["é!"]);
        let mut f = Filter::new(&stops, true, false, false);
        assert_eq!(f.feed("aé".as_bytes()).unwrap().bytes, b"a");
        assert!(f.feed(b"\xc3").unwrap().bytes.is_empty());
        assert_eq!(f.pending(), b"\xc3\xa9\xc3");
    }
}
