//! The token stream: token ids in, decoded and matched text out, with the count of released
//! tokens (the rule is in the module above).

use super::{Token, TokenMatcher, Vocab};
use crate::byte_stream::{ByteOut, ByteStream};
use crate::error::Error;
use crate::literal_state::{Status, TextStream};
use crate::literal_stops::LiteralStops;
use crate::matcher::{MatchStream, Matcher};
use crate::utf8::{self, Head};

/// A token fed but not yet released: where its text starts and ends in the decoded text
/// (UTF-8 offsets since the start of the stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    start: u64,
    /// Meaningful only once settled (see [`TokenStream::settled`]).
    end: u64,
    has_text: bool,
}

/// What [`TokenStream::feed_id`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fed {
    /// How many more input tokens are released.
    pub released: usize,
    /// The text now safe to emit is exactly the token's bytes ([`Vocab::whole`]), and was not
    /// appended to the buffer.
    pub whole: bool,
}

/// Stop matching over a stream of token ids, reporting how many input tokens each call
/// releases (see the module documentation for the rule). `T` is the matcher the decoded text
/// runs through ([`TokenMatcher`]); every method takes that matcher's compiled list as `set`.
///
/// ```
/// use stopstream::{Status, LiteralStops, TokenStream, Vocab};
///
/// // Ids 0 to 2 have text; id 3 is a special token (no text).
/// let vocab = Vocab::new([Some("Hi"), Some(" </"), Some("stop>"), None], &[3]).unwrap();
/// let set = LiteralStops::new(["</stop>"]).unwrap();
/// let mut stream = TokenStream::new(&vocab, false, false, &[]).unwrap();
/// let mut out = Vec::new();
/// // "</" may start the stop: it is held, and so is the token it ends (only "Hi" is released).
/// assert_eq!(stream.feed(&vocab, &set, &[0, 1], &mut out).unwrap(), 1);
/// assert_eq!(out, b"Hi ");
/// // The stop fires: nothing more is emitted.
/// stream.feed(&vocab, &set, &[2], &mut out).unwrap();
/// assert_eq!(out, b"Hi ");
/// assert_eq!(stream.status(), Status::Stopped(0));
/// ```
#[derive(Clone, Debug)]
pub struct TokenStream<T = TextStream> {
    bytes: ByteStream<T>,
    /// The filter's `include_stop`: whether a stop token's own text is emitted (the stops'
    /// own flags live in the matcher).
    include_stop: bool,
    /// Sorted, without duplicates.
    stop_ids: Box<[i64]>,
    /// The stop token that ended the stream, if one did.
    stop_token: Option<i64>,
    /// `finish` was called.
    finished: bool,
    /// No text byte was fed yet (the vocabulary's leading-space rule applies to the next one).
    at_start: bool,
    /// Decoded bytes emitted so far.
    emitted: u64,
    /// Tokens fed and not released: `pending[head..]`. Entries before `head` are released and
    /// dropped when the next call starts, so a failing call can be undone by restoring a few
    /// counters.
    pending: Vec<Pending>,
    head: usize,
    /// `pending[..settled]` have a known end; the rest end in the byte stream's tail.
    settled: usize,
}

/// Streams are equal when they behave the same from here on (released entries not yet dropped,
/// and ends not yet settled, are bookkeeping).
impl<T: PartialEq> PartialEq for TokenStream<T> {
    fn eq(&self, other: &TokenStream<T>) -> bool {
        fn entries<T>(s: &TokenStream<T>) -> Vec<(u64, bool, Option<u64>)> {
            let live = s.settled.saturating_sub(s.head);
            s.pending[s.head..]
                .iter()
                .enumerate()
                .map(|(i, p)| (p.start, p.has_text, (i < live).then_some(p.end)))
                .collect()
        }
        (&self.bytes, self.include_stop, self.stop_token, self.finished, self.at_start)
            == (&other.bytes, other.include_stop, other.stop_token, other.finished, other.at_start)
            && (self.emitted, &self.stop_ids) == (other.emitted, &other.stop_ids)
            && entries(self) == entries(other)
    }
}

impl<T: Eq> Eq for TokenStream<T> {}

/// The counters a failing call restores (and the byte stream, unless the call cannot fail).
struct Mark<T> {
    bytes: Option<ByteStream<T>>,
    at_start: bool,
    emitted: u64,
    len: usize,
    settled: usize,
    out: usize,
}

impl TokenStream {
    /// A fresh stream over `vocab` with a literal stop list. `replace` selects
    /// `errors="replace"` over `"strict"`; `stop_ids` end the stream when fed (each must be in
    /// `vocab`, else an error naming its position in the list).
    pub fn new(
        vocab: &Vocab,
        include_stop: bool,
        replace: bool,
        stop_ids: &[i64],
    ) -> Result<TokenStream, Error> {
        TokenStream::over(vocab, LiteralStops::none(), include_stop, replace, stop_ids)
    }
}

impl TokenStream<MatchStream> {
    /// A fresh stream over `vocab` matching the composed list `m` (contract §6: `Stop` and
    /// `Regex` items with their own include flags, skip regions). `include_stop` is the
    /// filter's: it decides only whether a stop token's own text is emitted.
    pub fn composed(
        vocab: &Vocab,
        m: &Matcher,
        include_stop: bool,
        replace: bool,
        stop_ids: &[i64],
    ) -> Result<TokenStream<MatchStream>, Error> {
        TokenStream::over(vocab, m, include_stop, replace, stop_ids)
    }
}

impl<T: TokenMatcher> TokenStream<T> {
    /// A fresh stream over `vocab` whose decoded text runs through a fresh matcher over `set`.
    pub fn over(
        vocab: &Vocab,
        set: &T::Set,
        include_stop: bool,
        replace: bool,
        stop_ids: &[i64],
    ) -> Result<TokenStream<T>, Error> {
        for (position, &id) in stop_ids.iter().enumerate() {
            if vocab.get(id).is_none() {
                return Err(Error::token(position, id));
            }
        }
        let mut ids = stop_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        Ok(TokenStream {
            bytes: ByteStream::over(T::fresh(set, include_stop), replace),
            include_stop,
            stop_ids: ids.into(),
            stop_token: None,
            finished: false,
            at_start: true,
            emitted: 0,
            pending: Vec::new(),
            head: 0,
            settled: 0,
        })
    }

    /// Where the matching stands. A stop token ends the stream as [`Status::Finished`];
    /// [`TokenStream::stop_token`] tells the two apart.
    pub fn status(&self) -> Status {
        self.bytes.status()
    }

    /// The stop token id that ended the stream, if one did.
    pub fn stop_token(&self) -> Option<i64> {
        self.stop_token
    }

    /// Whether the stream takes no more input: a stop fired, a stop token came, or `finish`.
    pub fn is_closed(&self) -> bool {
        self.finished || self.stop_token.is_some() || self.bytes.status() != Status::Open
    }

    /// Whether `finish` was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The filter's `include_stop` (for a literal list, whether every stop is emitted with
    /// the text; for any list, whether a stop token's own text is).
    pub fn include_stop(&self) -> bool {
        self.include_stop
    }

    /// Whether invalid UTF-8 becomes U+FFFD rather than an error.
    pub fn replace(&self) -> bool {
        self.bytes.replace()
    }

    /// The stop token ids, sorted.
    pub fn stop_ids(&self) -> &[i64] {
        &self.stop_ids
    }

    /// The decoded text held back because it could start a stop (without the incomplete
    /// character at the end, [`TokenStream::tail`]).
    #[inline]
    pub fn held<'s>(&'s self, set: &'s T::Set) -> &'s [u8] {
        self.bytes.text().held_text(set)
    }

    /// The matcher the decoded text runs through (for what it reports, such as the matched
    /// text of a composed list's stop).
    pub fn matcher(&self) -> &T {
        self.bytes.text()
    }

    /// The bytes of an incomplete character at the end of the input (0 to 3).
    pub fn tail(&self) -> &[u8] {
        self.bytes.tail()
    }

    /// Tokens fed and not yet released.
    pub fn unreleased(&self) -> usize {
        self.pending.len() - self.head
    }

    /// Feeds token ids, appending the text now safe to emit to `out`; returns how many more
    /// input tokens are released. An id outside `vocab` is an error naming its position and
    /// value, and so is invalid UTF-8 in strict mode; then nothing is consumed (the stream and
    /// `out` are as before the call). Ids after a stop (or a stop token) are ignored unchecked.
    pub fn feed(
        &mut self,
        vocab: &Vocab,
        set: &T::Set,
        ids: &[i64],
        out: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        if let [id] = *ids {
            let fed = self.feed_id(vocab, set, id, out)?;
            if fed.whole {
                out.extend_from_slice(vocab.whole(id).unwrap_or_default());
            }
            return Ok(fed.released);
        }
        self.feed_ids(vocab, set, ids, out)
    }

    /// [`TokenStream::feed`] of one id, also telling whether the text now safe to emit is
    /// exactly the token's own bytes: then it is not appended to `out` (the caller can reuse
    /// what it holds for the token; the Python bindings hand out a shared `str`).
    #[inline]
    pub fn feed_id(
        &mut self,
        vocab: &Vocab,
        set: &T::Set,
        id: i64,
        out: &mut Vec<u8>,
    ) -> Result<Fed, Error> {
        match self.feed_plain(vocab, set, id) {
            Some(fed) => Ok(fed),
            None => self.feed_id_rest(vocab, set, id, out),
        }
    }

    /// The most common step of all, small enough to inline into a caller's loop: nothing is
    /// pending, and no byte of the token (whole characters) can start a stop, so it is emitted
    /// whole and released, and the matcher stays at its root. On the benchmark's prose that is
    /// five steps in six; the scan's bookkeeping and the calls around it were about 190 of the
    /// 270 instructions such a step took before.
    #[allow(
        clippy::inline_always,
        reason = "left to itself the compiler calls it from the batch loop; inlined, a step of 256 streams runs about 40 fewer instructions per stream (callgrind)"
    )]
    #[inline(always)]
    pub fn feed_plain(&mut self, vocab: &Vocab, set: &T::Set, id: i64) -> Option<Fed> {
        if !T::FAST || self.head != self.pending.len() || self.finished || self.stop_token.is_some()
        {
            return None;
        }
        let (len, bytes) = vocab.whole_set(id)?;
        if (!self.stop_ids.is_empty() && self.stop_ids.binary_search(&id).is_ok())
            || (self.at_start && vocab.strip_leading_space)
        {
            // (A stream's first token, with the leading-space rule, goes the general way.)
            return None;
        }
        if !T::passes_set(&self.bytes, set, bytes) {
            // Some byte of the token may start a stop (or a non-ASCII byte folds onto one).
            let (text, head) = vocab.whole_head(id)?;
            if !T::passes_token(&self.bytes, set, text, head) {
                return None;
            }
        }
        // Nothing pending: the held text and the carried character are empty too (they would
        // belong to a pending token).
        self.pending.clear();
        self.head = 0;
        self.settled = 0;
        self.at_start = false;
        self.emitted += len as u64;
        Some(Fed { released: 1, whole: true })
    }

    /// [`TokenStream::feed_id`] past [`TokenStream::feed_plain`].
    #[inline(never)]
    fn feed_id_rest(
        &mut self,
        vocab: &Vocab,
        set: &T::Set,
        id: i64,
        out: &mut Vec<u8>,
    ) -> Result<Fed, Error> {
        match self.feed_whole(vocab, set, id, out) {
            Some(fed) => Ok(fed),
            None => Ok(Fed { released: self.feed_ids(vocab, set, &[id], out)?, whole: false }),
        }
    }

    /// The general path of [`TokenStream::feed`].
    fn feed_ids(
        &mut self,
        vocab: &Vocab,
        set: &T::Set,
        ids: &[i64],
        out: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        if self.finished {
            return Err(Error::finished());
        }
        if self.is_closed() {
            return Ok(0);
        }
        self.compact();
        // A copy of the composed matcher allocates, so it is taken only when the call can fail:
        // in strict mode, or with an id outside the vocabulary (in replace mode with every id
        // valid, neither decoding, nor a stop token, nor the matcher can fail).
        let can_fail = T::SMALL || !self.replace() || ids.iter().any(|&id| vocab.get(id).is_none());
        let mark = Mark {
            bytes: can_fail.then(|| self.bytes.clone()),
            at_start: self.at_start,
            emitted: self.emitted,
            len: self.pending.len(),
            settled: self.settled,
            out: out.len(),
        };
        for (position, &id) in ids.iter().enumerate() {
            if let Err(e) = self.push(vocab, set, position, id, out) {
                if let Some(bytes) = mark.bytes {
                    self.bytes = bytes;
                }
                self.at_start = mark.at_start;
                self.emitted = mark.emitted;
                self.pending.truncate(mark.len);
                self.settled = mark.settled;
                out.truncate(mark.out);
                return Err(e);
            }
            if self.is_closed() {
                break;
            }
        }
        Ok(self.release())
    }

    /// The usual engine step in a few loads: one id of an ordinary token whose bytes are whole
    /// characters ([`Vocab::whole`]), fed to an open stream that carries no incomplete
    /// character (so every token fed so far has a known end). The matcher runs on the token's
    /// text directly and nothing can fail, so no undo mark is needed (and the result fits in
    /// registers). `None` hands the call, untouched, to the general path. In a profile of
    /// `feed_batch` (256 streams, one id each) the general path's undo mark, UTF-8 check and
    /// repeated held-text lookups were about a sixth of a step; this path has none of them.
    ///
    /// Text held back from earlier tokens (a token ending in `<` or a newline, with stops
    /// starting so) takes this path too: on the benchmark's prose that was one step in eleven,
    /// each costing about 790 instructions on the general path against about 100 here.
    #[inline]
    fn feed_whole(
        &mut self,
        vocab: &Vocab,
        set: &T::Set,
        id: i64,
        out: &mut Vec<u8>,
    ) -> Option<Fed> {
        if self.settled != self.pending.len() || self.is_closed() || !self.bytes.tail().is_empty() {
            return None;
        }
        let text = vocab.whole(id)?;
        if (!self.stop_ids.is_empty() && self.stop_ids.binary_search(&id).is_ok())
            || (self.at_start && vocab.strip_leading_space && text[0] == b' ')
        {
            return None;
        }
        self.at_start = false;
        if self.head != self.pending.len() {
            // Tokens wait on held text: this one starts where the decoded text ends.
            self.compact();
            let start = self.decoded(set);
            self.pending.push(Pending { start, end: start + text.len() as u64, has_text: true });
            self.settled = self.pending.len();
            let mark = out.len();
            let whole = T::feed_chars(&mut self.bytes, set, text, out) == ByteOut::Input;
            self.emitted += if whole { text.len() } else { out.len() - mark } as u64;
            return Some(Fed { released: self.release(), whole });
        }
        debug_assert!(self.held(set).is_empty());
        self.pending.clear();
        self.head = 0;
        self.settled = 0;
        let start = self.emitted;
        let mark = out.len();
        let whole = T::feed_chars(&mut self.bytes, set, text, out) == ByteOut::Input;
        self.emitted += if whole { text.len() } else { out.len() - mark } as u64;
        let released = if self.bytes.status() != Status::Open {
            // A stop fired in this token: it is released if any of its text was emitted.
            usize::from(self.emitted > start)
        } else if start + text.len() as u64 <= self.emitted {
            1
        } else {
            self.pending.push(Pending { start, end: start + text.len() as u64, has_text: true });
            self.settled = 1;
            0
        };
        Some(Fed { released, whole })
    }

    /// Ends the stream, appending everything still held back; returns how many more tokens are
    /// released. In strict mode an incomplete character at the end is an error and the stream
    /// stays open, unchanged. Idempotent.
    pub fn finish(&mut self, set: &T::Set, out: &mut Vec<u8>) -> Result<usize, Error> {
        if self.is_closed() {
            self.finished = true;
            return Ok(self.release());
        }
        self.end_text(set, out)?;
        self.finished = true;
        Ok(self.release())
    }

    /// Starts over with the same vocabulary, stop ids and settings (`set` is the list the
    /// stream was built over).
    pub fn reset(&mut self, set: &T::Set) {
        self.bytes = ByteStream::over(T::fresh(set, self.include_stop), self.bytes.replace());
        self.stop_token = None;
        self.finished = false;
        self.at_start = true;
        self.emitted = 0;
        self.pending.clear();
        self.head = 0;
        self.settled = 0;
    }

    /// Decoded bytes so far (emitted or held; not the tail).
    fn decoded(&self, set: &T::Set) -> u64 {
        self.emitted + self.held(set).len() as u64
    }

    /// The tail's unit ends at `end`: the tokens waiting on it settle.
    fn settle(&mut self, end: u64) {
        for p in &mut self.pending[self.settled..] {
            p.end = end;
        }
        self.settled = self.pending.len();
    }

    fn push(
        &mut self,
        vocab: &Vocab,
        set: &T::Set,
        position: usize,
        id: i64,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let token = vocab.get(id).ok_or_else(|| Error::token(position, id))?;
        if self.stop_ids.binary_search(&id).is_ok() {
            return self.push_stop_token(set, id, token, out);
        }
        let before = self.decoded(set);
        let text = match token {
            Token::Text(t) if !t.is_empty() => {
                let strip =
                    std::mem::take(&mut self.at_start) && vocab.strip_leading_space && t[0] == b' ';
                &t[usize::from(strip)..]
            }
            _ => &[],
        };
        let text = match text {
            t if !t.is_empty() => t,
            _ => {
                let settled = self.bytes.tail().is_empty();
                self.pending.push(Pending { start: before, end: before, has_text: false });
                if settled {
                    self.settled = self.pending.len();
                }
                return Ok(());
            }
        };
        let tail = self.bytes.tail();
        let mut start = before;
        if !tail.is_empty() {
            // The tail's unit is settled by the first bytes of this token (or not yet).
            let mut buf = [0u8; 4];
            let carried = tail.len();
            let take = text.len().min(4 - carried);
            buf[..carried].copy_from_slice(tail);
            buf[carried..carried + take].copy_from_slice(&text[..take]);
            match utf8::head(&buf[..carried + take]) {
                Head::Char(n) => self.settle(before + n as u64),
                Head::Incomplete => {}
                Head::Invalid(n) => {
                    self.settle(before + utf8::REPLACEMENT.len() as u64);
                    if n == carried {
                        // This token's first byte is not part of the U+FFFD.
                        start += utf8::REPLACEMENT.len() as u64;
                    }
                }
            }
        }
        let mark = out.len();
        if self.bytes.feed(set, text, out)? == ByteOut::Input {
            out.extend_from_slice(text);
        }
        self.emitted += (out.len() - mark) as u64;
        self.pending.push(Pending { start, end: 0, has_text: true });
        if self.bytes.status() == Status::Open && self.bytes.tail().is_empty() {
            let end = self.decoded(set);
            self.settle(end);
        }
        Ok(())
    }

    /// The text before a stop token ends as at `finish`; the token's own text, with
    /// `include_stop`, follows, decoded on its own and not scanned.
    fn push_stop_token(
        &mut self,
        set: &T::Set,
        id: i64,
        token: Token<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        self.end_text(set, out)?;
        if self.bytes.status() != Status::Finished {
            // A stop completed on the U+FFFD that ended the text: it came first.
            return Ok(());
        }
        let text = match token {
            Token::Text(t) => t,
            Token::Special => &[],
        };
        if self.include_stop && !text.is_empty() {
            let mark = out.len();
            let mut own = ByteStream::new(false, self.replace());
            let none = LiteralStops::none();
            if own.feed(none, text, out)? == ByteOut::Input {
                out.extend_from_slice(text);
            }
            own.finish(none, out)?;
            self.emitted += (out.len() - mark) as u64;
        }
        if text.is_empty() || self.include_stop {
            self.pending.push(Pending { start: self.emitted, end: self.emitted, has_text: false });
            self.settled = self.pending.len();
        }
        self.stop_token = Some(id);
        Ok(())
    }

    /// Ends the decoded text: the tail becomes U+FFFD (or an error), held text is released.
    fn end_text(&mut self, set: &T::Set, out: &mut Vec<u8>) -> Result<(), Error> {
        let before = self.decoded(set);
        let had_tail = !self.bytes.tail().is_empty();
        let mark = out.len();
        self.bytes.finish(set, out)?;
        self.emitted += (out.len() - mark) as u64;
        if had_tail {
            self.settle(before + utf8::REPLACEMENT.len() as u64);
        }
        Ok(())
    }

    /// Releases what the rule allows now and returns how many tokens that is.
    fn release(&mut self) -> usize {
        let first = self.head;
        let e = self.emitted;
        if let Status::Stopped(_) = self.bytes.status() {
            while let Some(p) = self.pending.get(self.head) {
                let out =
                    if p.has_text { p.start < e } else { self.head < self.settled && p.end <= e };
                if !out {
                    break;
                }
                self.head += 1;
            }
            // The rest sit after the cut: never released.
            let n = self.head - first;
            self.pending.clear();
            self.head = 0;
            self.settled = 0;
            return n;
        }
        while self.head < self.settled && self.pending[self.head].end <= e {
            self.head += 1;
        }
        self.head - first
    }

    /// Drops released entries, so the buffer stays as long as the held text in tokens.
    fn compact(&mut self) {
        if self.head == 0 {
            return;
        }
        self.pending.drain(..self.head);
        self.settled -= self.head;
        self.head = 0;
    }
}
