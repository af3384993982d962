"""pytest-benchmark versions of the main comparisons, on a slice of the benchmark stream.

Not part of the test suite (``testpaths`` is ``tests``, and ``--benchmark-disable`` is on by
default); run them explicitly::

    python -m pytest benches --benchmark-enable

Each benchmark also checks its output against stopstream's, so without ``--benchmark-enable``
(every function then runs once, untimed) this file is a quick smoke test of the contenders.
``benches/compare.py`` gives the full table with ratios.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import contenders as c
import corpus
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

import stopstream

CHUNKS = 5_000
STOP_SETS = {"4": corpus.GUARD_RAIL, "\\n\\n": corpus.FREQUENT}


@pytest.fixture(scope="module")
def stream() -> corpus.Stream:
    return corpus.mixed_stream().prefix(CHUNKS)


STR_CONTENDERS: dict[str, c.StrContender] = {
    "floor": c.floor,
    "wrap": c.stopstream_wrap,
    "feed": c.stopstream_feed,
    "vllm": c.vllm,
    "holdall": c.holdall,
}
BYTES_CONTENDERS: dict[str, c.BytesContender] = {
    "bytes_floor": c.bytes_floor,
    "byte_filter": c.stopstream_bytes,
    "decoder_vllm": c.decoder_vllm,
}


def _expected(stream: corpus.Stream, stops: Sequence[str]) -> str:
    return "".join(c.stopstream_feed(stream.str_chunks, stops))


@pytest.mark.parametrize("stops_name", list(STOP_SETS))
@pytest.mark.parametrize("name", list(STR_CONTENDERS))
def test_str_stream(
    benchmark: BenchmarkFixture, stream: corpus.Stream, name: str, stops_name: str
) -> None:
    fn = STR_CONTENDERS[name]
    stops = STOP_SETS[stops_name]
    benchmark.group = f"str chunks, stops {stops_name}"
    benchmark.extra_info["chunks"] = len(stream.str_chunks)
    benchmark(lambda: deque(fn(stream.str_chunks, stops), maxlen=0))
    if name != "floor":
        assert "".join(fn(stream.str_chunks, stops)) == _expected(stream, stops)


@pytest.mark.parametrize("name", list(BYTES_CONTENDERS))
def test_bytes_stream(benchmark: BenchmarkFixture, stream: corpus.Stream, name: str) -> None:
    fn = BYTES_CONTENDERS[name]
    stops = corpus.GUARD_RAIL
    benchmark.group = "bytes chunks, stops 4"
    benchmark.extra_info["chunks"] = len(stream.bytes_chunks)
    benchmark(lambda: deque(fn(stream.bytes_chunks, stops), maxlen=0))
    assert b"".join(fn(stream.bytes_chunks, stops)) == stream.text.encode("utf-8")


@pytest.mark.parametrize("count", [4, 1_000])
@pytest.mark.parametrize("how", ["truncate", "find_each"])
def test_truncate(benchmark: BenchmarkFixture, count: int, how: str) -> None:
    text = corpus.big_text(2**20)
    stops = corpus.GUARD_RAIL if count == 4 else corpus.generated_stops(count)
    run: Callable[[], tuple[str, str | None]]
    if how == "truncate":

        def run() -> tuple[str, str | None]:
            return stopstream.truncate(text, stops)

    else:
        if count > 4:
            text = text[: 2**16]  # one str.find per stop: keep it short

        def run() -> tuple[str, str | None]:
            return c.find_each(text, stops)

    benchmark.group = f"truncate, {count} stops"
    benchmark.extra_info["bytes"] = len(text.encode("utf-8"))
    assert benchmark(run) == (text, None)


def test_construct_cached(benchmark: BenchmarkFixture) -> None:
    stops = list(corpus.GUARD_RAIL)
    benchmark.group = "construction"
    benchmark(stopstream.StopFilter, stops)
