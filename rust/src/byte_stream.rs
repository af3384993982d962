//! Raw UTF-8 bytes in, split anywhere: [`ByteStream`] decodes incrementally (CPython's `strict`
//! or `replace`), keeps the incomplete character carried between chunks, and feeds whole
//! characters to a matcher over decoded text ([`TextMatcher`]): the literal [`TextStream`] or
//! the composed [`MatchStream`](crate::MatchStream).

use crate::automaton::Automaton;
use crate::error::{DecodeError, Error};
use crate::literal_state::{Emit, Status, TextStream};
use crate::literal_stops::LiteralStops;
use crate::utf8::{self, Head, Piece, Pieces};

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
    type Set = LiteralStops;

    fn status(&self) -> Status {
        self.status
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn holds_nothing(&self, set: &LiteralStops) -> bool {
        self.held(set).is_empty()
    }

    #[inline]
    fn feed_text(
        &mut self,
        set: &LiteralStops,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<ByteOut, Error> {
        let before = *self;
        let e = self.feed(set, text)?;
        Ok(write_out(&before, set, text, e, out))
    }

    fn finish_text(&mut self, set: &LiteralStops, out: &mut Vec<u8>) {
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
/// use stopstream::{ByteOut, ByteStream, LiteralStops};
///
/// let set = LiteralStops::new(["\n\nUser:"]).unwrap();
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
    pub fn held<'s>(&self, set: &'s LiteralStops) -> &'s [u8] {
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
    pub fn passes_whole(&self, set: &LiteralStops, input: &[u8]) -> bool {
        self.tail_len == 0
            && self.text.passes_whole(set, input)
            && std::str::from_utf8(input).is_ok()
    }

    /// Whether [`ByteStream::passes_token`] holds for a token whose [`crate::byteset::byte_set`]
    /// is `bytes`, as far as that set can prove it (`false` says "look at the bytes").
    #[allow(clippy::inline_always, reason = "as `feed_chars`")]
    #[inline(always)]
    pub(crate) fn passes_set(&self, set: &LiteralStops, bytes: [u64; 2]) -> bool {
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
        set: &LiteralStops,
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
    pub fn feed_chars(&mut self, set: &LiteralStops, text: &[u8], out: &mut Vec<u8>) -> ByteOut {
        debug_assert!(self.tail_len == 0 && std::str::from_utf8(text).is_ok());
        let before = self.text;
        let e = self.text.feed_open(set, text);
        write_out(&before, set, text, e, out)
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

/// Appends what `e` (a feed of `text` into `before`) emits, or says it is exactly `text`.
#[inline]
fn write_out(
    before: &TextStream,
    set: &LiteralStops,
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
