//! Closing upstream objects: a sync stream's `close()` calls, and the socket shutdown that ends a
//! read another thread is blocked in.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::super::ffi::{is_awaitable, optional_attr};

/// Calls `target.close()` where it has one. An async object given to a sync stream returns an
/// awaitable that nothing here can await: it is closed instead, unrun.
pub(super) fn close_object(target: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = target.py();
    let Some(close) = optional_attr(target, pyo3::intern!(py, "close"))? else { return Ok(()) };
    let result = close.call0()?;
    if !result.is_none() && is_awaitable(&result)? {
        if let Some(close) = optional_attr(&result, pyo3::intern!(py, "close"))? {
            if close.is_callable() {
                close.call0()?;
            }
        }
    }
    Ok(())
}

/// Shuts down the socket under an SDK stream's HTTP/1 response (`stream.response`).
///
/// Closing a socket does not wake a thread blocked reading it (on Linux the read goes on until
/// data comes, and no FIN is sent meanwhile), so the response's own `close()` alone would leave
/// the reading thread waiting and the generation running. `shutdown` ends the read at once and
/// tells the server. The socket comes from httpcore's documented `network_stream` response
/// extension (httpx and httpx2); an HTTP/2 connection carries other streams too and is left to
/// the response's `close()`.
pub(super) fn shut_down_connection(stream: &Bound<'_, PyAny>) {
    let py = stream.py();
    let shut = || -> PyResult<()> {
        let Some(response) = stream.getattr_opt("response")? else { return Ok(()) };
        let Some(extensions) = response.getattr_opt("extensions")? else { return Ok(()) };
        let Ok(extensions) = extensions.cast::<PyDict>() else { return Ok(()) };
        if let Some(version) = response.getattr_opt("http_version")? {
            if version.str()?.to_str()?.to_ascii_uppercase().starts_with("HTTP/2") {
                return Ok(());
            }
        }
        let Some(network) = extensions.get_item("network_stream")? else { return Ok(()) };
        let Some(get_extra_info) = network.getattr_opt("get_extra_info")? else { return Ok(()) };
        if !get_extra_info.is_callable() {
            return Ok(());
        }
        let socket = py.import("socket")?;
        let sock = get_extra_info.call1(("socket",))?;
        if sock.is_instance(&socket.getattr("socket")?)? {
            sock.call_method1("shutdown", (socket.getattr("SHUT_RDWR")?,))?;
        }
        Ok(())
    };
    match shut() {
        Err(err) if err.is_instance_of::<PyOSError>(py) => {} // closed already
        Err(err) => err.write_unraisable(py, None),
        Ok(()) => {}
    }
}
