//! Per-stream state: where the automaton is, whether a stop fired, and (for raw bytes) the
//! incomplete character carried between chunks.
//!
//! The held-back text is never stored here. It is always the automaton state's string, which is
//! a prefix of a known stop, so [`StopSet`] hands it out as a slice of that stop. A text stream is
//! therefore a `u32` and a status, and costs nothing to copy, which is also how a strict-mode
//! decoding error "consumes nothing": the state from before the call is simply put back.

use crate::automaton::{Automaton, Step};
use crate::error::{DecodeError, Error};
use crate::stopset::StopSet;
use crate::utf8::{self, Head, Piece, Pieces};

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
    sid: u32,
    status: Status,
    include_stop: bool,
    /// `finish` was called (also after a stop): further input is a caller error.
    finished: bool,
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
    /// ([`StopSet::held`]), so a snapshot of the stream fits in a couple of words.
    pub fn state_id(&self) -> u32 {
        self.sid
    }

    /// The text held back right now: the longest suffix of the input that is a proper prefix of
    /// some stop (always empty with `include_stop`, and once the stream is closed).
    pub fn held<'s>(&self, set: &'s StopSet) -> &'s [u8] {
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
    pub fn passes_whole(&self, set: &StopSet, input: &[u8]) -> bool {
        self.sid == Automaton::START
            && self.status == Status::Open
            && !self.finished
            && set.automaton().stays_at_root(input)
    }

    /// Feeds a chunk. `input` must be whole characters. After a stop fired the input is ignored;
    /// after `finish` it is an error.
    #[inline]
    pub fn feed(&mut self, set: &StopSet, input: &[u8]) -> Result<Emit, Error> {
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
    fn feed_open(&mut self, set: &StopSet, input: &[u8]) -> Emit {
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

    /// Appends what `e` (a feed of `text` into `before`) emits, or says it is exactly `text`.
    #[inline]
    fn write_out(
        before: &TextStream,
        set: &StopSet,
        text: &[u8],
        e: Emit,
        out: &mut Vec<u8>,
    ) -> ByteOut {
        if e.from_held == 0 && e.from_input == text.len() {
            return ByteOut::Input;
        }
        out.extend_from_slice(&before.held(set)[..e.from_held]);
        out.extend_from_slice(&text[..e.from_input]);
        ByteOut::Buffer
    }

    /// Ends the stream and returns what was held back (empty if already closed).
    pub fn finish<'s>(&mut self, set: &'s StopSet) -> &'s [u8] {
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

/// A strict-mode error shaped like CPython's: `object` is the carried bytes plus the chunk.
fn decode_error(carried: &[u8], input: &[u8], start: usize, end: usize) -> Error {
    let mut object = Vec::with_capacity(carried.len() + input.len());
    object.extend_from_slice(carried);
    object.extend_from_slice(input);
    let reason = if matches!(object.get(start), Some(0xC2..=0xF4)) {
        "invalid continuation byte"
    } else {
        "invalid start byte"
    };
    Error::decode(DecodeError { object, start, end, reason })
}

/// What a [`ByteStream::feed`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOut {
    /// The output is exactly the input, unchanged (nothing was appended to the buffer).
    Input,
    /// The output was appended to the buffer.
    Buffer,
}

/// A matcher over decoded text, as [`ByteStream`] drives it: [`TextStream`] for literal stops,
/// [`MatchStream`](crate::MatchStream) for the stops and regions of §6. One decoder serves both,
/// so strict and replace decoding cannot drift apart between them.
pub trait TextMatcher: Clone {
    /// The compiled stop list the matcher runs against.
    type Set: ?Sized;
    /// Where the stream stands.
    fn status(&self) -> Status;
    /// Whether `finish` was called.
    fn is_finished(&self) -> bool;
    /// Whether nothing is held back.
    fn holds_nothing(&self, set: &Self::Set) -> bool;
    /// Feeds whole characters, appending the output to `out` or returning [`ByteOut::Input`]
    /// when it is exactly `text` (then nothing is appended).
    fn feed_text(
        &mut self,
        set: &Self::Set,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<ByteOut, Error>;
    /// Ends the stream, appending what is released.
    fn finish_text(&mut self, set: &Self::Set, out: &mut Vec<u8>);
    /// Fires the stop that the end of the text, if it came now, would fire, without ending the
    /// stream: appends what precedes the cut and returns `true`; else changes nothing and
    /// returns `false`. The default suits matchers whose stops fire as soon as they complete
    /// (literal stops), where the end of the text adds nothing; a matcher with look-ahead
    /// (`\b`, `$`, a literal that a longer regex match may still beat) must override it.
    fn stop_at_end(&mut self, set: &Self::Set, out: &mut Vec<u8>) -> bool {
        let _ = (set, out);
        false
    }
    /// Marks the stream finished after a stop (nothing is released).
    fn mark_finished(&mut self);
}

impl TextMatcher for TextStream {
    type Set = StopSet;

    fn status(&self) -> Status {
        self.status
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn holds_nothing(&self, set: &StopSet) -> bool {
        self.held(set).is_empty()
    }

    #[inline]
    fn feed_text(
        &mut self,
        set: &StopSet,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<ByteOut, Error> {
        let before = *self;
        let e = self.feed(set, text)?;
        Ok(TextStream::write_out(&before, set, text, e, out))
    }

    fn finish_text(&mut self, set: &StopSet, out: &mut Vec<u8>) {
        out.extend_from_slice(self.finish(set));
    }

    fn mark_finished(&mut self) {
        self.finished = true;
    }
}

/// Stop matching over raw UTF-8 bytes split anywhere, with CPython's `strict` or `replace`
/// decoding. Only whole, valid characters are ever emitted.
///
/// ```
/// use stopstream::{ByteOut, ByteStream, StopSet};
///
/// let set = StopSet::new(["\n\nUser:"]).unwrap();
/// let mut stream = ByteStream::new(false, true);
/// let mut out = Vec::new();
/// // A chunk of whole characters that cannot start a stop passes through uncopied.
/// assert_eq!(stream.feed(&set, b"caf\xc3\xa9", &mut out).unwrap(), ByteOut::Input);
/// // An invalid byte under `replace` becomes U+FFFD; the incomplete last one is carried.
/// assert_eq!(stream.feed(&set, b"\xff \xe2\x82", &mut out).unwrap(), ByteOut::Buffer);
/// assert_eq!(out, "\u{FFFD} ".as_bytes());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteStream<T = TextStream> {
    text: T,
    tail: [u8; 4],
    tail_len: u8,
    replace: bool,
}

impl ByteStream<TextStream> {
    /// A fresh stream; `replace` selects `errors="replace"` over `errors="strict"`.
    pub fn new(include_stop: bool, replace: bool) -> ByteStream {
        ByteStream::over(TextStream::new(include_stop), replace)
    }

    /// Whether the stop is emitted with the text.
    pub fn include_stop(&self) -> bool {
        self.text.include_stop
    }

    /// The decoded text held back because it could start a stop.
    pub fn held<'s>(&self, set: &'s StopSet) -> &'s [u8] {
        self.text.held(set)
    }

    /// Starts over with the same stop set and settings.
    pub fn reset(&mut self) {
        *self = ByteStream::new(self.text.include_stop, self.replace);
    }

    /// Whether `feed(set, input, out)` would return [`ByteOut::Input`] and leave the stream as
    /// it is: nothing carried or held, `input` is whole valid characters, and none of its bytes
    /// can start a stop ([`TextStream::passes_whole`] for bytes). Decided without the scan and
    /// its bookkeeping, which were half the instructions of a token's `feed` when nothing fires.
    #[inline]
    pub fn passes_whole(&self, set: &StopSet, input: &[u8]) -> bool {
        self.tail_len == 0
            && self.text.passes_whole(set, input)
            && std::str::from_utf8(input).is_ok()
    }

    /// Whether [`ByteStream::passes_token`] holds for a token whose [`crate::byteset::byte_set`]
    /// is `bytes`, as far as that set can prove it (`false` says "look at the bytes").
    #[allow(clippy::inline_always, reason = "as `feed_chars`")]
    #[inline(always)]
    pub(crate) fn passes_set(&self, set: &StopSet, bytes: [u64; 2]) -> bool {
        let first = set.automaton().first_bytes();
        self.tail_len == 0
            && self.text.sid == Automaton::START
            && self.text.status == Status::Open
            && !self.text.finished
            && (bytes[0] & first[0]) | (bytes[1] & first[1]) == 0
    }

    /// [`TextStream::passes_whole`] of a stream carrying no incomplete character, for `input`
    /// of whole, valid characters whose first bytes are `head` (padded with any bytes).
    #[allow(clippy::inline_always, reason = "as `feed_chars`")]
    #[inline(always)]
    pub(crate) fn passes_token(
        &self,
        set: &StopSet,
        input: &[u8],
        head: [u8; crate::byteset::HEAD],
    ) -> bool {
        self.tail_len == 0
            && self.text.sid == Automaton::START
            && self.text.status == Status::Open
            && !self.text.finished
            && set.automaton().stays_at_root_head(head, input)
    }

    /// Feeds bytes that are whole, valid characters into an open stream carrying no incomplete
    /// character: the matcher runs on them directly, without the checks of [`ByteStream::feed`]
    /// (token streams know this of most tokens in advance), and nothing can fail.
    #[allow(
        clippy::inline_always,
        reason = "called through the token stream's matcher trait, the compiler stopped inlining it into the token step (callgrind: a call per token of a batch)"
    )]
    #[inline(always)]
    pub fn feed_chars(&mut self, set: &StopSet, text: &[u8], out: &mut Vec<u8>) -> ByteOut {
        debug_assert!(self.tail_len == 0 && std::str::from_utf8(text).is_ok());
        let before = self.text;
        let e = self.text.feed_open(set, text);
        TextStream::write_out(&before, set, text, e, out)
    }
}

impl<T: TextMatcher> ByteStream<T> {
    /// A byte stream decoding into the fresh text matcher `text`.
    pub fn over(text: T, replace: bool) -> ByteStream<T> {
        ByteStream { text, tail: [0; 4], tail_len: 0, replace }
    }

    /// Where the stream stands.
    pub fn status(&self) -> Status {
        self.text.status()
    }

    /// The decoded-text part of the stream.
    pub fn text(&self) -> &T {
        &self.text
    }

    /// The text stream, to change its settings (see [`crate::MatchStream::quiet`]).
    pub fn text_mut(&mut self) -> &mut T {
        &mut self.text
    }

    /// Whether invalid input is replaced by U+FFFD rather than rejected.
    pub fn replace(&self) -> bool {
        self.replace
    }

    /// The incomplete character held back at the end of the input (0 to 3 bytes).
    pub fn tail(&self) -> &[u8] {
        if self.text.status() != Status::Open {
            return &[];
        }
        &self.tail[..self.tail_len as usize]
    }

    /// Feeds a chunk of raw bytes. On error nothing is consumed: the stream is exactly as before
    /// the call and `out` is unchanged. Under strict decoding an invalid sequence is an error
    /// unless a stop fired before it; [`ByteStream::feed_deferring`] also lets the end of the
    /// text that the error makes fire a stop (contract §9.9).
    pub fn feed(
        &mut self,
        set: &T::Set,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<ByteOut, Error> {
        self.feed_with(set, input, out, false).map(|(fed, _)| fed)
    }

    /// [`ByteStream::feed`] by the rule of contract §9.9: under strict decoding an invalid
    /// sequence ends the text for the stops' look-around as [`ByteStream::finish`] would (an
    /// error is not a character). If the end of the text before the invalid sequence fires a
    /// stop (`\bend\b` after `"the end"`), the call succeeds: `out` gets the output up to the
    /// cut, the stream is stopped by that stop, and the decoding error comes back beside the
    /// output (`Some`), deferred for the caller to raise once it has reported the stop. If it
    /// fires none, the call fails as `feed` does and consumes nothing. Otherwise the same as
    /// `feed` (the second value is `None`); in replace mode there is no difference at all.
    pub fn feed_deferring(
        &mut self,
        set: &T::Set,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(ByteOut, Option<Error>), Error> {
        self.feed_with(set, input, out, true)
    }

    fn feed_with(
        &mut self,
        set: &T::Set,
        input: &[u8],
        out: &mut Vec<u8>,
        defer: bool,
    ) -> Result<(ByteOut, Option<Error>), Error> {
        if self.text.is_finished() {
            return Err(Error::finished());
        }
        if self.text.status() != Status::Open {
            return Ok((ByteOut::Buffer, None));
        }
        // Common case: nothing carried over or held, and the chunk is valid on its own.
        if self.tail_len == 0 && self.text.holds_nothing(set) && std::str::from_utf8(input).is_ok()
        {
            return self.text.feed_text(set, input, out).map(|fed| (fed, None));
        }
        let saved = self.clone();
        let mark = out.len();
        let result = self.feed_slow(set, input, out, defer);
        if result.is_err() {
            *self = saved;
            out.truncate(mark);
        }
        result.map(|deferred| (ByteOut::Buffer, deferred))
    }

    /// A strict-mode decoding error `e` where the decoded text so far ends: with `defer`, the
    /// end of the text may fire a stop, and then `e` is returned deferred instead of raised.
    fn invalid(
        &mut self,
        set: &T::Set,
        out: &mut Vec<u8>,
        e: Error,
        defer: bool,
    ) -> Result<Option<Error>, Error> {
        if defer && self.text.stop_at_end(set, out) {
            return Ok(Some(e));
        }
        Err(e)
    }

    fn feed_slow(
        &mut self,
        set: &T::Set,
        input: &[u8],
        out: &mut Vec<u8>,
        defer: bool,
    ) -> Result<Option<Error>, Error> {
        let carried = self.tail_len as usize;
        let carried_bytes = self.tail;
        let error =
            |start: usize, end: usize| decode_error(&carried_bytes[..carried], input, start, end);
        let mut pos = 0;
        if carried > 0 {
            let mut buf = [0u8; 8];
            buf[..carried].copy_from_slice(&self.tail[..carried]);
            let take = input.len().min(4 - carried);
            buf[carried..carried + take].copy_from_slice(&input[..take]);
            match utf8::head(&buf[..carried + take]) {
                Head::Char(n) => {
                    self.tail_len = 0;
                    self.push(set, &buf[..n], out)?;
                    pos = n - carried;
                }
                Head::Incomplete => {
                    self.tail[carried..carried + take].copy_from_slice(&input[..take]);
                    self.tail_len = (carried + take) as u8;
                    return Ok(None);
                }
                Head::Invalid(n) => {
                    // The carried bytes are a valid prefix, so the maximal subpart is them plus
                    // whatever input bytes still extended it; the byte that broke it is looked
                    // at again below.
                    if !self.replace {
                        return self.invalid(set, out, error(0, n), defer);
                    }
                    self.tail_len = 0;
                    self.push(set, utf8::REPLACEMENT, out)?;
                    pos = n - carried;
                }
            }
            if self.text.status() != Status::Open {
                return Ok(None);
            }
        }
        for piece in Pieces::new(&input[pos..]) {
            match piece {
                Piece::Text(t) => self.push(set, t, out)?,
                Piece::Invalid { at, len } => {
                    if !self.replace {
                        let start = carried + pos + at;
                        return self.invalid(set, out, error(start, start + len), defer);
                    }
                    self.push(set, utf8::REPLACEMENT, out)?;
                }
                Piece::Incomplete(t) => {
                    self.tail[..t.len()].copy_from_slice(t);
                    self.tail_len = t.len() as u8;
                }
            }
            if self.text.status() != Status::Open {
                break;
            }
        }
        Ok(None)
    }

    /// Matches decoded bytes and appends what is now safe to emit.
    fn push(&mut self, set: &T::Set, text: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if self.text.feed_text(set, text, out)? == ByteOut::Input {
            out.extend_from_slice(text);
        }
        Ok(())
    }

    /// Ends the stream, appending everything still held back. In strict mode an incomplete
    /// character at the end is an error (and the stream stays open, unchanged); in replace mode
    /// it becomes U+FFFD, which takes part in matching like any other character.
    pub fn finish(&mut self, set: &T::Set, out: &mut Vec<u8>) -> Result<(), Error> {
        self.finish_with(set, out, false).map(drop)
    }

    /// [`ByteStream::finish`] by the rule of [`ByteStream::feed_deferring`]: in strict mode an
    /// incomplete character at the end ends the text before it for the stops' look-around. If
    /// that fires a stop, the call succeeds (`out` gets the output up to the cut, the stream is
    /// stopped and finished) and returns the decoding error deferred (`Some`); if not, it fails
    /// as `finish` does, changing nothing. Otherwise the same as `finish` (`None`).
    pub fn finish_deferring(
        &mut self,
        set: &T::Set,
        out: &mut Vec<u8>,
    ) -> Result<Option<Error>, Error> {
        self.finish_with(set, out, true)
    }

    fn finish_with(
        &mut self,
        set: &T::Set,
        out: &mut Vec<u8>,
        defer: bool,
    ) -> Result<Option<Error>, Error> {
        if self.text.status() != Status::Open {
            self.text.mark_finished();
            return Ok(None);
        }
        let carried = self.tail_len as usize;
        if carried > 0 {
            if !self.replace {
                let e = Error::decode(DecodeError {
                    object: self.tail[..carried].to_vec(),
                    start: 0,
                    end: carried,
                    reason: "unexpected end of data",
                });
                if defer && self.text.stop_at_end(set, out) {
                    self.text.mark_finished();
                    return Ok(Some(e));
                }
                return Err(e);
            }
            self.tail_len = 0;
            self.push(set, utf8::REPLACEMENT, out)?;
        }
        self.text.finish_text(set, out);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(stops: &[&str]) -> StopSet {
        StopSet::new(stops.iter().map(|s| s.as_bytes())).unwrap()
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
        assert_send_sync::<StopSet>();
    }
}
