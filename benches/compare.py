"""Run every contender over the same inputs in one process and print the comparison tables.

Usage (from the repository root, with the package built in release mode)::

    python benches/compare.py           # full run: about a minute on 2 idle cores
    python benches/compare.py --quick   # smoke run (small inputs, few repeats): ~20 s
    python benches/compare.py --strict  # also exit 1 when a target is missed

The tables are Markdown. Times come from ``time.perf_counter_ns`` with the garbage collector
off during each timed run; each figure is the fastest of several runs (the median of three for
compiling large stop lists), so that preemption by other work on the machine is dropped rather
than averaged in; the load average is printed with the results. The process exits with status 2
when a correctness check fails: a contender's output differing from stopstream's (none of the
stop sets has overlapping stops, so every contender's rules give the same cut), or stopstream
holding back anything but the reference's minimum after some chunk (this one also asserts).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import contenders as c
import corpus

import stopstream

T = TypeVar("T")
perf_counter_ns = time.perf_counter_ns


@dataclass(frozen=True)
class Config:
    """Sizes and repeat counts of one run."""

    quick: bool
    chunks: int  # str chunks of the main stream
    repeats: int  # timed runs of the fast contenders; the fastest counts
    slow_repeats: int  # timed runs of each window of a slow contender
    window_ns: int  # slow contenders are timed in windows of about this long
    slow_budget_ns: int  # one pass of a slow contender over its prefix takes about this long
    slow_min_chunks: int  # the smallest prefix a slow contender is timed on
    probe_chunks: int  # chunks timed to estimate a contender's cost (sizes its windows)
    corpus_tokens: int  # tokens of each single-corpus stream
    held_chunks: int  # chunks the holdback comparison runs over
    truncate_size: int  # characters of the truncate text
    find_many_size: int  # characters str.find over 1,000 stops is timed on
    regex_many_size: int  # characters the 1,000-stop alternation is timed on
    constructions: int  # filters built for the cached construction cost
    unique_lists: int  # fresh stop lists built for the uncached construction cost
    open_filters: int  # filters kept open for the memory figure


FULL = Config(
    quick=False,
    chunks=20_000,
    repeats=15,
    slow_repeats=3,
    window_ns=2_000_000,
    slow_budget_ns=150_000_000,
    slow_min_chunks=100,
    probe_chunks=50,
    corpus_tokens=20_000,
    held_chunks=6_000,
    truncate_size=16 * 2**20,
    find_many_size=2**20,
    regex_many_size=2**17,
    constructions=2_000,
    unique_lists=300,
    open_filters=100_000,
)
QUICK = Config(
    quick=True,
    chunks=8_000,
    repeats=3,
    slow_repeats=1,
    window_ns=2_000_000,
    slow_budget_ns=15_000_000,
    slow_min_chunks=50,
    probe_chunks=20,
    corpus_tokens=4_000,
    held_chunks=1_500,
    truncate_size=4 * 2**20,
    find_many_size=2**19,
    regex_many_size=2**15,
    constructions=1_000,
    unique_lists=200,
    open_filters=20_000,
)


# -- timing ---------------------------------------------------------------------------------


def _timed(run: Callable[[], object]) -> int:
    gc.disable()
    try:
        start = perf_counter_ns()
        run()
        return perf_counter_ns() - start
    finally:
        gc.enable()


def best_ns(run: Callable[[], object], repeats: int, warm_up: bool = True) -> int:
    """The fastest of ``repeats`` timed calls (after one untimed warm-up call)."""
    gc.collect()
    if warm_up:
        run()
    return min(_timed(run) for _ in range(repeats))


def drain(iterator: Iterator[T]) -> None:
    deque(iterator, maxlen=0)


_LOOP = asyncio.new_event_loop()


def drain_async(iterator: AsyncIterator[str]) -> None:
    async def consume() -> None:
        async for _ in iterator:
            pass

    _LOOP.run_until_complete(consume())


@dataclass
class Cell:
    """One timed contender on one stop set."""

    ns_per_chunk: float
    chunks: int  # how many chunks it was timed on
    sampled: bool


# -- formatting -----------------------------------------------------------------------------


def fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.0f} µs"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def fmt_ratio(ratio: float) -> str:
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x"


def fmt_count(n: int) -> str:
    return f"{n:,}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += [
        "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    measured: str
    target: str
    ok: bool


@dataclass
class Report:
    targets: list[Target] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def target(self, name: str, measured: str, target: str, ok: bool) -> None:
        self.targets.append(Target(name, measured, target, ok))

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.failures.append(message)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- sections -------------------------------------------------------------------------------


async def collect_async(iterator: AsyncIterator[str]) -> str:
    return "".join([piece async for piece in iterator])


def check_outputs(stream: corpus.Stream, sets: dict[str, tuple[str, ...]], report: Report) -> None:
    """Every contender produces stopstream's output (none of these stop sets overlap)."""
    prefix = stream.prefix(3_000)
    for name, stops in sets.items():
        expected = "".join(c.stopstream_feed(prefix.str_chunks, stops))
        for fn in (c.stopstream_wrap, c.vllm, c.holdall):
            got = "".join(fn(prefix.str_chunks, stops))
            report.check(got == expected, f"{fn.__name__} output differs, stops {name}")
        got = _LOOP.run_until_complete(collect_async(c.stopstream_awrap(prefix.str_chunks, stops)))
        report.check(got == expected, f"awrap output differs, stops {name}")
        if len(stops) <= 100:
            got = "".join(c.reference(prefix.str_chunks, stops))
            report.check(got == expected, f"reference output differs, stops {name}")
        data = b"".join(c.stopstream_bytes(prefix.bytes_chunks, stops))
        report.check(data == expected.encode(), f"ByteStopFilter output differs, stops {name}")
        got_bytes = b"".join(c.decoder_vllm(prefix.bytes_chunks, stops))
        report.check(got_bytes == data, f"decoder+vLLM output differs, stops {name}")


Runner = Callable[[corpus.Stream, Sequence[str]], Callable[[], object]]


def _str_runner(fn: c.StrContender) -> Runner:
    return lambda s, stops: lambda: drain(fn(s.str_chunks, stops))


def _bytes_runner(fn: c.BytesContender) -> Runner:
    return lambda s, stops: lambda: drain(fn(s.bytes_chunks, stops))


def _async_runner(fn: c.AsyncContender) -> Runner:
    return lambda s, stops: lambda: drain_async(fn(s.str_chunks, stops))


@dataclass(frozen=True)
class Row:
    """One contender of the per-chunk table."""

    label: str
    kind: str  # "str", "async" or "bytes": which floor it is compared with
    runner: Runner
    sampled: bool = False  # too slow for the whole stream: timed on a prefix

    def count(self, stream: corpus.Stream) -> int:
        return len(stream.bytes_chunks if self.kind == "bytes" else stream.str_chunks)


FLOOR = "floor: pass-through generator"
WRAP = "stopstream wrap"
FEED = "stopstream feed loop"
VLLM = "vLLM v1 (fixed holdback, find per stop)"
HOLDALL = "SGLang / llama.cpp (hold all on partial)"
REFERENCE = "pure-Python reference"
ASYNC_FLOOR = "async floor: pass-through async generator"
AWRAP = "stopstream awrap"
BYTES_FLOOR = "bytes floor: pass-through generator"
BYTE_FILTER = "stopstream ByteStopFilter feed loop"
WRAP_BYTES = "stopstream wrap over bytes"
DECODER_VLLM = "UTF-8 decoder + vLLM v1"
FLOORS = {"str": FLOOR, "async": ASYNC_FLOOR, "bytes": BYTES_FLOOR}

ROWS = (
    Row(FLOOR, "str", _str_runner(c.floor)),
    Row(WRAP, "str", _str_runner(c.stopstream_wrap)),
    Row(FEED, "str", _str_runner(c.stopstream_feed)),
    Row(VLLM, "str", _str_runner(c.vllm), sampled=True),
    Row(HOLDALL, "str", _str_runner(c.holdall), sampled=True),
    Row(REFERENCE, "str", _str_runner(c.reference), sampled=True),
    Row(ASYNC_FLOOR, "async", _async_runner(c.async_floor)),
    Row(AWRAP, "async", _async_runner(c.stopstream_awrap)),
    Row(BYTES_FLOOR, "bytes", _bytes_runner(c.bytes_floor)),
    Row(BYTE_FILTER, "bytes", _bytes_runner(c.stopstream_bytes)),
    Row(WRAP_BYTES, "bytes", _bytes_runner(c.stopstream_wrap_bytes)),
    Row(DECODER_VLLM, "bytes", _bytes_runner(c.decoder_vllm), sampled=True),
)
SPEEDUPS = (
    (WRAP, VLLM),
    (WRAP, HOLDALL),
    (WRAP, REFERENCE),
    (FEED, VLLM),
    (BYTE_FILTER, DECODER_VLLM),
    (WRAP_BYTES, DECODER_VLLM),
)


def time_row(row: Row, stream: corpus.Stream, stops: Sequence[str], config: Config) -> Cell:
    """Time ``row`` over ``stream`` (or, for a slow contender, over a prefix of it).

    A fast contender runs over the whole stream (one response, or one per stop fired), after a
    warm-up run; the fastest of ``config.repeats`` runs counts, so a preemption by other work
    on the machine is dropped rather than averaged in. A slow contender runs over the longest
    prefix that fits ``config.slow_budget_ns``, cut into windows of about ``config.window_ns``
    (each a fresh response), each window counting with its fastest run. The stream interleaves
    its corpora, so any prefix of a few thousand chunks has the same mix as the whole.
    """
    gc.collect()
    if not row.sampled:
        ns = best_ns(row.runner(stream, stops), config.repeats)
        return Cell(ns / row.count(stream), row.count(stream), False)
    probe = stream.prefix(config.probe_chunks)
    estimate = max(1.0, _timed(row.runner(probe, stops)) / row.count(probe))
    total = len(stream.str_chunks)
    total = min(total, max(config.slow_min_chunks, int(config.slow_budget_ns / estimate)))
    window = max(config.probe_chunks, int(config.window_ns / estimate))
    ns = 0
    counted = 0
    for start in range(0, total, window):
        part = stream.window(start, min(total, start + window))
        run = row.runner(part, stops)
        ns += min(_timed(run) for _ in range(config.slow_repeats))
        counted += row.count(part)
    return Cell(ns / counted, counted, total < len(stream.str_chunks))


def per_chunk(
    stream: corpus.Stream, sets: dict[str, tuple[str, ...]], config: Config, report: Report
) -> None:
    cells: dict[str, dict[str, Cell]] = {row.label: {} for row in ROWS}
    for column, stops in sets.items():
        log(f"  per-chunk, stops {column}")
        for row in ROWS:
            cells[row.label][column] = time_row(row, stream, stops, config)

    columns = list(sets)
    lines: list[list[str]] = []
    for row in ROWS:
        floor = cells[FLOORS[row.kind]]
        line = [row.label]
        for column in columns:
            cell = cells[row.label][column]
            text = fmt_ns(cell.ns_per_chunk)
            if row.label != FLOORS[row.kind]:
                text += f" ({fmt_ratio(cell.ns_per_chunk / floor[column].ns_per_chunk)})"
            if cell.sampled:
                text += " *"
            line.append(text)
        lines.append(line)
    for ours, theirs in SPEEDUPS:
        line = [f"speedup: {ours} vs {theirs}"]
        for column in columns:
            ratio = cells[theirs][column].ns_per_chunk / cells[ours][column].ns_per_chunk
            line.append(fmt_ratio(ratio))
        lines.append(line)
    print(
        "\n### Per-chunk cost: ns per chunk, and in parentheses the multiple of the floor of "
        "its kind (str, async, bytes)\n"
    )
    print(table(["contender \\ stops", *columns], lines))
    print(
        f"\nStream: {stream.name}, {fmt_count(len(stream.str_chunks))} str chunks, "
        f"{fmt_count(len(stream.bytes_chunks))} bytes chunks (tokens). "
        "`*` = timed on a prefix of the stream to keep the run short; chunks timed:"
    )
    for row in ROWS:
        if row.sampled:
            counts = ", ".join(
                f"{column}: {fmt_count(cells[row.label][column].chunks)}" for column in columns
            )
            print(f"- {row.label}: {counts}")

    floor_4 = cells[FLOOR]["4"].ns_per_chunk
    wrap = cells[WRAP]
    feed = cells[FEED]
    vllm = cells[VLLM]
    ratio = wrap["4"].ns_per_chunk / floor_4
    report.target("wrap per chunk, 4 stops, vs floor", fmt_ratio(ratio), "<= 1.5x", ratio <= 1.5)
    ratio = feed["4"].ns_per_chunk / floor_4
    report.target("feed loop per chunk, 4 stops, vs floor", fmt_ratio(ratio), "<= 3x", ratio <= 3)
    ratio = vllm["4"].ns_per_chunk / wrap["4"].ns_per_chunk
    report.target("wrap vs vLLM, 4 stops (speedup)", fmt_ratio(ratio), ">= 30x", ratio >= 30)
    ratio = cells[DECODER_VLLM]["4"].ns_per_chunk / cells[WRAP_BYTES]["4"].ns_per_chunk
    report.target(
        "wrap over bytes vs decoder + vLLM, 4 stops (speedup)",
        fmt_ratio(ratio),
        ">= 30x",
        ratio >= 30,
    )
    ratio = vllm["1k"].ns_per_chunk / wrap["1k"].ns_per_chunk
    report.target(
        "wrap vs vLLM, 1,000 stops (speedup)", fmt_ratio(ratio), ">= 3000x", ratio >= 3000
    )
    stop_counts = ["1", "4", "100", "1k", "10k"]
    for label, by_set in (("wrap", wrap), ("feed loop", feed)):
        values = [by_set[k].ns_per_chunk for k in stop_counts]
        ratio = max(values) / min(values)
        report.target(
            f"{label} per chunk, 1 to 10,000 stops (max / min)",
            f"{fmt_ratio(ratio)} ({' / '.join(fmt_ns(v) for v in values)})",
            "<= 1.2x",
            ratio <= 1.2,
        )
    ratio = cells[DECODER_VLLM]["4"].ns_per_chunk / cells[BYTE_FILTER]["4"].ns_per_chunk
    report.target(
        "ByteStopFilter vs decoder + vLLM, 4 stops (speedup)",
        fmt_ratio(ratio),
        ">= 10x",
        ratio >= 10,
    )


def held_fraction(stream: corpus.Stream, stops: Sequence[str]) -> float:
    """The fraction of chunks after which some text is held back."""
    f = stopstream.StopFilter(stops)
    held = 0
    for chunk in stream.str_chunks:
        f.feed(chunk)
        if f.stopped:
            f = stopstream.StopFilter(stops)
        held += f.pending != ""
    return held / len(stream.str_chunks)


def flatness(stream: corpus.Stream, config: Config, report: Report) -> None:
    """Per-chunk cost against the number of stops, for two families of stop lists.

    The generated lists of the main table start like ordinary words, so the more of them, the
    more chunks end with text that could still become a stop and must be held back (and the
    more chunks are cut into new strings). Special-token-like stops never start in ordinary
    text: with them only the number of stops changes.
    """
    rows = {row.label: row for row in ROWS}
    counts = {"1": 1, "4": 4, "100": 100, "1k": 1_000, "10k": 10_000, "100k": 100_000}
    # Generating 100,000 word-like stops (each checked against the text) takes minutes.
    families: dict[str, tuple[Callable[[int], tuple[str, ...]], int]] = {
        "generated (word-like)": (corpus.generated_stops, 10_000),
        "special tokens": (corpus.token_stops, 100_000),
    }
    lines: list[list[str]] = []
    values: dict[str, list[float]] = {}
    for family, (make, most) in families.items():
        sizes = [n for n in counts.values() if n <= most]
        missing = ["-"] * (len(counts) - len(sizes))
        for label in (WRAP, FEED):
            log(f"  flatness, {family}, {label}")
            cells = [time_row(rows[label], stream, make(n), config) for n in sizes]
            values[f"{family}/{label}"] = [cell.ns_per_chunk for cell in cells]
            lines.append([f"{label}, {family}", *(fmt_ns(c.ns_per_chunk) for c in cells), *missing])
        held = [f"{held_fraction(stream, make(n)):.0%}" for n in sizes]
        lines.append([f"chunks ending with held text, {family}", *held, *missing])
    print("\n### Per-chunk cost against the number of stops (stops built once per stream)\n")
    print(table(["", *counts], lines))
    for label in (WRAP, FEED):
        by_count = values[f"special tokens/{label}"]
        ratio = max(by_count) / min(by_count)
        report.target(
            f"{label.removeprefix('stopstream ')} per chunk, 1 to 100,000 special-token stops "
            "(max / min)",
            f"{fmt_ratio(ratio)} ({' / '.join(fmt_ns(v) for v in by_count)})",
            "<= 1.2x",
            ratio <= 1.2,
        )


def by_corpus(config: Config) -> None:
    stops = corpus.GUARD_RAIL
    rows_of = {row.label: row for row in ROWS}
    labels = (FLOOR, WRAP, FEED, VLLM, BYTES_FLOOR, BYTE_FILTER, DECODER_VLLM)
    lines = []
    for stream in corpus.corpus_streams(config.corpus_tokens):
        log(f"  by corpus: {stream.name}")
        ns = {
            label: time_row(rows_of[label], stream, stops, config).ns_per_chunk for label in labels
        }
        lines.append(
            [
                stream.name,
                f"{fmt_count(len(stream.str_chunks))} / {fmt_count(len(stream.bytes_chunks))}",
                fmt_ns(ns[FLOOR]),
                f"{fmt_ns(ns[WRAP])} ({fmt_ratio(ns[WRAP] / ns[FLOOR])})",
                f"{fmt_ns(ns[FEED])} ({fmt_ratio(ns[FEED] / ns[FLOOR])})",
                f"{fmt_ns(ns[VLLM])} ({fmt_ratio(ns[VLLM] / ns[WRAP])})",
                f"{fmt_ns(ns[BYTE_FILTER])} ({fmt_ratio(ns[BYTE_FILTER] / ns[BYTES_FLOOR])})",
                f"{fmt_ns(ns[DECODER_VLLM])} ({fmt_ratio(ns[DECODER_VLLM] / ns[BYTE_FILTER])})",
            ]
        )
    print("\n### Per-chunk cost by corpus, 4 guard-rail stops\n")
    print(
        table(
            [
                "corpus",
                "str / bytes chunks",
                "floor",
                "wrap (x floor)",
                "feed loop (x floor)",
                "vLLM v1 (x wrap)",
                "ByteStopFilter (x bytes floor)",
                "decoder + vLLM (x ByteStopFilter)",
            ],
            lines,
        )
    )


def _percentile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def holdback(
    stream: corpus.Stream, sets: dict[str, tuple[str, ...]], config: Config, report: Report
) -> None:
    chunks = stream.prefix(config.held_chunks).str_chunks
    rows = []
    worst_excess = 0
    for column in ("1", "4", "100", "\\n\\n", "ReAct"):
        stops = sets[column]
        log(f"  holdback, stops {column}")
        minimum = c.held_minimum(chunks, stops)
        ours = c.held_stopstream(chunks, stops)
        vllm = c.held_vllm(chunks, stops)
        hold = c.held_holdall(chunks, stops)
        assert len(minimum) == len(ours) == len(vllm) == len(hold) == len(chunks)
        excess = max(abs(o - m) for o, m in zip(ours, minimum, strict=True))
        worst_excess = max(worst_excess, excess)
        report.check(ours == minimum, f"stopstream's holdback differs from the minimum ({column})")
        row = [column]
        for values in (minimum, ours, vllm, hold):
            row.append(f"{statistics.fmean(values):.2f} / {_percentile(values, 0.99)}")
        row.append(str(excess))
        row.append(f"{statistics.fmean(v - m for v, m in zip(vllm, minimum, strict=True)):.2f}")
        row.append(f"{statistics.fmean(h - m for h, m in zip(hold, minimum, strict=True)):.2f}")
        rows.append(row)
    print(
        "\n### Characters held back after each chunk (mean / p99), "
        f"over the first {fmt_count(len(chunks))} chunks\n"
    )
    print(
        table(
            [
                "stops",
                "minimum (reference)",
                "stopstream",
                "vLLM v1",
                "SGLang / llama.cpp",
                "stopstream - minimum (max |difference|)",
                "vLLM excess (mean)",
                "SGLang / llama.cpp excess (mean)",
            ],
            rows,
        )
    )
    # The contract: stopstream holds back exactly the minimum, after every chunk.
    assert worst_excess == 0, f"stopstream holds back {worst_excess} characters too many/few"
    report.target("holdback excess over the minimum", str(worst_excess), "0", worst_excess == 0)


@dataclass(frozen=True)
class Throughput:
    ours: float  # GB/s
    find: float
    regex: float


def truncate_case(
    text: str, stops: Sequence[str], find_size: int, regex_size: int, repeats: int
) -> tuple[Throughput, str]:
    """GB/s of ``truncate``, ``str.find`` per stop and one ``re`` alternation (no stop occurs)."""
    size = len(text.encode("utf-8"))
    assert stopstream.truncate(text, stops) == (text, None)
    ours = size / best_ns(lambda: stopstream.truncate(text, stops), repeats)
    find_text = text[:find_size]
    find_bytes = len(find_text.encode("utf-8"))
    assert c.find_each(find_text, stops) == (find_text, None)
    find = find_bytes / best_ns(lambda: c.find_each(find_text, stops), 3, warm_up=False)
    pattern = c.compile_alternation(stops)
    regex_text = text[:regex_size]
    regex_bytes = len(regex_text.encode("utf-8"))
    regex = regex_bytes / best_ns(lambda: c.regex_truncate(regex_text, pattern), 3, warm_up=False)
    notes = []
    if find_bytes < size:
        notes.append(f"str.find timed on the first {find_bytes / 2**20:.1f} MiB")
    if regex_bytes < size:
        notes.append(f"re on the first {regex_bytes / 2**10:,.0f} KiB")
    return Throughput(ours, find, regex), "; ".join(notes)


def truncate_section(config: Config, report: Report) -> None:
    text = corpus.big_text(config.truncate_size)
    size = len(text.encode("utf-8"))
    regex_size = len(text) if not config.quick else len(text) // 4
    first = {stop[0] for stop in corpus.GUARD_RAIL}
    share = sum(text.count(ch) for ch in first) / len(text)
    rare_first = {stop[0] for stop in corpus.RARE_FIRST_BYTES}
    rare_share = sum(text.count(ch) for ch in rare_first) / len(text)
    cases = (
        (
            f"4 guard-rail stops (their first bytes are {share:.2%} of the text)",
            corpus.GUARD_RAIL,
            len(text),
            regex_size,
        ),
        (
            "1,000 generated stops",
            corpus.generated_stops(1_000),
            config.find_many_size,
            config.regex_many_size,
        ),
        (
            f"4 special-token stops {list(corpus.RARE_FIRST_BYTES)} "
            f"(first byte '<' is {rare_share:.3%} of the text)",
            corpus.RARE_FIRST_BYTES,
            len(text),
            regex_size,
        ),
    )
    results = []
    lines = []
    for label, stops, find_size, rsize in cases:
        log(f"  truncate, {label}")
        result, note = truncate_case(text, stops, find_size, rsize, config.repeats)
        results.append(result)
        lines.append(
            [
                label + (f" ({note})" if note else ""),
                f"{result.ours:.2f} GB/s",
                f"{result.find:.3f} GB/s ({fmt_ratio(result.ours / result.find)})",
                f"{result.regex:.4f} GB/s ({fmt_ratio(result.ours / result.regex)})",
            ]
        )
    print(
        f"\n### truncate over {size / 2**20:.1f} MiB of text (no stop occurs: a full scan); "
        "throughput, and in parentheses stopstream's speedup\n"
    )
    print(table(["stops", "stopstream.truncate", "str.find per stop", "one re alternation"], lines))
    four, many, rare = results
    ratio = four.ours / four.find
    report.target(
        "truncate vs str.find per stop, 4 stops (speedup)", fmt_ratio(ratio), ">= 1x", ratio >= 1
    )
    ratio = many.ours / many.find
    report.target(
        "truncate vs str.find per stop, 1,000 stops (speedup)",
        fmt_ratio(ratio),
        ">= 100x",
        ratio >= 100,
    )
    report.target(
        "truncate throughput, rare first bytes",
        f"{rare.ours:.2f} GB/s",
        ">= 1 GB/s",
        rare.ours >= 1,
    )


LONG_CHUNK = 64 * 1024


def long_feed(chunks: Sequence[str], stops: Sequence[str]) -> int:
    """Feed ``chunks`` (large bodies) to one filter, then finish; the characters emitted."""
    f = stopstream.StopFilter(stops)
    feed = f.feed
    return sum(len(feed(chunk)) for chunk in chunks) + len(f.finish())


def prose_throughput(config: Config) -> None:
    """``truncate`` and long-chunk ``feed`` on the text and stops of the Rust throughput example.

    ``rust/examples/throughput.rs`` times this crate's scan against the ``aho-corasick`` crate
    on the same bytes; this is the same work seen from Python.
    """
    text = corpus.prose_big_text(config.truncate_size)
    size = len(text.encode("utf-8"))
    # The same chunks in every run: like `text` for truncate, each keeps the UTF-8 form CPython
    # caches at its first use, so both columns time the scan, not CPython's encoder.
    chunks = [text[i : i + LONG_CHUNK] for i in range(0, len(text), LONG_CHUNK)]
    lines = []
    for label, stops in (
        ("4 guard-rail stops", corpus.GUARD_RAIL),
        ("1,000 word stops ending in </, ]] or ##", corpus.tagged_stops(1_000)),
    ):
        log(f"  prose throughput, {label}")
        assert stopstream.truncate(text, stops) == (text, None)
        assert long_feed(chunks, stops) == len(text)
        one_shot = size / best_ns(
            functools.partial(stopstream.truncate, text, stops), config.repeats
        )
        fed = size / best_ns(functools.partial(long_feed, chunks, stops), config.repeats)
        lines.append([label, f"{one_shot:.2f} GB/s", f"{fed:.2f} GB/s"])
    print(
        f"\n### Pydoc prose, {size / 2**20:.1f} MiB, no stop occurs (the text and stops of "
        "`rust/examples/throughput.rs`, which compares the same scan with the `aho-corasick` "
        "crate)\n"
    )
    print(
        table(
            ["stops", "stopstream.truncate", f"StopFilter.feed, {LONG_CHUNK // 1024} Ki chunks"],
            lines,
        )
    )


def compile_ns(stops: Sequence[str]) -> float:
    """Median time to build a filter over ``stops`` made new (not in the compiled-set cache)."""
    runs = []
    for r in range(3):
        fresh = [*stops[:-1], f"{stops[-1]} {r} {time.time_ns()}"]
        runs.append(_timed(lambda: stopstream.StopFilter(fresh)))  # noqa: B023 (called at once)
    return statistics.median(runs)


def construction(stream: corpus.Stream, config: Config, report: Report) -> None:
    log("  construction")
    stops = list(corpus.GUARD_RAIL)
    chunks = stream.str_chunks

    def feeds() -> None:
        f = stopstream.StopFilter(stops)
        feed = f.feed
        for chunk in chunks:
            feed(chunk)

    feed_ns = best_ns(feeds, config.repeats) / len(chunks)

    def build(lists: Sequence[Sequence[str]]) -> Callable[[], None]:
        def run() -> None:
            make = stopstream.StopFilter
            for item in lists:
                make(item)

        return run

    def per_build(lists: Sequence[Sequence[str]], repeats: int) -> float:
        return best_ns(build(lists), repeats) / len(lists)

    n = config.constructions
    cached_ns = per_build([stops] * n, config.repeats)
    equal_ns = per_build([list(stops) for _ in range(n)], config.repeats)
    wraps = best_ns(lambda: [stopstream.wrap(iter(()), stops) for _ in range(n)], config.repeats)
    wrap_ns = wraps / n
    many_1k = list(corpus.generated_stops(1_000))
    cached_1k = per_build([many_1k] * 40, config.repeats)
    many_10k = list(corpus.generated_stops(10_000))
    cached_10k = per_build([many_10k] * 10, config.repeats)

    uncached = []
    for r in range(config.repeats):
        lists = [[*stops[:3], f"<|im_end_{r}_{i}|>"] for i in range(config.unique_lists)]
        uncached.append(_timed(build(lists)) / len(lists))
    uncached_ns = min(uncached)
    compile_1k = compile_ns(many_1k)
    compile_10k = compile_ns(many_10k)

    rows = [
        ("one feed (4 stops, token-sized chunk), best", feed_ns),
        ("StopFilter, 4 stops, same list object (cached), best", cached_ns),
        ("StopFilter, 4 stops, equal new list (cached), best", equal_ns),
        ("wrap, 4 stops, same list (cached), best", wrap_ns),
        ("StopFilter, 4 stops, fresh unique list each time (uncached), best", uncached_ns),
        ("StopFilter, 1,000 stops, same list (cached), best", cached_1k),
        ("StopFilter, 10,000 stops, same list (cached), best", cached_10k),
        ("StopFilter, 1,000 fresh stops (compile), median of 3", compile_1k),
        ("StopFilter, 10,000 fresh stops (compile), median of 3", compile_10k),
    ]
    print("\n### Constructing a filter per request, relative to one feed\n")
    print(
        table(
            ["what", "time", "x one feed"],
            [[what, fmt_ns(ns), fmt_ratio(ns / feed_ns)] for what, ns in rows],
        )
    )
    ratio = cached_ns / feed_ns
    report.target("cached construction vs one feed", fmt_ratio(ratio), "<= 3x", ratio <= 3)
    report.target("compile 10,000 fresh stops", fmt_ns(compile_10k), "<= 5 ms", compile_10k <= 5e6)


MEMORY_PROBE = "--memory-probe"


def _status_bytes(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _rss_bytes() -> int:
    return _status_bytes("VmRSS")


COMPILE_PROBE_STOPS = 100_000


def compile_memory_probe() -> None:
    """Run in a fresh process: peak and kept RSS growth compiling 100,000 special-token stops.

    The peak is reset just before compiling (``/proc/self/clear_refs``); after it, freed memory
    is handed back to the system (``malloc_trim``) so that the kept figure is what the
    compiled set holds.
    """
    import ctypes

    libc = ctypes.CDLL(None)
    stops = list(corpus.token_stops(COMPILE_PROBE_STOPS))
    gc.collect()
    libc.malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")
    before = _rss_bytes()
    f = stopstream.StopFilter(stops)
    libc.malloc_trim(0)
    kept = _rss_bytes() - before
    peak = _status_bytes("VmHWM") - before
    print(peak, kept)
    del f


def memory_probe(kind: str, count: int) -> None:
    """Run in a fresh process: RSS growth per open filter, printed as one number."""
    stops = list(corpus.GUARD_RAIL)
    keep: list[object] = [None] * count
    gc.collect()
    before = _rss_bytes()
    if kind == "str":
        for i in range(count):
            f = stopstream.StopFilter(stops)
            f.feed("Hello <")
            keep[i] = f
    elif kind == "bytes":
        for i in range(count):
            b = stopstream.ByteStopFilter(stops)
            b.feed(b"Hello <\xc3")
            keep[i] = b
    elif kind == "wrap":
        for i in range(count):
            s = stopstream.wrap(iter(["Hello <"]), stops)
            next(s, None)
            keep[i] = s
    gc.collect()
    after = _rss_bytes()
    print((after - before) / count)


def memory(config: Config, report: Report) -> None:
    log("  memory")
    rows = []
    results = {}
    for kind, label in (
        ("str", "StopFilter, fed one chunk"),
        ("bytes", "ByteStopFilter, fed one chunk"),
        ("wrap", "wrap stream, one piece taken"),
    ):
        out = subprocess.run(
            [
                sys.executable,
                os.path.abspath(__file__),
                MEMORY_PROBE,
                kind,
                str(config.open_filters),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        per = float(out.split()[-1])
        results[kind] = per
        rows.append([label, f"{per:,.0f} B"])
    print(
        f"\n### Memory per open filter ({fmt_count(config.open_filters)} open over one "
        "4-stop list; RSS growth / count, fresh process)\n"
    )
    print(table(["object", "bytes each"], rows))
    per = results["str"]
    report.target("memory per open StopFilter", f"{per:,.0f} B", "<= 1 KiB", per <= 1024)
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), MEMORY_PROBE, "compile"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    peak, kept = (int(v) for v in out.split()[-2:])
    print(
        f"\nCompiling {fmt_count(COMPILE_PROBE_STOPS)} special-token stops (fresh process, RSS): "
        f"peak growth {peak / 2**20:.1f} MiB, kept {kept / 2**20:.1f} MiB."
    )
    ratio = peak / max(kept, 1)
    report.target(
        f"peak memory compiling {fmt_count(COMPILE_PROBE_STOPS)} stops vs the compiled set",
        f"{fmt_ratio(ratio)} ({peak / 2**20:.1f} / {kept / 2**20:.1f} MiB)",
        "<= 2x",
        ratio <= 2,
    )


def header(stream: corpus.Stream, config: Config) -> None:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mode = "quick (smoke run: small inputs, few repeats)" if config.quick else "full"
    print(f"## stopstream {stopstream.__version__} benchmarks ({mode})\n")
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{cpu}, {os.cpu_count()} CPUs. Tokenizer: {corpus.ENCODING_NAME} (offline).\n"
        f"Corpus: pydoc topics (prose), {len(corpus.CODE_MODULES)} stdlib modules (code), "
        f"{corpus.cjk_source()} (CJK), interleaved: {fmt_count(len(stream.text))} characters, "
        f"{fmt_count(len(stream.bytes_chunks))} tokens, {fmt_count(len(stream.str_chunks))} "
        "str chunks.\n"
        "Stop sets: 1 = ['</answer>']; 4 = guard-rail ['</answer>', '\\n\\nUser:', '###END', "
        "'<|im_end|>']; 100 / 1k / 10k = the guard-rail stops plus generated ones (word pairs, "
        "tags, markers; none occurs in the text); \\n\\n = ['\\n\\n'] (fires at each paragraph: "
        "the stream is a run of short responses, each with a fresh filter); ReAct = "
        "['Observation:'].\n"
        "Timing: perf_counter_ns, GC off while timed. stopstream and the floors: the fastest of "
        f"{config.repeats} runs over the whole stream. Contenders marked * : a prefix, timed in "
        f"windows of about {config.window_ns / 1e6:.0f} ms (each a fresh response), each "
        f"counting with its fastest of {config.slow_repeats} runs. Other figures: the best or "
        "the median of several runs, as labelled. Per-chunk figures include constructing "
        "each response's filter. "
        f"Load average at start: {load_average()}."
    )


def load_average() -> str:
    """The 1-minute load average (other work on the machine inflates every figure)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [MEMORY_PROBE]:
        if argv[1] == "compile":
            compile_memory_probe()
        else:
            memory_probe(argv[1], int(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fast smoke run (small inputs)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    started = time.monotonic()

    log("preparing inputs")
    stream = corpus.mixed_stream().prefix(config.chunks)
    sets = corpus.stop_sets()
    report = Report()
    header(stream, config)

    log("checking outputs")
    check_outputs(stream, {k: v for k, v in sets.items() if k != "10k"}, report)
    log("timing")
    per_chunk(stream, sets, config, report)
    flatness(stream, config, report)
    by_corpus(config)
    holdback(stream, sets, config, report)
    truncate_section(config, report)
    prose_throughput(config)
    construction(stream, config, report)
    memory(config, report)

    print("\n### Targets\n")
    rows = [[t.name, t.measured, t.target, "met" if t.ok else "MISSED"] for t in report.targets]
    print(table(["target", "measured", "target", "status"], rows))
    missed = [t.name for t in report.targets if not t.ok]
    print(
        f"\n{len(report.targets) - len(missed)} of {len(report.targets)} targets met"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        + "."
    )
    print(f"Run time: {time.monotonic() - started:.0f} s; load average at end: {load_average()}.")
    if report.failures:
        print("\nCORRECTNESS FAILURES:\n" + "\n".join(f"- {f}" for f in report.failures))
        return 2
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
