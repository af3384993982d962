//! The literal matcher's per-stream state: where the automaton is and whether a stop fired
//! ([`TextStream`]), and where any stream stands ([`Status`]). Raw bytes, and the incomplete
//! character carried between chunks, are `byte_stream.rs`'s.
//!
//! The held-back text is never stored here. It is always the automaton state's string, which is
//! a prefix of a known stop, so [`LiteralStops`] hands it out as a slice of that stop. A text
//! stream is therefore a `u32` and a status, and costs nothing to copy, which is also how a
//! strict-mode decoding error "consumes nothing": the state from before the call is simply put
//! back.

use crate::automaton::{Automaton, Step};
use crate::error::Error;
use crate::literal_stops::LiteralStops;

/// Where a stream stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Still accepting input.
    Open,
    /// The stop with this index fired; later input is ignored.
    Stopped(usize),
    /// `finish` was called without a stop firing.
    Finished,
}

impl Status {
    /// The index of the stop that fired, if one did.
    pub fn index(self) -> Option<usize> {
        match self {
            Status::Stopped(i) => Some(i),
            _ => None,
        }
    }

    /// Why the text ended, as the contract's `stop_reason` names it: `"stop_sequence"`,
    /// `"end"`, or `None` while it goes on.
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Status::Open => None,
            Status::Stopped(_) => Some("stop_sequence"),
            Status::Finished => Some("end"),
        }
    }
}

/// What one `feed` emits: the first `from_held` bytes of the text held back *before* the call,
/// followed by the first `from_input` bytes of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emit {
    /// Bytes released from what was held back before the call.
    pub from_held: usize,
    /// Bytes of the new input.
    pub from_input: usize,
}

impl Emit {
    const NOTHING: Emit = Emit { from_held: 0, from_input: 0 };
}

/// Stop matching over text that is already decoded: UTF-8 bytes in which every chunk holds whole
/// characters (lone surrogates may be encoded as three bytes, as CPython's `surrogatepass` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextStream {
    // Crate-visible: its matcher face for the byte stream (`byte_stream.rs`) steps them.
    pub(crate) sid: u32,
    pub(crate) status: Status,
    pub(crate) include_stop: bool,
    /// `finish` was called (also after a stop): further input is a caller error.
    pub(crate) finished: bool,
}

impl TextStream {
    /// A fresh stream. With `include_stop`, the stop itself is emitted and nothing is ever held.
    pub fn new(include_stop: bool) -> TextStream {
        TextStream { sid: 0, status: Status::Open, include_stop, finished: false }
    }

    /// Where the stream stands.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Whether the stop is emitted with the text.
    pub fn include_stop(&self) -> bool {
        self.include_stop
    }

    /// The automaton state: with the stop set it determines the held-back text
    /// ([`LiteralStops::held`]), so a snapshot of the stream fits in a couple of words.
    pub fn state_id(&self) -> u32 {
        self.sid
    }

    /// The text held back right now: the longest suffix of the input that is a proper prefix of
    /// some stop (always empty with `include_stop`, and once the stream is closed).
    pub fn held<'s>(&self, set: &'s LiteralStops) -> &'s [u8] {
        if self.include_stop || self.status != Status::Open {
            return &[];
        }
        set.automaton().held(self.sid)
    }

    /// Whether `finish` was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether `feed(set, input)` would emit `input` whole and leave the stream as it is: it is
    /// open, holds nothing, and no byte of `input` can start a stop. The common chunk of a token
    /// stream, decided without the scan's bookkeeping (a third of a token-sized `feed`); when
    /// it returns `false`, `feed` decides.
    #[inline]
    pub fn passes_whole(&self, set: &LiteralStops, input: &[u8]) -> bool {
        self.sid == Automaton::START
            && self.status == Status::Open
            && !self.finished
            && set.automaton().stays_at_root(input)
    }

    /// Feeds a chunk. `input` must be whole characters. After a stop fired the input is ignored;
    /// after `finish` it is an error.
    #[inline]
    pub fn feed(&mut self, set: &LiteralStops, input: &[u8]) -> Result<Emit, Error> {
        if self.finished {
            return Err(Error::finished());
        }
        if self.status != Status::Open {
            return Ok(Emit::NOTHING);
        }
        Ok(self.feed_open(set, input))
    }

    /// [`TextStream::feed`] of a stream known to be open: it cannot fail, so the result comes
    /// back in registers (a profile of token batches showed a stall reading the `Result` the
    /// general path returns through memory).
    #[inline]
    pub(crate) fn feed_open(&mut self, set: &LiteralStops, input: &[u8]) -> Emit {
        debug_assert!(self.status == Status::Open && !self.finished);
        let auto = set.automaton();
        // Open here, so the held text is the state's string (none with `include_stop`).
        let held = if self.include_stop || self.sid == Automaton::START {
            0
        } else {
            auto.depth(self.sid)
        };
        let total = match auto.scan(self.sid, input) {
            Step::Continue(s) => {
                self.sid = s;
                if self.include_stop {
                    return Emit { from_held: 0, from_input: input.len() };
                }
                held + input.len() - auto.depth(s)
            }
            Step::Stop(hit) => {
                self.status = Status::Stopped(hit.pattern);
                if self.include_stop {
                    return Emit { from_held: 0, from_input: hit.end };
                }
                let len = auto.patterns()[hit.pattern].len();
                held + hit.end - len
            }
        };
        if total <= held {
            Emit { from_held: total, from_input: 0 }
        } else {
            Emit { from_held: held, from_input: total - held }
        }
    }

    /// Ends the stream and returns what was held back (empty if already closed).
    pub fn finish<'s>(&mut self, set: &'s LiteralStops) -> &'s [u8] {
        let held = self.held(set);
        self.finished = true;
        if self.status == Status::Open {
            self.status = Status::Finished;
        }
        held
    }

    /// Starts over with the same stop set.
    pub fn reset(&mut self) {
        *self = TextStream::new(self.include_stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::byte_stream::{ByteOut, ByteStream};

    fn set(stops: &[&str]) -> LiteralStops {
        LiteralStops::new(stops.iter().map(|s| s.as_bytes())).unwrap()
    }

    #[test]
    fn status_reports_the_contracts_index_and_reason() {
        let table = [
            (Status::Open, None, None),
            (Status::Stopped(3), Some(3), Some("stop_sequence")),
            (Status::Finished, None, Some("end")),
        ];
        for (status, index, reason) in table {
            assert_eq!((status.index(), status.reason()), (index, reason), "{status:?}");
        }
    }

    /// Feeds text chunks, returning the output of each feed, then of finish, and the status.
    fn run_text(stops: &[&str], chunks: &[&str], include: bool) -> (Vec<String>, Status) {
        let set = set(stops);
        let mut st = TextStream::new(include);
        let mut outs = Vec::new();
        for c in chunks {
            let held = st.held(&set).to_vec();
            let e = st.feed(&set, c.as_bytes()).unwrap();
            let mut o = held[..e.from_held].to_vec();
            o.extend_from_slice(&c.as_bytes()[..e.from_input]);
            outs.push(String::from_utf8(o).unwrap());
        }
        outs.push(String::from_utf8(st.finish(&set).to_vec()).unwrap());
        (outs, st.status())
    }

    fn run_bytes(
        stops: &[&str],
        chunks: &[&[u8]],
        include: bool,
        replace: bool,
    ) -> Result<(Vec<Vec<u8>>, Status), Error> {
        let set = set(stops);
        let mut st = ByteStream::new(include, replace);
        let mut outs = Vec::new();
        for c in chunks {
            let mut buf = Vec::new();
            match st.feed(&set, c, &mut buf)? {
                ByteOut::Input => outs.push(c.to_vec()),
                ByteOut::Buffer => outs.push(buf),
            }
        }
        let mut buf = Vec::new();
        st.finish(&set, &mut buf)?;
        outs.push(buf);
        Ok((outs, st.status()))
    }

    #[test]
    #[allow(clippy::type_complexity, reason = "a table of literal cases")]
    fn spec_examples_text() {
        // (stops, chunks, include_stop, outputs per feed then finish, status)
        let cases: &[(&[&str], &[&str], bool, &[&str], Status)] = &[
            (
                &["</answer>"],
                &["Hello </ans", "wer> tail"],
                false,
                &["Hello ", "", ""],
                Status::Stopped(0),
            ),
            (&["</answer>"], &["a <", "b"], false, &["a ", "<b", ""], Status::Finished),
            (&["</answer>"], &["x </an"], false, &["x ", "</an"], Status::Finished),
            (&["abcd", "bc"], &["abcd"], false, &["a", ""], Status::Stopped(1)),
            (
                &["\n\nUser:"],
                &["a\n", "\nUser: hi"],
                true,
                &["a\n", "\nUser:", ""],
                Status::Stopped(0),
            ),
            (&[], &["abc", ""], false, &["abc", "", ""], Status::Finished),
            (&["ab", "ab"], &["xa", "b"], false, &["x", "", ""], Status::Stopped(0)),
            (&["abX", "bcY"], &["ab", "c", "Z"], false, &["", "a", "bcZ", ""], Status::Finished),
            (&["é!"], &["café", "!"], false, &["caf", "", ""], Status::Stopped(0)),
            (&["x"], &["ax", "more"], false, &["a", "", ""], Status::Stopped(0)),
            (&["abc"], &["ab", "ab", "abc"], true, &["ab", "ab", "abc", ""], Status::Stopped(0)),
        ];
        for (stops, chunks, include, want, status) in cases {
            let (got, st) = run_text(stops, chunks, *include);
            assert_eq!(got, *want, "{stops:?} {chunks:?}");
            assert_eq!(st, *status, "{stops:?} {chunks:?}");
        }
    }

    #[test]
    fn spec_example_bytes() {
        let (outs, st) =
            run_bytes(&["</a>"], &[b"caf\xc3", b"\xa9</", b"a> \xff"], false, false).unwrap();
        assert_eq!(outs, vec![b"caf".to_vec(), b"\xc3\xa9".to_vec(), vec![], vec![]]);
        assert_eq!(st, Status::Stopped(0));
    }

    #[test]
    fn bytes_table() {
        // (stops, chunks, replace, Some(outputs) or None for an error)
        type Case<'a> = (&'a [&'a str], &'a [&'a [u8]], bool, Option<&'a [&'a [u8]]>);
        let cases: &[Case] = &[
            (&[], &[b"a\xffb"], true, Some(&[b"a\xef\xbf\xbdb", b""])),
            (&[], &[b"a\xffb"], false, None),
            (&[], &[b"\xe2\x82", b"a"], true, Some(&[b"", b"\xef\xbf\xbda", b""])),
            (&[], &[b"\xe2\x82"], true, Some(&[b"", b"\xef\xbf\xbd"])),
            (&[], &[b"\xe2\x82"], false, None),
            (
                &[],
                &[b"\xf0", b"\x9f", b"\x98", b"\x80"],
                false,
                Some(&[b"", b"", b"", "😀".as_bytes(), b""]),
            ),
            (&[], &[b"\xed\xa0\x80"], true, Some(&["\u{FFFD}\u{FFFD}\u{FFFD}".as_bytes(), b""])),
            (&["\u{FFFD}"], &[b"ok\xff after"], true, Some(&[b"ok", b""])),
            (&["a\u{FFFD}"], &[b"xa\xe2\x82"], true, Some(&[b"x", b""])),
            (&["b"], &[b"ab\xff"], false, Some(&[b"a", b""])),
            (&["b"], &[b"a\xffb"], false, None),
        ];
        for (stops, chunks, replace, want) in cases {
            let got = run_bytes(stops, chunks, false, *replace);
            match want {
                Some(w) => {
                    let w: Vec<Vec<u8>> = w.iter().map(|b| b.to_vec()).collect();
                    assert_eq!(got.unwrap().0, w, "{stops:?} {chunks:x?}");
                }
                None => assert!(got.unwrap_err().decode_error().is_some(), "{chunks:x?}"),
            }
        }
    }

    #[test]
    fn strict_error_consumes_nothing() {
        let set = set(&["</a>"]);
        let mut st = ByteStream::new(false, false);
        let mut out = Vec::new();
        st.feed(&set, b"x</\xe2", &mut out).unwrap();
        assert_eq!(out, b"x");
        let before = st;
        let err = st.feed(&set, b"a\xff", &mut out).unwrap_err();
        let d = err.decode_error().unwrap();
        assert_eq!((d.object.as_slice(), d.start, d.end), (&b"\xe2a\xff"[..], 0, 1));
        assert_eq!(st, before);
        assert_eq!(out, b"x");
        let err = st.finish(&set, &mut out).unwrap_err();
        assert_eq!(err.decode_error().unwrap().reason, "unexpected end of data");
        assert_eq!(st, before);
        st.feed(&set, b"\x82\xaca>", &mut out).unwrap();
        assert_eq!(out, "x</€a>".as_bytes());
    }

    #[test]
    fn error_after_a_completed_carried_character_names_the_right_byte() {
        let set = set(&[]);
        let mut st = ByteStream::new(false, false);
        let mut out = Vec::new();
        st.feed(&set, b"\xdb", &mut out).unwrap();
        let err = st.feed(&set, b"\x80a\xff", &mut out).unwrap_err();
        let d = err.decode_error().unwrap();
        assert_eq!((d.object.as_slice(), d.start, d.end), (&b"\xdb\x80a\xff"[..], 3, 4));
        assert_eq!(d.reason, "invalid start byte");
        assert!(out.is_empty());
    }

    #[test]
    fn feed_after_finish_is_an_error_and_reset_reopens() {
        let set = set(&["z"]);
        let mut st = TextStream::new(false);
        assert!(st.finish(&set).is_empty());
        assert!(st.feed(&set, b"a").unwrap_err().is_finished());
        st.reset();
        assert_eq!(st.feed(&set, b"a").unwrap(), Emit { from_held: 0, from_input: 1 });
        // After a stop, input is ignored until finish; after finish it is an error.
        assert_eq!(st.feed(&set, b"z").unwrap(), Emit::NOTHING);
        assert_eq!(st.feed(&set, b"zz").unwrap(), Emit::NOTHING);
        assert!(st.finish(&set).is_empty());
        assert_eq!(st.status(), Status::Stopped(0));
        assert!(st.feed(&set, b"a").unwrap_err().is_finished());
    }

    #[test]
    fn passes_whole_agrees_with_feed() {
        let set = set(&["</answer>", "\n\nUser:", "ab"]);
        let texts = ["hello", "", "x<y", "\n", "a", "b", "zz</answer>", "\n\nU", "ser:", "cab"];
        for include in [false, true] {
            for first in texts {
                for second in texts {
                    let mut st = TextStream::new(include);
                    st.feed(&set, first.as_bytes()).unwrap();
                    let (before, claim) = (st, st.passes_whole(&set, second.as_bytes()));
                    let e = st.feed(&set, second.as_bytes()).unwrap();
                    let whole = e.from_held == 0 && e.from_input == second.len() && st == before;
                    assert!(!claim || whole, "{first:?} then {second:?}, include {include}");
                    if !include
                        && before.sid == Automaton::START
                        && before.status == Status::Open
                        && !second.contains(['<', '\n', 'a'])
                    {
                        assert!(claim, "{first:?} then {second:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn byte_passes_whole_agrees_with_feed() {
        let set = set(&["</answer>", "\n\nUser:", "ab", "é!"]);
        let texts: [&[u8]; 12] = [
            b"hello",
            b"",
            b"x<y",
            b"\n",
            b"a",
            b"b",
            "caf\u{e9}".as_bytes(),
            b"\xc3",
            b"\xa9",
            b"\xff",
            "日本".as_bytes(),
            b"zz</answer>",
        ];
        for replace in [false, true] {
            for first in texts {
                for second in texts {
                    let mut st = ByteStream::new(false, replace);
                    let mut out = Vec::new();
                    if st.feed(&set, first, &mut out).is_err() {
                        continue;
                    }
                    let (before, claim) = (st, st.passes_whole(&set, second));
                    out.clear();
                    let fed = st.feed(&set, second, &mut out);
                    let whole = matches!(fed, Ok(ByteOut::Input)) && st == before;
                    assert!(!claim || whole, "{first:?} then {second:?}, replace {replace}");
                    let clean = std::str::from_utf8(second).is_ok()
                        && !second.iter().any(|b| b"<\na\xc3".contains(b));
                    if before.tail().is_empty() && before.held(&set).is_empty() && clean {
                        assert!(claim || st.status() != Status::Open, "{first:?} then {second:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<TextStream>();
        assert_send_sync::<ByteStream>();
        assert_send_sync::<Error>();
        assert_send_sync::<LiteralStops>();
    }
}
