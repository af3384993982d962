//! Driving awaitables from native code by CPython's rules for `await`: what `await x` calls on
//! `x` (`__await__`, a coroutine's own iterator, a `types.coroutine` generator), one `send` or
//! `throw` into the iterator it drives, and a step's result handed back through the iterator
//! protocol. The async driver's awaitable (`astep.rs`) is built from these.

use pyo3::exceptions::{PyBaseException, PyGeneratorExit, PyStopIteration, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::super::errors::type_name;
use super::super::ffi::{is_coroutine, CO_ITERABLE_COROUTINE};

/// What a driven awaitable did, over the bindings' objects.
pub(super) type Sent<'py> = crate::host::aio::Sent<Bound<'py, PyAny>>;

/// One `send` into an awaitable's iterator: `PyIter_Send`, which runs a coroutine through its
/// `am_send` slot (no `StopIteration` is created for its return value) and anything else
/// through `__next__` or `send`.
#[inline]
pub(super) fn send<'py>(it: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> PyResult<Sent<'py>> {
    let py = it.py();
    let mut result = std::ptr::null_mut();
    // SAFETY: both pointers are live objects held by the bounds for the call; `PyIter_Send`
    // stores a new reference in `result` unless it reports an error, which it leaves set.
    #[allow(unsafe_code)]
    unsafe {
        match ffi::PyIter_Send(it.as_ptr(), value.as_ptr(), &raw mut result) {
            ffi::PySendResult::PYGEN_NEXT => Ok(Sent::Yield(Bound::from_owned_ptr(py, result))),
            ffi::PySendResult::PYGEN_RETURN => Ok(Sent::Return(Bound::from_owned_ptr(py, result))),
            ffi::PySendResult::PYGEN_ERROR => Err(PyErr::fetch(py)),
        }
    }
}

/// `err` with its exception made by CPython: raised and fetched back. PyO3 makes a lazy error's
/// exception (for `is_instance_of`, which then matches with `PyErr_GivenExceptionMatches`)
/// through `Python::attach`, which panics once the interpreter is finalizing; a fetched error
/// is made already.
pub(super) fn made(py: Python<'_>, err: PyErr) -> PyErr {
    err.restore(py);
    PyErr::fetch(py)
}

/// An exception thrown into an awaitable's iterator, as a coroutine awaiting it does: a
/// `GeneratorExit` closes it and is raised where it waits; anything else goes to its `throw`
/// (raised where it waits when it has none).
pub(super) fn throw_into<'py>(it: &Bound<'py, PyAny>, err: PyErr) -> PyResult<Sent<'py>> {
    let py = it.py();
    let err = made(py, err);
    if err.is_instance_of::<PyGeneratorExit>(py) {
        if let Some(close) = it.getattr_opt(pyo3::intern!(py, "close"))? {
            close.call0()?;
        }
        return Err(err);
    }
    let Some(throw) = it.getattr_opt(pyo3::intern!(py, "throw"))? else {
        return Err(err);
    };
    match throw.call1((err.into_value(py),)) {
        Ok(value) => Ok(Sent::Yield(value)),
        Err(e) if e.is_instance_of::<PyStopIteration>(py) => {
            Ok(Sent::Return(e.value(py).getattr(pyo3::intern!(py, "value"))?))
        }
        Err(e) => Err(e),
    }
}

/// `iterator.__anext__()` as `async for` calls it: through the type's slot (an async
/// generator's is native, so no method lookup), else the attribute.
#[inline]
pub(super) fn anext<'py>(iterator: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = iterator.py();
    // SAFETY: reads the slot table of the type of a live object (not the limited API); the
    // slot, called with that object, returns a new reference or NULL with an error set.
    #[allow(unsafe_code)]
    unsafe {
        let methods = (*ffi::Py_TYPE(iterator.as_ptr())).tp_as_async;
        if let Some(slot) = methods.as_ref().and_then(|m| m.am_anext) {
            return Bound::from_owned_ptr_or_err(py, slot(iterator.as_ptr()));
        }
    }
    iterator.call_method0(pyo3::intern!(py, "__anext__"))
}

/// The iterator `await` drives for `awaitable` (CPython's rule): a coroutine itself, else what
/// its `__await__()` returns (through the type's slot: an async generator's `asend` object
/// returns itself, with no bound method made per item), else a generator made a coroutine by
/// `types.coroutine`.
#[allow(
    clippy::inline_always,
    reason = "once per item of `awrap`: a call of 42 instructions otherwise (callgrind)"
)]
#[inline(always)]
pub(super) fn await_iter(awaitable: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    let py = awaitable.py();
    // SAFETY: type checks and a slot read of a live object (not the limited API); the slot,
    // called with that object, returns a new reference or NULL with an error set.
    #[allow(unsafe_code)]
    let it = unsafe {
        if is_coroutine(awaitable.as_ptr()) {
            return Ok(awaitable);
        }
        let methods = (*ffi::Py_TYPE(awaitable.as_ptr())).tp_as_async;
        match methods.as_ref().and_then(|m| m.am_await) {
            Some(slot) => Some(Bound::from_owned_ptr_or_err(py, slot(awaitable.as_ptr()))?),
            None => None,
        }
    };
    if let Some(it) = it {
        // SAFETY: type and slot checks of a live object.
        #[allow(unsafe_code)]
        let (iterator, coroutine) =
            unsafe { (ffi::PyIter_Check(it.as_ptr()) != 0, is_coroutine(it.as_ptr())) };
        if coroutine {
            return Err(PyTypeError::new_err("__await__() returned a coroutine"));
        }
        if !iterator {
            return Err(PyTypeError::new_err(format!(
                "__await__() returned non-iterator of type '{}'",
                type_name(&it)
            )));
        }
        return Ok(it);
    }
    // SAFETY: a type check of a live object.
    #[allow(unsafe_code)]
    let generator = unsafe { ffi::PyGen_Check(awaitable.as_ptr()) } != 0;
    if generator {
        let flags: i64 = awaitable.getattr("gi_code")?.getattr("co_flags")?.extract()?;
        if flags & CO_ITERABLE_COROUTINE != 0 {
            return Ok(awaitable);
        }
    }
    Err(PyTypeError::new_err(format!(
        "object {} can't be used in 'await' expression",
        type_name(&awaitable)
    )))
}

/// A step's outcome through the iterator protocol (`__next__`, `send`, `throw`): the value
/// yielded, or the piece returned as the `StopIteration` that ends the awaitable. (`await`
/// takes the `am_send` slot instead, which returns the piece without an exception.) A tuple or
/// an exception given as the exception's argument would be taken apart, so it is wrapped.
pub(super) fn yielded(sent: Sent<'_>) -> PyResult<Bound<'_, PyAny>> {
    let value = match sent {
        Sent::Yield(value) => return Ok(value),
        Sent::Return(value) => value,
    };
    if value.is_instance_of::<PyTuple>() || value.is_instance_of::<PyBaseException>() {
        return Err(PyStopIteration::new_err((value.unbind(),)));
    }
    Err(PyStopIteration::new_err(value.unbind()))
}

/// The exception `throw(typ, val, tb)` raises, by the rules of a generator's `throw`.
pub(super) fn thrown<'py>(
    typ: &Bound<'py, PyAny>,
    val: Option<&Bound<'py, PyAny>>,
    tb: Option<&Bound<'py, PyAny>>,
) -> PyResult<PyErr> {
    let val = val.filter(|val| !val.is_none());
    let exc = if typ.is_instance_of::<PyBaseException>() {
        if val.is_some() {
            return Err(PyTypeError::new_err("instance exception may not have a separate value"));
        }
        typ.clone()
    } else {
        match val {
            Some(val) if val.is_instance(typ)? => val.clone(),
            Some(val) => typ.call1((val,))?,
            None => typ.call0()?,
        }
    };
    if !exc.is_instance_of::<PyBaseException>() {
        return Err(PyTypeError::new_err("exceptions must derive from BaseException"));
    }
    if let Some(tb) = tb.filter(|tb| !tb.is_none()) {
        exc.call_method1(pyo3::intern!(typ.py(), "with_traceback"), (tb,))?;
    }
    Ok(PyErr::from_value(exc))
}
