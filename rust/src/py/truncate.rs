//! One-shot `truncate`: cut a whole text at the first stop.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::convert::{make_str, str_bytes};
use super::errors::type_name;
use super::stopset::{resolve, IncludeStop, SkipArgs};

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
    let text = text.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("truncate() takes str, not {}", type_name(text)))
    })?;
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
    // A composed list reports the text matched, a literal one the item as given.
    let stop = match hit {
        Some((_, Some(matched))) => Some(make_str(py, &matched)?.into_any().unbind()),
        Some((i, None)) => stops.tuple.bind(py).get_item(i).ok().map(Bound::unbind),
        None => None,
    };
    Ok((out, stop))
}
