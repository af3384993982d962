//! One-shot `truncate`: cut a whole text at the first stop.

use pyo3::prelude::*;
use pyo3::types::PyString;

use super::convert::{make_str, str_bytes};
use super::errors::wrong_type;
use super::stopset::{resolve, stop_text, IncludeStop, SkipArgs};

/// Inputs at least this long are scanned with the GIL released.
const DETACH_THRESHOLD: usize = 1 << 20;

/// Cuts a whole text at the first stop: `(text, stop or None)`.
#[pyfunction]
#[pyo3(signature = (text, stops, include_stop = IncludeStop::default(), *, skip = None, skip_until = None))]
#[pyo3(text_signature = "(text, stops, include_stop=False, *, skip=None, skip_until=None)")]
pub(super) fn truncate<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyAny>,
    stops: Option<&Bound<'py, PyAny>>,
    include_stop: IncludeStop,
    skip: Option<&Bound<'py, PyAny>>,
    skip_until: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyString>, Option<Py<PyAny>>)> {
    let text = text.cast::<PyString>().map_err(|_| wrong_type("truncate() takes str", text))?;
    let (stops, include_stop) = resolve(py, stops, include_stop, SkipArgs { skip, skip_until })?;
    let bytes = str_bytes(text)?;
    let compiled = &stops.core;
    let (n, hit) = if bytes.len() >= DETACH_THRESHOLD {
        py.detach(|| compiled.truncate(&bytes, include_stop))
    } else {
        compiled.truncate(&bytes, include_stop)
    };
    let out = if hit.is_none() && text.is_exact_instance_of::<PyString>() {
        text.clone()
    } else {
        make_str(py, &bytes[..n])?
    };
    let matched = hit.as_ref().and_then(|(_, m)| m.as_deref());
    Ok((out, stop_text(py, &stops, hit.as_ref().map(|h| h.0), matched)?))
}
