"""Regression tests for defects found in review: each failed (hung, lost a close, or lost an
error) before its fix."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import stopstream


def test_filter_used_from_a_finalizer_during_its_own_call_does_not_hang() -> None:
    # Building the output of `pending` (a lone surrogate: the slow decoding path) and the
    # UnicodeDecodeError of a strict feed can run the garbage collector, whose finalizers may
    # touch the same filter. The filter must not be locked then.
    code = textwrap.dedent(
        """
        import faulthandler, gc, stopstream
        faulthandler.dump_traceback_later(20, exit=True)
        f = stopstream.StopFilter(["\\ud800X"])
        b = stopstream.ByteStopFilter(["z"])
        seen = []
        class Cycle:
            def __init__(self):
                self.me = self
            def __del__(self):
                seen.append((f.pending, b.pending))
        assert f.feed("a\\ud800") == "a"
        gc.collect()
        gc.set_threshold(1)
        for _ in range(200):
            Cycle()
            assert f.pending == "\\ud800"
            try:
                b.feed(b"x\\xff")
            except UnicodeDecodeError:
                pass
        gc.set_threshold(700)
        gc.collect()
        assert seen
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


class _SlowUpstream:
    """An async iterator whose items arrive slowly and that records how it was closed."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.running = False

    def __aiter__(self) -> _SlowUpstream:
        return self

    async def __anext__(self) -> str:
        self.running = True
        try:
            await asyncio.sleep(0.05)
        finally:
            self.running = False
        return "a"

    async def aclose(self) -> None:
        assert not self.running, "closed while its __anext__ was running"
        self.log.append("aclose")


def test_awrap_aclose_from_another_task_during_a_pull() -> None:
    async def main() -> None:
        up = _SlowUpstream()
        s = stopstream.awrap(up, ["z"])
        pull = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0.01)
        await s.aclose()  # recorded: the pending pull closes the upstream when it returns
        with pytest.raises(StopAsyncIteration):
            await pull
        assert up.log == ["aclose"]
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        assert s.stop_reason is None

    asyncio.run(main())


def test_awrap_closes_an_upstream_that_only_has_close() -> None:
    log: list[str] = []

    class Upstream:
        def __init__(self) -> None:
            self.items = iter(["a", "b<s>", "c"])

        def __aiter__(self) -> Upstream:
            return self

        async def __anext__(self) -> str:
            try:
                return next(self.items)
            except StopIteration:
                raise StopAsyncIteration from None

        async def close(self) -> None:  # like the SDKs' AsyncStream.close()
            log.append("close")

    async def main() -> list[str]:
        return [piece async for piece in stopstream.awrap(Upstream(), ["<s>"])]

    assert asyncio.run(main()) == ["a", "b"]
    assert log == ["close"]


class _CloseFails(Exception):
    pass


def test_bad_item_error_survives_a_failing_close() -> None:
    class Upstream:
        def __init__(self) -> None:
            self.items: Iterator[Any] = iter(["a", 1])

        def __iter__(self) -> Upstream:
            return self

        def __next__(self) -> Any:
            return next(self.items)

        def close(self) -> None:
            raise _CloseFails

    s = stopstream.wrap(Upstream(), ["z"])
    assert next(s) == "a"
    with pytest.raises(TypeError, match="position 1") as info:
        next(s)
    assert isinstance(info.value.__context__, _CloseFails)


def test_awrap_bad_item_error_survives_a_failing_close() -> None:
    class Upstream:
        def __init__(self) -> None:
            self.items: Iterator[Any] = iter(["a", 1])

        def __aiter__(self) -> Upstream:
            return self

        async def __anext__(self) -> Any:
            try:
                return next(self.items)
            except StopIteration:
                raise StopAsyncIteration from None

        async def aclose(self) -> None:
            raise _CloseFails

    async def main() -> None:
        s = stopstream.awrap(Upstream(), ["z"])
        assert await s.__anext__() == "a"
        with pytest.raises(TypeError, match="position 1") as info:
            await s.__anext__()
        assert isinstance(info.value.__context__, _CloseFails)

    asyncio.run(main())


def test_stop_list_of_every_byte_value() -> None:
    # 243 distinct UTF-8 byte values plus the class of bytes in no stop: the byte classes must
    # not wrap around.
    stops = [chr(c) for c in range(0x80)] + [chr(c) for c in range(0x80, 0x800, 7)]
    stops += [chr(c) for c in range(0x800, 0x10000, 97) if not 0xD800 <= c < 0xE000]
    stops += [chr(c) for c in range(0x10000, 0x110000, 4099)]
    assert len({b for s in stops for b in s.encode()}) >= 200
    prefixed = ["\U0010ffff\U0010fffe" + s for s in stops]
    for target in (prefixed[0], prefixed[200], prefixed[-1]):
        f = stopstream.StopFilter(prefixed)
        assert f.feed("x\U0010ffff") == "x"
        assert f.feed(target[1:] + "tail") == ""
        assert f.stop_sequence == target
        assert stopstream.truncate("ab" + target + "c", prefixed) == ("ab", target)


def _collect(agen: AsyncIterator[str]) -> list[str]:
    async def main() -> list[str]:
        return [x async for x in agen]

    return asyncio.run(main())


def test_gc_after_stream_and_upstream_die_together_still_closes() -> None:
    log: list[str] = []

    def upstream() -> Iterator[str]:
        try:
            yield "a"
            yield "b"
        finally:
            log.append("closed")

    s = stopstream.wrap(upstream(), None)
    assert next(s) == "a"
    holder: dict[str, Any] = {"s": s}
    holder["self"] = holder
    del s, holder
    gc.collect()
    assert log == ["closed"]
