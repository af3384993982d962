//! Token ids in, text out: detokenizing and stop matching in one pass, for serving engines.
//!
//! An engine holds token ids, not text. A [`Vocab`] maps each id to its bytes, and a
//! [`TokenStream`] feeds those bytes to a [`ByteStream`] (so decoding and matching are exactly
//! those of raw-bytes input), while keeping count of which input tokens the emitted text
//! covers. The byte stream decodes into either matcher of the crate ([`TokenMatcher`]): the
//! literal [`TextStream`], or the composed [`MatchStream`] for `Stop` and `Regex` items and skip
//! regions (contract §6), so every stop kind applies here exactly as it does to text and bytes,
//! with no matching logic of its own. The count is what keeps text, token ids and logprobs
//! aligned when text is held back or cut:
//!
//! * a token is *released* once all of its text has been emitted;
//! * when a stop fires, a token is released if any of its text was emitted (when the winner's
//!   include flag is on, that includes the tokens holding the stop); tokens wholly after the cut
//!   never are;
//! * a token with no text (a special token) is released once all the text before its position
//!   has been emitted, so one that sits after a cut never is.
//!
//! The rule is stated in terms of emitted text only, so it holds whatever decides the cut: a
//! literal completing, a regex stop settled by a later character (the tokens fed up to that
//! character are consumed, the ones after it are ignored), or `finish` settling a stop at the
//! end of the stream (then `finish` releases the tokens before the cut).
//!
//! Released tokens always form a prefix of the input, so a stream reports a count.
//!
//! # Where a token's text is
//!
//! Decoded text is a sequence of *units*: a character, or one U+FFFD standing for a maximal
//! invalid subpart. Every input byte belongs to exactly one unit, and units come in input order.
//! A token's text starts where the unit holding its first byte starts and ends where the unit
//! holding its last byte ends (a token with no text: where the unit holding the byte before it
//! ends). Positions are offsets in the decoded text's UTF-8. A unit is settled as soon as it is
//! decoded, except the incomplete character the byte stream carries at the end of its input
//! (its *tail*): the tokens whose last byte is in it wait for the next bytes (or the end) to
//! settle where it ends.

use crate::byteset::{byte_set, HEAD};
use crate::error::Error;
use crate::matcher::{MatchStream, Matcher};
use crate::stopset::StopSet;
use crate::stream::{ByteOut, ByteStream, Status, TextMatcher, TextStream};
use crate::utf8::{self, Head};

/// A tokenizer's vocabulary: token id to bytes, in one contiguous buffer.
///
/// Ids may be unassigned (tiktoken's vocabularies have holes): feeding one is an error, as is an
/// id past the end. Special tokens (end of text, chat-template markers) contribute no text, as
/// when a tokenizer decodes with special tokens skipped.
///
/// ```
/// use stopstream::{Token, Vocab};
///
/// // `None` leaves an id unassigned (tiktoken's vocabularies have holes).
/// let vocab = Vocab::new([Some(&b"a"[..]), None, Some(&b"<|end|>"[..])], &[2]).unwrap();
/// assert_eq!(vocab.get(0), Some(Token::Text(b"a")));
/// assert_eq!(vocab.get(1), None);
/// assert_eq!(vocab.get(2), Some(Token::Special));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocab {
    text: Vec<u8>,
    entries: Vec<Entry>,
    strip_leading_space: bool,
}

/// Where a token's bytes are in the buffer; `len` is [`Entry::HOLE`] or [`Entry::SPECIAL`] for
/// ids without text, else the length with [`Entry::WHOLE`] set when the bytes are whole, valid
/// characters on their own; `bytes` is the set of the token's bytes, folded to 7 bits
/// ([`byte_set`]). One 24-byte entry per id (a cl100k vocabulary is 100k entries, 2.4 MB, plus
/// 1 MB of text), so that the usual step tests a token against the stops' first bytes without
/// reading its text: a batch step of 256 streams costs 348 instructions per stream (10.6 µs),
/// where 8-byte entries and a test of the bytes took 389 (11.8 µs; runs alternated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    start: u32,
    len: u32,
    bytes: [u64; 2],
}

impl Entry {
    const HOLE: u32 = u32::MAX;
    const SPECIAL: u32 = u32::MAX - 1;
    /// Set on a non-empty token that is valid UTF-8 by itself: the fast step of
    /// [`TokenStream::feed`] then skips decoding (a `from_utf8` call was 5% of a batch step).
    /// Token lengths stay below [`Entry::MAX_LEN`], so no length collides with the sentinels.
    const WHOLE: u32 = 1 << 31;
    const MAX_LEN: usize = 1 << 30;

    #[inline]
    fn text_len(self) -> usize {
        (self.len & !Entry::WHOLE) as usize
    }
}

/// What a token id stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token<'v> {
    /// Ordinary text (possibly empty, possibly part of a character).
    Text(&'v [u8]),
    /// A special token: no text.
    Special,
}

impl Vocab {
    /// Builds a vocabulary from each id's bytes in id order (`None` leaves the id unassigned),
    /// and the ids of the special tokens. A special id must be in range (it need not have
    /// bytes); an out-of-range one is an error naming its position in `special`.
    pub fn new<I, B>(tokens: I, special: &[i64]) -> Result<Vocab, Error>
    where
        I: IntoIterator<Item = Option<B>>,
        B: AsRef<[u8]>,
    {
        let mut text = Vec::new();
        let mut entries = Vec::new();
        for token in tokens {
            let entry = match token {
                None => Entry { start: 0, len: Entry::HOLE, bytes: [0; 2] },
                Some(b) => {
                    let b = b.as_ref();
                    let start = text.len();
                    let total = start + b.len();
                    if total >= Entry::SPECIAL as usize || b.len() >= Entry::MAX_LEN {
                        return Err(Error::vocab_too_large(total));
                    }
                    text.extend_from_slice(b);
                    let whole = !b.is_empty() && std::str::from_utf8(b).is_ok();
                    let flag = if whole { Entry::WHOLE } else { 0 };
                    Entry { start: start as u32, len: b.len() as u32 | flag, bytes: byte_set(b) }
                }
            };
            entries.push(entry);
        }
        for (position, &id) in special.iter().enumerate() {
            let e = usize::try_from(id)
                .ok()
                .and_then(|i| entries.get_mut(i))
                .ok_or_else(|| Error::token(position, id))?;
            e.len = Entry::SPECIAL;
        }
        // Every token's first 8 bytes can be read as a word (see `Vocab::whole_head`).
        text.extend_from_slice(&[0; HEAD - 1]);
        text.shrink_to_fit();
        Ok(Vocab { text, entries, strip_leading_space: false })
    }

    /// Makes a stream drop one space at the very start of its text, as SentencePiece-style
    /// decoders do (`Strip(" ", 1, 0)` after `Fuse`, or `Metaspace` with a prepend scheme): the
    /// encoder put it there.
    #[must_use]
    pub fn with_strip_leading_space(mut self, strip: bool) -> Vocab {
        self.strip_leading_space = strip;
        self
    }

    /// Whether streams drop one space at the very start of their text.
    pub fn strips_leading_space(&self) -> bool {
        self.strip_leading_space
    }

    /// Number of ids (assigned or not): valid ids are `0..len()`.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no ids at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What `id` stands for; `None` when it is out of range or unassigned.
    #[inline]
    pub fn get(&self, id: i64) -> Option<Token<'_>> {
        let e = *self.entries.get(usize::try_from(id).ok()?)?;
        match e.len {
            Entry::HOLE => None,
            Entry::SPECIAL => Some(Token::Special),
            _ => {
                let start = e.start as usize;
                Some(Token::Text(&self.text[start..start + e.text_len()]))
            }
        }
    }

    /// The bytes of `id` when they are non-empty, whole, valid characters on their own (the
    /// usual token); `None` for anything else (special, unassigned, out of range, empty, or
    /// part of a character).
    #[inline]
    pub fn whole(&self, id: i64) -> Option<&[u8]> {
        let e = *self.entries.get(usize::try_from(id).ok()?)?;
        if e.len & Entry::WHOLE == 0 || e.len >= Entry::SPECIAL {
            return None;
        }
        let start = e.start as usize;
        Some(&self.text[start..start + e.text_len()])
    }

    /// The length and [`byte_set`] of `id` when [`Vocab::whole`] has its bytes.
    #[inline]
    pub(crate) fn whole_set(&self, id: i64) -> Option<(usize, [u64; 2])> {
        let e = *self.entries.get(usize::try_from(id).ok()?)?;
        if e.len & Entry::WHOLE == 0 || e.len >= Entry::SPECIAL {
            return None;
        }
        Some((e.text_len(), e.bytes))
    }

    /// [`Vocab::whole`], with the token's first [`HEAD`] bytes as an array (past its end, any
    /// bytes): a caller can test short tokens a word at a time, without a branch per byte.
    #[inline]
    pub(crate) fn whole_head(&self, id: i64) -> Option<(&[u8], [u8; HEAD])> {
        let e = *self.entries.get(usize::try_from(id).ok()?)?;
        if e.len & Entry::WHOLE == 0 || e.len >= Entry::SPECIAL {
            return None;
        }
        let start = e.start as usize;
        let head = self.text.get(start..start + HEAD)?.try_into().ok()?;
        Some((&self.text[start..start + e.text_len()], head))
    }

    /// Whether `id` is a special token.
    pub fn is_special(&self, id: i64) -> bool {
        matches!(self.get(id), Some(Token::Special))
    }

    /// Approximate heap bytes.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }
}

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

/// A matcher over decoded text that a [`TokenStream`] can run: [`TextStream`] for a literal
/// stop list ([`StopSet`]), [`MatchStream`] for the stops and skip regions of contract §6
/// ([`Matcher`]). What a token stream needs of it beyond [`TextMatcher`]; the token-sized fast
/// steps ([`TokenStream::feed_plain`]) exist for the literal matcher only, whose state is a
/// couple of words (the composed one takes the general steps, which are exact for both).
pub trait TokenMatcher: TextMatcher {
    /// Whether the literal fast steps apply (known at compile time, so the composed matcher's
    /// steps carry no test for them).
    const FAST: bool;
    /// Whether a copy of the stream is a few words (then every failing call is undone from a
    /// copy; otherwise one is taken only when the call can fail).
    const SMALL: bool;
    /// A fresh stream over `set`.
    fn fresh(set: &Self::Set, include_stop: bool) -> Self;
    /// The decoded text held back right now.
    fn held_text<'s>(&'s self, set: &'s Self::Set) -> &'s [u8];
    /// Feeds whole, valid characters to an open byte stream carrying no incomplete character:
    /// nothing can fail there.
    fn feed_chars(
        bytes: &mut ByteStream<Self>,
        set: &Self::Set,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> ByteOut;
    /// Whether a token with this byte set passes the byte stream whole, as far as the set can
    /// prove it (`false`: no fast step).
    fn passes_set(bytes: &ByteStream<Self>, set: &Self::Set, byte_set: [u64; 2]) -> bool;
    /// Whether this token (its first bytes in `head`) passes the byte stream whole (`false`: no
    /// fast step).
    fn passes_token(
        bytes: &ByteStream<Self>,
        set: &Self::Set,
        text: &[u8],
        head: [u8; HEAD],
    ) -> bool;
}

impl TokenMatcher for TextStream {
    const FAST: bool = true;
    const SMALL: bool = true;

    fn fresh(_: &StopSet, include_stop: bool) -> TextStream {
        TextStream::new(include_stop)
    }

    #[inline]
    fn held_text<'s>(&'s self, set: &'s StopSet) -> &'s [u8] {
        self.held(set)
    }

    // The literal steps below were inlined into their callers before there was a trait between
    // them; left to itself the compiler calls them (callgrind showed the call in a batch step).
    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn feed_chars(
        bytes: &mut ByteStream,
        set: &StopSet,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> ByteOut {
        bytes.feed_chars(set, text, out)
    }

    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn passes_set(bytes: &ByteStream, set: &StopSet, byte_set: [u64; 2]) -> bool {
        bytes.passes_set(set, byte_set)
    }

    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn passes_token(bytes: &ByteStream, set: &StopSet, text: &[u8], head: [u8; HEAD]) -> bool {
        bytes.passes_token(set, text, head)
    }
}

impl TokenMatcher for MatchStream {
    const FAST: bool = false;
    const SMALL: bool = false;

    fn fresh(m: &Matcher, _: bool) -> MatchStream {
        MatchStream::new(m)
    }

    #[inline]
    fn held_text<'s>(&'s self, _: &'s Matcher) -> &'s [u8] {
        self.held()
    }

    #[inline]
    fn feed_chars(
        bytes: &mut ByteStream<MatchStream>,
        m: &Matcher,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> ByteOut {
        // Only `feed` after `finish` and strict decoding can fail, and neither applies to an
        // open stream fed whole characters with nothing carried. Were it to fail anyway, the
        // byte stream puts itself back and nothing is emitted: a token held, never a panic.
        bytes.feed(m, text, out).unwrap_or(ByteOut::Buffer)
    }

    fn passes_set(_: &ByteStream<MatchStream>, _: &Matcher, _: [u64; 2]) -> bool {
        false
    }

    fn passes_token(_: &ByteStream<MatchStream>, _: &Matcher, _: &[u8], _: [u8; HEAD]) -> bool {
        false
    }
}

/// Stop matching over a stream of token ids, reporting how many input tokens each call
/// releases (see the module documentation for the rule). `T` is the matcher the decoded text
/// runs through ([`TokenMatcher`]); every method takes that matcher's compiled list as `set`.
///
/// ```
/// use stopstream::{Status, StopSet, TokenStream, Vocab};
///
/// // Ids 0 to 2 have text; id 3 is a special token (no text).
/// let vocab = Vocab::new([Some("Hi"), Some(" </"), Some("stop>"), None], &[3]).unwrap();
/// let set = StopSet::new(["</stop>"]).unwrap();
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
        TokenStream::over(vocab, StopSet::none(), include_stop, replace, stop_ids)
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
            let none = StopSet::none();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{feed_batch, AnyTokenStream, BatchEntry};
    use crate::compiled::CompiledStops;
    use crate::filter::Detail;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// The test vocabulary: characters whole and split across tokens, invalid bytes, an empty
    /// token, two special tokens and a hole.
    const PIECES: &[Option<&[u8]>] = &[
        Some(b"a"),                // 0
        Some(b"b"),                // 1
        Some(b"<"),                // 2
        Some(b"/"),                // 3
        Some(b"</"),               // 4
        Some(b"a>"),               // 5
        Some("\u{e9}".as_bytes()), // 6
        Some(b"\xc3"),             // 7  first byte of é
        Some(b"\xa9"),             // 8  last byte of é
        Some(b"\xf0\x9f"),         // 9  first half of 😀
        Some(b"\x98\x80"),         // 10 second half of 😀
        Some(b"\xff"),             // 11 never valid
        Some(b"\xe2\x82"),         // 12 a prefix of €
        Some(b""),                 // 13 no text
        Some(b"<|end|>"),          // 14 special
        None,                      // 15 hole
        Some(b"<|eot|>"),          // 16 special
        Some(b"\xacb"),            // 17 completes € after 12, then b
        Some(b"\n"),               // 18
        Some(b" "),                // 19
        Some(b" a"),               // 20
    ];
    const SPECIAL: &[i64] = &[14, 16];
    /// One past the last id.
    const END: i64 = 21;

    fn vocab(strip: bool) -> Vocab {
        assert_eq!(usize::try_from(END).unwrap(), PIECES.len());
        Vocab::new(PIECES.iter().copied(), SPECIAL).unwrap().with_strip_leading_space(strip)
    }

    #[test]
    fn a_compiled_list_picks_its_stream_and_reports_why_it_ended() {
        let v = vocab(false);
        let literal = CompiledStops::literal(&["a>"]).unwrap();
        let composed = CompiledStops::composed(
            &[StopSpec { kind: crate::matcher::StopKind::Regex("a>", None), include: false }],
            None,
            &[],
        )
        .unwrap();
        for (stops, is_composed) in [(&literal, false), (&composed, true)] {
            let mut s = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
            assert_eq!(s.is_composed(), is_composed);
            assert_eq!(s.stop_reason(), None);
            let mut out = Vec::new();
            let set = stops.literal_set().map_or(StopSet::none(), |s| s);
            s.feed(&v, set, &[4, 5], &mut out).unwrap();
            assert_eq!((out.as_slice(), s.stop_reason()), (&b"</"[..], Some("stop_sequence")));
            let mut t = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
            t.feed(&v, set, &[0, 14], &mut out).unwrap();
            assert_eq!(t.stop_reason(), Some("stop_token"));
            let mut u = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
            u.finish(set, &mut out).unwrap();
            assert_eq!(u.stop_reason(), Some("end"));
        }
    }

    #[test]
    fn the_report_reads_stops_tokens_and_held_text() {
        let v = vocab(false);
        let literal = CompiledStops::literal(&["a>"]).unwrap();
        let spec = [StopSpec { kind: crate::matcher::StopKind::Regex("a>", None), include: false }];
        let composed = CompiledStops::composed(&spec, None, &[]).unwrap();
        for (stops, matched) in [(&literal, None), (&composed, Some(b"a>".to_vec()))] {
            let set = stops.literal_set().map_or(StopSet::none(), |s| s);
            let (mut s, mut out) =
                (AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap(), vec![]);
            s.feed(&v, set, &[1, 0], &mut out).unwrap();
            let held = s.stop_report(set, Detail::Pending);
            assert_eq!(
                (held.stopped, held.reason, held.pending.as_slice()),
                (false, None, &b"a"[..])
            );
            assert!(
                s.stop_report(set, Detail::Status).pending.is_empty(),
                "texts are read when asked"
            );
            s.feed(&v, set, &[5], &mut out).unwrap();
            let r = s.stop_report(set, Detail::Matched);
            assert_eq!(
                (r.status, r.stopped, r.reason),
                (Status::Stopped(0), true, Some("stop_sequence"))
            );
            assert_eq!((r.matched, r.bytes), (matched, false));
            assert!(s.stop_report(set, Detail::Pending).pending.is_empty());
            let mut t = AnyTokenStream::new(&v, stops, false, true, &[14]).unwrap();
            t.feed(&v, set, &[0, 14], &mut out).unwrap();
            let r = t.stop_report(set, Detail::Matched);
            assert_eq!((r.status.index(), r.stopped, r.reason), (None, true, Some("stop_token")));
            assert_eq!(r.matched, None, "a stop token matched no text");
        }
    }

    fn text_of(id: i64) -> &'static [u8] {
        if SPECIAL.contains(&id) {
            return b"";
        }
        PIECES[usize::try_from(id).unwrap()].unwrap()
    }

    /// A decoded unit: raw byte range and decoded UTF-8 range.
    struct Unit {
        raw: (usize, usize),
        dec: (usize, usize),
        invalid: bool,
        /// The byte whose arrival decides the unit (past the end for a final U+FFFD): its last
        /// byte, or for a valid lead cut short, the byte that broke it.
        settle: usize,
    }

    /// Decodes `raw` unit by unit the obvious way, with the standard library's UTF-8 validation
    /// on a window of at most 4 bytes. An incomplete end is a U+FFFD unit when `last`, else left
    /// out (the tail).
    fn decode_units(raw: &[u8], last: bool) -> (Vec<Unit>, Vec<u8>) {
        let (mut i, mut units, mut text) = (0, Vec::new(), Vec::new());
        while i < raw.len() {
            let w = &raw[i..raw.len().min(i + 4)];
            let (n, ok, settle) = match std::str::from_utf8(w) {
                Ok(s) => (s.chars().next().unwrap().len_utf8(), true, 0),
                Err(e) if e.valid_up_to() > 0 => {
                    let s = std::str::from_utf8(&w[..e.valid_up_to()]).unwrap();
                    (s.chars().next().unwrap().len_utf8(), true, 0)
                }
                Err(e) => match e.error_len() {
                    Some(n) if (0xC2..=0xF4).contains(&w[0]) => (n, false, 1),
                    Some(n) => (n, false, 0),
                    None if last => (w.len(), false, 1),
                    None => break,
                },
            };
            let d = text.len();
            text.extend_from_slice(if ok { &raw[i..i + n] } else { "\u{FFFD}".as_bytes() });
            let settle = i + n - 1 + settle;
            units.push(Unit { raw: (i, i + n), dec: (d, text.len()), invalid: !ok, settle });
            i += n;
        }
        (units, text)
    }

    fn first_stop(stops: &[Vec<u8>], text: &[u8]) -> Option<(usize, usize)> {
        (1..=text.len()).find_map(|end| {
            let mut best: Option<usize> = None;
            for (i, s) in stops.iter().enumerate() {
                if text[..end].ends_with(s) && best.is_none_or(|b| s.len() > stops[b].len()) {
                    best = Some(i);
                }
            }
            best.map(|b| (b, end))
        })
    }

    fn holdback(stops: &[Vec<u8>], text: &[u8]) -> usize {
        (0..=text.len())
            .rev()
            .find(|&k| stops.iter().any(|s| k < s.len() && s.starts_with(&text[text.len() - k..])))
            .unwrap_or(0)
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        /// Cumulative text, released count, closed.
        Ok(Vec<u8>, usize, bool),
        Error,
    }

    /// The contract for all of `ids` fed so far (`last`: finish was called), from scratch.
    #[allow(
        clippy::too_many_arguments,
        clippy::fn_params_excessive_bools,
        reason = "the test's whole configuration"
    )]
    fn model(
        strip: bool,
        stops: &[Vec<u8>],
        include: bool,
        replace: bool,
        stop_ids: &[i64],
        all: &[i64],
        last: bool,
    ) -> Outcome {
        let stop_at = all.iter().position(|i| stop_ids.contains(i));
        let ids = &all[..stop_at.unwrap_or(all.len())];
        let last = last || stop_at.is_some();
        let mut raw = Vec::new();
        let mut ranges = Vec::new();
        let mut first = true;
        for &id in ids {
            let a = raw.len();
            let mut t = text_of(id);
            if !t.is_empty() && std::mem::take(&mut first) && strip && t[0] == b' ' {
                t = &t[1..];
            }
            raw.extend_from_slice(t);
            ranges.push((a, raw.len()));
        }
        let (units, text) = decode_units(&raw, last);
        let found = first_stop(stops, &text);
        if !replace {
            // Strict: an invalid unit is an error unless a stop ends before it.
            let bad = units.iter().find(|u| u.invalid).map(|u| u.dec.0);
            if bad.is_some_and(|b| found.is_none_or(|(_, end)| end > b)) {
                return Outcome::Error;
            }
        }
        let unit_of = |byte: usize| units.iter().find(|u| u.raw.0 <= byte && byte < u.raw.1);
        // Where a token's text ends: the end of the unit holding its last byte (for a token
        // without text, the byte before it); `None` while that unit is the tail.
        let end_of = |(_, b): (usize, usize)| {
            if b == 0 {
                Some(0)
            } else {
                unit_of(b - 1).map(|u| u.dec.1)
            }
        };
        if let Some((p, end)) = found {
            let cut = if include { end } else { end - stops[p].len() };
            // Ids after the one whose bytes complete the stop are never looked at.
            let settle = units.iter().find(|u| u.dec.1 == end).unwrap().settle;
            let last_fed = ranges.iter().position(|&(a, b)| a <= settle && settle < b);
            let n = ranges
                .iter()
                .take(last_fed.map_or(ranges.len(), |k| k + 1))
                .filter(|&&(a, b)| {
                    if a < b {
                        unit_of(a).is_some_and(|u| u.dec.0 < cut)
                    } else {
                        end_of((a, b)).is_some_and(|e| e <= cut)
                    }
                })
                .count();
            return Outcome::Ok(text[..cut].to_vec(), n, true);
        }
        let emit = if last || include { text.len() } else { text.len() - holdback(stops, &text) };
        let mut n = ranges.iter().filter(|&&r| end_of(r).is_some_and(|e| e <= emit)).count();
        let mut out = text[..emit].to_vec();
        if let Some(j) = stop_at {
            let own = text_of(all[j]);
            if include && !own.is_empty() {
                let (u, t) = decode_units(own, true);
                if !replace && u.iter().any(|u| u.invalid) {
                    return Outcome::Error;
                }
                out.extend_from_slice(&t);
            }
            n += usize::from(own.is_empty() || include);
        }
        Outcome::Ok(out, n, stop_at.is_some())
    }

    /// Feeds `calls` (each a list of ids; `None` is `finish`) to a stream and to the model,
    /// comparing after every call. A call the model rejects must fail and change nothing.
    fn check(
        strip: bool,
        stops: &[Vec<u8>],
        include: bool,
        replace: bool,
        stop_ids: &[i64],
        calls: &[Option<Vec<i64>>],
    ) -> Result<(), TestCaseError> {
        let vocab = vocab(strip);
        let set = StopSet::new(stops).unwrap();
        let mut st = TokenStream::new(&vocab, include, replace, stop_ids).unwrap();
        let (mut fed, mut out, mut released) = (Vec::new(), Vec::new(), 0usize);
        let mut finished = false;
        for call in calls {
            let before = st.clone();
            let mark = out.len();
            let (result, want) = if let Some(ids) = call {
                let r = st.feed(&vocab, &set, ids, &mut out);
                // An invalid id fails the call unless the stream closes before it.
                let bad = ids.iter().position(|&i| vocab.get(i).is_none());
                let mut upto = fed.clone();
                upto.extend_from_slice(&ids[..bad.unwrap_or(ids.len())]);
                let mut want = model(strip, stops, include, replace, stop_ids, &upto, finished);
                if bad.is_some() && !matches!(want, Outcome::Ok(_, _, true)) {
                    want = Outcome::Error;
                }
                if finished {
                    want = Outcome::Error;
                }
                if want != Outcome::Error {
                    fed = upto;
                }
                (r, want)
            } else {
                let r = st.finish(&set, &mut out);
                let want = model(strip, stops, include, replace, stop_ids, &fed, true);
                if want != Outcome::Error {
                    finished = true;
                }
                (r, want)
            };
            match want {
                Outcome::Error => {
                    prop_assert!(result.is_err(), "{call:?} should fail");
                    prop_assert_eq!(&st, &before);
                    prop_assert_eq!(out.len(), mark);
                }
                Outcome::Ok(text, n, closed) => {
                    released +=
                        result.map_err(|e| TestCaseError::fail(format!("{call:?}: {e}")))?;
                    prop_assert_eq!(&out, &text, "text after {:?}", call);
                    prop_assert_eq!(released, n, "released after {:?}", call);
                    prop_assert_eq!(st.is_closed(), closed || finished);
                    prop_assert!(released + st.unreleased() <= fed.len().max(released));
                }
            }
        }
        Ok(())
    }

    fn stop_word() -> impl Strategy<Value = Vec<u8>> {
        let alphabet = prop::sample::select(vec![
            "a",
            "b",
            "<",
            "/",
            ">",
            "\u{e9}",
            "\u{1F600}",
            "\u{FFFD}",
            "\u{20AC}",
            "\n",
        ]);
        prop::collection::vec(alphabet, 1..4).prop_map(|v| v.concat().into_bytes())
    }

    fn calls() -> impl Strategy<Value = Vec<Option<Vec<i64>>>> {
        let id = prop_oneof![
            20 => 0i64..END,
            1 => prop::sample::select(vec![-1i64, 15, END, i64::MAX, i64::MIN]),
        ];
        let call = prop_oneof![
            12 => prop::collection::vec(id, 0..5).prop_map(Some),
            1 => Just(None),
        ];
        prop::collection::vec(call, 0..12)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn matches_the_model(
            stops in prop::collection::vec(stop_word(), 0..4),
            include in any::<bool>(),
            replace in any::<bool>(),
            strip in any::<bool>(),
            stop_ids in prop::collection::vec(prop::sample::select(vec![1i64, 4, 8, 13, 14, 11]), 0..2),
            calls in calls(),
        ) {
            check(strip, &stops, include, replace, &stop_ids, &calls)?;
        }
    }

    fn run(
        stops: &[&str],
        include: bool,
        stop_ids: &[i64],
        calls: &[&[i64]],
    ) -> Vec<(String, usize)> {
        let vocab = vocab(false);
        let set = StopSet::new(stops.iter().map(|s| s.as_bytes())).unwrap();
        let mut st = TokenStream::new(&vocab, include, true, stop_ids).unwrap();
        let mut got = Vec::new();
        for ids in calls {
            let mut out = Vec::new();
            let n = st.feed(&vocab, &set, ids, &mut out).unwrap();
            got.push((String::from_utf8(out).unwrap(), n));
        }
        let mut out = Vec::new();
        let n = st.finish(&set, &mut out).unwrap();
        got.push((String::from_utf8(out).unwrap(), n));
        got
    }

    #[test]
    #[allow(clippy::type_complexity, reason = "a table of literal cases")]
    fn released_table() {
        // (stops, include_stop, stop ids, calls, (text, released) per call then finish)
        let cases: &[(&[&str], bool, &[i64], &[&[i64]], &[(&str, usize)])] = &[
            // Held text holds its tokens back; a stop releases those with emitted text.
            (&["</a>"], false, &[], &[&[0, 4], &[5, 1]], &[("a", 1), ("", 0), ("", 0)]),
            (&["</a>"], true, &[], &[&[0, 4], &[5, 1]], &[("a</", 2), ("a>", 1), ("", 0)]),
            (&["</a>"], false, &[], &[&[0, 4], &[1]], &[("a", 1), ("</b", 2), ("", 0)]),
            // A stop inside a token: the token is released (its first text was emitted).
            (&["/a"], false, &[], &[&[4, 5]], &[("<", 1), ("", 0)]),
            // A special token is released with the text before it, never after a cut.
            (&["</a>"], false, &[], &[&[0, 14, 4, 16, 5]], &[("a", 2), ("", 0)]),
            (&["</a>"], false, &[], &[&[0, 4, 14], &[1]], &[("a", 1), ("</b", 3), ("", 0)]),
            // A character split across tokens: both wait for it.
            (
                &[],
                false,
                &[],
                &[&[7], &[8], &[9], &[10]],
                &[("", 0), ("é", 2), ("", 0), ("😀", 2), ("", 0)],
            ),
            (&[], false, &[], &[&[7, 14], &[8]], &[("", 0), ("é", 3), ("", 0)]),
            // Invalid bytes: U+FFFD, and a broken prefix settles when the next byte comes.
            (&[], false, &[], &[&[12], &[0]], &[("", 0), ("\u{FFFD}a", 2), ("", 0)]),
            (&[], false, &[], &[&[12], &[17]], &[("", 0), ("€b", 2), ("", 0)]),
            (&[], false, &[], &[&[7]], &[("", 0), ("\u{FFFD}", 1)]),
            // Stop tokens: held text released, own text dropped unless include_stop.
            (&["</a>"], false, &[4], &[&[0, 2, 4, 1]], &[("a<", 2), ("", 0)]),
            (&["</a>"], true, &[4], &[&[0, 2, 4, 1]], &[("a<</", 3), ("", 0)]),
            (&[], false, &[14], &[&[0, 14, 1]], &[("a", 2), ("", 0)]),
            // Ids after a stop are ignored unchecked.
            (&["a"], false, &[], &[&[1, 0, -5, 15]], &[("b", 1), ("", 0)]),
        ];
        for (stops, include, stop_ids, calls, want) in cases {
            let got = run(stops, *include, stop_ids, calls);
            let want: Vec<(String, usize)> =
                want.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
            assert_eq!(got, want, "{stops:?} {calls:?}");
        }
    }

    #[test]
    fn invalid_ids_consume_nothing() {
        let vocab = vocab(false);
        let set = StopSet::new(["</a>"]).unwrap();
        let mut st = TokenStream::new(&vocab, false, true, &[]).unwrap();
        let mut out = Vec::new();
        st.feed(&vocab, &set, &[0, 4], &mut out).unwrap();
        for bad in [-1, 15, END, i64::MAX, i64::MIN] {
            let before = st.clone();
            let err = st.feed(&vocab, &set, &[1, 7, bad, 0], &mut out).unwrap_err();
            assert_eq!(err.invalid_token(), Some((2, bad)));
            assert_eq!(st, before);
            assert_eq!(out, b"a");
        }
        assert_eq!(
            TokenStream::new(&vocab, false, true, &[3, 15]).unwrap_err().invalid_token(),
            Some((1, 15))
        );
        assert_eq!(Vocab::new([Some(b"a")], &[1]).unwrap_err().invalid_token(), Some((0, 1)));
    }

    #[test]
    fn strict_errors_consume_nothing() {
        let vocab = vocab(false);
        let set = StopSet::new(["</a>"]).unwrap();
        let mut st = TokenStream::new(&vocab, false, false, &[]).unwrap();
        let mut out = Vec::new();
        st.feed(&vocab, &set, &[0, 7], &mut out).unwrap();
        let before = st.clone();
        assert!(st.feed(&vocab, &set, &[8, 0, 11], &mut out).unwrap_err().decode_error().is_some());
        assert_eq!(st, before);
        assert!(st.finish(&set, &mut out).unwrap_err().decode_error().is_some());
        assert_eq!(st, before);
        // A stop before the invalid byte wins.
        assert_eq!(st.feed(&vocab, &set, &[8, 4, 5, 11], &mut out).unwrap(), 2);
        assert_eq!(out, "aé".as_bytes());
    }

    #[test]
    fn reset_reopens() {
        let vocab = vocab(false);
        let set = StopSet::new(["b"]).unwrap();
        let mut st = TokenStream::new(&vocab, false, true, &[14]).unwrap();
        let mut out = Vec::new();
        st.feed(&vocab, &set, &[0, 14], &mut out).unwrap();
        assert_eq!(st.stop_token(), Some(14));
        assert_eq!(st.feed(&vocab, &set, &[0], &mut out).unwrap(), 0);
        st.finish(&set, &mut out).unwrap();
        assert!(st.feed(&vocab, &set, &[0], &mut out).unwrap_err().is_finished());
        st.reset(&set);
        assert_eq!(st.stop_token(), None);
        assert_eq!(st.feed(&vocab, &set, &[0, 1, 0], &mut out).unwrap(), 1);
        assert_eq!(st.status(), Status::Stopped(0));
    }

    use crate::matcher::{StopKind, StopSpec};

    fn literal(s: &[u8], include: bool) -> StopSpec<'_> {
        StopSpec { kind: StopKind::Literal(s), include }
    }

    fn regex(p: &str, include: bool) -> StopSpec<'_> {
        StopSpec { kind: StopKind::Regex(p, None), include }
    }

    /// Feeds `calls` to a composed stream (then `finish`): per call the text and the released
    /// count, and the final status with the matched text.
    fn run_composed(
        m: &Matcher,
        stop_ids: &[i64],
        calls: &[&[i64]],
    ) -> (Vec<(String, usize)>, Status, String, Option<i64>) {
        let vocab = vocab(false);
        let mut st = TokenStream::composed(&vocab, m, false, true, stop_ids).unwrap();
        let mut got = Vec::new();
        for ids in calls {
            let mut out = Vec::new();
            let n = st.feed(&vocab, m, ids, &mut out).unwrap();
            got.push((String::from_utf8(out).unwrap(), n));
        }
        let mut out = Vec::new();
        let n = st.finish(m, &mut out).unwrap();
        got.push((String::from_utf8(out).unwrap(), n));
        let matched = String::from_utf8(st.matcher().stop_sequence(m).to_vec()).unwrap();
        (got, st.status(), matched, st.stop_token())
    }

    #[test]
    #[allow(clippy::type_complexity, reason = "a table of literal cases")]
    fn composed_released_table() {
        let word_end = [regex(r"ab\b", false)];
        let word_end_on = [regex(r"ab\b", true)];
        let per_stop = [literal(b"</a>", true), literal(b"b", false)];
        let at_end = [regex("b$", false)];
        // (stops, skip, stop ids, calls, (text, released) per call then finish, status, matched)
        let cases: &[(
            &[StopSpec<'_>],
            &[(&[u8], &[u8])],
            &[i64],
            &[&[i64]],
            &[(&str, usize)],
            Status,
            &str,
        )] = &[
            // A regex settled by the next token: the tokens holding the match are not
            // released (none of their text was emitted); the one settling it is after the cut.
            (
                &word_end,
                &[],
                &[],
                &[&[0], &[1], &[19]],
                &[("", 0), ("", 0), ("", 0), ("", 0)],
                Status::Stopped(0),
                "ab",
            ),
            // Its flag on: nothing is held, each token is released as it comes.
            (
                &word_end_on,
                &[],
                &[],
                &[&[0], &[1], &[19]],
                &[("a", 1), ("b", 1), ("", 0), ("", 0)],
                Status::Stopped(0),
                "ab",
            ),
            // A special token between the match and the character settling it sits at the
            // cut: released with the flag on (all the text before it was emitted), not without.
            (
                &word_end_on,
                &[],
                &[],
                &[&[0, 1, 14, 19, 0]],
                &[("ab", 3), ("", 0)],
                Status::Stopped(0),
                "ab",
            ),
            (
                &word_end,
                &[],
                &[],
                &[&[0, 1, 14, 19, 0]],
                &[("", 0), ("", 0)],
                Status::Stopped(0),
                "ab",
            ),
            // `finish` settles it: the stop fires there, and releases nothing more.
            (&word_end, &[], &[], &[&[19, 0, 1]], &[(" ", 1), ("", 0)], Status::Stopped(0), "ab"),
            (&at_end, &[], &[], &[&[0, 1]], &[("a", 1), ("", 0)], Status::Stopped(0), "b"),
            (&at_end, &[], &[], &[&[1, 0]], &[("ba", 2), ("", 0)], Status::Finished, ""),
            // Per-stop include: the winner's flag decides the cut and the released tokens.
            (
                &per_stop,
                &[],
                &[],
                &[&[0, 4, 5, 1]],
                &[("a</a>", 3), ("", 0)],
                Status::Stopped(0),
                "</a>",
            ),
            (
                &per_stop,
                &[],
                &[],
                &[&[0, 4, 1, 5]],
                &[("a</", 2), ("", 0)],
                Status::Stopped(1),
                "b",
            ),
            // A skip region: nothing inside it is held or matched.
            (
                &[literal(b"a", false)],
                &[(b"<", b">")],
                &[],
                &[&[2, 0, 5], &[0]],
                &[("<aa>", 3), ("", 0), ("", 0)],
                Status::Stopped(0),
                "a",
            ),
            // A stop token ends the text as `finish` would: the regex it settles came first.
            (
                &word_end,
                &[],
                &[14],
                &[&[0, 1, 14, 0]],
                &[("", 0), ("", 0)],
                Status::Stopped(0),
                "ab",
            ),
            (&word_end, &[], &[14], &[&[0, 14, 1]], &[("a", 2), ("", 0)], Status::Finished, ""),
        ];
        for (stops, skip, stop_ids, calls, want, status, matched) in cases {
            let m = Matcher::new(stops, None, skip).unwrap();
            let (got, st, seq, _) = run_composed(&m, stop_ids, calls);
            let want: Vec<(String, usize)> =
                want.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
            assert_eq!(got, want, "{stops:?} {calls:?}");
            assert_eq!((st, seq.as_str()), (*status, *matched), "{stops:?} {calls:?}");
        }
    }

    #[test]
    fn composed_stop_tokens() {
        let m = Matcher::new(&[regex(r"ab\b", false)], None, &[]).unwrap();
        // Nothing pending: the stream ends as a stop token.
        let (_, st, _, token) = run_composed(&m, &[14], &[&[0, 14, 1]]);
        assert_eq!((st, token), (Status::Finished, Some(14)));
        // A match the end of the text settles wins over the stop token.
        let (_, st, _, token) = run_composed(&m, &[14], &[&[0, 1, 14, 0]]);
        assert_eq!((st, token), (Status::Stopped(0), None));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A composed list of literal stops (one include flag for all, no regions) behaves
        /// exactly as the literal path, call by call: text, released counts, errors (which
        /// consume nothing), held text and state.
        #[test]
        fn composed_literals_match_the_literal_path(
            stops in prop::collection::vec(stop_word(), 0..4),
            include in any::<bool>(),
            replace in any::<bool>(),
            strip in any::<bool>(),
            stop_ids in prop::collection::vec(prop::sample::select(vec![1i64, 4, 8, 13, 14, 11]), 0..2),
            calls in calls(),
        ) {
            let vocab = vocab(strip);
            let set = StopSet::new(&stops).unwrap();
            let specs: Vec<StopSpec<'_>> = stops.iter().map(|s| literal(s, include)).collect();
            let m = Matcher::new(&specs, None, &[]).unwrap();
            let mut lit = TokenStream::new(&vocab, include, replace, &stop_ids).unwrap();
            let mut com = TokenStream::composed(&vocab, &m, include, replace, &stop_ids).unwrap();
            for call in &calls {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let (ra, rb) = match call {
                    Some(ids) => (lit.feed(&vocab, &set, ids, &mut a), com.feed(&vocab, &m, ids, &mut b)),
                    None => (lit.finish(&set, &mut a), com.finish(&m, &mut b)),
                };
                prop_assert_eq!(ra.is_ok(), rb.is_ok(), "{:?}", call);
                if let (Ok(x), Ok(y)) = (&ra, &rb) {
                    prop_assert_eq!(x, y, "released after {:?}", call);
                }
                prop_assert_eq!(&a, &b, "text after {:?}", call);
                prop_assert_eq!(lit.held(&set), com.held(&m));
                prop_assert_eq!(lit.tail(), com.tail());
                prop_assert_eq!(
                    (lit.status(), lit.stop_token(), lit.is_closed(), lit.unreleased()),
                    (com.status(), com.stop_token(), com.is_closed(), com.unreleased())
                );
            }
        }
    }

    /// A batch as `(stream, ids)` entries.
    type Entries<'a> = &'a [(usize, Vec<i64>)];

    /// Streams of each kind for the batch tests: literal (replace), composed (replace),
    /// literal (strict).
    fn batch_streams(v: &Vocab) -> Vec<AnyTokenStream> {
        let spec = StopSpec { kind: StopKind::Literal(b"</a>"), include: false };
        let m = Arc::new(Matcher::new(&[spec], None, &[]).unwrap());
        vec![
            AnyTokenStream::literal(TokenStream::new(v, false, true, &[]).unwrap()),
            AnyTokenStream::composed(v, m, false, true, &[]).unwrap(),
            AnyTokenStream::literal(TokenStream::new(v, false, false, &[]).unwrap()),
        ]
    }

    /// Runs `batch` (`(stream, ids)` entries) through [`feed_batch`]: each entry's text, or the
    /// failing entry's index.
    fn run_batch(
        v: &Vocab,
        set: &StopSet,
        states: &mut [AnyTokenStream],
        batch: &[(usize, Vec<i64>)],
        safe: bool,
    ) -> Result<Vec<(Vec<u8>, usize)>, usize> {
        let flat: Vec<i64> = batch.iter().flat_map(|(_, ids)| ids.iter().copied()).collect();
        let mut start = 0;
        let mut entries: Vec<BatchEntry<'_>> = batch
            .iter()
            .map(|(slot, ids)| {
                start += ids.len();
                BatchEntry {
                    vocab: v,
                    set,
                    slot: *slot,
                    ids: start - ids.len()..start,
                    out: 0..0,
                    fed: Fed { released: 0, whole: false },
                }
            })
            .collect();
        let mut refs: Vec<&mut AnyTokenStream> = states.iter_mut().collect();
        let out = feed_batch(&mut entries, &flat, &mut refs, safe).map_err(|(i, _)| i)?;
        // A whole step appends nothing: its text is the token's own.
        let text = |e: &BatchEntry<'_>| match flat[e.ids.clone()] {
            [id] if e.fed.whole => v.whole(id).unwrap().to_vec(),
            _ => out[e.out.clone()].to_vec(),
        };
        Ok(entries.iter().map(|e| (text(e), e.fed.released)).collect())
    }

    /// The batch transaction: each entry gives what feeding its stream alone gives (a stream
    /// given twice takes its entries in order), on the safe path and the checked one; an entry
    /// that fails names itself and leaves every stream as it was.
    #[test]
    fn feed_batch_is_all_or_nothing() {
        let v = vocab(false);
        let set = StopSet::new(["</a>"]).unwrap();
        let alone = |states: &mut [AnyTokenStream], batch: &[(usize, Vec<i64>)]| {
            let mut got = Vec::new();
            for (slot, ids) in batch {
                let mut out = Vec::new();
                let n = states[*slot].feed(&v, &set, ids, &mut out).unwrap();
                got.push((out, n));
            }
            got
        };
        let ok: &[Entries<'_>] = &[
            &[(0, vec![4, 5]), (1, vec![4, 5]), (2, vec![0, 1])],
            &[(0, vec![4]), (1, vec![0, 2, 3]), (0, vec![5, 1]), (2, vec![6])],
            &[(2, vec![7]), (2, vec![8, 0]), (1, vec![13, 14, 0])],
        ];
        for batch in ok {
            for safe in [false, true] {
                // The safe path is only for batches that cannot fail: one entry per stream, none
                // of them strict.
                let once = batch.iter().map(|e| e.0).collect::<std::collections::HashSet<_>>();
                if safe && (once.len() != batch.len() || batch.iter().any(|e| e.0 == 2)) {
                    continue;
                }
                let mut want_states = batch_streams(&v);
                let want = alone(&mut want_states, batch);
                let mut states = batch_streams(&v);
                let got = run_batch(&v, &set, &mut states, batch, safe).unwrap();
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.0, w.0, "{batch:?}");
                    assert_eq!(g.1, w.1, "{batch:?}");
                }
                assert_eq!(format!("{states:?}"), format!("{want_states:?}"), "{batch:?}");
            }
        }
        // A hole, an id past the end, an invalid byte in strict mode: nothing changes.
        let failing: &[(Entries<'_>, usize)] = &[
            (&[(0, vec![0]), (1, vec![15]), (2, vec![0])], 1),
            (&[(0, vec![4]), (1, vec![0]), (0, vec![END])], 2),
            (&[(0, vec![0]), (2, vec![0, 11, 0]), (1, vec![4])], 1),
        ];
        for (batch, bad) in failing {
            let mut states = batch_streams(&v);
            run_batch(&v, &set, &mut states, &[(0, vec![0, 4]), (1, vec![2])], false).unwrap();
            let before = format!("{states:?}");
            assert_eq!(run_batch(&v, &set, &mut states, batch, false), Err(*bad), "{batch:?}");
            assert_eq!(format!("{states:?}"), before, "{batch:?}");
        }
        // A finished stream cannot be fed: the stream fed before it in the batch is unchanged.
        let mut states = batch_streams(&v);
        states[1].finish(&set, &mut Vec::new()).unwrap();
        let before = format!("{states:?}");
        assert_eq!(run_batch(&v, &set, &mut states, &[(0, vec![0]), (1, vec![0])], false), Err(1));
        assert_eq!(format!("{states:?}"), before);
    }
}
