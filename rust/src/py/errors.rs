//! Error mapping: core errors to the Python exceptions the contract names, and the messages
//! for bad arguments.

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyUnicodeDecodeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyIterator, PyString};

use crate::Error;

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// `TypeError: {expected}, not {type of obj}`.
pub(super) fn wrong_type(expected: impl std::fmt::Display, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{expected}, not {}", type_name(obj)))
}

/// An iterator over `obj`, an iterable that is not a `str` or `bytes`; else
/// [`wrong_type`]`(expected, obj)`.
pub(super) fn iter_of<'py>(
    obj: &Bound<'py, PyAny>,
    expected: &str,
) -> PyResult<Bound<'py, PyIterator>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(wrong_type(expected, obj));
    }
    obj.try_iter().map_err(|_| wrong_type(expected, obj))
}

pub(super) fn map_error(py: Python<'_>, e: &Error) -> PyErr {
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

pub(super) fn parse_errors(errors: &str) -> PyResult<bool> {
    match errors {
        "strict" => Ok(false),
        "replace" => Ok(true),
        other => Err(PyValueError::new_err(format!(
            "errors must be 'strict' or 'replace', not {other:?}"
        ))),
    }
}
