//! Python bindings: convert, call the core, map errors. Nothing else lives here.
//!
//! One file per concern, each using only those before it: `ffi` (the raw CPython plumbing the
//! others share), `lock` (the per-object lock helpers), `convert` (chunks in and out), `errors`
//! (exception mapping), `items` (`Stop` and `Regex`), `stopset` (compiled stop lists), `report`
//! (the stop attributes), `filters` (the push filters), `truncate` (one shot), `tokens` (token
//! ids in); then the drivers' parts, one folder each: `stages` (the one stage type of both
//! drivers, and the native stages: the built-in filter, and the adapters' `sse` and `sdk`),
//! `sync` (the sync driver, `wrap`'s per-chunk path, closing upstream objects, the finalizers)
//! and `aio` (the async driver, its awaitable, `await`'s rules, the async close, the
//! awaitable's slots). This file holds the module, which registers the classes of them all.
//!
//! Performance choices:
//! * ASCII `str` chunks are read in place; other chunks are encoded onto the stack from the
//!   string's own storage, so CPython never builds a UTF-8 copy per chunk. A chunk that passes
//!   through whole is returned as the very same object.
//! * Classes are `frozen`: no borrow flag. Per-object state sits behind a try-lock (the core's
//!   `lock.rs`): a plain flag under the GIL, an atomic in a free-threaded build. Filters take it
//!   only around their pure-Rust work, building Python objects before and after, so no Python
//!   code (not even a garbage-collection finalizer) runs while they hold it; in a free-threaded
//!   build concurrent calls on one filter are serialized. The stream holds it across its
//!   upstream pull and refuses a second entry instead.
//! * The GIL is released only for one-shot `truncate` on large texts; for token-sized chunks a
//!   release costs more than the scan.
//! * Compiled stop lists are shared: a small cache of recent lists (`stopset.rs`; compared item
//!   by item, or by identity for the same tuple), then the core's cache (`CompiledStops::literal`).

mod aio;
mod convert;
mod errors;
mod ffi;
mod filters;
mod items;
mod lock;
mod report;
mod stages;
mod stopset;
mod sync;
mod tokens;
mod truncate;

use pyo3::prelude::*;

/// Names of the module that are the package's own machinery, not its API.
const PRIVATE: [&str; 7] = [
    "AsyncDriver",
    "AsyncPullStep",
    "SyncDriver",
    "_FilterStage",
    "_SDKStage",
    "_SSEStage",
    "_tokenizer_tokens",
];

/// The compiled part of `stopstream`.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<filters::StopFilter>()?;
    m.add_class::<filters::ByteStopFilter>()?;
    m.add_class::<items::Stop>()?;
    m.add_class::<items::Regex>()?;
    m.add_class::<sync::SyncDriver>()?;
    m.add_class::<sync::StopStream>()?;
    m.add_class::<aio::AsyncDriver>()?;
    m.add_class::<aio::AsyncPullStep>()?;
    aio::install(m.py())?;
    sync::install(m.py())?;
    m.add_class::<stopset::PyStopSet>()?;
    m.add_class::<stages::FilterStage>()?;
    m.add_class::<stages::SSEStage>()?;
    m.add_class::<stages::SdkStage>()?;
    m.add_function(wrap_pyfunction!(truncate::truncate, m)?)?;
    m.add_class::<tokens::Vocab>()?;
    m.add_function(wrap_pyfunction!(tokens::tokenizer_tokens, m)?)?;
    m.add_class::<tokens::TokenPiece>()?;
    m.add_class::<tokens::TokenStopFilter>()?;
    m.add_function(wrap_pyfunction!(tokens::feed_batch, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The machinery the Python side of the package drives stays importable by name, but is
    // not exported: `__all__` lists the public API only.
    let all = m.index()?;
    for name in PRIVATE {
        all.call_method1("remove", (name,))?;
    }
    Ok(())
}
