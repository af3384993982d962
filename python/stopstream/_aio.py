"""The async pull API: a thin async iterator over the native filters.

Per item it awaits the upstream and makes one native ``feed`` call; the matching itself runs in
Rust. Unlike an async generator, the object needs no ``aclosing`` to release its upstream when a
stop fires: it closes the upstream itself (Starlette's ``StreamingResponse`` never calls
``aclose()`` on its body iterator).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from stopstream._core import ByteStopFilter, StopFilter
from stopstream._finalize import aclose_all
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from typing_extensions import Self

    from stopstream._core import _StopReason as StopReason
    from stopstream._core import _Stops as Stops

_Chunk = TypeVar("_Chunk", str, bytes)
BytesLike = bytes | bytearray | memoryview


class AsyncStopStream(Generic[_Chunk]):
    """Async iterator applying stop sequences to an upstream async iterable of chunks."""

    __slots__ = (
        "_close_requested",
        "_closing",
        "_deferred",
        "_done",
        "_errors",
        "_feed",
        "_filter",
        "_include_stop",
        "_iterator",
        "_position",
        "_running",
        "_source",
        "_stops",
    )

    def __init__(
        self,
        chunks: AsyncIterable[Any],
        stops: Stops,
        include_stop: bool | None = None,
        errors: str = "strict",
    ) -> None:
        if not isinstance(chunks, AsyncIterable):
            raise TypeError(f"chunks must be an async iterable, not {type(chunks).__name__}")
        if errors not in ("strict", "replace"):
            raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
        # Validate and compile the stops now, so a bad list fails at the call site.
        self._stops = stop_set(stops, include_stop)
        self._include_stop = self._stops.include_stop
        self._errors = errors
        self._filter: StopFilter | ByteStopFilter | None = None
        self._feed: Callable[[Any], str | bytes] | None = None
        iterator = chunks.__aiter__()
        self._iterator: AsyncIterator[Any] | None = iterator
        self._source: object | None = None if iterator is chunks else chunks
        self._position = 0
        self._done = False
        self._closing = False
        self._close_requested = False
        self._running = False
        self._deferred: Exception | None = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _Chunk:
        # One coroutine per item, no nested coroutines: each costs an allocation and a frame.
        if self._running:
            raise RuntimeError(
                "stream is already being iterated (concurrent __anext__ or re-entrant call)"
            )
        self._running = True
        try:
            while True:
                if self._deferred is not None:
                    exc, self._deferred = self._deferred, None
                    raise exc
                iterator = self._iterator
                if self._done or iterator is None:
                    raise StopAsyncIteration
                try:
                    item = await iterator.__anext__()
                    if self._close_requested:
                        # Closed by another task while waiting: no more output.
                        raise StopAsyncIteration
                except StopAsyncIteration:
                    if self._close_requested:
                        self._done = True
                        await self._close_upstream()
                        raise
                    # Ran out by itself: nothing to close.
                    self._iterator = self._source = None
                    self._done = True
                    tail = self._ensure_filter("").finish()
                    if tail:
                        return tail  # type: ignore[return-value]
                    raise
                except asyncio.CancelledError:
                    self._done = True
                    await self._close_upstream()
                    raise
                except BaseException:
                    self._done = True
                    raise
                position = self._position
                self._position = position + 1
                feed = self._feed
                bad: BaseException | None = None
                try:
                    out = feed(item) if feed is not None else self._first(item, position)
                except TypeError:
                    bad = self._type_error(item, position)
                except ValueError as exc:
                    bad = exc
                if bad is not None:
                    # The bad item is consumed and cannot be fed again; going on would splice
                    # the text around it. End the stream and cancel the upstream; a failure to
                    # close is kept as the error's context.
                    self._done = True
                    try:
                        await self._close_upstream()
                    except Exception as close_error:
                        bad.__context__ = close_error
                    raise bad
                if self._stopped():
                    self._done = True
                    try:
                        await self._close_upstream()
                    except Exception as exc:
                        if not out:
                            raise
                        # Deliver the last piece first; the error comes with the next call.
                        self._deferred = exc
                if out:
                    return out  # type: ignore[return-value]
        finally:
            self._running = False

    def _stopped(self) -> bool:
        return self._filter is not None and self._filter.stopped

    def _ensure_filter(self, first: object) -> StopFilter | ByteStopFilter:
        if self._filter is None:
            if isinstance(first, str):
                self._filter = StopFilter(self._stops)
            else:
                self._filter = ByteStopFilter(self._stops, errors=self._errors)
        return self._filter

    def _first(self, item: object, position: int) -> str | bytes:
        """Feeds the first item, which decides between ``str`` and bytes."""
        if not isinstance(item, (str, bytes, bytearray, memoryview)):
            raise TypeError(
                f"item at position {position} must be str or bytes-like, not {type(item).__name__}"
            )
        f = self._ensure_filter(item)
        feed: Callable[[Any], str | bytes] = f.feed
        self._feed = feed
        return feed(item)

    def _type_error(self, item: object, position: int) -> TypeError:
        if self._filter is None:
            return TypeError(
                f"item at position {position} must be str or bytes-like, not {type(item).__name__}"
            )
        started = "str" if isinstance(self._filter, StopFilter) else "bytes"
        return TypeError(
            f"item at position {position} is {type(item).__name__}, "
            f"but the stream started with {started}"
        )

    async def aclose(self) -> None:
        """Stop the stream and close the upstream (once; later calls do nothing).

        Called from another task while this stream waits on the upstream, it only records the
        request: the waiting ``__anext__`` closes the upstream as soon as its pull returns, and
        the stream then ends.
        """
        self._done = True
        if self._running:
            self._close_requested = True
            return
        await self._close_upstream()

    async def _close_upstream(self) -> None:
        if self._closing:
            return
        self._closing = True
        iterator, source = self._iterator, self._source
        self._iterator = self._source = None
        # ``aclose()`` where there is one, else ``close()`` (awaited if it returns an awaitable).
        await aclose_all(obj for obj in (iterator, source) if obj is not None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def stops(self) -> tuple[str, ...]:
        return self._stops.stops

    @property
    def include_stop(self) -> bool:
        return self._include_stop

    @property
    def stopped(self) -> bool:
        return self._filter is not None and self._filter.stopped

    @property
    def stop_sequence(self) -> str | None:
        return None if self._filter is None else self._filter.stop_sequence

    @property
    def stop_index(self) -> int | None:
        return None if self._filter is None else self._filter.stop_index

    @property
    def stop_reason(self) -> StopReason | None:
        return None if self._filter is None else self._filter.stop_reason

    @property
    def pending(self) -> _Chunk:
        return "" if self._filter is None else self._filter.pending  # type: ignore[return-value]


@overload
def awrap(
    chunks: AsyncIterable[str],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
) -> AsyncStopStream[str]: ...
@overload
def awrap(
    chunks: AsyncIterable[BytesLike],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
) -> AsyncStopStream[bytes]: ...
def awrap(
    chunks: AsyncIterable[str] | AsyncIterable[BytesLike],
    stops: Stops,
    include_stop: bool | None = None,
    errors: str = "strict",
) -> AsyncStopStream[str] | AsyncStopStream[bytes]:
    """Wrap an async iterable of ``str`` or bytes-like chunks; see ``wrap`` for the rules.

    The upstream is closed (``aclose()``) when a stop fires, when the stream is closed or its
    ``async with`` block left, and when the task is cancelled while awaiting the upstream.
    """
    return AsyncStopStream(chunks, stops, include_stop, errors)
