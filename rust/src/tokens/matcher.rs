//! The matchers a token stream runs its decoded text through: the literal [`TextStream`] and the
//! composed [`MatchStream`].

use crate::byte_stream::{ByteOut, ByteStream, TextMatcher};
use crate::byteset::HEAD;
use crate::literal_state::TextStream;
use crate::literal_stops::LiteralStops;
use crate::matcher::{MatchStream, Matcher};

/// A matcher over decoded text that a [`TokenStream`](super::TokenStream) can run: [`TextStream`] for a literal
/// stop list ([`LiteralStops`]), [`MatchStream`] for the stops and skip regions of contract §6
/// ([`Matcher`]). What a token stream needs of it beyond [`TextMatcher`]; the token-sized fast
/// steps ([`TokenStream::feed_plain`](super::TokenStream::feed_plain)) exist for the literal matcher only, whose state is a
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

    fn fresh(_: &LiteralStops, include_stop: bool) -> TextStream {
        TextStream::new(include_stop)
    }

    #[inline]
    fn held_text<'s>(&'s self, set: &'s LiteralStops) -> &'s [u8] {
        self.held(set)
    }

    // The literal steps below were inlined into their callers before there was a trait between
    // them; left to itself the compiler calls them (callgrind showed the call in a batch step).
    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn feed_chars(
        bytes: &mut ByteStream,
        set: &LiteralStops,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> ByteOut {
        bytes.feed_chars(set, text, out)
    }

    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn passes_set(bytes: &ByteStream, set: &LiteralStops, byte_set: [u64; 2]) -> bool {
        bytes.passes_set(set, byte_set)
    }

    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn passes_token(bytes: &ByteStream, set: &LiteralStops, text: &[u8], head: [u8; HEAD]) -> bool {
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
