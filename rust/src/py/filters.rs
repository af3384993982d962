//! The push filters: `StopFilter` over `str` chunks and `ByteStopFilter` over UTF-8 bytes.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use super::convert::{bytes_output, chunk_bytes, feed_str, make_str};
use super::errors::{map_error, parse_errors, type_name};
use super::lock;
use super::stopset::{
    resolve, stop_index, stop_reason, stop_sequence, IncludeStop, SkipArgs, Stops,
};
use crate::lock::TryLock;
use crate::{ByteOut, ByteStream, MatchStream, Status, TextStream};

/// A `str` filter's stream: the literal path, or the composed matcher of contract §6.
#[derive(Clone)]
pub(super) enum TextState {
    Literal(TextStream),
    Composed(MatchStream),
}

/// A bytes filter's stream.
#[derive(Clone)]
pub(super) enum ByteState {
    Literal(ByteStream),
    Composed(ByteStream<MatchStream>),
}

impl TextState {
    pub(super) fn new(stops: &Stops, include_stop: bool) -> TextState {
        match &stops.ext {
            Some(c) => TextState::Composed(MatchStream::new(&c.matcher)),
            None => TextState::Literal(TextStream::new(include_stop)),
        }
    }

    pub(super) fn status(&self) -> Status {
        match self {
            TextState::Literal(t) => t.status(),
            TextState::Composed(t) => t.status(),
        }
    }

    /// The held text.
    pub(super) fn held<'a>(&'a self, stops: &'a Stops) -> &'a [u8] {
        match self {
            TextState::Literal(t) => t.held(&stops.set),
            TextState::Composed(t) => t.held(),
        }
    }

    /// The matched text of the stop that fired, or `None` on the literal path (which reports
    /// the list's item).
    pub(super) fn matched<'a>(&'a self, stops: &'a Stops) -> Option<&'a [u8]> {
        match (self, &stops.ext) {
            (TextState::Composed(t), Some(c)) => Some(t.stop_sequence(&c.matcher)),
            _ => None,
        }
    }
}

impl ByteState {
    pub(super) fn new(stops: &Stops, include_stop: bool, replace: bool) -> ByteState {
        match &stops.ext {
            Some(c) => ByteState::Composed(ByteStream::over(MatchStream::new(&c.matcher), replace)),
            None => ByteState::Literal(ByteStream::new(include_stop, replace)),
        }
    }

    pub(super) fn status(&self) -> Status {
        match self {
            ByteState::Literal(t) => t.status(),
            ByteState::Composed(t) => t.status(),
        }
    }

    pub(super) fn replace(&self) -> bool {
        match self {
            ByteState::Literal(t) => t.replace(),
            ByteState::Composed(t) => t.replace(),
        }
    }

    /// [`ByteStream::feed_deferring`]: a decoding error that comes beside the output is the
    /// caller's to raise once the stop has been reported (contract §9.9).
    pub(super) fn feed(
        &mut self,
        stops: &Stops,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(ByteOut, Option<crate::Error>), crate::Error> {
        match (self, &stops.ext) {
            (ByteState::Literal(t), _) => t.feed_deferring(&stops.set, input, out),
            (ByteState::Composed(t), Some(c)) => t.feed_deferring(&c.matcher, input, out),
            (ByteState::Composed(_), None) => Ok((ByteOut::Buffer, None)),
        }
    }

    /// [`ByteStream::finish_deferring`], deferring as [`ByteState::feed`] does.
    pub(super) fn finish(
        &mut self,
        stops: &Stops,
        out: &mut Vec<u8>,
    ) -> Result<Option<crate::Error>, crate::Error> {
        match (self, &stops.ext) {
            (ByteState::Literal(t), _) => t.finish_deferring(&stops.set, out),
            (ByteState::Composed(t), Some(c)) => t.finish_deferring(&c.matcher, out),
            (ByteState::Composed(_), None) => Ok(None),
        }
    }

    /// Held text plus the incomplete character.
    pub(super) fn pending(&self, stops: &Stops) -> Vec<u8> {
        match self {
            ByteState::Literal(t) => [t.held(&stops.set), t.tail()].concat(),
            ByteState::Composed(t) => [t.text().held(), t.tail()].concat(),
        }
    }

    pub(super) fn matched<'a>(&'a self, stops: &'a Stops) -> Option<&'a [u8]> {
        match (self, &stops.ext) {
            (ByteState::Composed(t), Some(c)) => Some(t.text().stop_sequence(&c.matcher)),
            _ => None,
        }
    }
}

/// `stop_sequence`: the matched text for a composed list, the item as given otherwise.
pub(super) fn stop_text(
    py: Python<'_>,
    stops: &Stops,
    status: Status,
    matched: Option<&[u8]>,
) -> PyResult<Option<Py<PyAny>>> {
    match (status, matched) {
        (Status::Stopped(_), Some(m)) => Ok(Some(make_str(py, m)?.into_any().unbind())),
        _ => Ok(stop_sequence(py, stops, status)),
    }
}

/// Feeds a `str` chunk through the composed matcher: `step` runs the stream's `feed` (the
/// filter takes its lock there, the pull stream already holds its own).
pub(super) fn feed_composed<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
    step: impl FnOnce(&[u8], &mut Vec<u8>) -> PyResult<Result<ByteOut, crate::Error>>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let mut stack = [0u8; 256];
    let bytes = super::convert::chunk_utf8(text, &mut stack)?;
    let mut out = Vec::new();
    let result = step(&bytes, &mut out)?;
    match result.map_err(|e| map_error(py, &e))? {
        ByteOut::Input if bytes.is_empty() => Ok(None),
        ByteOut::Input if text.is_exact_instance_of::<PyString>() => Ok(Some(text.clone())),
        ByteOut::Input => make_str(py, &bytes).map(Some),
        ByteOut::Buffer if out.is_empty() => Ok(None),
        ByteOut::Buffer => make_str(py, &out).map(Some),
    }
}

/// Incremental stop-sequence filter over `str` chunks.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct StopFilter {
    stops: Stops,
    include_stop: bool,
    state: TryLock<TextState>,
}

impl StopFilter {
    /// Feeds `text` (UTF-8) unless it would fire a stop: appends what it emits to `out` and
    /// returns the state from before the call (for [`StopFilter::restore`]). `None` when the
    /// text would fire a stop or fail, or the list is composed (contract §6): then nothing
    /// changed, and the caller hands the text to the code that handles every case. The
    /// provider adapters' common case: a literal list, one filter, no stop.
    pub(super) fn feed_unless_stop(
        &self,
        py: Python<'_>,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> PyResult<Option<TextStream>> {
        let set = &*self.stops.set;
        let mut st = lock(py, &self.state)?;
        let TextState::Literal(t) = &mut *st else {
            return Ok(None);
        };
        let before = *t;
        match t.feed(set, text) {
            Ok(e) if !matches!(t.status(), Status::Stopped(_)) => {
                out.extend_from_slice(&before.held(set)[..e.from_held]);
                out.extend_from_slice(&text[..e.from_input]);
                Ok(Some(before))
            }
            _ => {
                *t = before;
                Ok(None)
            }
        }
    }

    /// Puts back a state returned by [`StopFilter::feed_unless_stop`].
    pub(super) fn restore(&self, py: Python<'_>, before: TextStream) -> PyResult<()> {
        if let TextState::Literal(t) = &mut *lock(py, &self.state)? {
            *t = before;
        }
        Ok(())
    }
}

/// `filter.feed(text)` when that fires no stop; else `None`, with the filter unchanged (also
/// for a composed list, contract §6). One native call for an adapter's common case (a content
/// delta that fires no stop); the adapter hands anything else to its full rules.
#[pyfunction(name = "_feed_unless_stop")]
pub(super) fn feed_unless_stop<'py>(
    py: Python<'py>,
    filter: &Bound<'py, StopFilter>,
    text: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let f = filter.get();
    let set = &*f.stops.set;
    let mut fed = false;
    let out = feed_str(py, set, text, |bytes| {
        let mut st = lock(py, &f.state)?;
        let TextState::Literal(t) = &mut *st else {
            return Ok((TextStream::new(false), Ok(crate::Emit { from_held: 0, from_input: 0 })));
        };
        let before = *t;
        let result = t.feed(set, bytes);
        if result.is_err() || matches!(t.status(), Status::Stopped(_)) {
            *t = before;
        } else {
            fed = true;
        }
        Ok((before, result))
    });
    if !fed {
        return Ok(None);
    }
    Ok(Some(out?.unwrap_or_else(|| PyString::new(py, ""))))
}

#[pymethods]
impl StopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = IncludeStop::default(), *, skip = None, skip_until = None))]
    #[pyo3(text_signature = "(stops, include_stop=False, *, skip=None, skip_until=None)")]
    fn new<'py>(
        py: Python<'py>,
        stops: Option<&Bound<'py, PyAny>>,
        include_stop: IncludeStop,
        skip: Option<&Bound<'py, PyAny>>,
        skip_until: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let (stops, include_stop) =
            resolve(py, stops, include_stop, SkipArgs { skip, skip_until })?;
        let state = TryLock::new(TextState::new(&stops, include_stop));
        Ok(StopFilter { stops, include_stop, state })
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
        if let Some(c) = &self.stops.ext {
            let out = feed_composed(py, text, |bytes, out| {
                let mut st = lock(py, &self.state)?;
                Ok(match &mut *st {
                    TextState::Composed(t) => t.feed(&c.matcher, bytes, out),
                    TextState::Literal(_) => Ok(ByteOut::Buffer),
                })
            })?;
            return Ok(out.unwrap_or_else(|| PyString::new(py, "")));
        }
        let set = &*self.stops.set;
        let out = feed_str(py, set, text, |bytes| {
            let mut st = lock(py, &self.state)?;
            match &mut *st {
                TextState::Literal(t) => {
                    let before = *t;
                    Ok((before, t.feed(set, bytes)))
                }
                TextState::Composed(_) => {
                    Ok((TextStream::new(false), Ok(crate::Emit { from_held: 0, from_input: 0 })))
                }
            }
        })?;
        Ok(out.unwrap_or_else(|| PyString::new(py, "")))
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let mut out = Vec::new();
        {
            let mut st = lock(py, &self.state)?;
            match (&mut *st, &self.stops.ext) {
                (TextState::Literal(t), _) => out.extend_from_slice(t.finish(&self.stops.set)),
                (TextState::Composed(t), Some(c)) => t.finish(&c.matcher, &mut out),
                (TextState::Composed(_), None) => {}
            }
        }
        make_str(py, &out)
    }

    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        *lock(py, &self.state)? = TextState::new(&self.stops, self.include_stop);
        Ok(())
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
    fn stopped(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(lock(py, &self.state)?.status(), Status::Stopped(_)))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let (status, matched) = {
            let st = lock(py, &self.state)?;
            (st.status(), st.matched(&self.stops).map(<[u8]>::to_vec))
        };
        stop_text(py, &self.stops, status, matched.as_deref())
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
        let held = lock(py, &self.state)?.held(&self.stops).to_vec();
        make_str(py, &held)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let include = self.include_stop;
        let stops = self.stops.tuple.bind(py).repr()?;
        Ok(format!("StopFilter({stops}, include_stop={})", if include { "True" } else { "False" }))
    }
}

/// Incremental stop-sequence filter over UTF-8 byte chunks split anywhere.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct ByteStopFilter {
    stops: Stops,
    include_stop: bool,
    state: TryLock<ByteFilterState>,
}

/// A bytes filter's stream, and the decoding error it owes.
struct ByteFilterState {
    stream: ByteState,
    /// Under strict decoding, the error of an invalid sequence whose place ended the text and
    /// so fired a stop (contract §9.9): raised by the next `feed` or `finish`, once.
    deferred: Option<crate::Error>,
}

impl std::ops::Deref for ByteFilterState {
    type Target = ByteState;

    fn deref(&self) -> &ByteState {
        &self.stream
    }
}

#[pymethods]
impl ByteStopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = IncludeStop::default(), errors = "strict", *, skip = None, skip_until = None))]
    #[pyo3(
        text_signature = "(stops, include_stop=False, errors='strict', *, skip=None, skip_until=None)"
    )]
    fn new<'py>(
        py: Python<'py>,
        stops: Option<&Bound<'py, PyAny>>,
        include_stop: IncludeStop,
        errors: &str,
        skip: Option<&Bound<'py, PyAny>>,
        skip_until: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        let (stops, include_stop) =
            resolve(py, stops, include_stop, SkipArgs { skip, skip_until })?;
        let stream = ByteState::new(&stops, include_stop, replace);
        let state = TryLock::new(ByteFilterState { stream, deferred: None });
        Ok(ByteStopFilter { stops, include_stop, state })
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
        // The exception is made once the lock is released, as every output is.
        let result = {
            let mut st = lock(py, &self.state)?;
            match st.deferred.take() {
                Some(owed) => Err(owed),
                None => st.stream.feed(&self.stops, &bytes, &mut out).map(|(fed, deferred)| {
                    st.deferred = deferred;
                    fed
                }),
            }
        };
        bytes_output(py, result, data, &bytes, &out)
    }

    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::new();
        let result = {
            let mut st = lock(py, &self.state)?;
            match st.deferred.take() {
                Some(owed) => Err(owed),
                None => st.stream.finish(&self.stops, &mut out).map(|d| st.deferred = d),
            }
        };
        result.map_err(|e| map_error(py, &e))?;
        Ok(PyBytes::new(py, &out))
    }

    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = lock(py, &self.state)?;
        let replace = st.replace();
        st.stream = ByteState::new(&self.stops, self.include_stop, replace);
        st.deferred = None;
        Ok(())
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
    fn errors(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(if lock(py, &self.state)?.replace() { "replace" } else { "strict" })
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(lock(py, &self.state)?.status(), Status::Stopped(_)))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let (status, matched) = {
            let st = lock(py, &self.state)?;
            (st.status(), st.matched(&self.stops).map(<[u8]>::to_vec))
        };
        stop_text(py, &self.stops, status, matched.as_deref())
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
        let pending = lock(py, &self.state)?.pending(&self.stops);
        Ok(PyBytes::new(py, &pending))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let replace = lock(py, &self.state)?.replace();
        let stops = self.stops.tuple.bind(py).repr()?;
        Ok(format!(
            "ByteStopFilter({stops}, include_stop={}, errors={:?})",
            if self.include_stop { "True" } else { "False" },
            if replace { "replace" } else { "strict" }
        ))
    }
}
