"""Typed entry point of the native pull API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, overload

from stopstream._core import StopStream

if TYPE_CHECKING:
    from stopstream._core import _Stops as Stops

BytesLike = bytes | bytearray | memoryview


@overload
def wrap(
    chunks: Iterable[str],
    stops: Stops,
    include_stop: bool = False,
    errors: str = "strict",
) -> StopStream[str]: ...
@overload
def wrap(
    chunks: Iterable[BytesLike],
    stops: Stops,
    include_stop: bool = False,
    errors: str = "strict",
) -> StopStream[bytes]: ...
def wrap(
    chunks: Iterable[str] | Iterable[BytesLike],
    stops: Stops,
    include_stop: bool = False,
    errors: str = "strict",
) -> StopStream[str] | StopStream[bytes]:
    """Wrap an iterable of ``str`` (yields ``str``) or of bytes-like chunks (yields ``bytes``).

    The stream yields only non-empty pieces and ends right after the piece in which a stop
    fired, closing the upstream (``close()`` on the iterator and on ``chunks`` where they have
    one) as soon as the stop is seen. Closing the stream, leaving its ``with`` block, or
    dropping it after partial iteration closes the upstream too, exactly once. An exception
    from the upstream propagates unchanged; the stream then stays open (``stop_reason`` is
    ``None``, ``pending`` keeps the held text) and iterating it again ends at once.
    """
    return StopStream(chunks, stops, include_stop, errors)


def pull(source: Iterable[object], stage: object) -> StopStream[object]:
    """The native lifecycle driver over a Python stage (the adapters' sync streams)."""
    raise NotImplementedError
