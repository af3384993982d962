//! What the bindings use of the core beyond the engine's API: the lifecycle policy and its
//! drivers, the published (pulled) stream, the filter's saved state, the token batch path and
//! the UTF-8 encoder of `str` code units. One place, so that the crate root stays the engine's
//! API and the bindings name these items the same way everywhere.

//!
//! With the `host` feature (the fuzz targets turn it on), the token batch path is public here,
//! so that the targets drive what the bindings call.

#[cfg(feature = "python")]
pub(crate) use crate::filter::Saved;
#[cfg(feature = "python")]
pub(crate) use crate::lifecycle::{aio, sync, Action, Lifecycle};
#[cfg(feature = "python")]
pub(crate) use crate::published::Published;
#[cfg(feature = "host")]
pub use crate::tokens::batch::{feed_batch, AnyTokenStream, BatchEntry};
#[cfg(not(feature = "host"))]
pub(crate) use crate::tokens::batch::{feed_batch, AnyTokenStream, BatchEntry};
#[cfg(feature = "python")]
pub(crate) use crate::utf8::encode_code_points;
