//! Token ids in (contract §7): `Vocab`, `TokenStopFilter`, `TokenPiece` and `feed_batch`.
//!
//! Ids are converted to `i64` under the GIL (a Python int outside that range saturates, so it is
//! still "not in the vocabulary", and its message quotes the int as given); the core does the
//! rest. An id list may also be one plain `int`, the engine's usual step. `feed_batch` converts
//! every stream's ids while taking its filter's lock, does the Rust work (detached from the
//! interpreter), then builds the pieces.
//!
//! Stops of every kind (§6): a plain `str` list runs the literal token stream, anything else
//! (`Stop`, `Regex`, skip regions) the composed matcher through the same token bookkeeping
//! ([`crate::host::AnyTokenStream`]). The fast steps below are the literal path's; a composed filter
//! takes `feed_batch`'s general path.
//!
//! Performance choices (a step of 256 streams, one id each, `benches/tokens.py`; instruction
//! counts per stream from callgrind, since the 2-core machine is shared and noisy):
//! * the usual step (one id in, exactly its text out, one token released) returns a
//!   `TokenPiece` cached per token id; the core says when its output is exactly the token's
//!   bytes ([`crate::Fed`]), so that step copies and compares nothing;
//! * the core's own fast steps for that case (`TokenStream::feed_id`: a token none of whose
//!   bytes can start a stop, inlined into the caller, and one after held text);
//! * `feed_batch` of exact lists of plain ints takes its own path ([`engine_step`]): the lists
//!   are read in place, the result list is built in place, the piece cache is read while
//!   detached; with the core's steps a step costs 273 instructions per stream on
//!   `benches/tokens.py`'s corpus (about 10 µs of CPU time at 256 streams), where the general
//!   path, over lists of one id, takes 476;
//! * `feed(id)` takes an `int`, so the caller builds no list (88 against 92 ns per call for
//!   `[id]`, before counting the list the caller builds).
//!
//! A free list for `TokenPiece` measured no faster than CPython's allocator, and neither did
//! prefetching the next pass's ints, filter states, token bytes, piece cells and pieces (12.0
//! without against 12.2 µs a step with, runs alternated), so there is neither. What remains in a
//! step of 256 streams over varied ids is mostly memory latency: each id touches its `int`
//! object, its filter, its vocabulary entry and bytes, its piece cell and its piece (the
//! samples of `perf` sit on those loads), and the same step over one id costs about half as
//! much.
//!
//! One file per concern: `vocab` (`Vocab` and `TokenPiece`, with the piece cache), `filter`
//! (`TokenStopFilter`) and `batch` (`feed_batch`: reading the batch in, locking, and the
//! engine's usual step; the all-or-nothing transaction is the core's [`crate::host::feed_batch`]).
//! This file holds the id conversions and the error rules they share.

mod batch;
mod filter;
mod vocab;

pub(super) use batch::feed_batch;
pub(super) use filter::TokenStopFilter;
pub(super) use vocab::{tokenizer_tokens, TokenPiece, Vocab};

use pyo3::exceptions::{PyException, PyUnicodeDecodeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};

use super::errors::{map_error, wrong_type};
use crate::Error;

/// Ids as given, converted to `i64`, with the ints too large for it kept for error messages.
#[derive(Default)]
struct Ids {
    ids: Vec<i64>,
    huge: Vec<(usize, String)>,
}

impl Ids {
    /// Appends the ids of `obj` (an iterable of ints, or one int); `what` names it in messages
    /// (`"feed()"` for a feed's ids, which is also what a batch entry's errors quote).
    fn extend(&mut self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
        let feed = what == "feed()";
        let not_ids = |obj: &Bound<'_, PyAny>| {
            let verb = if feed { "takes" } else { "must be" };
            wrong_type(format_args!("{what} {verb} an int or an iterable of int"), obj)
        };
        let start = self.ids.len();
        let push = |this: &mut Ids, i: usize, item: &Bound<'_, PyAny>| -> PyResult<()> {
            if let Ok(v) = item.extract::<i64>() {
                this.ids.push(v);
                return Ok(());
            }
            // Not an `i64`: an int out of its range, an int-like (a NumPy integer) whose value
            // is one, or no id at all.
            let int = if item.is_instance_of::<PyInt>() {
                item.clone()
            } else if item.hasattr("__index__")? {
                // Its value as `operator.index` gives it (an error of `__index__` propagates).
                item.py().import("operator")?.call_method1("index", (item,))?
            } else {
                let place = if feed { String::new() } else { format!("{what}: ") };
                return Err(wrong_type(
                    format_args!("{place}token id at position {i} must be an int"),
                    item,
                ));
            };
            if let Ok(v) = int.extract::<i64>() {
                this.ids.push(v);
            } else {
                // Out of range: saturated, so that it is still "not in the vocabulary" (never
                // `OverflowError`), and kept as written for the message.
                let negative = int.lt(0i64)?;
                this.ids.push(if negative { i64::MIN } else { i64::MAX });
                this.huge.push((this.ids.len() - 1 - start, int.str()?.to_string()));
            }
            Ok(())
        };
        if obj.is_instance_of::<PyInt>() {
            // One id, as `feed(id)` and `feed_batch(filters, [id, ...])` take it.
            return push(self, 0, obj);
        }
        if let Ok(l) = obj.cast_exact::<PyList>() {
            self.ids.reserve(l.len());
            for (i, item) in l.iter().enumerate() {
                push(self, i, &item)?;
            }
        } else if let Ok(t) = obj.cast_exact::<PyTuple>() {
            self.ids.reserve(t.len());
            for (i, item) in t.iter().enumerate() {
                push(self, i, &item)?;
            }
        } else if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
            return Err(not_ids(obj));
        } else {
            let Ok(iter) = obj.try_iter() else {
                if obj.hasattr("__index__")? {
                    // One id of an int-like type (a NumPy integer).
                    return push(self, 0, obj);
                }
                return Err(not_ids(obj));
            };
            for (i, item) in iter.enumerate() {
                push(self, i, &item?)?;
            }
        }
        Ok(())
    }

    fn from(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Ids> {
        let mut ids = Ids::default();
        ids.extend(obj, what)?;
        Ok(ids)
    }

    /// The id at `position` (among those of one call starting at `start`) as the caller wrote it.
    fn show(&self, start: usize, position: usize) -> String {
        self.huge
            .iter()
            .find(|(p, _)| *p == position && start == 0)
            .map_or_else(|| self.ids[start + position].to_string(), |(_, s)| s.clone())
    }
}

/// The error for a bad id, or any other core error.
fn token_error(
    py: Python<'_>,
    e: &Error,
    shown: impl FnOnce(usize) -> String,
    size: usize,
) -> PyErr {
    match e.invalid_token() {
        Some((position, _)) => PyValueError::new_err(format!(
            "token id {} at position {position} is not in the vocabulary (ids 0..{size}, holes \
             excluded)",
            shown(position)
        )),
        None => map_error(py, e),
    }
}

/// The error of `feed_batch`'s entry `i`, from `err`, what feeding `filters[i]` alone with
/// `ids_per_filter[i]` raises: an exception of the same type whose message is prefixed
/// `ids_per_filter[i]: `, with `err` as its `__cause__`. A `UnicodeDecodeError` keeps its
/// encoding, object, start and end, and its reason is prefixed. An exception whose type cannot
/// be built from one message (a user's own type, from an iterable of ids that raised), or that
/// is no `Exception` (`KeyboardInterrupt`), propagates unchanged.
fn entry_error(py: Python<'_>, i: usize, err: PyErr) -> PyErr {
    let prefix = format!("ids_per_filter[{i}]: ");
    let value = err.value(py).clone().into_any();
    let ty = value.get_type();
    let built = if value.is_instance_of::<PyUnicodeDecodeError>() {
        (|| {
            let reason: String = value.getattr("reason")?.extract()?;
            ty.call1((
                value.getattr("encoding")?,
                value.getattr("object")?,
                value.getattr("start")?,
                value.getattr("end")?,
                format!("{prefix}{reason}"),
            ))
        })()
    } else if value.is_instance_of::<PyException>() {
        // The message as given (`KeyError`'s `str` is the repr of its key), else as shown.
        let args = value.getattr("args").and_then(|a| a.extract::<(String,)>());
        let msg = match args {
            Ok((msg,)) => Ok(msg),
            Err(_) => value.str().map(|m| m.to_string()),
        };
        msg.and_then(|msg| ty.call1((format!("{prefix}{msg}"),)))
    } else {
        return err;
    };
    match built {
        Ok(new) if new.is_exact_instance(&ty) => {
            let new = PyErr::from_value(new);
            new.set_cause(py, Some(err));
            new
        }
        _ => err,
    }
}

/// Up to this many ids per call are converted onto the stack.
const STACK_IDS: usize = 8;

/// The id of `obj` when it is one id the engine's usual way: an exact `int`, or an exact list
/// holding one, that fits `i64`. `None` sends the caller to the general conversion.
#[inline]
fn one_id(obj: &Bound<'_, PyAny>) -> Option<i64> {
    if let Ok(i) = obj.cast_exact::<PyInt>() {
        return exact_int(i);
    }
    let l = obj.cast_exact::<PyList>().ok()?;
    if l.len() != 1 {
        return None;
    }
    exact_int(l.get_item(0).ok()?.cast_exact::<PyInt>().ok()?)
}

/// The value of an exact `int` when it fits `i64`. `PyLong_AsLongLongAndOverflow` says so
/// without raising (and so without building an exception to throw away, as `extract` does for
/// a huge int), and no Python code runs.
#[inline]
#[allow(unsafe_code)]
fn exact_int(i: &Bound<'_, PyInt>) -> Option<i64> {
    let mut overflow = 0;
    // SAFETY: `i` is a live exact int.
    let v = unsafe { pyo3::ffi::PyLong_AsLongLongAndOverflow(i.as_ptr(), &raw mut overflow) };
    (overflow == 0).then_some(v)
}

/// Whether `obj` is an exact list or tuple of exact ints: reading it runs no Python code.
fn plain_ints(obj: &Bound<'_, PyAny>) -> bool {
    if let Ok(l) = obj.cast_exact::<PyList>() {
        return l.iter().all(|i| i.is_exact_instance_of::<PyInt>());
    }
    if let Ok(t) = obj.cast_exact::<PyTuple>() {
        return t.iter().all(|i| i.is_exact_instance_of::<PyInt>());
    }
    false
}

/// The ids of `obj` when it is a short exact list of ints that fit `i64`; `None` sends the
/// caller to the general conversion.
fn short_ids(obj: &Bound<'_, PyAny>, buf: &mut [i64; STACK_IDS]) -> Option<usize> {
    let l = obj.cast_exact::<PyList>().ok()?;
    let n = l.len();
    if n > STACK_IDS {
        return None;
    }
    for (slot, item) in buf.iter_mut().zip(l.iter()) {
        *slot = item.extract::<i64>().ok()?;
    }
    Some(n)
}
