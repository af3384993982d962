//! What the bindings use of the core beyond the engine's API: the lifecycle policy and its
//! drivers, the published (pulled) stream, the filter's saved state, the token batch path and
//! the UTF-8 encoder of `str` code units. One place, so that the crate root stays the engine's
//! API and the bindings name these items the same way everywhere.

pub(crate) use crate::batch::{feed_batch, AnyTokenStream, BatchEntry};
pub(crate) use crate::filter::Saved;
pub(crate) use crate::lifecycle::{drive, pull, Action, Lifecycle};
pub(crate) use crate::published::Published;
pub(crate) use crate::utf8::encode_code_points;
