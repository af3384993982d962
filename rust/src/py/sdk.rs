//! `_ChatSDKStage`: the lifecycle stage of `stopstream.openai.wrap_chat` and `awrap_chat`, with
//! the common SDK chunk handled natively.
//!
//! The common chunk: one choice of an open text stream, its `delta.content` a `str` that fires
//! no stop, no `finish_reason`, no `usage`. Its attributes are read here, its text is fed to the
//! stream's filter (the machine's own `StopFilter`, found in the machine's table of open
//! filters, which only the machine writes), and the chunk itself goes on, or the chunk rebuilt
//! with the released text by `replace` (the one call into Python, only when the text changed).
//! So a common chunk makes no Python call at all; a Python stage made three (its `push`, its
//! `closing`, and its filter's feed). Anything else (a `dict`, a chunk of another shape, a
//! stop) goes to the Python driver. The machine need not hear of a chunk handled here: the
//! chunk it synthesizes after a stop takes its fields from the chunk that stopped, which it
//! saw.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyString};
use pyo3::{intern, PyTraverseError};

use super::convert::{chunk_utf8, make_str, CHUNK_STACK};
use super::filters::StopFilter;
use super::stage::{Out, Pushed};

/// The stage: see the module docstring.
#[pyclass(frozen, module = "stopstream._core", name = "_ChatSDKStage")]
pub(super) struct ChatSdkStage {
    /// The Python driver: `push(item) -> list`, `end() -> list`, `closing`.
    driver: Py<PyAny>,
    /// The machine's filters of the open choices, by index (read here, written by the machine).
    open: Py<PyDict>,
    /// `replace(chunk, content) -> chunk`: the chunk with its one choice's content replaced.
    replace: Py<PyAny>,
    /// The driver's `closing`, read after each call into it (only its calls change it).
    closing: AtomicBool,
}

impl ChatSdkStage {
    /// The common chunk's choice index, `delta.content` and filter, or `None`.
    fn common<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, StopFilter>)>> {
        let attr = |obj: &Bound<'py, PyAny>, name: &Bound<'py, PyString>| obj.getattr_opt(name);
        if item.is_instance_of::<PyDict>() {
            return Ok(None);
        }
        let Some(choices) = attr(item, intern!(py, "choices"))? else { return Ok(None) };
        let Ok(choices) = choices.cast_into_exact::<PyList>() else { return Ok(None) };
        if choices.len() != 1 || !attr(item, intern!(py, "usage"))?.is_some_and(|u| u.is_none()) {
            return Ok(None);
        }
        let choice = choices.get_item(0)?;
        if !attr(&choice, intern!(py, "finish_reason"))?.is_some_and(|f| f.is_none()) {
            return Ok(None);
        }
        let Some(index) = attr(&choice, intern!(py, "index"))? else { return Ok(None) };
        let Some(delta) = attr(&choice, intern!(py, "delta"))? else { return Ok(None) };
        let Some(content) = attr(&delta, intern!(py, "content"))? else { return Ok(None) };
        let (Ok(_), Ok(content)) =
            (index.cast_exact::<PyInt>(), content.cast_into_exact::<PyString>())
        else {
            return Ok(None);
        };
        let Some(filter) = self.open.bind(py).get_item(index)? else { return Ok(None) };
        Ok(filter.cast_into::<StopFilter>().ok().map(|f| (content, f)))
    }

    /// Feeds one chunk.
    pub(super) fn push_item<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Pushed<'py>> {
        if let Some((content, filter)) = self.common(py, item)? {
            let mut stack = [0u8; CHUNK_STACK];
            let text = chunk_utf8(&content, &mut stack)?;
            let mut out = Vec::new();
            if filter.get().feed_unless_stop(py, &text, &mut out)?.is_some() {
                let out = if *out == *text {
                    item.clone()
                } else {
                    self.replace.bind(py).call1((item, make_str(py, &out)?))?
                };
                return Ok(Pushed { out: Out::One(out), closing: false });
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
impl ChatSdkStage {
    #[new]
    fn new(driver: Py<PyAny>, open: Py<PyDict>, replace: Py<PyAny>) -> Self {
        ChatSdkStage { driver, open, replace, closing: AtomicBool::new(false) }
    }

    /// Feeds one chunk (the stage protocol; the drivers call it natively): the chunks to emit.
    fn push<'py>(&self, py: Python<'py>, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        match self.push_item(py, item)?.out {
            Out::None => Ok(PyList::empty(py)),
            Out::One(out) => PyList::new(py, [out]),
            Out::Many(list) => Ok(list),
        }
    }

    /// The upstream is done: the chunks still owed.
    fn end<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.end_items(py)?)
    }

    /// Every choice stopped with `on_stop="close"`: close the upstream, then `end()`.
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
