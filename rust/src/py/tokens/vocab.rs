//! `Vocab` (a tokenizer's vocabulary) and `TokenPiece` (what one feed released), with the
//! per-id cache of shared pieces that makes the usual engine step allocate nothing; and
//! `_tokenizer_tokens`, which hands a `tokenizers` vocabulary to the core's decoder.

use std::sync::OnceLock;

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::super::convert::{make_str, str_bytes};
use super::super::errors::{iter_of, map_error, wrong_type};
use super::Ids;
use crate::Fed;

/// A tokenizer's vocabulary: token id to bytes. `stopstream.Vocab` subclasses it with the
/// constructors that read a tokenizer object (`stopstream._vocab`), so no Rust code imports
/// the package's own Python modules.
#[pyclass(frozen, subclass, module = "stopstream._core")]
pub(crate) struct Vocab {
    pub(super) inner: crate::Vocab,
    /// Per id, the piece `TokenPiece(its text, 1)`, built the first time a feed releases
    /// exactly that token with exactly its text: the usual engine step (one id in, its text
    /// out). Pieces are immutable, so that step hands out a shared object and allocates
    /// nothing; building a piece and its `str` was most of a step's cost in a profile. The
    /// table is lazy by pages of [`PAGE`] ids, so a vocabulary costs 16 bytes per page until
    /// its ids are used (a 200k vocabulary: 12.5 KB), and holds at most one piece per id. The
    /// cells are `OnceLock`s, so filling them is safe in a free-threaded build too, and a batch
    /// reads them while detached (so that the pass building the result list only increfs).
    pub(super) pieces: Box<[OnceLock<Page>]>,
}

/// Ids per page of the piece cache.
pub(super) const PAGE: usize = 256;

pub(super) type Page = Box<[OnceLock<Py<TokenPiece>>]>;

impl Vocab {
    /// The shared piece of `id` (whose text is `text`, released alone).
    #[inline]
    pub(super) fn cached(
        &self,
        py: Python<'_>,
        id: usize,
        text: &[u8],
    ) -> PyResult<&Py<TokenPiece>> {
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
    pub(super) fn shared(&self, id: i64) -> Option<&Py<TokenPiece>> {
        let i = usize::try_from(id).ok()?;
        self.pieces.get(i / PAGE)?.get()?.get(i % PAGE)?.get()
    }

    /// The piece after a feed of the one id `id` that did `fed` (and appended `out`).
    #[inline]
    pub(super) fn piece_of(
        &self,
        py: Python<'_>,
        id: i64,
        out: &[u8],
        fed: Fed,
    ) -> PyResult<Py<TokenPiece>> {
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
    pub(super) fn piece_slow(
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
pub(super) fn new_piece(py: Python<'_>, out: &[u8], n: usize) -> PyResult<Py<TokenPiece>> {
    if out.is_empty() && n == 0 {
        return empty_piece(py);
    }
    piece(make_str(py, out)?, n)
}

/// The shared `TokenPiece("", 0)`: a step that releases nothing.
pub(super) fn empty_piece(py: Python<'_>) -> PyResult<Py<TokenPiece>> {
    static EMPTY: PyOnceLock<Py<TokenPiece>> = PyOnceLock::new();
    EMPTY.get_or_try_init(py, || piece(PyString::new(py, ""), 0)).map(|p| p.clone_ref(py))
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
            iter_of(tokens, "tokens must be a sequence of bytes")?.collect::<PyResult<_>>()?;
        let mut bytes: Vec<Option<&[u8]>> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            if item.is_none() {
                bytes.push(None);
            } else if let Ok(b) = item.cast::<PyBytes>() {
                bytes.push(Some(b.as_bytes()));
            } else {
                return Err(wrong_type(
                    format_args!("token {i} must be bytes or None (unassigned)"),
                    item,
                ));
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

/// Every id's bytes (`None` for an unassigned id), the special ids and the leading-space rule
/// of a `tokenizers` vocabulary: its JSON (`to_str()`), its `get_vocab(with_added_tokens=True)`
/// and its size; the readers are the core's ([`crate::TokenDecoder`]).
#[pyfunction]
#[pyo3(name = "_tokenizer_tokens", signature = (config, vocab, size, /))]
pub(crate) fn tokenizer_tokens<'py>(
    py: Python<'py>,
    config: &Bound<'py, PyString>,
    vocab: &Bound<'py, PyDict>,
    size: usize,
) -> PyResult<(Bound<'py, PyList>, Vec<i64>, bool)> {
    let read = crate::TokenDecoder::read_tokenizer(config.to_str()?.as_bytes());
    let crate::TokenizerJson { decoder, special } = read.map_err(|e| map_error(py, &e))?;
    // An id past the vocabulary's size grows it, as the id says; sizes no allocation can
    // hold are `MemoryError`, as a Python list's.
    let too_large = || PyMemoryError::new_err("vocabulary too large for memory");
    let mut tokens: Vec<Option<Bound<'py, PyBytes>>> = Vec::new();
    let grow = |tokens: &mut Vec<_>, len: usize| {
        tokens.try_reserve_exact(len.saturating_sub(tokens.len())).map_err(|_| too_large())?;
        tokens.resize(len, None);
        Ok::<_, PyErr>(())
    };
    grow(&mut tokens, size)?;
    let mut bytes = Vec::new();
    for (token, id) in vocab {
        let id: usize = id.extract()?;
        bytes.clear();
        decoder.decode(&str_bytes(token.cast::<PyString>()?)?, &mut bytes);
        if id >= tokens.len() {
            grow(&mut tokens, id.checked_add(1).ok_or_else(too_large)?)?;
        }
        tokens[id] = Some(PyBytes::new(py, &bytes));
    }
    Ok((PyList::new(py, tokens)?, special, decoder.strips_leading_space()))
}

/// What one `feed` released: `text` to emit and how many input `tokens` it covers.
#[pyclass(frozen, module = "stopstream._core")]
pub(crate) struct TokenPiece {
    pub(super) text: Py<PyString>,
    #[pyo3(get)]
    pub(super) tokens: usize,
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

pub(super) fn piece(text: Bound<'_, PyString>, tokens: usize) -> PyResult<Py<TokenPiece>> {
    Py::new(text.py(), TokenPiece { text: text.unbind(), tokens })
}
