//! `SSEStage`: the lifecycle stage of `stopstream.sse`, parsing SSE bytes natively.
//!
//! The common event (a text delta of an open text stream that fires no stop) is handled here:
//! forwarded as the very same bytes, or spliced when the filter held text back or released
//! some. Anything else (role and finish chunks, usage, `[DONE]`, a stop firing, block starts
//! and stops, unknown shapes, multi-line data) is handed, as the parser's `Event`, to the
//! Python adapter machine (`stopstream.sse.SSEDriver`), which holds the rules. The filters fed
//! here are the machine's own `StopFilter` objects: one filter per text stream.
//!
//! Four shapes, one table each in `crate::sse` ([`Kind`] says what else differs): OpenAI Chat
//! Completions, Anthropic Messages, OpenAI Responses and Gemini. What the machine would have
//! recorded for an event handled here is handed to it: Chat's latest chunk (the template of
//! the chunks it synthesizes) and the Responses' latest sequence number (with the next event
//! it sees), and the text a Responses part emitted (appended to the part's own list at once:
//! the machine builds the part's `done` text from it when a stop fires).

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::convert::chunk_bytes;
use super::errors::type_name;
use super::filters::StopFilter;
use super::try_lock;
use crate::lock::TryLock;
use crate::sse::{splice, Parser, Scan, Scanner, Shape, CHAT, GEMINI, MESSAGES, RESPONSES};
use crate::Saved;

/// The provider whose body the stage reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Messages,
    Responses,
    Gemini,
}

impl Kind {
    fn shape(self) -> &'static Shape {
        match self {
            Kind::Chat => &CHAT,
            Kind::Messages => &MESSAGES,
            Kind::Responses => &RESPONSES,
            Kind::Gemini => &GEMINI,
        }
    }

    /// A delta whose text is held back whole is not emitted (Chat and Gemini keep the chunk,
    /// its text made empty).
    fn drops_held(self) -> bool {
        matches!(self, Kind::Messages | Kind::Responses)
    }
}

/// An open text stream: its ids, the machine's filter, and (Responses) the list of the texts
/// it emitted.
struct Entry {
    ids: [i64; 2],
    id_count: u8,
    filter: Py<StopFilter>,
    sink: Option<Py<PyList>>,
}

struct StageState {
    parser: Parser,
    scanner: Scanner,
    kind: Kind,
    /// The machine is open: the common case may be handled here.
    fast: bool,
    /// The open text streams.
    table: Vec<Entry>,
    /// Responses: the last sequence number emitted; an event handled here must exceed it.
    floor: i64,
    /// Responses: the sequence number of the latest event handled here, which the machine
    /// has not seen.
    sequence: Option<i64>,
    /// Chat: the data of the latest chunk with choices handled here, which the machine has not
    /// seen (its template for synthesized chunks).
    template: Vec<u8>,
    template_fresh: bool,
    /// The filters' output for the texts of one event, and where each text's output lies.
    emitted: Vec<u8>,
    ranges: Vec<(usize, usize)>,
    /// States from before the feeds of one event, to put back when one of its texts stops.
    befores: Vec<(usize, Saved)>,
}

/// The SSE stage: see the module docstring.
#[pyclass(frozen, module = "stopstream._core", name = "_SSEStage")]
pub(super) struct SSEStage {
    state: TryLock<StageState>,
    /// The Python side: `_slow(event, eol, seen) -> bytes`, `_state() -> (fast, closing,
    /// table, floor)`, `_end(eol, seen) -> bytes` (`seen`: see [`SSEStage::seen`]).
    driver: Py<PyAny>,
    /// `stopstream.sse.Event`, built for the events handed to the driver.
    event: Py<PyAny>,
    closing: AtomicBool,
}

enum Outcome {
    /// Handled here: output appended.
    Done,
    /// For the driver.
    Slow,
}

impl SSEStage {
    fn state<'a>(&'a self, py: Python<'_>) -> PyResult<crate::lock::Guard<'a, StageState>> {
        try_lock(py, &self.state)
            .ok_or_else(|| PyRuntimeError::new_err("SSE stage called re-entrantly while in use"))
    }

    /// Parses a body chunk (the stage's `push`): the bytes to forward, empty for none.
    pub(super) fn parse<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = if let Ok(s) = item.cast::<PyString>() {
            std::borrow::Cow::Borrowed(s.to_str()?.as_bytes())
        } else if let Some(b) = chunk_bytes(item)? {
            b
        } else {
            return Err(PyTypeError::new_err(format!(
                "SSE body chunks must be bytes, not {}",
                type_name(item)
            )));
        };
        let mut st = self.state(py)?;
        st.parser.push(&bytes);
        let mut out = Vec::new();
        while st.parser.next_block() {
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

    /// Every text stream stopped with `on_stop="close"`.
    pub(super) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// The end of the body (the stage's `end`): the block a final `\r` completes, then what
    /// the machine still owes, as one chunk (empty for none).
    pub(super) fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut st = self.state(py)?;
        let mut out = Vec::new();
        if st.parser.finish() {
            self.block(py, &mut st, &mut out)?;
        }
        st.parser.discard();
        let eol = PyBytes::new(py, st.parser.eol());
        let seen = Self::seen(py, &mut st);
        let written = self.driver.bind(py).call_method1(pyo3::intern!(py, "_end"), (eol, seen))?;
        out.extend_from_slice(written.cast::<PyBytes>()?.as_bytes());
        drop(st);
        Ok(PyBytes::new(py, &out))
    }

    /// Reads the driver's state after it handled an event.
    fn sync(&self, py: Python<'_>, st: &mut StageState) -> PyResult<()> {
        let state = self.driver.bind(py).call_method0(pyo3::intern!(py, "_state"))?;
        let (fast, closing, table, floor): (bool, bool, Bound<'_, PyList>, Option<i64>) =
            state.extract()?;
        st.fast = fast;
        st.floor = floor.unwrap_or(i64::MAX);
        self.closing.store(closing, Ordering::Release);
        st.table.clear();
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
            st.table.push(Entry { ids, id_count, filter, sink });
        }
        Ok(())
    }

    /// What the machine has not seen of the events handled here: Chat's latest chunk with
    /// choices (the template of the chunks it synthesizes), the Responses' latest sequence
    /// number; `None` when there is nothing new.
    fn seen<'py>(py: Python<'py>, st: &mut StageState) -> Option<Bound<'py, PyAny>> {
        if std::mem::take(&mut st.template_fresh) {
            return Some(PyBytes::new(py, &st.template).into_any());
        }
        st.sequence.take().map(|n| n.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any())
    }

    /// Hands the dispatched block to the driver.
    fn slow(&self, py: Python<'_>, st: &mut StageState, out: &mut Vec<u8>) -> PyResult<()> {
        let raw = st.parser.raw();
        let lines = PyList::empty(py);
        let data_at = PyList::empty(py);
        let values = PyList::empty(py);
        for (position, line) in st.parser.lines().iter().enumerate() {
            lines.append(PyBytes::new(py, &raw[line.start..line.end]))?;
            if let Some((a, b)) = line.value {
                data_at.append(position)?;
                values.append(PyBytes::new(py, &raw[a..b]))?;
            }
        }
        let event = self.event.bind(py).call1((lines, data_at, values))?;
        let eol = PyBytes::new(py, st.parser.eol());
        let seen = Self::seen(py, st);
        let written =
            self.driver.bind(py).call_method1(pyo3::intern!(py, "_slow"), (event, eol, seen))?;
        out.extend_from_slice(written.cast::<PyBytes>()?.as_bytes());
        self.sync(py, st)
    }

    /// The dispatched block, handled here or by the driver.
    fn block(&self, py: Python<'_>, st: &mut StageState, out: &mut Vec<u8>) -> PyResult<()> {
        if st.fast {
            if let Outcome::Done = Self::common(py, st, out)? {
                return Ok(());
            }
        }
        self.slow(py, st, out)
    }

    /// The common case, if the block is one.
    fn common(py: Python<'_>, st: &mut StageState, out: &mut Vec<u8>) -> PyResult<Outcome> {
        let st = &mut *st;
        let raw = st.parser.raw();
        let mut data = None;
        for line in st.parser.lines() {
            if let Some(value) = line.value {
                if data.is_some() {
                    return Ok(Outcome::Slow); // several data lines: rewritten as one there
                }
                data = Some(value);
            }
        }
        let Some((a, b)) = data else {
            out.extend_from_slice(raw); // comments (keep-alives), id / retry only, blank lines
            return Ok(Outcome::Done);
        };
        let value = &raw[a..b];
        // A JSON object, so never `[DONE]` or other text.
        if value.iter().find(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r')) != Some(&b'{') {
            return Ok(Outcome::Slow);
        }
        match st.scanner.scan(st.kind.shape(), value) {
            Scan::Slow => return Ok(Outcome::Slow),
            Scan::Other => {
                // Keep-alives pass as they are while the message is open.
                if st.kind == Kind::Messages && st.scanner.other == "ping" {
                    out.extend_from_slice(raw);
                    return Ok(Outcome::Done);
                }
                return Ok(Outcome::Slow);
            }
            Scan::Texts => {}
        }
        let sequence = st.scanner.sequence;
        if st.kind == Kind::Responses && sequence.is_none_or(|n| n <= st.floor) {
            return Ok(Outcome::Slow); // the machine renumbers it
        }
        if !Self::feed(py, st)? {
            return Ok(Outcome::Slow);
        }
        if st.kind == Kind::Responses && !Self::note_responses(py, st, sequence)? {
            return Ok(Outcome::Slow);
        }
        let raw = st.parser.raw();
        let value = &raw[a..b];
        if st.kind == Kind::Chat {
            st.template.clear();
            st.template.extend_from_slice(value);
            st.template_fresh = true;
        }
        let found = &st.scanner.found;
        let scratch = &st.scanner.scratch;
        let emitted = &st.emitted;
        let changed = |(f, &(x, y)): (&crate::sse::Found, &(usize, usize))| {
            let new = &emitted[x..y];
            (new != &scratch[f.text.clone()]).then(|| (f.span.start + a..f.span.end + a, new))
        };
        if st.kind.drops_held() && st.ranges.first().is_some_and(|&(x, y)| x == y) {
            return Ok(Outcome::Done); // a text delta held back whole is not emitted
        }
        let mut edits = found.iter().zip(&st.ranges).filter_map(changed).peekable();
        if edits.peek().is_none() {
            out.extend_from_slice(raw);
        } else {
            splice(raw, edits, out);
        }
        Ok(Outcome::Done)
    }

    /// Feeds the texts found to their streams' filters, unless one is not an open stream's or
    /// would fire a stop: then every filter is put back, and `false`.
    fn feed(py: Python<'_>, st: &mut StageState) -> PyResult<bool> {
        let found = &st.scanner.found;
        st.emitted.clear();
        st.ranges.clear();
        st.befores.clear();
        for (k, f) in found.iter().enumerate() {
            let same = |ids: &[i64; 2], count: u8| *ids == f.ids && count == f.id_count;
            let entry = st.table.iter().position(|e| same(&e.ids, e.id_count));
            // The same stream in two elements (two choices with one index): the machine's
            // rules decide. Texts of one element (Gemini's parts) feed its filter in order.
            let duplicate =
                found[..k].iter().any(|g| same(&g.ids, g.id_count) && g.group != f.group);
            let fed = match entry {
                Some(i) if !duplicate => {
                    let text = &st.scanner.scratch[f.text.clone()];
                    let from = st.emitted.len();
                    let filter = st.table[i].filter.get();
                    let before = filter.feed_unless_stop(py, text, &mut st.emitted)?;
                    st.ranges.push((from, st.emitted.len()));
                    before.map(|before| st.befores.push((i, before)))
                }
                _ => None,
            };
            if fed.is_none() {
                Self::restore(py, &st.table, &st.befores)?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Responses: what the machine would record of a delta handled here. The text emitted
    /// goes to its part's list, and the sequence number is kept for the machine (a delta held
    /// back whole is not emitted: it takes no number, but it tells the machine that the
    /// upstream numbers its events). `false`, with the filters put back, for an emitted text
    /// that is not UTF-8.
    fn note_responses(
        py: Python<'_>,
        st: &mut StageState,
        sequence: Option<i64>,
    ) -> PyResult<bool> {
        for (&(x, y), &(i, _)) in st.ranges.iter().zip(&st.befores) {
            let Some(sink) = &st.table[i].sink else { continue };
            if x == y {
                continue;
            }
            let Ok(text) = std::str::from_utf8(&st.emitted[x..y]) else {
                Self::restore(py, &st.table, &st.befores)?;
                return Ok(false);
            };
            sink.bind(py).append(PyString::new(py, text))?;
        }
        match sequence {
            Some(n) if st.ranges.first().is_some_and(|&(x, y)| x < y) => {
                st.floor = n;
                st.sequence = Some(n);
            }
            _ => st.sequence = Some(st.sequence.unwrap_or(st.floor)),
        }
        Ok(true)
    }

    /// Puts back the filters fed for the event being handled.
    fn restore(py: Python<'_>, table: &[Entry], befores: &[(usize, Saved)]) -> PyResult<()> {
        for &(i, before) in befores.iter().rev() {
            table[i].filter.get().restore(py, before)?;
        }
        Ok(())
    }
}

#[pymethods]
impl SSEStage {
    #[new]
    #[pyo3(signature = (driver, shape, event))]
    fn new(
        py: Python<'_>,
        driver: Bound<'_, PyAny>,
        shape: &str,
        event: Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let kind = match shape {
            "chat" => Kind::Chat,
            "messages" => Kind::Messages,
            "responses" => Kind::Responses,
            "gemini" => Kind::Gemini,
            other => {
                return Err(PyValueError::new_err(format!(
                    "shape must be 'chat', 'messages', 'responses' or 'gemini', not {other:?}"
                )))
            }
        };
        let stage = SSEStage {
            state: TryLock::new(StageState {
                parser: Parser::new(),
                scanner: Scanner::new(),
                kind,
                fast: false,
                table: Vec::new(),
                floor: i64::MAX,
                sequence: None,
                template: Vec::new(),
                template_fresh: false,
                emitted: Vec::new(),
                ranges: Vec::new(),
                befores: Vec::new(),
            }),
            driver: driver.unbind(),
            event: event.unbind(),
            closing: AtomicBool::new(false),
        };
        {
            let mut st = stage.state(py)?;
            stage.sync(py, &mut st)?;
        }
        Ok(stage)
    }

    /// Parses a body chunk; returns the bytes to forward (empty for none).
    fn push<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.parse(py, item)
    }

    /// Every text stream stopped with `on_stop="close"`: close the upstream, then `end()`.
    #[getter]
    fn closing(&self) -> bool {
        self.is_closing()
    }

    /// The end of the body: the block a final `\r` completes, then what the machine still owes.
    fn end<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = self.finish(py)?;
        let items = PyList::empty(py);
        if !out.as_bytes().is_empty() {
            items.append(out)?;
        }
        Ok(items)
    }

    /// Some of an unfinished block has been received.
    #[getter]
    fn partial(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state(py)?.parser.partial())
    }
}
