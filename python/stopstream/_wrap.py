"""Typed entry point of the native pull API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, overload

from stopstream._core import StopSet, StopStream

if TYPE_CHECKING:
    from stopstream._types import Stops

BytesLike = bytes | bytearray | memoryview


def stop_set(
    stops: Stops,
    include_stop: bool | None,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> StopSet:
    """``stops`` compiled, for the Python entry points: their ``include_stop=None`` means not
    given (``False``, or a ``StopSet``'s own), which the native classes spell by omission."""
    if include_stop is None:
        return StopSet(stops, skip=skip, skip_until=skip_until)
    return StopSet(stops, include_stop, skip=skip, skip_until=skip_until)


@overload
def wrap(
    chunks: Iterable[str],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> StopStream[str]: ...
@overload
def wrap(
    chunks: Iterable[BytesLike],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> StopStream[bytes]: ...
def wrap(
    chunks: Iterable[str] | Iterable[BytesLike],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> StopStream[str] | StopStream[bytes]:
    """Wrap an iterable of ``str`` (yields ``str``) or of bytes-like chunks (yields ``bytes``).

    ``stops``: ``None``, one ``str``, ``Stop`` or ``Regex``, an iterable of them, or a
    ``StopSet``; ``include_stop``: ``None`` (not given) means ``False``, or the ``StopSet``'s own.
    ``skip`` and ``skip_until``: skip regions the stops do not see (contract §6.4).

    The stream yields only non-empty pieces and ends right after the piece in which a stop
    fired, closing the upstream (``close()`` on the iterator and on ``chunks`` where they have
    one) as soon as the stop is seen; a close that fails then is raised on the next pull.
    Closing the stream, leaving its ``with`` block, or dropping it after partial iteration
    (reference cycles included) closes the upstream too, exactly once. ``close()`` from another
    thread during a pull returns at once and never raises: it closes ``chunks`` right away when
    it is not its own iterator (an SDK stream, whose ``close()`` drops the connection and so
    ends the pending read), and the pull closes the iterator as it returns. A bad item raises,
    ends the stream and closes the upstream (a failing close is the error's ``__context__``).
    An exception from the upstream propagates unchanged and ends the stream, closing the
    upstream; ``stop_reason`` stays ``None`` and ``pending`` keeps the held text. Two
    concurrent pulls: ``RuntimeError``.
    """
    compiled = stop_set(stops, include_stop, skip, skip_until)
    return StopStream(chunks, compiled, errors=errors)
