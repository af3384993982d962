"""Stops beyond literal strings (contract §6): per-chunk cost and held text on real token streams.

Per-chunk cost of ``stopstream.wrap`` over the token corpus (``corpus.mixed_stream``, cl100k
``str`` chunks) with 4 regex stops, 4 literal + 4 regex stops, and 4 literal stops with a skip
region, against the literal path with the same 4 literal stops (the gateway guard rails, which
never occur in the corpus, so every chunk is scanned to the end). Then the characters held back
after each chunk, against vLLM's and SGLang's rules on the same streams.

Run: ``python benches/regex_bench.py [--quick]``. Targets: regex <= 3x literal, skip region
<= 1.2x literal (ratios of the best of several runs, all in one process).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
from collections import deque
from collections.abc import Callable, Sequence
from time import perf_counter_ns

import corpus
from contenders import holdall, vllm

import stopstream

LITERAL = corpus.GUARD_RAIL
REGEX = (r"</answer\s*>", r"\n\nUser:\s", r"#{3}END\b", r"<\|im_end\|>")
"""The guard rails as patterns (each allows what a model varies: spaces, a word boundary)."""
WORDS = (r"\bFINAL ANSWER\b", r"\bTERMINATE\b", r"\bend of turn\b", r"\bSTOP\b")
"""Unicode word-boundary patterns (the NFA engine): none occurs in the corpus."""
SKIP = [("<think>", "</think>")]


def best_ns(runs: Sequence[Callable[[], object]], repeats: int) -> list[int]:
    """The fastest of ``repeats`` timed calls of each run, the runs interleaved (one call of
    each per round), so that a busy machine slows them alike and the ratios hold."""
    for run in runs:
        run()
    best = [0] * len(runs)
    for round_ in range(repeats):
        for i, run in enumerate(runs):
            gc.collect()
            gc.disable()
            try:
                start = perf_counter_ns()
                run()
                elapsed = perf_counter_ns() - start
            finally:
                gc.enable()
            best[i] = elapsed if round_ == 0 else min(best[i], elapsed)
    return best


def wrap_run(chunks: Sequence[str], stops: object, **options: object) -> Callable[[], object]:
    def run() -> None:
        s = stopstream.wrap(iter(chunks), stops, **options)  # type: ignore[call-overload]
        deque(s, maxlen=0)
        assert s.stop_reason == "end", s.stop_sequence

    return run


def held_per_chunk(chunks: Sequence[str], stops: object, **options: object) -> float:
    f = stopstream.StopFilter(stops, **options)  # type: ignore[arg-type]
    held = 0
    for chunk in chunks:
        f.feed(chunk)
        if f.stopped:
            f = stopstream.StopFilter(stops, **options)  # type: ignore[arg-type]
        held += len(f.pending)
    return held / len(chunks)


def probe_mean(
    contender: Callable[..., object], chunks: Sequence[str], stops: Sequence[str]
) -> float:
    probe: list[int] = []
    deque(contender(chunks, stops, probe), maxlen=0)  # type: ignore[call-overload]
    return sum(probe) / len(probe)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short stream, fewer repeats")
    args = parser.parse_args(argv)
    stream = corpus.mixed_stream()
    if args.quick:
        stream = stream.prefix(5_000)
    chunks = stream.str_chunks
    repeats = 3 if args.quick else 15
    regex = [stopstream.Regex(p) for p in REGEX]
    words = [stopstream.Regex(p) for p in WORDS]
    rows: list[tuple[str, Callable[[], object]]] = [
        ("literal path, 4 stops", wrap_run(chunks, LITERAL)),
        ("4 regex stops", wrap_run(chunks, regex)),
        ("4 literal + 4 regex stops", wrap_run(chunks, [*LITERAL, *regex])),
        ("4 literal stops + skip region", wrap_run(chunks, LITERAL, skip=SKIP)),
        ("4 literal stops + skip_until", wrap_run(chunks, LITERAL, skip_until="</think>")),
        ("4 regex stops, Unicode \\b (NFA engine)", wrap_run(chunks, words)),
    ]
    print(f"stream: {stream.name}, {len(chunks):,} chunks, wrap over str chunks\n")
    print(f"| {'stops':<40} | ns/chunk | vs literal |")
    print(f"|{'-' * 42}|---------:|-----------:|")
    times = best_ns([run for _, run in rows], repeats)
    base = times[0] / len(chunks)
    ratios: dict[str, float] = {}
    for (label, _), total in zip(rows, times, strict=True):
        ns = total / len(chunks)
        ratios[label] = ns / base
        print(f"| {label:<40} | {ns:8.0f} | {ns / base:9.2f}x |")
    print("\nCharacters held back after a chunk (mean), same stream:\n")
    occurring = ("\n\n", "Observation:")
    print(f"| {'rule':<44} | guard rails | {occurring!r} |")
    print(f"|{'-' * 46}|------------:|------------:|")
    rules: list[tuple[str, Callable[[Sequence[str]], float]]] = [
        ("stopstream (literal stops)", lambda s: held_per_chunk(chunks, list(s))),
        (
            "stopstream (same stops as Regex)",
            lambda s: held_per_chunk(chunks, [stopstream.Regex(re.escape(x)) for x in s]),
        ),
        ("vLLM v1 (max(len) - 1 always)", lambda s: probe_mean(vllm, chunks, s)),
        ("SGLang / llama.cpp (all on partial)", lambda s: probe_mean(holdall, chunks, s)),
    ]
    for label, fn in rules:
        print(f"| {label:<44} | {fn(LITERAL):11.2f} | {fn(occurring):11.2f} |")
    print(
        "| stopstream, guard rails as patterns above     | "
        f"{held_per_chunk(chunks, regex):11.2f} |             |"
    )
    worst_regex = max(ratios["4 regex stops"], ratios["4 literal + 4 regex stops"])
    skip = ratios["4 literal stops + skip region"]
    print(
        f"\ntarget regex <= 3x literal: {worst_regex:.2f}x {'ok' if worst_regex <= 3 else 'MISSED'}"
    )
    print(f"target skip <= 1.2x literal: {skip:.2f}x {'ok' if skip <= 1.2 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
