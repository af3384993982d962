"""One lifecycle matrix (contract §9): every pull API x every lifecycle case.

Entry points (``lifecycle_support.ENTRIES``): ``wrap``, ``awrap`` and every adapter, sync and
async, over dicts, SDK objects and SSE bytes. Cases: a stop; a close, plain and from another
thread or task while a pull waits; a bad item; an upstream error; a close that fails after a
stop; a stream dropped after a partial read (reference cycles included); two concurrent pulls;
a stop that only the end of the text decides (reported like any other: the cut, the
provider's stop fields, the final events); and, for the adapters, an upstream that ends without
its terminal event. Each asserts the pieces, the final events, ``complete``, ``pending`` and how
often the upstream was closed.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

from lifecycle_support import (
    ASYNC_ENTRIES,
    BEFORE_END_STOP,
    BEFORE_STOP,
    END_STOPS,
    HELD_AFTER_THIRD,
    STOP_ITEM,
    SYNC_ENTRIES,
    AsyncUpstream,
    Entry,
    Upstream,
    UpstreamError,
)

# A close from another thread or task must not wait for the blocked pull (which waits 10 s).
PROMPT = 1.0  # far above the machine's scheduling noise, far below the 10 s


def _with_bad_item(entry: Entry, position: int) -> list[Any]:
    items = entry.items()
    items.insert(position, entry.bad_item)
    return items


# --- sync ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_stop_closes_upstream_at_once_then_delivers_the_rest(entry: Entry) -> None:
    up = Upstream(entry.items())
    stream = entry.make(up)
    out: list[Any] = []
    for piece in stream:
        out.append(piece)
        if up.pulled > entry.offset + STOP_ITEM:
            # The stop was seen: generation ends even if the consumer never pulls again.
            assert up.closes == 1
    assert entry.text(out) == BEFORE_STOP
    assert entry.final(out)
    assert up.pulled == entry.offset + STOP_ITEM + 1
    assert up.closes == 1
    if entry.adapter:
        assert stream.complete
    stream.close()
    assert up.closes == 1


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_close_closes_upstream_once(entry: Entry) -> None:
    up = Upstream(entry.items())
    with entry.make(up) as stream:
        next(stream)
    assert up.closes == 1
    with pytest.raises(StopIteration):
        next(stream)
    stream.close()
    assert up.closes == 1
    if entry.adapter:
        assert not stream.complete


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_close_from_another_thread_during_a_pull(entry: Entry) -> None:
    up = Upstream(entry.items(), block_at=entry.offset + 2)
    stream = entry.make(up)
    got: list[Any] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            got.extend(stream)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    assert up.blocked.wait(5)
    start = time.monotonic()
    stream.close()  # never raises, never waits for the pull
    elapsed = time.monotonic() - start
    assert elapsed < PROMPT
    assert up.closes == 1  # the object's own close() ran at once: the read ends
    thread.join(5)
    assert not thread.is_alive()
    assert errors == []
    assert entry.text(got) in ("Hello ", "Hello wor")
    with pytest.raises(StopIteration):
        next(stream)
    assert up.closes == 1
    if entry.adapter:
        assert not stream.complete


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
@pytest.mark.parametrize("close_fails", [False, True])
def test_bad_item_raises_ends_and_closes(entry: Entry, close_fails: bool) -> None:
    close_error = OSError("close failed") if close_fails else None
    up = Upstream(_with_bad_item(entry, entry.offset + 1), close_error=close_error)
    stream = entry.make(up)
    with pytest.raises(TypeError) as info:
        list(stream)
    assert up.closes == 1
    if close_fails:
        assert info.value.__context__ is close_error
    with pytest.raises(StopIteration):
        next(stream)
    assert up.closes == 1


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_upstream_error_propagates_unchanged(entry: Entry) -> None:
    up = Upstream(entry.items(), raise_at=entry.offset + 3)
    stream = entry.make(up)
    out: list[Any] = []
    with pytest.raises(UpstreamError) as info:
        out.extend(stream)
    assert info.value is up.error
    assert entry.text(out) == "Hello world "
    assert entry.pending(stream) == HELD_AFTER_THIRD
    if entry.adapter:
        assert not stream.complete
    else:
        assert stream.stop_reason is None
    assert up.closes == 1
    with pytest.raises(StopIteration):
        next(stream)
    assert up.closes == 1


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_close_failing_after_stop_delivers_everything_first(entry: Entry) -> None:
    close_error = OSError("close failed")
    up = Upstream(entry.items(), close_error=close_error)
    stream = entry.make(up)
    out: list[Any] = []
    with pytest.raises(OSError) as info:
        while True:
            out.append(next(stream))
    assert info.value is close_error
    assert entry.text(out) == BEFORE_STOP
    assert entry.final(out)
    with pytest.raises(StopIteration):
        next(stream)
    assert up.closes == 1


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_a_sync_stream_is_its_own_iterator(entry: Entry) -> None:
    # A ``for`` loop pulls from the native driver itself, with no Python frame per item.
    up = Upstream(entry.items())
    with entry.make(up) as stream:
        assert iter(stream) is stream
    assert up.log == ["close"]


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_an_async_stream_is_its_own_iterator(entry: Entry) -> None:
    async def main() -> None:
        stream = entry.make(AsyncUpstream(entry.items()))
        assert stream.__aiter__() is stream
        await stream.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
@pytest.mark.parametrize("cycle", [False, True])
def test_dropped_after_a_partial_read_closes_upstream_once(entry: Entry, cycle: bool) -> None:
    up = Upstream(entry.items())
    stream = entry.make(up)
    next(stream)
    log = up.log
    if cycle:
        up.stream = stream  # type: ignore[attr-defined]
        del up  # only the cycle keeps stream and upstream alive now
    del stream
    gc.collect()
    assert log == ["close"]


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_two_concurrent_pulls(entry: Entry) -> None:
    up = Upstream(entry.items(), block_at=entry.offset + 2)
    stream = entry.make(up)
    thread = threading.Thread(target=lambda: list(stream))
    thread.start()
    assert up.blocked.wait(5)
    with pytest.raises(RuntimeError):
        next(stream)
    # Attributes are readable at any time.
    assert isinstance(entry.pending(stream), str)
    if entry.adapter:
        assert stream.complete is False
    stream.close()
    thread.join(5)
    assert not thread.is_alive()
    assert up.closes == 1


@pytest.mark.parametrize("entry", [e for e in SYNC_ENTRIES if e.adapter], ids=repr)
def test_upstream_ending_without_terminal_event_invents_no_ending(entry: Entry) -> None:
    # Only the text up to "ld </st": no terminal event, a partial stop held back.
    up = Upstream(entry.items()[: entry.offset + 3])
    stream = entry.make(up)
    out = list(stream)
    assert entry.text(out) == "Hello world "
    assert not entry.final(out)
    assert not stream.complete
    assert entry.pending(stream) == HELD_AFTER_THIRD
    assert up.closes == 0  # it ran out by itself


def _assert_stopped_by_the_end(entry: Entry, stream: Any, out: list[Any], up: Any) -> None:
    assert entry.text(out) == BEFORE_END_STOP
    assert entry.final(out, "more")
    assert stream.stop_sequence == "more"
    assert up.closes <= 1
    if entry.adapter:
        assert stream.stopped and stream.complete
        assert entry.pending(stream) == ""
        assert up.closes == 1  # a stop like any other: the upstream is closed
        sequences = getattr(stream, "stop_sequences", None)
        if sequences is not None:  # one text stream: the stop that ended it
            assert list(sequences.values()) == ["more"]
    else:
        assert stream.stop_reason == "stop_sequence"


@pytest.mark.parametrize("entry", SYNC_ENTRIES, ids=repr)
def test_stop_decided_by_the_end_of_the_text(entry: Entry) -> None:
    up = Upstream(entry.items())
    with entry.make(up, END_STOPS) as stream:
        out = list(stream)
    _assert_stopped_by_the_end(entry, stream, out, up)


# --- async --------------------------------------------------------------------------------------


def run(coro: Any) -> Any:
    reports: list[dict[str, Any]] = []

    async def main() -> Any:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reports.append(ctx))
        return await coro

    result = asyncio.run(main())
    assert reports == []
    return result


async def collect(stream: Any, out: list[Any]) -> list[Any]:
    async for piece in stream:
        out.append(piece)
    return out


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_stop_closes_upstream_at_once_then_delivers_the_rest(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items())
        stream = entry.make(up)
        out: list[Any] = []
        async for piece in stream:
            out.append(piece)
            if up.pulled > entry.offset + STOP_ITEM:
                assert up.closes == 1
        assert entry.text(out) == BEFORE_STOP
        assert entry.final(out)
        assert up.pulled == entry.offset + STOP_ITEM + 1
        assert up.closes == 1
        if entry.adapter:
            assert stream.complete
        await stream.aclose()
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_close_closes_upstream_once(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items())
        async with entry.make(up) as stream:
            await stream.__anext__()
        assert up.closes == 1
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        await stream.aclose()
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_close_from_another_task_during_a_pull(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items(), block_at=entry.offset + 2)
        stream = entry.make(up)
        got: list[Any] = []
        task = asyncio.ensure_future(collect(stream, got))
        await asyncio.wait_for(up.blocked.wait(), 5)
        start = time.monotonic()
        await stream.aclose()  # never raises, never waits for the pull
        assert time.monotonic() - start < PROMPT
        assert up.closes == 1
        await asyncio.wait_for(task, 5)
        assert entry.text(got) in ("Hello ", "Hello wor")
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        assert up.closes == 1
        if entry.adapter:
            assert not stream.complete

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
@pytest.mark.parametrize("close_fails", [False, True])
def test_async_bad_item_raises_ends_and_closes(entry: Entry, close_fails: bool) -> None:
    async def main() -> None:
        close_error = OSError("close failed") if close_fails else None
        up = AsyncUpstream(_with_bad_item(entry, entry.offset + 1), close_error=close_error)
        stream = entry.make(up)
        with pytest.raises(TypeError) as info:
            await collect(stream, [])
        assert up.closes == 1
        if close_fails:
            assert info.value.__context__ is close_error
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_upstream_error_propagates_unchanged(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items(), raise_at=entry.offset + 3)
        stream = entry.make(up)
        out: list[Any] = []
        with pytest.raises(UpstreamError) as info:
            await collect(stream, out)
        assert info.value is up.error
        assert entry.text(out) == "Hello world "
        assert entry.pending(stream) == HELD_AFTER_THIRD
        if entry.adapter:
            assert not stream.complete
        else:
            assert stream.stop_reason is None
        assert up.closes == 1
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_close_failing_after_stop_delivers_everything_first(entry: Entry) -> None:
    async def main() -> None:
        close_error = OSError("close failed")
        up = AsyncUpstream(entry.items(), close_error=close_error)
        stream = entry.make(up)
        out: list[Any] = []
        with pytest.raises(OSError) as info:
            while True:
                out.append(await stream.__anext__())
        assert info.value is close_error
        assert entry.text(out) == BEFORE_STOP
        assert entry.final(out)
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_two_concurrent_pulls(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items(), block_at=entry.offset + 2)
        stream = entry.make(up)
        task = asyncio.ensure_future(collect(stream, []))
        await asyncio.wait_for(up.blocked.wait(), 5)
        with pytest.raises(RuntimeError):
            await stream.__anext__()
        assert isinstance(entry.pending(stream), str)
        await stream.aclose()
        await asyncio.wait_for(task, 5)
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_cancelled_while_awaiting_closes_upstream(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items(), block_at=entry.offset + 2)
        stream = entry.make(up)
        task = asyncio.ensure_future(collect(stream, []))
        await asyncio.wait_for(up.blocked.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert up.closes == 1

    run(main())


@pytest.mark.parametrize("entry", [e for e in ASYNC_ENTRIES if e.adapter], ids=repr)
def test_async_upstream_ending_without_terminal_event_invents_no_ending(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items()[: entry.offset + 3])
        stream = entry.make(up)
        out = await collect(stream, [])
        assert entry.text(out) == "Hello world "
        assert not entry.final(out)
        assert not stream.complete
        assert entry.pending(stream) == HELD_AFTER_THIRD
        assert up.closes == 0

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
def test_async_stop_decided_by_the_end_of_the_text(entry: Entry) -> None:
    async def main() -> None:
        up = AsyncUpstream(entry.items())
        async with entry.make(up, END_STOPS) as stream:
            out = await collect(stream, [])
        _assert_stopped_by_the_end(entry, stream, out, up)

    run(main())


@pytest.mark.parametrize("entry", ASYNC_ENTRIES, ids=repr)
@pytest.mark.parametrize("close_fails", [False, True])
def test_async_cancelled_during_the_close_of_a_stop_loses_nothing(
    entry: Entry, close_fails: bool
) -> None:
    async def main() -> None:
        close_error = UpstreamError("close failed") if close_fails else None
        up = AsyncUpstream(entry.items(), slow_close=True, close_error=close_error)
        stream = entry.make(up)
        out: list[Any] = []
        task = asyncio.ensure_future(collect(stream, out))
        await asyncio.wait_for(up.closing.wait(), 5)  # the stop's close is awaited
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        up.close_gate.set()
        await asyncio.wait_for(up.closed.wait(), 5)  # the close still completes
        if close_fails:
            with pytest.raises(UpstreamError):
                await collect(stream, out)
        else:
            await collect(stream, out)
        # Later pulls delivered the last piece and the final events, then the stream ended.
        assert entry.text(out) == BEFORE_STOP
        assert entry.final(out)
        if entry.adapter:
            assert stream.complete
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        assert up.closes == 1

    run(main())
