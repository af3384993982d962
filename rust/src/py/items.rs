//! `Stop` and `Regex`: stop-list items beyond a plain `str` (contract §6.1). Immutable values:
//! equal when their text (or pattern) and include flag are equal, hashable, with a `repr` that
//! rebuilds them. A pattern is checked when a stop list is compiled, where the error can name
//! the stop's position; `Regex.max_len` checks it on its own.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::convert::str_bytes;

/// `include=...` for a repr, empty when it takes the filter's.
fn include_repr(include: Option<bool>) -> &'static str {
    match include {
        None => "",
        Some(true) => ", include=True",
        Some(false) => ", include=False",
    }
}

fn hash_of(tag: u64, bytes: &[u8], include: Option<bool>) -> isize {
    // FNV-1a: stable, and equal values hash equal, which is all `__hash__` needs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ tag;
    for &b in bytes.iter().chain(&[include.map_or(2, u8::from)]) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // -1 is reserved by CPython for errors; dropping the top bits keeps the value positive.
    isize::try_from(h >> 33).unwrap_or(0)
}

/// What `__reduce__` returns: a constructor and its positional arguments.
type Reduced<'py> = (Bound<'py, PyAny>, (Py<PyString>,));

/// `(functools.partial(type(obj), include=include), (text,))`: the keyword-only flag survives.
fn reduce<'py>(
    obj: &Bound<'py, PyAny>,
    text: Py<PyString>,
    include: Option<bool>,
) -> PyResult<Reduced<'py>> {
    let py = obj.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("include", include)?;
    let partial = py.import("functools")?.getattr("partial")?;
    let ctor = partial.call((obj.get_type(),), Some(&kwargs))?;
    Ok((ctor, (text,)))
}

/// A literal stop with its own include flag.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct Stop {
    pub(super) text: Py<PyString>,
    /// UTF-8 (lone surrogates as `surrogatepass` encodes them).
    pub(super) bytes: Vec<u8>,
    /// Whether the output runs through this stop when it fires; `None`: the filter's
    /// `include_stop`.
    #[pyo3(get)]
    pub(super) include: Option<bool>,
}

#[pymethods]
impl Stop {
    #[new]
    #[pyo3(signature = (text, *, include = None))]
    fn new(text: &Bound<'_, PyString>, include: Option<bool>) -> PyResult<Self> {
        let bytes = str_bytes(text)?.into_owned();
        Ok(Stop { text: text.clone().unbind(), bytes, include })
    }

    /// The stop text.
    #[getter]
    fn text(&self, py: Python<'_>) -> Py<PyString> {
        self.text.clone_ref(py)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Stop>().is_ok_and(|o| {
            let o = o.get();
            o.bytes == self.bytes && o.include == self.include
        })
    }

    fn __hash__(&self) -> isize {
        hash_of(1, &self.bytes, self.include)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Stop({}{})", self.text.bind(py).repr()?, include_repr(self.include)))
    }

    /// Pickled as `functools.partial(Stop, include=...)` applied to the text.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Reduced<'py>> {
        let this = slf.get();
        reduce(slf.as_any(), this.text.clone_ref(slf.py()), this.include)
    }
}

/// A regex stop (Rust `regex` syntax).
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct Regex {
    pub(super) pattern: Py<PyString>,
    pub(super) source: String,
    /// Whether the output runs through the match when this stop fires; `None`: the filter's
    /// `include_stop`.
    #[pyo3(get)]
    pub(super) include: Option<bool>,
    /// The most heap the compiled pattern may take, in bytes; `None`: the engine's default.
    #[pyo3(get)]
    pub(super) size_limit: Option<usize>,
}

#[pymethods]
impl Regex {
    #[new]
    #[pyo3(signature = (pattern, *, include = None, size_limit = None))]
    fn new(
        pattern: &Bound<'_, PyString>,
        include: Option<bool>,
        size_limit: Option<usize>,
    ) -> PyResult<Self> {
        let source = pattern
            .to_str()
            .map_err(|_| PyValueError::new_err("a regex pattern cannot contain lone surrogates"))?
            .to_owned();
        if size_limit == Some(0) {
            return Err(PyValueError::new_err("size_limit must be a positive number of bytes"));
        }
        Ok(Regex { pattern: pattern.clone().unbind(), source, include, size_limit })
    }

    /// The pattern.
    #[getter]
    fn pattern(&self, py: Python<'_>) -> Py<PyString> {
        self.pattern.clone_ref(py)
    }

    /// The longest match in code points, `None` if unbounded. Raises `ValueError` for an
    /// invalid pattern.
    #[getter]
    fn max_len(&self) -> PyResult<Option<usize>> {
        crate::regex_max_len(&self.source)
            .map_err(|m| PyValueError::new_err(format!("regex stop is invalid: {m}")))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Regex>().is_ok_and(|o| {
            let o = o.get();
            o.source == self.source && o.include == self.include && o.size_limit == self.size_limit
        })
    }

    fn __hash__(&self) -> isize {
        // Equal patterns with other limits are unequal, but may share a hash.
        hash_of(2, self.source.as_bytes(), self.include)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let limit = self.size_limit.map_or(String::new(), |l| format!(", size_limit={l}"));
        Ok(format!("Regex({}{}{limit})", self.pattern.bind(py).repr()?, include_repr(self.include)))
    }

    /// Pickled as `functools.partial(Regex, include=..., size_limit=...)` applied to the
    /// pattern.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Reduced<'py>> {
        let this = slf.get();
        let (ctor, args) = reduce(slf.as_any(), this.pattern.clone_ref(slf.py()), this.include)?;
        if let Some(limit) = this.size_limit {
            let kwargs = pyo3::types::PyDict::new(slf.py());
            kwargs.set_item("size_limit", limit)?;
            let partial = slf.py().import("functools")?.getattr("partial")?;
            return Ok((partial.call((ctor,), Some(&kwargs))?, args));
        }
        Ok((ctor, args))
    }
}
