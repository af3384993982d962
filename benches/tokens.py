"""Token ids in: one engine step for a batch of streams, against vLLM's frontend path.

Usage (from the repository root, with the package built in release mode)::

    python benches/tokens.py           # full run: about a minute on 2 idle cores
    python benches/tokens.py --quick   # smoke run: a few seconds

A serving engine's step produces one new token per running stream. Per step and batch size
(1, 64, 256, 1024 streams), three contenders turn those ids into text with stops applied:

* **vLLM's frontend path**, re-implemented in plain Python from ``vllm/v1/engine/detokenizer.py``
  (``FastIncrementalDetokenizer`` and ``check_stop_strings``): per stream, a
  ``tokenizers.decoders.DecodeStream`` steps over the new id, the text is appended to the
  stream's output, each stop is sought with ``str.find`` from ``1 - new_chars - len(stop)``
  characters before the end, and ``get_next_output_text`` returns the new text minus a
  ``max(len(stop)) - 1`` holdback;
* a Python loop calling ``TokenStopFilter.feed(id)`` per stream;
* one ``stopstream.feed_batch(filters, ids)`` call for the whole batch, ``ids`` holding one
  ``int`` per stream (and, in the last column, the same call with a list of one id per stream,
  the shape an engine that may emit several ids per step passes).

Every contender gets each stream's new id as an ``int``, as ``DecodeStream.step`` takes it.

The tokenizer is a Hugging Face byte-level BPE trained at start-up on the benchmark corpus
(CPython's pydoc topics; nothing is downloaded). Every stream is the same prose from its own
offset; the stops are the four guard rails of ``corpus.GUARD_RAIL`` (they never occur, so every
contender does its full work each step). The outputs of all three are checked equal. Times are
the CPU time of the calling thread (``time.thread_time_ns``: every contender, ``feed_batch``
included, does its work on that thread, and on a shared machine other processes' work then does
not count), with the garbage collector off, the fastest of several runs.

Last, reading a vocabulary: ``Vocab.from_tokenizers`` over a byte-level vocabulary of about
100k ids (pieces of the corpus's words) against the same reading with the decoder's rules in
plain Python (``stopstream.reference``), as the package read one before the core did.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import corpus
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.decoders import DecodeStream

import stopstream
from stopstream.reference import reference_tokenizer_tokens

Piece = stopstream.TokenPiece

T = TypeVar("T")
STOPS = list(corpus.GUARD_RAIL)
BATCHES = (1, 64, 256, 1024)


def wide_tokenizer(size: int) -> Tokenizer:
    """A byte-level BPE vocabulary of about ``size`` ids without merges, the pieces of the
    corpus's words (up to 12 bytes), to time reading one as large as a model's."""
    alphabet = {b: c for c, b in byte_level_alphabet().items()}
    tokens: dict[str, int] = {}
    for word in corpus.prose_text().encode("utf-8").split():
        for start in range(len(word)):
            for end in range(start + 1, min(len(word), start + 12) + 1):
                token = "".join(alphabet[b] for b in word[start:end])
                tokens.setdefault(token, len(tokens))
        if len(tokens) >= size:
            break
    tok = Tokenizer(models.BPE(tokens, []))
    tok.decoder = decoders.ByteLevel()
    return tok


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character standing for each byte."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(others)}}


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.prose_text()[:400_000].splitlines(), trainer)
    return tok


class VllmStream:
    """One request in vLLM's frontend: ``DecodeStream`` plus ``check_stop_strings``."""

    def __init__(self, tokenizer: Tokenizer, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.stream = DecodeStream(skip_special_tokens=True)
        self.stops = stops
        self.buffer = max(len(s) for s in stops) - 1 if stops else 0
        self.output_text = ""
        self.sent = 0
        self.stopped = False

    def step(self, token_id: int) -> str:
        before = len(self.output_text)
        self.output_text += self.stream.step(self.tokenizer, token_id) or ""
        new = len(self.output_text) - before
        if new and self.stops:
            for stop in self.stops:
                at = self.output_text.find(stop, 1 - new - len(stop))
                if at != -1:
                    self.output_text = self.output_text[:at]
                    self.stopped = True
                    break
        end = len(self.output_text) - (0 if self.stopped else self.buffer)
        if self.sent < end:
            out = self.output_text[self.sent : end]
            self.sent = end
            return out
        return ""


Steps = list[list[int]]
"""Per step, per stream, the id fed."""

ListSteps = list[list[list[int]]]
"""Per step, per stream, the ids fed as a list (of one)."""


def run_vllm(per_step: Steps, streams: list[VllmStream]) -> list[list[str]]:
    return [[r.step(new) for r, new in zip(streams, step, strict=True)] for step in per_step]


def run_loop(per_step: Steps, fs: list[stopstream.TokenStopFilter]) -> list[list[Piece]]:
    return [[f.feed(new) for f, new in zip(fs, step, strict=True)] for step in per_step]


def run_batch(
    per_step: Steps | ListSteps, fs: list[stopstream.TokenStopFilter]
) -> list[list[Piece]]:
    feed_batch = stopstream.feed_batch
    return [feed_batch(fs, step) for step in per_step]


def joined(steps: list[list[Piece]]) -> list[str]:
    return ["".join(step[k].text for step in steps) for k in range(len(steps[0]))]


def best_of(repeats: int, setup: Callable[[], T], run: Callable[[T], object]) -> int:
    """The fastest of ``repeats`` timed runs of ``run(setup())`` (``setup`` untimed), in ns,
    garbage collector off."""
    best = None
    for _ in range(repeats):
        arg = setup()
        gc.collect()
        gc.disable()
        try:
            t0 = time.thread_time_ns()
            run(arg)
            elapsed = time.thread_time_ns() - t0
        finally:
            gc.enable()
        best = elapsed if best is None else min(best, elapsed)
    assert best is not None
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    steps = 20 if args.quick else 200
    repeats = 2 if args.quick else 5

    tokenizer = train_tokenizer()
    vocab = stopstream.Vocab.from_tokenizers(tokenizer)
    ids = tokenizer.encode(corpus.prose_text()[400_000:700_000]).ids
    print(f"tokenizer: byte-level BPE, {tokenizer.get_vocab_size()} ids; {len(ids)} corpus ids")
    print(f"stops: {STOPS}; {steps} steps per run, fastest of {repeats} runs")
    print(f"load average: {os.getloadavg()[0]:.2f}\n")

    rows: list[tuple[float, ...]] = []
    for batch in BATCHES:
        offsets = [(i * 997) % (len(ids) - steps - 1) for i in range(batch)]
        per_step = [[ids[o + s] for o in offsets] for s in range(steps)]
        as_lists = [[[i] for i in step] for step in per_step]

        def vllm_streams(n: int = batch) -> list[VllmStream]:
            return [VllmStream(tokenizer, STOPS) for _ in range(n)]

        def filters(n: int = batch) -> list[stopstream.TokenStopFilter]:
            return [stopstream.TokenStopFilter(vocab, STOPS) for _ in range(n)]

        # The same text from all three, once the held text is flushed.
        rs, f1, f2, f3 = vllm_streams(), filters(), filters(), filters()
        sent = run_vllm(per_step, rs)
        want = [
            "".join(step[k] for step in sent) + r.output_text[r.sent :] for k, r in enumerate(rs)
        ]
        for got, fs in (
            (joined(run_loop(per_step, f1)), f1),
            (joined(run_batch(per_step, f2)), f2),
            (joined(run_batch(as_lists, f3)), f3),
        ):
            if [t + f.finish().text for t, f in zip(got, fs, strict=True)] != want:
                print(f"outputs differ at batch {batch}", file=sys.stderr)
                return 2
        # Only the steps are timed: the streams are built before each run.
        times = [
            best_of(repeats, setup, functools.partial(run, per_step)) / steps / 1000
            for setup, run in (
                (vllm_streams, run_vllm),
                (filters, run_loop),
                (filters, run_batch),
            )
        ]
        lists_time = best_of(repeats, filters, functools.partial(run_batch, as_lists))
        times.append(lists_time / steps / 1000)
        rows.append((batch, *times))

    print("### One engine step (one new id per stream), µs per step\n")
    print(
        "| streams | vLLM path | loop of feed | feed_batch | vLLM ÷ batch | loop ÷ batch "
        "| feed_batch, lists |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, vllm, loop, fb, fb_lists in rows:
        print(
            f"| {size:.0f} | {vllm:,.1f} | {loop:,.1f} | {fb:,.1f} | {vllm / fb:,.1f}x "
            f"| {loop / fb:,.1f}x | {fb_lists:,.1f} |"
        )

    # One call of each, per id: DecodeStream.step against TokenStopFilter.feed.
    count = 2_000 if args.quick else 20_000
    stream_ids = ids[:count]

    def decode_steps(s: DecodeStream) -> None:
        step = s.step
        for i in stream_ids:
            step(tokenizer, i)

    def feeds(f: stopstream.TokenStopFilter) -> None:
        feed = f.feed
        for i in stream_ids:
            feed(i)

    decode = best_of(repeats, lambda: DecodeStream(skip_special_tokens=True), decode_steps) / count
    feed = best_of(repeats, lambda: stopstream.TokenStopFilter(vocab, STOPS), feeds) / count
    print("\n### One id, one call, ns per call\n")
    print("| DecodeStream.step | TokenStopFilter.feed | feed ÷ step |")
    print("|---:|---:|---:|")
    print(f"| {decode:,.0f} | {feed:,.0f} | {feed / decode:.2f}x |")

    # Reading a vocabulary: the core's decoder against the same rules in Python.
    big = wide_tokenizer(100_000)
    size = big.get_vocab_size(with_added_tokens=True)

    def in_python(tok: Tokenizer) -> stopstream.Vocab:
        config, words = json.loads(tok.to_str()), tok.get_vocab(with_added_tokens=True)
        tokens, special, strip = reference_tokenizer_tokens(config, words, size)
        return stopstream.Vocab(tokens, special=special, strip_leading_space=strip)

    read = best_of(repeats, lambda: big, stopstream.Vocab.from_tokenizers) / 1e6
    python = best_of(repeats, lambda: big, in_python) / 1e6
    print(f"\n### Reading a {size:,}-id byte-level vocabulary, ms\n")
    print("| Vocab.from_tokenizers | with the decoder's rules in Python | Python ÷ core |")
    print("|---:|---:|---:|")
    print(f"| {read:,.0f} | {python:,.0f} | {python / read:.1f}x |")

    at256 = next(r for r in rows if r[0] == 256)
    print("\nTargets: vLLM path ÷ feed_batch ≥ 50x at 256 streams;")
    print("loop ÷ feed_batch ≥ 5x at 256;")
    print("one feed of one id ≤ 0.1x one DecodeStream.step.")
    print(
        f"Measured: {at256[1] / at256[3]:.1f}x, {at256[2] / at256[3]:.1f}x, {feed / decode:.2f}x."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
