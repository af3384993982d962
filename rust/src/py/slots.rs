//! The raw-FFI island of the bindings: the slots PyO3 cannot declare. The async driver's
//! awaitable, `AsyncPullStep`, gets `am_send` (and `am_await` without a method call); it and
//! the sync driver, `SyncDriver` (with `StopStream`, its subclass), get a finalizer and the
//! `tp_dealloc` that runs it; the slots write into, or are called through, a type object PyO3
//! made. Also the spare awaitable's reuse test (its reference count and finalized mark), the
//! interpreter's finalizing flag, and the attribute lookup that raises no `AttributeError` for a
//! missing attribute.
//!
//! Checked against CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0 (`.ci/pythons` builds and tests
//! each) with PyO3 0.30.1. The one layout assumption, that PyO3 makes `AsyncPullStep` a heap
//! type whose async slots are its own heap type object's, is checked by [`install`] when the
//! module is imported: if a PyO3 or CPython upgrade breaks it, importing `stopstream._core`
//! raises `ImportError` naming it (so every test fails at once) rather than writing into
//! memory that is not the type's.

use std::sync::OnceLock;

use pyo3::exceptions::{PyImportError, PyRuntimeError};
use pyo3::ffi;
use pyo3::prelude::*;

use super::astep::AsyncPullStep;
use super::awaits::Sent;
use super::stream::{StopStream, SyncDriver};
use crate::pull::Input;

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

/// A native type with a finalizer: what it does when the collector (or its dealloc) finalizes
/// it, and where its PyO3 `tp_dealloc` is kept.
trait Finalize: pyo3::PyClass {
    /// Its cell in [`PYO3_DEALLOC`].
    const SLOT: usize;
    fn finalize(slf: &Bound<'_, Self>);
}

/// PyO3's `tp_dealloc` of each type with a finalizer, which [`dealloc`] calls after it.
static PYO3_DEALLOC: [OnceLock<ffi::destructor>; 3] = [const { OnceLock::new() }; 3];

impl Finalize for AsyncPullStep {
    const SLOT: usize = 0;
    fn finalize(slf: &Bound<'_, Self>) {
        AsyncPullStep::finalize(slf);
    }
}

impl Finalize for SyncDriver {
    const SLOT: usize = 1;
    fn finalize(slf: &Bound<'_, Self>) {
        slf.get().finalize(slf.py());
    }
}

impl Finalize for StopStream {
    const SLOT: usize = 2;
    fn finalize(slf: &Bound<'_, Self>) {
        slf.as_super().get().finalize(slf.py());
    }
}

/// The `tp_finalize` slot (set by `install`). A finalizer, not `Drop`: the collector runs it
/// on cyclic garbage before `tp_clear` empties the object, so a pull suspended in a cycle (an
/// awaitable that refers back to its waiter) still ends, and a sync stream in a cycle still
/// closes its upstream, as a coroutine's or generator's finalizer runs its `finally`. The
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
fn install_finalizer<T: Finalize>(py: Python<'_>) -> PyResult<()> {
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
unsafe fn set_finalizer<T: Finalize>(raw: *mut ffi::PyTypeObject) {
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

/// The `am_send` slot of `AsyncPullStep`, which `await` (CPython's `SEND`, through
/// `PyIter_Send`) calls instead of `__next__`: the piece comes back as a return value, as a
/// coroutine's does, with no `StopIteration` made and normalized per item (measured on CPython
/// 3.11; 3.10 reads the slot only with `Py_TPFLAGS_HAVE_AM_SEND`, which `install` sets, and
/// 3.12+ may step an object that is not a generator through `__next__`/`send`). PyO3 has no
/// way to declare the slot; `install` sets it once the type exists.
#[allow(unsafe_code)]
unsafe extern "C" fn am_send(
    slf: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: CPython calls the slot on an attached thread, with live `slf` (an
        // `AsyncPullStep`: the slot is set on that type only) and `value`, if not NULL.
        #[allow(unsafe_code)]
        let (py, slf, value) = unsafe {
            let py = Python::assume_attached();
            let slf = Bound::from_borrowed_ptr(py, slf).cast_into_unchecked::<AsyncPullStep>();
            // A C caller may send NULL: `None`, as a generator's `am_send` takes it.
            let value = Bound::from_borrowed_ptr_or_opt(py, value)
                .unwrap_or_else(|| py.None().into_bound(py));
            (py, slf, value)
        };
        (
            py,
            AsyncPullStep::resume(&slf, Input::Send(value)).map(|sent| match sent {
                Sent::Yield(v) => (v.into_ptr(), ffi::PySendResult::PYGEN_NEXT),
                Sent::Return(v) => (v.into_ptr(), ffi::PySendResult::PYGEN_RETURN),
            }),
        )
    }));
    // SAFETY: `result` is the out-pointer CPython passes; the thread is attached.
    #[allow(unsafe_code)]
    unsafe {
        match outcome {
            Ok((_, Ok((object, status)))) => {
                *result = object;
                status
            }
            Ok((py, Err(err))) => {
                err.restore(py);
                *result = std::ptr::null_mut();
                ffi::PySendResult::PYGEN_ERROR
            }
            Err(_) => {
                let py = Python::assume_attached();
                PyRuntimeError::new_err("internal error in AsyncPullStep").restore(py);
                *result = std::ptr::null_mut();
                ffi::PySendResult::PYGEN_ERROR
            }
        }
    }
}

/// The `am_await` slot of `AsyncPullStep`: the object itself, without a PyO3 method call.
#[allow(unsafe_code)]
unsafe extern "C" fn am_await(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: CPython passes a live object on an attached thread; the slot returns a new
    // reference.
    unsafe { ffi::Py_IncRef(slf) };
    slf
}

/// Sets `AsyncPullStep`'s `am_send` and `am_await` slots (see `am_send`), and the finalizers
/// of it and of the sync driver (see `finalize`).
pub(super) fn install(py: Python<'_>) -> PyResult<()> {
    let ty = py.get_type::<AsyncPullStep>();
    // SAFETY: the type is a heap type made by PyO3 with an `am_await` slot, so `tp_as_async`
    // points into its own heap type object, which CPython itself rewrites when a slot method
    // changes; nothing has run the slot yet (the type was just made, and cannot be subclassed).
    #[allow(unsafe_code)]
    unsafe {
        let raw = ty.as_type_ptr();
        let methods = (*raw).tp_as_async;
        let heap = raw.cast::<ffi::PyHeapTypeObject>();
        let own_slots = (*raw).tp_flags & ffi::Py_TPFLAGS_HEAPTYPE != 0
            && std::ptr::eq(methods, &raw const (*heap).as_async)
            && (*raw).tp_dealloc.is_some();
        if !own_slots {
            return Err(PyImportError::new_err(
                "stopstream._core: AsyncPullStep is not the heap type with its own async slots \
                 that this build expects (checked with PyO3 0.30.1 on CPython 3.10 to 3.13)",
            ));
        }
        (*methods).am_send = Some(am_send);
        (*methods).am_await = Some(am_await);
        set_finalizer::<AsyncPullStep>(raw);
        // CPython 3.10's `PyIter_Send` reads `am_send` only with this flag (gone in 3.11).
        #[cfg(not(Py_3_11))]
        {
            const PY_TPFLAGS_HAVE_AM_SEND: std::ffi::c_ulong = 1 << 21;
            (*raw).tp_flags |= PY_TPFLAGS_HAVE_AM_SEND;
        }
        ffi::PyType_Modified(raw);
    }
    // The sync driver and `StopStream`, before any subclass of them is made (which inherits
    // the finalizer).
    install_finalizer::<SyncDriver>(py)?;
    install_finalizer::<StopStream>(py)?;
    Ok(())
}
