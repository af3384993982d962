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
//!
//! The parts: the vocabulary (here), the matchers a token stream runs ([`TokenMatcher`], in
//! `matcher.rs`), the stream itself (`stream.rs`), and, for the bindings only, a stream over
//! either kind of list and the batch feed (`batch.rs`).

// The bindings' token filter: built only with them (and for the tests).
#[cfg(any(feature = "python", feature = "host", test))]
pub(crate) mod batch;
mod matcher;
mod stream;
#[cfg(test)]
mod tests;

use crate::byteset::{byte_set, HEAD};
use crate::error::Error;

pub use matcher::TokenMatcher;
pub use stream::{Fed, TokenStream};

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
