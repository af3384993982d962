//! Token streams over either kind of stop list ([`AnyTokenStream`]) and the batch feed
//! ([`feed_batch`]): the bindings' token filter, one stream or a whole batch per call.

// Without the bindings this is built only for its own tests, which leave parts of it unused.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::ops::{DerefMut, Range};
use std::sync::Arc;

use super::{Fed, TokenStream, Vocab};
use crate::compiled::CompiledStops;
use crate::error::Error;
use crate::filter::{Detail, StopReport};
use crate::literal_state::Status;
use crate::literal_stops::LiteralStops;
use crate::matcher::{MatchStream, Matcher};

/// A token stream over either kind of stop list: the literal [`TokenStream`], or the composed
/// matcher of contract §6 (`Stop` and `Regex` items, skip regions) over the same token
/// bookkeeping.
///
/// A struct rather than an enum: the literal stream is a plain field, so a batch step reaches it
/// with no dispatch per stream (an enum's match there cost about 7 instructions more per stream
/// of a 256-stream step, callgrind). The composed stream is boxed: its state is
/// several times the literal one's, and the streams of a batch stay as small as they are.
#[derive(Clone, Debug)]
pub struct AnyTokenStream {
    /// The literal stream; unused (left fresh) when `composed` is set.
    pub literal: TokenStream,
    composed: Option<Box<ComposedTokens>>,
}

/// A composed stream with the matcher it runs against.
#[derive(Clone, Debug)]
struct ComposedTokens {
    matcher: Arc<Matcher>,
    stream: TokenStream<MatchStream>,
}

impl ComposedTokens {
    /// [`TokenStream::feed_id`], out of line: the literal step's callers stay small.
    #[inline(never)]
    fn feed_id(&mut self, vocab: &Vocab, id: i64, out: &mut Vec<u8>) -> Result<Fed, Error> {
        self.stream.feed_id(vocab, &self.matcher, id, out)
    }
}

impl AnyTokenStream {
    /// A stream on the literal path (its list is the `set` every call takes).
    pub fn literal(stream: TokenStream) -> AnyTokenStream {
        AnyTokenStream { literal: stream, composed: None }
    }

    /// A fresh stream over a compiled list: the literal stream for a literal list, the composed
    /// matcher for the others (`Stop` or `Regex` items, skip regions), as the text and byte
    /// filters run them.
    pub fn new(
        vocab: &Vocab,
        stops: &CompiledStops,
        include_stop: bool,
        replace: bool,
        stop_ids: &[i64],
    ) -> Result<AnyTokenStream, Error> {
        match stops.matcher() {
            Some(m) => Self::composed(vocab, Arc::clone(m), include_stop, replace, stop_ids),
            None => TokenStream::new(vocab, include_stop, replace, stop_ids).map(Self::literal),
        }
    }

    /// A stream over the composed `matcher` (the `set` the calls take is then unused).
    pub fn composed(
        vocab: &Vocab,
        matcher: Arc<Matcher>,
        include_stop: bool,
        replace: bool,
        stop_ids: &[i64],
    ) -> Result<AnyTokenStream, Error> {
        let stream = TokenStream::composed(vocab, &matcher, include_stop, replace, stop_ids)?;
        let literal = TokenStream::new(vocab, include_stop, replace, stop_ids)?;
        Ok(AnyTokenStream { literal, composed: Some(Box::new(ComposedTokens { matcher, stream })) })
    }

    /// Whether the stream runs the composed matcher.
    pub fn is_composed(&self) -> bool {
        self.composed.is_some()
    }

    /// [`TokenStream::feed_id`]; `set` is the literal list (unused by a composed stream).
    #[allow(
        clippy::inline_always,
        reason = "the literal step inlines into the bindings' `feed`: left to itself the compiler calls this"
    )]
    #[inline(always)]
    pub fn feed_id(
        &mut self,
        vocab: &Vocab,
        set: &LiteralStops,
        id: i64,
        out: &mut Vec<u8>,
    ) -> Result<Fed, Error> {
        match &mut self.composed {
            None => self.literal.feed_id(vocab, set, id, out),
            Some(c) => c.feed_id(vocab, id, out),
        }
    }

    /// [`TokenStream::feed`].
    pub fn feed(
        &mut self,
        vocab: &Vocab,
        set: &LiteralStops,
        ids: &[i64],
        out: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        match &mut self.composed {
            None => self.literal.feed(vocab, set, ids, out),
            Some(c) => c.stream.feed(vocab, &c.matcher, ids, out),
        }
    }

    /// [`TokenStream::finish`].
    pub fn finish(&mut self, set: &LiteralStops, out: &mut Vec<u8>) -> Result<usize, Error> {
        match &mut self.composed {
            None => self.literal.finish(set, out),
            Some(c) => c.stream.finish(&c.matcher, out),
        }
    }

    /// [`TokenStream::reset`].
    pub fn reset(&mut self, set: &LiteralStops) {
        match &mut self.composed {
            None => self.literal.reset(set),
            Some(c) => c.stream.reset(&c.matcher),
        }
    }

    /// Whether a batch's usual step can feed the literal stream directly: on the literal path,
    /// and [`AnyTokenStream::cannot_fail`] but for the ids, which the step checks apart.
    #[inline]
    pub fn engine_ready(&self) -> bool {
        self.composed.is_none() && !self.literal.is_finished() && self.literal.replace()
    }

    /// Whether feeding `ids` cannot fail: the stream is not finished (one a stop ended takes
    /// ids and does nothing), in replace mode, and every id is in `vocab`. A batch feeds such a
    /// stream in place ([`feed_batch`]) unless it is given twice; any other first runs on a
    /// copy, so that an error changes no stream.
    #[inline]
    pub fn cannot_fail(&self, vocab: &Vocab, ids: &[i64]) -> bool {
        self.replace() && !self.is_finished() && ids.iter().all(|&id| vocab.get(id).is_some())
    }

    /// [`TokenStream::status`].
    #[inline]
    pub fn status(&self) -> Status {
        match &self.composed {
            None => self.literal.status(),
            Some(c) => c.stream.status(),
        }
    }

    /// [`TokenStream::stop_token`].
    pub fn stop_token(&self) -> Option<i64> {
        match &self.composed {
            None => self.literal.stop_token(),
            Some(c) => c.stream.stop_token(),
        }
    }

    /// Why the text ended, as the contract's `stop_reason` names it (§7): a stop token first,
    /// then a stop sequence; `"end"` once finished without either; `None` while it goes on.
    pub fn stop_reason(&self) -> Option<&'static str> {
        if self.stop_token().is_some() {
            return Some("stop_token");
        }
        match self.status() {
            Status::Open if self.is_finished() => Some("end"),
            status => status.reason(),
        }
    }

    /// [`TokenStream::is_finished`].
    #[inline]
    pub fn is_finished(&self) -> bool {
        match &self.composed {
            None => self.literal.is_finished(),
            Some(c) => c.stream.is_finished(),
        }
    }

    /// [`TokenStream::replace`].
    #[inline]
    pub fn replace(&self) -> bool {
        match &self.composed {
            None => self.literal.replace(),
            Some(c) => c.stream.replace(),
        }
    }

    /// [`TokenStream::include_stop`].
    pub fn include_stop(&self) -> bool {
        match &self.composed {
            None => self.literal.include_stop(),
            Some(c) => c.stream.include_stop(),
        }
    }

    /// [`TokenStream::stop_ids`].
    pub fn stop_ids(&self) -> &[i64] {
        match &self.composed {
            None => self.literal.stop_ids(),
            Some(c) => c.stream.stop_ids(),
        }
    }

    /// The held text.
    pub fn held<'a>(&'a self, set: &'a LiteralStops) -> &'a [u8] {
        match &self.composed {
            None => self.literal.held(set),
            Some(c) => c.stream.held(&c.matcher),
        }
    }

    /// The text the stop that fired matched, or `None` on the literal path (which reports the
    /// list's item).
    pub fn matched(&self) -> Option<&[u8]> {
        self.composed.as_ref().map(|c| c.stream.matcher().stop_sequence(&c.matcher))
    }

    /// What the stream tells of its stop (see [`crate::Filter::stop_report`]): stopped by a
    /// stop token too, and its reason first; `set` is the literal list it runs over.
    #[must_use]
    pub fn stop_report(&self, set: &LiteralStops, detail: Detail) -> StopReport {
        let mut report = StopReport::of(self.status());
        match detail {
            Detail::Status => {}
            Detail::Matched => report.matched = self.matched().map(<[u8]>::to_vec),
            Detail::Pending => report.pending = self.held(set).to_vec(),
        }
        // The matched text of a stop sequence, not of a stop token.
        report.matched = report.matched.filter(|_| report.stopped);
        report.stopped |= self.stop_token().is_some();
        report.reason = self.stop_reason();
        report
    }
}

/// One stream's share of a batch ([`feed_batch`]).
#[derive(Clone, Debug)]
pub struct BatchEntry<'a> {
    /// Its vocabulary.
    pub vocab: &'a Vocab,
    /// Its literal stop list (unused by a composed stream).
    pub set: &'a LiteralStops,
    /// Index of its stream in the batch's states (a stream given twice shares one).
    pub slot: usize,
    /// Its ids in the batch's flat id list.
    pub ids: Range<usize>,
    /// Set by the batch: where its text is in the batch's output.
    pub out: Range<usize>,
    /// Set by the batch: what the feed did.
    pub fed: Fed,
}

/// Feeds many streams in one call, all or nothing: entry `i` feeds `flat[entries[i].ids]` to
/// `states[entries[i].slot]`, and fills the entry's `out` (a range of the returned text) and
/// `fed`. An error names the first failing entry, and leaves every state as it was.
///
/// `safe` says that no stream can fail (the caller checked while locking: each is given once
/// and [`AnyTokenStream::cannot_fail`]): then the batch is one pass
/// over the real states. Otherwise only the streams that can fail run on copies first; their
/// outputs are kept, and the copies become the real states once every entry has succeeded.
pub fn feed_batch<S: DerefMut<Target = AnyTokenStream>>(
    entries: &mut [BatchEntry<'_>],
    flat: &[i64],
    states: &mut [S],
    safe: bool,
) -> Result<Vec<u8>, (usize, Error)> {
    let mut out = Vec::with_capacity(flat.len() * 8);
    if safe {
        for (i, it) in entries.iter_mut().enumerate() {
            let start = out.len();
            it.fed = feed_entry(&mut states[it.slot], it, flat, &mut out).map_err(|e| (i, e))?;
            it.out = start..out.len();
        }
        return Ok(out);
    }
    // A stream given twice: its entries depend on each other, so they all run on a copy.
    let mut uses = vec![0u32; if states.len() < entries.len() { states.len() } else { 0 }];
    if !uses.is_empty() {
        for it in entries.iter() {
            uses[it.slot] += 1;
        }
    }
    let risky = |it: &BatchEntry<'_>, st: &AnyTokenStream| {
        uses.get(it.slot).is_some_and(|&n| n > 1)
            || !st.cannot_fail(it.vocab, &flat[it.ids.clone()])
    };
    let mut shadows: Vec<Option<AnyTokenStream>> = Vec::new();
    for it in entries.iter() {
        if shadows.get(it.slot).is_none_or(Option::is_none) && risky(it, &states[it.slot]) {
            if shadows.is_empty() {
                shadows.resize(states.len(), None);
            }
            shadows[it.slot] = Some((*states[it.slot]).clone());
        }
    }
    if !shadows.is_empty() {
        for (i, it) in entries.iter_mut().enumerate() {
            let Some(st) = shadows[it.slot].as_mut() else { continue };
            let start = out.len();
            it.fed = feed_entry(st, it, flat, &mut out).map_err(|e| (i, e))?;
            it.out = start..out.len();
        }
    }
    for (i, it) in entries.iter_mut().enumerate() {
        if shadows.get(it.slot).is_some_and(Option::is_some) {
            continue;
        }
        let start = out.len();
        it.fed = feed_entry(&mut states[it.slot], it, flat, &mut out).map_err(|e| (i, e))?;
        it.out = start..out.len();
    }
    for (slot, shadow) in shadows.into_iter().enumerate() {
        if let Some(st) = shadow {
            *states[slot] = st;
        }
    }
    Ok(out)
}

/// Feeds one batch entry to `st`.
#[inline]
fn feed_entry(
    st: &mut AnyTokenStream,
    it: &BatchEntry<'_>,
    flat: &[i64],
    out: &mut Vec<u8>,
) -> Result<Fed, Error> {
    match flat[it.ids.clone()] {
        [id] => st.feed_id(it.vocab, it.set, id, out),
        ref ids => Ok(Fed { released: st.feed(it.vocab, it.set, ids, out)?, whole: false }),
    }
}
