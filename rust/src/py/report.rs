//! The attributes every filter and stream reports of its stop (`stops`, `include_stop`,
//! `stopped`, `stop_sequence`, `stop_index`, `stop_reason`, `pending`), written once: a class
//! says where its stop list and its core report ([`StopReport`]) are ([`Reports`]), and
//! [`reports!`] adds the getters to its methods (PyO3 takes one `#[pymethods]` block a class).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::convert::make_str;
use super::stopset::{stop_text, StopSetRef};
use crate::{Detail, StopReport};

/// Where a class keeps what its stop attributes read.
pub(super) trait Reports: pyo3::PyClass {
    /// The stop list it runs over.
    fn stop_list<'a>(slf: &'a Bound<'_, Self>) -> &'a StopSetRef;
    /// Its `include_stop`.
    fn includes_stop(slf: &Bound<'_, Self>) -> PyResult<bool>;
    /// Its report, with the text `detail` names.
    fn stop_report(slf: &Bound<'_, Self>, detail: Detail) -> PyResult<StopReport>;
}

/// The report without its texts: what `stopped`, `stop_index` and `stop_reason` read.
pub(super) fn status<T: Reports>(slf: &Bound<'_, T>) -> PyResult<StopReport> {
    T::stop_report(slf, Detail::Status)
}

/// `stop_sequence`: a composed list's matched text, a literal list's item as given.
pub(super) fn stop_sequence<T: Reports>(slf: &Bound<'_, T>) -> PyResult<Option<Py<PyAny>>> {
    let report = T::stop_report(slf, Detail::Matched)?;
    stop_text(slf.py(), T::stop_list(slf), report.status.index(), report.matched.as_deref())
}

/// `pending`: the held text, as `bytes` over bytes.
pub(super) fn pending<'py, T: Reports>(slf: &Bound<'py, T>) -> PyResult<Bound<'py, PyAny>> {
    let report = T::stop_report(slf, Detail::Pending)?;
    if report.bytes {
        return Ok(PyBytes::new(slf.py(), &report.pending).into_any());
    }
    Ok(make_str(slf.py(), &report.pending)?.into_any())
}

/// `#[pymethods] impl $class { ... }` with the stop attributes added (the class implements
/// [`Reports`]).
macro_rules! reports {
    (impl $class:ident { $($methods:tt)* }) => {
        #[::pyo3::pymethods]
        impl $class {
            $($methods)*

            #[getter]
            fn stops(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::Py<::pyo3::types::PyTuple> {
                <Self as $crate::py::report::Reports>::stop_list(slf).tuple.clone_ref(slf.py())
            }

            #[getter]
            fn include_stop(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<bool> {
                <Self as $crate::py::report::Reports>::includes_stop(slf)
            }

            #[getter]
            fn stopped(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<bool> {
                Ok($crate::py::report::status(slf)?.stopped)
            }

            #[getter]
            fn stop_sequence(
                slf: &::pyo3::Bound<'_, Self>,
            ) -> ::pyo3::PyResult<Option<::pyo3::Py<::pyo3::PyAny>>> {
                $crate::py::report::stop_sequence(slf)
            }

            #[getter]
            fn stop_index(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<Option<usize>> {
                Ok($crate::py::report::status(slf)?.status.index())
            }

            #[getter]
            fn stop_reason(
                slf: &::pyo3::Bound<'_, Self>,
            ) -> ::pyo3::PyResult<Option<&'static str>> {
                Ok($crate::py::report::status(slf)?.reason)
            }

            #[getter]
            fn pending<'py>(
                slf: &::pyo3::Bound<'py, Self>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::PyAny>> {
                $crate::py::report::pending(slf)
            }
        }
    };
}

pub(super) use reports;
