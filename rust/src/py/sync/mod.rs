//! The native pull iterator `StopStream`: wraps an upstream iterable of `str` or bytes chunks.
//! Its driver, `SyncDriver`, is here; `fast` is `wrap`'s per-chunk path, `close` closes the
//! upstream objects, and `slots` sets the finalizers.

mod close;
mod fast;
mod slots;

pub(super) use slots::install;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyTuple};
use pyo3::PyTraverseError;

use self::close::{close_object, shut_down_connection};
use super::errors::wrong_type;
use super::ffi::pull;
use super::lock::try_lock;
use super::report::{reports, Reports};
use super::stages::{BuiltIn, Out, Slot, Stage};
use super::stopset::{IncludeStop, StopSetRef};
use crate::host::sync::{Driver, Host};
use crate::host::Lifecycle;
use crate::lock::TryLock;
use crate::{Detail, Filter, Status, StopReport};

#[allow(clippy::large_enum_variant, reason = "one per stream, made once and never moved")]
pub(super) enum Mode {
    /// The built-in filter (`wrap`): `None` until the first item decides between text and
    /// bytes (and after the collector cleared a stage).
    BuiltIn(Slot),
    /// The provider adapters' stage: the native SSE stage or a Python one. Several output
    /// items of one push are queued here.
    Stage(Stage),
}

impl Mode {
    fn status(&self) -> Status {
        match self {
            Mode::BuiltIn(Some(f)) => f.status(),
            Mode::BuiltIn(None) | Mode::Stage(_) => Status::Open,
        }
    }

    /// The built-in filter, once it exists.
    pub(super) fn filter(&self) -> Option<&Filter> {
        match self {
            Mode::BuiltIn(slot) => slot.as_ref(),
            Mode::Stage(_) => None,
        }
    }
}

/// The lifecycle's state over the bindings' objects.
pub(super) type Life = Lifecycle<Py<PyAny>, PyErr>;

pub(super) struct StreamState {
    /// The upstream iterator, pull positions and the lifecycle's state: output owed (a stage's
    /// items), an error deferred past it (a failing close after a stop, or the decoding error
    /// of contract §9.9), and whether the stream may pull again.
    pub(super) drive: Driver<Py<PyAny>, PyErr>,
    pub(super) feeding: Feeding,
}

/// What turns items into output.
pub(super) struct Feeding {
    pub(super) mode: Mode,
    /// The stage wants no more input (it reported `closing` after its last push).
    pub(super) closing: bool,
}

impl Feeding {
    /// Whether the item just fed ended the input: a stop fired, or the stage is closing.
    fn closing(&self) -> bool {
        self.closing || matches!(self.mode.status(), Status::Stopped(_))
    }
}

/// The Python side of the core driver's calls ([`Host`]).
pub(super) struct Calls<'a, 'py> {
    py: Python<'py>,
    driver: &'a SyncDriver,
    feeding: &'a mut Feeding,
}

impl Host for Calls<'_, '_> {
    type Obj = Py<PyAny>;
    type Err = PyErr;

    #[inline]
    fn next(&mut self, iterator: &Py<PyAny>) -> Option<PyResult<Py<PyAny>>> {
        pull(self.py, iterator).map(|r| r.map(Bound::unbind))
    }

    #[inline]
    fn close_requested(&self) -> bool {
        self.driver.close_requested.load(Ordering::Acquire)
    }

    #[inline]
    fn feed(
        &mut self,
        life: &mut Life,
        item: Py<PyAny>,
        position: usize,
    ) -> PyResult<(Option<Py<PyAny>>, bool)> {
        let (py, item) = (self.py, item.into_bound(self.py));
        let out = self.driver.feed_item(py, self.feeding, life, &item, position)?;
        Ok((out.map(Bound::unbind), self.feeding.closing()))
    }

    fn end_stage(&mut self, life: &mut Life) -> PyResult<()> {
        let owed = self.driver.finish_mode(self.py, self.feeding, life)?;
        life.owed(owed);
        Ok(())
    }

    fn take_source(&mut self) -> Option<Py<PyAny>> {
        self.driver.take_source()
    }

    fn close(&mut self, object: Py<PyAny>) -> PyResult<()> {
        close_object(object.bind(self.py))
    }

    fn chain(&self, err: &PyErr, context: PyErr) {
        err.set_context(self.py, Some(context));
    }

    fn report(&self, err: PyErr) {
        err.write_unraisable(self.py, None);
    }
}

/// The sync driver of the stream lifecycle (contract §9), over the built-in text or bytes
/// filter (`wrap`) or over a Python stage (the provider adapters' sync streams).
///
/// `__next__` holds the state lock for its whole call, upstream pull included: one uncontended
/// lock per chunk. A second `__next__` meanwhile (another thread, or re-entry from the upstream)
/// finds the lock taken and raises `RuntimeError`, as a generator that is already executing
/// does. A `close()` meanwhile never waits for it: it records the request, closes at once what
/// can be closed while the pull runs (the object given, when it is not the iterator itself: an
/// SDK stream, whose `close()` drops the connection and so ends the pending read), and the
/// running `__next__` closes the rest as soon as its pull returns, then ends the stream. The
/// attributes are read from a snapshot published after every `__next__`, so they never wait and
/// can be read from anywhere, upstream code included.
///
/// The rules are carried out by the core's [`Driver`]; the async driver
/// (`stopstream._lifecycle.AsyncPull`) follows the same [`Lifecycle`], and one test matrix
/// checks both over every entry point.
#[pyclass(frozen, subclass, module = "stopstream._core")]
pub(super) struct SyncDriver {
    /// The built-in filter's options (unused by a stage), and the attributes' report.
    built: BuiltIn,
    state: TryLock<StreamState>,
    /// The object given, when it is not its own iterator (an SDK stream): closed too. Outside
    /// the state lock, so that `close()` reaches it during a pull; taken only for a reference
    /// count, never across a call.
    source: Mutex<Option<Py<PyAny>>>,
    /// `close()` was called; a `__next__` running then ends the stream on its way out.
    pub(super) close_requested: AtomicBool,
}

impl SyncDriver {
    /// The object given, taken: it is closed, or let go of, once.
    fn take_source(&self) -> Option<Py<PyAny>> {
        self.source.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// `f` of the core driver, with this driver's Python side as its host.
    #[inline]
    pub(super) fn with<'py, R>(
        &self,
        py: Python<'py>,
        st: &mut StreamState,
        f: impl FnOnce(&mut Driver<Py<PyAny>, PyErr>, &mut Calls<'_, 'py>) -> R,
    ) -> R {
        let StreamState { drive, feeding } = st;
        f(drive, &mut Calls { py, driver: self, feeding })
    }

    /// `close()` from another thread during a pull: the object given is closed now (an SDK
    /// stream, whose `close()` drops the connection and so ends the read the iterator waits
    /// on); the pull closes the iterator as it returns. Nobody is left to tell of a failure but
    /// `sys.unraisablehook`.
    fn close_source(&self, py: Python<'_>) {
        let Some(source) = self.take_source() else { return };
        let source = source.bind(py);
        shut_down_connection(source);
        if let Err(err) = close_object(source) {
            err.write_unraisable(py, None);
        }
    }

    /// The finalizer's work (`slots::install`): a stream dropped before its end, reference
    /// cycles included (the collector finalizes a dead cycle before clearing any of it), closes
    /// its upstream, as a generator's finalizer runs its `finally`.
    pub(super) fn finalize(&self, py: Python<'_>) {
        if let Some(mut st) = try_lock(py, &self.state) {
            self.with(py, &mut st, |d, host| d.close_quietly(host));
        }
    }

    /// Publishes the attributes after a change of state.
    #[allow(clippy::inline_always, reason = "after every fed chunk: a call otherwise (callgrind)")]
    #[inline(always)]
    pub(super) fn publish(&self, st: &StreamState) {
        self.built.publish(st.feeding.mode.filter());
    }

    /// Feeds one upstream item; `Ok(None)` when it produced no output.
    pub(super) fn feed_item<'py>(
        &self,
        py: Python<'py>,
        feeding: &mut Feeding,
        life: &mut Life,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let stage = match &mut feeding.mode {
            Mode::Stage(stage) => stage,
            Mode::BuiltIn(slot) => {
                let defer = |e| life.defer(e, |e, c| e.set_context(py, Some(c)));
                return self.built.feed(py, slot, item, position, defer);
            }
        };
        let pushed = stage.push(py, item, position)?;
        feeding.closing = pushed.closing;
        Ok(match pushed.out {
            Out::None => None,
            Out::One(out) => Some(out),
            Out::Many(list) => {
                life.owed(list.iter().map(Bound::unbind));
                None
            }
        })
    }

    /// The upstream is done: what the filter still holds, or the stage still owes.
    pub(super) fn finish_mode(
        &self,
        py: Python<'_>,
        feeding: &mut Feeding,
        life: &mut Life,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let chain = |e: &PyErr, c| e.set_context(py, Some(c));
        match &mut feeding.mode {
            Mode::Stage(stage) => {
                let (owed, err) = stage.end(py)?;
                if let Some(err) = err {
                    life.defer(err, chain);
                }
                Ok(owed)
            }
            Mode::BuiltIn(slot) => {
                let out = self.built.finish(py, slot, |e| life.defer(e, chain))?;
                Ok(out.map(Bound::unbind).into_iter().collect())
            }
        }
    }
}

impl SyncDriver {
    /// A driver over `chunks`: the built-in filter (`stops` given) or `stage`.
    fn build(
        py: Python<'_>,
        chunks: &Bound<'_, PyAny>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: IncludeStop,
        errors: &str,
        stage: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let built = BuiltIn::new(py, stops, include_stop, errors)?;
        let upstream = PyIterator::from_object(chunks).map_err(|_| {
            let what = if stage.is_some() { "stream" } else { "chunks" };
            wrong_type(format_args!("{what} must be iterable"), chunks)
        })?;
        // The object given, when it is not its own iterator (an SDK stream), is closed too.
        let source = (!upstream.is(chunks)).then(|| chunks.clone().unbind());
        let mode = match stage {
            Some(stage) => Mode::Stage(Stage::of(stage)),
            None => Mode::BuiltIn(None),
        };
        Ok(SyncDriver {
            built,
            state: TryLock::new(StreamState {
                drive: Driver::new(upstream.into_any().unbind()),
                feeding: Feeding { mode, closing: false },
            }),
            source: Mutex::new(source),
            close_requested: AtomicBool::new(false),
        })
    }
}

#[pymethods]
impl SyncDriver {
    /// A driver of `stage` over `source` (the adapters' sync streams subclass it; further
    /// arguments are theirs).
    #[new]
    #[pyo3(signature = (source, stage, *_args, **_kwargs))]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        stage: &Bound<'_, PyAny>,
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        SyncDriver::build(py, source, None, IncludeStop::default(), "strict", Some(stage))
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(mut st) = try_lock(py, &self.state) else {
            return Err(PyRuntimeError::new_err(
                "stream is already being iterated (concurrent or re-entrant call)",
            ));
        };
        let mut result = self.next_fast(py, &mut st);
        if self.close_requested.load(Ordering::Acquire) {
            // Closed from elsewhere while the item was fed: the stream ends.
            let fed = result.map(|out| out.map(Bound::unbind));
            let settled = self.with(py, &mut st, |d, host| d.settle(host, fed));
            result = settled.map(|out| out.map(|o| o.into_bound(py)));
        }
        self.publish(&st);
        drop(st);
        if self.close_requested.load(Ordering::Acquire) {
            // A `close()` that came after the check above found the lock taken and left its
            // request (possible only in a free-threaded build): carry it out now.
            self.finalize(py);
        }
        result
    }

    /// Ends the stream and closes the upstream (once; later calls do nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.close_requested.store(true, Ordering::Release);
        if let Some(mut st) = try_lock(py, &self.state) {
            return self.with(py, &mut st, |d, host| d.close(host));
        }
        // A `__next__` is running (another thread, or this call comes from the upstream): close
        // at once what can be closed while the iterator runs; the running call closes the rest
        // as soon as its pull returns. Never raises, never waits.
        self.close_source(py);
        Ok(())
    }

    /// The finalizer, by name: a subclass made in Python takes its `tp_finalize` from a
    /// `__del__` in its bases (CPython's slot rules), and the native slot set by
    /// `slots::install` carries none.
    #[pyo3(name = "__del__")]
    fn del(&self, py: Python<'_>) {
        self.finalize(py);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // A stream in use is reachable anyway; only an idle one can be part of garbage.
        // SAFETY: the collector calls `tp_traverse` on an attached thread (holding the GIL in a
        // GIL build), which is what the lock relies on.
        #[allow(unsafe_code)]
        let guard = unsafe { self.state.try_acquire() };
        if let Some(st) = guard {
            visit.call(st.drive.iterator())?;
            if let Mode::Stage(stage) = &st.feeding.mode {
                stage.traverse(&visit)?;
            }
            for item in st.drive.life.queued() {
                visit.call(item)?;
            }
        }
        if let Ok(source) = self.source.try_lock() {
            visit.call(source.as_ref())?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // The collector has already run the finalizer (finalizers of a dead cycle run before
        // anything in it is cleared); dropping the references is all that is left.
        Python::attach(|py| {
            if let Some(mut st) = try_lock(py, &self.state) {
                st.drive.clear(drop);
                if matches!(st.feeding.mode, Mode::Stage(_)) {
                    st.feeding.mode = Mode::BuiltIn(None);
                }
            }
            drop(self.take_source());
        });
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

/// `wrap`'s stream: the sync driver over the built-in text or bytes filter, and what the filter
/// reports (read from the snapshot the driver publishes after every `__next__`).
#[pyclass(frozen, extends = SyncDriver, module = "stopstream._core")]
pub(super) struct StopStream;

/// The driver under a `StopStream`.
fn base<'a>(slf: &'a Bound<'_, StopStream>) -> &'a SyncDriver {
    slf.as_super().get()
}

reports! {
    impl StopStream {
        #[new]
        #[pyo3(signature = (chunks, stops = None, include_stop = IncludeStop::default(), errors = "strict"))]
        #[pyo3(text_signature = "(chunks, stops=None, include_stop=False, errors='strict')")]
        fn new(
            py: Python<'_>,
            chunks: &Bound<'_, PyAny>,
            stops: Option<&Bound<'_, PyAny>>,
            include_stop: IncludeStop,
            errors: &str,
        ) -> PyResult<PyClassInitializer<Self>> {
            let driver = SyncDriver::build(py, chunks, stops, include_stop, errors, None)?;
            Ok(PyClassInitializer::from(driver).add_subclass(StopStream))
        }
    }
}

impl Reports for StopStream {
    fn stop_list<'a>(slf: &'a Bound<'_, Self>) -> &'a StopSetRef {
        &base(slf).built.stops
    }

    fn includes_stop(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(base(slf).built.include_stop)
    }

    fn stop_report(slf: &Bound<'_, Self>, detail: Detail) -> PyResult<StopReport> {
        Ok(base(slf).built.stop_report(detail))
    }
}
