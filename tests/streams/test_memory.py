"""Memory bounds: no growth while streaming, small open filters, bounded compilation, no leaks.

Sizes are scaled to keep the run short; set ``STOPSTREAM_MEMORY_SCALE`` (default 1) to scale
them up (10 feeds 1 GB and runs 1,000,000 calls per leak check).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import warnings
from collections.abc import Callable

import pytest

import stopstream

SCALE = int(os.environ.get("STOPSTREAM_MEMORY_SCALE", "1"))
MIB = 1 << 20

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="needs /proc to read the resident set size"
)


def collect_earlier_garbage() -> None:
    """Collect what earlier tests on this worker left for the cyclic collector before
    measuring, without reporting it here: a connection object of an earlier end-to-end test
    finalized now would warn (ResourceWarning) in this test's name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def rss() -> int:
    """Current resident set size in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_streaming_keeps_rss_flat() -> None:
    chunk = ("lorem ipsum dolor sit amet " * 2500)[:65536]
    data = chunk.encode()
    stops = ["</answer>", "\n\nUser:", "###END", "<|im_end|>"]
    f = stopstream.StopFilter(stops)
    b = stopstream.ByteStopFilter(stops)
    for _ in range(100):  # warm up allocator pools
        f.feed(chunk)
        b.feed(data)
    before = rss()
    total = 0
    while total < 100 * MIB * SCALE:
        f.feed(chunk)
        b.feed(data)
        total += len(chunk) + len(data)
    assert rss() - before < 20 * MIB
    assert f.stop_reason is None and b.stop_reason is None


def test_many_open_filters_are_small() -> None:
    stops = ["</answer>", "\n\nUser:", "###END", "<|im_end|>"]
    n = 100_000
    collect_earlier_garbage()
    before = rss()
    filters = [stopstream.StopFilter(stops) for _ in range(n)]
    per_filter = (rss() - before) / n
    # Each holds a tuple of the stops, a reference to the shared automaton and its state.
    assert per_filter < 1024, per_filter
    for f in filters[:100]:
        assert f.feed("x </ans") == "x "
    del filters


def test_compiling_many_stops_is_bounded() -> None:
    n = 100_000
    stops = [f"<stop {i:06d} {i * 7919 % 100_003:06d}>" for i in range(n)]
    collect_earlier_garbage()
    before = rss()
    f = stopstream.StopFilter(stops)
    grown = rss() - before
    total_chars = sum(map(len, stops))
    # Linear in the total length of the stops (a few dozen bytes per character at most).
    assert grown < 64 * total_chars + 16 * MIB, (grown, total_chars)
    assert f.feed("a <stop 000001 007919> b") == "a "


def _refcount_stable(call: Callable[[], object], *objects: object) -> None:
    counts = [sys.getrefcount(o) for o in objects]
    for _ in range(1000):
        call()
    collect_earlier_garbage()
    before = rss()
    for _ in range(100_000 * SCALE):
        call()
    collect_earlier_garbage()
    assert [sys.getrefcount(o) for o in objects] == counts
    assert rss() - before < 4 * MIB


@pytest.mark.slow
def test_no_reference_leaks_on_the_hot_paths() -> None:
    stops = ["</answer>", "\n\nUser:"]
    text = "some text "
    held = "tail </ans"
    data = b"bytes \xc3"
    f = stopstream.StopFilter(stops)
    _refcount_stable(lambda: f.feed(text), text, f)

    def cycle() -> None:
        f.reset()
        f.feed(held)
        assert f.pending == "</ans"
        f.finish()

    _refcount_stable(cycle, held, f)
    b = stopstream.ByteStopFilter(stops, errors="replace")

    def byte_cycle() -> None:
        b.reset()
        b.feed(data)
        assert b.pending == b"\xc3"
        b.finish()

    _refcount_stable(byte_cycle, data, b)
    _refcount_stable(lambda: stopstream.StopFilter(stops), stops[0], stops[1])
    _refcount_stable(lambda: stopstream.truncate(held, stops), held, stops[0])
    items = ["a", "b </answer> c"]
    _refcount_stable(lambda: list(stopstream.wrap(items, stops)), items[0], items[1])


@pytest.mark.slow
def test_no_leak_when_errors_are_raised() -> None:
    f = stopstream.ByteStopFilter(["x"])
    # A fresh object: CPython shares its one-byte `bytes`, whose count other code changes.
    bad = bytes(bytearray(b"\xff\xfe"))

    def strict_error() -> None:
        with contextlib.suppress(UnicodeDecodeError):
            f.feed(bad)

    _refcount_stable(strict_error, bad, f)

    def type_error() -> None:
        with contextlib.suppress(TypeError):
            f.feed(1.5)  # type: ignore[arg-type]

    _refcount_stable(type_error, f)
