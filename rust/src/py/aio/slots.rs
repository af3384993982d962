//! The slots PyO3 cannot declare of the async driver's awaitable, `AsyncPullStep`: `am_send`
//! (and `am_await` without a method call), and the finalizer of `ffi.rs`, written into the type
//! object PyO3 made.
//!
//! Checked against CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0 (`.ci/pythons` builds and tests
//! each) with PyO3 0.30.1. The one layout assumption, that PyO3 makes `AsyncPullStep` a heap
//! type whose async slots are its own heap type object's, is checked by [`install`] when the
//! module is imported: if a PyO3 or CPython upgrade breaks it, importing `stopstream._core`
//! raises `ImportError` naming it (so every test fails at once) rather than writing into
//! memory that is not the type's.

use pyo3::exceptions::{PyImportError, PyRuntimeError};
use pyo3::ffi;
use pyo3::prelude::*;

use super::super::ffi::{set_finalizer, Finalize};
use super::astep::AsyncPullStep;
use super::awaits::Sent;
use crate::host::aio::Input;

impl Finalize for AsyncPullStep {
    const SLOT: usize = 0;
    fn finalize(slf: &Bound<'_, Self>) {
        AsyncPullStep::finalize(slf);
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

/// Sets `AsyncPullStep`'s `am_send` and `am_await` slots (see `am_send`), and its finalizer
/// (see `ffi.rs`).
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
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
    Ok(())
}
