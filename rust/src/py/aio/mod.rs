//! The native async driver of the stream lifecycle (contract §9): `AsyncDriver`, the base of
//! `stopstream._lifecycle.AsyncPull`; its awaitable, `AsyncPullStep`, is in `astep.rs`, the
//! rules of `await` it follows in `awaits.rs`, an object's async close in `close.rs`, and the
//! awaitable's slots in `slots.rs`.
//!
//! The rules are the core's [`Lifecycle`], which the sync driver (`lifecycle/sync.rs`) follows too:
//! a pull (`lifecycle/aio/`) carries out its actions, awaiting where the sync driver calls. A
//! Python `async def __anext__` would cost a coroutine object and a frame per item on top of the
//! upstream's own (`awrap` ran at 2.2–2.9× an async generator passing the chunks through); here
//! `__anext__` is a plain native method returning a small native awaitable that drives the
//! upstream's awaitable itself (`PyIter_Send`, which for a coroutine hands back the return value
//! without creating a `StopIteration`), feeds the stage, and returns the output; when the stage
//! holds the item back it pulls the next one within the same awaitable. The piece goes back through
//! the `am_send` slot (set by `slots::install`: PyO3 cannot declare it), as a coroutine's return
//! value does, with no `StopIteration` where `await` calls the slot (measured on CPython 3.11; on
//! 3.12+ `SEND` may call `__next__` or `send` of an object that is not a generator instead).
//! Returned as a `StopIteration` from `__next__` it would cost more than the rest of the step (PyO3
//! on CPython 3.11 normalizes every exception it raises): the per-chunk `awrap` row is 1.9× to 2.0×
//! the floor (1 to 4 stops) through the slot, where a `StopIteration` per item made it 3.0×.
//!
//! Closing the upstream awaits each object's `aclose()` (else `close()`, awaited when it
//! returns an awaitable) in the same awaitable type, in its closing mode. The close after a
//! stop runs in a task of its own, awaited through `asyncio.shield`: a cancellation of the pull
//! propagates at once, the close still completes (deferring its failure to the stream itself),
//! and what the stop decided stays queued for later pulls.

mod astep;
mod awaits;
mod close;
mod slots;

pub(super) use astep::AsyncPullStep;
pub(super) use slots::install;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};
use pyo3::PyTraverseError;

use self::awaits::await_iter;
use super::lock::{lock, try_lock};
use super::stages::{Out, Stage};
use crate::host::aio::{CloseMode, Upstream};
use crate::lock::{Guard, TryLock};

/// The state of an async stream's pulls.
pub(super) type DriverState = Upstream<Py<PyAny>, Py<AsyncPullStep>, PyErr>;

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
    pub(super) running: AtomicBool,
    /// `aclose()` was called while a pull was in progress.
    close_requested: AtomicBool,
}

// `asyncio.<name>`, looked up once per process: a stop's close calls two of them, and an
// import per call cost about 3,300 instructions of a response of a few chunks (callgrind).
static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CANCELLED_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ENSURE_FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static SHIELD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// What the event loop's exception handler is told of a close that failed with nobody to
/// raise it to.
pub(super) fn report(py: Python<'_>, message: &str, err: PyErr) {
    let told = (|| {
        let get_running_loop = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?;
        let Ok(event_loop) = get_running_loop.call0() else { return Ok(()) };
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
    pub(super) fn st(&self, py: Python<'_>) -> PyResult<Guard<'_, DriverState>> {
        lock(py, &self.state)
    }

    /// Whether `aclose()` was called while a pull ran.
    #[inline]
    pub(super) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Acquire)
    }

    /// The stage's output for the `position`-th item.
    #[allow(
        clippy::inline_always,
        reason = "every item of a pull: out of line, about 60 instructions more an `awrap` chunk (callgrind)"
    )]
    #[inline(always)]
    pub(super) fn push(
        &self,
        py: Python<'_>,
        item: &Bound<'_, PyAny>,
        position: usize,
    ) -> PyResult<(Option<Py<PyAny>>, bool)> {
        let Some(stage) = self.stage.get() else {
            return Err(PyRuntimeError::new_err("stream was not started"));
        };
        if let Stage::Filter(filter) = stage {
            // `awrap`'s per-chunk step: the built-in filter directly (no `Pushed` to build and
            // take apart: about 50 instructions a chunk, callgrind).
            let (out, stopped) = filter.get().push(py, item, position)?;
            return Ok((out.map(Bound::unbind), stopped));
        }
        let pushed = stage.push(py, item, position)?;
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

    /// The error the closing stage owes, taken.
    pub(super) fn owed(&self, py: Python<'_>) -> PyResult<Option<PyErr>> {
        self.stage.get().map_or(Ok(None), |stage| stage.owed(py))
    }

    /// What the stage still owes once the upstream is done, and an error to raise after it.
    pub(super) fn stage_end(&self, py: Python<'_>) -> PyResult<(Vec<Py<PyAny>>, Option<PyErr>)> {
        self.stage.get().map_or_else(|| Ok((Vec::new(), None)), |stage| stage.end(py))
    }
}

pub(super) fn is_cancellation(py: Python<'_>, err: &PyErr) -> bool {
    CANCELLED_ERROR
        .import(py, "asyncio", "CancelledError")
        .is_ok_and(|t| err.get_type(py).is_subclass(t).unwrap_or(false))
}

/// The awaitable iterator closing `objects`: their closes, or after a stop those closes in a
/// task of their own, through `asyncio.shield`.
pub(super) fn start_close<'py>(
    driver: &Bound<'py, AsyncDriver>,
    objects: VecDeque<Py<PyAny>>,
    after_stop: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = driver.py();
    if !after_stop {
        return Ok(AsyncPullStep::closing(py, objects, CloseMode::Raise)?.into_any());
    }
    let closer = AsyncPullStep::closing(py, objects, CloseMode::Defer(driver.clone().unbind()))?;
    let task = ENSURE_FUTURE.import(py, "asyncio", "ensure_future")?.call1((closer,))?;
    await_iter(SHIELD.import(py, "asyncio", "shield")?.call1((task,))?)
}

#[pymethods]
impl AsyncDriver {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        AsyncDriver {
            state: TryLock::new(DriverState::default()),
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
        self.st(py)?.start(iterator, source);
        Ok(())
    }

    fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, AsyncPullStep>> {
        let py = slf.py();
        let spare = slf.get().st(py).ok().and_then(|mut st| st.take_spare());
        if let Some(spare) = spare.map(|s| s.into_bound(py)) {
            if AsyncPullStep::restart(&spare, slf) {
                return Ok(spare);
            }
        }
        AsyncPullStep::pull(slf)
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
                self.close_requested.store(true, Ordering::Release);
                let source = st.close_during_pull(|s| s.clone_ref(py));
                let message = "closing the upstream from aclose() during a pull";
                (source.into_iter().collect(), CloseMode::Report(message))
            } else {
                (st.close(), CloseMode::Raise)
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
            st.visit(|object| visit.call(object), |spare| visit.call(spare))?;
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
        let old = try_lock(py, &self.state).map(|mut st| st.clear());
        drop(old);
    }
}
