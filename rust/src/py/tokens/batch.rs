//! `feed_batch`: many streams in one call. Reading the batch in and taking every filter's lock
//! are here, with the engine's usual step; the all-or-nothing transaction is the core's
//! [`crate::host::feed_batch`].

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::super::errors::wrong_type;
use super::super::lock::try_lock;
use super::filter::TokenStopFilter;
use super::vocab::{new_piece, TokenPiece, Vocab};
use super::{entry_error, one_id, plain_ints, token_error, Ids};
use crate::host::{AnyTokenStream, BatchEntry};
use crate::lock::Guard;
use crate::{Error, Fed};

/// Takes every filter's lock, or none ([`crate::lock::lock_all`]): a filter in use elsewhere
/// is `RuntimeError` under the GIL (its holder cannot be waited for: it may be this very
/// thread), and in a free-threaded build the batch lets go of everything and retries, so two
/// batches over the same filters cannot deadlock.
pub(super) fn lock_all<'a>(
    py: Python<'_>,
    filters: &[&'a TokenStopFilter],
    entries: &mut [BatchEntry<'_>],
) -> PyResult<Vec<Guard<'a, AnyTokenStream>>> {
    let locks: Vec<_> = filters.iter().map(|f| &f.state).collect();
    let mut slots = vec![0; locks.len()];
    loop {
        // SAFETY: the thread is attached (`py`), and the guards are dropped while it is.
        #[allow(unsafe_code)]
        match unsafe { crate::lock::lock_all(&locks, &mut slots) } {
            Ok(guards) => {
                for (entry, slot) in entries.iter_mut().zip(slots) {
                    entry.slot = slot;
                }
                return Ok(guards);
            }
            Err(i) if cfg!(not(Py_GIL_DISABLED)) => {
                return Err(PyRuntimeError::new_err(format!(
                    "filters[{i}] is in use by another call"
                )));
            }
            Err(_) => py.detach(std::thread::yield_now),
        }
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
pub(crate) fn feed_batch<'py>(
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
            .map_err(|_| wrong_type(format_args!("{what} must be a sequence"), obj))?
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
                wrong_type(format_args!("filters[{i}] must be a TokenStopFilter"), &e.into_inner())
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let Batch { filters, mut entries, flat, huge, guards, safe } = Batch::read(py, &bound, &lists)?;
    let mut guards = match guards {
        Some(g) => g,
        None => lock_all(py, &filters, &mut entries)?,
    };
    // Always detached, as the contract says (§7): other threads run meanwhile. For a batch of
    // one stream that costs about 80 ns of CPU time (0.44 against 0.37 µs); from 256 streams
    // on it is under 1% of the step.
    let outcome = {
        let entries = &mut entries;
        let flat = &flat;
        let guards = &mut guards;
        py.detach(move || crate::host::feed_batch(entries, flat, guards, safe))
    };
    drop(guards);
    let out = match outcome {
        Ok(out) => out,
        Err((i, e)) => {
            let start = entries[i].ids.start;
            let size = filters[i].size();
            let shown = |p: usize| {
                huge.iter()
                    .find(|(b, q, _)| *b == i && *q == p)
                    .map_or_else(|| flat[start + p].to_string(), |(_, _, s)| s.clone())
            };
            return Err(entry_error(py, i, token_error(py, &e, shown, size)));
        }
    };
    let pieces = entries
        .iter()
        .zip(&filters)
        .map(|(it, f)| match flat[it.ids.clone()] {
            [id] => f.vocab.get().piece_of(py, id, &out[it.out.clone()], it.fed),
            _ => new_piece(py, &out[it.out.clone()], it.fed.released),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, pieces)
}

/// One stream of [`engine_step`].
#[cfg(not(Py_GIL_DISABLED))]
pub(super) struct Step<'a> {
    state: Guard<'a, AnyTokenStream>,
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
/// core's steps), one building the result list in place: 273 instructions per stream in a
/// 256-stream step on `benches/tokens.py`'s corpus, where the general path (vectors of owned
/// items, a cast per filter, a `Vec` of pieces copied into the list) takes 476 (callgrind).
#[cfg(not(Py_GIL_DISABLED))]
#[allow(unsafe_code)]
#[allow(clippy::cast_possible_wrap, reason = "indices below a list's length fit `Py_ssize_t`")]
pub(super) fn engine_step<'py>(
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
            debug_assert!(!s.state.is_composed());
            s.fed = s
                .state
                .literal
                .feed_id(&s.vocab.inner, s.filter.stops.set(), s.id, &mut out)
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
pub(super) struct Batch<'a> {
    filters: Vec<&'a TokenStopFilter>,
    entries: Vec<BatchEntry<'a>>,
    /// Every stream's ids, one after the other.
    flat: Vec<i64>,
    /// Ints too large for `i64`, as `(stream, position, as written)`, for messages.
    huge: Vec<(usize, usize, String)>,
    /// The filters' locks, when they could be taken while reading.
    guards: Option<Vec<Guard<'a, AnyTokenStream>>>,
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
        let mut entries = Vec::with_capacity(lists.len());
        let mut fs = Vec::with_capacity(lists.len());
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
            let mut item = BatchEntry {
                vocab: &vocab.inner,
                set: filter.stops.set(),
                slot: 0,
                ids: start..ids.ids.len(),
                out: 0..0,
                fed: Fed { released: 0, whole: false },
            };
            if locking {
                if let Some(g) = try_lock(py, &filter.state) {
                    safe &= g.cannot_fail(&vocab.inner, &ids.ids[start..]);
                    item.slot = guards.len();
                    guards.push(g);
                } else {
                    locking = false;
                    guards.clear();
                }
            }
            entries.push(item);
            fs.push(filter);
        }
        Ok(Batch {
            filters: fs,
            entries,
            flat: ids.ids,
            huge,
            safe: safe && locking,
            guards: locking.then_some(guards),
        })
    }
}
