"""The async pull API: the async lifecycle driver over a native filter.

Per item it awaits the upstream and makes one native ``feed`` call; the matching itself runs in
Rust. Unlike an async generator, the object needs no ``aclosing`` to release its upstream when a
stop fires: it closes the upstream itself (Starlette's ``StreamingResponse`` never calls
``aclose()`` on its body iterator). Dropped unfinished, it cannot await a close: use
``async with`` (or ``contextlib.aclosing``) where a consumer may stop early.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from stopstream._core import ByteStopFilter, Regex, Stop, StopFilter
from stopstream._lifecycle import AsyncPull
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from stopstream._core import _StopReason as StopReason
    from stopstream._core import _Stops as Stops

_Chunk = TypeVar("_Chunk", str, bytes)
BytesLike = bytes | bytearray | memoryview


class _FilterStage:
    """A native filter as a lifecycle stage; the first item decides between str and bytes."""

    __slots__ = ("errors", "filter", "include_stop", "position", "push", "stops")

    def __init__(
        self,
        stops: Stops,
        include_stop: bool | None,
        errors: str,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
    ) -> None:
        if errors not in ("strict", "replace"):
            raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
        # Validate and compile the stops now, so a bad list fails at the call site.
        self.stops = stop_set(stops, include_stop, skip, skip_until)
        self.include_stop = self.stops.include_stop
        self.errors = errors
        self.filter: StopFilter | ByteStopFilter | None = None
        self.position = 0
        # The first item goes through ``_first``; later ones straight to the filter's ``feed``.
        self.push: Callable[[Any], str | bytes] = self._first

    @property
    def closing(self) -> bool:
        f = self.filter
        return f is not None and f.stopped

    def _make(self, first: object) -> StopFilter | ByteStopFilter:
        if isinstance(first, str):
            return StopFilter(self.stops)
        return ByteStopFilter(self.stops, errors=self.errors)

    def _first(self, item: object) -> str | bytes:
        if not isinstance(item, (str, bytes, bytearray, memoryview)):
            raise TypeError(
                f"item at position 0 must be str or bytes-like, not {type(item).__name__}"
            )
        f = self.filter = self._make(item)
        self.push = self._next
        self.position = 1
        return f.feed(item)  # type: ignore[arg-type]

    def _next(self, item: Any) -> str | bytes:
        f = self.filter
        assert f is not None
        position = self.position
        self.position = position + 1
        try:
            return f.feed(item)
        except TypeError:
            started = "str" if isinstance(f, StopFilter) else "bytes"
            raise TypeError(
                f"item at position {position} is {type(item).__name__}, "
                f"but the stream started with {started}"
            ) from None

    def end(self) -> list[Any]:
        f = self.filter
        if f is None:
            f = self.filter = StopFilter(self.stops)
        tail = f.finish()
        return [tail] if tail else []


class AsyncStopStream(AsyncPull[_Chunk]):
    """Async iterator applying stop sequences to an upstream async iterable of chunks."""

    __slots__ = ("_filter_stage",)

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
        stage = _FilterStage(stops, include_stop, errors, skip, skip_until)
        self._filter_stage = stage
        super().__init__(chunks, stage)

    @property
    def stops(self) -> tuple[str | Stop | Regex, ...]:
        return self._filter_stage.stops.stops

    @property
    def include_stop(self) -> bool:
        return self._filter_stage.include_stop

    @property
    def stopped(self) -> bool:
        f = self._filter_stage.filter
        return f is not None and f.stopped

    @property
    def stop_sequence(self) -> str | None:
        f = self._filter_stage.filter
        return None if f is None else f.stop_sequence

    @property
    def stop_index(self) -> int | None:
        f = self._filter_stage.filter
        return None if f is None else f.stop_index

    @property
    def stop_reason(self) -> StopReason | None:
        f = self._filter_stage.filter
        return None if f is None else f.stop_reason

    @property
    def pending(self) -> _Chunk:
        f = self._filter_stage.filter
        return "" if f is None else f.pending  # type: ignore[return-value]


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
