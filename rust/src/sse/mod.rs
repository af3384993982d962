//! Server-Sent Events bodies: block parsing, locating the text field of a provider event, and
//! splicing a changed text back into the event's bytes.
//!
//! Four pieces, all free of Python:
//!
//! * [`Parser`]: the WHATWG line rules over bytes split anywhere. Events end at a blank line;
//!   lines end in `\r\n`, `\n` or `\r` (a trailing `\r` is held until the next byte shows
//!   whether `\n` follows); a leading byte order mark is ignored; several `data:` lines are one
//!   value; a block the body did not finish is never dispatched.
//! * [`Shape`] and [`Scanner`]: where the text sits in one event's JSON, given as data (a table
//!   of fields, [`CHAT`] and [`MESSAGES`]), so that a provider's event shape is added as a table,
//!   not as code. The scan answers "the common case, here are the texts and their byte spans",
//!   "not this kind of event" (a discriminator such as `type` differs: parsing stops there), or
//!   "not the common case" (anything else: the caller hands the event to the full adapter).
//! * [`escape_json_str`] and [`splice`]: a changed text replaces only its string token; every
//!   other byte of the event is kept.
//! * `Common` (the bindings' part, not exported): the common event (text deltas of open streams
//!   that fire no stop) decided over the caller's filters (`Filters`); anything else is the
//!   adapter's.
//!
//! JSON is read with pydantic's `jiter` through its iterator API (`peek`, `next_key`,
//! `known_str`, `next_skip`): it walks a shape given as data, gives byte offsets as it goes, and
//! decodes a string only when asked. `serde_json` (the other candidate; both are well kept)
//! needs a derive (or a hand-written visitor) per shape, finds offsets by pointer arithmetic on
//! borrowed `RawValue`s and decodes the text a second time. On the benchmark's real Chat chunks
//! (`examples/json_scan.rs`, 4,002 cl100k-token events, best of 15, on a loaded 2-core
//! machine) the two are level: `jiter` 405 to 420 ns per event, `serde_json` 375 to 410 ns;
//! the table-driven walk decides.

// The common event over the bindings' filters: used only by the bindings' SSE stage.
#[cfg(any(feature = "python", test))]
mod common;
mod parser;
mod shape;
mod splice;

#[cfg(feature = "python")]
pub(crate) use common::{Common, Filters, Handled, Open, Provider, Unseen};
pub use parser::{Line, Parser};
pub use shape::{Field, Found, Rule, Scan, Scanner, Shape, CHAT, GEMINI, MESSAGES, RESPONSES};
pub use splice::{escape_json_str, splice};
