"""The stream lifecycle (contract §9): the async driver, and the stages it drives.

Every pull API is a *driver* pulling items from an upstream and handing each to a *stage*, an
I/O-free object that turns items into output:

- ``stage.push(item)`` returns one piece (``str``/``bytes``, empty for none) or a ``list`` of
  output items; it raises for a bad item;
- ``stage.closing`` is true once the stage wants no more input (a stop fired and the upstream
  should be closed now);
- ``stage.end()`` returns the output still owed once the upstream is done: after it ran out by
  itself, or after ``closing`` and the close. It is not called after an upstream error or a
  close asked for by the consumer: a dropped stream is not a finished one.

Both drivers are native and follow one policy, the core's lifecycle state machine
(``rust/src/lifecycle/``): the sync one is ``stopstream._core.SyncDriver`` (the base of
``StopStream``, so that ``wrap`` costs no Python frame per chunk), the async one
``stopstream._core.AsyncDriver``, the base of ``AsyncPull`` below, whose awaitables pull, feed,
and await the closes the rules ask for. One test matrix checks both over every entry point:

1. a stop (``closing``): close the upstream at once, deliver the last piece and ``end()``'s
   output, then end; a failing close is raised on the pull after the last output;
2. ``close()``/``aclose()``: closes the upstream exactly once. From another thread or task while
   a pull waits it returns at once and never raises: the object given (an SDK stream, whose
   ``close()`` drops the connection and so ends the pending read) is closed right away, the
   iterator as soon as the pull returns, and the stream ends;
3. a bad item: the error propagates, the stream ends, the upstream is closed (a failing close is
   the error's ``__context__``);
4. an upstream error: propagates unchanged, the stream ends, the upstream is closed;
5. cancellation while awaiting the upstream: the upstream is closed, the cancellation goes on;
   while awaiting the close of a stop: the close still completes (shielded), the cancellation
   goes on, and later pulls deliver what the stop decided;
6. a second concurrent ``__next__``/``__anext__``: ``RuntimeError``.

Errors that have nobody to be raised to (a close failing after an upstream error, or during a
close from another thread or task) go to ``sys.unraisablehook`` (sync) or the event loop's
exception handler (async).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from stopstream._core import AsyncDriver

if TYPE_CHECKING:
    from typing_extensions import Self

    from stopstream._core import _FilterStage

_Out = TypeVar("_Out")


class Stage(Protocol):
    """What a driver drives; see the module docstring."""

    @property
    def closing(self) -> bool: ...

    def push(self, item: Any) -> Any: ...

    def end(self) -> list[Any]: ...


class AsyncPull(AsyncDriver, Generic[_Out]):
    """Async iterator driving a stage from an async upstream by the lifecycle rules.

    ``__anext__`` and ``aclose()`` are native (``stopstream._core.AsyncDriver``): each returns
    an awaitable that carries out the lifecycle's actions, with no Python frame per item.
    """

    __slots__ = ()

    def __init__(self, source: AsyncIterable[Any], stage: Stage | _FilterStage) -> None:
        if not isinstance(source, AsyncIterable):
            raise TypeError(f"expected an async iterable, not {type(source).__name__}")
        iterator = source.__aiter__()
        # The object given, when it is not its own iterator (an SDK stream), is closed too.
        self._start(iterator, None if iterator is source else source, stage)

    if TYPE_CHECKING:  # native: the typed view of ``AsyncDriver``'s methods

        def __aiter__(self) -> Self: ...

        def __anext__(self) -> Awaitable[_Out]: ...

        def aclose(self) -> Awaitable[None]:
            """End the stream and close the upstream (once; later calls do nothing).

            From another task while this stream waits on the upstream, it returns at once
            without raising: the object given is closed now where it is not the iterator
            itself, and the waiting ``__anext__`` closes the iterator as soon as its pull
            returns, then ends.
            """
            ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
