//! `AsyncPullStep`: the awaitable that `AsyncDriver.__anext__` (one pull) and `aclose()`
//! return, with a coroutine's protocol, and its closing mode (each object's `aclose()`, else
//! `close()`, awaited in turn).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use pyo3::exceptions::{
    PyException, PyGeneratorExit, PyRuntimeError, PyStopAsyncIteration, PyStopIteration,
    PyTypeError, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use super::astream::{advance, close_failed, report, AsyncDriver, Outcome, Todo};
use super::awaits::{
    await_iter, is_awaitable, made, send, throw_into, thrown, yielded, Input, Sent,
};
use super::slots::{optional_attr, sole_unfinalized};
use super::try_lock;
use crate::lock::TryLock;
use crate::Close;

/// What a closing awaitable does with a failure once every object is closed.
pub(super) enum CloseMode {
    /// Raises the first.
    Raise,
    /// Hands it to the stream's lifecycle as the failure of the close after a stop (raised
    /// after the last output).
    Defer(Py<AsyncDriver>),
    /// Tells the event loop's exception handler, with this message.
    Report(&'static str),
}

/// Closing objects one by one: each one's `aclose()`, else `close()` (awaited when it returns
/// an awaitable, as the SDKs' async streams' `close()` does). All are closed even if one fails.
pub(super) struct Closer {
    objects: VecDeque<Py<PyAny>>,
    /// The iterator of the close being awaited.
    current: Option<Py<PyAny>>,
    first: Option<PyErr>,
    mode: CloseMode,
}

impl Closer {
    fn failed(&mut self, py: Python<'_>, err: PyErr) {
        if self.first.is_none() {
            self.first = Some(made(py, err));
        }
    }

    /// Runs the closes from `input` until one suspends (`Yield`) or all are done.
    fn resume<'py>(&mut self, py: Python<'py>, input: Input<'py>) -> PyResult<Sent<'py>> {
        let none = py.None().into_bound(py);
        let mut input = Some(input);
        loop {
            if let Some(it) = self.current.take() {
                let it = it.into_bound(py);
                let sent = match input.take() {
                    Some(Input::Send(value)) => send(&it, &value),
                    Some(Input::Throw(err)) => throw_into(&it, err),
                    None => send(&it, &none),
                };
                match sent {
                    Ok(Sent::Yield(value)) => {
                        self.current = Some(it.unbind());
                        return Ok(Sent::Yield(value));
                    }
                    Ok(Sent::Return(_)) => {}
                    Err(err) => self.failed(py, err),
                }
            } else if let Some(Input::Throw(err)) = input.take() {
                self.failed(py, err);
            }
            let Some(object) = self.objects.pop_front() else { return self.finish(py) };
            match start_one(object.bind(py)) {
                Ok(Some(it)) => self.current = Some(it.unbind()),
                Ok(None) => {}
                Err(err) => self.failed(py, err),
            }
        }
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Sent<'py>> {
        let none = Sent::Return(py.None().into_bound(py));
        let Some(err) = self.first.take() else { return Ok(none) };
        if !err.is_instance_of::<PyException>(py) {
            return Err(err);
        }
        match &self.mode {
            CloseMode::Raise => Err(err),
            CloseMode::Defer(driver) => {
                // The lifecycle's rule for a failing close after a stop (deferred past the last
                // output). Its next action, the stage's end, is the pull's: the pull awaiting
                // this close carries it out, or did already when it was cancelled.
                let _ = driver.get().closed(py, Close::Stop, Some(err));
                Ok(none)
            }
            CloseMode::Report(message) => {
                report(py, message, err);
                Ok(none)
            }
        }
    }
}

/// Starts closing `object`: the iterator to await, or `None` when the close is done already
/// (or the object has no close).
fn start_one<'py>(object: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = object.py();
    let mut close =
        optional_attr(object, pyo3::intern!(py, "aclose"))?.filter(PyAnyMethods::is_callable);
    if close.is_none() {
        close =
            optional_attr(object, pyo3::intern!(py, "close"))?.filter(PyAnyMethods::is_callable);
    }
    let Some(close) = close else { return Ok(None) };
    let result = close.call0()?;
    if is_awaitable(&result)? {
        return await_iter(result).map(Some);
    }
    Ok(None)
}

/// What a step awaiting the upstream or a close did.
enum Resumed<'py> {
    /// It ended: the driver goes on with what the lifecycle does next.
    Next(Bound<'py, AsyncDriver>, Todo<'py>),
    /// Suspended again, with what it yields.
    Yield(Step, Bound<'py, PyAny>),
    /// With an error for the awaiter.
    Raise(PyErr),
}

/// Where an awaitable is.
pub(super) enum Step {
    /// Created, not yet sent to: a pull of this driver.
    Start(Py<AsyncDriver>),
    /// Driving the upstream's awaitable (its iterator) for the `position`-th item.
    Pulling(Py<AsyncDriver>, Py<PyAny>, usize),
    /// Driving the close the lifecycle asked for (its iterator).
    Closing(Py<AsyncDriver>, Py<PyAny>, Close<PyErr>),
    /// Not a pull: closing objects (`aclose()`, or a close the lifecycle asked for).
    Closer(Closer),
    /// Returned or raised. It refers to nothing, not even its driver.
    Done,
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
pub(super) struct AsyncPullStep {
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
        mode: CloseMode,
    ) -> PyResult<Bound<'_, Self>> {
        let closer = Closer { objects, current: None, first: None, mode };
        Bound::new(py, AsyncPullStep { step: TryLock::new(Step::Closer(closer)) })
    }

    /// A step of a pull awaiting the upstream.
    fn pulling<'py>(
        py: Python<'py>,
        driver: Py<AsyncDriver>,
        it: Bound<'py, PyAny>,
        position: usize,
        input: Input<'py>,
        slf: &Bound<'py, Self>,
    ) -> Resumed<'py> {
        let sent = match input {
            Input::Send(value) => send(&it, &value),
            Input::Throw(err) => throw_into(&it, err),
        };
        let this = driver.get();
        let action = match sent {
            Ok(Sent::Yield(value)) => {
                return Resumed::Yield(Step::Pulling(driver, it.unbind(), position), value);
            }
            Ok(Sent::Return(item)) => this.item(py, &item, position, slf),
            Err(err) => this.upstream_raised(py, err, slf),
        };
        Resumed::Next(driver.into_bound(py), Todo::Do(action))
    }

    /// A step of a pull awaiting a close the lifecycle asked for, as [`AsyncPullStep::pulling`].
    fn closing_step<'py>(
        py: Python<'py>,
        driver: Bound<'py, AsyncDriver>,
        it: Bound<'py, PyAny>,
        why: Close<PyErr>,
        input: Input<'py>,
    ) -> Resumed<'py> {
        let sent = match input {
            Input::Send(value) => send(&it, &value),
            Input::Throw(err) => throw_into(&it, err),
        };
        let action = match sent {
            Ok(Sent::Yield(value)) => {
                return Resumed::Yield(Step::Closing(driver.unbind(), it.unbind(), why), value);
            }
            Ok(Sent::Return(_)) => driver.get().closed(py, why, None),
            Err(err) => match close_failed(&driver, why, err) {
                Ok(action) => action,
                Err(err) => {
                    driver.get().running.store(false, Ordering::Release);
                    return Resumed::Raise(err);
                }
            },
        };
        Resumed::Next(driver, Todo::Do(action))
    }

    /// One step of the awaitable: what it yields to the event loop, or what it returns.
    pub(super) fn resume<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> PyResult<Sent<'py>> {
        let py = slf.py();
        let Some(mut step) = try_lock(py, &slf.get().step) else {
            return Err(PyValueError::new_err("coroutine already executing"));
        };
        let resumed = match std::mem::replace(&mut *step, Step::Done) {
            Step::Done => {
                return Err(match input {
                    Input::Send(_) => {
                        PyRuntimeError::new_err("cannot reuse already awaited coroutine")
                    }
                    Input::Throw(err) => err,
                });
            }
            Step::Closer(mut closer) => {
                let sent = closer.resume(py, input);
                if matches!(sent, Ok(Sent::Yield(_))) {
                    *step = Step::Closer(closer);
                }
                return sent;
            }
            Step::Start(driver) => match input {
                Input::Throw(err) => return Err(err),
                Input::Send(value) if !value.is_none() => {
                    *step = Step::Start(driver);
                    return Err(PyTypeError::new_err(
                        "can't send non-None value to a just-started coroutine",
                    ));
                }
                Input::Send(_) => {
                    if driver.get().running.swap(true, Ordering::AcqRel) {
                        return Err(PyRuntimeError::new_err(
                            "stream is already being iterated (concurrent __anext__ or \
                             re-entrant call)",
                        ));
                    }
                    let todo = driver.get().begin(py, slf);
                    Resumed::Next(driver.into_bound(py), todo)
                }
            },
            Step::Pulling(driver, it, position) => {
                Self::pulling(py, driver, it.into_bound(py), position, input, slf)
            }
            Step::Closing(driver, it, why) => {
                Self::closing_step(py, driver.into_bound(py), it.into_bound(py), why, input)
            }
        };
        let (driver, todo) = match resumed {
            Resumed::Next(driver, todo) => (driver, todo),
            Resumed::Yield(suspended, value) => {
                *step = suspended;
                return Ok(Sent::Yield(value));
            }
            Resumed::Raise(err) => return Err(err),
        };
        let this = driver.get();
        match advance(&driver, todo, slf) {
            Outcome::Yield(next, value) => {
                *step = next;
                Ok(Sent::Yield(value))
            }
            Outcome::Deliver(out) => {
                // The driver keeps this awaitable as its spare already (`keep_spare`).
                drop(step);
                this.running.store(false, Ordering::Release);
                Ok(Sent::Return(out))
            }
            Outcome::Raise(err) => {
                this.running.store(false, Ordering::Release);
                Err(err)
            }
        }
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

    /// `close()`: a `GeneratorExit` thrown in where the awaitable waits, which must end it.
    fn close_step(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let Some(mut step) = try_lock(py, &slf.get().step) else {
                return Err(PyValueError::new_err("coroutine already executing"));
            };
            let idle = match &*step {
                Step::Start(_) | Step::Done => true,
                Step::Closer(closer) => closer.current.is_none(),
                Step::Pulling(..) | Step::Closing(..) => false,
            };
            if idle {
                *step = Step::Done;
                return Ok(());
            }
        }
        match Self::resume(slf, Input::Throw(PyGeneratorExit::new_err(()))) {
            Ok(Sent::Return(_)) => Ok(()),
            Ok(Sent::Yield(_)) => {
                // It went on instead: end it anyway, as a coroutine's `close()` does.
                let left = try_lock(py, &slf.get().step)
                    .map(|mut s| std::mem::replace(&mut *s, Step::Done));
                let waiting = match &left {
                    Some(Step::Pulling(driver, ..) | Step::Closing(driver, ..)) => {
                        driver.get().running.store(false, Ordering::Release);
                        None
                    }
                    Some(Step::Closer(closer)) => closer.current.as_ref(),
                    _ => None,
                };
                let waiting = match &left {
                    Some(Step::Closing(_, it, _)) => Some(it),
                    _ => waiting,
                };
                if let Some(it) = waiting {
                    if let Some(close) = it.bind(py).getattr_opt(pyo3::intern!(py, "close"))? {
                        close.call0()?;
                    }
                }
                Err(PyRuntimeError::new_err("coroutine ignored GeneratorExit"))
            }
            Err(err) => {
                let err = made(py, err);
                if err.is_instance_of::<PyGeneratorExit>(py)
                    || err.is_instance_of::<PyStopIteration>(py)
                    || err.is_instance_of::<PyStopAsyncIteration>(py)
                {
                    Ok(())
                } else {
                    Err(err)
                }
            }
        }
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
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::close_step(slf)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: as in `AsyncDriver.__traverse__`.
        #[allow(unsafe_code)]
        let guard = unsafe { self.step.try_acquire() };
        if let Some(step) = guard {
            match &*step {
                Step::Start(driver) => visit.call(driver)?,
                Step::Pulling(driver, obj, _) | Step::Closing(driver, obj, _) => {
                    visit.call(driver)?;
                    visit.call(obj)?;
                }
                Step::Closer(closer) => {
                    visit.call(&closer.current)?;
                    for object in &closer.objects {
                        visit.call(object)?;
                    }
                    if let CloseMode::Defer(driver) = &closer.mode {
                        visit.call(driver)?;
                    }
                }
                Step::Done => {}
            }
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
        if let Some(Step::Pulling(driver, ..) | Step::Closing(driver, ..)) = &old {
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
        let suspended = try_lock(py, &slf.get().step).is_some_and(|s| match &*s {
            Step::Pulling(..) | Step::Closing(..) => true,
            Step::Closer(closer) => closer.current.is_some(),
            Step::Start(_) | Step::Done => false,
        });
        if suspended && !super::slots::finalizing() {
            if let Err(err) = Self::close_step(slf) {
                err.write_unraisable(py, None);
            }
        }
    }
}
