//! `AsyncPullStep`: the awaitable that `AsyncDriver.__anext__` (one pull) and `aclose()`
//! return, with a coroutine's protocol. Its states and rules are the core's [`aio`]; here are
//! the Python operations it asks for ([`PullHost`]) and the awaitable's Python face.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use pyo3::exceptions::{
    PyException, PyGeneratorExit, PyRuntimeError, PyStopAsyncIteration, PyStopIteration,
    PyTypeError, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use super::super::ffi::{finalizing, sole_unfinalized};
use super::super::lock::try_lock;
use super::awaits::{anext, await_iter, made, send, throw_into, thrown, yielded, Sent};
use super::close::start_one;
use super::{is_cancellation, report, start_close, AsyncDriver, DriverState};
use crate::host::aio::{self, CloseMode, Closer, Input, Misuse};
use crate::lock::{Guard, TryLock};

/// A pull's state, over the bindings' objects.
pub(super) type Step = aio::Step<Py<AsyncDriver>, Py<PyAny>, PyErr>;

/// The host of a pull of `AsyncDriver` (see [`aio::Host`]: its three faces): `step` is the awaitable, kept as
/// the driver's spare when it delivers.
struct PullHost<'a, 'py> {
    py: Python<'py>,
    step: &'a Bound<'py, AsyncPullStep>,
}

impl<'py> aio::Protocol for PullHost<'_, 'py> {
    type Obj = Bound<'py, PyAny>;
    type Err = PyErr;

    #[allow(
        clippy::inline_always,
        reason = "once or twice a pull: out of line, a call of about 40 instructions (callgrind)"
    )]
    #[inline(always)]
    fn send(
        &self,
        it: &Bound<'py, PyAny>,
        input: Input<Bound<'py, PyAny>, PyErr>,
    ) -> PyResult<Sent<'py>> {
        match input {
            Input::Send(value) => send(it, &value),
            Input::Throw(err) => throw_into(it, err),
        }
    }

    #[inline]
    fn none(&self) -> Bound<'py, PyAny> {
        self.py.None().into_bound(self.py)
    }

    #[inline]
    fn is_none(&self, value: &Bound<'py, PyAny>) -> bool {
        value.is_none()
    }

    fn made(&self, err: PyErr) -> PyErr {
        made(self.py, err)
    }

    fn is_exception(&self, err: &PyErr) -> bool {
        err.is_instance_of::<PyException>(self.py)
    }

    fn is_cancellation(&self, err: &PyErr) -> bool {
        is_cancellation(self.py, err)
    }

    fn ends_close(&self, err: &PyErr) -> bool {
        err.is_instance_of::<PyGeneratorExit>(self.py)
            || err.is_instance_of::<PyStopIteration>(self.py)
            || err.is_instance_of::<PyStopAsyncIteration>(self.py)
    }

    fn misuse(&self, misuse: Misuse) -> PyErr {
        match misuse {
            Misuse::Reused => PyRuntimeError::new_err("cannot reuse already awaited coroutine"),
            Misuse::StartValue => {
                PyTypeError::new_err("can't send non-None value to a just-started coroutine")
            }
            Misuse::Concurrent => PyRuntimeError::new_err(
                "stream is already being iterated (concurrent __anext__ or re-entrant call)",
            ),
            Misuse::IgnoredExit => PyRuntimeError::new_err("coroutine ignored GeneratorExit"),
        }
    }

    fn end_of_stream(&self) -> PyErr {
        PyStopAsyncIteration::new_err(())
    }

    fn close_awaitable(&self, it: &Bound<'py, PyAny>) -> PyResult<()> {
        if let Some(close) = it.getattr_opt(pyo3::intern!(self.py, "close"))? {
            close.call0()?;
        }
        Ok(())
    }

    fn start_close_of(&self, object: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        start_one(object)
    }

    fn report(&self, message: &'static str, err: PyErr) {
        report(self.py, message, err);
    }

    #[inline]
    fn anext(&self, iterator: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        anext(iterator).and_then(await_iter)
    }

    fn is_end(&self, err: &PyErr) -> bool {
        err.is_instance_of::<PyStopAsyncIteration>(self.py)
    }

    fn chain(&self, err: &PyErr, context: PyErr) {
        err.set_context(self.py, Some(context));
    }
}

impl<'py> aio::State for PullHost<'_, 'py> {
    type Driver = Bound<'py, AsyncDriver>;
    type Held = Py<PyAny>;
    type Spare = Py<AsyncPullStep>;
    type Locked<'a>
        = Guard<'a, DriverState>
    where
        Self: 'a;

    #[inline]
    fn claim(&self, driver: &Bound<'py, AsyncDriver>) -> bool {
        !driver.get().running.swap(true, Ordering::AcqRel)
    }

    #[inline]
    fn release(&self, driver: &Bound<'py, AsyncDriver>) {
        driver.get().running.store(false, Ordering::Release);
    }

    #[inline]
    fn close_requested(&self, driver: &Bound<'py, AsyncDriver>) -> bool {
        driver.get().close_requested()
    }

    fn start_close(
        &self,
        driver: &Bound<'py, AsyncDriver>,
        objects: VecDeque<Py<PyAny>>,
        after_stop: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        start_close(driver, objects, after_stop)
    }

    #[allow(clippy::inline_always, reason = "two or three times a pull: a call each otherwise")]
    #[inline(always)]
    fn state<'a>(
        &'a self,
        driver: &'a Bound<'py, AsyncDriver>,
    ) -> PyResult<Guard<'a, DriverState>> {
        driver.get().st(self.py)
    }

    /// Bound, so that dropping it releases it at once: this runs in the `am_send` slot too,
    /// where an owned reference dropped would wait in PyO3's pool (see [`AsyncPullStep::resume`]).
    #[inline]
    fn bind(&self, object: Py<PyAny>) -> Bound<'py, PyAny> {
        object.into_bound(self.py)
    }

    #[inline]
    fn copy(&self, object: &Py<PyAny>) -> Py<PyAny> {
        object.clone_ref(self.py)
    }

    #[inline]
    fn spare(&self) -> Py<AsyncPullStep> {
        self.step.clone().unbind()
    }
}

impl<'py> aio::Stage for PullHost<'_, 'py> {
    #[allow(
        clippy::inline_always,
        reason = "every item of a pull: out of line, a call of about 10 instructions more (callgrind)"
    )]
    #[inline(always)]
    fn push(
        &self,
        driver: &Bound<'py, AsyncDriver>,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<(Option<Py<PyAny>>, bool)> {
        driver.get().push(self.py, item, position)
    }

    fn owed(&self, driver: &Bound<'py, AsyncDriver>) -> PyResult<Option<PyErr>> {
        driver.get().owed(self.py)
    }

    fn stage_end(
        &self,
        driver: &Bound<'py, AsyncDriver>,
    ) -> PyResult<(Vec<Py<PyAny>>, Option<PyErr>)> {
        driver.get().stage_end(self.py)
    }
}

/// The awaitable returned by `AsyncDriver.__anext__` (one pull) and `aclose()`, with a
/// coroutine's protocol (`__await__`, `send`, `throw`, `close`). Like a coroutine it does
/// nothing until first sent to; dropped while suspended, it is closed as a coroutine would be.
///
/// One awaitable per item cost a third of what the async drivers add to their sync twins
/// (allocation, the collector's tracking, the finalizer and the dealloc: about 400 of 630
/// instructions per event of `sse.awrap_openai`, callgrind). So the driver keeps the awaitable
/// of its last delivered pull and hands it out again from `__anext__` when nothing else refers
/// to it (its reference count is the driver's alone): nobody can tell it from a new one. It is
/// never freed in between, so unlike PyO3's `freelist` (which reuses a freed object without
/// `PyObject_GC_Track` and with its finalized mark kept, so that a cycle through it leaked) it
/// stays tracked and finalizable. A finished awaitable refers to nothing, not even its driver:
/// the spare makes no cycle, and a dropped stream is freed at once.
#[pyclass(frozen, module = "stopstream._core")]
pub(crate) struct AsyncPullStep {
    step: TryLock<Step>,
}

impl AsyncPullStep {
    /// A new pull of `driver`.
    pub(super) fn pull<'py>(driver: &Bound<'py, AsyncDriver>) -> PyResult<Bound<'py, Self>> {
        let step = TryLock::new(Step::Start(driver.clone().unbind()));
        Bound::new(driver.py(), AsyncPullStep { step })
    }

    /// An awaitable closing `objects`.
    pub(super) fn closing(
        py: Python<'_>,
        objects: VecDeque<Py<PyAny>>,
        mode: CloseMode<Py<AsyncDriver>>,
    ) -> PyResult<Bound<'_, Self>> {
        let step = Step::Closer(Box::new(Closer::new(objects, mode)));
        Bound::new(py, AsyncPullStep { step: TryLock::new(step) })
    }

    /// One step of the awaitable: what it yields to the event loop, or what it returns.
    #[inline]
    pub(super) fn resume<'py>(
        slf: &Bound<'py, Self>,
        input: Input<Bound<'py, PyAny>, PyErr>,
    ) -> PyResult<Sent<'py>> {
        let py = slf.py();
        let Some(mut step) = try_lock(py, &slf.get().step) else {
            return Err(PyValueError::new_err("coroutine already executing"));
        };
        // Driven over borrowed references, so that what the step lets go of is released at
        // once (an owned reference dropped where PyO3 does not know the thread attached, as in
        // the `am_send` slot, would wait in PyO3's pool).
        let taken = std::mem::replace(&mut *step, Step::Done);
        let taken = taken.map(|d| d.into_bound(py), |o| o.into_bound(py));
        let host = PullHost { py, step: slf };
        let aio::Resumed { step: next, sent, ended } = aio::resume(&host, taken, input);
        *step = next.map(Bound::unbind, Bound::unbind);
        if matches!(sent, Ok(Sent::Return(_))) {
            // A delivering pull's awaitable is free again before its stream is released.
            drop(step);
        }
        if let Some(driver) = ended {
            aio::State::release(&host, &driver);
        }
        sent
    }

    /// Makes a finished awaitable a new pull of `driver`, if nothing but the caller (which
    /// took it from the driver's spare) refers to it and it was never finalized; `false`
    /// leaves it as it is.
    ///
    /// The collector finalizes every object of an unreachable cycle, the spare included, and a
    /// finalizer in the cycle may bring it all back: CPython finalizes an object once, so a
    /// pull served from that spare and dropped while suspended would not end (the upstream
    /// left open, the stream running for good).
    pub(super) fn restart(slf: &Bound<'_, Self>, driver: &Bound<'_, AsyncDriver>) -> bool {
        if !sole_unfinalized(slf.as_any()) {
            return false;
        }
        let Some(mut step) = try_lock(driver.py(), &slf.get().step) else { return false };
        if !matches!(*step, Step::Done) {
            return false;
        }
        *step = Step::Start(driver.clone().unbind());
        true
    }
}

#[pymethods]
impl AsyncPullStep {
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        yielded(Self::resume(slf, Input::Send(slf.py().None().into_bound(slf.py())))?)
    }

    /// Resumes the awaitable with `value`; returns what it yields next, or raises
    /// `StopIteration` with what it returns.
    #[pyo3(signature = (value, /))]
    fn send<'py>(slf: &Bound<'py, Self>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        yielded(Self::resume(slf, Input::Send(value))?)
    }

    /// Raises `exc` where the awaitable waits (the upstream's awaitable, or a close).
    #[pyo3(signature = (typ, val = None, tb = None, /))]
    fn throw<'py>(
        slf: &Bound<'py, Self>,
        typ: &Bound<'py, PyAny>,
        val: Option<&Bound<'py, PyAny>>,
        tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let err = thrown(typ, val, tb)?;
        yielded(Self::resume(slf, Input::Throw(err))?)
    }

    /// Ends the awaitable where it waits, as a coroutine's `close()` does.
    // A `GeneratorExit` thrown in where the awaitable waits, which must end it.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let Some(mut step) = try_lock(py, &slf.get().step) else {
                return Err(PyValueError::new_err("coroutine already executing"));
            };
            if !step.is_suspended() {
                *step = Step::Done;
                return Ok(());
            }
        }
        let thrown = Self::resume(slf, Input::Throw(PyGeneratorExit::new_err(())));
        let left = || {
            let mut step = try_lock(py, &slf.get().step)?;
            let left = std::mem::replace(&mut *step, Step::Done);
            Some(left.map(|d| d.into_bound(py), |o| o.into_bound(py)))
        };
        aio::closed_by(&PullHost { py, step: slf }, thrown, left)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: as in `AsyncDriver.__traverse__`.
        #[allow(unsafe_code)]
        let guard = unsafe { self.step.try_acquire() };
        if let Some(step) = guard {
            step.visit(|driver| visit.call(driver), |object| visit.call(object))?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // SAFETY: as in `AsyncDriver.__clear__`.
        #[allow(unsafe_code)]
        let py = unsafe { Python::assume_attached() };
        let old = try_lock(py, &self.step).map(|mut s| std::mem::replace(&mut *s, Step::Done));
        // A pull cleared while suspended (its finalizer ran at an earlier suspension, and an
        // object resurrected it) frees the stream.
        if let Some(driver) = old.as_ref().and_then(Step::running_driver) {
            driver.get().running.store(false, Ordering::Release);
        }
        drop(old);
    }
}

impl AsyncPullStep {
    /// The finalizer's work: abandoned while suspended, the awaitable is closed, as the
    /// finalizer of a coroutine closes it (the upstream's awaitable is closed, then the pull
    /// ends by the rule for an upstream error). Nobody is left to tell of a failure but
    /// `sys.unraisablehook`. Not while the interpreter finalizes: the upstream's modules may be
    /// gone, and the event loop with them.
    pub(super) fn finalize(slf: &Bound<'_, Self>) {
        let py = slf.py();
        let suspended = try_lock(py, &slf.get().step).is_some_and(|s| s.is_suspended());
        if suspended && !finalizing() {
            if let Err(err) = Self::close(slf) {
                err.write_unraisable(py, None);
            }
        }
    }
}
