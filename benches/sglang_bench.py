"""The plugin's stop check inside SGLang, against SGLang's own, per request and step.

For 4, 100 and 1,000 stops that never fire (the steady state of a batch), 64 requests each
generate a stream of tokens, one token per step; per step and request the scheduler's work is
timed as SGLang does it for a streamed request: ``update_finish_state(1)`` (the stop check)
then ``check_match_stop_str_prefix()`` (whether to hold the step). "stock" is SGLang's own
functions, "plugin" the plugin's (loaded by SGLang from the entry point). SGLang caps ``stop``
at 32 strings, so the larger lists are set on the normalized parameters directly (the plugin
takes them through ``custom_params``; the cost is the same list either way).

The tokenizer is a byte-level fake over word pieces (decoding is a join: the cost measured is
the stop logic, not a tokenizer's); the text is this repository's README. Run it in the venv
that ``.ci/sglang-venv`` builds:

    ~/.cache/stopstream/venv-sglang/bin/python benches/sglang_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import re
import subprocess
import sys
import time
from array import array
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests_sglang" / "site"))
importlib.import_module("kernel_stub")  # SGLang's GPU kernels stubbed (before SGLang)

GUARDS = ["\n\nHuman:", "</final_answer>", "Observation::", "<|stop_here|>"]


def _sglang(module: str) -> Any:
    """A module of SGLang, typed ``Any``: this file is type-checked where SGLang is not."""
    return importlib.import_module(module)


class WordTokenizer:
    """Ids for word pieces (a word, a space, a punctuation mark); decode joins them."""

    is_fast = False
    eos_token_id = None
    additional_stop_token_ids = None

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, piece: str) -> int:
        if piece not in self.ids:
            self.ids[piece] = len(self.pieces)
            self.pieces.append(piece)
        return self.ids[piece]

    def decode(self, ids: Any, **_: Any) -> str:
        pieces = self.pieces
        return "".join([pieces[i] for i in ids])

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.id(p) for p in re.findall(r"\w+|\s|[^\w\s]", text)]


def stop_list(count: int, rng: random.Random) -> list[str]:
    if count <= len(GUARDS):
        return GUARDS[:count]
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    return GUARDS + [f"<|stop_{i}_{rng.choice(words)}|>" for i in range(count - len(GUARDS))]


def make_requests(tokenizer: WordTokenizer, stops: list[str], n: int, plugin: bool) -> list[Any]:
    batch = _sglang("sglang.srt.managers.schedule_batch")
    params_cls = _sglang("sglang.srt.sampling.sampling_params").SamplingParams
    reqs = []
    for i in range(n):
        if plugin:
            params = params_cls(
                max_new_tokens=1 << 20, custom_params={"stopstream": {"stop": stops}}
            )
            params.normalize(tokenizer)
        else:
            params = params_cls(max_new_tokens=1 << 20, stop=stops[:4])
            params.normalize(tokenizer)
            params.stop_strs = list(stops)
            params.stop_str_max_len = max(len(tokenizer.encode(s)) for s in stops)
        req = batch.Req(
            rid=f"r{i}",
            origin_input_text="Q: ",
            origin_input_ids=array("q", tokenizer.encode("Q: ")),
            sampling_params=params,
            stream=True,
        )
        req.tokenizer = tokenizer
        reqs.append(req)
    return reqs


def per_step(
    tokens: list[int], stops: list[str], plugin: bool, n: int, steps: int
) -> tuple[float, float]:
    """Microseconds per request: its first step (where the plugin reads and compiles the
    request's stops), then per step after it (the stop check, then the streaming hold)."""
    tokenizer = TOKENIZER
    reqs = make_requests(tokenizer, stops, n, plugin)
    rng = random.Random(7)
    offsets = [rng.randrange(len(tokens) - steps - 2) for _ in reqs]
    start = time.perf_counter()
    for req, offset in zip(reqs, offsets, strict=True):
        req.output_ids.append(tokens[offset])
        req.update_finish_state(1)
        req.check_match_stop_str_prefix()
    first = time.perf_counter() - start
    start = time.perf_counter()
    for step in range(1, steps + 1):
        for req, offset in zip(reqs, offsets, strict=True):
            req.output_ids.append(tokens[offset + step])
            req.update_finish_state(1)
            req.check_match_stop_str_prefix()
    elapsed = time.perf_counter() - start
    assert not any(r.finished() for r in reqs), "a stop fired: the lists must never fire"
    return first / n * 1e6, elapsed / (n * steps) * 1e6


TOKENIZER = WordTokenizer()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (CI)")
    args = parser.parse_args()
    requests, steps, repeats = (16, 60, 1) if args.quick else (64, 200, 2)

    load_plugins = _sglang("sglang.srt.plugins").load_plugins
    load_plugins()
    plugin = importlib.import_module("stopstream.sglang")
    assert plugin.active(), "the plugin was not loaded by SGLang"

    text = (ROOT / "README.md").read_text() * 4
    tokens = TOKENIZER.encode(text)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"{requests} requests x {steps} steps, one token per step; microseconds per request")
    print("  per step: the steady state; first step: the plugin reads and compiles the stops")
    print(
        f"{'stops':>6} {'stock/step':>11} {'plugin/step':>12} {'stock/plugin':>13}"
        f" {'stock/first':>12} {'plugin/first':>13}"
    )
    rng = random.Random(1)
    for count in (4, 100, 1000):
        stops = stop_list(count, rng)
        best: dict[str, float] = {}
        first: dict[str, float] = {}
        for _ in range(repeats):
            for name in ("stock", "plugin"):
                plugin.set_enabled(name == "plugin")
                setup, us = per_step(tokens, stops, name == "plugin", requests, steps)
                best[name] = min(best.get(name, us), us)
                first[name] = min(first.get(name, setup), setup)
        plugin.set_enabled(True)
        ratio = best["stock"] / best["plugin"]
        print(
            f"{count:>6} {best['stock']:>11.2f} {best['plugin']:>12.2f} {ratio:>12.1f}x"
            f" {first['stock']:>12.1f} {first['plugin']:>13.1f}"
        )
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average, after the run)")


if __name__ == "__main__":
    main()
