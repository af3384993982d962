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

The sync driver is native (``stopstream._core.StopStream``, so that ``wrap`` costs no Python
frame per chunk); ``AsyncPull`` below is its async twin, native for the common step of a pull
(``stopstream._core.AsyncDriver``: no Python frame per item either), its other events being
the coroutine methods here. Both follow one policy, with the same states (open, pulling, close
requested, closing, ended) and the same rules, checked by one test matrix over every entry
point:

1. a stop (``closing``): close the upstream at once, deliver the last piece and ``end()``'s
   output, then end; a failing close is raised on the pull after the last output;
2. ``aclose()``: closes the upstream exactly once. From another task while a pull waits it
   returns at once and never raises: the object given (an SDK stream, whose ``close()`` drops
   the connection and so ends the pending read) is closed right away, the iterator as soon as
   the pull returns, and the stream ends;
3. a bad item: the error propagates, the stream ends, the upstream is closed (a failing close is
   the error's ``__context__``);
4. an upstream error: propagates unchanged, the stream ends, the upstream is closed;
5. cancellation while awaiting the upstream: the upstream is closed, the cancellation goes on;
   while awaiting the close of a stop: the close still completes (shielded), the cancellation
   goes on, and later pulls deliver what the stop decided;
6. a second concurrent ``__anext__``: ``RuntimeError``.

Errors that have nobody to be raised to (a close failing after an upstream error, or during a
close from another task) go to the event loop's exception handler.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, Awaitable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NoReturn, Protocol, TypeVar

from stopstream._core import AsyncDriver

if TYPE_CHECKING:
    from typing_extensions import Self

    from stopstream._core import StopStream

_Out = TypeVar("_Out")


class Stage(Protocol):
    """What a driver drives; see the module docstring."""

    @property
    def closing(self) -> bool: ...

    def push(self, item: Any) -> Any: ...

    def end(self) -> list[Any]: ...


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


def _report(message: str, exc: BaseException) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_exception_handler({"message": message, "exception": exc})


class AsyncPull(AsyncDriver, Generic[_Out]):
    """Async iterator driving a stage from an async upstream by the lifecycle rules.

    ``__anext__`` is native (``stopstream._core.AsyncDriver``): it returns an awaitable that
    delivers queued output, pulls, feeds the stage and returns the output, with no Python
    frame per item. Every other event of a pull is one of the coroutine methods below, which
    that awaitable runs in place (forwarding ``send`` and ``throw``, so a cancellation reaches
    them as it would reach a coroutine), then goes on with the pull or ends it.
    """

    __slots__ = ()

    def __init__(self, source: AsyncIterable[Any], stage: Stage | StopStream[Any]) -> None:
        if not isinstance(source, AsyncIterable):
            raise TypeError(f"expected an async iterable, not {type(source).__name__}")
        iterator = source.__aiter__()
        # The object given, when it is not its own iterator (an SDK stream), is closed too.
        self._start(iterator, None if iterator is source else source, stage)

    if TYPE_CHECKING:  # native: the typed view of ``AsyncDriver``'s methods

        def __aiter__(self) -> Self: ...

        def __anext__(self) -> Awaitable[_Out]: ...

    async def _upstream_raised(self, error: BaseException) -> None:
        """The upstream's ``__anext__`` (or what it returned) raised ``error``."""
        try:
            raise error
        except StopAsyncIteration:
            if self._close_requested:
                await self._close_after_request()
                raise
            # Ran out by itself: nothing to close.
            self._done = True
            self._release()
            self._end_stage()
        except asyncio.CancelledError:
            self._done = True
            await self._close_quietly("closing the upstream after a cancellation")
            raise
        except BaseException:
            if self._close_requested:
                # The close from elsewhere ended the read (a dropped connection).
                await self._close_after_request()
                raise StopAsyncIteration from None
            self._done = True
            await self._close_quietly("closing the upstream after its error")
            raise

    async def _closed_during_pull(self) -> NoReturn:
        """An item arrived after ``aclose()`` from another task: it is not delivered."""
        await self._close_after_request()
        raise StopAsyncIteration

    async def _stopped(self) -> None:
        """The stage is closing (a stop): close the upstream now; the output of the item and
        ``end()``'s (queued) are delivered first, then a failing close is raised.

        The close runs shielded: a cancellation of this pull propagates at once, but the close
        still completes, and what the stop decided (the last piece, ``end()``'s final events)
        stays queued for later pulls: a cancellation never loses output a stop decided.
        """
        self._done = True
        cancelled = [False]
        close = asyncio.ensure_future(self._close_after_stop(cancelled))
        try:
            await asyncio.shield(close)
        except asyncio.CancelledError:
            cancelled[0] = True
            error = close.exception() if close.done() and not close.cancelled() else None
            if error is not None:
                self._defer(error)
            self._end_stage()
            raise
        except Exception as exc:
            self._defer(exc)
        self._end_stage()

    async def _close_after_stop(self, cancelled: list[bool]) -> None:
        """The stop's close. When the pull that awaited it was cancelled, a failure is deferred
        here, in the step that ends the close: a later pull raises it after the last output,
        as any failing close after a stop (a done-callback would run a loop turn later, after
        pulls that need no await have ended the stream); nothing is left for the task."""
        try:
            await self._close_upstream()
        except Exception as exc:
            if not cancelled[0]:
                raise
            self._defer(exc)

    async def _bad_item(self, error: Exception, item: object, position: int) -> NoReturn:
        """Ends the stream for a bad item (the ``position``-th, ``item``): closes the
        upstream, raises the stage's error (a failing close is its ``__context__``)."""
        self._done = True
        try:
            await self._close_upstream()
        except Exception as close_error:
            error.__context__ = close_error
        raise error

    async def _close_upstream(self) -> None:
        """Closes what is left of the upstream (each object once)."""
        await aclose_all(self._take_upstream())

    async def _close_quietly(self, message: str) -> None:
        try:
            await self._close_upstream()
        except Exception as exc:
            _report(message, exc)

    async def _close_after_request(self) -> None:
        self._done = True
        self._clear_queue()
        await self._close_quietly("closing the upstream after aclose() from another task")

    async def aclose(self) -> None:
        """End the stream and close the upstream (once; later calls do nothing).

        From another task while this stream waits on the upstream, it returns at once without
        raising: the object given is closed now where it is not the iterator itself (an SDK
        stream's ``close()`` drops the connection, which ends the pending read), and the
        waiting ``__anext__`` closes the iterator as soon as its pull returns, then ends.
        """
        self._done = True
        self._clear_queue()
        if not self._running:
            await self._close_upstream()
            return
        self._close_requested = True
        source = self._take_source()
        if source is not None:
            try:
                await aclose_all((source,))
            except Exception as exc:
                _report("closing the upstream from aclose() during a pull", exc)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
