"""``stopstream.awrap``: the pull API over an async iterable of chunks.

The same properties as for ``wrap`` (see ``test_streams.py``), run with ``asyncio.run``, plus
cancellation: a task cancelled while awaiting the upstream closes the upstream and leaves
nothing behind (no "Task was destroyed" report, no "never awaited" warning).
"""

from __future__ import annotations

import asyncio
import gc
import re
import traceback
import warnings
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Literal, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stopstream
from hypothesis_profiles import examples
from stopstream import AsyncStopStream, awrap
from stopstream.reference import ReferenceByteStopFilter, ReferenceStopFilter
from strategies import (
    ByteCase,
    RegexByteCase,
    StrCase,
    byte_cases,
    regex_byte_cases,
    str_cases,
)
from stream_support import (
    AsyncCountingIterator,
    AsyncCountingSource,
    GeneratorLog,
    Run,
    Snapshot,
    State,
    async_logging_generator,
    expected_run,
)

T = TypeVar("T")
Errors = Literal["strict", "replace"]


def run(coro: Coroutine[Any, Any, T], *, collect_garbage: bool = True) -> T:
    """``asyncio.run(coro)``, failing on anything the event loop or the finalizers report
    (``collect_garbage`` runs the finalizers of anything left in reference cycles first)."""
    reports: list[dict[str, Any]] = []

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reports.append(ctx))
        return await coro

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = asyncio.run(main())
        if collect_garbage:
            gc.collect()
    assert [str(w.message) for w in caught] == []
    assert [ctx.get("message") for ctx in reports] == []
    return result


async def observed_run(stream: AsyncStopStream[Any], upstream: AsyncCountingIterator[Any]) -> Run:
    result = Run()
    try:
        async for piece in stream:
            result.snapshots.append(Snapshot.of(piece, stream))
    except UnicodeDecodeError as error:
        result.error = type(error)
    result.pulled = upstream.pulled
    result.final = State.of(stream)
    return result


async def collect(stream: AsyncIterator[T]) -> list[T]:
    return [piece async for piece in stream]


# ---------------------------------------------------------------------------------------------
# Differential: awrap == reference filter fed item by item


@settings(deadline=None)
@given(case=str_cases(), include_stop=st.booleans())
def test_str_stream_matches_reference(case: StrCase, include_stop: bool) -> None:
    expected = expected_run(ReferenceStopFilter(case.stops, include_stop), case.chunks)

    async def main() -> None:
        upstream = AsyncCountingIterator(case.chunks)
        stream = awrap(upstream, case.stops, include_stop)
        assert await observed_run(stream, upstream) == expected
        assert upstream.closed == int(expected.stopped_by_item)
        assert await collect(stream) == []
        assert stream.stops == tuple(case.stops)
        assert stream.include_stop is include_stop

    run(main(), collect_garbage=False)


@settings(deadline=None)
@given(
    case=byte_cases(invalid=True),
    include_stop=st.booleans(),
    errors=st.sampled_from(["strict", "replace"]),
)
def test_bytes_stream_matches_reference(case: ByteCase, include_stop: bool, errors: Errors) -> None:
    expected = expected_run(
        ReferenceByteStopFilter(case.stops, include_stop, errors), case.chunk_objects()
    )

    async def main() -> None:
        upstream = AsyncCountingIterator(case.chunk_objects())
        stream = awrap(upstream, case.stops, include_stop, errors)
        observed = await observed_run(stream, upstream)
        if not case.chunks:
            assert observed.snapshots == []
            assert observed.final == State("", False, None, None, "end")
            return
        assert observed == expected
        if expected.error is None:
            assert upstream.closed == int(expected.stopped_by_item)

    run(main(), collect_garbage=False)


def test_stream_examples() -> None:
    async def main() -> None:
        async def agen(*items: Any) -> AsyncIterator[Any]:
            for item in items:
                yield item

        assert await collect(awrap(agen("Hello </ans", "wer> tail"), ["</answer>"])) == ["Hello "]
        assert await collect(awrap(agen("a <", "b"), ["</answer>"])) == ["a ", "<b"]
        assert await collect(awrap(agen("x </an"), ["</answer>"])) == ["x ", "</an"]
        assert await collect(awrap(agen("abcd"), ["abcd", "bc"])) == ["a"]
        s = awrap(agen("a\n", "\nUser: hi"), ["\n\nUser:"], include_stop=True)
        assert await collect(s) == ["a\n", "\nUser:"]
        b = awrap(agen(b"caf\xc3", b"\xa9</", b"a> \xff"), ["</a>"])
        assert await collect(b) == [b"caf", b"\xc3\xa9"]
        assert (b.stop_sequence, b.stop_index, b.stop_reason) == ("</a>", 0, "stop_sequence")
        pieces = await collect(awrap(agen(bytearray(b"ab"), memoryview(b"cd"), b"", b"e"), None))
        assert pieces == [b"ab", b"cd", b"e"]
        assert all(type(p) is bytes for p in pieces)
        empty = awrap(agen(), ["x"])
        assert await collect(empty) == []
        assert empty.stop_reason == "end"
        assert empty.pending == ""

    run(main())


# ---------------------------------------------------------------------------------------------
# Closing the upstream


class _DynamicAclose:
    """An async iterator whose ``aclose`` comes from ``__getattr__``."""

    def __init__(self, items: list[str]) -> None:
        self._items = iter(items)
        self.closed = 0

    def __aiter__(self) -> _DynamicAclose:
        return self

    async def __anext__(self) -> str:
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None

    def __getattr__(self, name: str) -> Any:
        if name != "aclose":
            raise AttributeError(name)

        async def aclose() -> None:
            self.closed += 1

        return aclose


def test_aclose_is_looked_up_by_the_attribute_protocol() -> None:
    upstream = _DynamicAclose(["a", "b"])

    async def main() -> None:
        s = awrap(upstream, None)
        assert await s.__anext__() == "a"
        await s.aclose()

    run(main())
    assert upstream.closed == 1


def test_stop_closes_upstream_before_yielding_last_piece() -> None:
    async def main() -> None:
        source = AsyncCountingSource(["Hello", " world</answer> tail", "never pulled"])
        s = awrap(source, ["</answer>"])
        assert await s.__anext__() == "Hello"
        assert (source.closed, source.iterator.closed) == (0, 0)
        assert await s.__anext__() == " world"
        assert (source.closed, source.iterator.closed) == (1, 1)
        assert source.iterator.pulled == 2
        assert s.stop_reason == "stop_sequence"
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        await s.aclose()
        await s.aclose()
        assert (source.closed, source.iterator.closed) == (1, 1)

    run(main())


def test_stop_without_last_piece_closes_upstream() -> None:
    async def main() -> None:
        source = AsyncCountingSource(["abc", "def<st", "op>ghi"])
        s = awrap(source, ["<stop>"])
        assert await collect(s) == ["abc", "def"]
        assert (source.closed, source.iterator.closed) == (1, 1)
        assert s.stop_sequence == "<stop>"

    run(main())


def test_stop_finalizes_async_generator_upstream() -> None:
    async def main() -> None:
        log = GeneratorLog()
        s = awrap(async_logging_generator(["a", "b<s>", "c", "d"], log), ["<s>"])
        assert await s.__anext__() == "a"
        assert await s.__anext__() == "b"
        assert (log.finalized, log.closed_by_exit) == (1, 1)
        assert log.produced == ["a", "b<s>"]
        assert await collect(s) == []
        assert log.finalized == 1

    run(main())


def test_break_then_aclose() -> None:
    async def main() -> None:
        source = AsyncCountingSource(["a", "b", "c"])
        s = awrap(source, None)
        async for piece in s:
            assert piece == "a"
            break
        assert (source.closed, source.iterator.closed) == (0, 0)
        await s.aclose()
        assert (source.closed, source.iterator.closed) == (1, 1)
        await s.aclose()
        assert (source.closed, source.iterator.closed) == (1, 1)
        assert await collect(s) == []
        assert source.iterator.pulled == 1
        assert s.stop_reason is None

    run(main())


def test_break_then_aclose_async_generator() -> None:
    async def main() -> None:
        log = GeneratorLog()
        s = awrap(async_logging_generator(["a", "b", "c"], log), None)
        assert await s.__anext__() == "a"
        await s.aclose()
        assert (log.finalized, log.closed_by_exit) == (1, 1)
        assert log.produced == ["a"]

    run(main())


def test_aclose_before_iterating() -> None:
    async def main() -> None:
        upstream = AsyncCountingIterator(["a"])
        s = awrap(upstream, None)
        await s.aclose()
        assert upstream.closed == 1
        assert await collect(s) == []
        assert upstream.pulled == 0

    run(main())


def test_async_with_exit_closes_upstream() -> None:
    async def main() -> None:
        source = AsyncCountingSource(["a", "b", "c"])
        async with awrap(source, None) as s:
            assert await s.__anext__() == "a"
        assert (source.closed, source.iterator.closed) == (1, 1)
        assert await collect(s) == []

    run(main())


def test_async_with_exit_on_exception_closes_upstream_and_propagates() -> None:
    class Boom(Exception):
        pass

    async def main() -> None:
        log = GeneratorLog()
        with pytest.raises(Boom):
            async with awrap(async_logging_generator(["a", "b"], log), None) as s:
                await s.__anext__()
                raise Boom
        assert (log.finalized, log.closed_by_exit) == (1, 1)

    run(main())


def test_async_with_exit_after_stop_closes_once() -> None:
    async def main() -> None:
        source = AsyncCountingSource(["a<s>", "b"])
        async with awrap(source, "<s>") as s:
            assert await collect(s) == ["a"]
        assert (source.closed, source.iterator.closed) == (1, 1)

    run(main())


def test_dropped_stream_lets_asyncio_finalize_async_generator() -> None:
    async def main() -> None:
        log = GeneratorLog()
        s = awrap(async_logging_generator(["a", "b", "c"], log), None)
        assert await s.__anext__() == "a"
        del s
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)
        assert log.finalized == 1

    run(main())


def test_exhaustion_does_not_close_upstream_iterator() -> None:
    async def main() -> None:
        upstream = AsyncCountingIterator(["a", "b"])
        s = awrap(upstream, ["zz"])
        assert await collect(s) == ["a", "b"]
        assert s.stop_reason == "end"
        assert upstream.closed == 0
        await s.aclose()
        assert upstream.closed == 0

    run(main())


def test_exhaustion_of_async_generator_ends_it_naturally() -> None:
    async def main() -> None:
        log = GeneratorLog()
        s = awrap(async_logging_generator(["a", "b<"], log), ["<s>"])
        assert await collect(s) == ["a", "b", "<"]
        assert (log.finalized, log.closed_by_exit) == (1, 0)

    run(main())


# ---------------------------------------------------------------------------------------------
# Cancellation


class Blocking:
    """An async iterator that yields ``items`` and then waits until cancelled."""

    def __init__(self, items: list[str]) -> None:
        self.items = items
        self.waiting = asyncio.Event()
        self.closed = 0
        self.cancelled = 0

    def __aiter__(self) -> Blocking:
        return self

    async def __anext__(self) -> str:
        if self.items:
            return self.items.pop(0)
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("never woken")

    async def aclose(self) -> None:
        self.closed += 1


def test_cancel_while_awaiting_upstream_closes_upstream() -> None:
    async def main() -> None:
        upstream = Blocking(["a"])
        s = awrap(upstream, None)
        got: list[str] = []

        async def consume() -> None:
            async for piece in s:
                got.append(piece)

        task = asyncio.create_task(consume())
        await upstream.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert got == ["a"]
        assert (upstream.cancelled, upstream.closed) == (1, 1)
        assert await collect(s) == []
        await s.aclose()
        assert upstream.closed == 1

    run(main())


def test_cancel_while_awaiting_upstream_closes_source_and_iterator() -> None:
    class Source:
        def __init__(self) -> None:
            self.iterator = Blocking(["a"])
            self.closed = 0

        def __aiter__(self) -> Blocking:
            return self.iterator

        async def aclose(self) -> None:
            self.closed += 1

    async def main() -> None:
        source = Source()
        s = awrap(source, None)
        task = asyncio.create_task(collect(s))
        await source.iterator.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (source.closed, source.iterator.closed) == (1, 1)

    run(main())


def test_cancel_async_generator_upstream_finalizes_it() -> None:
    async def main() -> None:
        log = GeneratorLog()
        waiting = asyncio.Event()

        async def upstream() -> AsyncIterator[str]:
            try:
                yield "a"
                waiting.set()
                await asyncio.Event().wait()
                yield "never"
            finally:
                log.finalized += 1

        s = awrap(upstream(), ["zz"])
        task = asyncio.create_task(collect(s))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log.finalized == 1
        assert s.stop_reason is None

    run(main())


def test_timeout_while_awaiting_upstream_closes_upstream() -> None:
    async def main() -> None:
        upstream = Blocking(["a<", "b"])
        s = awrap(upstream, ["<s>"])
        got: list[str] = []

        async def consume() -> None:
            async for piece in s:
                got.append(piece)

        # asyncio.wait_for raises the builtin TimeoutError from Python 3.11 on;
        # on 3.10 it raises asyncio.TimeoutError, a distinct class.
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(consume(), timeout=0.05)
        assert got == ["a", "<b"]
        assert upstream.closed == 1
        assert s.stop_reason is None

    run(main())


def test_cancel_with_pending_text_keeps_it() -> None:
    async def main() -> None:
        upstream = Blocking(["ab</an"])
        s = awrap(upstream, ["</answer>"])
        task = asyncio.create_task(collect(s))
        await upstream.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.pending == "</an"
        assert s.stop_reason is None
        assert upstream.closed == 1

    run(main())


# ---------------------------------------------------------------------------------------------
# Upstream exceptions


class UpstreamError(Exception):
    pass


def raise_from_upstream(error: BaseException) -> None:
    raise error


def test_upstream_exception_propagates_unchanged() -> None:
    error = UpstreamError("upstream broke")

    async def failing() -> AsyncIterator[str]:
        yield "ab<"
        yield "/"
        raise_from_upstream(error)
        yield "never"

    async def main() -> None:
        s = awrap(failing(), ["</a>"])
        assert await s.__anext__() == "ab"
        with pytest.raises(UpstreamError) as info:
            await s.__anext__()
        assert info.value is error
        frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
        assert "failing" in frames
        assert frames[-1] == "raise_from_upstream"
        assert s.stop_reason is None
        assert not s.stopped
        assert s.pending == "</"
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        assert s.stop_reason is None
        assert s.pending == "</"

    run(main())


def test_upstream_exception_bytes_pending_kept() -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield b"caf\xc3"
        raise UpstreamError

    async def main() -> None:
        s = awrap(failing(), ["<"])
        assert await s.__anext__() == b"caf"
        with pytest.raises(UpstreamError):
            await s.__anext__()
        assert s.pending == b"\xc3"
        assert await collect(s) == []

    run(main())


def test_upstream_exception_from_iterator_then_aclose_once() -> None:
    class Broken(AsyncCountingIterator[str]):
        async def __anext__(self) -> str:
            if self.pulled == 1:
                raise UpstreamError("second item")
            return await super().__anext__()

    async def main() -> None:
        upstream = Broken(["<a", "b"])
        s = awrap(upstream, ["<ab>"])
        with pytest.raises(UpstreamError, match="second item"):
            await s.__anext__()
        assert s.pending == "<a"
        assert s.stop_reason is None
        # The stream ended and closed the upstream; closing it again does nothing.
        assert upstream.closed == 1
        await s.aclose()
        await s.aclose()
        assert upstream.closed == 1

    run(main())


# ---------------------------------------------------------------------------------------------
# Item types


@pytest.mark.parametrize(
    ("items", "position", "type_name"),
    [
        (["a", b"b"], 1, "bytes"),
        (["a", "", bytearray(b"b")], 2, "bytearray"),
        (["a", 5], 1, "int"),
        ([b"a", "b"], 1, "str"),
        ([b"a", b"", bytearray(b"x"), memoryview(b"y"), "z"], 4, "str"),
        ([b"a", None], 1, "NoneType"),
        ([3.5], 0, "float"),
        ([None, "a"], 0, "NoneType"),
    ],
)
def test_wrong_item_type_names_position_and_type(
    items: list[Any], position: int, type_name: str
) -> None:
    async def main() -> None:
        upstream = AsyncCountingIterator(items)
        s = awrap(upstream, None)
        good: list[str | bytes] = []
        with pytest.raises(TypeError) as info:
            async for piece in s:
                good.append(piece)
        message = str(info.value)
        assert re.search(rf"\bposition {position}\b", message), message
        assert re.search(rf"\b{type_name}\b", message), message
        assert good == [
            item if isinstance(item, str) else bytes(item) for item in items[:position] if item
        ]
        assert upstream.pulled == position + 1

    run(main())


def test_strict_decode_error_and_replace_mode() -> None:
    async def main() -> None:
        upstream = AsyncCountingIterator([b"ok ", b"\xe2\x82", b"x\xff", b"never pulled"])
        s = awrap(upstream, None)
        assert await s.__anext__() == b"ok "
        with pytest.raises(UnicodeDecodeError):
            await s.__anext__()
        assert upstream.pulled == 3
        assert s.pending == b"\xe2\x82"
        r = awrap(AsyncCountingIterator([b"ok ", b"\xe2\x82", b"x\xff"]), None, errors="replace")
        assert b"".join(await collect(r)) == "ok \ufffdx\ufffd".encode()
        t = awrap(AsyncCountingIterator([b"ab\xc3"]), None)
        assert await t.__anext__() == b"ab"
        with pytest.raises(UnicodeDecodeError):
            await t.__anext__()

    run(main())


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="list"):
        awrap(["a"], None)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="errors"):
        awrap(AsyncCountingIterator(["a"]), None, errors="ignore")
    with pytest.raises(ValueError, match="position 1"):
        awrap(AsyncCountingIterator(["a"]), ["x", ""])
    upstream = AsyncCountingIterator(["a"])
    with pytest.raises(TypeError, match="position 0"):
        awrap(upstream, [b"x"])  # type: ignore[list-item]
    assert (upstream.pulled, upstream.closed) == (0, 0)


def test_exports() -> None:
    assert stopstream.awrap is awrap
    assert stopstream.AsyncStopStream is AsyncStopStream


# ---------------------------------------------------------------------------------------------
# Re-entrancy and concurrency


def test_reentrant_anext_from_upstream_raises_runtime_error() -> None:
    seen: list[BaseException] = []

    async def main() -> None:
        async def upstream() -> AsyncIterator[str]:
            yield "a"
            try:
                await s.__anext__()
            except RuntimeError as error:
                seen.append(error)
            yield "b"

        s = awrap(upstream(), None)
        assert await collect(s) == ["a", "b"]

    run(main())
    assert len(seen) == 1
    assert type(seen[0]) is RuntimeError


class Delayed:
    """An async iterator whose later items arrive sooner: concurrent pulls complete in reverse."""

    def __init__(self, items: list[str]) -> None:
        self.items = items
        self.index = 0

    def __aiter__(self) -> Delayed:
        return self

    async def __anext__(self) -> str:
        index = self.index
        if index >= len(self.items):
            raise StopAsyncIteration
        self.index += 1
        await asyncio.sleep(0.01 * (len(self.items) - index))
        return self.items[index]


def test_concurrent_anext_raises_runtime_error() -> None:
    """Two tasks pulling from one stream at once: the second gets RuntimeError, as with ``wrap``
    and with async generators, instead of matching over reordered text."""

    async def main() -> list[Any]:
        s = awrap(Delayed(["<1>", "<2>", "<3>"]), ["<3><2>"])

        async def pull() -> Any:
            try:
                return await s.__anext__()
            except RuntimeError as error:
                return error

        results = await asyncio.gather(pull(), pull(), pull())
        assert s.stop_sequence is None
        return list(results)

    results = run(main())
    assert results[0] == "<1>"
    assert all(isinstance(r, RuntimeError) for r in results[1:])


class FailingClose(AsyncCountingIterator[str]):
    async def aclose(self) -> None:
        self.closed += 1
        raise OSError("aclose failed")


def test_aclose_error_on_stop_keeps_last_piece() -> None:
    """Like ``wrap``: the piece before the stop is delivered, the close error comes after."""

    async def main() -> None:
        s = awrap(FailingClose(["a<s>b", "c"]), "<s>")
        assert await s.__anext__() == "a"
        with pytest.raises(OSError, match="aclose failed"):
            await s.__anext__()
        assert await collect(s) == []

    run(main())


# ---------------------------------------------------------------------------------------------
# Strict bytes: an invalid sequence ends the text for the stops' look-around (contract §9.9)


@settings(deadline=None, max_examples=examples(100))
@given(case=regex_byte_cases(), errors=st.sampled_from(["strict", "strict", "replace"]))
def test_regex_stops_over_invalid_bytes_match_reference(
    case: RegexByteCase, errors: Errors
) -> None:
    expected = expected_run(
        ReferenceByteStopFilter(list(case.ref), case.include_stop, errors), case.chunks
    )

    async def main() -> None:
        upstream = AsyncCountingIterator(case.chunks)
        stream = awrap(upstream, list(case.real), case.include_stop, errors)
        observed = await observed_run(stream, upstream)
        if not case.chunks:
            return
        assert observed == expected
        if expected.stopped_by_item or expected.error is None:
            assert upstream.closed == int(expected.stopped_by_item)

    run(main(), collect_garbage=False)


END = [stopstream.Regex(r"\bend\b")]


def test_strict_error_after_the_stop_it_fired_comes_on_the_next_pull() -> None:
    async def main() -> None:
        upstream = AsyncCountingIterator([b"the", b" end\xff more", b"never pulled"])
        s = awrap(upstream, END)
        assert await s.__anext__() == b"the"
        assert await s.__anext__() == b" "
        assert (s.stop_sequence, s.stop_index, s.stop_reason) == ("end", 0, "stop_sequence")
        assert (upstream.pulled, upstream.closed) == (2, 1)
        with pytest.raises(UnicodeDecodeError) as info:
            await s.__anext__()
        assert (info.value.object, info.value.start, info.value.end) == (b" end\xff more", 4, 5)
        assert await collect(s) == []
        assert (upstream.pulled, upstream.closed) == (2, 1)

    run(main())


def test_strict_incomplete_end_after_the_stop_it_fired() -> None:
    async def main() -> None:
        upstream = AsyncCountingIterator([b"the end\xe2"])
        s = awrap(upstream, ["the endless", *END])
        assert await s.__anext__() == b"the "
        assert s.stop_index == 1
        with pytest.raises(UnicodeDecodeError, match="unexpected end of data"):
            await s.__anext__()
        assert await collect(s) == []
        assert upstream.closed == 0  # it ran out by itself

    run(main())


def test_strict_error_after_a_stop_keeps_a_failing_close_as_context() -> None:
    class Failing(AsyncCountingIterator[bytes]):
        async def aclose(self) -> None:
            self.closed += 1
            raise OSError("aclose failed")

    async def main() -> None:
        upstream = Failing([b"the end\xff", b"never pulled"])
        s = awrap(upstream, END)
        assert await s.__anext__() == b"the "
        with pytest.raises(UnicodeDecodeError) as info:
            await s.__anext__()
        assert isinstance(info.value.__context__, OSError)
        assert await collect(s) == []
        assert upstream.closed == 1

    run(main())
