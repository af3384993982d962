"""Closing a stream's upstream when the stream is dropped, reference cycles included.

``wrap`` passes this class to the native stream, which makes one over the objects to close
(the native code never imports the package back). Its ``__del__`` is a finalizer, and the
garbage collector runs every finalizer of a dead cycle before it clears any object in it, so the
upstream is closed while still intact even when stream and upstream die together. (A native
class cannot have a finalizer of its own.)
"""

from __future__ import annotations

import inspect
import socket


def _shut_down_connection(stream: object) -> None:
    """Shuts down the socket under an SDK stream's HTTP/1 response (``stream.response``).

    Closing a socket does not wake a thread blocked reading it (on Linux the read goes on until
    data comes, and no FIN is sent meanwhile), so the response's own ``close()`` alone would
    leave the reading thread waiting and the generation running. ``shutdown`` ends the read at
    once and tells the server. The socket comes from httpcore's documented ``network_stream``
    response extension (httpx and httpx2); an HTTP/2 connection carries other streams too and
    is left to the response's ``close()``.
    """
    response = getattr(stream, "response", None)
    extensions = getattr(response, "extensions", None)
    if not isinstance(extensions, dict):
        return
    if str(getattr(response, "http_version", "")).upper().startswith("HTTP/2"):
        return
    network = extensions.get("network_stream")
    get_extra_info = getattr(network, "get_extra_info", None)
    if not callable(get_extra_info):
        return
    try:
        sock = get_extra_info("socket")
        if isinstance(sock, socket.socket):
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class UpstreamCloser:
    """Calls ``close()`` once on each target that has one, when asked or when dropped."""

    __slots__ = ("targets",)

    def __init__(self, *targets: object) -> None:
        self.targets: tuple[object, ...] = targets

    def close(self) -> None:
        targets, self.targets = self.targets, ()
        errors: list[BaseException] = []
        for target in targets:
            close = getattr(target, "close", None)
            if close is not None:
                try:
                    result = close()
                    if inspect.isawaitable(result):
                        # An async object given to a sync stream: nothing here can await it.
                        close_coroutine = getattr(result, "close", None)
                        if callable(close_coroutine):
                            close_coroutine()
                except Exception as exc:
                    errors.append(exc)
        if errors:
            raise errors[0]

    def close_source(self) -> None:
        """Closes the targets other than the iterator (the first), which is running in another
        thread: an SDK stream's ``close()`` drops its connection, which ends the read the
        iterator waits on."""
        iterator, others = self.targets[:1], self.targets[1:]
        self.targets = iterator
        for target in others:
            _shut_down_connection(target)
        UpstreamCloser(*others).close()

    def disarm(self) -> None:
        """The upstream ran out by itself: nothing to close."""
        self.targets = ()

    def __del__(self) -> None:
        self.close()
