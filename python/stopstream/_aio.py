"""The async pull API: the async lifecycle driver over a native filter.

The driver and the filter are native (``stopstream._core.AsyncDriver`` feeding ``wrap``'s
own filter): per item, no Python frame but the upstream's. Unlike an async generator, the
object needs no ``aclosing`` to release its upstream when a stop fires: it closes the
upstream itself (Starlette's ``StreamingResponse`` never calls ``aclose()`` on its body
iterator). Dropped unfinished, it cannot await a close: use
``async with`` (or ``contextlib.aclosing``) where a consumer may stop early.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from stopstream._core import Regex, Stop, _FilterStage
from stopstream._lifecycle import AsyncPull
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from stopstream._types import BytesLike, StopReason, Stops

_Chunk = TypeVar("_Chunk", str, bytes)


class AsyncStopStream(AsyncPull[_Chunk]):
    """Async iterator applying stop sequences to an upstream async iterable of chunks."""

    __slots__ = ("_filter",)

    def __init__(
        self,
        chunks: AsyncIterable[Any],
        stops: Stops,
        include_stop: bool | None = None,
        errors: str = "strict",
        *,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
    ) -> None:
        if not isinstance(chunks, AsyncIterable):
            raise TypeError(f"chunks must be an async iterable, not {type(chunks).__name__}")
        if errors not in ("strict", "replace"):
            raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
        # The stage is the built-in filter, ``wrap``'s own, which the native driver feeds item
        # by item (no Python call per item): its errors and attributes are ``wrap``'s.
        compiled = stop_set(stops, include_stop, skip, skip_until)
        self._filter = _FilterStage(compiled, errors=errors)
        super().__init__(chunks, self._filter)

    @property
    def stops(self) -> tuple[str | Stop | Regex, ...]:
        return self._filter.stops

    @property
    def include_stop(self) -> bool:
        return self._filter.include_stop

    @property
    def stopped(self) -> bool:
        return self._filter.stopped

    @property
    def stop_sequence(self) -> str | None:
        return self._filter.stop_sequence

    @property
    def stop_index(self) -> int | None:
        return self._filter.stop_index

    @property
    def stop_reason(self) -> StopReason | None:
        return self._filter.stop_reason

    @property
    def pending(self) -> _Chunk:
        return self._filter.pending  # type: ignore[return-value]


@overload
def awrap(
    chunks: AsyncIterable[str],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> AsyncStopStream[str]: ...
@overload
def awrap(
    chunks: AsyncIterable[BytesLike],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> AsyncStopStream[bytes]: ...
def awrap(
    chunks: AsyncIterable[str] | AsyncIterable[BytesLike],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> AsyncStopStream[str] | AsyncStopStream[bytes]:
    """Wrap an async iterable of ``str`` or bytes-like chunks; see ``wrap`` for the rules.

    The upstream is closed (``aclose()``, else ``close()``) when a stop fires, when the stream
    is closed or its ``async with`` block left, when an item is bad, when the upstream raises,
    and when the task is cancelled while awaiting the upstream.
    """
    return AsyncStopStream(chunks, stops, include_stop, errors, skip=skip, skip_until=skip_until)
