//! Closing upstream objects for an async stream: an object's `aclose()` (else `close()`),
//! started for its pull to await.

use pyo3::prelude::*;

use super::super::ffi::{is_awaitable, optional_attr};
use super::awaits::await_iter;

/// Starts closing `object` (its `aclose()`, else `close()`, awaited when it returns an
/// awaitable, as the SDKs' async streams' `close()` does): the iterator to await, or `None`
/// when the close is done already (or the object has no close).
pub(super) fn start_one<'py>(object: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = object.py();
    let mut close =
        optional_attr(object, pyo3::intern!(py, "aclose"))?.filter(PyAnyMethods::is_callable);
    if close.is_none() {
        close =
            optional_attr(object, pyo3::intern!(py, "close"))?.filter(PyAnyMethods::is_callable);
    }
    let Some(close) = close else { return Ok(None) };
    let result = close.call0()?;
    if is_awaitable(&result)? {
        return await_iter(result).map(Some);
    }
    Ok(None)
}
