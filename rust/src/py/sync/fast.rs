//! The per-chunk path of `wrap` (`StopStream.__next__` over the built-in filter): pull, scan
//! (the built-in stage's exact-chunk step, `feed_exact`, which `awrap`'s stage takes too), and
//! hand back the chunk itself or the part released, with the least bookkeeping.

use std::sync::atomic::Ordering;

use pyo3::prelude::*;

use super::super::ffi::pull;
use super::super::stages::{feed_exact, Fed};
use super::{Mode, StreamState, SyncDriver};
use crate::host::Action;
use crate::Status;

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
