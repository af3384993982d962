//! `SSEStage`: the lifecycle stage of `stopstream.sse`, parsing SSE bytes natively.
//!
//! The common event is the core's ([`crate::sse::Common`]), over the Python adapter machine's
//! own `StopFilter` objects (one per text stream) and, for the Responses, its parts' lists of
//! emitted texts. Anything else (role and finish chunks, usage, `[DONE]`, a stop firing, block
//! starts and stops, unknown shapes, multi-line data) is handed, as the parser's `Event`, to
//! the machine's driver (`stopstream.sse.SSEDriver`), which holds the rules, through the three
//! callables it was built with (no method is looked up by name); with it, what the machine
//! has not seen of the events handled natively (Chat's latest chunk, the template of the
//! chunks it synthesizes; the Responses' latest sequence number). After each, the machine's
//! state (open, closing, its table of open streams) is read back.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use pyo3::PyTraverseError;

use super::super::convert::chunk_bytes;
use super::super::errors::wrong_type;
use super::super::filters::StopFilter;
use super::super::lock::{lock, try_lock};
use crate::host::Saved;
use crate::lock::TryLock;
use crate::sse::{Common, Filters, Handled, Open, Provider, Unseen};

/// The machine's objects for its open text streams, in the order of the core's table: the
/// filter, and (Responses) the list of the texts it emitted.
struct Handles<'py> {
    py: Python<'py>,
    table: &'py [(Py<StopFilter>, Option<Py<PyList>>)],
}

impl Filters for Handles<'_> {
    type Error = PyErr;

    fn feed_unless_stop(
        &mut self,
        i: usize,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> PyResult<Option<Saved>> {
        Ok(lock(self.py, &self.table[i].0.get().state)?.feed_unless_stop(text, out))
    }

    fn restore(&mut self, i: usize, saved: Saved) -> PyResult<()> {
        lock(self.py, &self.table[i].0.get().state)?.restore(saved);
        Ok(())
    }

    fn record(&mut self, i: usize, text: &str) -> PyResult<()> {
        match &self.table[i].1 {
            Some(sink) => sink.bind(self.py).append(PyString::new(self.py, text)),
            None => Ok(()),
        }
    }
}

struct StageState {
    common: Common,
    /// The objects of [`Common`]'s open streams.
    table: Vec<(Py<StopFilter>, Option<Py<PyList>>)>,
}

/// The SSE stage: see the module docstring.
#[pyclass(frozen, module = "stopstream._core", name = "_SSEStage")]
pub(crate) struct SSEStage {
    state: TryLock<StageState>,
    /// The Python side's `slow(event, eol, seen) -> bytes`: an event not handled here (`seen`:
    /// see [`SSEStage::seen`]).
    slow: Py<PyAny>,
    /// `state() -> (fast, closing, table, floor)`, read after each call into the Python side.
    read_state: Py<PyAny>,
    /// `end(eol, seen) -> bytes`: the end of the body.
    end: Py<PyAny>,
    /// `stopstream.sse.Event`, built for the events handed to the driver.
    event: Py<PyAny>,
    closing: AtomicBool,
}

impl SSEStage {
    fn state<'a>(&'a self, py: Python<'_>) -> PyResult<crate::lock::Guard<'a, StageState>> {
        try_lock(py, &self.state)
            .ok_or_else(|| PyRuntimeError::new_err("SSE stage called re-entrantly while in use"))
    }

    /// The end of the body (the stage's `end`): the block a final `\r` completes, then what
    /// the machine still owes, as one chunk (empty for none).
    pub(super) fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut st = self.state(py)?;
        let mut out = Vec::new();
        if st.common.parser.finish() {
            self.block(py, &mut st, &mut out)?;
        }
        st.common.parser.discard();
        let eol = PyBytes::new(py, st.common.parser.eol());
        let seen = Self::seen(py, &mut st);
        let written = self.end.bind(py).call1((eol, seen))?;
        out.extend_from_slice(written.cast::<PyBytes>()?.as_bytes());
        drop(st);
        Ok(PyBytes::new(py, &out))
    }

    /// Reads the driver's state after it handled an event. The tables change only once the
    /// whole state has been read, so a state that fails to read leaves them as they were.
    fn sync(&self, py: Python<'_>, st: &mut StageState) -> PyResult<()> {
        let state = self.read_state.bind(py).call0()?;
        let (fast, closing, table, floor): (bool, bool, Bound<'_, PyList>, Option<i64>) =
            state.extract()?;
        let mut open = Vec::with_capacity(table.len());
        let mut handles = Vec::with_capacity(table.len());
        for entry in table.iter() {
            let entry = entry.cast_into::<PyTuple>()?;
            let id = entry.get_item(0)?;
            let (ids, id_count) = if let Ok(id) = id.extract::<i64>() {
                ([id, 0], 1)
            } else if let Ok((a, b)) = id.extract::<(i64, i64)>() {
                ([a, b], 2)
            } else {
                continue; // not an id this stage can see: its events go to the driver
            };
            let filter = entry.get_item(1)?.cast_into::<StopFilter>()?.unbind();
            let sink = match entry.len() {
                2 => None,
                _ => Some(entry.get_item(2)?.cast_into::<PyList>()?.unbind()),
            };
            open.push(Open { ids, id_count, records: sink.is_some() });
            handles.push((filter, sink));
        }
        self.closing.store(closing, Ordering::Release);
        st.table = handles;
        st.common.set_table(fast, open, floor.unwrap_or(i64::MAX));
        Ok(())
    }

    /// What the machine has not seen of the events handled here: Chat's latest chunk with
    /// choices (the template of the chunks it synthesizes), the Responses' latest sequence
    /// number; `None` when there is nothing new.
    fn seen<'py>(py: Python<'py>, st: &mut StageState) -> Option<Bound<'py, PyAny>> {
        match st.common.take_unseen() {
            Unseen::Nothing => None,
            Unseen::Template(data) => Some(PyBytes::new(py, data).into_any()),
            Unseen::Sequence(n) => {
                Some(n.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any())
            }
        }
    }

    /// The dispatched block, handled by the core or by the driver.
    fn block(&self, py: Python<'_>, st: &mut StageState, out: &mut Vec<u8>) -> PyResult<()> {
        let StageState { common, table } = st;
        if common.handle(&mut Handles { py, table }, out)? == Handled::Here {
            return Ok(());
        }
        let raw = st.common.parser.raw();
        let lines = PyList::empty(py);
        let data_at = PyList::empty(py);
        let values = PyList::empty(py);
        for (position, line) in st.common.parser.lines().iter().enumerate() {
            lines.append(PyBytes::new(py, &raw[line.start..line.end]))?;
            if let Some((a, b)) = line.value {
                data_at.append(position)?;
                values.append(PyBytes::new(py, &raw[a..b]))?;
            }
        }
        let event = self.event.bind(py).call1((lines, data_at, values))?;
        let eol = PyBytes::new(py, st.common.parser.eol());
        let seen = Self::seen(py, st);
        let written = self.slow.bind(py).call1((event, eol, seen))?;
        out.extend_from_slice(written.cast::<PyBytes>()?.as_bytes());
        self.sync(py, st)
    }
}

#[pymethods]
impl SSEStage {
    #[new]
    #[pyo3(signature = (slow, state, end, shape, event))]
    fn new(
        py: Python<'_>,
        slow: Py<PyAny>,
        state: Py<PyAny>,
        end: Py<PyAny>,
        shape: &str,
        event: Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let Some(provider) = Provider::named(shape) else {
            return Err(PyValueError::new_err(format!(
                "shape must be 'chat', 'messages', 'responses' or 'gemini', not {shape:?}"
            )));
        };
        let built = SSEStage {
            state: TryLock::new(StageState { common: Common::new(provider), table: Vec::new() }),
            slow,
            read_state: state,
            end,
            event: event.unbind(),
            closing: AtomicBool::new(false),
        };
        {
            let mut st = built.state(py)?;
            built.sync(py, &mut st)?;
        }
        Ok(built)
    }

    /// Parses a body chunk; returns the bytes to forward (empty for none).
    pub(super) fn push<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = if let Ok(s) = item.cast::<PyString>() {
            std::borrow::Cow::Borrowed(s.to_str()?.as_bytes())
        } else if let Some(b) = chunk_bytes(item)? {
            b
        } else {
            return Err(wrong_type("SSE body chunks must be bytes", item));
        };
        let mut st = self.state(py)?;
        st.common.parser.push(&bytes);
        let mut out = Vec::new();
        while st.common.parser.next_block() {
            self.block(py, &mut st, &mut out)?;
        }
        drop(st);
        if out == *bytes {
            if let Ok(b) = item.cast_exact::<PyBytes>() {
                return Ok(b.clone());
            }
        }
        Ok(PyBytes::new(py, &out))
    }

    /// Every text stream stopped with `on_stop="close"`: close the upstream, then `end()`.
    #[getter]
    pub(super) fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// The end of the body: the block a final `\r` completes, then what the machine still owes.
    fn end<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = self.finish(py)?;
        PyList::new(py, (!out.as_bytes().is_empty()).then_some(out))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.slow)?;
        visit.call(&self.read_state)?;
        visit.call(&self.end)?;
        visit.call(&self.event)?;
        // SAFETY: the collector calls `tp_traverse` on an attached thread, which is what the
        // lock relies on; a stage in use is reachable anyway.
        #[allow(unsafe_code)]
        if let Some(st) = unsafe { self.state.try_acquire() } {
            for (filter, sink) in &st.table {
                visit.call(filter)?;
                visit.call(sink.as_ref())?;
            }
        }
        Ok(())
    }

    /// Some of an unfinished block has been received.
    #[getter]
    fn partial(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state(py)?.common.parser.partial())
    }
}
