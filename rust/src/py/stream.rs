//! The native pull iterator `StopStream`: wraps an upstream iterable of `str` or bytes chunks.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyIterator, PyString, PyTuple};
use pyo3::PyTraverseError;

use super::convert::{bytes_output, chunk_bytes, feed_str, make_str};
use super::errors::{map_error, parse_errors, type_name};
use super::stopset::{parse_stops, stop_index, stop_reason, stop_sequence, Stops};
use super::try_lock;
use crate::lock::TryLock;
use crate::{ByteStream, Status, TextStream};

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

pub(super) fn new_closer(
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
pub(super) struct StopStream {
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
