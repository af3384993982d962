"""The SDKs' own stream helpers as streams like any other (contract §8).

``client.chat.completions.stream(...)`` and ``client.responses.stream(...)`` (openai) and
``client.messages.stream(...)`` (anthropic) return a manager whose stream reads the raw SDK
stream and turns its items into richer events: text deltas with the accumulated snapshot, "done"
events, a final message or completion. Cutting those events one by one would leave the
snapshots, the done events and the final object holding the stop. So the stop is applied where
the helper reads: its raw stream is replaced by the adapter over it (``wrap_chat`` and the rest),
and the helper accumulates cut items only. Every event, snapshot and final object it makes is
then the cut one, and its own methods (``get_final_message()``, ``text_stream``...) keep working
after a stop closed the upstream, since the helper reads the adapter's ending, not the closed
connection.

The helpers' classes are read by name (no SDK is imported). Replacing the raw stream uses two of
their private attributes: ``_raw_stream`` (what they read) and ``_iterator`` (to tell that
nothing was read yet), the same in both SDKs' helpers; the tests run the real SDKs.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Helper:
    """One SDK stream helper: the module defining it and its four classes."""

    module: str
    stream: str
    async_stream: str
    manager: str
    async_manager: str
    #: Its snapshot's choices get ``stop_reason`` naming the stop (the Chat helper keeps only
    #: ``finish_reason`` of the chunks it accumulates).
    names_choices: bool = False


CHAT = Helper(
    "openai.lib.streaming.chat",
    "ChatCompletionStream",
    "AsyncChatCompletionStream",
    "ChatCompletionStreamManager",
    "AsyncChatCompletionStreamManager",
    names_choices=True,
)
RESPONSES = Helper(
    "openai.lib.streaming.responses",
    "ResponseStream",
    "AsyncResponseStream",
    "ResponseStreamManager",
    "AsyncResponseStreamManager",
)
MESSAGES = Helper(
    "anthropic.lib.streaming",
    "MessageStream",
    "AsyncMessageStream",
    "MessageStreamManager",
    "AsyncMessageStreamManager",
)
HELPERS = (CHAT, RESPONSES, MESSAGES)


def _is(obj: object, module: str, name: str) -> bool:
    return any(c.__name__ == name and c.__module__.startswith(module) for c in type(obj).__mro__)


_MODULES = tuple(h.module for h in HELPERS)


def kind(obj: object) -> tuple[Helper, str] | None:
    """Which helper ``obj`` is, and which of its classes (``"stream"``, ``"async_stream"``,
    ``"manager"``, ``"async_manager"``), or ``None``."""
    if not type(obj).__module__.startswith(_MODULES):  # the common case, in one test
        return None
    for helper in HELPERS:
        for role in ("stream", "async_stream", "manager", "async_manager"):
            if _is(obj, helper.module, getattr(helper, role)):
                return helper, role
    return None


def describe(obj: object) -> str:
    """A helper's class as messages name it."""
    return f"{type(obj).__module__.split('.')[0]}'s {type(obj).__name__}"


def _unread(helper: Any, is_async: bool) -> bool:
    """Whether the helper's own iterator has not started (nothing read, nothing lost)."""
    it = helper._iterator
    if not is_async:
        return inspect.getgeneratorstate(it) == inspect.GEN_CREATED
    state = getattr(inspect, "getasyncgenstate", None)  # Python 3.12+
    if state is not None:
        return bool(state(it) == "AGEN_CREATED")
    # Python 3.10 and 3.11: an async generator not started is at its first instruction.
    frame = it.ag_frame
    return frame is not None and not it.ag_running and frame.f_lasti <= 0


def _check_unread(helper: Any, is_async: bool) -> None:
    if not _unread(helper, is_async):
        raise ValueError(
            f"this {describe(helper)} was read before it was wrapped: its events so far "
            "were not scanned; wrap the stream (or its manager) before reading it"
        )


def _name_choices(helper: Any, cut: Any) -> None:
    """Put the stop that ended each choice on the helper's snapshot, as the cut chunk had it."""
    try:
        snapshot = helper.current_completion_snapshot
    except Exception:  # no chunk arrived: nothing to name
        return
    for choice in getattr(snapshot, "choices", None) or ():
        stop = cut.stop_sequences.get(choice.index)
        if stop is not None:
            choice.stop_reason = stop


class _Raw:
    """What the helper reads in place of its raw stream: the adapter's output, with the raw
    stream's other attributes (``response``...) as they were."""

    def __init__(self, cut: Any, raw: Any, ended: Callable[[], None]) -> None:
        self._cut, self._raw, self._ended = cut, raw, ended

    def __iter__(self) -> Iterator[Any]:
        yield from self._cut
        self._ended()

    def close(self) -> None:
        self._cut.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _AsyncRaw(_Raw):
    async def __aiter__(self) -> AsyncIterator[Any]:
        async for item in self._cut:
            yield item
        self._ended()

    async def close(self) -> None:  # type: ignore[override]
        await self._cut.aclose()


def rewire(helper_stream: Any, helper: Helper, wrap: Callable[[Any], Any], is_async: bool) -> Any:
    """Make ``helper_stream`` read ``wrap(its raw stream)``; return that adapter stream."""
    _check_unread(helper_stream, is_async)
    cut = wrap(helper_stream._raw_stream)
    names = helper.names_choices

    def ended() -> None:
        if names:
            _name_choices(helper_stream, cut)

    raw_class = _AsyncRaw if is_async else _Raw
    # The helper's iterators (its events, a ``text_stream``) read ``_raw_stream`` when they
    # start, so replacing it before anything was read is enough.
    helper_stream._raw_stream = raw_class(cut, helper_stream._raw_stream, ended)
    return cut


class HelperStopStream:
    """An SDK stream helper with stop sequences applied.

    Iterating gives the helper's own events, cut; the helper's methods and attributes
    (``get_final_message()``, ``text_stream``, ``current_completion_snapshot``...) are there as
    before, and so is what the adapter reports (``stop_sequences``, ``complete``, ``pending``).
    ``close()`` (or leaving ``with``) closes the upstream once and ends the stream; two pulls at
    once are a ``RuntimeError``, as for every stream (contract §9).
    """

    def __init__(self, helper_stream: Any, cut: Any) -> None:
        self._helper = helper_stream
        self._cut = cut
        self._closed = False
        self._pulling = False

    def __iter__(self) -> HelperStopStream:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._pulling:
            raise RuntimeError("another pull of this stream is in progress")
        self._pulling = True
        try:
            return next(self._helper)
        finally:
            self._pulling = False

    def __enter__(self) -> HelperStopStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the upstream (once) and the helper; the stream ends."""
        self._closed = True
        try:
            self._cut.close()
        finally:
            self._helper.close()

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._helper, name)
        except AttributeError:
            return getattr(self._cut, name)

    def __dir__(self) -> list[str]:
        return sorted({*object.__dir__(self), *dir(self._helper), *dir(self._cut)})


class AsyncHelperStopStream(HelperStopStream):
    """The async twin: ``async for``, ``async with``, ``await close()`` (or ``aclose()``)."""

    def __aiter__(self) -> AsyncHelperStopStream:
        return self

    async def __anext__(self) -> Any:
        if self._closed:
            raise StopAsyncIteration
        if self._pulling:
            raise RuntimeError("another pull of this stream is in progress")
        self._pulling = True
        try:
            return await self._helper.__anext__()
        except asyncio.CancelledError:
            # The cancellation ended the helper's generators, not the adapter, which keeps
            # what a stop decided (contract §9.8): later pulls read on through new ones (the
            # helper keeps what it accumulated on itself).
            self._helper._iterator = self._helper.__stream__()
            raise
        finally:
            self._pulling = False

    async def __aenter__(self) -> AsyncHelperStopStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:  # type: ignore[override]
        """Close the upstream (once) and the helper; the stream ends."""
        self._closed = True
        try:
            await self._cut.aclose()
        finally:
            await self._helper.close()

    async def aclose(self) -> None:
        """``close()``, by the name stopstream's own async streams use."""
        await self.close()


class HelperStopStreamManager:
    """An SDK helper's manager with stop sequences applied: ``with`` it to get the
    ``HelperStopStream``; leaving closes the upstream, as the SDK's manager does."""

    def __init__(self, manager: Any, wrap_stream: Callable[[Any], Any]) -> None:
        self._manager = manager
        self._wrap = wrap_stream
        self._stream: Any = None

    def __enter__(self) -> Any:
        self._stream = self._wrap(self._manager.__enter__())
        return self._stream

    def __exit__(self, *exc: Any) -> Any:
        try:
            if self._stream is not None:
                self._stream.close()
        finally:
            result = self._manager.__exit__(*exc)
        return result

    async def __aenter__(self) -> Any:
        self._stream = self._wrap(await self._manager.__aenter__())
        return self._stream

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            if self._stream is not None:
                await self._stream.close()
        finally:
            result = await self._manager.__aexit__(*exc)
        return result


def wrap_helper(
    obj: Any, found: tuple[Helper, str], wrap: Callable[[Any], Any], awrap: Callable[[Any], Any]
) -> Any:
    """``obj`` (a helper's stream or manager, as ``found`` says) with the adapter applied:
    ``wrap`` / ``awrap`` make the sync / async adapter stream over a raw SDK stream."""
    helper, role = found
    if role == "stream":
        return HelperStopStream(obj, rewire(obj, helper, wrap, False))
    if role == "async_stream":
        return AsyncHelperStopStream(obj, rewire(obj, helper, awrap, True))
    if role == "manager":
        return HelperStopStreamManager(
            obj, lambda s: HelperStopStream(s, rewire(s, helper, wrap, False))
        )
    return HelperStopStreamManager(
        obj, lambda s: AsyncHelperStopStream(s, rewire(s, helper, awrap, True))
    )
