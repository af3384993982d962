//! Token ids in (contract §7): `Vocab`, `TokenStopFilter`, `TokenPiece` and `feed_batch`.
//!
//! Ids are converted to `i64` under the GIL (a Python int outside that range saturates, so it is
//! still "not in the vocabulary", and its message quotes the int as given); the core does the
//! rest. `feed_batch` converts every stream's ids, takes every filter's lock, detaches for the
//! Rust work, then builds the pieces: one GIL release per engine step instead of one per stream.
//!
//! Performance choices (measured in CPU time per stream and step, 256 streams, one id each, on a
//! loaded 2-core machine): the usual step (one id in, exactly its text out, one token released)
//! returns a `TokenPiece` cached per token id, which took a step from about 185 to about 160 ns
//! in `feed_batch` (building the piece and its `str` led the profile); short id lists are read
//! onto the stack and the output buffer is per thread, so `feed` allocates nothing on that
//! path. A free list for `TokenPiece` measured no faster than CPython's allocator, so there is
//! none. Releasing the GIL costs about nothing in CPU time per batch.

use std::cell::RefCell;
use std::sync::OnceLock;

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

use super::convert::make_str;
use super::errors::{map_error, parse_errors, type_name};
use super::stopset::{resolve, stop_index, stop_sequence, IncludeStop, SkipArgs, Stops};
use super::{lock, try_lock};
use crate::lock::{Guard, TryLock};
use crate::{Error, Status, TokenStream};

/// A tokenizer's vocabulary: token id to bytes (`stopstream.Vocab`).
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct Vocab {
    inner: crate::Vocab,
    /// Per id, the piece `TokenPiece(its text, 1)`, built the first time a feed releases
    /// exactly that token with exactly its text: the usual engine step (one id in, its text
    /// out). Pieces are immutable, so that step hands out a shared object and allocates
    /// nothing; building a piece and its `str` was most of a step's cost in a profile.
    pieces: Box<[OnceLock<Py<TokenPiece>>]>,
}

impl Vocab {
    /// The piece for `out` and `n` released tokens after a feed of `ids`.
    fn piece(&self, py: Python<'_>, ids: &[i64], out: &[u8], n: usize) -> PyResult<Py<TokenPiece>> {
        if out.is_empty() && n == 0 {
            return empty_piece(py);
        }
        if let ([id], false) = (ids, out.is_empty()) {
            if let (Some(crate::Token::Text(t)), Ok(i)) =
                (self.inner.get(*id), usize::try_from(*id))
            {
                if t == out {
                    if self.pieces[i].get().is_none() {
                        // Another thread may fill it meanwhile (free-threaded build): either
                        // piece will do.
                        let _ = self.pieces[i].set(piece(make_str(py, out)?, 1)?);
                    }
                    let Some(cached) = self.pieces[i].get() else {
                        return piece(make_str(py, out)?, n);
                    };
                    if n == 1 {
                        return Ok(cached.clone_ref(py));
                    }
                    return piece(cached.get().text.bind(py).clone(), n);
                }
            }
        }
        piece(make_str(py, out)?, n)
    }
}

/// The shared `TokenPiece("", 0)`: a step that releases nothing.
fn empty_piece(py: Python<'_>) -> PyResult<Py<TokenPiece>> {
    static EMPTY: PyOnceLock<Py<TokenPiece>> = PyOnceLock::new();
    EMPTY.get_or_try_init(py, || piece(PyString::new(py, ""), 0)).map(|p| p.clone_ref(py))
}

/// Ids as given, converted to `i64`, with the ints too large for it kept for error messages.
#[derive(Default)]
struct Ids {
    ids: Vec<i64>,
    huge: Vec<(usize, String)>,
}

impl Ids {
    /// Appends the ids of `obj` (an iterable of ints); `what` names it in messages.
    fn extend(&mut self, obj: &Bound<'_, PyAny>, what: &str, index: Option<usize>) -> PyResult<()> {
        let what = |(): ()| match index {
            Some(i) => format!("{what}[{i}]"),
            None => what.to_owned(),
        };
        let start = self.ids.len();
        let push = |this: &mut Ids, i: usize, item: &Bound<'_, PyAny>| -> PyResult<()> {
            match item.extract::<i64>() {
                Ok(v) => this.ids.push(v),
                Err(_) if item.is_instance_of::<PyInt>() => {
                    let negative = item.lt(0i64)?;
                    this.ids.push(if negative { i64::MIN } else { i64::MAX });
                    this.huge.push((this.ids.len() - 1 - start, item.str()?.to_string()));
                }
                Err(e) if item.hasattr("__index__")? => return Err(e),
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "{}: token id at position {i} must be an int, not {}",
                        what(()),
                        type_name(item)
                    )))
                }
            }
            Ok(())
        };
        if let Ok(l) = obj.cast_exact::<PyList>() {
            self.ids.reserve(l.len());
            for (i, item) in l.iter().enumerate() {
                push(self, i, &item)?;
            }
        } else if let Ok(t) = obj.cast_exact::<PyTuple>() {
            self.ids.reserve(t.len());
            for (i, item) in t.iter().enumerate() {
                push(self, i, &item)?;
            }
        } else if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err(format!(
                "{} must be an iterable of int, not {}",
                what(()),
                type_name(obj)
            )));
        } else {
            let iter = obj.try_iter().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{} must be an iterable of int, not {}",
                    what(()),
                    type_name(obj)
                ))
            })?;
            for (i, item) in iter.enumerate() {
                push(self, i, &item?)?;
            }
        }
        Ok(())
    }

    fn from(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Ids> {
        let mut ids = Ids::default();
        ids.extend(obj, what, None)?;
        Ok(ids)
    }

    /// The id at `position` (among those of one call starting at `start`) as the caller wrote it.
    fn show(&self, start: usize, position: usize) -> String {
        self.huge
            .iter()
            .find(|(p, _)| *p == position && start == 0)
            .map_or_else(|| self.ids[start + position].to_string(), |(_, s)| s.clone())
    }
}

/// The error for a bad id, or any other core error.
fn token_error(
    py: Python<'_>,
    e: &Error,
    shown: impl FnOnce(usize) -> String,
    size: usize,
) -> PyErr {
    match e.invalid_token() {
        Some((position, _)) => PyValueError::new_err(format!(
            "token id {} at position {position} is not in the vocabulary (ids 0..{size}, holes \
             excluded)",
            shown(position)
        )),
        None => map_error(py, e),
    }
}

/// Builds a `Vocab` (or subclass) from what `stopstream._vocab.<reader>(source)` reads out of a
/// tokenizer object: `(tokens, special, strip_leading_space)`.
fn from_python(
    cls: &Bound<'_, PyType>,
    reader: &str,
    source: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let py = cls.py();
    let (tokens, special, strip) = py
        .import("stopstream._vocab")?
        .call_method1(reader, (source,))?
        .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>, bool)>()?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("special", special)?;
    kwargs.set_item("strip_leading_space", strip)?;
    Ok(cls.call((tokens,), Some(&kwargs))?.unbind())
}

#[pymethods]
impl Vocab {
    #[new]
    #[pyo3(signature = (tokens, *, special = None, strip_leading_space = false))]
    fn new(
        tokens: &Bound<'_, PyAny>,
        special: Option<&Bound<'_, PyAny>>,
        strip_leading_space: bool,
    ) -> PyResult<Self> {
        let items: Vec<Bound<'_, PyAny>> =
            if tokens.is_instance_of::<PyBytes>() || tokens.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "tokens must be a sequence of bytes, not {}",
                    type_name(tokens)
                )));
            } else {
                tokens
                    .try_iter()
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "tokens must be a sequence of bytes, not {}",
                            type_name(tokens)
                        ))
                    })?
                    .collect::<PyResult<_>>()?
            };
        let mut bytes: Vec<Option<&[u8]>> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            if item.is_none() {
                bytes.push(None);
            } else if let Ok(b) = item.cast::<PyBytes>() {
                bytes.push(Some(b.as_bytes()));
            } else {
                return Err(PyTypeError::new_err(format!(
                    "token {i} must be bytes or None (unassigned), not {}",
                    type_name(item)
                )));
            }
        }
        let special = match special {
            Some(s) if !s.is_none() => Ids::from(s, "special")?,
            _ => Ids::default(),
        };
        let inner =
            crate::Vocab::new(bytes, &special.ids).map_err(|e| match e.invalid_token() {
                Some((p, _)) => PyValueError::new_err(format!(
                    "special id {} at position {p} is not in the vocabulary (ids 0..{})",
                    special.show(0, p),
                    items.len()
                )),
                None => PyMemoryError::new_err(e.to_string()),
            })?;
        let pieces = (0..inner.len()).map(|_| OnceLock::new()).collect();
        Ok(Vocab { inner: inner.with_strip_leading_space(strip_leading_space), pieces })
    }

    /// The vocabulary of a `tiktoken.Encoding`.
    #[classmethod]
    fn from_tiktoken(cls: &Bound<'_, PyType>, encoding: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        from_python(cls, "tiktoken_tokens", encoding)
    }

    /// The vocabulary of a Hugging Face `tokenizers.Tokenizer`.
    #[classmethod]
    fn from_tokenizers(
        cls: &Bound<'_, PyType>,
        tokenizer: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        from_python(cls, "tokenizers_tokens", tokenizer)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The bytes of `id` (`b""` for a special token), or `None` if unassigned or out of range.
    fn token_bytes<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let id = Ids::from(&PyTuple::new(py, [id])?.into_any(), "id")?.ids[0];
        Ok(match self.inner.get(id) {
            Some(crate::Token::Text(t)) => Some(PyBytes::new(py, t)),
            Some(crate::Token::Special) => Some(PyBytes::new(py, b"")),
            None => None,
        })
    }

    /// Whether `id` is a special token.
    fn is_special(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = Ids::from(&PyTuple::new(py, [id])?.into_any(), "id")?.ids[0];
        Ok(self.inner.is_special(id))
    }

    #[getter]
    fn strip_leading_space(&self) -> bool {
        self.inner.strips_leading_space()
    }

    fn __repr__(&self) -> String {
        format!("Vocab(<{} ids>)", self.inner.len())
    }
}

/// What one `feed` released: `text` to emit and how many input `tokens` it covers.
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct TokenPiece {
    text: Py<PyString>,
    tokens: usize,
}

#[pymethods]
impl TokenPiece {
    #[new]
    fn new(text: Bound<'_, PyString>, tokens: usize) -> Self {
        TokenPiece { text: text.unbind(), tokens }
    }

    #[getter]
    fn text(&self, py: Python<'_>) -> Py<PyString> {
        self.text.clone_ref(py)
    }

    #[getter]
    fn tokens(&self) -> usize {
        self.tokens
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<TokenPiece>() else { return Ok(false) };
        let other = other.get();
        Ok(self.tokens == other.tokens && self.text.bind(py).as_any().eq(other.text.bind(py))?)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.text.bind(py), self.tokens).into_pyobject(py)?.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("TokenPiece(text={}, tokens={})", self.text.bind(py).repr()?, self.tokens))
    }
}

fn piece(text: Bound<'_, PyString>, tokens: usize) -> PyResult<Py<TokenPiece>> {
    Py::new(text.py(), TokenPiece { text: text.unbind(), tokens })
}

thread_local! {
    /// The output buffer of `feed` and `finish`: one allocation per thread, not per call.
    static OUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's output buffer, emptied (a fresh one if it is in use).
fn with_out<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    OUT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut out) => {
            out.clear();
            f(&mut out)
        }
        Err(_) => f(&mut Vec::new()),
    })
}

/// Up to this many ids per call are converted onto the stack.
const STACK_IDS: usize = 8;

/// The ids of `obj` when it is a short exact list of ints that fit `i64` (the engine's usual
/// call: one new id); `None` sends the caller to the general conversion.
fn short_ids(obj: &Bound<'_, PyAny>, buf: &mut [i64; STACK_IDS]) -> Option<usize> {
    let l = obj.cast_exact::<PyList>().ok()?;
    let n = l.len();
    if n > STACK_IDS {
        return None;
    }
    for (slot, item) in buf.iter_mut().zip(l.iter()) {
        *slot = item.extract::<i64>().ok()?;
    }
    Some(n)
}

/// Stop sequences and stop token ids over a stream of token ids (`stopstream.TokenStopFilter`).
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct TokenStopFilter {
    vocab: Py<Vocab>,
    stops: Stops,
    stop_ids: Py<PyTuple>,
    state: TryLock<TokenStream>,
}

impl TokenStopFilter {
    fn size(&self) -> usize {
        self.vocab.get().inner.len()
    }
}

#[pymethods]
impl TokenStopFilter {
    #[new]
    #[pyo3(signature = (
        vocab, stops, *, include_stop = IncludeStop::default(), stop_token_ids = None,
        errors = "replace"
    ))]
    #[pyo3(
        text_signature = "(vocab, stops, *, include_stop=False, stop_token_ids=None, errors='replace')"
    )]
    fn new(
        py: Python<'_>,
        vocab: Bound<'_, Vocab>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: IncludeStop,
        stop_token_ids: Option<&Bound<'_, PyAny>>,
        errors: &str,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        let (stops, include_stop) = resolve(py, stops, include_stop, SkipArgs::default())?;
        if stops.ext.is_some() {
            // Token streams run the literal automaton only, for now: say so rather than
            // silently matching nothing.
            return Err(pyo3::exceptions::PyValueError::new_err(
                "TokenStopFilter takes plain str stops only (no Stop, Regex or skip regions)",
            ));
        }
        let ids = match stop_token_ids {
            Some(s) if !s.is_none() => Ids::from(s, "stop_token_ids")?,
            _ => Ids::default(),
        };
        let state =
            TokenStream::new(&vocab.get().inner, include_stop, replace, &ids.ids).map_err(|e| {
                match e.invalid_token() {
                    Some((p, _)) => PyValueError::new_err(format!(
                        "stop token id {} at position {p} is not in the vocabulary (ids 0..{})",
                        ids.show(0, p),
                        vocab.get().inner.len()
                    )),
                    None => map_error(py, &e),
                }
            })?;
        let stop_ids = PyTuple::new(py, state.stop_ids())?.unbind();
        Ok(TokenStopFilter { vocab: vocab.unbind(), stops, stop_ids, state: TryLock::new(state) })
    }

    fn feed(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<Py<TokenPiece>> {
        let mut buf = [0i64; STACK_IDS];
        let short = short_ids(ids, &mut buf);
        let general = if short.is_none() { Some(Ids::from(ids, "feed()")?) } else { None };
        let ids: &[i64] = match &general {
            Some(g) => &g.ids,
            None => &buf[..short.unwrap_or(0)],
        };
        let vocab = self.vocab.get();
        with_out(|out| {
            let result = lock(py, &self.state)?.feed(&vocab.inner, &self.stops.set, ids, out);
            let n = result.map_err(|e| {
                // Only the general conversion meets ints too large for `i64`.
                let shown = |p: usize| {
                    general.as_ref().map_or_else(|| ids[p].to_string(), |g| g.show(0, p))
                };
                token_error(py, &e, shown, self.size())
            })?;
            vocab.piece(py, ids, out, n)
        })
    }

    fn finish(&self, py: Python<'_>) -> PyResult<Py<TokenPiece>> {
        let (text, n) = with_out(|out| {
            let result = lock(py, &self.state)?.finish(&self.stops.set, out);
            let n = result.map_err(|e| map_error(py, &e))?;
            Ok::<_, PyErr>((make_str(py, out)?, n))
        })?;
        piece(text, n)
    }

    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        lock(py, &self.state)?.reset();
        Ok(())
    }

    #[getter]
    fn vocab(&self, py: Python<'_>) -> Py<Vocab> {
        self.vocab.clone_ref(py)
    }

    #[getter]
    fn stops(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stops.tuple.clone_ref(py)
    }

    #[getter]
    fn stop_token_ids(&self, py: Python<'_>) -> Py<PyTuple> {
        self.stop_ids.clone_ref(py)
    }

    #[getter]
    fn include_stop(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock(py, &self.state)?.include_stop())
    }

    #[getter]
    fn errors(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(if lock(py, &self.state)?.replace() { "replace" } else { "strict" })
    }

    #[getter]
    fn stopped(&self, py: Python<'_>) -> PyResult<bool> {
        let st = lock(py, &self.state)?;
        Ok(st.stop_token().is_some() || matches!(st.status(), Status::Stopped(_)))
    }

    #[getter]
    fn stop_sequence(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let status = lock(py, &self.state)?.status();
        Ok(stop_sequence(py, &self.stops, status))
    }

    #[getter]
    fn stop_index(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        Ok(stop_index(lock(py, &self.state)?.status()))
    }

    #[getter]
    fn stop_reason(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        let st = lock(py, &self.state)?;
        Ok(if st.stop_token().is_some() {
            Some("stop_token")
        } else {
            match st.status() {
                Status::Open if st.is_finished() => Some("end"),
                Status::Open => None,
                Status::Stopped(_) => Some("stop_sequence"),
                Status::Finished => Some("end"),
            }
        })
    }

    #[getter]
    fn stop_token_id(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        Ok(lock(py, &self.state)?.stop_token())
    }

    #[getter]
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let held = lock(py, &self.state)?.held(&self.stops.set);
        make_str(py, held)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (include, replace) = {
            let st = lock(py, &self.state)?;
            (st.include_stop(), st.replace())
        };
        Ok(format!(
            "TokenStopFilter(<{} ids>, {}, include_stop={}, stop_token_ids={}, errors={:?})",
            self.size(),
            self.stops.tuple.bind(py).repr()?,
            if include { "True" } else { "False" },
            self.stop_ids.bind(py).repr()?,
            if replace { "replace" } else { "strict" },
        ))
    }
}

/// One stream's share of a batch.
struct Item<'a> {
    filter: &'a TokenStopFilter,
    /// Index of its lock in the batch's guards (a filter given twice shares one).
    slot: usize,
    ids: std::ops::Range<usize>,
}

/// Takes every filter's lock, or none: a filter given twice shares one guard; a filter in use
/// elsewhere is `RuntimeError` under the GIL (its holder cannot be waited for: it may be this
/// very thread), and in a free-threaded build the batch lets go of everything and retries, so
/// two batches over the same filters cannot deadlock.
fn lock_all<'a>(py: Python<'_>, items: &mut [Item<'a>]) -> PyResult<Vec<Guard<'a, TokenStream>>> {
    'retry: loop {
        let mut guards: Vec<Guard<'a, TokenStream>> = Vec::with_capacity(items.len());
        for i in 0..items.len() {
            let filter = items[i].filter;
            if let Some(g) = try_lock(py, &filter.state) {
                items[i].slot = guards.len();
                guards.push(g);
                continue;
            }
            // Taken: by this batch (the filter is given twice), or elsewhere.
            if let Some(earlier) = items[..i].iter().find(|it| std::ptr::eq(it.filter, filter)) {
                items[i].slot = earlier.slot;
                continue;
            }
            drop(guards);
            if cfg!(not(Py_GIL_DISABLED)) {
                return Err(PyRuntimeError::new_err(format!(
                    "filters[{i}] is in use by another call"
                )));
            }
            py.detach(std::thread::yield_now);
            continue 'retry;
        }
        return Ok(guards);
    }
}

/// Feeds many streams in one call: `ids_per_filter[i]` to `filters[i]`.
///
/// All or nothing: a bad id or (in strict mode) invalid UTF-8 in any stream raises the error
/// feeding that stream alone would, naming its position in the batch, and no filter changes.
/// Only streams that can fail (an id outside the vocabulary, strict decoding, a filter given
/// twice) are first run on a copy; the common step is one pass over the real states.
#[pyfunction]
pub(super) fn feed_batch<'py>(
    py: Python<'py>,
    filters: &Bound<'py, PyAny>,
    ids_per_filter: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let seq = |obj: &Bound<'py, PyAny>, what: &str| -> PyResult<Vec<Bound<'py, PyAny>>> {
        if let Ok(l) = obj.cast_exact::<PyList>() {
            return Ok(l.iter().collect());
        }
        if let Ok(t) = obj.cast_exact::<PyTuple>() {
            return Ok(t.iter().collect());
        }
        obj.try_iter()
            .map_err(|_| {
                PyTypeError::new_err(format!("{what} must be a sequence, not {}", type_name(obj)))
            })?
            .collect()
    };
    let fs = seq(filters, "filters")?;
    let lists = seq(ids_per_filter, "ids_per_filter")?;
    if fs.len() != lists.len() {
        return Err(PyValueError::new_err(format!(
            "feed_batch() got {} filters and {} id lists",
            fs.len(),
            lists.len()
        )));
    }
    let mut bound = Vec::with_capacity(fs.len());
    for (i, f) in fs.iter().enumerate() {
        bound.push(f.cast::<TokenStopFilter>().map_err(|_| {
            PyTypeError::new_err(format!(
                "filters[{i}] must be a TokenStopFilter, not {}",
                type_name(f)
            ))
        })?);
    }
    let mut ids = Ids::default();
    let mut items = Vec::with_capacity(fs.len());
    let mut huge: Vec<(usize, usize, String)> = Vec::new();
    for (i, (f, l)) in bound.iter().zip(&lists).enumerate() {
        let start = ids.ids.len();
        ids.extend(l, "ids_per_filter", Some(i))?;
        huge.extend(ids.huge.drain(..).map(|(p, s)| (i, p, s)));
        items.push(Item { filter: f.get(), slot: 0, ids: start..ids.ids.len() });
    }
    let flat = ids.ids;
    let mut guards = lock_all(py, &mut items)?;
    let outcome = {
        let items = &items;
        let flat = &flat;
        let guards = &mut guards;
        py.detach(move || run_batch(items, flat, guards))
    };
    drop(guards);
    let (out, results) = match outcome {
        Ok(v) => v,
        Err((i, e)) => {
            let it = &items[i];
            let size = it.filter.size();
            let shown = |p: usize| {
                huge.iter()
                    .find(|(b, q, _)| *b == i && *q == p)
                    .map_or_else(|| flat[it.ids.start + p].to_string(), |(_, _, s)| s.clone())
            };
            let err = token_error(py, &e, shown, size);
            let msg = err.value(py).str()?.to_string();
            return Err(if e.invalid_token().is_some() {
                PyValueError::new_err(format!("ids_per_filter[{i}]: {msg}"))
            } else {
                err
            });
        }
    };
    let pieces = items
        .iter()
        .zip(results)
        .map(|(it, (range, n))| {
            it.filter.vocab.get().piece(py, &flat[it.ids.clone()], &out[range], n)
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, pieces)
}

type BatchOut = (Vec<u8>, Vec<(std::ops::Range<usize>, usize)>);

/// The Rust work of a batch, detached from the interpreter.
fn run_batch(
    items: &[Item<'_>],
    flat: &[i64],
    guards: &mut [Guard<'_, TokenStream>],
) -> Result<BatchOut, (usize, Error)> {
    // A filter given twice: its entries depend on each other, so they all run on a copy.
    let mut uses = vec![0u32; if guards.len() < items.len() { guards.len() } else { 0 }];
    if !uses.is_empty() {
        for it in items {
            uses[it.slot] += 1;
        }
    }
    let risky = |it: &Item<'_>, st: &TokenStream| {
        let vocab = &it.filter.vocab.get().inner;
        uses.get(it.slot).is_some_and(|&n| n > 1)
            || !st.replace()
            || st.is_finished()
            || flat[it.ids.clone()].iter().any(|&id| vocab.get(id).is_none())
    };
    // Streams that can fail run on copies first; their outputs are kept and the copies become
    // the real states once every stream has succeeded. The usual step has none.
    let mut shadows: Vec<Option<TokenStream>> = Vec::new();
    for it in items {
        if shadows.get(it.slot).is_none_or(Option::is_none) && risky(it, &guards[it.slot]) {
            if shadows.is_empty() {
                shadows.resize(guards.len(), None);
            }
            shadows[it.slot] = Some(guards[it.slot].clone());
        }
    }
    let mut out = Vec::new();
    let mut results = vec![(0..0, 0); items.len()];
    if !shadows.is_empty() {
        for (i, it) in items.iter().enumerate() {
            let Some(st) = shadows[it.slot].as_mut() else { continue };
            let start = out.len();
            let n = st
                .feed(
                    &it.filter.vocab.get().inner,
                    &it.filter.stops.set,
                    &flat[it.ids.clone()],
                    &mut out,
                )
                .map_err(|e| (i, e))?;
            results[i] = (start..out.len(), n);
        }
    }
    for (i, it) in items.iter().enumerate() {
        if shadows.get(it.slot).is_some_and(Option::is_some) {
            continue;
        }
        let st = &mut *guards[it.slot];
        let start = out.len();
        let n = st
            .feed(
                &it.filter.vocab.get().inner,
                &it.filter.stops.set,
                &flat[it.ids.clone()],
                &mut out,
            )
            .map_err(|e| (i, e))?;
        results[i] = (start..out.len(), n);
    }
    for (slot, shadow) in shadows.into_iter().enumerate() {
        if let Some(st) = shadow {
            *guards[slot] = st;
        }
    }
    Ok((out, results))
}
