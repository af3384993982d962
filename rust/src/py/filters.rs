//! The push filters: `StopFilter` over `str` chunks and `ByteStopFilter` over UTF-8 bytes, both
//! over the core's one stream type ([`Filter`]).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::convert::{bytes_out, chunk_bytes, chunk_utf8, make_str, str_out};
use super::errors::{map_error, parse_errors, type_name, wrong_type};
use super::lock::lock;
use super::report::{reports, Reports};
use super::stopset::{resolve, IncludeStop, SkipArgs, StopSetRef};
use crate::lock::TryLock;
use crate::{Detail, Filter, StopReport};

/// What both push filters hold: the stop list, `include_stop`, and the stream.
trait Push: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync {
    fn parts(&self) -> (&StopSetRef, bool, &TryLock<Filter>);
}

impl<T: Push> Reports for T {
    fn stop_list<'a>(slf: &'a Bound<'_, Self>) -> &'a StopSetRef {
        slf.get().parts().0
    }

    fn includes_stop(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(slf.get().parts().1)
    }

    fn stop_report(slf: &Bound<'_, Self>, detail: Detail) -> PyResult<StopReport> {
        Ok(lock(slf.py(), slf.get().parts().2)?.stop_report(detail))
    }
}

/// Incremental stop-sequence filter over `str` chunks.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct StopFilter {
    stops: StopSetRef,
    include_stop: bool,
    /// Also fed by the adapters' native stages (`stages/sse.rs`, `stages/sdk.rs`), under [`lock`].
    pub(super) state: TryLock<Filter>,
}

reports! {
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
            let state = TryLock::new(Filter::new(&stops.core, false, include_stop, false));
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
            let mut stack = None;
            let bytes = chunk_utf8(text, &mut stack)?;
            let mut st = lock(py, &self.state)?;
            let out = match st.feed(&bytes) {
                Ok(out) => out,
                Err(e) => {
                    drop(st);
                    return Err(map_error(py, &e));
                }
            };
            match str_out(py, text, out) {
                Ok(made) => made,
                Err(surrogates) => {
                    drop(st);
                    make_str(py, &surrogates)
                }
            }
        }

        fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
            let held = lock(py, &self.state)?.finish().map(<[u8]>::to_vec);
            make_str(py, &held.map_err(|e| map_error(py, &e))?)
        }

        fn reset(&self, py: Python<'_>) -> PyResult<()> {
            lock(py, &self.state)?.reset();
            Ok(())
        }

        /// For the vLLM plugin's `min_tokens`: see [`Filter::quiet`].
        #[pyo3(name = "_quiet", signature = (on, /))]
        fn quiet(&self, py: Python<'_>, on: bool) -> PyResult<()> {
            lock(py, &self.state)?.quiet(on).map_err(|e| map_error(py, &e))
        }

        fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
            let stops = self.stops.tuple.bind(py).repr()?;
            let include = if self.include_stop { "True" } else { "False" };
            Ok(format!("StopFilter({stops}, include_stop={include})"))
        }
    }
}

impl Push for StopFilter {
    fn parts(&self) -> (&StopSetRef, bool, &TryLock<Filter>) {
        (&self.stops, self.include_stop, &self.state)
    }
}

/// Incremental stop-sequence filter over UTF-8 byte chunks split anywhere.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct ByteStopFilter {
    stops: StopSetRef,
    include_stop: bool,
    state: TryLock<Filter>,
}

reports! {
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
            let state = TryLock::new(Filter::new(&stops.core, true, include_stop, replace));
            Ok(ByteStopFilter { stops, include_stop, state })
        }

        /// Under strict decoding, the error of an invalid sequence whose place ended the text and
        /// so fired a stop (contract §9.9) is raised by the next `feed` or `finish`, once.
        fn feed<'py>(
            &self,
            py: Python<'py>,
            data: &Bound<'py, PyAny>,
        ) -> PyResult<Bound<'py, PyBytes>> {
            let Some(bytes) = chunk_bytes(data)? else {
                return Err(wrong_type("feed() takes bytes, bytearray or memoryview", data));
            };
            // As in `StopFilter.feed`: `bytes` are not tracked by the collector.
            let out = {
                let mut st = lock(py, &self.state)?;
                match st.take_owed() {
                    Some(owed) => Err(owed),
                    None => st.feed(&bytes).map(|out| bytes_out(py, data, out)),
                }
            };
            out.map_err(|e| map_error(py, &e))
        }

        fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
            let out = {
                let mut st = lock(py, &self.state)?;
                match st.take_owed() {
                    Some(owed) => Err(owed),
                    None => st.finish().map(|held| PyBytes::new(py, held)),
                }
            };
            out.map_err(|e| map_error(py, &e))
        }

        fn reset(&self, py: Python<'_>) -> PyResult<()> {
            lock(py, &self.state)?.reset();
            Ok(())
        }

        #[getter]
        fn errors(&self, py: Python<'_>) -> PyResult<&'static str> {
            Ok(if lock(py, &self.state)?.replace() { "replace" } else { "strict" })
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
}

impl Push for ByteStopFilter {
    fn parts(&self) -> (&StopSetRef, bool, &TryLock<Filter>) {
        (&self.stops, self.include_stop, &self.state)
    }
}
