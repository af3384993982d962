//! Compiled stop lists: the object filters share, the cache of recent lists that makes building
//! a filter per request cheap, and what a stop list reports about a stop that fired.

use std::borrow::Cow;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

use super::convert::{make_str, str_bytes};
use super::errors::{map_error, type_name};
use super::try_lock;
use crate::lock::TryLock;
use crate::{Status, StopSet};

/// A stop list as given (kept for `stops`, `stop_sequence`) and compiled: `stopstream.StopSet`.
///
/// A Python object, so that filters share it by reference count (a plain increment under the
/// GIL) rather than by `Arc` (an atomic one), and so that the tuple is built once per list.
/// Filters built from a raw list share the cached object whatever their own `include_stop`
/// (it lives in their state); a `StopSet` given by the caller lends them its options.
#[pyclass(frozen, module = "stopstream._core", name = "StopSet")]
pub(super) struct Compiled {
    pub(super) tuple: Py<PyTuple>,
    pub(super) set: Arc<StopSet>,
    pub(super) include_stop: bool,
}

fn py_bool(v: bool) -> &'static str {
    if v {
        "True"
    } else {
        "False"
    }
}

/// An `include_stop` argument: a `bool` (strictly, as every option is), or not given.
///
/// Not `Option<bool>`: `None` is no `bool`, and must stay a `TypeError`.
#[derive(Clone, Copy, Default)]
pub(super) struct IncludeStop(Option<bool>);

impl<'a, 'py> FromPyObject<'a, 'py> for IncludeStop {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(IncludeStop(Some(obj.extract::<bool>()?)))
    }
}

/// The compiled list and the `include_stop` a filter runs with: a `StopSet`'s own options (an
/// option passed again must equal the set's, else `ValueError`), or the list compiled (through
/// the recent-list cache) with the option given, `False` by default.
pub(super) fn resolve(
    py: Python<'_>,
    stops: Option<&Bound<'_, PyAny>>,
    include_stop: IncludeStop,
) -> PyResult<(Stops, bool)> {
    let IncludeStop(include_stop) = include_stop;
    if let Some(given) = stops.and_then(|o| o.cast_exact::<Compiled>().ok()) {
        let own = given.get().include_stop;
        if let Some(v) = include_stop.filter(|&v| v != own) {
            return Err(PyValueError::new_err(format!(
                "include_stop={} differs from the StopSet's include_stop={}",
                py_bool(v),
                py_bool(own)
            )));
        }
        return Ok((Stops(given.clone().unbind()), own));
    }
    Ok((parse_stops(py, stops)?, include_stop.unwrap_or(false)))
}

/// What `StopSet.__reduce__` returns: the class and its constructor's arguments.
type Reduced<'py> = (Bound<'py, pyo3::types::PyType>, (Py<PyTuple>, bool));

#[pymethods]
impl Compiled {
    #[new]
    #[pyo3(signature = (stops, include_stop = IncludeStop::default()))]
    #[pyo3(text_signature = "(stops, include_stop=False)")]
    fn new(
        py: Python<'_>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: IncludeStop,
    ) -> PyResult<Self> {
        let (stops, include_stop) = resolve(py, stops, include_stop)?;
        Ok(Compiled { tuple: stops.tuple.clone_ref(py), set: Arc::clone(&stops.set), include_stop })
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.tuple.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self) -> bool {
        self.include_stop
    }

    fn __len__(&self) -> usize {
        self.set.stops().len()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let stops = self.tuple.bind(py).repr()?;
        Ok(format!("StopSet({stops}, include_stop={})", py_bool(self.include_stop)))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let Ok(other) = other.cast_exact::<Compiled>() else {
            return Ok(py.NotImplemented());
        };
        let other = other.get();
        let eq = self.include_stop == other.include_stop
            && self.tuple.bind(py).eq(other.tuple.bind(py))?;
        Ok(pyo3::types::PyBool::new(py, eq).to_owned().into_any().unbind())
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.tuple.clone_ref(py), self.include_stop).into_pyobject(py)?.hash()
    }

    /// Pickled as its arguments: unpickling compiles the list again (through the cache).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let this = slf.get();
        (slf.get_type(), (this.tuple.clone_ref(slf.py()), this.include_stop))
    }
}

/// A filter's handle on its compiled stop list.
pub(super) struct Stops(Py<Compiled>);

impl std::ops::Deref for Stops {
    type Target = Compiled;

    fn deref(&self) -> &Compiled {
        self.0.get()
    }
}

/// The stop lists used most recently, newest first. A gateway builds a filter per request,
/// nearly always with one of a few lists: comparing the new list with these directly (a length
/// check and a `memcmp` per stop) skips hashing and the process-wide cache.
static RECENT: TryLock<Vec<Py<Compiled>>> = TryLock::new(Vec::new());
const RECENT_LEN: usize = 8;

/// Looks `stops` up among the recent lists without building anything: `None`, a `str`, or a
/// list or tuple of `str` whose UTF-8 bytes equal a recent list's, stop by stop.
pub(super) fn recent_hit(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>) -> Option<Stops> {
    // Only exact `str`: the tuple handed out holds the first list's objects.
    let same = |item: &Bound<'_, PyAny>, pat: &[u8]| {
        item.cast_exact::<PyString>().is_ok_and(|s| s.to_str().is_ok_and(|v| v.as_bytes() == pat))
    };
    let matches = |pats: &[Box<[u8]>]| -> bool {
        match stops {
            None => pats.is_empty(),
            Some(obj) if obj.is_none() => pats.is_empty(),
            Some(obj) => {
                if let Ok(l) = obj.cast_exact::<PyList>() {
                    pats.len() == l.len() && pats.iter().zip(l.iter()).all(|(p, i)| same(&i, p))
                } else if let Ok(t) = obj.cast_exact::<PyTuple>() {
                    pats.len() == t.len() && pats.iter().zip(t.iter()).all(|(p, i)| same(&i, p))
                } else {
                    pats.len() == 1 && same(obj, &pats[0])
                }
            }
        }
    };
    let mut recent = try_lock(py, &RECENT)?;
    // The very tuple a list was compiled from is immutable: no need to compare its items.
    let pos = match stops {
        Some(obj) => recent.iter().position(|c| c.get().tuple.bind(py).is(obj)),
        None => None,
    };
    if let Some(pos) = pos {
        let hit = recent.remove(pos);
        recent.insert(0, hit);
        return Some(Stops(recent[0].clone_ref(py)));
    }
    let pos = recent.iter().position(|c| matches(c.get().set.stops()))?;
    let mut hit = recent.remove(pos);
    // Equal items in an exact tuple (whose items `matches` checked are exact `str`): remember
    // this tuple, so that passing it again is an identity check.
    if let Some(t) = stops.and_then(|o| o.cast_exact::<PyTuple>().ok()) {
        let set = Arc::clone(&hit.get().set);
        if let Ok(c) = Py::new(py, Compiled { tuple: t.clone().unbind(), set, include_stop: false })
        {
            hit = c;
        }
    }
    recent.insert(0, hit);
    Some(Stops(recent[0].clone_ref(py)))
}

pub(super) fn remember(py: Python<'_>, compiled: &Py<Compiled>) {
    if let Some(mut recent) = try_lock(py, &RECENT) {
        recent.insert(0, compiled.clone_ref(py));
        recent.truncate(RECENT_LEN);
    }
}

pub(super) fn not_stops(obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "stops must be None, a str or an iterable of str, not {}",
        type_name(obj)
    ))
}

pub(super) fn parse_stops(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>) -> PyResult<Stops> {
    if let Some(hit) = recent_hit(py, stops) {
        return Ok(hit);
    }
    let Some(obj) = stops.filter(|o| !o.is_none()) else {
        return compile::<&[u8]>(py, &[], &[], None);
    };
    let items: Vec<Bound<'_, PyAny>> = if obj.is_instance_of::<PyString>() {
        vec![obj.clone()]
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else if obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyMemoryView>()
    {
        return Err(not_stops(obj));
    } else {
        obj.try_iter().map_err(|_| not_stops(obj))?.collect::<PyResult<_>>()?
    };
    let mut encoded: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "stop at position {i} must be str, not {}",
                type_name(item)
            ))
        })?;
        encoded.push(str_bytes(s)?);
    }
    let reuse = obj
        .cast_exact::<PyTuple>()
        .ok()
        .filter(|_| items.iter().all(Bound::is_exact_instance_of::<PyString>));
    compile(py, &items, &encoded, reuse)
}

pub(super) fn compile<B: AsRef<[u8]>>(
    py: Python<'_>,
    items: &[Bound<'_, PyAny>],
    encoded: &[B],
    reuse: Option<&Bound<'_, PyTuple>>,
) -> PyResult<Stops> {
    let set = StopSet::cached(encoded).map_err(|e| map_error(py, &e))?;
    // Exact `str` objects (a subclass's value, not its `__str__`): `stops` hands out an
    // immutable tuple of the values given, shared by every filter built from this list.
    let exact = items
        .iter()
        .zip(encoded)
        .map(|(item, bytes)| {
            if item.is_exact_instance_of::<PyString>() {
                Ok(item.clone())
            } else {
                make_str(py, bytes.as_ref()).map(Bound::into_any)
            }
        })
        .collect::<PyResult<Vec<_>>>()?;
    let tuple = match reuse {
        Some(t) => t.clone().unbind(),
        None => PyTuple::new(py, exact)?.unbind(),
    };
    let compiled = Py::new(py, Compiled { tuple, set, include_stop: false })?;
    remember(py, &compiled);
    Ok(Stops(compiled))
}

pub(super) fn stop_reason(status: Status) -> Option<&'static str> {
    match status {
        Status::Open => None,
        Status::Stopped(_) => Some("stop_sequence"),
        Status::Finished => Some("end"),
    }
}

pub(super) fn stop_sequence(py: Python<'_>, stops: &Stops, status: Status) -> Option<Py<PyAny>> {
    match status {
        Status::Stopped(i) => stops.tuple.bind(py).get_item(i).ok().map(Bound::unbind),
        _ => None,
    }
}

pub(super) fn stop_index(status: Status) -> Option<usize> {
    match status {
        Status::Stopped(i) => Some(i),
        _ => None,
    }
}
