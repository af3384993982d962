//! Chunks in and out: `str` and bytes-like chunks to UTF-8 bytes, and core output back to `str`
//! and `bytes`, reusing the input object whenever it passes through whole.

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};

use crate::Output;

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
/// non-ASCII string, which is a heap allocation per chunk: ASCII strings are read in place,
/// others have their code points encoded into `stack` (lone surrogates as `surrogatepass`
/// does), made only then: clearing it costs a sixth of an ASCII chunk's path. Long chunks and
/// other interpreters go through `str_bytes`.
#[inline]
pub(super) fn chunk_utf8<'a>(
    s: &'a Bound<'_, PyString>,
    stack: &'a mut Option<[u8; CHUNK_STACK]>,
) -> PyResult<Cow<'a, [u8]>> {
    match exact_ascii(s) {
        Some(ascii) => Ok(Cow::Borrowed(ascii)),
        None => encoded_utf8(s, stack),
    }
}

/// [`chunk_utf8`] of a `str` that is not compact ASCII.
fn encoded_utf8<'a>(
    s: &'a Bound<'_, PyString>,
    stack: &'a mut Option<[u8; CHUNK_STACK]>,
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
            if let PyStringData::Ucs1(d) = data {
                if d.is_ascii() {
                    return Ok(Cow::Borrowed(d));
                }
            }
            let stack = stack.insert([0; CHUNK_STACK]);
            let n = match data {
                PyStringData::Ucs1(d) => crate::host::encode_code_points(d, stack),
                PyStringData::Ucs2(d) => crate::host::encode_code_points(d, stack),
                PyStringData::Ucs4(d) => crate::host::encode_code_points(d, stack),
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
    joined_str(py, bytes, &[])
}

/// A `str` of `head` then `tail`, bytes produced by the core (see [`make_str`]): what a feed
/// emits is held text then a prefix of the chunk.
///
/// ASCII text (most output) is copied straight into a new string: CPython's UTF-8 decoder
/// takes about twice the instructions for a token-sized string, and joining the parts first
/// costs a heap allocation. Together they were a third of the instructions of a chunk that
/// releases held text (callgrind, the per-chunk benchmark's stream, 4 stops).
pub(super) fn joined_str<'py>(
    py: Python<'py>,
    head: &[u8],
    tail: &[u8],
) -> PyResult<Bound<'py, PyString>> {
    if let Some(s) = ascii_str(py, head, tail) {
        return s;
    }
    if head.is_empty() {
        return decoded_str(py, tail);
    }
    let mut out = Vec::with_capacity(head.len() + tail.len());
    out.extend_from_slice(head);
    out.extend_from_slice(tail);
    decoded_str(py, &out)
}

/// [`joined_str`] for ASCII parts at least two characters long (CPython shares its one
/// character strings, which its decoder returns); `None` when it does not apply.
#[inline]
fn ascii_str<'py>(
    py: Python<'py>,
    head: &[u8],
    tail: &[u8],
) -> Option<PyResult<Bound<'py, PyString>>> {
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy, Py_3_14)))]
    {
        use pyo3::ffi;
        let len = head.len() + tail.len();
        if len < 2 || !head.is_ascii() || !tail.is_ascii() {
            return None;
        }
        let size = ffi::Py_ssize_t::try_from(len).ok()?;
        // SAFETY: `PyUnicode_New` with a maximum character of 127 makes a compact ASCII
        // string of `len` one-byte characters (its terminating NUL written), or returns NULL
        // with an exception set; the copies fill exactly those `len` bytes with ASCII, which
        // keeps the string valid before anything else can see it.
        #[allow(unsafe_code)]
        unsafe {
            let p = ffi::PyUnicode_New(size, 127);
            if p.is_null() {
                return Some(Err(PyErr::fetch(py)));
            }
            let data = ffi::PyUnicode_DATA(p).cast::<u8>();
            std::ptr::copy_nonoverlapping(head.as_ptr(), data, head.len());
            std::ptr::copy_nonoverlapping(tail.as_ptr(), data.add(head.len()), tail.len());
            Some(Ok(Bound::from_owned_ptr(py, p).cast_into_unchecked()))
        }
    }
    #[cfg(any(Py_LIMITED_API, PyPy, GraalPy, Py_3_14))]
    {
        let _ = (py, head, tail);
        None
    }
}

/// A `str` through CPython's decoder, with `surrogatepass` when the bytes need it.
fn decoded_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
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

/// The `str` a feed of `text` emits: `text` itself when the output is the whole chunk (and
/// `text` is an exact `str`), else a new string. Made in place, under a filter's lock, unless
/// it holds lone surrogates: then `Err` carries a copy, to be made once the lock is released
/// (CPython's codec runs for them, and may run the collector, whose finalizers may use the
/// filter). A valid string is made without running any Python code.
#[allow(
    clippy::inline_always,
    reason = "the output of every `str` chunk: out of line it cost 21 of a chunk's 1,200 instructions (callgrind)"
)]
#[inline(always)]
pub(super) fn str_out<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
    out: Output<'_>,
) -> Result<PyResult<Bound<'py, PyString>>, Vec<u8>> {
    if out.whole && text.is_exact_instance_of::<PyString>() {
        return Ok(Ok(text.clone()));
    }
    let valid = |b: &[u8]| b.is_ascii() || std::str::from_utf8(b).is_ok();
    if valid(out.head) && valid(out.bytes) {
        return Ok(joined_str(py, out.head, out.bytes));
    }
    Err([out.head, out.bytes].concat())
}

/// The `bytes` a feed of `data` emits: `data` itself when the output is the whole chunk and
/// `data` is an exact `bytes`, else a new object.
#[inline]
pub(super) fn bytes_out<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    out: Output<'_>,
) -> Bound<'py, PyBytes> {
    match data.cast_exact::<PyBytes>() {
        Ok(b) if out.whole => b.clone(),
        _ if out.head.is_empty() => PyBytes::new(py, out.bytes),
        _ => PyBytes::new(py, &[out.head, out.bytes].concat()),
    }
}

/// The UTF-8 of a `str` that is ASCII, read in place from its header's flag (no scan); `None`
/// otherwise.
#[inline]
fn exact_ascii<'a>(text: &'a Bound<'_, PyString>) -> Option<&'a [u8]> {
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy, Py_3_14)))]
    {
        use pyo3::ffi;
        let p = text.as_ptr();
        // SAFETY: `p` is a `str`; a compact ASCII string's characters follow its header,
        // `length` bytes long, alive as long as `text`.
        #[allow(unsafe_code)]
        unsafe {
            if ffi::PyUnicode_IS_COMPACT_ASCII(p) != 0 {
                let len = usize::try_from(ffi::PyUnicode_GET_LENGTH(p)).unwrap_or(0);
                return Some(std::slice::from_raw_parts(ffi::PyUnicode_DATA(p).cast::<u8>(), len));
            }
        }
        None
    }
    #[cfg(any(Py_LIMITED_API, PyPy, GraalPy, Py_3_14))]
    {
        let _ = text;
        None
    }
}
