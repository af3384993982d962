//! The native async driver of the stream lifecycle (contract §9): `AsyncDriver`, the base of
//! `stopstream._lifecycle.AsyncPull`, and `AsyncPullStep`, the awaitable its `__anext__` returns.
//!
//! A Python `async def __anext__` costs a coroutine object and a frame per item, on top of the
//! upstream's own: `awrap` ran at 2.2–2.9× an async generator passing the chunks through. Here
//! `__anext__` is a plain native method returning a small native awaitable that drives the
//! upstream's awaitable itself (`PyIter_Send`, which for a coroutine hands back the return
//! value without creating a `StopIteration`), feeds the stage, and returns the output; when the
//! stage holds the item back it pulls the next one within the same awaitable. The piece goes
//! back through the `am_send` slot (set by `slots::install`: PyO3 cannot declare it), as a
//! coroutine's return value does, with no `StopIteration` where `await` calls the slot
//! (measured on CPython 3.11; on 3.12+ `SEND` may call `__next__` or `send` of an object that
//! is not a generator instead). Returned as a `StopIteration` from `__next__` it would cost
//! more than the rest of the step (PyO3 on CPython 3.11 normalizes every exception it raises):
//! the per-chunk `awrap` row is 1.9× to 2.0× the floor (1 to 4 stops) through the slot, with
//! the upstream's `__anext__` and `__await__` reached through their slots and the stage read
//! without a lock, where a `StopIteration` per item made it 3.0× (no free list for the
//! awaitable: see `AsyncPullStep`).
//!
//! Only the common step runs here: deliver queued output, pull, feed, return. Every other event
//! of the lifecycle (the upstream raised or ran out, a bad item, a stop, a close requested
//! during the pull) needs awaits to close the upstream, and is handed to a coroutine method of
//! the Python subclass (`_upstream_raised`, `_bad_item`, `_stopped`, `_closed_during_pull`),
//! which the awaitable then drives the same way, forwarding `send` and `throw`. So the policy
//! is written once, in `stopstream._lifecycle`; this file holds no rule of its own beyond the
//! order of the common step.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::{
    PyBaseException, PyException, PyGeneratorExit, PyRuntimeError, PyStopAsyncIteration,
    PyStopIteration, PyTypeError, PyValueError,
};
use pyo3::ffi;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::PyTraverseError;

use super::errors::type_name;
use super::stream::StopStream;
use super::{lock, try_lock};
use crate::lock::{Guard, TryLock};

/// The flag `types.coroutine` sets on a generator's code (`inspect.CO_ITERABLE_COROUTINE`).
const CO_ITERABLE_COROUTINE: i64 = 0x100;

struct DriverState {
    /// The upstream iterator, until the stream ends.
    iterator: Option<Py<PyAny>>,
    /// The object given, when it is not its own iterator (an SDK stream): closed too.
    source: Option<Py<PyAny>>,
    /// `source` was closed already (by `aclose()` during a pull).
    closed_source: bool,
    /// Output owed to the consumer before anything else.
    queue: VecDeque<Py<PyAny>>,
    /// Pulls started so far (to name a bad item's position).
    position: usize,
    /// No more pulls: a stop, the upstream ended or raised, or the stream was closed.
    done: bool,
    /// An exception from closing the upstream after a stop, raised after the last output.
    deferred: Option<Py<PyAny>>,
    /// The awaitable of the last pull that delivered, kept to serve the next `__anext__`
    /// (see `AsyncPullStep`). Finished, it refers to nothing, so it makes no cycle.
    spare: Option<Py<AsyncPullStep>>,
}

/// The async lifecycle driver: the state and the common step of `__anext__`; the rest of the
/// policy is in its Python subclass `stopstream._lifecycle.AsyncPull`.
///
/// The state sits behind the per-object lock, taken only around reads and writes of it, never
/// across a call into Python (the upstream, the stage or a finalizer may read the stream's
/// state meanwhile), and the objects it releases are dropped after the lock is.
#[pyclass(frozen, subclass, module = "stopstream._core")]
pub(super) struct AsyncDriver {
    state: TryLock<DriverState>,
    /// The stage, set once by `_start`: outside the lock, read without a reference count.
    stage: OnceLock<Staged>,
    /// A pull is in progress (between the first `send` of its awaitable and its end).
    running: AtomicBool,
    /// `aclose()` was called while a pull was in progress.
    close_requested: AtomicBool,
}

/// A driver's stage.
enum Staged {
    /// The built-in filter (a `StopStream` over no upstream): fed without a Python call.
    Filter(Py<StopStream>),
    /// A Python object with `push`, `closing` and `end`.
    Python(Py<PyAny>),
}

impl Staged {
    fn object(&self) -> &Py<PyAny> {
        match self {
            Staged::Filter(f) => f.as_any(),
            Staged::Python(s) => s,
        }
    }
}

impl AsyncDriver {
    fn st(&self, py: Python<'_>) -> PyResult<Guard<'_, DriverState>> {
        lock(py, &self.state)
    }

    /// Takes over the decoding error the built-in filter owes after its stop (contract §9.9),
    /// to raise after the last output.
    fn owe(&self, py: Python<'_>, filter: &Py<StopStream>) -> PyResult<()> {
        if let Some(err) = filter.get().stage_owed(py)? {
            let exc = err.into_value(py).into_any();
            let old = self.st(py)?.deferred.replace(exc);
            drop(old);
        }
        Ok(())
    }

    /// Feeds one pulled item (the `position`-th) to the stage.
    fn push<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<Pushed<'py>> {
        if self.close_requested.load(Ordering::Acquire) {
            return Ok(Pushed::Closed);
        }
        let (out, closing) = match self.stage.get() {
            Some(Staged::Filter(filter)) => match filter.get().stage_push(py, item, position) {
                Ok((out, stopped)) => {
                    if stopped {
                        self.owe(py, filter)?;
                    }
                    (out, stopped)
                }
                Err(err) => return Ok(bad(py, err)),
            },
            Some(Staged::Python(stage)) => {
                let stage = stage.bind(py);
                let out = match stage.call_method1(pyo3::intern!(py, "push"), (item,)) {
                    Ok(out) => out,
                    Err(err) => return Ok(bad(py, err)),
                };
                let out = if let Ok(list) = out.cast_exact::<PyList>() {
                    // Reading a list's items runs no Python code: safe under the lock.
                    self.st(py)?.queue.extend(list.iter().map(Bound::unbind));
                    None
                } else {
                    out.is_truthy()?.then_some(out)
                };
                (out, stage.getattr(pyo3::intern!(py, "closing"))?.is_truthy()?)
            }
            None => return Err(PyRuntimeError::new_err("stream was not started")),
        };
        if closing {
            if let Some(out) = out {
                self.st(py)?.queue.push_front(out.unbind());
            }
            return Ok(Pushed::Stopped);
        }
        Ok(out.map_or(Pushed::Nothing, Pushed::Out))
    }
}

/// A bad item: the stage's error, for `_bad_item`; anything but an `Exception` propagates.
fn bad(py: Python<'_>, err: PyErr) -> Pushed<'_> {
    if err.is_instance_of::<PyException>(py) {
        Pushed::Bad(err)
    } else {
        Pushed::Raise(err)
    }
}

enum Pushed<'py> {
    Out(Bound<'py, PyAny>),
    /// Held back, or queued.
    Nothing,
    /// The stage is closing (a stop fired); its output is queued.
    Stopped,
    /// `aclose()` came during the pull: the item is not delivered.
    Closed,
    Bad(PyErr),
    Raise(PyErr),
}

/// What a driven awaitable did.
pub(super) enum Sent<'py> {
    Yield(Bound<'py, PyAny>),
    Return(Bound<'py, PyAny>),
}

/// One `send` into an awaitable's iterator: `PyIter_Send`, which runs a coroutine through its
/// `am_send` slot (no `StopIteration` is created for its return value) and anything else
/// through `__next__` or `send`.
fn send<'py>(it: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> PyResult<Sent<'py>> {
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
fn made(py: Python<'_>, err: PyErr) -> PyErr {
    err.restore(py);
    PyErr::fetch(py)
}

/// An exception thrown into an awaitable's iterator, as a coroutine awaiting it does: a
/// `GeneratorExit` closes it and is raised where it waits; anything else goes to its `throw`
/// (raised where it waits when it has none).
fn throw_into<'py>(it: &Bound<'py, PyAny>, err: PyErr) -> PyResult<Sent<'py>> {
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
fn anext<'py>(iterator: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
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

/// Whether `object` is a coroutine: its exact type (`PyCoro_CheckExact` in PyO3 also walks the
/// MRO of every other type, an async generator's `asend` object per item).
///
/// # Safety
///
/// `object` is a live object.
#[allow(unsafe_code)]
unsafe fn is_coroutine(object: *mut ffi::PyObject) -> bool {
    // SAFETY: the caller passes a live object; the type object is a static of CPython's.
    unsafe { std::ptr::eq(ffi::Py_TYPE(object), &raw const ffi::PyCoro_Type) }
}

/// The iterator `await` drives for `awaitable` (CPython's rule): a coroutine itself, else what
/// its `__await__()` returns (through the type's slot: an async generator's `asend` object
/// returns itself, with no bound method made per item), else a generator made a coroutine by
/// `types.coroutine`.
fn await_iter(awaitable: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
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

/// Where a pull goes next.
enum Event<'py> {
    /// Deliver what is queued, else pull.
    Next,
    /// The upstream's awaitable returned an item, the `position`-th.
    Item(Bound<'py, PyAny>, usize),
    /// The upstream's `__anext__` or its awaitable raised.
    Raised(PyErr),
}

/// How a step of a pull ended.
enum Action<'py> {
    /// Suspended: the awaitable driven yielded this to the event loop.
    Yield(Step, Bound<'py, PyAny>),
    Deliver(Bound<'py, PyAny>),
    Raise(PyErr),
}

/// Starts a policy coroutine of the Python side and drives it to its first suspension.
fn handle<'py>(
    driver: &Bound<'py, AsyncDriver>,
    name: &Bound<'py, PyString>,
    args: Bound<'py, PyTuple>,
) -> Result<Event<'py>, Action<'py>> {
    let py = driver.py();
    let coroutine = driver.call_method1(name, args).map_err(Action::Raise)?;
    match send(&coroutine, &py.None().into_bound(py)) {
        Ok(Sent::Yield(value)) => {
            Err(Action::Yield(Step::Handling(driver.clone().unbind(), coroutine.unbind()), value))
        }
        Ok(Sent::Return(_)) => Ok(Event::Next),
        Err(err) => Err(Action::Raise(err)),
    }
}

/// The common step: from `event` until the pull suspends, delivers or raises.
fn advance<'py>(driver: &Bound<'py, AsyncDriver>, mut event: Event<'py>) -> Action<'py> {
    let py = driver.py();
    let this = driver.get();
    loop {
        let next = match event {
            Event::Next => {
                let (iterator, position) = {
                    let mut st = match this.st(py) {
                        Ok(st) => st,
                        Err(err) => return Action::Raise(err),
                    };
                    if let Some(out) = st.queue.pop_front() {
                        return Action::Deliver(out.into_bound(py));
                    }
                    if let Some(exc) = st.deferred.take() {
                        drop(st);
                        return Action::Raise(PyErr::from_value(exc.into_bound(py)));
                    }
                    let iterator = match &st.iterator {
                        Some(iterator) if !st.done => iterator.clone_ref(py).into_bound(py),
                        _ => return Action::Raise(PyStopAsyncIteration::new_err(())),
                    };
                    let position = st.position;
                    st.position += 1;
                    (iterator, position)
                };
                let pulled = anext(&iterator)
                    .and_then(await_iter)
                    .and_then(|it| Ok((send(&it, &py.None().into_bound(py))?, it)));
                match pulled {
                    Ok((Sent::Yield(value), it)) => {
                        let step = Step::Pulling(driver.clone().unbind(), it.unbind(), position);
                        return Action::Yield(step, value);
                    }
                    Ok((Sent::Return(item), _)) => Ok(Event::Item(item, position)),
                    Err(err) => Ok(Event::Raised(err)),
                }
            }
            Event::Item(item, position) => match this.push(py, &item, position) {
                Ok(Pushed::Out(out)) => return Action::Deliver(out),
                Ok(Pushed::Nothing) => Ok(Event::Next),
                Ok(Pushed::Stopped) => {
                    handle(driver, pyo3::intern!(py, "_stopped"), PyTuple::empty(py))
                }
                Ok(Pushed::Closed) => {
                    handle(driver, pyo3::intern!(py, "_closed_during_pull"), PyTuple::empty(py))
                }
                Ok(Pushed::Bad(err)) => {
                    let args = (err.into_value(py), item, position).into_pyobject(py);
                    match args {
                        Ok(args) => handle(driver, pyo3::intern!(py, "_bad_item"), args),
                        Err(err) => return Action::Raise(err),
                    }
                }
                Ok(Pushed::Raise(err)) | Err(err) => return Action::Raise(err),
            },
            Event::Raised(err) => {
                let args = PyTuple::new(py, [err.into_value(py)]);
                match args {
                    Ok(args) => handle(driver, pyo3::intern!(py, "_upstream_raised"), args),
                    Err(err) => return Action::Raise(err),
                }
            }
        };
        match next {
            Ok(next) => event = next,
            Err(action) => return action,
        }
    }
}

/// A step's outcome through the iterator protocol (`__next__`, `send`, `throw`): the value
/// yielded, or the piece returned as the `StopIteration` that ends the awaitable. (`await`
/// takes the `am_send` slot instead, which returns the piece without an exception.) A tuple or
/// an exception given as the exception's argument would be taken apart, so it is wrapped.
fn yielded(sent: Sent<'_>) -> PyResult<Bound<'_, PyAny>> {
    let value = match sent {
        Sent::Yield(value) => return Ok(value),
        Sent::Return(value) => value,
    };
    if value.is_instance_of::<PyTuple>() || value.is_instance_of::<PyBaseException>() {
        return Err(PyStopIteration::new_err((value.unbind(),)));
    }
    Err(PyStopIteration::new_err(value.unbind()))
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
                queue: VecDeque::new(),
                position: 0,
                done: false,
                deferred: None,
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
        let staged = match stage.cast::<StopStream>() {
            Ok(filter) => Staged::Filter(filter.clone().unbind()),
            Err(_) => Staged::Python(stage.clone().unbind()),
        };
        if self.stage.set(staged).is_err() {
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

    #[getter(_stage)]
    fn stage(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.stage.get().map(|s| s.object().clone_ref(py))
    }

    #[getter(_running)]
    fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    #[getter(_done)]
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st(py)?.done)
    }

    #[setter(_done)]
    fn set_done(&self, py: Python<'_>, value: bool) -> PyResult<()> {
        self.st(py)?.done = value;
        Ok(())
    }

    #[getter(_close_requested)]
    fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Acquire)
    }

    #[setter(_close_requested)]
    fn set_close_requested(&self, value: bool) {
        self.close_requested.store(value, Ordering::Release);
    }

    /// Keeps a close's error, to raise after the last output; when a decoding error is owed
    /// already (contract §9.9), that one is raised, with the close's as its `__context__`.
    fn _defer(&self, py: Python<'_>, error: Py<PyAny>) -> PyResult<()> {
        let first = {
            let mut st = self.st(py)?;
            let first = st.deferred.as_ref().map(|first| first.clone_ref(py));
            if first.is_none() {
                st.deferred = Some(error.clone_ref(py));
            }
            first
        };
        if let Some(first) = first {
            first.bind(py).setattr(pyo3::intern!(py, "__context__"), error)?;
        }
        Ok(())
    }

    /// Drops the queued output.
    fn _clear_queue(&self, py: Python<'_>) -> PyResult<()> {
        let old = std::mem::take(&mut self.st(py)?.queue);
        drop(old);
        Ok(())
    }

    /// What is left of the upstream to close (each object once), which the stream lets go of.
    fn _take_upstream(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut st = self.st(py)?;
        let iterator = st.iterator.take();
        let source = st.source.take().filter(|_| !st.closed_source);
        Ok(iterator.into_iter().chain(source).collect())
    }

    /// The object given, if it is not the iterator and not closed yet: marked closed.
    fn _take_source(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let mut st = self.st(py)?;
        if st.closed_source {
            return Ok(None);
        }
        let source = st.source.as_ref().map(|s| s.clone_ref(py));
        st.closed_source = source.is_some();
        Ok(source)
    }

    /// The upstream ran out by itself: nothing is left to close.
    fn _release(&self, py: Python<'_>) -> PyResult<()> {
        let old = {
            let mut st = self.st(py)?;
            (st.iterator.take(), st.source.take())
        };
        drop(old);
        Ok(())
    }

    /// Queues what the stage still owes once the upstream is done.
    fn _end_stage(&self, py: Python<'_>) -> PyResult<()> {
        let owed: Vec<Py<PyAny>> = match self.stage.get() {
            Some(Staged::Filter(filter)) => {
                let out = filter.get().stage_end(py)?.map(Bound::unbind).into_iter().collect();
                self.owe(py, filter)?;
                out
            }
            Some(Staged::Python(stage)) => {
                let owed = stage.bind(py).call_method0(pyo3::intern!(py, "end"))?;
                owed.try_iter()?.map(|item| item.map(Bound::unbind)).collect::<PyResult<_>>()?
            }
            None => Vec::new(),
        };
        self.st(py)?.queue.extend(owed);
        Ok(())
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
            visit.call(&st.deferred)?;
            visit.call(&st.spare)?;
            for item in &st.queue {
                visit.call(item)?;
            }
        }
        if let Some(stage) = self.stage.get() {
            visit.call(stage.object())?;
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
            st.done = true;
            (
                st.iterator.take(),
                st.source.take(),
                st.deferred.take(),
                st.spare.take(),
                std::mem::take(&mut st.queue),
            )
        });
        drop(old);
    }
}

/// Where an awaitable of `__anext__` is.
enum Step {
    /// Created, not yet sent to: a pull of this driver.
    Start(Py<AsyncDriver>),
    /// Driving the upstream's awaitable (its iterator) for the `position`-th item.
    Pulling(Py<AsyncDriver>, Py<PyAny>, usize),
    /// Driving a policy coroutine of the Python side.
    Handling(Py<AsyncDriver>, Py<PyAny>),
    /// Returned or raised. It refers to nothing, not even its driver.
    Done,
}

/// What is sent into an awaitable.
pub(super) enum Input<'py> {
    Send(Bound<'py, PyAny>),
    Throw(PyErr),
}

/// The awaitable returned by `AsyncDriver.__anext__`: one pull, with a coroutine's protocol
/// (`__await__`, `send`, `throw`, `close`). Like a coroutine it does nothing until first sent
/// to; dropped while suspended, it is closed as a coroutine would be.
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
    /// One step of the pull: what it yields to the event loop, or the piece it returns.
    pub(super) fn resume<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> PyResult<Sent<'py>> {
        let py = slf.py();
        let Some(mut step) = try_lock(py, &slf.get().step) else {
            return Err(PyValueError::new_err("coroutine already executing"));
        };
        let (driver, event) = match std::mem::replace(&mut *step, Step::Done) {
            Step::Done => {
                return Err(match input {
                    Input::Send(_) => {
                        PyRuntimeError::new_err("cannot reuse already awaited coroutine")
                    }
                    Input::Throw(err) => err,
                });
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
                    (driver.into_bound(py), Event::Next)
                }
            },
            Step::Pulling(driver, it, position) => {
                let it = it.into_bound(py);
                let sent = match input {
                    Input::Send(value) => send(&it, &value),
                    Input::Throw(err) => throw_into(&it, err),
                };
                match sent {
                    Ok(Sent::Yield(value)) => {
                        *step = Step::Pulling(driver, it.unbind(), position);
                        return Ok(Sent::Yield(value));
                    }
                    Ok(Sent::Return(item)) => (driver.into_bound(py), Event::Item(item, position)),
                    Err(err) => (driver.into_bound(py), Event::Raised(err)),
                }
            }
            Step::Handling(driver, coroutine) => {
                let coroutine = coroutine.into_bound(py);
                let sent = match input {
                    Input::Send(value) => send(&coroutine, &value),
                    Input::Throw(err) => throw_into(&coroutine, err),
                };
                match sent {
                    Ok(Sent::Yield(value)) => {
                        *step = Step::Handling(driver, coroutine.unbind());
                        return Ok(Sent::Yield(value));
                    }
                    Ok(Sent::Return(_)) => (driver.into_bound(py), Event::Next),
                    Err(err) => {
                        driver.get().running.store(false, Ordering::Release);
                        return Err(err);
                    }
                }
            }
        };
        let this = driver.get();
        match advance(&driver, event) {
            Action::Yield(next, value) => {
                *step = next;
                Ok(Sent::Yield(value))
            }
            Action::Deliver(out) => {
                drop(step);
                this.running.store(false, Ordering::Release);
                if let Ok(mut st) = this.st(py) {
                    if st.spare.is_none() {
                        st.spare = Some(slf.clone().unbind());
                    }
                }
                Ok(Sent::Return(out))
            }
            Action::Raise(err) => {
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

    /// `close()`: a `GeneratorExit` thrown in where the pull waits, which must end it.
    fn close_step(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let Some(mut step) = try_lock(py, &slf.get().step) else {
                return Err(PyValueError::new_err("coroutine already executing"));
            };
            if matches!(*step, Step::Start(_) | Step::Done) {
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
                if let Some(Step::Pulling(driver, ..) | Step::Handling(driver, _)) = &left {
                    driver.get().running.store(false, Ordering::Release);
                }
                if let Some(Step::Handling(_, coroutine)) = left {
                    coroutine.bind(py).call_method0(pyo3::intern!(py, "close"))?;
                }
                Err(PyRuntimeError::new_err("coroutine ignored GeneratorExit"))
            }
            Err(err) => {
                let err = made(py, err);
                if err.is_instance_of::<PyGeneratorExit>(py)
                    || err.is_instance_of::<PyStopIteration>(py)
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

    /// Resumes the pull with `value`; returns what it yields next, or raises `StopIteration`
    /// with the piece it returns.
    #[pyo3(signature = (value, /))]
    fn send<'py>(slf: &Bound<'py, Self>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        yielded(Self::resume(slf, Input::Send(value))?)
    }

    /// Raises `exc` where the pull waits (the upstream's awaitable, or the close in progress).
    #[pyo3(signature = (typ, val = None, tb = None, /))]
    fn throw<'py>(
        slf: &Bound<'py, Self>,
        typ: &Bound<'py, PyAny>,
        val: Option<&Bound<'py, PyAny>>,
        tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let val = val.filter(|val| !val.is_none());
        let exc = if typ.is_instance_of::<PyBaseException>() {
            if val.is_some() {
                return Err(PyTypeError::new_err(
                    "instance exception may not have a separate value",
                ));
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
            exc.call_method1(pyo3::intern!(slf.py(), "with_traceback"), (tb,))?;
        }
        let err = PyErr::from_value(exc);
        yielded(Self::resume(slf, Input::Throw(err))?)
    }

    /// Ends the pull where it waits, as a coroutine's `close()` does.
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
                Step::Pulling(driver, obj, _) | Step::Handling(driver, obj) => {
                    visit.call(driver)?;
                    visit.call(obj)?;
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
        if let Some(Step::Pulling(driver, ..) | Step::Handling(driver, _)) = &old {
            driver.get().running.store(false, Ordering::Release);
        }
        drop(old);
    }
}

impl AsyncPullStep {
    /// The finalizer's work: abandoned while suspended, the pull is closed, as the finalizer
    /// of a coroutine closes it (the upstream's awaitable is closed, then the pull ends by the
    /// policy for an upstream error). Nobody is left to tell of a failure but
    /// `sys.unraisablehook`. Not while the interpreter finalizes: the upstream's modules may be
    /// gone, and the event loop with them.
    pub(super) fn finalize(slf: &Bound<'_, Self>) {
        let py = slf.py();
        let suspended = try_lock(py, &slf.get().step)
            .is_some_and(|s| matches!(*s, Step::Pulling(..) | Step::Handling(..)));
        if suspended && !super::slots::finalizing() {
            if let Err(err) = Self::close_step(slf) {
                err.write_unraisable(py, None);
            }
        }
    }
}
