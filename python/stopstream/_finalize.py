"""Closing a stream's upstream when the stream is dropped, reference cycles included.

``wrap`` passes this class to the native stream, which makes one over the objects to close
(the native code never imports the package back). Its ``__del__`` is a finalizer, and the
garbage collector runs every finalizer of a dead cycle before it clears any object in it, so the
upstream is closed while still intact even when stream and upstream die together. (A native
class cannot have a finalizer of its own.)
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable


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
                    close()
                except Exception as exc:
                    errors.append(exc)
        if errors:
            raise errors[0]

    def disarm(self) -> None:
        """The upstream ran out by itself: nothing to close."""
        self.targets = ()

    def __del__(self) -> None:
        self.close()


async def aclose_all(objects: Iterable[object]) -> None:
    """Closes each object: ``aclose()`` where it has one, else ``close()`` (awaited when it
    returns an awaitable, as the SDKs' async streams' ``close()`` does). All are closed even if
    one fails; the first error is raised afterwards."""
    error: BaseException | None = None
    for obj in objects:
        close = getattr(obj, "aclose", None)
        if not callable(close):
            close = getattr(obj, "close", None)
        if not callable(close):
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:
            if error is None:
                error = exc
    if error is not None:
        raise error
