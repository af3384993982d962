"""The awaitable that an async stream's ``__anext__`` returns (native: ``AsyncPullStep``).

It must behave as the coroutine it replaces: ``send``/``throw``/``close`` driven by hand, used
twice, abandoned while suspended; over upstreams whose ``__anext__`` is not a coroutine
function (a plain method returning an ``asyncio.Future``, a custom awaitable, a
``types.coroutine`` generator, a non-awaitable, a synchronous raise). Then a differential check:
``awrap`` yields what ``wrap`` yields on the same chunks, every attribute included.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import types
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stopstream
from hypothesis_profiles import examples
from stopstream import awrap
from strategies import StrCase, str_cases


class UpstreamError(Exception):
    pass


class Gate:
    """An upstream whose pulls wait on futures the test resolves; counts ``aclose()``."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[str]] = []
        self.closed = 0
        self.pulled = 0

    def __aiter__(self) -> Gate:
        return self

    async def __anext__(self) -> str:
        if self.closed:
            raise AssertionError("pulled from a closed upstream")
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self.pulled += 1
        return await future

    async def aclose(self) -> None:
        self.closed += 1


class FutureUpstream:
    """``__anext__`` is a plain method returning an ``asyncio.Future`` (resolved now, or
    later by the loop), as some C-accelerated or callback-based clients do."""

    def __init__(self, items: list[object], *, later: bool = False) -> None:
        self.items = items
        self.later = later
        self.closed = 0

    def __aiter__(self) -> FutureUpstream:
        return self

    def __anext__(self) -> asyncio.Future[object]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        if self.items:
            item = self.items.pop(0)
            if isinstance(item, BaseException):
                settle: Callable[[], object] = lambda: future.set_exception(item)  # noqa: E731
            else:
                settle = lambda: future.set_result(item)  # noqa: E731
        else:
            settle = lambda: future.set_exception(StopAsyncIteration())  # noqa: E731
        if self.later:
            loop.call_soon(settle)
        else:
            settle()
        return future

    async def aclose(self) -> None:
        self.closed += 1


def run(coroutine: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coroutine

    return asyncio.run(main())


def step(awaitable: Any) -> Generator[Any, Any, Any]:
    """The iterator ``await`` drives."""
    return awaitable.__await__()  # type: ignore[no-any-return]


# --- driving the awaitable by hand --------------------------------------------------------


async def synchronous(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


def test_send_returns_the_piece_as_stop_iteration() -> None:
    async def main() -> None:
        s = awrap(synchronous(["ab", "cd"]), ["zz"])
        aw = step(s.__anext__())
        assert aw.__await__() is aw  # type: ignore[attr-defined]
        with pytest.raises(StopIteration) as info:
            aw.send(None)
        assert info.value.value == "ab"
        # Used up: sending again is an error, as for a coroutine, and the stream is not stuck.
        with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
            aw.send(None)
        assert await s.__anext__() == "cd"

    run(main())


def test_awaiting_twice_raises_and_keeps_the_stream_usable() -> None:
    async def main() -> None:
        s = awrap(synchronous(["a", "b"]), ["zz"])
        aw = s.__anext__()
        assert await aw == "a"
        with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
            await aw
        assert await s.__anext__() == "b"

    run(main())


def test_a_tuple_item_comes_back_whole() -> None:
    # A returned value is carried by StopIteration, which takes a tuple apart unless wrapped.
    class Stage:
        closing = False

        def push(self, item: object) -> list[object]:
            return [item]

        def end(self) -> list[object]:
            return []

    async def source() -> AsyncIterator[object]:
        yield (1, 2)
        yield ValueError("an item, not an error")

    async def main() -> None:
        from stopstream._adapter import AsyncAdapterStream

        s: AsyncAdapterStream[object] = AsyncAdapterStream(source(), Stage())
        out = [item async for item in s]
        assert out[0] == (1, 2)
        assert isinstance(out[1], ValueError)

    run(main())


def test_send_before_start_and_throw_close_on_a_fresh_awaitable() -> None:
    async def main() -> None:
        s = awrap(synchronous(["a", "b", "c"]), ["zz"])
        aw = step(s.__anext__())
        with pytest.raises(TypeError, match="just-started"):
            aw.send(1)
        with pytest.raises(StopIteration) as info:
            aw.send(None)  # still fresh after the refused send
        assert info.value.value == "a"

        fresh = step(s.__anext__())
        with pytest.raises(UpstreamError):
            fresh.throw(UpstreamError("thrown before the start"))
        # Never started: the stream is untouched.
        closed = step(s.__anext__())
        closed.close()
        closed.close()
        with pytest.raises(RuntimeError, match="cannot reuse"):
            closed.send(None)
        assert await s.__anext__() == "b"

    run(main())


def test_throw_into_a_suspended_pull_reaches_the_upstream_and_closes_it() -> None:
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        aw = step(s.__anext__())
        yielded = aw.send(None)
        assert yielded is gate.waiting[0]  # the upstream's future, handed to the loop
        with pytest.raises(UpstreamError, match="thrown"):
            aw.throw(UpstreamError("thrown"))
        assert gate.closed == 1
        assert s.stop_reason is None
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()

    run(main())


def test_throw_with_type_and_value_form() -> None:
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        aw = step(s.__anext__())
        aw.send(None)
        with pytest.raises(UpstreamError, match="as a value"):
            aw.throw(UpstreamError, UpstreamError("as a value"))
        assert gate.closed == 1

    run(main())


def test_close_on_a_suspended_pull_closes_the_upstream_once() -> None:
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        aw = step(s.__anext__())
        aw.send(None)
        aw.close()
        aw.close()
        assert gate.closed == 1
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        await s.aclose()
        assert gate.closed == 1

    run(main())


def test_abandoned_suspended_pull_closes_the_upstream_without_a_warning() -> None:
    # filterwarnings=error: an unraisable error or a "never awaited" warning fails the test.
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        aw = step(s.__anext__())
        aw.send(None)
        del aw
        gc.collect()
        assert gate.closed == 1
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()

        # Never started, then dropped: nothing happens, and nothing warns.
        other = Gate()
        t = awrap(other, ["zz"])
        t.__anext__()
        gc.collect()
        assert other.closed == 0
        assert other.pulled == 0

    run(main())


def test_second_pull_while_one_is_suspended_is_refused() -> None:
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        first = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="already being iterated"):
            await s.__anext__()
        gate.waiting[0].set_result("x")
        assert await first == "x"

    run(main())


def test_re_entrant_send_is_refused() -> None:
    holder: list[Any] = []

    class ReEntrant:
        def __aiter__(self) -> ReEntrant:
            return self

        async def __anext__(self) -> str:
            with pytest.raises(ValueError, match="already executing"):
                holder[0].send(None)
            return "x"

    async def main() -> None:
        s = awrap(ReEntrant(), ["zz"])
        aw = step(s.__anext__())
        holder.append(aw)
        with pytest.raises(StopIteration) as info:
            aw.send(None)
        assert info.value.value == "x"

    run(main())


def test_cancellation_of_a_task_waiting_on_the_upstream() -> None:
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        task = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gate.closed == 1
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()

    run(main())


def test_wait_for_timeout_wraps_the_awaitable() -> None:
    # asyncio.wait_for over a non-coroutine awaitable runs it through ``yield from``.
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        # asyncio.wait_for raises the builtin TimeoutError from Python 3.11 on;
        # on 3.10 it raises asyncio.TimeoutError, a distinct class.
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(s.__anext__(), 0.01)
        assert gate.closed == 1

    run(main())


# --- upstreams whose __anext__ is not a coroutine function ----------------------------------


@pytest.mark.parametrize("later", [False, True], ids=["resolved", "resolved-later"])
def test_upstream_returning_futures(later: bool) -> None:
    async def main() -> None:
        upstream = FutureUpstream(["Hello </ans", "wer> tail"], later=later)
        s = awrap(upstream, ["</answer>"])  # type: ignore[arg-type]
        assert [p async for p in s] == ["Hello "]
        assert s.stop_sequence == "</answer>"
        assert upstream.closed == 1

        ended = FutureUpstream(["a", "b"], later=later)
        t = awrap(ended, ["zz"])  # type: ignore[arg-type]
        assert [p async for p in t] == ["a", "b"]
        assert t.stop_reason == "end"
        assert ended.closed == 0  # ran out by itself: nothing to close

    run(main())


@pytest.mark.parametrize("later", [False, True], ids=["resolved", "resolved-later"])
def test_upstream_future_with_an_exception(later: bool) -> None:
    async def main() -> None:
        error = UpstreamError("from the future")
        upstream = FutureUpstream(["<a", error], later=later)
        s = awrap(upstream, ["<ab>"])  # type: ignore[arg-type]
        with pytest.raises(UpstreamError) as info:
            await s.__anext__()
        assert info.value is error
        assert s.pending == "<a"
        assert s.stop_reason is None
        assert upstream.closed == 1

    run(main())


def test_upstream_anext_raising_synchronously() -> None:
    class Raises:
        closed = 0

        def __aiter__(self) -> Raises:
            return self

        def __anext__(self) -> Awaitable[str]:
            raise UpstreamError("before any awaitable")

        async def aclose(self) -> None:
            self.closed += 1

    async def main() -> None:
        upstream = Raises()
        s = awrap(upstream, ["zz"])
        with pytest.raises(UpstreamError, match="before any awaitable"):
            await s.__anext__()
        assert upstream.closed == 1

    run(main())


def test_upstream_anext_returning_a_non_awaitable() -> None:
    class NotAwaitable:
        closed = 0

        def __aiter__(self) -> NotAwaitable:
            return self

        def __anext__(self) -> int:
            return 5

        async def aclose(self) -> None:
            self.closed += 1

    async def main() -> None:
        upstream = NotAwaitable()
        s = awrap(upstream, ["zz"])  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="can't be used in 'await' expression"):
            await s.__anext__()
        assert upstream.closed == 1

    run(main())


class Waiter:
    """A custom awaitable whose iterator has no ``throw``: yields a future, then returns."""

    def __init__(self, future: asyncio.Future[None], value: str) -> None:
        self.future = future
        self.value = value
        self.started = False

    def __await__(self) -> Iterator[Any]:
        return self

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if not self.started:
            self.started = True
            self.future._asyncio_future_blocking = True  # what Future.__await__ does
            return self.future
        raise StopIteration(self.value)


def test_upstream_with_a_custom_awaitable_and_a_generator_coroutine() -> None:
    @types.coroutine
    def generator_based(value: str) -> Generator[Any, Any, str]:
        yield None  # a bare yield: the loop runs the task again at once
        return value

    class Custom:
        def __init__(self) -> None:
            self.items = ["a", "b", "c", "d"]
            self.closed = 0

        def __aiter__(self) -> Custom:
            return self

        def __anext__(self) -> Any:
            if not self.items:
                raise StopAsyncIteration
            item = self.items.pop(0)
            if item in "ac":
                return generator_based(item)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(future.set_result, None)
            return Waiter(future, item)

        async def aclose(self) -> None:
            self.closed += 1

    async def main() -> None:
        upstream = Custom()
        s = awrap(upstream, ["zz"])
        assert [p async for p in s] == ["a", "b", "c", "d"]
        assert upstream.closed == 0

    run(main())


def test_cancel_while_awaiting_an_iterator_without_throw() -> None:
    # Raised where the pull waits, as a coroutine awaiting such an iterator does.
    class Custom:
        closed = 0

        def __aiter__(self) -> Custom:
            return self

        def __anext__(self) -> Waiter:
            return Waiter(asyncio.get_running_loop().create_future(), "never")

        async def aclose(self) -> None:
            self.closed += 1

    async def main() -> None:
        upstream = Custom()
        s = awrap(upstream, ["zz"])  # type: ignore[call-overload]
        task = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert upstream.closed == 1

    run(main())


def test_subclass_overriding_anext_through_super() -> None:
    class Logged(stopstream.AsyncStopStream[str]):
        __slots__ = ("log",)
        log: list[str]

        async def __anext__(self) -> str:
            piece: str = await super().__anext__()
            self.log.append(piece)
            return piece

    async def main() -> None:
        s = Logged(synchronous(["a", "b<", "c"]), ["<c"])
        s.log = []
        assert [p async for p in s] == ["a", "b"]
        assert s.log == ["a", "b"]
        assert s.stop_sequence == "<c"

    run(main())


# --- differential: awrap against wrap ----------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(case=str_cases(), include_stop=st.booleans(), hold=st.booleans())
def test_awrap_matches_wrap(case: StrCase, include_stop: bool, hold: bool) -> None:
    """Same pieces, same attributes, after every piece and at the end, on any chunking; with
    ``hold`` the upstream suspends on every pull (as a network read does)."""
    expected = stopstream.wrap(case.chunks, case.stops, include_stop)
    want = []
    for piece in expected:
        want.append((piece, expected.stop_reason, expected.stop_sequence, expected.pending))
    want_end = (expected.stop_reason, expected.stop_sequence, expected.stop_index)

    async def source() -> AsyncIterator[str]:
        for chunk in case.chunks:
            if hold:
                await asyncio.sleep(0)
            yield chunk

    async def main() -> None:
        s = awrap(source(), case.stops, include_stop)
        got = []
        async for piece in s:
            got.append((piece, s.stop_reason, s.stop_sequence, s.pending))
        assert got == want
        assert (s.stop_reason, s.stop_sequence, s.stop_index) == want_end
        assert s.pending == expected.pending

    run(main())


# --- the awaitable's lifetime ---------------------------------------------------------------


class BareAwaitable:
    """An awaitable that is its own iterator, with neither ``close`` nor ``throw``: waits
    forever."""

    step: object = None

    def __await__(self) -> BareAwaitable:
        return self

    def __iter__(self) -> BareAwaitable:
        return self

    def __next__(self) -> None:
        return None

    def send(self, value: object) -> None:
        return None


class BareUpstream:
    """Each pull waits on a ``BareAwaitable``; counts ``aclose()``."""

    def __init__(self) -> None:
        self.closed = 0

    def __aiter__(self) -> BareUpstream:
        return self

    def __anext__(self) -> BareAwaitable:
        return BareAwaitable()

    async def aclose(self) -> None:
        self.closed += 1


def test_a_suspended_pull_in_a_collected_cycle_ends_the_pull() -> None:
    # The awaitable waited on refers back to the pull: only the collector frees the two, and
    # the pull must end as if dropped (the upstream closed once, the stream free).
    async def main() -> None:
        up = BareUpstream()
        s = awrap(up, ["STOP"])  # type: ignore[call-overload]
        pull = s.__anext__()
        pull.send(None)
        waited = [o for o in gc.get_referents(pull) if isinstance(o, BareAwaitable)]
        assert len(waited) == 1
        waited[0].step = pull
        del pull, waited
        gc.collect()
        assert not s._running
        assert up.closed == 1
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        await s.aclose()
        assert up.closed == 1

    run(main())


def test_every_awaitable_is_tracked_by_the_collector() -> None:
    async def main() -> None:
        s = awrap(synchronous(["a", "b", "c", "d"] * 10), ["zz"])
        for _ in range(40):
            pull = s.__anext__()
            assert gc.is_tracked(pull)
            await pull

    run(main())


def test_a_finished_awaitable_is_served_again_only_when_nobody_holds_it() -> None:
    # The driver hands out the awaitable of its last delivered pull again, but only one that
    # nothing else refers to: one still held stays used up, and the next pull is a new object.
    async def main() -> None:
        s = awrap(synchronous(["a", "b", "c", "d", "e"]), ["zz"])
        held = s.__anext__()
        assert await held == "a"
        fresh = s.__anext__()
        assert fresh is not held
        assert await fresh == "b"
        with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
            await held
        spare = id(fresh)  # the driver keeps it alive: the address stays its own
        del fresh
        # An address alone cannot tell it from a new object the allocator put where the spare
        # was freed; a new object is one tracemalloc saw allocated.
        tracemalloc.start()
        try:
            served = s.__anext__()
            assert id(served) == spare
            assert tracemalloc.get_object_traceback(served) is None
            new = s.__anext__()  # the spare is out: a new object
            assert tracemalloc.get_object_traceback(new) is not None
        finally:
            tracemalloc.stop()
        del served, new  # dropped unawaited
        assert [p async for p in s] == ["c", "d", "e"]

    run(main())


def test_a_stream_with_a_spare_awaitable_is_freed_when_dropped() -> None:
    # A finished awaitable refers to nothing: the spare the driver keeps makes no cycle, so a
    # dropped stream goes at once, without the collector.
    async def main() -> None:
        up = FutureUpstream(["a", "b"])
        s = awrap(up, ["zz"])  # type: ignore[arg-type]
        assert await s.__anext__() == "a"
        gone = weakref.ref(up)
        gc.disable()
        try:
            del s, up
            assert gone() is None
        finally:
            gc.enable()

    run(main())


def test_an_upstream_that_ran_out_is_let_go_of_at_once() -> None:
    # Running out ends the read from inside the awaitable's send slot; what the stream lets go
    # of then is freed right away, not when the native module is next entered.
    async def main() -> None:
        up = FutureUpstream(["a"])
        s = awrap(up, ["zz"])  # type: ignore[arg-type]
        gone = weakref.ref(up)
        del up
        gc.disable()
        try:
            assert [piece async for piece in s] == ["a"]
            assert gone() is None
        finally:
            gc.enable()

    run(main())


class Resurrector:
    """Part of a cycle with a stream; its finalizer brings the cycle back."""

    saved: ClassVar[list[Resurrector]] = []
    stream: Any = None
    upstream: Any = None

    def __del__(self) -> None:
        Resurrector.saved.append(self)


def test_a_spare_finalized_by_the_collector_is_not_served_again() -> None:
    # The collector runs the finalizer of every object of an unreachable cycle once, the
    # driver's spare included; a finalizer elsewhere in the cycle may then bring it all back.
    # An awaitable handed out after that would never be finalized again: dropped while
    # suspended, it would leave the upstream open and the stream running for good.
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        aw = step(s.__anext__())
        aw.send(None)
        gate.waiting[0].set_result("a")
        with pytest.raises(StopIteration) as done:
            aw.send(None)
        assert done.value.value == "a"
        del aw, done
        keeper = Resurrector()
        keeper.stream, keeper.upstream = s, gate
        gate.keeper = keeper  # type: ignore[attr-defined]  # s -> gate -> keeper -> s
        del s, gate, keeper
        gc.collect()
        keeper = Resurrector.saved.pop()
        s, gate = keeper.stream, keeper.upstream
        pull = s.__anext__()
        assert not gc.is_finalized(pull)
        aw = step(pull)
        aw.send(None)
        del pull, aw
        gc.collect()
        assert gate.closed == 1
        assert not s._running
        del gate.keeper

    run(main())


def test_a_pull_waiting_at_interpreter_exit_does_not_panic() -> None:
    import subprocess
    import sys

    script = (
        "import asyncio, stopstream\n"
        "class Aw:\n"
        "    def __await__(self): return self\n"
        "    def __iter__(self): return self\n"
        "    def __next__(self): return None\n"
        "    def send(self, v): return None\n"
        "class Up:\n"
        "    def __aiter__(self): return self\n"
        "    def __anext__(self): return Aw()\n"
        "    async def aclose(self): pass\n"
        "keep = []\n"
        "async def main():\n"
        "    s = stopstream.awrap(Up(), ['STOP'])\n"
        "    step = s.__anext__()\n"
        "    step.send(None)\n"
        "    keep.append(step)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert "panicked" not in done.stderr
    assert "PanicException" not in done.stderr
    assert done.returncode == 0, done.stderr


def test_send_through_the_slot_with_no_value_is_none() -> None:
    import ctypes

    # PyIter_Send with a NULL value, as C callers may pass: taken as None.
    send = ctypes.pythonapi.PyIter_Send
    send.restype = ctypes.c_int
    send.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.POINTER(ctypes.py_object)]

    async def main() -> None:
        s = awrap(synchronous(["a"]), ["zz"])
        pull = s.__anext__()
        result = ctypes.py_object()
        assert send(pull, None, ctypes.byref(result)) == 0  # PYGEN_RETURN
        assert result.value == "a"

    run(main())


def test_throw_of_an_instance_with_a_separate_value_is_refused() -> None:
    async def main() -> None:
        gate = Gate()
        s = awrap(gate, ["zz"])
        aw = step(s.__anext__())
        aw.send(None)
        with pytest.raises(TypeError, match="instance exception may not have a separate value"):
            aw.throw(UpstreamError("x"), "value")  # type: ignore[call-overload]
        aw.close()
        assert gate.closed == 1

    run(main())
