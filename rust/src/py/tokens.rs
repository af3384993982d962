//! Token ids in (contract §7): `Vocab`, `TokenStopFilter`, `TokenPiece` and `feed_batch`.
//!
//! Ids are converted to `i64` under the GIL (a Python int outside that range saturates, so it is
//! still "not in the vocabulary", and its message quotes the int as given); the core does the
//! rest. An id list may also be one plain `int`, the engine's usual step. `feed_batch` converts
//! every stream's ids while taking its filter's lock, does the Rust work (detached from the
//! interpreter), then builds the pieces.
//!
//! Stops of every kind (§6): a plain `str` list runs the literal token stream, anything else
//! (`Stop`, `Regex`, skip regions) the composed matcher through the same token bookkeeping
//! ([`TokenState`]). The fast steps below are the literal path's; a composed filter takes
//! `feed_batch`'s general path.
//!
//! Performance choices (a step of 256 streams, one id each, `benches/tokens.py`; instruction
//! counts per stream from callgrind, since the 2-core machine is shared and noisy):
//! * the usual step (one id in, exactly its text out, one token released) returns a
//!   `TokenPiece` cached per token id; the core says when its output is exactly the token's
//!   bytes ([`crate::Fed`]), so that step copies and compares nothing;
//! * the core's own fast steps for that case (`TokenStream::feed_id`: a token none of whose
//!   bytes can start a stop, inlined into the caller, and one after held text);
//! * `feed_batch` of exact lists of plain ints takes its own path ([`engine_step`]): the lists
//!   are read in place, the result list is built in place, the piece cache is read while
//!   detached; with the core's steps that took a step from 758 to 350 instructions per stream,
//!   and from 25.5 to 12.4 µs (CPU time, one run each, same load);
//! * `feed(id)` takes an `int`, so the caller builds no list (88 against 92 ns per call for
//!   `[id]`, before counting the list the caller builds).
//!
//! A free list for `TokenPiece` measured no faster than CPython's allocator, and neither did
//! prefetching the next pass's ints, filter states, token bytes, piece cells and pieces (12.0
//! without against 12.2 µs a step with, runs alternated), so there is neither. What remains in a
//! step of 256 streams over varied ids is mostly memory latency: each id touches its `int`
//! object, its filter, its vocabulary entry and bytes, its piece cell and its piece (the
//! samples of `perf` sit on those loads), and the same step over one id costs about half as
//! much.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{
    PyException, PyMemoryError, PyRuntimeError, PyTypeError, PyUnicodeDecodeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

use super::convert::make_str;
use super::errors::{map_error, parse_errors, type_name};
use super::filters::stop_text;
use super::stopset::{resolve, stop_index, IncludeStop, SkipArgs, Stops};
use super::{lock, try_lock};
use crate::lock::{Guard, TryLock};
use crate::{Error, Fed, MatchStream, Matcher, Status, StopSet, TokenStream};

/// A tokenizer's vocabulary: token id to bytes (`stopstream.Vocab`).
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct Vocab {
    inner: crate::Vocab,
    /// Per id, the piece `TokenPiece(its text, 1)`, built the first time a feed releases
    /// exactly that token with exactly its text: the usual engine step (one id in, its text
    /// out). Pieces are immutable, so that step hands out a shared object and allocates
    /// nothing; building a piece and its `str` was most of a step's cost in a profile. The
    /// table is lazy by pages of [`PAGE`] ids, so a vocabulary costs 16 bytes per page until
    /// its ids are used (a 200k vocabulary: 12.5 KB), and holds at most one piece per id. The
    /// cells are `OnceLock`s, so filling them is safe in a free-threaded build too, and a batch
    /// reads them while detached (so that the pass building the result list only increfs).
    pieces: Box<[OnceLock<Page>]>,
}

/// Ids per page of the piece cache.
const PAGE: usize = 256;

type Page = Box<[OnceLock<Py<TokenPiece>>]>;

impl Vocab {
    /// The shared piece of `id` (whose text is `text`, released alone).
    #[inline]
    fn cached(&self, py: Python<'_>, id: usize, text: &[u8]) -> PyResult<&Py<TokenPiece>> {
        let page =
            self.pieces[id / PAGE].get_or_init(|| (0..PAGE).map(|_| OnceLock::new()).collect());
        let cell = &page[id % PAGE];
        if let Some(p) = cell.get() {
            return Ok(p);
        }
        // Built before taking the cell, whose initializer then only moves it: building may run
        // Python code (a garbage collection), which may let another thread in, and a thread
        // waiting on the cell must never wait for Python.
        let p = piece(make_str(py, text)?, 1)?;
        Ok(cell.get_or_init(|| p))
    }

    /// The shared piece of `id`, if it was built: a few loads, no interpreter needed.
    #[inline]
    fn shared(&self, id: i64) -> Option<&Py<TokenPiece>> {
        let i = usize::try_from(id).ok()?;
        self.pieces.get(i / PAGE)?.get()?.get(i % PAGE)?.get()
    }

    /// The piece after a feed of the one id `id` that did `fed` (and appended `out`).
    #[inline]
    fn piece_of(&self, py: Python<'_>, id: i64, out: &[u8], fed: Fed) -> PyResult<Py<TokenPiece>> {
        if fed.whole && fed.released == 1 {
            // The usual step, once its piece exists: a few loads and an incref, inlined into
            // the caller (through `cached` and the general case below it took about 60
            // instructions per stream of a batch).
            if let Some(p) = self.shared(id) {
                return Ok(p.clone_ref(py));
            }
        }
        self.piece_slow(py, id, out, fed)
    }

    /// [`Vocab::piece_of`] building what it needs.
    #[inline(never)]
    fn piece_slow(
        &self,
        py: Python<'_>,
        id: i64,
        out: &[u8],
        fed: Fed,
    ) -> PyResult<Py<TokenPiece>> {
        if fed.whole {
            if let (Some(t), Ok(i)) = (self.inner.whole(id), usize::try_from(id)) {
                let cached = self.cached(py, i, t)?;
                if fed.released == 1 {
                    return Ok(cached.clone_ref(py));
                }
                return piece(cached.get().text.bind(py).clone(), fed.released);
            }
        }
        new_piece(py, out, fed.released)
    }
}

/// The piece for `out` and `n` released tokens.
fn new_piece(py: Python<'_>, out: &[u8], n: usize) -> PyResult<Py<TokenPiece>> {
    if out.is_empty() && n == 0 {
        return empty_piece(py);
    }
    piece(make_str(py, out)?, n)
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
    /// Appends the ids of `obj` (an iterable of ints, or one int); `what` names it in messages
    /// (`"feed()"` for a feed's ids, which is also what a batch entry's errors quote).
    fn extend(&mut self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
        let feed = what == "feed()";
        let not_ids = |obj: &Bound<'_, PyAny>| {
            let verb = if feed { "takes" } else { "must be" };
            PyTypeError::new_err(format!(
                "{what} {verb} an int or an iterable of int, not {}",
                type_name(obj)
            ))
        };
        let start = self.ids.len();
        let push = |this: &mut Ids, i: usize, item: &Bound<'_, PyAny>| -> PyResult<()> {
            if let Ok(v) = item.extract::<i64>() {
                this.ids.push(v);
                return Ok(());
            }
            // Not an `i64`: an int out of its range, an int-like (a NumPy integer) whose value
            // is one, or no id at all.
            let int = if item.is_instance_of::<PyInt>() {
                item.clone()
            } else if item.hasattr("__index__")? {
                // Its value as `operator.index` gives it (an error of `__index__` propagates).
                item.py().import("operator")?.call_method1("index", (item,))?
            } else {
                let place = if feed { String::new() } else { format!("{what}: ") };
                return Err(PyTypeError::new_err(format!(
                    "{place}token id at position {i} must be an int, not {}",
                    type_name(item)
                )));
            };
            if let Ok(v) = int.extract::<i64>() {
                this.ids.push(v);
            } else {
                // Out of range: saturated, so that it is still "not in the vocabulary" (never
                // `OverflowError`), and kept as written for the message.
                let negative = int.lt(0i64)?;
                this.ids.push(if negative { i64::MIN } else { i64::MAX });
                this.huge.push((this.ids.len() - 1 - start, int.str()?.to_string()));
            }
            Ok(())
        };
        if obj.is_instance_of::<PyInt>() {
            // One id, as `feed(id)` and `feed_batch(filters, [id, ...])` take it.
            return push(self, 0, obj);
        }
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
            return Err(not_ids(obj));
        } else {
            let Ok(iter) = obj.try_iter() else {
                if obj.hasattr("__index__")? {
                    // One id of an int-like type (a NumPy integer).
                    return push(self, 0, obj);
                }
                return Err(not_ids(obj));
            };
            for (i, item) in iter.enumerate() {
                push(self, i, &item?)?;
            }
        }
        Ok(())
    }

    fn from(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Ids> {
        let mut ids = Ids::default();
        ids.extend(obj, what)?;
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

/// The error of `feed_batch`'s entry `i`, from `err`, what feeding `filters[i]` alone with
/// `ids_per_filter[i]` raises: an exception of the same type whose message is prefixed
/// `ids_per_filter[i]: `, with `err` as its `__cause__`. A `UnicodeDecodeError` keeps its
/// encoding, object, start and end, and its reason is prefixed. An exception whose type cannot
/// be built from one message (a user's own type, from an iterable of ids that raised), or that
/// is no `Exception` (`KeyboardInterrupt`), propagates unchanged.
fn entry_error(py: Python<'_>, i: usize, err: PyErr) -> PyErr {
    let prefix = format!("ids_per_filter[{i}]: ");
    let value = err.value(py).clone().into_any();
    let ty = value.get_type();
    let built = if value.is_instance_of::<PyUnicodeDecodeError>() {
        (|| {
            let reason: String = value.getattr("reason")?.extract()?;
            ty.call1((
                value.getattr("encoding")?,
                value.getattr("object")?,
                value.getattr("start")?,
                value.getattr("end")?,
                format!("{prefix}{reason}"),
            ))
        })()
    } else if value.is_instance_of::<PyException>() {
        // The message as given (`KeyError`'s `str` is the repr of its key), else as shown.
        let args = value.getattr("args").and_then(|a| a.extract::<(String,)>());
        let msg = match args {
            Ok((msg,)) => Ok(msg),
            Err(_) => value.str().map(|m| m.to_string()),
        };
        msg.and_then(|msg| ty.call1((format!("{prefix}{msg}"),)))
    } else {
        return err;
    };
    match built {
        Ok(new) if new.is_exact_instance(&ty) => {
            let new = PyErr::from_value(new);
            new.set_cause(py, Some(err));
            new
        }
        _ => err,
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
        let pieces = (0..inner.len().div_ceil(PAGE)).map(|_| OnceLock::new()).collect();
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

/// The id of `obj` when it is one id the engine's usual way: an exact `int`, or an exact list
/// holding one, that fits `i64`. `None` sends the caller to the general conversion.
#[inline]
fn one_id(obj: &Bound<'_, PyAny>) -> Option<i64> {
    if let Ok(i) = obj.cast_exact::<PyInt>() {
        return exact_int(i);
    }
    let l = obj.cast_exact::<PyList>().ok()?;
    if l.len() != 1 {
        return None;
    }
    exact_int(l.get_item(0).ok()?.cast_exact::<PyInt>().ok()?)
}

/// The value of an exact `int` when it fits `i64`. `PyLong_AsLongLongAndOverflow` says so
/// without raising (and so without building an exception to throw away, as `extract` does for
/// a huge int), and no Python code runs.
#[inline]
#[allow(unsafe_code)]
fn exact_int(i: &Bound<'_, PyInt>) -> Option<i64> {
    let mut overflow = 0;
    // SAFETY: `i` is a live exact int.
    let v = unsafe { pyo3::ffi::PyLong_AsLongLongAndOverflow(i.as_ptr(), &raw mut overflow) };
    (overflow == 0).then_some(v)
}

/// Whether `obj` is an exact list or tuple of exact ints: reading it runs no Python code.
fn plain_ints(obj: &Bound<'_, PyAny>) -> bool {
    if let Ok(l) = obj.cast_exact::<PyList>() {
        return l.iter().all(|i| i.is_exact_instance_of::<PyInt>());
    }
    if let Ok(t) = obj.cast_exact::<PyTuple>() {
        return t.iter().all(|i| i.is_exact_instance_of::<PyInt>());
    }
    false
}

/// The ids of `obj` when it is a short exact list of ints that fit `i64`; `None` sends the
/// caller to the general conversion.
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

/// A filter's stream: the literal path (a plain `str` list), or the composed matcher of
/// contract §6 (`Stop` and `Regex` items, skip regions) over the same token bookkeeping.
///
/// A struct rather than an enum: the literal stream is a plain field, so the engine's batch
/// step reaches it with no dispatch per stream (an enum's match there cost about 7 instructions
/// per stream of a 256-stream step, callgrind: 367 against 360). The composed stream is boxed:
/// its state is several times the literal one's, and filters of a batch stay as small as they
/// were.
#[derive(Clone)]
struct TokenState {
    /// The literal stream; unused (left fresh) when `composed` is set.
    literal: TokenStream,
    composed: Option<Box<ComposedStream>>,
}

/// A composed stream with the matcher it runs against (shared with the filter's `StopSet`).
#[derive(Clone)]
struct ComposedStream {
    matcher: Arc<Matcher>,
    stream: TokenStream<MatchStream>,
}

impl ComposedStream {
    /// [`TokenStream::feed_id`], out of line: the literal step's callers stay small.
    #[inline(never)]
    fn feed_id(&mut self, vocab: &crate::Vocab, id: i64, out: &mut Vec<u8>) -> Result<Fed, Error> {
        self.stream.feed_id(vocab, &self.matcher, id, out)
    }
}

impl TokenState {
    /// [`TokenStream::feed_id`]; `set` is the literal list (unused by a composed stream).
    #[allow(
        clippy::inline_always,
        reason = "the literal step inlines into `feed` as it did before there were two kinds of stream: left to itself the compiler calls this"
    )]
    #[inline(always)]
    fn feed_id(
        &mut self,
        vocab: &crate::Vocab,
        set: &StopSet,
        id: i64,
        out: &mut Vec<u8>,
    ) -> Result<Fed, Error> {
        match &mut self.composed {
            None => self.literal.feed_id(vocab, set, id, out),
            Some(c) => c.feed_id(vocab, id, out),
        }
    }

    /// [`TokenStream::feed`].
    fn feed(
        &mut self,
        vocab: &crate::Vocab,
        set: &StopSet,
        ids: &[i64],
        out: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        match &mut self.composed {
            None => self.literal.feed(vocab, set, ids, out),
            Some(c) => c.stream.feed(vocab, &c.matcher, ids, out),
        }
    }

    fn finish(&mut self, set: &StopSet, out: &mut Vec<u8>) -> Result<usize, Error> {
        match &mut self.composed {
            None => self.literal.finish(set, out),
            Some(c) => c.stream.finish(&c.matcher, out),
        }
    }

    fn reset(&mut self, set: &StopSet) {
        match &mut self.composed {
            None => self.literal.reset(set),
            Some(c) => c.stream.reset(&c.matcher),
        }
    }

    /// Whether [`engine_step`] takes this stream: on the literal path (which it feeds
    /// directly), open (not finished), and in replace mode.
    #[inline]
    fn engine_ready(&self) -> bool {
        self.composed.is_none() && !self.literal.is_finished() && self.literal.replace()
    }

    #[inline]
    fn status(&self) -> Status {
        match &self.composed {
            None => self.literal.status(),
            Some(c) => c.stream.status(),
        }
    }

    fn stop_token(&self) -> Option<i64> {
        match &self.composed {
            None => self.literal.stop_token(),
            Some(c) => c.stream.stop_token(),
        }
    }

    #[inline]
    fn is_finished(&self) -> bool {
        match &self.composed {
            None => self.literal.is_finished(),
            Some(c) => c.stream.is_finished(),
        }
    }

    #[inline]
    fn replace(&self) -> bool {
        match &self.composed {
            None => self.literal.replace(),
            Some(c) => c.stream.replace(),
        }
    }

    fn include_stop(&self) -> bool {
        match &self.composed {
            None => self.literal.include_stop(),
            Some(c) => c.stream.include_stop(),
        }
    }

    fn stop_ids(&self) -> &[i64] {
        match &self.composed {
            None => self.literal.stop_ids(),
            Some(c) => c.stream.stop_ids(),
        }
    }

    /// The held text.
    fn held<'a>(&'a self, set: &'a StopSet) -> &'a [u8] {
        match &self.composed {
            None => self.literal.held(set),
            Some(c) => c.stream.held(&c.matcher),
        }
    }

    /// The text the stop that fired matched, or `None` on the literal path (which reports the
    /// list's item).
    fn matched(&self) -> Option<&[u8]> {
        self.composed.as_ref().map(|c| c.stream.matcher().stop_sequence(&c.matcher))
    }
}

/// Stop sequences and stop token ids over a stream of token ids (`stopstream.TokenStopFilter`).
#[pyclass(frozen, module = "stopstream._core")]
pub(super) struct TokenStopFilter {
    vocab: Py<Vocab>,
    stops: Stops,
    stop_ids: Py<PyTuple>,
    state: TryLock<TokenState>,
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
        errors = "replace", skip = None, skip_until = None
    ))]
    #[pyo3(
        text_signature = "(vocab, stops, *, include_stop=False, stop_token_ids=None, errors='replace', skip=None, skip_until=None)"
    )]
    #[allow(clippy::too_many_arguments, reason = "the constructor's keyword arguments")]
    fn new<'py>(
        py: Python<'py>,
        vocab: Bound<'py, Vocab>,
        stops: Option<&Bound<'py, PyAny>>,
        include_stop: IncludeStop,
        stop_token_ids: Option<&Bound<'py, PyAny>>,
        errors: &str,
        skip: Option<&Bound<'py, PyAny>>,
        skip_until: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        let (stops, include_stop) =
            resolve(py, stops, include_stop, SkipArgs { skip, skip_until })?;
        let ids = match stop_token_ids {
            Some(s) if !s.is_none() => Ids::from(s, "stop_token_ids")?,
            _ => Ids::default(),
        };
        let inner = &vocab.get().inner;
        let build = || {
            let literal = TokenStream::new(inner, include_stop, replace, &ids.ids)?;
            // `Stop` or `Regex` items, or skip regions: the composed matcher, as the text and
            // byte filters run it.
            let composed = match &stops.ext {
                Some(c) => {
                    let stream =
                        TokenStream::composed(inner, &c.matcher, include_stop, replace, &ids.ids)?;
                    Some(Box::new(ComposedStream { matcher: Arc::clone(&c.matcher), stream }))
                }
                None => None,
            };
            Ok::<_, Error>(TokenState { literal, composed })
        };
        let state = build().map_err(|e| match e.invalid_token() {
            Some((p, _)) => PyValueError::new_err(format!(
                "stop token id {} at position {p} is not in the vocabulary (ids 0..{})",
                ids.show(0, p),
                inner.len()
            )),
            None => map_error(py, &e),
        })?;
        let stop_ids = PyTuple::new(py, state.stop_ids())?.unbind();
        Ok(TokenStopFilter { vocab: vocab.unbind(), stops, stop_ids, state: TryLock::new(state) })
    }

    fn feed(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<Py<TokenPiece>> {
        let vocab = self.vocab.get();
        if let Some(id) = one_id(ids) {
            // The usual step: no buffer is allocated unless text other than the token's own
            // is emitted.
            let mut out = Vec::new();
            let result =
                lock(py, &self.state)?.feed_id(&vocab.inner, &self.stops.set, id, &mut out);
            let fed = result.map_err(|e| token_error(py, &e, |_| id.to_string(), self.size()))?;
            return vocab.piece_of(py, id, &out, fed);
        }
        let mut buf = [0i64; STACK_IDS];
        let short = short_ids(ids, &mut buf);
        let general = if short.is_none() { Some(Ids::from(ids, "feed()")?) } else { None };
        let ids: &[i64] = match &general {
            Some(g) => &g.ids,
            None => &buf[..short.unwrap_or(0)],
        };
        with_out(|out| {
            let result = lock(py, &self.state)?.feed(&vocab.inner, &self.stops.set, ids, out);
            let n = result.map_err(|e| {
                // Only the general conversion meets ints too large for `i64`.
                let shown = |p: usize| {
                    general.as_ref().map_or_else(|| ids[p].to_string(), |g| g.show(0, p))
                };
                token_error(py, &e, shown, self.size())
            })?;
            new_piece(py, out, n)
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
        lock(py, &self.state)?.reset(&self.stops.set);
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
        let (status, matched) = {
            let st = lock(py, &self.state)?;
            (st.status(), st.matched().map(<[u8]>::to_vec))
        };
        stop_text(py, &self.stops, status, matched.as_deref())
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
        let held = lock(py, &self.state)?.held(&self.stops.set).to_vec();
        make_str(py, &held)
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
    vocab: &'a Vocab,
    /// Index of its lock in the batch's guards (a filter given twice shares one).
    slot: usize,
    ids: std::ops::Range<usize>,
    /// Set by the run: where its text is in the batch's output, and what the feed did.
    out: std::ops::Range<usize>,
    fed: Fed,
}

/// Takes every filter's lock, or none: a filter given twice shares one guard; a filter in use
/// elsewhere is `RuntimeError` under the GIL (its holder cannot be waited for: it may be this
/// very thread), and in a free-threaded build the batch lets go of everything and retries, so
/// two batches over the same filters cannot deadlock.
fn lock_all<'a>(py: Python<'_>, items: &mut [Item<'a>]) -> PyResult<Vec<Guard<'a, TokenState>>> {
    'retry: loop {
        let mut guards: Vec<Guard<'a, TokenState>> = Vec::with_capacity(items.len());
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
/// All or nothing: an error in any entry changes no filter. The rule for naming it: what
/// feeding `filters[i]` alone with `ids_per_filter[i]` would raise (a bad id, ids of the wrong
/// type, a finished filter, invalid UTF-8 in strict mode, an error raised by the ids' own
/// iterable) is raised as the same type, prefixed `ids_per_filter[i]: ` and chained from that
/// error ([`entry_error`]), so a caller can tell which request to fail without parsing; only a
/// `filters[i]` that cannot be fed at all (not a `TokenStopFilter`, or in use by another call)
/// is named `filters[i]`, since no feed of it exists to quote. Only streams that can fail (an
/// id outside the vocabulary, strict decoding, a finished filter, a filter given twice) are
/// first run on a copy; the common step is one pass over the real states.
#[pyfunction]
pub(super) fn feed_batch<'py>(
    py: Python<'py>,
    filters: &Bound<'py, PyAny>,
    ids_per_filter: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    #[cfg(not(Py_GIL_DISABLED))]
    if let (Ok(fs), Ok(ids)) =
        (filters.cast_exact::<PyList>(), ids_per_filter.cast_exact::<PyList>())
    {
        if let Some(pieces) = engine_step(py, fs, ids)? {
            return Ok(pieces);
        }
    }
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
    let bound = fs
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            f.cast_into::<TokenStopFilter>().map_err(|e| {
                PyTypeError::new_err(format!(
                    "filters[{i}] must be a TokenStopFilter, not {}",
                    type_name(&e.into_inner())
                ))
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let Batch { mut items, flat, huge, guards, safe } = Batch::read(py, &bound, &lists)?;
    let mut guards = match guards {
        Some(g) => g,
        None => lock_all(py, &mut items)?,
    };
    // Always detached, as the contract says (§7): other threads run meanwhile. For a batch of
    // one stream that costs about 80 ns of CPU time (0.44 against 0.37 µs); from 256 streams
    // on it is under 1% of the step.
    let outcome = {
        let items = &mut items;
        let flat = &flat;
        let guards = &mut guards;
        py.detach(move || run_batch(items, flat, guards, safe))
    };
    drop(guards);
    let out = match outcome {
        Ok(out) => out,
        Err((i, e)) => {
            let it = &items[i];
            let size = it.filter.size();
            let shown = |p: usize| {
                huge.iter()
                    .find(|(b, q, _)| *b == i && *q == p)
                    .map_or_else(|| flat[it.ids.start + p].to_string(), |(_, _, s)| s.clone())
            };
            return Err(entry_error(py, i, token_error(py, &e, shown, size)));
        }
    };
    let pieces = items
        .iter()
        .map(|it| match flat[it.ids.clone()] {
            [id] => it.vocab.piece_of(py, id, &out[it.out.clone()], it.fed),
            _ => new_piece(py, &out[it.out.clone()], it.fed.released),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, pieces)
}

/// One stream of [`engine_step`].
#[cfg(not(Py_GIL_DISABLED))]
struct Step<'a> {
    state: Guard<'a, TokenState>,
    filter: &'a TokenStopFilter,
    vocab: &'a Vocab,
    id: i64,
    fed: Fed,
    /// The shared piece, when the step released exactly the token's text and it exists.
    piece: Option<&'a Py<TokenPiece>>,
    /// Where its text is in the batch's output.
    out: (u32, u32),
}

/// `feed_batch` of the engine's usual step: exact lists of filters and of plain `int` ids, or
/// exact lists of one such id (each fits `i64`, is in its vocabulary, and goes to a distinct
/// filter, open, in `"replace"` mode and on the literal path), so no stream can fail and none
/// is read twice.
/// Anything else is `None` before any filter changes, and the general path takes the batch.
///
/// It reads the lists' items in place and the ints with `PyLong_AsLongLongAndOverflow`, one
/// pass over the streams under the GIL (types, ids, locks, the checks), one detached (the
/// core's steps), one building the result list in place. Against the general path (vectors of
/// owned items, a cast per filter, a `Vec` of pieces copied into the list) this cut a
/// 256-stream step from 635 to 422 instructions per stream (callgrind).
#[cfg(not(Py_GIL_DISABLED))]
#[allow(unsafe_code)]
#[allow(clippy::cast_possible_wrap, reason = "indices below a list's length fit `Py_ssize_t`")]
fn engine_step<'py>(
    py: Python<'py>,
    filters: &Bound<'py, PyList>,
    ids: &Bound<'py, PyList>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    use pyo3::ffi;
    use pyo3::type_object::PyTypeInfo;
    let n = filters.len();
    if ids.len() != n || n > u32::MAX as usize / 64 {
        return Ok(None);
    }
    let filter_type = TokenStopFilter::type_object_raw(py);
    // Strong references, so that no filter goes away while the work runs detached (another
    // thread may empty the list meanwhile). No Python code runs while the lists are read
    // (exact types only), so their items stay put.
    let mut owned: Vec<Bound<'py, TokenStopFilter>> = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `i` is below the length of an exact list, and nothing runs meanwhile.
        let p = unsafe { ffi::PyList_GET_ITEM(filters.as_ptr(), i as ffi::Py_ssize_t) };
        // SAFETY: `p` is a live object (the list holds it).
        if unsafe { ffi::Py_TYPE(p) } != filter_type {
            return Ok(None);
        }
        // SAFETY: `p` is live and its type is exactly `TokenStopFilter`.
        owned.push(unsafe { Bound::from_borrowed_ptr(py, p).cast_into_unchecked() });
    }
    let mut steps: Vec<Step<'_>> = Vec::with_capacity(n);
    for (i, f) in owned.iter().enumerate() {
        // SAFETY: as above.
        let mut item = unsafe { ffi::PyList_GET_ITEM(ids.as_ptr(), i as ffi::Py_ssize_t) };
        // SAFETY: `item` is live; an exact list of one item holds a live item at index 0.
        unsafe {
            if ffi::PyList_CheckExact(item) != 0 && ffi::PyList_GET_SIZE(item) == 1 {
                // `[id]`, the shape of an engine that may emit several ids a step (20.4
                // against 12.4 µs a step of 256 streams on the general path).
                item = ffi::PyList_GET_ITEM(item, 0);
            }
            if ffi::PyLong_CheckExact(item) == 0 {
                return Ok(None);
            }
        }
        let mut overflow = 0;
        // SAFETY: `item` is an exact int: no Python code runs, and with `overflow` set the
        // result is -1 without an exception.
        let id = unsafe { ffi::PyLong_AsLongLongAndOverflow(item, &raw mut overflow) };
        let filter = f.get();
        if overflow != 0 {
            return Ok(None);
        }
        // Taken: the filter is given twice, or is in use by a call it made re-entrantly.
        let Some(state) = try_lock(py, &filter.state) else { return Ok(None) };
        if !state.engine_ready() {
            return Ok(None);
        }
        let (vocab, fed) = (filter.vocab.get(), Fed { released: 0, whole: false });
        steps.push(Step { state, filter, vocab, id, fed, piece: None, out: (0, 0) });
    }
    // Apart, so that the loop is a few instructions and the lookups' cache misses overlap.
    if !steps.iter().all(|s| s.vocab.inner.get(s.id).is_some()) {
        return Ok(None);
    }
    let run = |steps: &mut [Step<'_>]| -> Result<Vec<u8>, (usize, Error)> {
        let mut out = Vec::new();
        for (i, s) in steps.iter_mut().enumerate() {
            let start = out.len() as u32;
            // The literal stream directly: `engine_ready` held for every stream.
            debug_assert!(s.state.composed.is_none());
            s.fed = s
                .state
                .literal
                .feed_id(&s.vocab.inner, &s.filter.stops.set, s.id, &mut out)
                .map_err(|e| (i, e))?;
            s.out = (start, out.len() as u32);
            if s.fed.whole && s.fed.released == 1 {
                s.piece = s.vocab.shared(s.id);
            }
        }
        Ok(out)
    };
    // Always detached, as the contract says (§7); see `feed_batch`.
    let out = match py.detach(|| run(&mut steps)) {
        Ok(out) => out,
        // Nothing can fail here (checked above); if it did, say what, as the general path would.
        Err((i, e)) => {
            let size = steps[i].filter.size();
            let id = steps[i].id;
            return Err(entry_error(py, i, token_error(py, &e, |_| id.to_string(), size)));
        }
    };
    // SAFETY: `n` fits `Py_ssize_t`; a null result is the error set by CPython.
    let list = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n as ffi::Py_ssize_t))? };
    for (i, s) in steps.into_iter().enumerate() {
        let piece = match s.piece {
            Some(p) => p.clone_ref(py),
            None => {
                s.vocab.piece_slow(py, s.id, &out[s.out.0 as usize..s.out.1 as usize], s.fed)?
            }
        };
        // SAFETY: `list` is a new list of length `n`, and slot `i` is empty; the piece's
        // reference moves into it.
        unsafe { ffi::PyList_SET_ITEM(list.as_ptr(), i as ffi::Py_ssize_t, piece.into_ptr()) };
    }
    // SAFETY: `PyList_New` made a list.
    Ok(Some(unsafe { list.cast_into_unchecked() }))
}

/// A batch's streams, read in.
struct Batch<'a> {
    items: Vec<Item<'a>>,
    /// Every stream's ids, one after the other.
    flat: Vec<i64>,
    /// Ints too large for `i64`, as `(stream, position, as written)`, for messages.
    huge: Vec<(usize, usize, String)>,
    /// The filters' locks, when they could be taken while reading.
    guards: Option<Vec<Guard<'a, TokenState>>>,
    /// No stream can fail (decided while locking).
    safe: bool,
}

impl<'a> Batch<'a> {
    /// Converts every stream's ids. Each filter is locked as its ids are read, as long as no
    /// Python code can run meanwhile (the ids are exact ints, or exact lists or tuples of them),
    /// and whether its stream can fail is decided then, while its state is at hand: one pass
    /// over the filters instead of three. Anything else (a filter given twice, one in use, ids
    /// of another type) lets go, and the caller takes the locks afterwards.
    fn read(
        py: Python<'_>,
        filters: &'a [Bound<'_, TokenStopFilter>],
        lists: &[Bound<'_, PyAny>],
    ) -> PyResult<Batch<'a>> {
        let mut ids = Ids { ids: Vec::with_capacity(lists.len()), huge: Vec::new() };
        let mut items = Vec::with_capacity(lists.len());
        let mut huge = Vec::new();
        let mut guards = Vec::with_capacity(lists.len());
        let mut locking = true;
        let mut safe = true;
        for (i, (f, l)) in filters.iter().zip(lists).enumerate() {
            let start = ids.ids.len();
            if let Some(id) = one_id(l) {
                ids.ids.push(id);
            } else {
                if locking && !plain_ints(l) {
                    locking = false;
                    guards.clear();
                }
                ids.extend(l, "feed()").map_err(|e| entry_error(py, i, e))?;
                huge.extend(ids.huge.drain(..).map(|(p, s)| (i, p, s)));
            }
            let filter = f.get();
            let vocab = filter.vocab.get();
            let mut item = Item {
                filter,
                vocab,
                slot: 0,
                ids: start..ids.ids.len(),
                out: 0..0,
                fed: Fed { released: 0, whole: false },
            };
            if locking {
                if let Some(g) = try_lock(py, &filter.state) {
                    safe &= !g.is_finished()
                        && g.replace()
                        && ids.ids[start..].iter().all(|&id| vocab.inner.get(id).is_some());
                    item.slot = guards.len();
                    guards.push(g);
                } else {
                    locking = false;
                    guards.clear();
                }
            }
            items.push(item);
        }
        Ok(Batch {
            items,
            flat: ids.ids,
            huge,
            safe: safe && locking,
            guards: locking.then_some(guards),
        })
    }
}

/// The Rust work of a batch (detached from the interpreter): fills each
/// item's `out` and `fed`, and returns the output they point into.
fn run_batch(
    items: &mut [Item<'_>],
    flat: &[i64],
    guards: &mut [Guard<'_, TokenState>],
    safe: bool,
) -> Result<Vec<u8>, (usize, Error)> {
    let mut out = Vec::with_capacity(flat.len() * 8);
    if safe {
        // No stream can fail (checked while locking): one pass over the real states.
        for (i, it) in items.iter_mut().enumerate() {
            let start = out.len();
            it.fed = feed_item(&mut guards[it.slot], it, flat, &mut out).map_err(|e| (i, e))?;
            it.out = start..out.len();
        }
        return Ok(out);
    }
    // A filter given twice: its entries depend on each other, so they all run on a copy.
    let mut uses = vec![0u32; if guards.len() < items.len() { guards.len() } else { 0 }];
    if !uses.is_empty() {
        for it in items.iter() {
            uses[it.slot] += 1;
        }
    }
    let risky = |it: &Item<'_>, st: &TokenState| {
        uses.get(it.slot).is_some_and(|&n| n > 1)
            || !st.replace()
            || st.is_finished()
            || flat[it.ids.clone()].iter().any(|&id| it.vocab.inner.get(id).is_none())
    };
    // Streams that can fail run on copies first; their outputs are kept and the copies become
    // the real states once every stream has succeeded.
    let mut shadows: Vec<Option<TokenState>> = Vec::new();
    for it in items.iter() {
        if shadows.get(it.slot).is_none_or(Option::is_none) && risky(it, &guards[it.slot]) {
            if shadows.is_empty() {
                shadows.resize(guards.len(), None);
            }
            shadows[it.slot] = Some(guards[it.slot].clone());
        }
    }
    if !shadows.is_empty() {
        for (i, it) in items.iter_mut().enumerate() {
            let Some(st) = shadows[it.slot].as_mut() else { continue };
            let start = out.len();
            it.fed = feed_item(st, it, flat, &mut out).map_err(|e| (i, e))?;
            it.out = start..out.len();
        }
    }
    for (i, it) in items.iter_mut().enumerate() {
        if shadows.get(it.slot).is_some_and(Option::is_some) {
            continue;
        }
        let start = out.len();
        it.fed = feed_item(&mut guards[it.slot], it, flat, &mut out).map_err(|e| (i, e))?;
        it.out = start..out.len();
    }
    for (slot, shadow) in shadows.into_iter().enumerate() {
        if let Some(st) = shadow {
            *guards[slot] = st;
        }
    }
    Ok(out)
}

/// Feeds one batch entry to `st`.
#[inline]
fn feed_item(
    st: &mut TokenState,
    it: &Item<'_>,
    flat: &[i64],
    out: &mut Vec<u8>,
) -> Result<Fed, Error> {
    let (vocab, set) = (&it.vocab.inner, &it.filter.stops.set);
    match flat[it.ids.clone()] {
        [id] => st.feed_id(vocab, set, id, out),
        ref ids => Ok(Fed { released: st.feed(vocab, set, ids, out)?, whole: false }),
    }
}
