//! Stop sequences for streaming text: exact, incremental, with minimal holdback.
//!
//! Text arrives in chunks. A compiled stop list ([`CompiledStops`], immutable and shared) and
//! a small per-stream state ([`Filter`]) decide after every chunk how much of the text is
//! certain to be output:
//!
//! * the stop that fires is the one ending earliest in the text; among stops ending at the same
//!   place the longest wins, then the first listed;
//! * the output is cut right before that stop (or right after it, with `include_stop`);
//! * until then, exactly the longest suffix of the text that is a proper prefix of some stop is
//!   held back: emitting less would stall the client, emitting more would leak part of a stop.
//!
//! The answer never depends on how the text was split into chunks.
//!
//! ```
//! use stopstream::{CompiledStops, Filter, Status};
//!
//! // Compiled once and cached: a gateway builds a filter per request from the same list.
//! let stops = CompiledStops::literal(&["</answer>"]).unwrap();
//! // Decoded text (not bytes), the stop itself left out, strict decoding.
//! let mut filter = Filter::new(&stops, false, false, false);
//! let mut out = Vec::new();
//! for chunk in ["Hello </ans", "wer> tail"] {
//!     let emit = filter.feed(chunk.as_bytes()).unwrap();
//!     // `head` is held text released by this chunk, `bytes` the rest of the output.
//!     out.extend_from_slice(emit.head);
//!     out.extend_from_slice(emit.bytes);
//! }
//! out.extend_from_slice(filter.finish().unwrap());
//! assert_eq!(out, b"Hello ");
//! assert_eq!(filter.status(), Status::Stopped(0));
//! ```
//!
//! The pieces:
//!
//! * [`CompiledStops`] is either kind of list: plain strings ([`CompiledStops::literal`], the
//!   literal automaton, [`LiteralStops`]) or stops with their own include flags, regex stops and
//!   skip regions ([`CompiledStops::composed`], the [`Matcher`] built from [`StopSpec`]s).
//! * [`Filter`] is the one stream type over either kind, for decoded text or raw UTF-8 bytes
//!   split anywhere. Under it are the per-kind streams, usable on their own: [`TextStream`]
//!   and [`ByteStream`] over a [`LiteralStops`], [`MatchStream`] over a [`Matcher`].
//! * Serving engines hold token ids rather than text: a [`Vocab`] and a [`TokenStream`] decode
//!   ids and match in one pass, and report how many input tokens the emitted text covers, so
//!   that text, ids and logprobs stay aligned. A [`TokenDecoder`] reads the per-token bytes of
//!   a Hugging Face `tokenizers` vocabulary from the tokenizer's own JSON.
//! * [`sse`] parses Server-Sent Events bodies and finds and splices the text of provider
//!   events.
//!
//! # Performance choices
//!
//! * Per chunk the work is one pass of a byte-class DFA (one table load per byte) whatever the
//!   number of stops; no per-chunk allocation when the chunk passes through whole.
//! * Per-stream state is a state id plus a status (and up to 3 carried bytes for raw input): the
//!   held-back text is read out of the stop it is a prefix of, never buffered.
//! * Stop lists are compiled once and shared ([`CompiledStops::literal`]), because a gateway
//!   builds a filter per request, usually with the same few stops.
//! * Long inputs (64 bytes or more) skip ahead with `memchr` to up to three rare bytes that
//!   every stop contains, then run the automaton from the earliest position a stop could start
//!   at; without such bytes they take a plain table walk. Both keep the exact winner and the
//!   minimal holdback, and run at least as fast as the `aho-corasick` crate on the same bytes
//!   (`rust/examples/throughput.rs`).

// `unsafe` appears only for the Python bindings, each block with its safety argument: their
// try-lock (`lock.rs`); the type slots, finalizers and the spare awaitable's reuse test
// (`py/ffi.rs`, `py/aio/slots.rs`); the collector's walks, which take a state lock without a
// `Python` token; and calls of CPython's C API where PyO3 offers no safe path as fast, such as
// reading and building a `str` in place (`py/convert.rs`), `PyIter_Send` and the type checks of
// `await` (`py/aio/awaits.rs`, `py/ffi.rs`), `PyIter_Next` (`py/ffi.rs`), and list and int
// access on the batch path (`py/tokens/`).
#![deny(unsafe_code)]

mod automaton;
mod byte_stream;
mod byteset;
mod compiled;
mod decoder;
mod error;
mod filter;
mod literal_state;
mod literal_stops;
mod matcher;
mod prefilter;
mod regex;
mod region;
pub mod sse;
mod tokens;
mod utf8;

// The bindings' own parts of the core: the lifecycle policy and its drivers, the published
// (pulled) stream, the try-lock and the recent-values ring (the token batch path is
// `tokens/batch.rs`). Built only with the bindings (and for the crate's tests), so that the
// engine's API is all there is otherwise.
#[cfg(any(feature = "python", feature = "host"))]
#[doc(hidden)]
pub mod host;
#[cfg(any(feature = "python", test))]
mod lifecycle;
#[cfg(any(feature = "python", test))]
mod lock;
#[cfg(any(feature = "python", test))]
mod published;
#[cfg(feature = "python")]
mod py;
#[cfg(any(feature = "python", test))]
mod recent;

pub use crate::byte_stream::{ByteOut, ByteStream, TextMatcher};
pub use crate::compiled::{CompiledStops, Fired};
pub use crate::decoder::{TokenDecoder, TokenizerJson};
pub use crate::error::{DecodeError, Error};
pub use crate::filter::{Detail, Filter, Output, Report, StopReport};
pub use crate::literal_state::{Emit, Status, TextStream};
pub use crate::literal_stops::LiteralStops;
pub use crate::matcher::{regex_max_len, MatchStream, Matcher, StopKind, StopSpec};
pub use crate::tokens::{Fed, Token, TokenMatcher, TokenStream, Vocab};

/// The literal automaton's raw step, for callers that walk a [`LiteralStops`] themselves with
/// [`LiteralStops::scan`] (the comparison against `aho-corasick` in `rust/examples/automaton.rs`).
/// Plumbing: the streams ([`TextStream`], [`ByteStream`]) do this walk for you.
pub mod raw {
    pub use crate::automaton::{Hit, Step};
}
