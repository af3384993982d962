"""Stops beyond literal strings (contract §6): per-chunk cost and held text on real token streams.

Per-chunk cost of ``stopstream.wrap`` over the token corpus (``corpus.mixed_stream``, cl100k
``str`` chunks) with 4 regex stops, 4 literal + 4 regex stops, and 4 literal stops with a skip
region, against the literal path with the same 4 literal stops (the gateway guard rails, which
never occur in the corpus, so every chunk is scanned to the end). Then the characters held back
after each chunk, against vLLM's and SGLang's rules on the same streams.

Then the cost of many live match attempts: per character of ``Regex(r".{N}x")`` (every start in
the last ``N`` characters is an attempt still alive, each in its own automaton state) fed in
4-character chunks once the attempts have filled, and ``Regex(r"(?s).{4000}", include=True)``
as a length cap over a 16,000-character response (the whole ``wrap``, until the cap fires).

Run: ``python benches/regex_bench.py [--quick]``. Targets: regex <= 3x literal, skip region
<= 1.2x literal (ratios of the best of several runs, all in one process); per character, the
``N = 2,000`` row at most 2.5x the ``N = 1,000`` row (linear in the live attempts) and
``.{1000}x`` at most 10 us.
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
ATTEMPTS = (125, 250, 500, 1_000, 2_000)
"""``N`` of the ``.{N}x`` rows: the number of live attempts once the text is ``N`` long."""
CAP = 4_000
"""The length cap, in characters."""
RESPONSE = 16_000
"""The length of the response the cap is applied to, in characters."""


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


def no_match_text(length: int) -> str:
    """``length`` characters of the corpus with no ``x`` and no line break: ``.{N}x`` never
    matches it, and every start in its last ``N`` characters stays a live attempt."""
    text = corpus.mixed_text().replace("x", "y").replace("\n", " ")
    return (text * (length // len(text) + 1))[:length]


def quads(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def attempts_ns_per_char(n: int, measured: int, repeats: int) -> float:
    """Per character of ``Regex(r".{n}x")`` over 4-character chunks, once ``n`` characters have
    filled the attempts: the best of ``repeats`` runs over ``measured`` more characters."""
    stops = [stopstream.Regex(f".{{{n}}}x")]
    warm = quads(no_match_text(n + 4))
    timed = quads(no_match_text(n + 4 + measured))[len(warm) :]
    best = 0
    for round_ in range(repeats):
        f = stopstream.StopFilter(stops)
        for chunk in warm:
            f.feed(chunk)
        gc.collect()
        gc.disable()
        try:
            start = perf_counter_ns()
            for chunk in timed:
                f.feed(chunk)
            elapsed = perf_counter_ns() - start
        finally:
            gc.enable()
        assert not f.stopped and len(f.pending) >= n, (n, len(f.pending))
        best = elapsed if round_ == 0 else min(best, elapsed)
    return best / (4 * len(timed))


def length_cap_ns(repeats: int) -> int:
    """The whole ``wrap`` of a ``RESPONSE``-character response in 4-character chunks with the
    ``CAP``-character cap (it fires at ``CAP``): the best of ``repeats`` runs."""
    text = corpus.mixed_text()[:RESPONSE]
    chunks = quads(text)
    stops = [stopstream.Regex(f"(?s).{{{CAP}}}", include=True)]

    def run() -> None:
        s = stopstream.wrap(iter(chunks), stops)
        out = "".join(s)
        assert s.stop_reason == "stop_sequence" and out == text[:CAP], len(out)

    return best_ns([run], repeats)[0]


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
    print("\nMany live attempts (4-character chunks):\n")
    print(f"| {'stop':<52} | {'cost':>14} |")
    print(f"|{'-' * 54}|{'-' * 15}:|")
    measured = 500 if args.quick else 2_000
    per_char: dict[int, float] = {}
    for n in ATTEMPTS:
        per_char[n] = attempts_ns_per_char(n, measured, min(repeats, 5))
        label = f"Regex(r'.{{{n}}}x'), per character"
        print(f"| {label:<52} | {per_char[n] / 1000:11.2f} us |")
    cap = length_cap_ns(min(repeats, 5))
    label = f"Regex(r'(?s).{{{CAP}}}', include=True), {RESPONSE:,} chars"
    print(f"| {label:<52} | {cap / 1e6:11.2f} ms |")
    worst_regex = max(ratios["4 regex stops"], ratios["4 literal + 4 regex stops"])
    skip = ratios["4 literal stops + skip region"]
    print(
        f"\ntarget regex <= 3x literal: {worst_regex:.2f}x {'ok' if worst_regex <= 3 else 'MISSED'}"
    )
    print(f"target skip <= 1.2x literal: {skip:.2f}x {'ok' if skip <= 1.2 else 'MISSED'}")
    growth = per_char[2_000] / per_char[1_000]
    print(
        f"target .{{2000}}x <= 2.5x .{{1000}}x per character: {growth:.2f}x "
        f"{'ok' if growth <= 2.5 else 'MISSED'}"
    )
    us = per_char[1_000] / 1000
    print(f"target .{{1000}}x <= 10 us per character: {us:.2f} us {'ok' if us <= 10 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
