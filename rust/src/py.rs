//! Python bindings: convert, call the core, map errors. Nothing else lives here.
//!
//! Performance choices:
//! * ASCII `str` chunks are read in place; other chunks are encoded onto the stack from the
//!   string's own storage, so CPython never builds a UTF-8 copy per chunk. A chunk that passes
//!   through whole is returned as the very same object.
//! * Classes are `frozen`: no borrow flag. Per-object state sits behind a try-lock (`lock.rs`):
//!   a plain flag under the GIL, an atomic in a free-threaded build. Filters take it only around
//!   their pure-Rust work, building Python objects before and after, so no Python code (not even
//!   a garbage-collection finalizer) runs while they hold it; in a free-threaded build concurrent
//!   calls on one filter are serialized. The stream holds it across its upstream pull and
//!   refuses a second entry instead.
//! * The GIL is released only for one-shot `truncate` on large texts; for token-sized chunks a
//!   release costs more than the scan.
//! * Compiled stop lists are shared: a small cache of recent lists here (compared item by item,
//!   or by identity for the same tuple), then `StopSet::cached`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{
    PyMemoryError, PyRuntimeError, PyTypeError, PyUnicodeDecodeError, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyIterator, PyList, PyMemoryView, PyString, PyTuple};
use pyo3::PyTraverseError;

use crate::lock::{Guard, TryLock};
use crate::{ByteOut, ByteStream, Emit, Error, Status, StopSet, TextStream};

/// Inputs at least this long are scanned with the GIL released.
const DETACH_THRESHOLD: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Conversions

/// A stop list as given (kept for `stops`, `stop_sequence`) and compiled.
///
/// A Python object, so that filters share it by reference count (a plain increment under the
/// GIL) rather than by `Arc` (an atomic one), and so that the tuple is built once per list.
#[pyclass(frozen, module = "stopstream._core")]
struct Compiled {
    tuple: Py<PyTuple>,
    set: Arc<StopSet>,
}

/// A filter's handle on its compiled stop list.
struct Stops(Py<Compiled>);

impl std::ops::Deref for Stops {
    type Target = Compiled;

    fn deref(&self) -> &Compiled {
        self.0.get()
    }
}

/// The stop lists used most recently, newest first. A gateway builds a filter per request,
/// nearly always with one of a few lists: comparing the new list with these directly (a length
/// check and a `memcmp` per stop) skips hashing and the process-wide cache.
static RECENT: TryLock<Vec<Py<Compiled>>> = TryLock::new(Vec::new());
const RECENT_LEN: usize = 8;

/// Looks `stops` up among the recent lists without building anything: `None`, a `str`, or a
/// list or tuple of `str` whose UTF-8 bytes equal a recent list's, stop by stop.
fn recent_hit(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>) -> Option<Stops> {
    // Only exact `str`: the tuple handed out holds the first list's objects.
    let same = |item: &Bound<'_, PyAny>, pat: &[u8]| {
        item.cast_exact::<PyString>().is_ok_and(|s| s.to_str().is_ok_and(|v| v.as_bytes() == pat))
    };
    let matches = |pats: &[Box<[u8]>]| -> bool {
        match stops {
            None => pats.is_empty(),
            Some(obj) if obj.is_none() => pats.is_empty(),
            Some(obj) => {
                if let Ok(l) = obj.cast_exact::<PyList>() {
                    pats.len() == l.len() && pats.iter().zip(l.iter()).all(|(p, i)| same(&i, p))
                } else if let Ok(t) = obj.cast_exact::<PyTuple>() {
                    pats.len() == t.len() && pats.iter().zip(t.iter()).all(|(p, i)| same(&i, p))
                } else {
                    pats.len() == 1 && same(obj, &pats[0])
                }
            }
        }
    };
    let mut recent = try_lock(py, &RECENT)?;
    // The very tuple a list was compiled from is immutable: no need to compare its items.
    let pos = match stops {
        Some(obj) => recent.iter().position(|c| c.get().tuple.bind(py).is(obj)),
        None => None,
    };
    if let Some(pos) = pos {
        let hit = recent.remove(pos);
        recent.insert(0, hit);
        return Some(Stops(recent[0].clone_ref(py)));
    }
    let pos = recent.iter().position(|c| matches(c.get().set.stops()))?;
    let mut hit = recent.remove(pos);
    // Equal items in an exact tuple (whose items `matches` checked are exact `str`): remember
    // this tuple, so that passing it again is an identity check.
    if let Some(t) = stops.and_then(|o| o.cast_exact::<PyTuple>().ok()) {
        let set = Arc::clone(&hit.get().set);
        if let Ok(c) = Py::new(py, Compiled { tuple: t.clone().unbind(), set }) {
            hit = c;
        }
    }
    recent.insert(0, hit);
    Some(Stops(recent[0].clone_ref(py)))
}

fn remember(py: Python<'_>, compiled: &Py<Compiled>) {
    if let Some(mut recent) = try_lock(py, &RECENT) {
        recent.insert(0, compiled.clone_ref(py));
        recent.truncate(RECENT_LEN);
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// UTF-8 bytes of a `str`; lone surrogates are encoded as CPython's `surrogatepass` does.
fn str_bytes<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(v) = s.to_str() {
        return Ok(Cow::Borrowed(v.as_bytes()));
    }
    // Through the type: a subclass's own `encode` must not decide what is matched.
    let b = s.py().get_type::<PyString>().call_method1("encode", (s, "utf-8", "surrogatepass"))?;
    Ok(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec()))
}

/// Stack room for the UTF-8 of a token-sized chunk.
const CHUNK_STACK: usize = 256;

/// UTF-8 bytes of a `str` chunk, without making CPython build (and keep) a UTF-8 copy of a
/// non-ASCII string, which is a heap allocation per chunk: the code points are encoded into
/// `stack` (lone surrogates as `surrogatepass` does). ASCII strings are read in place; long
/// chunks and other interpreters go through `str_bytes`.
fn chunk_utf8<'a>(
    s: &'a Bound<'_, PyString>,
    stack: &'a mut [u8; CHUNK_STACK],
) -> PyResult<Cow<'a, [u8]>> {
    #[cfg(all(not(any(Py_LIMITED_API, PyPy, GraalPy)), target_endian = "little"))]
    {
        use pyo3::types::string::PyStringData;
        // SAFETY: `data` decodes the kind bits of CPython's string header, which PyO3 does
        // correctly for the little-endian targets this is compiled for (and tests on x86_64);
        // the slices it returns borrow `s`, which outlives them.
        #[allow(unsafe_code)]
        let data = unsafe { s.data() };
        if let Ok(data) = data {
            let n = match data {
                PyStringData::Ucs1(d) if d.is_ascii() => return Ok(Cow::Borrowed(d)),
                PyStringData::Ucs1(d) => crate::encode_code_points(d, stack),
                PyStringData::Ucs2(d) => crate::encode_code_points(d, stack),
                PyStringData::Ucs4(d) => crate::encode_code_points(d, stack),
            };
            if let Some(n) = n {
                return Ok(Cow::Borrowed(&stack[..n]));
            }
        }
    }
    #[cfg(not(all(not(any(Py_LIMITED_API, PyPy, GraalPy)), target_endian = "little")))]
    let _ = stack;
    str_bytes(s)
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

fn not_stops(obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "stops must be None, a str or an iterable of str, not {}",
        type_name(obj)
    ))
}

fn parse_stops(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>) -> PyResult<Stops> {
    if let Some(hit) = recent_hit(py, stops) {
        return Ok(hit);
    }
    let Some(obj) = stops.filter(|o| !o.is_none()) else {
        return compile::<&[u8]>(py, &[], &[], None);
    };
    let items: Vec<Bound<'_, PyAny>> = if obj.is_instance_of::<PyString>() {
        vec![obj.clone()]
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else if obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyMemoryView>()
    {
        return Err(not_stops(obj));
    } else {
        obj.try_iter().map_err(|_| not_stops(obj))?.collect::<PyResult<_>>()?
    };
    let mut encoded: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "stop at position {i} must be str, not {}",
                type_name(item)
            ))
        })?;
        encoded.push(str_bytes(s)?);
    }
    let reuse = obj
        .cast_exact::<PyTuple>()
        .ok()
        .filter(|_| items.iter().all(Bound::is_exact_instance_of::<PyString>));
    compile(py, &items, &encoded, reuse)
}

fn compile<B: AsRef<[u8]>>(
    py: Python<'_>,
    items: &[Bound<'_, PyAny>],
    encoded: &[B],
    reuse: Option<&Bound<'_, PyTuple>>,
) -> PyResult<Stops> {
    let set = StopSet::cached(encoded).map_err(|e| map_error(py, &e))?;
    // Exact `str` objects (a subclass's value, not its `__str__`): `stops` hands out an
    // immutable tuple of the values given, shared by every filter built from this list.
    let exact = items
        .iter()
        .zip(encoded)
        .map(|(item, bytes)| {
            if item.is_exact_instance_of::<PyString>() {
                Ok(item.clone())
            } else {
                make_str(py, bytes.as_ref()).map(Bound::into_any)
            }
        })
        .collect::<PyResult<Vec<_>>>()?;
    let tuple = match reuse {
        Some(t) => t.clone().unbind(),
        None => PyTuple::new(py, exact)?.unbind(),
    };
    let compiled = Py::new(py, Compiled { tuple, set })?;
    remember(py, &compiled);
    Ok(Stops(compiled))
}

fn map_error(py: Python<'_>, e: &Error) -> PyErr {
    if let Some(i) = e.empty_stop_index() {
        return PyValueError::new_err(format!("stop at position {i} is empty"));
    }
    if e.is_too_large() {
        return PyMemoryError::new_err(e.to_string());
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

/// The per-object lock, if free.
#[inline]
fn try_lock<'a, T>(_py: Python<'_>, m: &'a TryLock<T>) -> Option<Guard<'a, T>> {
    // SAFETY: the token proves this thread is attached (holds the GIL in a GIL build), and no
    // guard is kept across `Python::detach` in this module.
    #[allow(unsafe_code)]
    unsafe {
        m.try_acquire()
    }
}

/// The per-object lock of a filter. Filters hold it only around their pure-Rust work (Python
/// objects are built before taking it and after releasing it), so under the GIL it is always
/// free, except for a call that re-enters the filter while it is held, which can only come from
/// a bug: that raises `RuntimeError` rather than deadlock. In a free-threaded build a concurrent
/// call on the same filter yields its thread, detached from the interpreter, until the holder
/// is done: calls are serialized.
fn lock<'a, T>(py: Python<'_>, m: &'a TryLock<T>) -> PyResult<Guard<'a, T>> {
    loop {
        if let Some(g) = try_lock(py, m) {
            return Ok(g);
        }
        if cfg!(not(Py_GIL_DISABLED)) {
            return Err(PyRuntimeError::new_err("filter called re-entrantly while in use"));
        }
        py.detach(std::thread::yield_now);
    }
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

/// Feeds a `str` chunk: `step` runs the stream's `feed` on the chunk's UTF-8 and returns the
/// state from before the call with the outcome (the filter takes its lock there, the stream
/// already holds its own). Returns the text to emit, `None` when nothing is emitted.
fn feed_str<'py>(
    py: Python<'py>,
    set: &StopSet,
    text: &Bound<'py, PyString>,
    step: impl FnOnce(&[u8]) -> PyResult<(TextStream, Result<Emit, Error>)>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let mut stack = [0u8; CHUNK_STACK];
    let bytes = chunk_utf8(text, &mut stack)?;
    let (before, result) = step(&bytes)?;
    let e = result.map_err(|e| map_error(py, &e))?;
    if e.from_held == 0 {
        if e.from_input == 0 {
            return Ok(None);
        }
        if e.from_input == bytes.len() && text.is_exact_instance_of::<PyString>() {
            return Ok(Some(text.clone()));
        }
        return make_str(py, &bytes[..e.from_input]).map(Some);
    }
    let mut out = Vec::with_capacity(e.from_held + e.from_input);
    out.extend_from_slice(&before.held(set)[..e.from_held]);
    out.extend_from_slice(&bytes[..e.from_input]);
    make_str(py, &out).map(Some)
}

/// Incremental stop-sequence filter over `str` chunks.
#[pyclass(frozen, module = "stopstream._core")]
struct StopFilter {
    stops: Stops,
    state: TryLock<TextStream>,
}

#[pymethods]
impl StopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = false))]
    fn new(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>, include_stop: bool) -> PyResult<Self> {
        Ok(StopFilter {
            stops: parse_stops(py, stops)?,
            state: TryLock::new(TextStream::new(include_stop)),
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
        let set = &*self.stops.set;
        let out = feed_str(py, set, text, |bytes| {
            let mut st = lock(py, &self.state)?;
            let before = *st;
            Ok((before, st.feed(set, bytes)))
        })?;
        Ok(out.unwrap_or_else(|| PyString::new(py, "")))
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let held = lock(py, &self.state)?.finish(&self.stops.set);
        make_str(py, held)
    }

    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        lock(py, &self.state)?.reset();
        Ok(())
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stops.tuple.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock(py, &self.state)?.include_stop())
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(lock(py, &self.state)?.status(), Status::Stopped(_)))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let status = lock(py, &self.state)?.status();
        Ok(stop_sequence(py, &self.stops, status))
    }

    #[getter]
    fn stop_index(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        Ok(stop_index(lock(py, &self.state)?.status()))
    }

    #[getter]
    fn stop_reason(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        Ok(stop_reason(lock(py, &self.state)?.status()))
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let held = lock(py, &self.state)?.held(&self.stops.set);
        make_str(py, held)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let include = self.include_stop(py)?;
        let stops = self.stops.tuple.bind(py).repr()?;
        Ok(format!("StopFilter({stops}, include_stop={})", if include { "True" } else { "False" }))
    }
}

// ---------------------------------------------------------------------------------------------
// Bytes

/// The bytes to emit after a `feed` of `data` (whose bytes are `bytes`) that produced `result`,
/// with `out` the buffer it wrote to.
fn bytes_output<'py>(
    py: Python<'py>,
    result: Result<ByteOut, Error>,
    data: &Bound<'py, PyAny>,
    bytes: &[u8],
    out: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    match result.map_err(|e| map_error(py, &e))? {
        ByteOut::Input => match data.cast_exact::<PyBytes>() {
            Ok(b) => Ok(b.clone()),
            Err(_) => Ok(PyBytes::new(py, bytes)),
        },
        ByteOut::Buffer => Ok(PyBytes::new(py, out)),
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
    state: TryLock<ByteStream>,
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
            state: TryLock::new(ByteStream::new(include_stop, replace)),
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
        let mut out = Vec::new();
        let result = lock(py, &self.state)?.feed(&self.stops.set, &bytes, &mut out);
        bytes_output(py, result, data, &bytes, &out)
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::new();
        let result = lock(py, &self.state)?.finish(&self.stops.set, &mut out);
        result.map_err(|e| map_error(py, &e))?;
        Ok(PyBytes::new(py, &out))
    }

    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        lock(py, &self.state)?.reset();
        Ok(())
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stops.tuple.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock(py, &self.state)?.include_stop())
    }

    #[getter]
    fn errors(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(if lock(py, &self.state)?.replace() { "replace" } else { "strict" })
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(lock(py, &self.state)?.status(), Status::Stopped(_)))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let status = lock(py, &self.state)?.status();
        Ok(stop_sequence(py, &self.stops, status))
    }

    #[getter]
    fn stop_index(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        Ok(stop_index(lock(py, &self.state)?.status()))
    }

    #[getter]
    fn stop_reason(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        Ok(stop_reason(lock(py, &self.state)?.status()))
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let pending = byte_pending(&self.stops.set, &*lock(py, &self.state)?);
        Ok(PyBytes::new(py, &pending))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let st = *lock(py, &self.state)?;
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
    /// The upstream iterator, until the stream ends or is cleared by the GC.
    upstream: Option<Py<PyIterator>>,
    /// A `stopstream._finalize.UpstreamCloser` holding the iterator and, when it is not its own
    /// iterator, the object given (an SDK stream whose `__iter__` returns a generator, closed
    /// too so its connection is released). Dropping it closes them.
    closer: Option<Py<PyAny>>,
    /// Items pulled so far (to name a bad item's position).
    position: usize,
    /// No more output: a stop fired, the upstream ended or raised, or the stream was closed.
    done: bool,
    /// An exception from closing the upstream after the last piece, raised on the next call.
    deferred: Option<PyErr>,
}

impl StreamState {
    /// Ends the stream and closes the upstream (at most once over the stream's life).
    fn close_upstream(&mut self, py: Python<'_>) -> PyResult<()> {
        self.done = true;
        self.upstream = None;
        match self.closer.take() {
            Some(closer) => closer.bind(py).call_method0(pyo3::intern!(py, "close")).map(drop),
            None => Ok(()),
        }
    }

    /// Ends the stream after the upstream ran out by itself: nothing to close.
    fn release_upstream(&mut self, py: Python<'_>) -> PyResult<()> {
        self.done = true;
        self.upstream = None;
        match self.closer.take() {
            Some(closer) => closer.bind(py).call_method0(pyo3::intern!(py, "disarm")).map(drop),
            None => Ok(()),
        }
    }
}

static CLOSER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn new_closer(
    py: Python<'_>,
    iter: &Bound<'_, PyIterator>,
    source: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let class = CLOSER.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("stopstream._finalize")?.getattr("UpstreamCloser")?.unbind())
    })?;
    let closer = match source {
        Some(src) => class.bind(py).call1((iter, src))?,
        None => class.bind(py).call1((iter,))?,
    };
    Ok(closer.unbind())
}

/// Iterator wrapping an upstream iterable of `str` or bytes chunks.
///
/// `__next__` holds the state lock for its whole call, upstream pull included: one uncontended
/// lock per chunk. A second `__next__` meanwhile (another thread, or re-entry from the upstream)
/// finds the lock taken and raises `RuntimeError`, as a generator that is already executing
/// does; a `close()` meanwhile is recorded and carried out by the running `__next__` as soon as
/// its pull returns (cancellation from another thread). The attributes are read from a snapshot published after every
/// `__next__`, so they never wait and can be read from anywhere, upstream code included.
#[pyclass(frozen, module = "stopstream._core")]
struct StopStream {
    stops: Stops,
    include_stop: bool,
    replace: bool,
    state: TryLock<StreamState>,
    /// What the attributes report, published after every `__next__`, so reading them never
    /// waits for (or re-enters) a pull in progress.
    snapshot: AtomicU64,
    /// The incomplete character held by a bytes stream: length in the low byte, then the bytes.
    tail: AtomicU32,
    /// `close()` was called while a `__next__` was running; that call closes on its way out.
    close_requested: AtomicBool,
}

/// A stream's attributes packed in one word: state id (32 bits), mode (2 bits), status (30 bits:
/// 0 open, 1 finished, 2 + i stopped by stop i).
#[derive(Clone, Copy)]
struct Snapshot {
    sid: u32,
    mode: u8,
    status: Status,
}

impl Snapshot {
    const MODE_TEXT: u8 = 1;
    const MODE_BYTES: u8 = 2;

    fn pack(self) -> u64 {
        let status: u64 = match self.status {
            Status::Open => 0,
            Status::Finished => 1,
            Status::Stopped(i) => 2 + i as u64,
        };
        u64::from(self.sid) | u64::from(self.mode) << 32 | status << 34
    }

    fn unpack(word: u64) -> Snapshot {
        let status = match word >> 34 {
            0 => Status::Open,
            1 => Status::Finished,
            i => Status::Stopped((i - 2) as usize),
        };
        Snapshot { sid: word as u32, mode: (word >> 32) as u8 & 3, status }
    }
}

impl StopStream {
    /// Publishes the attributes after a change of state.
    fn publish(&self, st: &StreamState) {
        let (snap, tail) = match &st.mode {
            Mode::Unknown => (Snapshot { sid: 0, mode: 0, status: Status::Open }, 0),
            Mode::Text(t) => {
                (Snapshot { sid: t.state_id(), mode: Snapshot::MODE_TEXT, status: t.status() }, 0)
            }
            Mode::Bytes(b) => {
                let mut tail = b.tail().len() as u32;
                for (i, &byte) in b.tail().iter().enumerate() {
                    tail |= u32::from(byte) << (8 * (i + 1));
                }
                let snap = Snapshot {
                    sid: b.text().state_id(),
                    mode: Snapshot::MODE_BYTES,
                    status: b.status(),
                };
                (snap, tail)
            }
        };
        self.tail.store(tail, Ordering::Relaxed);
        self.snapshot.store(snap.pack(), Ordering::Release);
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot::unpack(self.snapshot.load(Ordering::Acquire))
    }

    /// Feeds one upstream item; `Ok(None)` when it produced no output.
    fn feed_item<'py>(
        &self,
        py: Python<'py>,
        st: &mut StreamState,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let set = &*self.stops.set;
        if let Mode::Text(t) = &mut st.mode {
            if let Ok(text) = item.cast::<PyString>() {
                let out = feed_str(py, set, text, |bytes| {
                    let before = *t;
                    Ok((before, t.feed(set, bytes)))
                })?;
                return Ok(out.map(Bound::into_any));
            }
        }
        if matches!(st.mode, Mode::Unknown) {
            if item.is_instance_of::<PyString>() {
                st.mode = Mode::Text(TextStream::new(self.include_stop));
                return self.feed_item(py, st, item, position);
            } else if chunk_bytes(item)?.is_some() {
                st.mode = Mode::Bytes(ByteStream::new(self.include_stop, self.replace));
            } else {
                return Err(PyTypeError::new_err(format!(
                    "item at position {position} must be str or bytes-like, not {}",
                    type_name(item)
                )));
            }
        }
        match &mut st.mode {
            Mode::Bytes(b) => {
                let Some(bytes) = chunk_bytes(item)? else {
                    return Err(PyTypeError::new_err(format!(
                        "item at position {position} is {}, but the stream started with bytes",
                        type_name(item)
                    )));
                };
                let mut buf = Vec::new();
                let result = b.feed(set, &bytes, &mut buf);
                let out = bytes_output(py, result, item, &bytes, &buf)?;
                Ok((!out.as_bytes().is_empty()).then(|| out.into_any()))
            }
            _ => Err(PyTypeError::new_err(format!(
                "item at position {position} is {}, but the stream started with str",
                type_name(item)
            ))),
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

    fn next_piece<'py>(
        &self,
        py: Python<'py>,
        st: &mut StreamState,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            if st.done {
                return st.deferred.take().map_or(Ok(None), Err);
            }
            let Some(upstream) = st.upstream.as_ref() else { return Ok(None) };
            let item = match upstream.bind(py).clone().next() {
                Some(Ok(item)) => item,
                None => {
                    st.release_upstream(py)?;
                    return self.finish_mode(py, st);
                }
                Some(Err(err)) => {
                    st.done = true;
                    return Err(err);
                }
            };
            let position = st.position;
            st.position += 1;
            let out = match self.feed_item(py, st, &item, position) {
                Ok(out) => out,
                Err(err) => {
                    // The bad item is consumed and cannot be fed again; going on would splice
                    // the text around it. End the stream (like an upstream error) and cancel
                    // the upstream. A failure to close is kept as the error's context.
                    if let Err(close_error) = st.close_upstream(py) {
                        err.set_context(py, Some(close_error));
                    }
                    return Err(err);
                }
            };
            if matches!(st.mode.status(), Status::Stopped(_)) {
                if let Err(err) = st.close_upstream(py) {
                    if out.is_none() {
                        return Err(err);
                    }
                    st.deferred = Some(err);
                }
                return Ok(out);
            }
            if out.is_some() {
                return Ok(out);
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
        let source = (!upstream.is(chunks)).then_some(chunks);
        let closer = new_closer(py, &upstream, source)?;
        Ok(StopStream {
            stops,
            include_stop,
            replace,
            state: TryLock::new(StreamState {
                mode: Mode::Unknown,
                upstream: Some(upstream.unbind()),
                closer: Some(closer),
                position: 0,
                done: false,
                deferred: None,
            }),
            snapshot: AtomicU64::new(0),
            tail: AtomicU32::new(0),
            close_requested: AtomicBool::new(false),
        })
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(mut st) = try_lock(py, &self.state) else {
            return Err(PyRuntimeError::new_err(
                "stream is already being iterated (concurrent or re-entrant call)",
            ));
        };
        let mut result = self.next_piece(py, &mut st);
        if self.close_requested.load(Ordering::Acquire) {
            // Closed from elsewhere during the pull: the consumer wants no more output.
            let closed = st.close_upstream(py);
            result = closed.and(result.map(|_| None));
        }
        self.publish(&st);
        drop(st);
        if self.close_requested.load(Ordering::Acquire) {
            // A `close()` that came after the check above found the lock taken and left its
            // request (possible only in a free-threaded build): carry it out now.
            if let Some(mut st) = try_lock(py, &self.state) {
                if let Err(err) = st.close_upstream(py) {
                    err.write_unraisable(py, None);
                }
            }
        }
        result
    }

    /// Stops the stream and closes the upstream (once; later calls do nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.close_requested.store(true, Ordering::Release);
        match try_lock(py, &self.state) {
            Some(mut st) => st.close_upstream(py),
            // A `__next__` is running (another thread, or this call comes from the upstream):
            // it sees the request and closes the upstream as soon as its pull returns.
            None => Ok(()),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // A stream in use is reachable anyway; only an idle one can be part of garbage.
        // SAFETY: the collector calls `tp_traverse` on an attached thread (holding the GIL in a
        // GIL build), which is what the lock relies on.
        #[allow(unsafe_code)]
        let guard = unsafe { self.state.try_acquire() };
        if let Some(st) = guard {
            visit.call(&st.upstream)?;
            visit.call(&st.closer)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // The collector has already run the closer's finalizer (finalizers of a dead cycle run
        // before anything in it is cleared); dropping the references is all that is left.
        Python::attach(|py| {
            if let Some(mut st) = try_lock(py, &self.state) {
                st.done = true;
                st.upstream = None;
                st.closer = None;
            }
        });
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
    fn stopped(&self) -> bool {
        matches!(self.snapshot().status, Status::Stopped(_))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        stop_sequence(py, &self.stops, self.snapshot().status)
    }

    #[getter]
    fn stop_index(&self) -> Option<usize> {
        stop_index(self.snapshot().status)
    }

    #[getter]
    fn stop_reason(&self) -> Option<&'static str> {
        stop_reason(self.snapshot().status)
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let snap = self.snapshot();
        let set = &*self.stops.set;
        let held = if self.include_stop || snap.status != Status::Open {
            &[][..]
        } else {
            set.held(snap.sid)
        };
        if snap.mode == Snapshot::MODE_BYTES {
            let mut out = held.to_vec();
            if snap.status == Status::Open {
                let tail = self.tail.load(Ordering::Relaxed).to_le_bytes();
                out.extend_from_slice(&tail[1..=(tail[0] as usize).min(3)]);
            }
            return Ok(PyBytes::new(py, &out).into_any());
        }
        Ok(make_str(py, held)?.into_any())
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
