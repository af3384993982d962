"""Thread safety: filters and streams touched from several threads at once.

On a GIL build these tests check that concurrent calls are serialized (no torn state, no lost
or duplicated output); on a free-threaded build they also exercise the per-object locks for
real. Each shared-object test states an invariant that holds for every interleaving.
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import sys
import sysconfig
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import stopstream
from stopstream import ByteStopFilter, StopFilter, wrap

THREADS = 8
FEEDS = 100_000


def run_threads(target: Callable[[int], Any], count: int = THREADS) -> list[Any]:
    """Run ``target(i)`` in ``count`` threads started together; return results, re-raise errors."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded interpreter")
@pytest.mark.skipif(
    os.environ.get("PYTHON_GIL") == "1" or "gil" in sys._xoptions,
    reason="the GIL was turned on explicitly",
)
def test_extension_keeps_the_gil_disabled() -> None:
    # A module that does not declare free-threading support turns the GIL back on at import.
    assert stopstream.StopFilter is StopFilter
    assert not getattr(sys, "_is_gil_enabled")()  # noqa: B009


# ---------------------------------------------------------------------------------------------
# One shared filter


def test_shared_filter_without_stops_returns_every_chunk() -> None:
    f = StopFilter(None)

    def feed(i: int) -> bool:
        chunks = [f"{i}:{n};" for n in range(256)]
        ok = True
        for n in range(FEEDS):
            chunk = chunks[n & 255]
            ok &= f.feed(chunk) == chunk
        return ok

    assert all(run_threads(feed))
    assert f.pending == ""
    assert f.finish() == ""
    assert f.stop_reason == "end"


def test_shared_filter_holdback_is_consistent() -> None:
    """Every chunk ends in "<", a proper prefix of the stop: whatever the interleaving, the very
    first feed returns "ab" and every later one "<ab" (the previous chunk's held "<")."""
    f = StopFilter(["<stop>"])

    def feed(_: int) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _n in range(FEEDS):
            out = f.feed("ab<")
            counts[out] = counts.get(out, 0) + 1
        return counts

    totals: dict[str, int] = {}
    for counts in run_threads(feed):
        for out, n in counts.items():
            totals[out] = totals.get(out, 0) + n
    assert totals == {"ab": 1, "<ab": THREADS * FEEDS - 1}
    assert f.pending == "<"
    assert f.finish() == "<"


def test_shared_filter_with_a_stop_fired_by_one_thread() -> None:
    """One thread completes the stop mid-way: from then on every feed in every thread returns
    "", and no thread ever sees output again after it has seen "" once."""
    f = StopFilter(["<stop>"])
    feeds = FEEDS // 2

    def feed(i: int) -> tuple[int, int, bool]:
        emitted = 0
        silent = 0
        monotonic = True
        for n in range(feeds):
            chunk = "stop>" if (i == 3 and n == feeds // 2) else "ab<"
            out = f.feed(chunk)
            if out:
                if silent:
                    monotonic = False
                assert out in ("ab", "<ab")
                emitted += 1
            else:
                silent += 1
        return emitted, silent, monotonic

    results = run_threads(feed)
    assert all(monotonic for _, _, monotonic in results)
    assert f.stopped
    assert (f.stop_sequence, f.stop_index, f.stop_reason) == ("<stop>", 0, "stop_sequence")
    assert f.pending == ""
    assert f.finish() == ""
    emitted = sum(e for e, _, _ in results)
    silent = sum(s for _, s, _ in results)
    assert emitted + silent == THREADS * feeds
    assert silent >= 1  # at least the feed that fired


def test_shared_byte_filter_interleaved_multibyte_replace() -> None:
    """Threads feed halves of multi-byte characters into one filter: interleaving breaks them,
    which replace mode turns into U+FFFD. Output is always valid UTF-8, whole characters."""
    f = ByteStopFilter(["\u20ac\u20ac\u20ac\u20ac"], errors="replace")
    euro = "\u20ac".encode()
    halves = [euro[:1], euro[1:]]
    feeds = FEEDS // 2

    def feed(_: int) -> int:
        total = 0
        for n in range(feeds):
            out = f.feed(halves[n & 1])
            out.decode("utf-8")  # never part of a character
            total += len(out)
        return total

    run_threads(feed)
    tail = f.finish()
    tail.decode("utf-8")
    assert f.stop_reason in ("end", "stop_sequence")


def test_shared_byte_filter_strict_errors_leave_filter_usable() -> None:
    """Strict mode: an interleaving that breaks a character raises UnicodeDecodeError in the
    thread whose feed made it invalid; nothing else is ever raised and output stays valid."""
    f = ByteStopFilter(["zz"])
    euro = "\u20ac".encode()
    feeds = FEEDS // 10

    def feed(i: int) -> tuple[int, int]:
        errors = 0
        fed = 0
        for n in range(feeds):
            chunk = euro[:2] if (n + i) & 1 else euro[2:] + b"a"
            try:
                out = f.feed(chunk)
            except UnicodeDecodeError:
                errors += 1
                continue
            out.decode("utf-8")
            fed += 1
        return errors, fed

    results = run_threads(feed)
    assert sum(e + n for e, n in results) == THREADS * feeds
    assert f.stop_reason is None


def test_shared_filter_mixed_calls_never_crash() -> None:
    """feed, pending, attributes, finish and reset racing on one filter: only the documented
    ValueError (feed after finish) may be raised."""
    f = StopFilter(["</answer>", "\n\nUser:", "<|im_end|>"])
    chunks = ["Hello ", "</ans", "wer>", "\n", "\nUs", "er:", "<|im", "_end|>", "x" * 50]
    rounds = FEEDS // 10

    def work(i: int) -> int:
        rng = random.Random(i)
        value_errors = 0
        for _ in range(rounds):
            action = rng.random()
            try:
                if action < 0.7:
                    out = f.feed(rng.choice(chunks))
                    assert isinstance(out, str)
                elif action < 0.8:
                    assert isinstance(f.pending, str)
                    assert f.stop_reason in (None, "end", "stop_sequence")
                    _ = (f.stop_sequence, f.stop_index, f.stopped)
                elif action < 0.9:
                    assert isinstance(f.finish(), str)
                else:
                    f.reset()
            except ValueError as error:
                assert "finish" in str(error)
                value_errors += 1
        return value_errors

    run_threads(work)


# ---------------------------------------------------------------------------------------------
# One filter per thread over a shared stop list


def make_stop_list(rng: random.Random, count: int) -> list[str]:
    letters = "ab<>/\n\u00e9\u4e2d"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(count)]


def run_text(f: StopFilter, chunks: list[str]) -> tuple[str, str | None, int | None]:
    out = [f.feed(chunk) for chunk in chunks]
    out.append(f.finish())
    return "".join(out), f.stop_sequence, f.stop_index


def test_filter_per_thread_over_shared_stops() -> None:
    rng = random.Random(1234)
    stops = make_stop_list(rng, 300)
    letters = "ab<>/\n\u00e9\u4e2dxyz "
    streams = []
    for _ in range(THREADS * 4):
        text = "".join(rng.choice(letters) for _ in range(rng.randint(0, 3000)))
        cuts = sorted(rng.randint(0, len(text)) for _ in range(len(text) // 3))
        bounds = [0, *cuts, len(text)]
        streams.append([text[a:b] for a, b in itertools.pairwise(bounds)])
    expected = [run_text(StopFilter(stops), chunks) for chunks in streams]
    shared = tuple(stops)

    def work(i: int) -> list[tuple[int, tuple[str, str | None, int | None]]]:
        results = []
        for _round in range(5):
            for k in range(i, len(streams), THREADS):
                f = StopFilter(shared)
                results.append((k, run_text(f, streams[k])))
        return results

    for results in run_threads(work):
        for k, result in results:
            assert result == expected[k]


def test_byte_filter_per_thread_over_shared_stops() -> None:
    rng = random.Random(99)
    stops = make_stop_list(rng, 100)
    letters = "ab<>/\n\u00e9\u4e2dxyz "
    datas = [
        "".join(rng.choice(letters) for _ in range(rng.randint(0, 2000))).encode()
        for _ in range(THREADS * 2)
    ]

    def run_bytes(data: bytes, step: int) -> tuple[bytes, str | None]:
        f = ByteStopFilter(stops)
        out = [f.feed(data[p : p + step]) for p in range(0, len(data), step)]
        out.append(f.finish())
        return b"".join(out), f.stop_sequence

    expected = [run_bytes(data, len(data) + 1) for data in datas]

    def work(i: int) -> bool:
        ok = True
        for k, data in enumerate(datas):
            ok &= run_bytes(data, 1 + (i + k) % 5) == expected[k]
        return ok

    assert all(run_threads(work))


def test_constructing_filters_concurrently_from_one_list() -> None:
    stops = [f"<{n}>" for n in range(2000)]

    def work(i: int) -> str:
        text = "".join(f"{n}" for n in range(50)) + f"<{1000 + i}>tail"
        f = StopFilter(stops)
        return f.feed(text) + f.finish() + str(f.stop_index)

    results = run_threads(work)
    base = "".join(f"{n}" for n in range(50))
    assert results == [f"{base}{1000 + i}" for i in range(THREADS)]


def test_truncate_concurrently() -> None:
    stops = ["</answer>", "\n\nUser:"]
    big = "x" * (1 << 21) + "</answer>" + "y" * 100
    small = "hello\n\nUser: more"

    def work(i: int) -> bool:
        ok = True
        for _ in range(3):
            ok &= stopstream.truncate(big, stops) == ("x" * (1 << 21), "</answer>")
        for _ in range(2000):
            ok &= stopstream.truncate(small, stops) == ("hello", "\n\nUser:")
        return ok

    assert all(run_threads(work, 4))


# ---------------------------------------------------------------------------------------------
# One shared stream


def slow_upstream(count: int) -> Iterator[str]:
    for n in range(count):
        # Some Python work per item, so that threads switch while the upstream runs.
        sum(range(50))
        yield f"{n};"


def test_shared_stream_delivers_each_item_once_or_refuses() -> None:
    count = 20_000
    s = wrap(slow_upstream(count), None)

    def pull(_: int) -> tuple[list[str], int]:
        got: list[str] = []
        refused = 0
        while True:
            try:
                got.append(next(s))
            except StopIteration:
                return got, refused
            except RuntimeError as error:
                assert "iterated" in str(error)
                refused += 1
                time.sleep(0)

    results = run_threads(pull)
    pieces = [piece for got, _ in results for piece in got]
    assert sorted(pieces, key=lambda p: int(p[:-1])) == [f"{n};" for n in range(count)]
    assert s.stop_reason == "end"
    # Each thread saw its own pieces in upstream order.
    for got, _ in results:
        numbers = [int(p[:-1]) for p in got]
        assert numbers == sorted(numbers)


def test_shared_stream_with_stop_and_holdback() -> None:
    """The pieces received by all threads together are exactly those a single thread would have
    received: none lost, none duplicated, none cut differently."""
    count = 5000
    items = ["ab<", "st", "x", "<s", "top>"]

    def upstream() -> Iterator[str]:
        for n in range(count):
            sum(range(20))
            yield items[n % 3] + str(n)
        yield "<stop>tail"
        yield "never"

    expected = list(wrap(upstream(), ["<stop>"]))
    s = wrap(upstream(), ["<stop>"])

    def pull(_: int) -> list[str]:
        got: list[str] = []
        while True:
            try:
                got.append(next(s))
            except StopIteration:
                return got
            except RuntimeError:
                time.sleep(0)

    results = run_threads(pull, 4)
    assert Counter(piece for got in results for piece in got) == Counter(expected)
    assert s.stop_sequence == "<stop>"


def close_while_iterating() -> None:
    finalized: list[int] = []

    def upstream() -> Iterator[str]:
        try:
            for n in range(100_000):
                yield f"{n};"
        finally:
            finalized.append(1)

    # The stream is only reachable through ``streams``, so that it can be dropped below.
    streams = [wrap(upstream(), None)]
    started = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for n, _piece in enumerate(streams[0]):
                if n == 10:
                    started.set()
        except RuntimeError:
            pass  # a call concurrent with close() may be refused
        except BaseException as error:
            errors.append(error)

    t = threading.Thread(target=consume)
    t.start()
    assert started.wait(5)
    # Never the generator's own "already executing" error: a close() during a pull is recorded
    # and carried out by the pulling thread.
    streams[0].close()
    t.join(10)
    assert not t.is_alive()
    assert errors == []
    assert finalized in ([], [1])
    # Once the stream is gone, the upstream has been finalized, exactly once.
    streams.clear()
    gc.collect()
    assert finalized == [1]


@pytest.mark.slow
def test_close_from_another_thread_while_iterating() -> None:
    """A consumer thread iterates while another thread closes the stream (a client going away):
    nothing crashes, the consumer ends, and the upstream is finalized exactly once (by the
    close, or, when the upstream was running at that moment, when the stream is dropped)."""
    for _ in range(50):
        close_while_iterating()


def test_close_during_a_blocked_pull_is_carried_out_when_the_pull_returns() -> None:
    """close() while another thread waits inside the upstream returns at once; the pulling
    thread closes the upstream as soon as its pull returns and the stream ends there. It never
    surfaces the upstream's own "already executing" error."""
    release = threading.Event()
    waiting = threading.Event()
    finalized: list[int] = []

    def upstream() -> Iterator[str]:
        try:
            yield "a"
            waiting.set()
            release.wait(5)
            yield "b"
            yield "c"
        finally:
            finalized.append(1)

    s = wrap(upstream(), None)
    assert next(s) == "a"
    got: list[str] = []
    t = threading.Thread(target=lambda: got.extend(s))
    t.start()
    assert waiting.wait(5)  # the consumer is inside the upstream now
    try:
        s.close()
        assert finalized == []  # recorded, not yet carried out
    finally:
        release.set()
        t.join(5)
    assert not t.is_alive()
    assert finalized == [1]
    assert got == []  # the piece pulled after close() is dropped
    assert s.stop_reason is None


def test_attribute_reads_from_another_thread_do_not_disturb_the_consumer() -> None:
    """A monitoring thread reads ``pending`` and the stop attributes while one consumer
    iterates: reads never make the consumer's ``next()`` fail (nobody else is iterating)."""

    chunks = [f"{n}<" for n in range(200_000)]

    s = wrap(chunks, ["<stop>"])
    done = threading.Event()
    reads = 0

    def monitor() -> None:
        nonlocal reads
        while not done.is_set():
            # The attributes are a published snapshot: reading them never fails or waits.
            _ = (s.pending, s.stop_reason, s.stopped, s.stop_sequence, s.stop_index)
            reads += 1

    t = threading.Thread(target=monitor)
    t.start()
    try:
        text = "".join(s)
    finally:
        done.set()
        t.join()
    assert text == "".join(chunks)
    assert s.stop_reason == "end"
    assert reads > 0
