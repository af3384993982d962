//! The per-chunk path of `wrap` (`StopStream.__next__` over the built-in filter) and of
//! `awrap`'s filter stage: pull (`wrap`), scan, and hand back the chunk itself or the part
//! released, with the least bookkeeping.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::convert::{bytes_out, chunk_utf8, joined_str};
use super::errors::map_error;
use super::ffi::pull;
use super::stream::{Mode, StreamState, SyncDriver};
use crate::{Action, Filter, Status};

impl SyncDriver {
    /// The per-chunk path of `wrap` over exact `str` or `bytes` chunks, the one a token stream
    /// takes for nearly every chunk: pull, scan, and hand back the chunk itself (or the released
    /// part). Anything else (a close request, a chunk of another kind or one the filter refuses,
    /// the upstream's end or error) goes to the core driver's `pulled` with what was pulled; a
    /// stop or a bad chunk goes to the lifecycle. Without the general path's bookkeeping, `wrap`
    /// over `str` costs 2.0–2.2× a bare generator per chunk with 4 stops (31 ns on the token
    /// corpus, `benches/compare.py`).
    pub(super) fn next_fast<'py>(
        &self,
        py: Python<'py>,
        st: &mut StreamState,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if !st.drive.life.wants_pull() {
            return self.with(py, st, |d, host| d.next(host)).map(|o| o.map(|o| o.into_bound(py)));
        }
        let action = match self.fast(py, st) {
            Fast::Out(out) => return Ok(Some(out)),
            Fast::Then(action) => action,
            Fast::Pulled(Pulled(pulled)) => {
                let pulled = pulled.map(|r| r.map(Bound::unbind));
                self.with(py, st, |d, host| d.pulled(host, Some(pulled)))
            }
        };
        self.with(py, st, |d, host| d.run(host, action)).map(|o| o.map(|o| o.into_bound(py)))
    }

    /// The fast path over the built-in filter and exact `str` (or, over bytes, `bytes`) chunks.
    fn fast<'py>(&self, py: Python<'py>, st: &mut StreamState) -> Fast<'py> {
        loop {
            let (Mode::BuiltIn(Some(f)), Some(upstream)) =
                (&mut st.feeding.mode, st.drive.iterator())
            else {
                return Fast::Then(Action::Pull);
            };
            let item = match self.fast_pull(py, upstream) {
                Ok(item) => item,
                Err(pulled) => return Fast::Pulled(pulled),
            };
            let life = &mut st.drive.life;
            let defer = |e| life.defer(e, |e, c| e.set_context(py, Some(c)));
            let closing = match feed_exact(py, f, &item, defer) {
                None | Some(Fed::Refused) => return Fast::Pulled(Pulled(Some(Ok(item)))),
                Some(Fed::Whole) => {
                    st.drive.take_position();
                    return Fast::Out(item);
                }
                Some(Fed::Out(out, status)) => {
                    st.drive.take_position();
                    (out, status != Status::Open)
                }
            };
            let life = &mut st.drive.life;
            match closing {
                (Ok(Some(out)), false) => return Fast::Out(out),
                (Ok(None), false) => {}
                (Ok(out), true) => return Fast::Then(life.fed(out.map(Bound::unbind), true)),
                (Err(err), _) => return Fast::Then(life.refused(err)),
            }
        }
    }

    /// The next item for the fast path; `Err` carries what goes to the core driver's `pulled`
    /// instead: the upstream's end or error, or an item that arrived with a close request.
    #[inline]
    fn fast_pull<'py>(
        &self,
        py: Python<'py>,
        upstream: &Py<PyAny>,
    ) -> Result<Bound<'py, PyAny>, Pulled<'py>> {
        match pull(py, upstream) {
            Some(Ok(item)) if !self.close_requested.load(Ordering::Acquire) => Ok(item),
            other => Err(Pulled(other)),
        }
    }
}

/// What [`feed_exact`] did with a chunk.
pub(super) enum Fed<'py> {
    /// It passes through whole, and the filter is as it was (open, nothing held).
    Whole,
    /// The filter refused it, and is as it was.
    Refused,
    /// Fed: the output (`None` when nothing is released), and the filter's status after.
    Out(PyResult<Option<Bound<'py, PyAny>>>, Status),
}

/// One exact `str` (or, over bytes, `bytes`) chunk through the built-in filter, the step of
/// `wrap`'s fast path and of `awrap`'s stage; `None` for any other item, or before the first,
/// which the general path takes. A decoding error owed after a stop goes to `defer`.
#[allow(
    clippy::inline_always,
    reason = "a call per chunk otherwise: 70 instructions of `awrap`'s 2,376 for a chunk that may start a stop (callgrind)"
)]
#[inline(always)]
pub(super) fn feed_exact<'py>(
    py: Python<'py>,
    f: &mut Filter,
    item: &Bound<'py, PyAny>,
    defer: impl FnOnce(PyErr),
) -> Option<Fed<'py>> {
    let mut stack = None;
    let bytes_stream = f.is_bytes();
    let bytes = if bytes_stream {
        Cow::Borrowed(item.cast_exact::<PyBytes>().ok()?.as_bytes())
    } else {
        chunk_utf8(item.cast_exact::<PyString>().ok()?, &mut stack).ok()?
    };
    // An empty chunk is fed (it releases nothing) rather than handed on.
    if !bytes.is_empty() && f.pass_whole(&bytes) {
        return Some(Fed::Whole);
    }
    let Ok(fed) = f.feed(&bytes) else { return Some(Fed::Refused) };
    let out = if fed.is_empty() {
        Ok(None)
    } else if fed.whole {
        Ok(Some(item.clone()))
    } else if bytes_stream {
        Ok(Some(bytes_out(py, item, fed).into_any()))
    } else {
        joined_str(py, fed.head, fed.bytes).map(|s| Some(s.into_any()))
    };
    if let Some(e) = f.take_owed() {
        defer(map_error(py, &e));
    }
    Some(Fed::Out(out, f.status()))
}

/// What a pull from the upstream gave: an item, its end (`None`), or its error.
struct Pulled<'py>(Option<PyResult<Bound<'py, PyAny>>>);

/// How the fast path ended.
enum Fast<'py> {
    /// With an item for the consumer.
    Out(Bound<'py, PyAny>),
    /// With the lifecycle's next action (a stop, a bad item, or no fast path to take).
    Then(Action<Py<PyAny>, PyErr>),
    /// With something pulled that the general path takes from here.
    Pulled(Pulled<'py>),
}
