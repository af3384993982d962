//! The raw CPython plumbing the bindings share, below every class and naming none of their
//! modules: the finalizer and the `tp_dealloc` that runs it, written into a type object PyO3 made
//! (the sync driver's, `StopStream`'s and the async driver's awaitable's; the awaitable's async
//! slots are `aio/slots.rs`'s), the upstream iterator's next item without a reference count round
//! trip, `inspect.isawaitable`'s test, the attribute lookup that raises no `AttributeError` for a
//! missing attribute, the spare awaitable's reuse test (its reference count and finalized mark)
//! and the interpreter's finalizing flag.
//!
//! Checked against CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0 (`.ci/pythons` builds and tests
//! each) with PyO3 0.30.1. A type gets its finalizer only once it is checked to be the heap type
//! with a dealloc that PyO3 makes ([`install_finalizer`], and `aio/slots.rs` for the awaitable):
//! if a PyO3 or CPython upgrade breaks that, importing `stopstream._core` raises `ImportError`
//! naming it (so every test fails at once) rather than writing into memory that is not the
//! type's.

use std::sync::OnceLock;

use pyo3::exceptions::{PyImportError, PyRuntimeError};
use pyo3::ffi;
use pyo3::prelude::*;

/// Whether the interpreter is finalizing (`Py_IsFinalizing`, public from 3.13 and exported as
/// `_Py_IsFinalizing` before).
pub(super) fn finalizing() -> bool {
    #[cfg(not(Py_3_13))]
    #[allow(unsafe_code)]
    extern "C" {
        #[link_name = "_Py_IsFinalizing"]
        fn Py_IsFinalizing() -> std::ffi::c_int;
    }
    #[cfg(Py_3_13)]
    use ffi::Py_IsFinalizing;
    // SAFETY: a read of the runtime's state, callable from any thread.
    #[allow(unsafe_code)]
    let finalizing = unsafe { Py_IsFinalizing() };
    finalizing != 0
}

/// `object.name`, or `None` where it has no such attribute, without raising and catching an
/// `AttributeError` when it has none (`PyObject_GetOptionalAttr`, public from 3.13 and exported
/// as `_PyObject_LookupAttr` before). Closing a stream looks up `close` on upstreams that have
/// none (a tuple's iterator), where the exception cost about 8,700 instructions (callgrind).
pub(super) fn optional_attr<'py>(
    object: &Bound<'py, PyAny>,
    name: &Bound<'py, pyo3::types::PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
    {
        #[cfg(not(Py_3_13))]
        #[allow(unsafe_code)]
        extern "C" {
            #[link_name = "_PyObject_LookupAttr"]
            fn PyObject_GetOptionalAttr(
                object: *mut ffi::PyObject,
                name: *mut ffi::PyObject,
                result: *mut *mut ffi::PyObject,
            ) -> std::ffi::c_int;
        }
        #[cfg(Py_3_13)]
        use ffi::PyObject_GetOptionalAttr;
        let mut result = std::ptr::null_mut();
        // SAFETY: both are live objects and the thread is attached; `result` is a new
        // reference when the return is 1, null otherwise, with an exception set on -1.
        #[allow(unsafe_code)]
        unsafe {
            match PyObject_GetOptionalAttr(object.as_ptr(), name.as_ptr(), &raw mut result) {
                0 => Ok(None),
                1 => Ok(Some(Bound::from_owned_ptr(object.py(), result))),
                _ => Err(PyErr::fetch(object.py())),
            }
        }
    }
    #[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
    {
        object.getattr_opt(name)
    }
}

/// Whether the caller holds the one reference to `object` and it was never finalized: the test
/// for handing the async driver's spare awaitable out again (`AsyncPullStep::restart`). Only
/// under the GIL, where no other thread can take a reference meanwhile; the free-threaded
/// build never reuses the spare.
pub(super) fn sole_unfinalized(object: &Bound<'_, PyAny>) -> bool {
    #[cfg(not(Py_GIL_DISABLED))]
    {
        // SAFETY: the reference count and the finalized mark of a live object, read on an
        // attached thread.
        #[allow(unsafe_code)]
        unsafe {
            ffi::Py_REFCNT(object.as_ptr()) == 1
                && ffi::PyObject_GC_IsFinalized(object.as_ptr()) == 0
        }
    }
    #[cfg(Py_GIL_DISABLED)]
    {
        let _ = object;
        false
    }
}

/// The next item of the upstream (an iterator), without the reference count round trip of
/// `Bound::next`.
#[allow(clippy::inline_always, reason = "a call per chunk on the fast path otherwise")]
#[inline(always)]
pub(super) fn pull<'py>(
    py: Python<'py>,
    upstream: &Py<PyAny>,
) -> Option<PyResult<Bound<'py, PyAny>>> {
    // SAFETY: `upstream` is an iterator (checked when the stream was made) and the thread is
    // attached; `PyIter_Next` returns a new reference or NULL, with an exception set on error.
    #[allow(unsafe_code)]
    unsafe {
        let it = upstream.as_ptr();
        #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
        let raw = match (*pyo3::ffi::Py_TYPE(it)).tp_iternext {
            // The slot itself: an exhausted iterator may return NULL without setting
            // StopIteration, which `PyErr::take` below then finds as no error.
            Some(next) => next(it),
            None => pyo3::ffi::PyIter_Next(it),
        };
        #[cfg(any(Py_LIMITED_API, PyPy, GraalPy))]
        let raw = pyo3::ffi::PyIter_Next(it);
        if raw.is_null() {
            return match PyErr::take(py) {
                Some(err) if err.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => None,
                other => other.map(Err),
            };
        }
        Some(Ok(Bound::from_owned_ptr(py, raw)))
    }
}

/// The flag `types.coroutine` sets on a generator's code (`inspect.CO_ITERABLE_COROUTINE`).
pub(super) const CO_ITERABLE_COROUTINE: i64 = 0x100;

/// Whether `object` is a coroutine: its exact type (`PyCoro_CheckExact` in PyO3 also walks the
/// MRO of every other type, an async generator's `asend` object per item).
///
/// # Safety
///
/// `object` is a live object.
#[allow(unsafe_code)]
pub(super) unsafe fn is_coroutine(object: *mut ffi::PyObject) -> bool {
    // SAFETY: the caller passes a live object; the type object is a static of CPython's.
    unsafe { std::ptr::eq(ffi::Py_TYPE(object), &raw const ffi::PyCoro_Type) }
}

/// Whether `object` can be awaited (`inspect.isawaitable`): a coroutine, an object whose type
/// has `__await__`, or a generator made a coroutine by `types.coroutine`.
pub(super) fn is_awaitable(object: &Bound<'_, PyAny>) -> PyResult<bool> {
    // SAFETY: type and slot checks of a live object (not the limited API).
    #[allow(unsafe_code)]
    let (coroutine, awaits, generator) = unsafe {
        let p = object.as_ptr();
        let methods = (*ffi::Py_TYPE(p)).tp_as_async;
        (
            is_coroutine(p),
            methods.as_ref().is_some_and(|m| m.am_await.is_some()),
            ffi::PyGen_Check(p) != 0,
        )
    };
    if coroutine || awaits {
        return Ok(true);
    }
    if generator {
        let flags: i64 = object.getattr("gi_code")?.getattr("co_flags")?.extract()?;
        return Ok(flags & CO_ITERABLE_COROUTINE != 0);
    }
    Ok(false)
}

/// A native type with a finalizer: what it does when the collector (or its dealloc) finalizes
/// it, and where its PyO3 `tp_dealloc` is kept.
pub(super) trait Finalize: pyo3::PyClass {
    /// Its cell in [`PYO3_DEALLOC`].
    const SLOT: usize;
    fn finalize(slf: &Bound<'_, Self>);
}

/// PyO3's `tp_dealloc` of each type with a finalizer, which [`dealloc`] calls after it: the
/// cells of `AsyncPullStep` (0), `SyncDriver` (1) and `StopStream` (2).
static PYO3_DEALLOC: [OnceLock<ffi::destructor>; 3] = [const { OnceLock::new() }; 3];

/// The `tp_finalize` slot (set by [`set_finalizer`]). A finalizer, not `Drop`: the collector
/// runs it on cyclic garbage before `tp_clear` empties the object, so a pull suspended in a
/// cycle (an awaitable that refers back to its waiter) still ends, and a sync stream in a cycle
/// still closes its upstream, as a coroutine's or generator's finalizer runs its `finally`. The
/// type's `tp_dealloc` runs it first too (`dealloc`), so closing never runs inside PyO3's
/// dealloc. Subclasses made in Python inherit it.
#[allow(unsafe_code)]
unsafe extern "C" fn finalize<T: Finalize>(slf: *mut ffi::PyObject) {
    // SAFETY: CPython calls the slot on an attached thread with a live `T` or an instance of a
    // subclass of it (the slot is set on `T`). The exception being raised, if any, is kept
    // aside and put back, as a finalizer must.
    unsafe {
        let (mut typ, mut value, mut tb) =
            (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        #[allow(deprecated)]
        ffi::PyErr_Fetch(&raw mut typ, &raw mut value, &raw mut tb);
        let py = Python::assume_attached();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let slf = Bound::from_borrowed_ptr(py, slf).cast_into_unchecked::<T>();
            T::finalize(&slf);
        }));
        if panicked.is_err() {
            let message = format!("internal error in {}", T::NAME);
            PyRuntimeError::new_err(message).write_unraisable(py, None);
        }
        #[allow(deprecated)]
        ffi::PyErr_Restore(typ, value, tb);
    }
}

/// The `tp_dealloc` slot: the finalizer (once, as CPython's own types do), then PyO3's dealloc.
#[allow(unsafe_code)]
unsafe extern "C" fn dealloc<T: Finalize>(slf: *mut ffi::PyObject) {
    // SAFETY: CPython calls the slot with an object whose count fell to zero, on an attached
    // thread. `PyObject_CallFinalizerFromDealloc` runs `tp_finalize` unless it ran already and
    // reports a resurrection with -1, in which case the object lives on.
    unsafe {
        if ffi::PyObject_CallFinalizerFromDealloc(slf) < 0 {
            return;
        }
        if let Some(pyo3_dealloc) = PYO3_DEALLOC[T::SLOT].get() {
            pyo3_dealloc(slf);
        }
    }
}

/// Sets `T`'s finalizer and the dealloc that runs it, once its type is checked to be the heap
/// type with a dealloc that PyO3 makes.
pub(super) fn install_finalizer<T: Finalize>(py: Python<'_>) -> PyResult<()> {
    let raw = py.get_type::<T>().as_type_ptr();
    // SAFETY: reads of the flags and slots of a live type object.
    #[allow(unsafe_code)]
    let heap =
        unsafe { (*raw).tp_flags & ffi::Py_TPFLAGS_HEAPTYPE != 0 && (*raw).tp_dealloc.is_some() };
    if !heap {
        return Err(PyImportError::new_err(format!(
            "stopstream._core: {} is not the heap type with a dealloc that this build expects \
             (checked with PyO3 0.30.1 on CPython 3.10 to 3.13)",
            T::NAME
        )));
    }
    // SAFETY: `raw` is the heap type just checked, made by PyO3 for the class.
    #[allow(unsafe_code)]
    unsafe {
        set_finalizer::<T>(raw);
        ffi::PyType_Modified(raw);
    }
    Ok(())
}

/// Sets `T`'s finalizer and the dealloc that runs it, on `raw`, its type object.
///
/// # Safety
///
/// `raw` is `T`'s heap type object, just made, with a `tp_dealloc`.
#[allow(unsafe_code)]
pub(super) unsafe fn set_finalizer<T: Finalize>(raw: *mut ffi::PyTypeObject) {
    // SAFETY: the caller's promise; the slots are plain fields of the type object.
    unsafe {
        if let Some(pyo3_dealloc) = (*raw).tp_dealloc {
            if PYO3_DEALLOC[T::SLOT].set(pyo3_dealloc).is_ok() {
                (*raw).tp_dealloc = Some(dealloc::<T>);
            }
        }
        (*raw).tp_finalize = Some(finalize::<T>);
    }
}
