//! The native async driver of the stream lifecycle (contract §9): `AsyncDriver`, the base of
//! `stopstream._lifecycle.AsyncPull`, and `AsyncPullStep`, the awaitable its `__anext__` and
//! `aclose()` return.
//!
//! The rules are the core's [`Lifecycle`], which the sync driver (`stream.rs`) follows too: a
//! pull carries out its actions, awaiting where the sync driver calls. A Python `async def
//! __anext__` would cost a coroutine object and a frame per item on top of the upstream's own
//! (`awrap` ran at 2.2–2.9× an async generator passing the chunks through); here `__anext__` is
//! a plain native method returning a small native awaitable that drives the upstream's
//! awaitable itself (`PyIter_Send`, which for a coroutine hands back the return value without
//! creating a `StopIteration`), feeds the stage, and returns the output; when the stage holds
//! the item back it pulls the next one within the same awaitable. The piece goes back through
//! the `am_send` slot (set by `slots::install`: PyO3 cannot declare it), as a coroutine's
//! return value does, with no `StopIteration` where `await` calls the slot (measured on
//! CPython 3.11; on 3.12+ `SEND` may call `__next__` or `send` of an object that is not a
//! generator instead). Returned as a `StopIteration` from `__next__` it would cost more than the
//! rest of the step (PyO3 on CPython 3.11 normalizes every exception it raises): the per-chunk
//! `awrap` row is 1.9× to 2.0× the floor (1 to 4 stops) through the slot, where a
//! `StopIteration` per item made it 3.0×.
//!
//! Closing the upstream awaits each object's `aclose()` (else `close()`, awaited when it
//! returns an awaitable) in the same awaitable type, in its closing mode. The close after a
//! stop runs in a task of its own, awaited through `asyncio.shield`: a cancellation of the pull
//! propagates at once, the close still completes (deferring its failure to the stream itself),
//! and what the stop decided stays queued for later pulls.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::{
    PyException, PyGeneratorExit, PyRuntimeError, PyStopAsyncIteration, PyStopIteration,
    PyTypeError, PyValueError,
};
use pyo3::ffi;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::PyTraverseError;

use super::awaits::{
    anext, await_iter, is_awaitable, made, send, throw_into, thrown, yielded, Input, Sent,
};
use super::stage::{Out, Stage};
use super::{lock, try_lock};
use crate::lock::{Guard, TryLock};
use crate::{Action, Close, Lifecycle};

type Life = Lifecycle<Py<PyAny>, PyErr>;

struct DriverState {
    /// The upstream iterator, until the stream ends.
    iterator: Option<Py<PyAny>>,
    /// The object given, when it is not its own iterator (an SDK stream): closed too.
    source: Option<Py<PyAny>>,
    /// `source` was closed already (by `aclose()` during a pull).
    closed_source: bool,
    /// Pulls started so far (to name a bad item's position).
    position: usize,
    life: Life,
    /// The awaitable of the last pull that delivered, kept to serve the next `__anext__`
    /// (see `AsyncPullStep`). Finished, it refers to nothing, so it makes no cycle.
    spare: Option<Py<AsyncPullStep>>,
}

impl DriverState {
    /// What is left of the upstream to close (each object once), which the stream lets go of.
    fn take_upstream(&mut self) -> VecDeque<Py<PyAny>> {
        let iterator = self.iterator.take();
        let source = self.source.take().filter(|_| !self.closed_source);
        iterator.into_iter().chain(source).collect()
    }
}

/// The async lifecycle driver.
///
/// The state sits behind the per-object lock, taken only around reads and writes of it, never
/// across a call into Python (the upstream, the stage or a finalizer may read the stream's
/// state meanwhile), and the objects it releases are dropped after the lock is.
#[pyclass(frozen, subclass, module = "stopstream._core")]
pub(super) struct AsyncDriver {
    state: TryLock<DriverState>,
    /// The stage, set once by `_start`: outside the lock, read without a reference count.
    stage: OnceLock<Stage>,
    /// A pull is in progress (between the first `send` of its awaitable and its end).
    running: AtomicBool,
    /// `aclose()` was called while a pull was in progress.
    close_requested: AtomicBool,
}

/// What the event loop's exception handler is told of a close that failed with nobody to
/// raise it to.
fn report(py: Python<'_>, message: &str, err: PyErr) {
    let told = (|| {
        let asyncio = py.import("asyncio")?;
        let Ok(event_loop) = asyncio.call_method0("get_running_loop") else { return Ok(()) };
        let context = PyDict::new(py);
        context.set_item("message", message)?;
        context.set_item("exception", err.into_value(py))?;
        event_loop.call_method1("call_exception_handler", (context,)).map(drop)
    })();
    if let Err(err) = told {
        err.write_unraisable(py, None);
    }
}

impl AsyncDriver {
    fn st(&self, py: Python<'_>) -> PyResult<Guard<'_, DriverState>> {
        lock(py, &self.state)
    }

    /// The lifecycle's next action, under the lock.
    fn next_action(&self, py: Python<'_>) -> Action<Py<PyAny>, PyErr> {
        match self.st(py) {
            Ok(mut st) => st.life.next_action(),
            Err(err) => Action::Raise(err),
        }
    }

    /// Keeps an error to raise after the last output.
    fn defer(&self, py: Python<'_>, err: PyErr) -> PyResult<()> {
        let mut st = self.st(py)?;
        st.life.defer(err, |first, err| first.set_context(py, Some(err)));
        Ok(())
    }

    /// Feeds one pulled item (the `position`-th) to the stage: what the lifecycle does next.
    fn item(
        &self,
        py: Python<'_>,
        item: &Bound<'_, PyAny>,
        position: usize,
    ) -> Action<Py<PyAny>, PyErr> {
        if self.close_requested.load(Ordering::Acquire) {
            return self.with_life(py, Life::closed_during_pull);
        }
        match self.push(py, item, position) {
            Ok((out, closing)) => self.with_life(py, |life| life.fed(out, closing)),
            Err(err) => self.with_life(py, |life| life.refused(err)),
        }
    }

    fn with_life(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Life) -> Action<Py<PyAny>, PyErr>,
    ) -> Action<Py<PyAny>, PyErr> {
        match self.st(py) {
            Ok(mut st) => f(&mut st.life),
            Err(err) => Action::Raise(err),
        }
    }

    /// The stage's output for one item, and whether it is closing.
    fn push(
        &self,
        py: Python<'_>,
        item: &Bound<'_, PyAny>,
        position: usize,
    ) -> PyResult<(Option<Py<PyAny>>, bool)> {
        let Some(stage) = self.stage.get() else {
            return Err(PyRuntimeError::new_err("stream was not started"));
        };
        let pushed = stage.push(py, item, position)?;
        if let Some(err) = pushed.owed {
            self.defer(py, err)?;
        }
        let out = match pushed.out {
            Out::None => None,
            Out::One(out) => Some(out.unbind()),
            Out::Many(list) => {
                // Reading a list's items runs no Python code: safe under the lock.
                self.st(py)?.life.owed(list.iter().map(Bound::unbind));
                None
            }
        };
        Ok((out, pushed.closing))
    }

    /// The upstream's `__anext__` or its awaitable raised `err`.
    fn upstream_raised(&self, py: Python<'_>, err: PyErr) -> Action<Py<PyAny>, PyErr> {
        let err = made(py, err);
        let close_requested = self.close_requested.load(Ordering::Acquire);
        if !err.is_instance_of::<PyStopAsyncIteration>(py) {
            return self.with_life(py, |life| life.raised(err, close_requested));
        }
        let (action, released) = match self.st(py) {
            Ok(mut st) => {
                let action = st.life.exhausted(close_requested);
                // Ran out by itself: nothing to close.
                let released = matches!(action, Action::EndStage)
                    .then(|| (st.iterator.take(), st.source.take()));
                (action, released)
            }
            Err(err) => (Action::Raise(err), None),
        };
        drop(released);
        action
    }

    /// Queues what the stage still owes once the upstream is done.
    fn end_stage(&self, py: Python<'_>) -> PyResult<()> {
        let Some(stage) = self.stage.get() else { return Ok(()) };
        let (owed, err) = stage.end(py)?;
        if let Some(err) = err {
            self.defer(py, err)?;
        }
        self.st(py)?.life.owed(owed);
        Ok(())
    }

    /// A close the lifecycle asked for ended, failing with `failure` or not.
    fn closed(
        &self,
        py: Python<'_>,
        why: Close<PyErr>,
        failure: Option<PyErr>,
    ) -> Action<Py<PyAny>, PyErr> {
        let message = match &why {
            Close::Upstream(err) if is_cancellation(py, err) => {
                "closing the upstream after a cancellation"
            }
            Close::Upstream(_) => "closing the upstream after its error",
            _ => "closing the upstream after aclose() from another task",
        };
        let closed = match self.st(py) {
            Ok(mut st) => st.life.closed(why, failure, |e, c| e.set_context(py, Some(c))),
            Err(err) => return Action::Raise(err),
        };
        if let Some(failure) = closed.report {
            report(py, message, failure);
        }
        closed.action
    }
}

fn is_cancellation(py: Python<'_>, err: &PyErr) -> bool {
    py.import("asyncio")
        .and_then(|m| m.getattr("CancelledError"))
        .is_ok_and(|t| err.get_type(py).is_subclass(&t).unwrap_or(false))
}

/// How a step of a pull ended.
enum Outcome<'py> {
    /// Suspended: the awaitable driven yielded this to the event loop.
    Yield(Step, Bound<'py, PyAny>),
    Deliver(Bound<'py, PyAny>),
    Raise(PyErr),
}

/// Carries out the lifecycle's actions from `action` until the pull suspends, delivers or
/// raises.
fn advance<'py>(
    driver: &Bound<'py, AsyncDriver>,
    mut action: Action<Py<PyAny>, PyErr>,
) -> Outcome<'py> {
    let py = driver.py();
    let this = driver.get();
    let none = py.None().into_bound(py);
    loop {
        action = match action {
            Action::Deliver(out) => return Outcome::Deliver(out.into_bound(py)),
            Action::Raise(err) => return Outcome::Raise(err),
            Action::End => return Outcome::Raise(PyStopAsyncIteration::new_err(())),
            Action::Pull => {
                let (iterator, position) = {
                    let mut st = match this.st(py) {
                        Ok(st) => st,
                        Err(err) => return Outcome::Raise(err),
                    };
                    let Some(iterator) = st.iterator.as_ref().map(|i| i.clone_ref(py)) else {
                        return Outcome::Raise(PyStopAsyncIteration::new_err(()));
                    };
                    let position = st.position;
                    st.position += 1;
                    (iterator.into_bound(py), position)
                };
                let pulled = anext(&iterator)
                    .and_then(await_iter)
                    .and_then(|it| Ok((send(&it, &none)?, it)));
                match pulled {
                    Ok((Sent::Yield(value), it)) => {
                        let step = Step::Pulling(driver.clone().unbind(), it.unbind(), position);
                        return Outcome::Yield(step, value);
                    }
                    Ok((Sent::Return(item), _)) => this.item(py, &item, position),
                    Err(err) => this.upstream_raised(py, err),
                }
            }
            Action::Close(why) => match start_close(driver, &why) {
                Ok(it) => match send(&it, &none) {
                    Ok(Sent::Yield(value)) => {
                        let step = Step::Closing(driver.clone().unbind(), it.unbind(), why);
                        return Outcome::Yield(step, value);
                    }
                    Ok(Sent::Return(_)) => this.closed(py, why, None),
                    Err(err) => match close_failed(driver, why, err) {
                        Ok(action) => action,
                        Err(err) => return Outcome::Raise(err),
                    },
                },
                Err(err) => return Outcome::Raise(err),
            },
            Action::EndStage => match this.end_stage(py) {
                Ok(()) => this.next_action(py),
                Err(err) => return Outcome::Raise(err),
            },
        };
    }
}

/// The awaitable iterator of the close the lifecycle asked for: the objects' closes, or after
/// a stop those closes in a task of their own, through `asyncio.shield`.
fn start_close<'py>(
    driver: &Bound<'py, AsyncDriver>,
    why: &Close<PyErr>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = driver.py();
    let objects = driver.get().st(py)?.take_upstream();
    if !matches!(why, Close::Stop) {
        return Ok(AsyncPullStep::closing(py, objects, CloseMode::Raise)?.into_any());
    }
    let closer = AsyncPullStep::closing(py, objects, CloseMode::Defer(driver.clone().unbind()))?;
    let asyncio = py.import("asyncio")?;
    let task = asyncio.call_method1("ensure_future", (closer,))?;
    await_iter(asyncio.call_method1("shield", (task,))?)
}

/// A close the lifecycle asked for raised `err`: a cancellation of the pull while a stop's
/// close runs (it goes on in its task; what the stop decided stays queued), a failure to
/// close, or something that is no `Exception`, which propagates.
fn close_failed(
    driver: &Bound<'_, AsyncDriver>,
    why: Close<PyErr>,
    err: PyErr,
) -> PyResult<Action<Py<PyAny>, PyErr>> {
    let py = driver.py();
    let this = driver.get();
    let err = made(py, err);
    if matches!(why, Close::Stop) && is_cancellation(py, &err) {
        this.end_stage(py)?;
        return Err(err);
    }
    if !err.is_instance_of::<PyException>(py) {
        return Err(err);
    }
    Ok(this.closed(py, why, Some(err)))
}

#[pymethods]
impl AsyncDriver {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        AsyncDriver {
            state: TryLock::new(DriverState {
                iterator: None,
                source: None,
                closed_source: false,
                position: 0,
                life: Lifecycle::new(),
                spare: None,
            }),
            stage: OnceLock::new(),
            running: AtomicBool::new(false),
            close_requested: AtomicBool::new(false),
        }
    }

    /// Sets the upstream iterator, the object given (when it is not the iterator) and the
    /// stage.
    #[pyo3(signature = (iterator, source, stage))]
    fn _start(
        &self,
        py: Python<'_>,
        iterator: Py<PyAny>,
        source: Option<Py<PyAny>>,
        stage: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if self.stage.set(Stage::of(stage)).is_err() {
            return Err(PyRuntimeError::new_err("stream already started"));
        }
        let mut st = self.st(py)?;
        st.iterator = Some(iterator);
        st.source = source;
        Ok(())
    }

    fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, AsyncPullStep>> {
        let py = slf.py();
        let spare = slf.get().st(py).ok().and_then(|mut st| st.spare.take());
        if let Some(spare) = spare.map(|s| s.into_bound(py)) {
            if AsyncPullStep::restart(&spare, slf) {
                return Ok(spare);
            }
        }
        Bound::new(py, AsyncPullStep { step: TryLock::new(Step::Start(slf.clone().unbind())) })
    }

    /// End the stream and close the upstream (once; later calls do nothing).
    ///
    /// From another task while this stream waits on the upstream, it returns at once without
    /// raising: the object given is closed now where it is not the iterator itself (an SDK
    /// stream's `close()` drops the connection, which ends the pending read), and the waiting
    /// `__anext__` closes the iterator as soon as its pull returns, then ends.
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, AsyncPullStep>> {
        let (objects, mode) = {
            let mut st = self.st(py)?;
            if self.running.load(Ordering::Acquire) {
                st.life.abandon();
                self.close_requested.store(true, Ordering::Release);
                let source =
                    st.source.as_ref().filter(|_| !st.closed_source).map(|s| s.clone_ref(py));
                st.closed_source |= source.is_some();
                let message = "closing the upstream from aclose() during a pull";
                (source.into_iter().collect(), CloseMode::Report(message))
            } else if st.life.close() {
                (st.take_upstream(), CloseMode::Raise)
            } else {
                (VecDeque::new(), CloseMode::Raise)
            }
        };
        AsyncPullStep::closing(py, objects, mode)
    }

    /// A pull is in progress.
    #[getter(_running)]
    fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    #[getter(_stage)]
    fn stage(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.stage.get().map(|s| s.object().clone_ref(py))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the collector calls `tp_traverse` on an attached thread (holding the GIL in a
        // GIL build), which is what the lock relies on. A held lock means the stream is in use,
        // so reachable anyway.
        #[allow(unsafe_code)]
        let guard = unsafe { self.state.try_acquire() };
        if let Some(st) = guard {
            visit.call(&st.iterator)?;
            visit.call(&st.source)?;
            visit.call(&st.spare)?;
            for item in st.life.queued() {
                visit.call(item)?;
            }
        }
        if let Some(stage) = self.stage.get() {
            stage.traverse(&visit)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // The stage stays (set once, read without the lock); a cycle through it is broken at
        // the stage's own references.
        // SAFETY: the collector calls `tp_clear` on an attached thread (`Python::attach` would
        // panic there while the interpreter finalizes).
        #[allow(unsafe_code)]
        let py = unsafe { Python::assume_attached() };
        let old = try_lock(py, &self.state).map(|mut st| {
            st.life.clear();
            (st.iterator.take(), st.source.take(), st.spare.take())
        });
        drop(old);
    }
}

/// What a closing awaitable does with a failure once every object is closed.
enum CloseMode {
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
struct Closer {
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
        object.getattr_opt(pyo3::intern!(py, "aclose"))?.filter(PyAnyMethods::is_callable);
    if close.is_none() {
        close = object.getattr_opt(pyo3::intern!(py, "close"))?.filter(PyAnyMethods::is_callable);
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
    /// It ended: the driver goes on with the lifecycle's next action.
    Next(Bound<'py, AsyncDriver>, Action<Py<PyAny>, PyErr>),
    /// Suspended again, with what it yields.
    Yield(Step, Bound<'py, PyAny>),
    /// With an error for the awaiter.
    Raise(PyErr),
}

/// Where an awaitable is.
enum Step {
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
    /// An awaitable closing `objects`.
    fn closing(
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
            Ok(Sent::Return(item)) => this.item(py, &item, position),
            Err(err) => this.upstream_raised(py, err),
        };
        Resumed::Next(driver.into_bound(py), action)
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
        Resumed::Next(driver, action)
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
                    let action = driver.get().next_action(py);
                    Resumed::Next(driver.into_bound(py), action)
                }
            },
            Step::Pulling(driver, it, position) => {
                Self::pulling(py, driver, it.into_bound(py), position, input)
            }
            Step::Closing(driver, it, why) => {
                Self::closing_step(py, driver.into_bound(py), it.into_bound(py), why, input)
            }
        };
        let (driver, action) = match resumed {
            Resumed::Next(driver, action) => (driver, action),
            Resumed::Yield(suspended, value) => {
                *step = suspended;
                return Ok(Sent::Yield(value));
            }
            Resumed::Raise(err) => return Err(err),
        };
        let this = driver.get();
        match advance(&driver, action) {
            Outcome::Yield(next, value) => {
                *step = next;
                Ok(Sent::Yield(value))
            }
            Outcome::Deliver(out) => {
                drop(step);
                this.running.store(false, Ordering::Release);
                if let Ok(mut st) = this.st(py) {
                    if st.spare.is_none() {
                        st.spare = Some(slf.clone().unbind());
                    }
                }
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
    fn restart(slf: &Bound<'_, Self>, driver: &Bound<'_, AsyncDriver>) -> bool {
        // A count of one under the GIL: no other thread can take a reference meanwhile.
        #[cfg(not(Py_GIL_DISABLED))]
        {
            // SAFETY: the reference count and the finalized mark of a live object, read on an
            // attached thread.
            #[allow(unsafe_code)]
            let (count, finalized) = unsafe {
                (ffi::Py_REFCNT(slf.as_ptr()), ffi::PyObject_GC_IsFinalized(slf.as_ptr()) != 0)
            };
            if count != 1 || finalized {
                return false;
            }
            if let Some(mut step) = try_lock(driver.py(), &slf.get().step) {
                if matches!(*step, Step::Done) {
                    *step = Step::Start(driver.clone().unbind());
                    return true;
                }
            }
        }
        #[cfg(Py_GIL_DISABLED)]
        let _ = (slf, driver);
        false
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
