//! Python bindings: convert, call the core, map errors. Nothing else lives here.
//!
//! Performance choices:
//! * `str` chunks are read through CPython's cached UTF-8 view (`to_str`), which is zero-copy
//!   for ASCII strings. A chunk that passes through whole is returned as the very same object.
//! * Classes are `frozen`: no borrow flag. Per-object state sits behind a `Mutex` that is never
//!   held while Python code can run, so in a GIL build it is never contended; in a free-threaded
//!   build concurrent calls on one object are serialized (`lock_py_attached` detaches while
//!   waiting, so a stop-the-world pause cannot deadlock on it).
//! * The GIL is released only for one-shot `truncate` on large texts; for token-sized chunks a
//!   release costs more than the scan.
//! * Compiled stop lists are shared through `StopSet::cached`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyUnicodeDecodeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyByteArray, PyBytes, PyIterator, PyMemoryView, PyString, PyTuple};

use crate::{ByteOut, ByteStream, Error, Status, StopSet, TextStream};

/// Inputs at least this long are scanned with the GIL released.
const DETACH_THRESHOLD: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Conversions

/// A stop list as given (kept for `stops`, `stop_sequence`) and compiled.
struct Stops {
    tuple: Py<PyTuple>,
    set: Arc<StopSet>,
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// UTF-8 bytes of a `str`; lone surrogates are encoded as CPython's `surrogatepass` does.
fn str_bytes<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(v) = s.to_str() {
        return Ok(Cow::Borrowed(v.as_bytes()));
    }
    let b = s.call_method1("encode", ("utf-8", "surrogatepass"))?;
    Ok(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec()))
}

/// A `str` from bytes produced by the core (valid UTF-8, or surrogates from `surrogatepass`).
fn make_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    if bytes.is_empty() {
        return Ok(PyString::new(py, ""));
    }
    match PyString::from_bytes(py, bytes) {
        Ok(s) => Ok(s),
        Err(_) => PyString::from_encoded_object(
            PyBytes::new(py, bytes).as_any(),
            Some(c"utf-8"),
            Some(c"surrogatepass"),
        ),
    }
}

fn parse_stops(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>) -> PyResult<Stops> {
    let items: Vec<Bound<'_, PyAny>> = match stops {
        None => Vec::new(),
        Some(obj) if obj.is_none() => Vec::new(),
        Some(obj) if obj.is_instance_of::<PyString>() => vec![obj.clone()],
        Some(obj)
            if obj.is_instance_of::<PyBytes>()
                || obj.is_instance_of::<PyByteArray>()
                || obj.is_instance_of::<PyMemoryView>() =>
        {
            return Err(PyTypeError::new_err(format!(
                "stops must be None, a str or an iterable of str, not {}",
                type_name(obj)
            )));
        }
        Some(obj) => {
            let it = obj.try_iter().map_err(|_| {
                PyTypeError::new_err(format!(
                    "stops must be None, a str or an iterable of str, not {}",
                    type_name(obj)
                ))
            })?;
            it.collect::<PyResult<_>>()?
        }
    };
    let mut strs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "stop at position {i} must be str, not {}",
                type_name(item)
            ))
        })?;
        strs.push(s);
    }
    let encoded: Vec<Cow<'_, [u8]>> = strs.iter().map(|s| str_bytes(s)).collect::<PyResult<_>>()?;
    let set = StopSet::cached(&encoded).map_err(|e| map_error(py, &e))?;
    let tuple = PyTuple::new(py, strs)?.unbind();
    Ok(Stops { tuple, set })
}

fn map_error(py: Python<'_>, e: &Error) -> PyErr {
    if let Some(i) = e.empty_stop_index() {
        return PyValueError::new_err(format!("stop at position {i} is empty"));
    }
    if let Some(d) = e.decode_error() {
        let reason = match d.reason {
            "invalid start byte" => c"invalid start byte",
            "invalid continuation byte" => c"invalid continuation byte",
            _ => c"unexpected end of data",
        };
        return match PyUnicodeDecodeError::new(py, c"utf-8", &d.object, d.start..d.end, reason) {
            Ok(err) => PyErr::from_value(err.into_any()),
            Err(err) => err,
        };
    }
    PyValueError::new_err(e.to_string())
}

/// Bytes of a `bytes`, `bytearray` or `memoryview` chunk; `None` for any other type.
fn chunk_bytes<'a>(data: &'a Bound<'_, PyAny>) -> PyResult<Option<Cow<'a, [u8]>>> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(Some(Cow::Borrowed(b.as_bytes())));
    }
    if let Ok(b) = data.cast::<PyByteArray>() {
        return Ok(Some(Cow::Owned(b.to_vec())));
    }
    if data.is_instance_of::<PyMemoryView>() {
        let b = data.call_method0("tobytes")?;
        return Ok(Some(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec())));
    }
    Ok(None)
}

fn lock<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    m.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner)
}

fn stop_reason(status: Status) -> Option<&'static str> {
    match status {
        Status::Open => None,
        Status::Stopped(_) => Some("stop_sequence"),
        Status::Finished => Some("end"),
    }
}

fn stop_sequence(py: Python<'_>, stops: &Stops, status: Status) -> Option<Py<PyAny>> {
    match status {
        Status::Stopped(i) => stops.tuple.bind(py).get_item(i).ok().map(Bound::unbind),
        _ => None,
    }
}

fn stop_index(status: Status) -> Option<usize> {
    match status {
        Status::Stopped(i) => Some(i),
        _ => None,
    }
}

fn parse_errors(errors: &str) -> PyResult<bool> {
    match errors {
        "strict" => Ok(false),
        "replace" => Ok(true),
        other => Err(PyValueError::new_err(format!(
            "errors must be 'strict' or 'replace', not {other:?}"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Text

/// Feeds one `str` chunk; returns the text now safe to emit.
fn feed_text<'py>(
    py: Python<'py>,
    set: &StopSet,
    st: &mut TextStream,
    text: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyString>> {
    let bytes = str_bytes(text)?;
    let held = st.held(set);
    let e = st.feed(set, &bytes).map_err(|e| map_error(py, &e))?;
    if e.from_held == 0 {
        if e.from_input == bytes.len() && text.is_exact_instance_of::<PyString>() {
            return Ok(text.clone());
        }
        return make_str(py, &bytes[..e.from_input]);
    }
    let mut out = Vec::with_capacity(e.from_held + e.from_input);
    out.extend_from_slice(&held[..e.from_held]);
    out.extend_from_slice(&bytes[..e.from_input]);
    make_str(py, &out)
}

/// Incremental stop-sequence filter over `str` chunks.
#[pyclass(frozen, module = "stopstream._core")]
struct StopFilter {
    stops: Stops,
    state: Mutex<TextStream>,
}

#[pymethods]
impl StopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = false))]
    fn new(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>, include_stop: bool) -> PyResult<Self> {
        Ok(StopFilter {
            stops: parse_stops(py, stops)?,
            state: Mutex::new(TextStream::new(include_stop)),
        })
    }

    fn feed<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyString>> {
        let text = text.cast::<PyString>().map_err(|_| {
            let hint = if chunk_bytes(text).ok().flatten().is_some() {
                " (use ByteStopFilter for bytes)"
            } else {
                ""
            };
            PyTypeError::new_err(format!("feed() takes str, not {}{hint}", type_name(text)))
        })?;
        let mut st = lock(py, &self.state);
        feed_text(py, &self.stops.set, &mut st, text)
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let mut st = lock(py, &self.state);
        let held = st.finish(&self.stops.set);
        make_str(py, held)
    }

    fn reset(&self, py: Python<'_>) {
        lock(py, &self.state).reset();
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stops.tuple.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self, py: Python<'_>) -> bool {
        lock(py, &self.state).include_stop()
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> bool {
        matches!(lock(py, &self.state).status(), Status::Stopped(_))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let status = lock(py, &self.state).status();
        stop_sequence(py, &self.stops, status)
    }

    #[getter]
    fn stop_index(&self, py: Python<'_>) -> Option<usize> {
        stop_index(lock(py, &self.state).status())
    }

    #[getter]
    fn stop_reason(&self, py: Python<'_>) -> Option<&'static str> {
        stop_reason(lock(py, &self.state).status())
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let st = lock(py, &self.state);
        make_str(py, st.held(&self.stops.set))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let include = self.include_stop(py);
        let stops = self.stops.tuple.bind(py).repr()?;
        Ok(format!("StopFilter({stops}, include_stop={})", if include { "True" } else { "False" }))
    }
}

// ---------------------------------------------------------------------------------------------
// Bytes

fn feed_bytes<'py>(
    py: Python<'py>,
    set: &StopSet,
    st: &mut ByteStream,
    data: &Bound<'py, PyAny>,
    bytes: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::new();
    match st.feed(set, bytes, &mut out).map_err(|e| map_error(py, &e))? {
        ByteOut::Input => match data.cast_exact::<PyBytes>() {
            Ok(b) => Ok(b.clone()),
            Err(_) => Ok(PyBytes::new(py, bytes)),
        },
        ByteOut::Buffer => Ok(PyBytes::new(py, &out)),
    }
}

fn byte_pending(set: &StopSet, st: &ByteStream) -> Vec<u8> {
    let mut v = st.held(set).to_vec();
    v.extend_from_slice(st.tail());
    v
}

/// Incremental stop-sequence filter over UTF-8 byte chunks split anywhere.
#[pyclass(frozen, module = "stopstream._core")]
struct ByteStopFilter {
    stops: Stops,
    state: Mutex<ByteStream>,
}

#[pymethods]
impl ByteStopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = false, errors = "strict"))]
    fn new(
        py: Python<'_>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: bool,
        errors: &str,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        Ok(ByteStopFilter {
            stops: parse_stops(py, stops)?,
            state: Mutex::new(ByteStream::new(include_stop, replace)),
        })
    }

    fn feed<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let Some(bytes) = chunk_bytes(data)? else {
            return Err(PyTypeError::new_err(format!(
                "feed() takes bytes, bytearray or memoryview, not {}",
                type_name(data)
            )));
        };
        let mut st = lock(py, &self.state);
        feed_bytes(py, &self.stops.set, &mut st, data, &bytes)
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut st = lock(py, &self.state);
        let mut out = Vec::new();
        st.finish(&self.stops.set, &mut out).map_err(|e| map_error(py, &e))?;
        Ok(PyBytes::new(py, &out))
    }

    fn reset(&self, py: Python<'_>) {
        lock(py, &self.state).reset();
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stops.tuple.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self, py: Python<'_>) -> bool {
        lock(py, &self.state).include_stop()
    }

    #[getter]
    fn errors(&self, py: Python<'_>) -> &'static str {
        if lock(py, &self.state).replace() {
            "replace"
        } else {
            "strict"
        }
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> bool {
        matches!(lock(py, &self.state).status(), Status::Stopped(_))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let status = lock(py, &self.state).status();
        stop_sequence(py, &self.stops, status)
    }

    #[getter]
    fn stop_index(&self, py: Python<'_>) -> Option<usize> {
        stop_index(lock(py, &self.state).status())
    }

    #[getter]
    fn stop_reason(&self, py: Python<'_>) -> Option<&'static str> {
        stop_reason(lock(py, &self.state).status())
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let st = lock(py, &self.state);
        PyBytes::new(py, &byte_pending(&self.stops.set, &st))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let st = *lock(py, &self.state);
        let stops = self.stops.tuple.bind(py).repr()?;
        Ok(format!(
            "ByteStopFilter({stops}, include_stop={}, errors={:?})",
            if st.include_stop() { "True" } else { "False" },
            if st.replace() { "replace" } else { "strict" }
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// One shot

/// Cuts a whole text at the first stop: `(text, stop or None)`.
#[pyfunction]
#[pyo3(signature = (text, stops, include_stop = false))]
fn truncate<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyAny>,
    stops: Option<&Bound<'py, PyAny>>,
    include_stop: bool,
) -> PyResult<(Bound<'py, PyString>, Option<Py<PyAny>>)> {
    let text = text.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("truncate() takes str, not {}", type_name(text)))
    })?;
    let stops = parse_stops(py, stops)?;
    let bytes = str_bytes(text)?;
    let set = &*stops.set;
    let (n, hit) = if bytes.len() >= DETACH_THRESHOLD {
        py.detach(|| set.truncate(&bytes, include_stop))
    } else {
        set.truncate(&bytes, include_stop)
    };
    let out = if hit.is_none() && text.is_exact_instance_of::<PyString>() {
        text.clone()
    } else {
        make_str(py, &bytes[..n])?
    };
    let stop = hit.and_then(|i| stops.tuple.bind(py).get_item(i).ok().map(Bound::unbind));
    Ok((out, stop))
}

// ---------------------------------------------------------------------------------------------
// Pull API

enum Mode {
    /// No item seen yet: the first one decides.
    Unknown,
    Text(TextStream),
    Bytes(ByteStream),
}

impl Mode {
    fn status(&self) -> Status {
        match self {
            Mode::Unknown => Status::Open,
            Mode::Text(t) => t.status(),
            Mode::Bytes(b) => b.status(),
        }
    }
}

struct StreamState {
    mode: Mode,
    /// The upstream iterator, until it is exhausted or closed.
    upstream: Option<Py<PyIterator>>,
    /// The object given, when it is not its own iterator (an SDK stream whose `__iter__`
    /// returns a generator): it is closed too, so its connection is released.
    source: Option<Py<PyAny>>,
    /// Items pulled so far (to name a bad item's position).
    position: usize,
    /// No more output: a stop fired, the upstream ended, the upstream raised, or we were closed.
    done: bool,
    /// An exception from closing the upstream after the last piece, raised on the next call.
    deferred: Option<PyErr>,
}

/// Iterator wrapping an upstream iterable of `str` or bytes chunks.
#[pyclass(frozen, module = "stopstream._core")]
struct StopStream {
    stops: Stops,
    include_stop: bool,
    replace: bool,
    state: Mutex<StreamState>,
    /// Set while a `__next__` is pulling from the upstream (the lock is not held then, since
    /// upstream code may run arbitrary Python).
    busy: AtomicBool,
}

/// Resets the busy flag on every exit path.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Calls `close()` on the upstream iterator and on the object it came from, where they have one.
fn close_upstream(
    py: Python<'_>,
    upstream: (Option<Py<PyIterator>>, Option<Py<PyAny>>),
) -> PyResult<()> {
    let close = |obj: &Bound<'_, PyAny>| match obj.getattr(pyo3::intern!(py, "close")) {
        Ok(close) => close.call0().map(drop),
        Err(_) => Ok(()),
    };
    let (iter, source) = upstream;
    let first = iter.map_or(Ok(()), |it| close(it.bind(py).as_any()));
    let second = source.map_or(Ok(()), |src| close(src.bind(py)));
    first.and(second)
}

impl StreamState {
    fn take_upstream(&mut self) -> (Option<Py<PyIterator>>, Option<Py<PyAny>>) {
        (self.upstream.take(), self.source.take())
    }
}

impl StopStream {
    fn enter(&self) -> PyResult<Busy<'_>> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(PyRuntimeError::new_err(
                "stream is already being iterated (concurrent or re-entrant call)",
            ));
        }
        Ok(Busy(&self.busy))
    }

    /// Feeds one upstream item; `Ok(None)` when it produced no output.
    fn feed_item<'py>(
        &self,
        py: Python<'py>,
        st: &mut StreamState,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if matches!(st.mode, Mode::Unknown) {
            if item.is_instance_of::<PyString>() {
                st.mode = Mode::Text(TextStream::new(self.include_stop));
            } else if chunk_bytes(item)?.is_some() {
                st.mode = Mode::Bytes(ByteStream::new(self.include_stop, self.replace));
            } else {
                return Err(PyTypeError::new_err(format!(
                    "item at position {position} must be str or bytes-like, not {}",
                    type_name(item)
                )));
            }
        }
        let set = &*self.stops.set;
        match &mut st.mode {
            Mode::Text(t) => {
                let Ok(text) = item.cast::<PyString>() else {
                    return Err(PyTypeError::new_err(format!(
                        "item at position {position} is {}, but the stream started with str",
                        type_name(item)
                    )));
                };
                let out = feed_text(py, set, t, text)?;
                Ok((out.len()? > 0).then(|| out.into_any()))
            }
            Mode::Bytes(b) => {
                let Some(bytes) = chunk_bytes(item)? else {
                    return Err(PyTypeError::new_err(format!(
                        "item at position {position} is {}, but the stream started with bytes",
                        type_name(item)
                    )));
                };
                let out = feed_bytes(py, set, b, item, &bytes)?;
                Ok((!out.as_bytes().is_empty()).then(|| out.into_any()))
            }
            Mode::Unknown => Ok(None),
        }
    }

    /// The upstream ended: release what is held.
    fn finish_mode<'py>(
        &self,
        py: Python<'py>,
        st: &mut StreamState,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let set = &*self.stops.set;
        match &mut st.mode {
            Mode::Unknown => {
                // An empty upstream ends like any other stream.
                let mut t = TextStream::new(self.include_stop);
                t.finish(set);
                st.mode = Mode::Text(t);
                Ok(None)
            }
            Mode::Text(t) => {
                let held = t.finish(set);
                Ok((!held.is_empty()).then(|| make_str(py, held)).transpose()?.map(Bound::into_any))
            }
            Mode::Bytes(b) => {
                let mut out = Vec::new();
                b.finish(set, &mut out).map_err(|e| map_error(py, &e))?;
                Ok((!out.is_empty()).then(|| PyBytes::new(py, &out).into_any()))
            }
        }
    }
}

#[pymethods]
impl StopStream {
    #[new]
    #[pyo3(signature = (chunks, stops, include_stop = false, errors = "strict"))]
    fn new(
        py: Python<'_>,
        chunks: &Bound<'_, PyAny>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: bool,
        errors: &str,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        let stops = parse_stops(py, stops)?;
        let upstream = PyIterator::from_object(chunks).map_err(|_| {
            PyTypeError::new_err(format!("chunks must be iterable, not {}", type_name(chunks)))
        })?;
        let source = (!upstream.is(chunks)).then(|| chunks.clone().unbind());
        Ok(StopStream {
            stops,
            include_stop,
            replace,
            state: Mutex::new(StreamState {
                mode: Mode::Unknown,
                upstream: Some(upstream.unbind()),
                source,
                position: 0,
                done: false,
                deferred: None,
            }),
            busy: AtomicBool::new(false),
        })
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let _busy = self.enter()?;
        loop {
            let (upstream, position) = {
                let mut st = lock(py, &self.state);
                if let Some(err) = st.deferred.take() {
                    return Err(err);
                }
                if st.done {
                    return Ok(None);
                }
                let Some(up) = st.upstream.as_ref() else { return Ok(None) };
                (up.clone_ref(py), st.position)
            };
            // Pull without holding the lock: upstream code may run any Python.
            let next = upstream.bind(py).clone().next();
            let mut st = lock(py, &self.state);
            let item = match next {
                Some(Ok(item)) => item,
                None => {
                    st.upstream = None;
                    st.done = true;
                    return self.finish_mode(py, &mut st);
                }
                Some(Err(err)) => {
                    st.done = true;
                    return Err(err);
                }
            };
            st.position = position + 1;
            let out = self.feed_item(py, &mut st, &item, position)?;
            if matches!(st.mode.status(), Status::Stopped(_)) {
                st.done = true;
                let up = st.take_upstream();
                drop(st);
                if let Err(err) = close_upstream(py, up) {
                    if out.is_none() {
                        return Err(err);
                    }
                    lock(py, &self.state).deferred = Some(err);
                }
                return Ok(out);
            }
            if out.is_some() {
                return Ok(out);
            }
        }
    }

    /// Stops the stream and closes the upstream (once; later calls do nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let up = {
            let mut st = lock(py, &self.state);
            st.done = true;
            st.take_upstream()
        };
        close_upstream(py, up)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stops.tuple.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self) -> bool {
        self.include_stop
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> bool {
        matches!(lock(py, &self.state).mode.status(), Status::Stopped(_))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let status = lock(py, &self.state).mode.status();
        stop_sequence(py, &self.stops, status)
    }

    #[getter]
    fn stop_index(&self, py: Python<'_>) -> Option<usize> {
        stop_index(lock(py, &self.state).mode.status())
    }

    #[getter]
    fn stop_reason(&self, py: Python<'_>) -> Option<&'static str> {
        stop_reason(lock(py, &self.state).mode.status())
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = lock(py, &self.state);
        let set = &*self.stops.set;
        Ok(match &st.mode {
            Mode::Unknown => PyString::new(py, "").into_any(),
            Mode::Text(t) => make_str(py, t.held(set))?.into_any(),
            Mode::Bytes(b) => PyBytes::new(py, &byte_pending(set, b)).into_any(),
        })
    }
}

impl Drop for StopStream {
    /// A stream dropped after partial iteration closes its upstream, as a generator would.
    fn drop(&mut self) {
        let up = self.state.get_mut().unwrap_or_else(PoisonError::into_inner).take_upstream();
        if up.0.is_some() || up.1.is_some() {
            Python::attach(|py| {
                // Deallocation can happen while an exception is propagating (a temporary
                // stream whose `__next__` raised): keep it intact around the `close()` calls.
                let in_flight = PyErr::take(py);
                if let Err(err) = close_upstream(py, up) {
                    err.write_unraisable(py, None);
                }
                if let Some(err) = in_flight {
                    err.restore(py);
                }
            });
        }
    }
}

/// The compiled part of `stopstream`.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StopFilter>()?;
    m.add_class::<ByteStopFilter>()?;
    m.add_class::<StopStream>()?;
    m.add_function(wrap_pyfunction!(truncate, m)?)?;
    Ok(())
}
