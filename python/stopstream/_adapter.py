"""Shared machinery of the provider adapters.

An adapter is a *machine* that takes one decoded stream event (a JSON object as a ``dict``) at a
time and returns the events to emit in its place. Every emitted event is paired with its
*origin*: the input event it was derived from (the very same object when it passes through
unchanged), or ``None`` for an event the machine synthesized. The stream classes below drive a
machine from a sync or async upstream, convert SDK objects to and from ``dict``, and close the
upstream when the machine asks for it (every stream stopped, ``on_stop="close"``).

Nothing here imports a provider SDK: SDK objects are read with ``model_dump`` and rebuilt with
the SDK model's own ``construct`` (recursive, no validation) or pydantic's ``model_validate``.
"""

from __future__ import annotations

import inspect
import threading
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from stopstream._finalize import aclose_all

if TYPE_CHECKING:
    from typing_extensions import Self

JSON = dict[str, Any]
Emit = tuple[JSON, JSON | None]
OnStop = Literal["close", "drain"]

_Out = TypeVar("_Out")


def check_on_stop(on_stop: object) -> OnStop:
    if on_stop == "close":
        return "close"
    if on_stop == "drain":
        return "drain"
    raise ValueError(f"on_stop must be 'close' or 'drain', not {on_stop!r}")


class Machine(Protocol):
    """An adapter's state machine over decoded events."""

    @property
    def closing(self) -> bool:
        """Every stream stopped and ``on_stop="close"``: close the upstream, then call ``end``."""
        ...

    def feed(self, event: JSON) -> list[Emit]: ...

    def end(self) -> list[Emit]:
        """The upstream ended (or was closed): the events still owed to the client."""
        ...


class Driver(Protocol[_Out]):
    """Turns upstream items into output items; what the stream classes drive."""

    @property
    def closing(self) -> bool: ...

    def push(self, item: Any) -> list[_Out]: ...

    def end(self) -> list[_Out]: ...


# --- SDK objects <-> dicts --------------------------------------------------------------------


def as_json(item: object) -> JSON:
    """A ``dict`` view of one event: the dict itself, or an SDK model's ``model_dump``."""
    if isinstance(item, dict):
        return item
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        try:
            # Events are built without validation: do not warn about values of unexpected types.
            data = dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
        except (TypeError, ValueError):  # the SDKs' pydantic v1 shim rejects ``warnings``
            data = dump(mode="json", by_alias=True, exclude_unset=True)
        if isinstance(data, dict):
            return data
    raise TypeError(
        f"expected a dict or an SDK model object (with model_dump), not {type(item).__name__}"
    )


def rebuild_model(cls: type[Any], data: JSON) -> object:
    """An instance of the SDK model class ``cls`` holding ``data`` (API field names)."""
    construct = getattr(cls, "construct", None)
    if callable(construct) and callable(getattr(cls, "to_dict", None)):
        # The OpenAI / Anthropic SDK models: recursive construction without validation, the
        # way the SDKs themselves build streamed events; unknown keys become extra fields.
        return construct(**data)
    validate = getattr(cls, "model_validate", None)
    if callable(validate):
        return validate(data)
    raise TypeError(f"cannot build a {cls.__name__} from a dict")


class ModelDriver:
    """Drives a machine with dicts or SDK objects, and emits the same kind.

    An event that passes through unchanged is emitted as the very object received; a changed or
    synthesized one is a new ``dict`` for dict input, or a new SDK object built by ``rebuild``
    (given the new event and the latest upstream object) for SDK input.
    """

    __slots__ = ("_last", "_machine", "_rebuild")

    def __init__(self, machine: Machine, rebuild: Callable[[JSON, object], object]) -> None:
        self._machine = machine
        self._rebuild = rebuild
        self._last: object = None

    @property
    def closing(self) -> bool:
        return self._machine.closing

    def push(self, item: Any) -> list[Any]:
        view = as_json(item)
        self._last = item
        return [self._output(value, item, view) for value, _ in self._machine.feed(view)]

    def end(self) -> list[Any]:
        return [self._output(value, self._last, None) for value, _ in self._machine.end()]

    def _output(self, value: JSON, item: object, view: JSON | None) -> object:
        if value is view:
            return item
        if item is None or isinstance(item, Mapping):
            return value
        return self._rebuild(value, item)


# --- closing the upstream ---------------------------------------------------------------------


def _close_sync(objects: Iterable[object]) -> None:
    error: BaseException | None = None
    for obj in objects:
        close = getattr(obj, "close", None)
        if not callable(close):
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                # An async object given to the sync API: nothing can await it here.
                close_coro = getattr(result, "close", None)
                if callable(close_coro):
                    close_coro()
        except BaseException as exc:  # close everything, then raise the first error
            if error is None:
                error = exc
    if error is not None:
        raise error


# --- the streams ------------------------------------------------------------------------------


class SyncAdapterStream(Generic[_Out]):
    """Iterator over the output of a driver fed from a sync upstream.

    When the driver asks to close (every stream stopped), the upstream is closed at once: the
    iterator, and the object given when that is a different object (an SDK ``Stream``, whose
    ``close()`` releases the HTTP connection). The remaining output is then yielded and the
    stream ends. ``close()`` and leaving a ``with`` block close the upstream too, once. An
    upstream that runs out is not closed. An exception from the upstream propagates unchanged and
    ends the stream.
    """

    __slots__ = (
        "_closed",
        "_done",
        "_driver",
        "_iterator",
        "_lock",
        "_owner",
        "_queue",
        "_source",
    )

    def __init__(self, source: Iterable[Any], driver: Driver[_Out]) -> None:
        if not isinstance(source, Iterable):
            raise TypeError(f"stream must be an iterable, not {type(source).__name__}")
        iterator = iter(source)
        self._iterator: Iterator[Any] | None = iterator
        self._source: object = None if iterator is source else source
        self._driver = driver
        self._queue: deque[_Out] = deque()
        self._done = False
        self._closed = False
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread inside __next__

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> _Out:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("the stream is already being iterated (concurrent next())")
        self._owner = threading.get_ident()
        try:
            return self._next()
        finally:
            self._owner = None
            self._lock.release()

    def _next(self) -> _Out:
        queue = self._queue
        while not queue:
            iterator = self._iterator
            if self._done or iterator is None:
                raise StopIteration
            try:
                item = next(iterator)
            except StopIteration:
                self._done = True
                self._iterator = self._source = None
                queue.extend(self._driver.end())
                continue
            except BaseException:
                self._done = True
                raise
            try:
                queue.extend(self._driver.push(item))
            except BaseException:
                self._done = True
                raise
            if self._driver.closing:
                self._done = True
                self._close_upstream()
                queue.extend(self._driver.end())
        return queue.popleft()

    def _close_upstream(self) -> None:
        if self._closed:
            return
        self._closed = True
        iterator, source = self._iterator, self._source
        self._iterator = self._source = None
        _close_sync(obj for obj in (iterator, source) if obj is not None)

    def close(self) -> None:
        """End the stream and close the upstream (once; later calls do nothing).

        From another thread, waits for a ``next()`` in progress to return first.
        """
        if self._owner == threading.get_ident():
            raise RuntimeError("close() called from inside the stream's own next()")
        with self._lock:
            self._done = True
            self._queue.clear()
            self._close_upstream()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncAdapterStream(Generic[_Out]):
    """Async twin of ``SyncAdapterStream`` (``aclose()``, ``async with``).

    The upstream is also closed when the task is cancelled while awaiting it.
    """

    __slots__ = ("_busy", "_closed", "_done", "_driver", "_iterator", "_queue", "_source")

    def __init__(self, source: AsyncIterable[Any], driver: Driver[_Out]) -> None:
        if not isinstance(source, AsyncIterable):
            raise TypeError(f"stream must be an async iterable, not {type(source).__name__}")
        iterator = source.__aiter__()
        self._iterator: AsyncIterator[Any] | None = iterator
        self._source: object = None if iterator is source else source
        self._driver = driver
        self._queue: deque[_Out] = deque()
        self._done = False
        self._closed = False
        self._busy = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _Out:
        if self._busy:
            raise RuntimeError("the stream is already being iterated (concurrent __anext__())")
        self._busy = True
        try:
            return await self._next()
        finally:
            self._busy = False

    async def _next(self) -> _Out:
        queue = self._queue
        while not queue:
            iterator = self._iterator
            if self._done or iterator is None:
                raise StopAsyncIteration
            try:
                item = await iterator.__anext__()
            except StopAsyncIteration:
                self._done = True
                self._iterator = self._source = None
                queue.extend(self._driver.end())
                continue
            except BaseException as exc:
                self._done = True
                if not isinstance(exc, Exception):  # cancelled: release the upstream
                    await self._close_upstream()
                raise
            try:
                queue.extend(self._driver.push(item))
            except BaseException:
                self._done = True
                raise
            if self._driver.closing:
                self._done = True
                await self._close_upstream()
                queue.extend(self._driver.end())
        return queue.popleft()

    async def _close_upstream(self) -> None:
        if self._closed:
            return
        self._closed = True
        iterator, source = self._iterator, self._source
        self._iterator = self._source = None
        await aclose_all(obj for obj in (iterator, source) if obj is not None)

    async def aclose(self) -> None:
        """End the stream and close the upstream (once; later calls do nothing)."""
        if self._busy:
            raise RuntimeError("aclose() called while the stream is being iterated")
        self._done = True
        self._queue.clear()
        await self._close_upstream()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
