//! The built-in filter as a stream's stage: `wrap`'s, which the sync driver holds in its own
//! state, and `awrap`'s (`_FilterStage`), which the async driver feeds. The first item decides
//! between text and bytes; what a stream's attributes report is published after each change.
//! Also the step of one exact chunk ([`feed_exact`]), which `awrap`'s stage and `wrap`'s
//! per-chunk path share.

use std::borrow::Cow;

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::super::convert::{bytes_out, chunk_bytes, chunk_utf8, joined_str, make_str, str_out};
use super::super::errors::{map_error, parse_errors, type_name};
use super::super::lock::try_lock;
use super::super::report::{reports, Reports};
use super::super::stopset::{resolve, IncludeStop, SkipArgs, StopSetRef};
use crate::host::Published;
use crate::lifecycle::defer_into;
use crate::lock::TryLock;
use crate::{Detail, Filter, Status, StopReport};

/// The built-in filter's state: `None` until the first item decides between text and bytes.
pub(crate) type Slot = Option<Filter>;

/// The built-in filter's options, and what its stream's attributes report.
pub(crate) struct BuiltIn {
    pub(crate) stops: StopSetRef,
    pub(crate) include_stop: bool,
    replace: bool,
    /// Published after every change, so reading an attribute never waits for (or re-enters)
    /// a pull in progress.
    published: Published,
}

impl BuiltIn {
    pub(crate) fn new(
        py: Python<'_>,
        stops: Option<&Bound<'_, PyAny>>,
        include_stop: IncludeStop,
        errors: &str,
    ) -> PyResult<Self> {
        let replace = parse_errors(errors)?;
        let (stops, include_stop) = resolve(py, stops, include_stop, SkipArgs::default())?;
        Ok(BuiltIn { stops, include_stop, replace, published: Published::new() })
    }

    /// Feeds the `position`-th item: its output (`None` when empty). A decoding error owed
    /// after a stop (contract §9.9) goes to `defer`.
    pub(crate) fn feed<'py>(
        &self,
        py: Python<'py>,
        slot: &mut Slot,
        item: &Bound<'py, PyAny>,
        position: usize,
        defer: impl FnOnce(PyErr),
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let f = if let Some(f) = slot {
            f
        } else {
            let bytes = if item.is_instance_of::<PyString>() {
                false
            } else if chunk_bytes(item)?.is_some() {
                true
            } else {
                return Err(PyTypeError::new_err(format!(
                    "item at position {position} must be str or bytes-like, not {}",
                    type_name(item)
                )));
            };
            slot.insert(Filter::new(&self.stops.core, bytes, self.include_stop, self.replace))
        };
        let out = if f.is_bytes() {
            let Some(bytes) = chunk_bytes(item)? else {
                return Err(PyTypeError::new_err(format!(
                    "item at position {position} is {}, but the stream started with bytes",
                    type_name(item)
                )));
            };
            let out = f
                .feed(&bytes)
                .map(|out| (!out.is_empty()).then(|| bytes_out(py, item, out).into_any()));
            out.map_err(|e| map_error(py, &e))?
        } else {
            let Ok(text) = item.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "item at position {position} is {}, but the stream started with str",
                    type_name(item)
                )));
            };
            let mut stack = None;
            let bytes = chunk_utf8(text, &mut stack)?;
            let out = f.feed(&bytes).map_err(|e| map_error(py, &e))?;
            if out.is_empty() {
                None
            } else {
                let made = match str_out(py, text, out) {
                    Ok(made) => made,
                    Err(surrogates) => make_str(py, &surrogates),
                };
                Some(made?.into_any())
            }
        };
        if let Some(e) = f.take_owed() {
            defer(map_error(py, &e));
        }
        Ok(out)
    }

    /// The upstream is done: what the filter still holds (`None` when nothing).
    pub(crate) fn finish<'py>(
        &self,
        py: Python<'py>,
        slot: &mut Slot,
        defer: impl FnOnce(PyErr),
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        // An empty upstream ends like any other stream.
        let f = slot
            .get_or_insert_with(|| Filter::new(&self.stops.core, false, self.include_stop, false));
        let bytes = f.is_bytes();
        let out = match f.finish() {
            Ok([]) => None,
            Ok(held) if bytes => Some(PyBytes::new(py, held).into_any()),
            Ok(held) => Some(make_str(py, held)?.into_any()),
            Err(e) => return Err(map_error(py, &e)),
        };
        if let Some(e) = f.take_owed() {
            defer(map_error(py, &e));
        }
        Ok(out)
    }

    /// Publishes the attributes after a change of state.
    #[allow(clippy::inline_always, reason = "after every fed chunk: a call otherwise (callgrind)")]
    #[inline(always)]
    pub(crate) fn publish(&self, slot: Option<&Filter>) {
        self.published.publish(slot);
    }

    /// The report last published ([`crate::host::Published::stop_report`]).
    pub(crate) fn stop_report(&self, detail: Detail) -> StopReport {
        self.published.stop_report(self.stops.set(), self.include_stop, detail)
    }
}

/// What [`feed_exact`] did with a chunk.
pub(crate) enum Fed<'py> {
    /// It passes through whole, and the filter is as it was (open, nothing held).
    Whole,
    /// The filter refused it, and is as it was.
    Refused,
    /// Fed: the output (`None` when nothing is released), and the filter's status after.
    Out(PyResult<Option<Bound<'py, PyAny>>>, Status),
}

/// One exact `str` (or, over bytes, `bytes`) chunk through the built-in filter, the step of
/// `wrap`'s fast path and of `awrap`'s stage; `None` for any other item, or before the first,
/// which the general path takes. A decoding error owed after a stop goes to `defer`.
#[allow(
    clippy::inline_always,
    reason = "a call per chunk otherwise: 70 instructions of `awrap`'s 2,376 for a chunk that may start a stop (callgrind)"
)]
#[inline(always)]
pub(crate) fn feed_exact<'py>(
    py: Python<'py>,
    f: &mut Filter,
    item: &Bound<'py, PyAny>,
    defer: impl FnOnce(PyErr),
) -> Option<Fed<'py>> {
    let mut stack = None;
    let bytes_stream = f.is_bytes();
    let bytes = if bytes_stream {
        Cow::Borrowed(item.cast_exact::<PyBytes>().ok()?.as_bytes())
    } else {
        chunk_utf8(item.cast_exact::<PyString>().ok()?, &mut stack).ok()?
    };
    // An empty chunk is fed (it releases nothing) rather than handed on.
    if !bytes.is_empty() && f.pass_whole(&bytes) {
        return Some(Fed::Whole);
    }
    let Ok(fed) = f.feed(&bytes) else { return Some(Fed::Refused) };
    let out = if fed.is_empty() {
        Ok(None)
    } else if fed.whole {
        Ok(Some(item.clone()))
    } else if bytes_stream {
        Ok(Some(bytes_out(py, item, fed).into_any()))
    } else {
        joined_str(py, fed.head, fed.bytes).map(|s| Some(s.into_any()))
    };
    if let Some(e) = f.take_owed() {
        defer(map_error(py, &e));
    }
    Some(Fed::Out(out, f.status()))
}

/// The state of `awrap`'s filter: the filter, and the decoding error owed after its stop.
type StageState = (Slot, Option<PyErr>);

/// Keeps `err` to raise after the last output, by the lifecycle's rule ([`defer_into`]).
fn defer(py: Python<'_>, owed: &mut Option<PyErr>, err: PyErr) {
    defer_into(owed, err, |first, err| first.set_context(py, Some(err)));
}

/// `awrap`'s stage: the built-in filter, fed by the async driver item by item (no Python call
/// per item), with what `awrap`'s stream reports.
#[pyclass(frozen, module = "stopstream._core", name = "_FilterStage")]
pub(crate) struct FilterStage {
    built: BuiltIn,
    state: TryLock<StageState>,
}

impl FilterStage {
    fn state(&self, py: Python<'_>) -> PyResult<crate::lock::Guard<'_, StageState>> {
        try_lock(py, &self.state)
            .ok_or_else(|| PyRuntimeError::new_err("filter called re-entrantly while in use"))
    }

    /// Feeds one item: its output (`None` when empty) and whether a stop fired.
    ///
    /// An exact `str` (or, over bytes, `bytes`) chunk takes `wrap`'s per-chunk step; a chunk
    /// that passes through whole is handed back as is, and leaves the report as it was (open,
    /// nothing held), so nothing is published. Through the general step an item takes about
    /// 250 more instructions (callgrind).
    #[inline]
    pub(crate) fn push<'py>(
        &self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
        position: usize,
    ) -> PyResult<(Option<Bound<'py, PyAny>>, bool)> {
        let mut st = self.state(py)?;
        let (slot, owed) = &mut *st;
        let fed = slot.as_mut().and_then(|f| feed_exact(py, f, item, |err| defer(py, owed, err)));
        let out = match fed {
            Some(Fed::Whole) => return Ok((Some(item.clone()), false)),
            Some(Fed::Out(out, _)) => out,
            // The general step feeds it again, and raises.
            None | Some(Fed::Refused) => {
                self.built.feed(py, slot, item, position, |err| defer(py, owed, err))
            }
        };
        let slot = st.0.as_ref();
        let stopped = slot.is_some_and(|f| matches!(f.status(), Status::Stopped(_)));
        self.built.publish(slot);
        Ok((out?, stopped))
    }

    /// The decoding error owed after the stop that [`FilterStage::push`] or
    /// [`FilterStage::end`] reported (contract §9.9), taken: the driver raises it after the
    /// last output.
    pub(super) fn owed(&self, py: Python<'_>) -> PyResult<Option<PyErr>> {
        Ok(self.state(py)?.1.take())
    }

    /// The upstream is done: what the filter still holds (`None` when nothing).
    pub(super) fn end<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut st = self.state(py)?;
        let (slot, owed) = &mut *st;
        let out = self.built.finish(py, slot, |err| defer(py, owed, err));
        self.built.publish(st.0.as_ref());
        out
    }
}

reports! {
    impl FilterStage {
        #[new]
        #[pyo3(signature = (stops = None, include_stop = IncludeStop::default(), errors = "strict"))]
        #[pyo3(text_signature = "(stops=None, include_stop=False, errors='strict')")]
        fn new(
            py: Python<'_>,
            stops: Option<&Bound<'_, PyAny>>,
            include_stop: IncludeStop,
            errors: &str,
        ) -> PyResult<Self> {
            let built = BuiltIn::new(py, stops, include_stop, errors)?;
            Ok(FilterStage { built, state: TryLock::new((None, None)) })
        }
    }
}

impl Reports for FilterStage {
    fn stop_list<'a>(slf: &'a Bound<'_, Self>) -> &'a StopSetRef {
        &slf.get().built.stops
    }

    fn includes_stop(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(slf.get().built.include_stop)
    }

    fn stop_report(slf: &Bound<'_, Self>, detail: Detail) -> PyResult<StopReport> {
        Ok(slf.get().built.stop_report(detail))
    }
}
