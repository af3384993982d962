//! `_SDKStage`: the lifecycle stage of the SDK adapters (`stopstream.openai.wrap_chat` and
//! `stopstream.anthropic.wrap_messages`, sync and async), with the common SDK event handled
//! natively.
//!
//! The common event: a text delta of an open text stream that fires no stop. For Chat, a chunk
//! of one choice whose `delta.content` is a `str`, with no `finish_reason` and no `usage`; for
//! Messages, a `content_block_delta` whose delta is a `text_delta`. Its attributes are read
//! here, its text is fed to the stream's filter (the machine's own `StopFilter`, found in the
//! driver's table of open streams, which only the driver writes, after each call into the
//! machine), and the event itself goes on, or the event rebuilt with the released text by
//! `replace` (the one call into Python, only when the text changed; a Messages delta held back
//! whole is not emitted). So a common event makes no Python call at all; a Python stage made
//! three (its `push`, its `closing`, and its filter's feed). Anything else (a `dict`, an event
//! of another shape, a stop) goes to the Python driver. The driver need not hear of an event
//! handled here: the events it synthesizes follow a stop, whose event it saw, and after a stop
//! its table is empty, so nothing more is handled here.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyString};
use pyo3::{intern, PyTraverseError};

use super::convert::{chunk_utf8, make_str, CHUNK_STACK};
use super::filters::StopFilter;
use super::stage::{Out, Pushed};

/// The SDK whose events the stage reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sdk {
    /// OpenAI Chat Completions chunks: a delta held back whole keeps its chunk, text made empty.
    Chat,
    /// Anthropic Messages events: a delta held back whole is not emitted.
    Messages,
}

/// The stage: see the module docstring.
#[pyclass(frozen, module = "stopstream._core", name = "_SDKStage")]
pub(super) struct SdkStage {
    sdk: Sdk,
    /// The Python driver: `push(item) -> list`, `end() -> list`, `closing`.
    driver: Py<PyAny>,
    /// The filters of the open text streams, by index (read here, written by the driver).
    open: Py<PyDict>,
    /// `replace(event, text) -> event`: the event with its text replaced.
    replace: Py<PyAny>,
    /// The driver's `closing`, read after each call into it (only its calls change it).
    closing: AtomicBool,
}

impl SdkStage {
    /// The common event's text and filter, or `None`.
    fn common<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, StopFilter>)>> {
        let attr = |obj: &Bound<'py, PyAny>, name: &Bound<'py, PyString>| obj.getattr_opt(name);
        let is = |obj: Option<Bound<'py, PyAny>>, value: &str| {
            obj.is_some_and(|o| {
                o.cast_exact::<PyString>().is_ok_and(|s| s.to_str().is_ok_and(|s| s == value))
            })
        };
        if item.is_instance_of::<PyDict>() {
            return Ok(None);
        }
        let (index, holder, field) = match self.sdk {
            Sdk::Chat => {
                let Some(choices) = attr(item, intern!(py, "choices"))? else { return Ok(None) };
                let Ok(choices) = choices.cast_into_exact::<PyList>() else { return Ok(None) };
                let usage = attr(item, intern!(py, "usage"))?;
                if choices.len() != 1 || !usage.is_some_and(|u| u.is_none()) {
                    return Ok(None);
                }
                let choice = choices.get_item(0)?;
                if !attr(&choice, intern!(py, "finish_reason"))?.is_some_and(|f| f.is_none()) {
                    return Ok(None);
                }
                let Some(index) = attr(&choice, intern!(py, "index"))? else { return Ok(None) };
                if !index.is_exact_instance_of::<PyInt>() {
                    return Ok(None);
                }
                (index, choice, intern!(py, "content"))
            }
            Sdk::Messages => {
                if !is(attr(item, intern!(py, "type"))?, "content_block_delta") {
                    return Ok(None);
                }
                let Some(index) = attr(item, intern!(py, "index"))? else { return Ok(None) };
                (index, item.clone(), intern!(py, "text"))
            }
        };
        let Some(delta) = attr(&holder, intern!(py, "delta"))? else { return Ok(None) };
        if self.sdk == Sdk::Messages && !is(attr(&delta, intern!(py, "type"))?, "text_delta") {
            return Ok(None);
        }
        let Some(text) = attr(&delta, field)? else { return Ok(None) };
        let Ok(text) = text.cast_into_exact::<PyString>() else { return Ok(None) };
        let Some(filter) = self.open.bind(py).get_item(index)? else { return Ok(None) };
        Ok(filter.cast_into::<StopFilter>().ok().map(|f| (text, f)))
    }

    /// Feeds one event.
    pub(super) fn push_item<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Pushed<'py>> {
        if let Some((text, filter)) = self.common(py, item)? {
            let mut stack = [0u8; CHUNK_STACK];
            let bytes = chunk_utf8(&text, &mut stack)?;
            let mut out = Vec::new();
            if filter.get().feed_unless_stop(py, &bytes, &mut out)?.is_some() {
                let out = if out.is_empty() && self.sdk == Sdk::Messages {
                    Out::None
                } else if *out == *bytes {
                    Out::One(item.clone())
                } else {
                    Out::One(self.replace.bind(py).call1((item, make_str(py, &out)?))?)
                };
                return Ok(Pushed { out, closing: false });
            }
        }
        let driver = self.driver.bind(py);
        let out = driver.call_method1(intern!(py, "push"), (item,));
        let closing = self.read_closing(driver)?;
        Ok(Pushed { out: Out::Many(out?.cast_into()?), closing })
    }

    /// The upstream is done: what the driver still owes.
    pub(super) fn end_items(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let driver = self.driver.bind(py);
        let owed = driver.call_method0(intern!(py, "end"));
        self.read_closing(driver)?;
        owed?.try_iter()?.map(|item| item.map(Bound::unbind)).collect()
    }

    fn read_closing(&self, driver: &Bound<'_, PyAny>) -> PyResult<bool> {
        let closing = driver.getattr(intern!(driver.py(), "closing"))?.is_truthy()?;
        self.closing.store(closing, Ordering::Release);
        Ok(closing)
    }
}

#[pymethods]
impl SdkStage {
    #[new]
    fn new(driver: Py<PyAny>, open: Py<PyDict>, replace: Py<PyAny>, sdk: &str) -> PyResult<Self> {
        let sdk = match sdk {
            "chat" => Sdk::Chat,
            "messages" => Sdk::Messages,
            other => {
                return Err(PyValueError::new_err(format!(
                    "sdk must be 'chat' or 'messages', not {other:?}"
                )))
            }
        };
        Ok(SdkStage { sdk, driver, open, replace, closing: AtomicBool::new(false) })
    }

    /// Feeds one event (the stage protocol; the drivers call it natively): the events to emit.
    fn push<'py>(&self, py: Python<'py>, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        match self.push_item(py, item)?.out {
            Out::None => Ok(PyList::empty(py)),
            Out::One(out) => PyList::new(py, [out]),
            Out::Many(list) => Ok(list),
        }
    }

    /// The upstream is done: the events still owed.
    fn end<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.end_items(py)?)
    }

    /// Every text stream stopped with `on_stop="close"`: close the upstream, then `end()`.
    #[getter]
    fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.driver)?;
        visit.call(&self.open)?;
        visit.call(&self.replace)
    }
}
