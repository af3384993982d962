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
//! of another shape, a mapping, a stop) goes to the Python driver. The driver need not hear of
//! an event handled here: what it synthesizes follows a stop, and is built from the event that
//! fired it, which it saw (a Messages table is empty once a stop fired; a Chat stream's other
//! choices go on here, and their chunks are of the class of the one it saw).

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyList, PyString};
use pyo3::{intern, PyTraverseError};

use super::super::convert::{chunk_utf8, make_str};
use super::super::filters::StopFilter;
use super::super::lock::lock;
use super::{Out, Pushed};

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
pub(crate) struct SdkStage {
    sdk: Sdk,
    /// The Python driver: `push(item) -> list`, `end() -> list`, `closing`.
    driver: Py<PyAny>,
    /// The filters of the open text streams, by index (read here, written by the driver).
    open: Py<PyDict>,
    /// `replace(event, text) -> event`: the event with its text replaced.
    replace: Py<PyAny>,
    /// The driver's `closing`, read after each call into it (only its calls change it).
    closing: AtomicBool,
    /// Per class of the events seen: whether it is an SDK object ([`SdkStage::is_model`]).
    known: Py<PyDict>,
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
        if item.is_instance_of::<PyDict>() || !self.is_model(item)? {
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

    /// Whether `item` is an SDK object rather than a mapping (whose events the driver turns
    /// into dicts), by its class: cached, since an ABC check costs more than the rest of the
    /// common event.
    fn is_model(&self, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        static MAPPING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = item.py();
        let (known, class) = (self.known.bind(py), item.get_type());
        if let Some(model) = known.get_item(&class)? {
            return model.is_truthy();
        }
        let mapping = MAPPING.get_or_try_init(py, || {
            py.import("collections.abc")?.getattr("Mapping").map(Bound::unbind)
        })?;
        let model = !class.is_subclass(mapping.bind(py))?;
        known.set_item(class, model)?;
        Ok(model)
    }

    /// Feeds one event.
    pub(super) fn push_item<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Pushed<'py>> {
        if let Some((text, filter)) = self.common(py, item)? {
            let mut stack = None;
            let bytes = chunk_utf8(&text, &mut stack)?;
            let mut out = Vec::new();
            if lock(py, &filter.get().state)?.feed_unless_stop(&bytes, &mut out).is_some() {
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
    fn new(
        py: Python<'_>,
        driver: Py<PyAny>,
        open: Py<PyDict>,
        replace: Py<PyAny>,
        sdk: &str,
    ) -> PyResult<Self> {
        let sdk = match sdk {
            "chat" => Sdk::Chat,
            "messages" => Sdk::Messages,
            other => {
                return Err(PyValueError::new_err(format!(
                    "sdk must be 'chat' or 'messages', not {other:?}"
                )))
            }
        };
        let known = PyDict::new(py).unbind();
        Ok(SdkStage { sdk, driver, open, replace, closing: AtomicBool::new(false), known })
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
        visit.call(&self.replace)?;
        visit.call(&self.known)
    }
}
