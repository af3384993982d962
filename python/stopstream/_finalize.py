"""Closing a stream's upstream when the stream is dropped, reference cycles included.

``wrap`` passes this class to the native stream, which makes one over the objects to close
(the native code never imports the package back). Its ``__del__`` is a finalizer, and the
garbage collector runs every finalizer of a dead cycle before it clears any object in it, so the
upstream is closed while still intact even when stream and upstream die together. (A native
class cannot have a finalizer of its own.)
"""

from __future__ import annotations

import inspect


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
        """Closes the targets other than the iterator (the first), which is running: an SDK
        stream's ``close()`` drops its connection, and so ends the read the iterator waits on."""
        iterator, others = self.targets[:1], self.targets[1:]
        self.targets = iterator
        UpstreamCloser(*others).close()

    def disarm(self) -> None:
        """The upstream ran out by itself: nothing to close."""
        self.targets = ()

    def __del__(self) -> None:
        self.close()
