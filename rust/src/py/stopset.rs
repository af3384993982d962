//! Compiled stop lists: the object filters share, the cache of recent lists that makes building
//! a filter per request cheap, and what a stop list reports about a stop that fired.

use std::borrow::Cow;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

use super::convert::{make_str, str_bytes};
use super::errors::{iter_of, map_error, type_name, wrong_type};
use super::items::{Regex, Stop};
use super::lock::try_lock;
use crate::lock::TryLock;
use crate::recent::{same_stops, Recent};
use crate::{CompiledStops, LiteralStops, StopKind, StopSpec};

/// A stop list as given (kept for `stops`, `stop_sequence`) and compiled: `stopstream.StopSet`.
///
/// A Python object, so that filters share it by reference count (a plain increment under the
/// GIL) rather than by `Arc` (an atomic one), and so that the tuple is built once per list.
/// Filters built from a raw list share the cached object whatever their own `include_stop`
/// (it lives in their state); a `StopSet` given by the caller lends them its options.
#[pyclass(frozen, module = "stopstream._core", name = "StopSet")]
pub(super) struct PyStopSet {
    pub(super) tuple: Py<PyTuple>,
    /// The literal automaton, or the composed matcher (contract §6) when the list has `Stop` or
    /// `Regex` items or skip regions.
    pub(super) core: CompiledStops,
    #[pyo3(get)]
    pub(super) include_stop: bool,
    /// The `skip` pairs, or `None`.
    #[pyo3(get)]
    skip: Option<Py<PyTuple>>,
    /// The `skip_until` marker, or `None`.
    #[pyo3(get)]
    skip_until: Option<Py<PyString>>,
}

/// Skip options as given to a constructor.
#[derive(Clone, Copy, Default)]
pub(super) struct SkipArgs<'a, 'py> {
    pub(super) skip: Option<&'a Bound<'py, PyAny>>,
    pub(super) skip_until: Option<&'a Bound<'py, PyAny>>,
}

impl SkipArgs<'_, '_> {
    fn given(&self) -> bool {
        self.skip.is_some_and(|s| !s.is_none()) || self.skip_until.is_some_and(|s| !s.is_none())
    }
}

/// Checked skip options: the pairs as a tuple of `(open, close)` tuples, and the marker.
type Skip<'py> = (Option<Bound<'py, PyTuple>>, Option<Bound<'py, PyString>>);

/// The skip options, checked: `((open, close), ...)` as a tuple of str pairs, and `skip_until`.
fn parse_skip<'py>(py: Python<'py>, args: SkipArgs<'_, 'py>) -> PyResult<Skip<'py>> {
    let until = match args.skip_until.filter(|u| !u.is_none()) {
        None => None,
        Some(u) => Some(u.cast::<PyString>().cloned().map_err(|_| {
            PyTypeError::new_err(format!("skip_until must be a str or None, not {}", type_name(u)))
        })?),
    };
    let Some(skip) = args.skip.filter(|s| !s.is_none()) else { return Ok((None, until)) };
    let mut pairs = Vec::new();
    for (i, pair) in iter_of(skip, "skip must be an iterable of (open, close) pairs")?.enumerate() {
        let pair = pair?;
        let bad =
            || PyTypeError::new_err(format!("skip[{i}] must be an (open, close) pair of str"));
        if pair.is_instance_of::<PyString>() {
            return Err(bad());
        }
        let items: Vec<Bound<'py, PyAny>> =
            pair.try_iter().map_err(|_| bad())?.collect::<PyResult<_>>()?;
        let [open, close] = items.as_slice() else { return Err(bad()) };
        let (Ok(open), Ok(close)) = (open.cast::<PyString>(), close.cast::<PyString>()) else {
            return Err(bad());
        };
        pairs.push(PyTuple::new(py, [open, close])?);
    }
    Ok((Some(PyTuple::new(py, pairs)?), until))
}

/// Compiles a composed list: `items` as given, with the skip options.
fn compose(
    py: Python<'_>,
    items: &[Bound<'_, PyAny>],
    include_stop: bool,
    skip: Option<Bound<'_, PyTuple>>,
    skip_until: Option<Bound<'_, PyString>>,
) -> PyResult<PyStopSet> {
    enum Owned<'a> {
        Literal(Cow<'a, [u8]>),
        Regex(String, Option<usize>),
    }
    let mut owned = Vec::with_capacity(items.len());
    let mut include = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Ok(s) = item.cast::<PyString>() {
            owned.push(Owned::Literal(Cow::Owned(str_bytes(s)?.into_owned())));
            include.push(include_stop);
        } else if let Ok(s) = item.cast_exact::<Stop>() {
            let s = s.get();
            owned.push(Owned::Literal(Cow::Owned(s.bytes.clone())));
            include.push(s.include.unwrap_or(include_stop));
        } else if let Ok(r) = item.cast_exact::<Regex>() {
            let r = r.get();
            owned.push(Owned::Regex(r.source.clone(), r.size_limit));
            include.push(r.include.unwrap_or(include_stop));
        } else {
            return Err(wrong_type(
                format_args!("stop at position {i} must be str, Stop or Regex"),
                item,
            ));
        }
    }
    let specs: Vec<StopSpec<'_>> = owned
        .iter()
        .zip(&include)
        .map(|(o, &include)| StopSpec {
            kind: match o {
                Owned::Literal(b) => StopKind::Literal(b),
                Owned::Regex(p, limit) => StopKind::Regex(p, *limit),
            },
            include,
        })
        .collect();
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let Some(t) = &skip {
        for pair in t.iter() {
            let (open, close): (Bound<'_, PyString>, Bound<'_, PyString>) = pair.extract()?;
            pairs.push((str_bytes(&open)?.into_owned(), str_bytes(&close)?.into_owned()));
        }
    }
    let until = match &skip_until {
        Some(u) => Some(str_bytes(u)?.into_owned()),
        None => None,
    };
    let pair_refs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(o, c)| (&o[..], &c[..])).collect();
    // Building DFAs can take a while for big patterns: let other threads run.
    let core = py
        .detach(|| CompiledStops::composed(&specs, until.as_deref(), &pair_refs))
        .map_err(|e| map_error(py, &e))?;
    Ok(PyStopSet {
        tuple: PyTuple::new(py, items)?.unbind(),
        core,
        include_stop,
        skip: skip.map(Bound::unbind),
        skip_until: skip_until.map(Bound::unbind),
    })
}

/// Whether `item` is a `Stop` or a `Regex` (a list holding one is composed).
fn is_item(item: &Bound<'_, PyAny>) -> bool {
    item.is_exact_instance_of::<Stop>() || item.is_exact_instance_of::<Regex>()
}

impl PyStopSet {
    /// The skip options, for comparison and `repr`.
    fn skip_repr(&self, py: Python<'_>) -> PyResult<String> {
        let mut out = String::new();
        if let Some(s) = &self.skip {
            out.push_str(", skip=");
            out.push_str(&s.bind(py).repr()?.to_string());
        }
        if let Some(u) = &self.skip_until {
            out.push_str(", skip_until=");
            out.push_str(&u.bind(py).repr()?.to_string());
        }
        Ok(out)
    }

    fn skip_key(&self, py: Python<'_>) -> (Option<Py<PyTuple>>, Option<Py<PyString>>) {
        (
            self.skip.as_ref().map(|s| s.clone_ref(py)),
            self.skip_until.as_ref().map(|s| s.clone_ref(py)),
        )
    }

    /// The literal automaton (empty for a composed list), for the token streams, which take
    /// one beside their matcher.
    pub(super) fn set(&self) -> &LiteralStops {
        self.core.literal_stops().map_or(LiteralStops::none(), |s| s)
    }
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
pub(super) fn resolve<'py>(
    py: Python<'py>,
    stops: Option<&Bound<'py, PyAny>>,
    include_stop: IncludeStop,
    skip: SkipArgs<'_, 'py>,
) -> PyResult<(StopSetRef, bool)> {
    let IncludeStop(include_stop) = include_stop;
    if let Some(given) = stops.and_then(|o| o.cast_exact::<PyStopSet>().ok()) {
        let own = given.get().include_stop;
        if let Some(v) = include_stop.filter(|&v| v != own) {
            return Err(PyValueError::new_err(format!(
                "include_stop={} differs from the StopSet's include_stop={}",
                py_bool(v),
                py_bool(own)
            )));
        }
        if skip.given() {
            let (skip_t, until) = parse_skip(py, skip)?;
            let (own_skip, own_until) = given.get().skip_key(py);
            let same_skip = match (&skip_t, &own_skip) {
                (None, _) => true,
                (Some(a), Some(b)) => a.eq(b.bind(py))?,
                (Some(_), None) => false,
            };
            let same_until = match (&until, &own_until) {
                (None, _) => true,
                (Some(a), Some(b)) => PyAnyMethods::eq(a.as_any(), b.bind(py))?,
                (Some(_), None) => false,
            };
            if !same_skip || !same_until {
                return Err(PyValueError::new_err(
                    "skip or skip_until differs from the StopSet's own",
                ));
            }
        }
        return Ok((StopSetRef(given.clone().unbind()), own));
    }
    let include = include_stop.unwrap_or(false);
    if skip.given() {
        let (skip_t, until) = parse_skip(py, skip)?;
        let items = collect_items(stops)?;
        let compiled = compose(py, &items, include, skip_t, until)?;
        return Ok((StopSetRef(Py::new(py, compiled)?), include));
    }
    Ok((parse_stops(py, stops, include)?, include))
}

/// The items of a `stops` argument (a `str` is one item).
fn collect_items<'py>(stops: Option<&Bound<'py, PyAny>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let Some(obj) = stops.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    if obj.is_instance_of::<PyString>() || is_item(obj) {
        Ok(vec![obj.clone()])
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Ok(t.iter().collect())
    } else if let Ok(l) = obj.cast::<PyList>() {
        Ok(l.iter().collect())
    } else if obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyMemoryView>()
    {
        Err(not_stops(obj))
    } else {
        obj.try_iter().map_err(|_| not_stops(obj))?.collect::<PyResult<_>>()
    }
}

/// What `StopSet.__reduce__` returns: the class and its constructor's arguments.
type Reduced<'py> = (
    Bound<'py, pyo3::types::PyType>,
    (Py<PyTuple>, bool, Option<Py<PyTuple>>, Option<Py<PyString>>),
);

#[pymethods]
impl PyStopSet {
    #[new]
    #[pyo3(signature = (stops, include_stop = IncludeStop::default(), skip = None, skip_until = None))]
    #[pyo3(text_signature = "(stops, include_stop=False, skip=None, skip_until=None)")]
    fn new<'py>(
        py: Python<'py>,
        stops: Option<&Bound<'py, PyAny>>,
        include_stop: IncludeStop,
        skip: Option<&Bound<'py, PyAny>>,
        skip_until: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let (stops, include_stop) =
            resolve(py, stops, include_stop, SkipArgs { skip, skip_until })?;
        let (skip, skip_until) = stops.skip_key(py);
        Ok(PyStopSet {
            tuple: stops.tuple.clone_ref(py),
            core: stops.core.clone(),
            include_stop,
            skip,
            skip_until,
        })
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.tuple.clone_ref(py)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.tuple.bind(py).len()
    }

    /// The object and the compiled list it holds, in bytes (`sys.getsizeof`).
    fn __sizeof__(&self) -> usize {
        std::mem::size_of::<Self>() + self.core.heap_bytes()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let stops = self.tuple.bind(py).repr()?;
        let skip = self.skip_repr(py)?;
        Ok(format!("StopSet({stops}, include_stop={}{skip})", py_bool(self.include_stop)))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let Ok(other) = other.cast_exact::<PyStopSet>() else {
            return Ok(py.NotImplemented());
        };
        let other = other.get();
        let eq = self.include_stop == other.include_stop
            && self.tuple.bind(py).eq(other.tuple.bind(py))?
            && self.skip_key(py).into_pyobject(py)?.eq(other.skip_key(py))?;
        Ok(pyo3::types::PyBool::new(py, eq).to_owned().into_any().unbind())
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.tuple.clone_ref(py), self.include_stop, self.skip_key(py)).into_pyobject(py)?.hash()
    }

    /// Pickled as its arguments: unpickling compiles the list again (through the cache).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Reduced<'py> {
        let this = slf.get();
        let (skip, until) = this.skip_key(slf.py());
        (slf.get_type(), (this.tuple.clone_ref(slf.py()), this.include_stop, skip, until))
    }
}

/// A filter's handle on its compiled stop list: a counted reference to a [`PyStopSet`].
pub(super) struct StopSetRef(Py<PyStopSet>);

impl std::ops::Deref for StopSetRef {
    type Target = PyStopSet;

    fn deref(&self) -> &PyStopSet {
        self.0.get()
    }
}

/// The stop lists used most recently, newest first ([`Recent`]: see there why).
static RECENT: TryLock<Recent<Py<PyStopSet>, 8>> = TryLock::new(Recent::new());

/// Looks `stops` up among the recent lists without building anything: `None`, a `str`, or a
/// list or tuple of `str` whose UTF-8 bytes equal a recent list's, stop by stop.
pub(super) fn recent_hit(py: Python<'_>, stops: Option<&Bound<'_, PyAny>>) -> Option<StopSetRef> {
    // Only exact `str`: the tuple handed out holds the first list's objects.
    let same = |item: Bound<'_, PyAny>, pat: &[u8]| {
        let s = item.cast_exact::<PyString>();
        s.is_ok_and(|s| s.to_str().is_ok_and(|v| v.as_bytes() == pat))
    };
    let matches = |c: &Py<PyStopSet>| {
        let pats = c.get().set().stops();
        match stops.filter(|o| !o.is_none()) {
            None => pats.is_empty(),
            Some(obj) => {
                if let Ok(l) = obj.cast_exact::<PyList>() {
                    same_stops(pats, l.iter(), same)
                } else if let Ok(t) = obj.cast_exact::<PyTuple>() {
                    same_stops(pats, t.iter(), same)
                } else {
                    same_stops(pats, [obj.clone()], same)
                }
            }
        }
    };
    let mut recent = try_lock(py, &RECENT)?;
    // The very tuple a list was compiled from is immutable: no need to compare its items.
    if let Some(obj) = stops {
        if let Some(hit) = recent.hit(|c| c.get().tuple.bind(py).is(obj)) {
            return Some(StopSetRef(hit.clone_ref(py)));
        }
    }
    let hit = recent.hit(matches)?;
    // Equal items in an exact tuple (whose items `matches` checked are exact `str`): remember
    // this tuple, so that passing it again is an identity check.
    if let Some(t) = stops.and_then(|o| o.cast_exact::<PyTuple>().ok()) {
        let core = hit.get().core.clone();
        let tuple = t.clone().unbind();
        let c = PyStopSet { tuple, core, include_stop: false, skip: None, skip_until: None };
        if let Ok(c) = Py::new(py, c) {
            *hit = c;
        }
    }
    Some(StopSetRef(hit.clone_ref(py)))
}

pub(super) fn remember(py: Python<'_>, compiled: &Py<PyStopSet>) {
    if let Some(mut recent) = try_lock(py, &RECENT) {
        recent.remember(compiled.clone_ref(py));
    }
}

pub(super) fn not_stops(obj: &Bound<'_, PyAny>) -> PyErr {
    wrong_type("stops must be None, a str or an iterable of str", obj)
}

pub(super) fn parse_stops(
    py: Python<'_>,
    stops: Option<&Bound<'_, PyAny>>,
    include_stop: bool,
) -> PyResult<StopSetRef> {
    if let Some(hit) = recent_hit(py, stops) {
        return Ok(hit);
    }
    let Some(obj) = stops.filter(|o| !o.is_none()) else {
        return compile::<&[u8]>(py, &[], &[], None);
    };
    let items = collect_items(Some(obj))?;
    if items.iter().any(is_item) {
        return Ok(StopSetRef(Py::new(py, compose(py, &items, include_stop, None, None)?)?));
    }
    let mut encoded: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let s = item
            .cast::<PyString>()
            .map_err(|_| wrong_type(format_args!("stop at position {i} must be str"), item))?;
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
) -> PyResult<StopSetRef> {
    let core = CompiledStops::literal(encoded).map_err(|e| map_error(py, &e))?;
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
    let compiled = PyStopSet { tuple, core, include_stop: false, skip: None, skip_until: None };
    let compiled = Py::new(py, compiled)?;
    remember(py, &compiled);
    Ok(StopSetRef(compiled))
}

/// `stop_sequence` of the stop at `index`, if any: the matched text for a composed list, the
/// item as given otherwise.
pub(super) fn stop_text(
    py: Python<'_>,
    stops: &StopSetRef,
    index: Option<usize>,
    matched: Option<&[u8]>,
) -> PyResult<Option<Py<PyAny>>> {
    match (index, matched) {
        (Some(_), Some(m)) => Ok(Some(make_str(py, m)?.into_any().unbind())),
        (Some(i), None) => Ok(stops.tuple.bind(py).get_item(i).ok().map(Bound::unbind)),
        (None, _) => Ok(None),
    }
}
