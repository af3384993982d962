//! The push filters: `StopFilter` over `str` chunks and `ByteStopFilter` over UTF-8 bytes.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use super::convert::{bytes_output, chunk_bytes, feed_str, make_str};
use super::errors::{map_error, parse_errors, type_name};
use super::lock;
use super::stopset::{resolve, stop_index, stop_reason, stop_sequence, IncludeStop, Stops};
use crate::lock::TryLock;
use crate::{ByteStream, Status, StopSet, TextStream};

/// Incremental stop-sequence filter over `str` chunks.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct StopFilter {
    stops: Stops,
    state: TryLock<TextStream>,
}

#[pymethods]
impl StopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = IncludeStop::default()))]
    #[pyo3(text_signature = "(stops, include_stop=False)")]
    fn new(
        py: Python<'_>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: IncludeStop,
    ) -> PyResult<Self> {
        let (stops, include_stop) = resolve(py, stops, include_stop)?;
        Ok(StopFilter { stops, state: TryLock::new(TextStream::new(include_stop)) })
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

pub(super) fn byte_pending(set: &StopSet, st: &ByteStream) -> Vec<u8> {
    let mut v = st.held(set).to_vec();
    v.extend_from_slice(st.tail());
    v
}

/// Incremental stop-sequence filter over UTF-8 byte chunks split anywhere.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct ByteStopFilter {
    stops: Stops,
    state: TryLock<ByteStream>,
}

#[pymethods]
impl ByteStopFilter {
    #[new]
    #[pyo3(signature = (stops, include_stop = IncludeStop::default(), errors = "strict"))]
    #[pyo3(text_signature = "(stops, include_stop=False, errors='strict')")]
    fn new(
        py: Python<'_>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: IncludeStop,
        errors: &str,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        let (stops, include_stop) = resolve(py, stops, include_stop)?;
        Ok(ByteStopFilter { stops, state: TryLock::new(ByteStream::new(include_stop, replace)) })
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
