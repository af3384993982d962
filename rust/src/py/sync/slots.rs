//! The finalizer of `ffi.rs`, set on the sync driver, `SyncDriver`, and on `StopStream`, its
//! subclass.

use pyo3::prelude::*;

use super::super::ffi::{install_finalizer, Finalize};
use super::{StopStream, SyncDriver};

impl Finalize for SyncDriver {
    const SLOT: usize = 1;
    fn finalize(slf: &Bound<'_, Self>) {
        slf.get().finalize(slf.py());
    }
}

impl Finalize for StopStream {
    const SLOT: usize = 2;
    fn finalize(slf: &Bound<'_, Self>) {
        slf.as_super().get().finalize(slf.py());
    }
}

/// Sets the finalizers of the sync driver and `StopStream` (see `ffi.rs`).
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
    // The sync driver and `StopStream`, before any subclass of them is made (which inherits
    // the finalizer).
    install_finalizer::<SyncDriver>(py)?;
    install_finalizer::<StopStream>(py)?;
    Ok(())
}
