//! The one stage type both lifecycle drivers take (`sync/`, `aio/`): what turns pulled items
//! into output. The native stages are fed by a Rust call, a Python stage through its protocol
//! (`stopstream._lifecycle.Stage`: `push`, `closing`, `end`).
//!
//! The native stages: `builtin` (the built-in filter, `awrap`'s `_FilterStage`, and the
//! exact-chunk step `wrap`'s per-chunk path shares), `sse` (`SSEStage`, `stopstream.sse`'s)
//! and `sdk` (`SdkStage`, the SDK adapters').

mod builtin;
mod sdk;
mod sse;

pub(super) use builtin::{feed_exact, BuiltIn, Fed, FilterStage, Slot};
pub(super) use sdk::SdkStage;
pub(super) use sse::SSEStage;

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::PyTraverseError;

/// A driver's stage.
pub(super) enum Stage {
    /// The built-in filter of `awrap`. The sync driver holds `wrap`'s filter inline instead,
    /// for its per-chunk path.
    Filter(Py<FilterStage>),
    /// The native SSE stage of `stopstream.sse`.
    Sse(Py<SSEStage>),
    /// The native stage of the SDK adapters (`openai.wrap_chat`, `anthropic.wrap_messages`).
    Sdk(Py<SdkStage>),
    /// A Python object with `push`, `closing` and `end`.
    Python(Py<PyAny>),
}

/// What a stage made of one item.
pub(super) enum Out<'py> {
    None,
    One(Bound<'py, PyAny>),
    /// Several items (a Python stage's list), in order.
    Many(Bound<'py, PyList>),
}

/// One item fed to a stage.
pub(super) struct Pushed<'py> {
    pub(super) out: Out<'py>,
    /// The stage wants no more input (a stop fired): the upstream is closed now. Then the
    /// stage may owe an error to raise after the last output ([`Stage::owed`]).
    pub(super) closing: bool,
}

impl Stage {
    /// The stage for `object`: a native one by its type, else a Python stage.
    pub(super) fn of(object: &Bound<'_, PyAny>) -> Stage {
        if let Ok(filter) = object.cast::<FilterStage>() {
            return Stage::Filter(filter.clone().unbind());
        }
        if let Ok(sse) = object.cast::<SSEStage>() {
            return Stage::Sse(sse.clone().unbind());
        }
        if let Ok(sdk) = object.cast::<SdkStage>() {
            return Stage::Sdk(sdk.clone().unbind());
        }
        Stage::Python(object.clone().unbind())
    }

    /// The stage as a Python object.
    pub(super) fn object(&self) -> &Py<PyAny> {
        match self {
            Stage::Filter(f) => f.as_any(),
            Stage::Sse(s) => s.as_any(),
            Stage::Sdk(s) => s.as_any(),
            Stage::Python(s) => s,
        }
    }

    /// Feeds the `position`-th item.
    #[inline]
    pub(super) fn push<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<Pushed<'py>> {
        match self {
            Stage::Filter(filter) => {
                let (out, closing) = filter.get().push(py, item, position)?;
                Ok(Pushed { out: out.map_or(Out::None, Out::One), closing })
            }
            Stage::Sse(sse) => {
                let sse = sse.get();
                let out = sse.push(py, item)?;
                let out =
                    if out.as_bytes().is_empty() { Out::None } else { Out::One(out.into_any()) };
                Ok(Pushed { out, closing: sse.closing() })
            }
            Stage::Sdk(sdk) => sdk.get().push_item(py, item),
            Stage::Python(stage) => {
                let stage = stage.bind(py);
                let out = stage.call_method1(pyo3::intern!(py, "push"), (item,))?;
                let out = match out.cast_into_exact::<PyList>() {
                    Ok(list) => Out::Many(list),
                    Err(e) => {
                        let out = e.into_inner();
                        if out.is_truthy()? {
                            Out::One(out)
                        } else {
                            Out::None
                        }
                    }
                };
                let closing = stage.getattr(pyo3::intern!(py, "closing"))?.is_truthy()?;
                Ok(Pushed { out, closing })
            }
        }
    }

    /// The error a closing stage owes, to raise after the last output (the built-in filter's
    /// decoding error of contract §9.9), taken.
    pub(super) fn owed(&self, py: Python<'_>) -> PyResult<Option<PyErr>> {
        match self {
            Stage::Filter(filter) => filter.get().owed(py),
            Stage::Sse(_) | Stage::Sdk(_) | Stage::Python(_) => Ok(None),
        }
    }

    /// The upstream is done: what the stage still owes, and an error to raise after it.
    pub(super) fn end(&self, py: Python<'_>) -> PyResult<(Vec<Py<PyAny>>, Option<PyErr>)> {
        match self {
            Stage::Filter(filter) => {
                let filter = filter.get();
                let out = filter.end(py)?.map(Bound::unbind).into_iter().collect();
                Ok((out, filter.owed(py)?))
            }
            Stage::Sse(sse) => {
                let out = sse.get().finish(py)?;
                let out = (!out.as_bytes().is_empty()).then(|| out.into_any().unbind());
                Ok((out.into_iter().collect(), None))
            }
            Stage::Sdk(sdk) => Ok((sdk.get().end_items(py)?, None)),
            Stage::Python(stage) => {
                let owed = stage.bind(py).call_method0(pyo3::intern!(py, "end"))?;
                let items = owed.try_iter()?.map(|item| item.map(Bound::unbind));
                Ok((items.collect::<PyResult<_>>()?, None))
            }
        }
    }

    pub(super) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(self.object())
    }
}
