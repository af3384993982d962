//! `TokenStopFilter`: stop sequences and stop token ids over a stream of token ids.

use std::cell::RefCell;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::super::convert::make_str;
use super::super::errors::{map_error, parse_errors};
use super::super::lock::lock;
use super::super::report::{reports, Reports};
use super::super::stopset::{resolve, IncludeStop, SkipArgs, StopSetRef};
use super::vocab::{new_piece, piece, TokenPiece, Vocab};
use super::{one_id, short_ids, token_error, Ids, STACK_IDS};
use crate::host::AnyTokenStream;
use crate::lock::TryLock;
use crate::{Detail, StopReport};

thread_local! {
    /// The output buffer of `feed` and `finish`: one allocation per thread, not per call.
    static OUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's output buffer, emptied (a fresh one if it is in use).
pub(super) fn with_out<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    OUT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut out) => {
            out.clear();
            f(&mut out)
        }
        Err(_) => f(&mut Vec::new()),
    })
}

/// Stop sequences and stop token ids over a stream of token ids (`stopstream.TokenStopFilter`).
#[pyclass(frozen, module = "stopstream._core")]
pub(crate) struct TokenStopFilter {
    pub(super) vocab: Py<Vocab>,
    pub(super) stops: StopSetRef,
    pub(super) stop_ids: Py<PyTuple>,
    pub(super) state: TryLock<AnyTokenStream>,
}

impl TokenStopFilter {
    pub(super) fn size(&self) -> usize {
        self.vocab.get().inner.len()
    }
}

reports! {
    impl TokenStopFilter {
        #[new]
        #[pyo3(signature = (
            vocab, stops, *, include_stop = IncludeStop::default(), stop_token_ids = None,
            errors = "replace", skip = None, skip_until = None
        ))]
        #[pyo3(
            text_signature = "(vocab, stops, *, include_stop=False, stop_token_ids=None, errors='replace', skip=None, skip_until=None)"
        )]
        #[allow(clippy::too_many_arguments, reason = "the constructor's keyword arguments")]
        fn new<'py>(
            py: Python<'py>,
            vocab: Bound<'py, Vocab>,
            stops: Option<&Bound<'py, PyAny>>,
            include_stop: IncludeStop,
            stop_token_ids: Option<&Bound<'py, PyAny>>,
            errors: &str,
            skip: Option<&Bound<'py, PyAny>>,
            skip_until: Option<&Bound<'py, PyAny>>,
        ) -> PyResult<Self> {
            let replace = parse_errors(errors)?;
            let (stops, include_stop) =
                resolve(py, stops, include_stop, SkipArgs { skip, skip_until })?;
            let ids = match stop_token_ids {
                Some(s) if !s.is_none() => Ids::from(s, "stop_token_ids")?,
                _ => Ids::default(),
            };
            let inner = &vocab.get().inner;
            let state = AnyTokenStream::new(inner, &stops.core, include_stop, replace, &ids.ids);
            let state = state.map_err(|e| match e.invalid_token() {
                Some((p, _)) => PyValueError::new_err(format!(
                    "stop token id {} at position {p} is not in the vocabulary (ids 0..{})",
                    ids.show(0, p),
                    inner.len()
                )),
                None => map_error(py, &e),
            })?;
            let stop_ids = PyTuple::new(py, state.stop_ids())?.unbind();
            let (vocab, state) = (vocab.unbind(), TryLock::new(state));
            Ok(TokenStopFilter { vocab, stops, stop_ids, state })
        }

        fn feed(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<Py<TokenPiece>> {
            let vocab = self.vocab.get();
            if let Some(id) = one_id(ids) {
                // The usual step: no buffer is allocated unless text other than the token's own
                // is emitted.
                let mut out = Vec::new();
                let result =
                    lock(py, &self.state)?.feed_id(&vocab.inner, self.stops.set(), id, &mut out);
                let fed = result.map_err(|e| token_error(py, &e, |_| id.to_string(), self.size()))?;
                return vocab.piece_of(py, id, &out, fed);
            }
            let mut buf = [0i64; STACK_IDS];
            let short = short_ids(ids, &mut buf);
            let general = if short.is_none() { Some(Ids::from(ids, "feed()")?) } else { None };
            let ids: &[i64] = match &general {
                Some(g) => &g.ids,
                None => &buf[..short.unwrap_or(0)],
            };
            with_out(|out| {
                let result = lock(py, &self.state)?.feed(&vocab.inner, self.stops.set(), ids, out);
                let n = result.map_err(|e| {
                    // Only the general conversion meets ints too large for `i64`.
                    let shown = |p: usize| {
                        general.as_ref().map_or_else(|| ids[p].to_string(), |g| g.show(0, p))
                    };
                    token_error(py, &e, shown, self.size())
                })?;
                new_piece(py, out, n)
            })
        }

        fn finish(&self, py: Python<'_>) -> PyResult<Py<TokenPiece>> {
            let (text, n) = with_out(|out| {
                let result = lock(py, &self.state)?.finish(self.stops.set(), out);
                let n = result.map_err(|e| map_error(py, &e))?;
                Ok::<_, PyErr>((make_str(py, out)?, n))
            })?;
            piece(text, n)
        }

        fn reset(&self, py: Python<'_>) -> PyResult<()> {
            lock(py, &self.state)?.reset(self.stops.set());
            Ok(())
        }

        #[getter]
        fn vocab(&self, py: Python<'_>) -> Py<Vocab> {
            self.vocab.clone_ref(py)
        }

        #[getter]
        fn stop_token_ids(&self, py: Python<'_>) -> Py<PyTuple> {
            self.stop_ids.clone_ref(py)
        }

        #[getter]
        fn errors(&self, py: Python<'_>) -> PyResult<&'static str> {
            Ok(if lock(py, &self.state)?.replace() { "replace" } else { "strict" })
        }

        #[getter]
        fn stop_token_id(&self, py: Python<'_>) -> PyResult<Option<i64>> {
            Ok(lock(py, &self.state)?.stop_token())
        }

        fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
            let (include, replace) = {
                let st = lock(py, &self.state)?;
                (st.include_stop(), st.replace())
            };
            Ok(format!(
                "TokenStopFilter(<{} ids>, {}, include_stop={}, stop_token_ids={}, errors={:?})",
                self.size(),
                self.stops.tuple.bind(py).repr()?,
                if include { "True" } else { "False" },
                self.stop_ids.bind(py).repr()?,
                if replace { "replace" } else { "strict" },
            ))
        }
    }
}

impl Reports for TokenStopFilter {
    fn stop_list<'a>(slf: &'a Bound<'_, Self>) -> &'a StopSetRef {
        &slf.get().stops
    }

    fn includes_stop(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(lock(slf.py(), &slf.get().state)?.include_stop())
    }

    fn stop_report(slf: &Bound<'_, Self>, detail: Detail) -> PyResult<StopReport> {
        let this = slf.get();
        Ok(lock(slf.py(), &this.state)?.stop_report(this.stops.set(), detail))
    }
}
