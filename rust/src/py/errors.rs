//! Error mapping: core errors to the Python exceptions the contract names, and the messages
//! for bad arguments.

use pyo3::exceptions::{PyMemoryError, PyUnicodeDecodeError, PyValueError};
use pyo3::prelude::*;

use crate::Error;

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
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
