//! Chunks in and out: `str` and bytes-like chunks to UTF-8 bytes, and core output back to `str`
//! and `bytes`, reusing the input object whenever it passes through whole.

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};

use super::errors::map_error;
use crate::{ByteOut, Emit, Error, StopSet, TextStream};

/// UTF-8 bytes of a `str`; lone surrogates are encoded as CPython's `surrogatepass` does.
pub(super) fn str_bytes<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(v) = s.to_str() {
        return Ok(Cow::Borrowed(v.as_bytes()));
    }
    // Through the type: a subclass's own `encode` must not decide what is matched.
    let b = s.py().get_type::<PyString>().call_method1("encode", (s, "utf-8", "surrogatepass"))?;
    Ok(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec()))
}

/// Stack room for the UTF-8 of a token-sized chunk.
pub(super) const CHUNK_STACK: usize = 256;

/// UTF-8 bytes of a `str` chunk, without making CPython build (and keep) a UTF-8 copy of a
/// non-ASCII string, which is a heap allocation per chunk: the code points are encoded into
/// `stack` (lone surrogates as `surrogatepass` does). ASCII strings are read in place; long
/// chunks and other interpreters go through `str_bytes`.
pub(super) fn chunk_utf8<'a>(
    s: &'a Bound<'_, PyString>,
    stack: &'a mut [u8; CHUNK_STACK],
) -> PyResult<Cow<'a, [u8]>> {
    #[cfg(all(not(any(Py_LIMITED_API, PyPy, GraalPy)), target_endian = "little"))]
    {
        use pyo3::types::string::PyStringData;
        // SAFETY: `data` decodes the kind bits of CPython's string header, which PyO3 does
        // correctly for the little-endian targets this is compiled for (and tests on x86_64);
        // the slices it returns borrow `s`, which outlives them.
        #[allow(unsafe_code)]
        let data = unsafe { s.data() };
        if let Ok(data) = data {
            let n = match data {
                PyStringData::Ucs1(d) if d.is_ascii() => return Ok(Cow::Borrowed(d)),
                PyStringData::Ucs1(d) => crate::encode_code_points(d, stack),
                PyStringData::Ucs2(d) => crate::encode_code_points(d, stack),
                PyStringData::Ucs4(d) => crate::encode_code_points(d, stack),
            };
            if let Some(n) = n {
                return Ok(Cow::Borrowed(&stack[..n]));
            }
        }
    }
    #[cfg(not(all(not(any(Py_LIMITED_API, PyPy, GraalPy)), target_endian = "little")))]
    let _ = stack;
    str_bytes(s)
}

/// A `str` from bytes produced by the core (valid UTF-8, or surrogates from `surrogatepass`).
pub(super) fn make_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    if bytes.is_empty() {
        return Ok(PyString::new(py, ""));
    }
    match PyString::from_bytes(py, bytes) {
        Ok(s) => Ok(s),
        Err(_) => PyString::from_encoded_object(
            PyBytes::new(py, bytes).as_any(),
            Some(c"utf-8"),
            Some(c"surrogatepass"),
        ),
    }
}

/// Bytes of a `bytes`, `bytearray` or `memoryview` chunk; `None` for any other type.
pub(super) fn chunk_bytes<'a>(data: &'a Bound<'_, PyAny>) -> PyResult<Option<Cow<'a, [u8]>>> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(Some(Cow::Borrowed(b.as_bytes())));
    }
    if let Ok(b) = data.cast::<PyByteArray>() {
        return Ok(Some(Cow::Owned(b.to_vec())));
    }
    if data.is_instance_of::<PyMemoryView>() {
        let b = data.call_method0("tobytes")?;
        return Ok(Some(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec())));
    }
    Ok(None)
}

/// Feeds a `str` chunk: `step` runs the stream's `feed` on the chunk's UTF-8 and returns the
/// state from before the call with the outcome (the filter takes its lock there, the stream
/// already holds its own). Returns the text to emit, `None` when nothing is emitted.
pub(super) fn feed_str<'py>(
    py: Python<'py>,
    set: &StopSet,
    text: &Bound<'py, PyString>,
    step: impl FnOnce(&[u8]) -> PyResult<(TextStream, Result<Emit, Error>)>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let mut stack = [0u8; CHUNK_STACK];
    let bytes = chunk_utf8(text, &mut stack)?;
    let (before, result) = step(&bytes)?;
    let e = result.map_err(|e| map_error(py, &e))?;
    if e.from_held == 0 {
        if e.from_input == 0 {
            return Ok(None);
        }
        if e.from_input == bytes.len() && text.is_exact_instance_of::<PyString>() {
            return Ok(Some(text.clone()));
        }
        return make_str(py, &bytes[..e.from_input]).map(Some);
    }
    let mut out = Vec::with_capacity(e.from_held + e.from_input);
    out.extend_from_slice(&before.held(set)[..e.from_held]);
    out.extend_from_slice(&bytes[..e.from_input]);
    make_str(py, &out).map(Some)
}

/// The bytes to emit after a `feed` of `data` (whose bytes are `bytes`) that produced `result`,
/// with `out` the buffer it wrote to.
pub(super) fn bytes_output<'py>(
    py: Python<'py>,
    result: Result<ByteOut, Error>,
    data: &Bound<'py, PyAny>,
    bytes: &[u8],
    out: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    match result.map_err(|e| map_error(py, &e))? {
        ByteOut::Input => match data.cast_exact::<PyBytes>() {
            Ok(b) => Ok(b.clone()),
            Err(_) => Ok(PyBytes::new(py, bytes)),
        },
        ByteOut::Buffer => Ok(PyBytes::new(py, out)),
    }
}
