//! The per-object lock of the classes (the core's [`crate::lock::TryLock`]), taken on an
//! attached thread.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::lock::{Guard, TryLock};

/// The per-object lock, if free.
#[inline]
pub(super) fn try_lock<'a, T>(_py: Python<'_>, m: &'a TryLock<T>) -> Option<Guard<'a, T>> {
    // SAFETY: the token proves this thread is attached (holds the GIL in a GIL build), and a
    // guard carried across `Python::detach` (only `feed_batch` does) is dropped after the
    // thread re-attaches.
    #[allow(unsafe_code)]
    unsafe {
        m.try_acquire()
    }
}

/// The per-object lock of a filter. Filters hold it only around their pure-Rust work (Python
/// objects are built before taking it and after releasing it), so under the GIL it is always
/// free, except for a call that re-enters the filter while it is held, which can only come from
/// a bug: that raises `RuntimeError` rather than deadlock. In a free-threaded build a concurrent
/// call on the same filter yields its thread, detached from the interpreter, until the holder
/// is done: calls are serialized.
pub(super) fn lock<'a, T>(py: Python<'_>, m: &'a TryLock<T>) -> PyResult<Guard<'a, T>> {
    loop {
        if let Some(g) = try_lock(py, m) {
            return Ok(g);
        }
        if cfg!(not(Py_GIL_DISABLED)) {
            return Err(PyRuntimeError::new_err("filter called re-entrantly while in use"));
        }
        py.detach(std::thread::yield_now);
    }
}
