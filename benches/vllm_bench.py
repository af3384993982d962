"""The plugin's cost inside vLLM's frontend, against vLLM's own stops, per request and step.

Two measures, each with 256 running requests streaming ``DELTA`` and one new token per request
per step, with 0, 4, 100 and 1,000 stops that never fire (the steady state of a batch):

* the detokenizer alone: ``update([token], False)`` then ``get_next_output_text(False, True)``
  for every request, as ``OutputProcessor.process_outputs`` calls them;
* ``OutputProcessor.process_outputs`` itself, fed hand-made ``EngineCoreOutput`` lists (how
  vLLM's own CPU tests drive it), which adds vLLM's per-request bookkeeping and output objects.

"stock" is vLLM's own detokenizer (the plugin switched off in this process); "plugin" is the
plugin's default (the token-id path where it applies, as here). With 0 stops both are vLLM's
own: the plugin does not serve requests without stops. The tokenizer is the tests' tiny
byte-level BPE (made on the spot, no download), the token streams this repository's README.
Run it in the venv that ``.ci/vllm-venv`` builds:

    .venv-vllm/bin/python benches/vllm_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests_vllm"))
# The tests' tiny model (a module of tests_vllm/, found through the path above).
tiny_model: Any = importlib.import_module("tiny_model")

REQUESTS = 256
GUARDS = ["\n\nHuman:", "</final_answer>", "Observation::", "<|stop_here|>"]


def _vllm(module: str) -> Any:
    """A module of vLLM (or the plugin, which needs it), typed ``Any``: this file is
    type-checked where vLLM is not installed."""
    return importlib.import_module(module)


def stop_list(count: int, rng: random.Random, kind: str = "tags") -> list[str]:
    """The 4 guard rails, then tags (``<|stop_17_beta|>``, which begin like special tokens)
    or words (``beta-17:gamma``, whose first letters begin many tokens of English text: the
    text is then held at about 4 steps in 10)."""
    if count <= len(GUARDS):
        return GUARDS[:count]
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    if kind == "tags":
        more = [f"<|stop_{i}_{rng.choice(words)}|>" for i in range(count - 4)]
    else:
        more = [f"{rng.choice(words)}-{i}:{rng.choice(words)}" for i in range(count - 4)]
    return [*GUARDS, *more]


def make_requests(tokenizer: Any, stops: list[str], prompt_ids: list[int]) -> list[Any]:
    SamplingParams = _vllm("vllm").SamplingParams
    RequestOutputKind = _vllm("vllm.sampling_params").RequestOutputKind
    EngineCoreRequest = _vllm("vllm.v1.engine").EngineCoreRequest

    return [
        EngineCoreRequest(
            request_id=f"r{i}",
            external_req_id=f"r{i}",
            prompt_token_ids=prompt_ids,
            mm_features=None,
            sampling_params=SamplingParams(
                stop=stops or None, max_tokens=10_000, output_kind=RequestOutputKind.DELTA
            ),
            pooling_params=None,
            arrival_time=0.0,
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
        )
        for i in range(REQUESTS)
    ]


def streams(ids: list[int], steps: int) -> list[list[int]]:
    """One token stream per request: the README's tokens from a different offset each."""
    span = len(ids) - steps - 1
    return [ids[(i * 997) % span : (i * 997) % span + steps] for i in range(REQUESTS)]


def bench_detokenizer(tokenizer: Any, requests: list[Any], tokens: list[list[int]]) -> float:
    """Microseconds per request-step."""
    IncrementalDetokenizer = _vllm("vllm.v1.engine.detokenizer").IncrementalDetokenizer

    dets = [IncrementalDetokenizer.from_new_request(tokenizer, r) for r in requests]
    plugin = _vllm("stopstream.vllm")
    if plugin._state["classes"][0].from_new_request == plugin._state["classes"][2] and (
        requests[0].sampling_params.stop
    ):
        # Served by the plugin, not handed back to vLLM's own (a list over the bounds would be).
        kinds = {type(d).__name__ for d in dets}
        assert kinds <= {"TokenDetokenizer", "StopDetokenizer"}, kinds
    steps = len(tokens[0])
    t0 = time.thread_time()
    for s in range(steps):
        for d, ids in zip(dets, tokens, strict=True):
            d.update([ids[s]], False)
            d.get_next_output_text(False, True)
    return (time.thread_time() - t0) / (steps * len(dets)) * 1e6


def bench_process_outputs(tokenizer: Any, requests: list[Any], tokens: list[list[int]]) -> float:
    EngineCoreOutput = _vllm("vllm.v1.engine").EngineCoreOutput
    OutputProcessor = _vllm("vllm.v1.engine.output_processor").OutputProcessor

    processor = OutputProcessor(tokenizer, log_stats=False)
    for r in requests:
        processor.add_request(r, None)
    steps = len(tokens[0])
    batches = [
        [
            EngineCoreOutput(request_id=r.request_id, new_token_ids=[ids[s]])
            for r, ids in zip(requests, tokens, strict=True)
        ]
        for s in range(steps)
    ]
    t0 = time.thread_time()
    for batch in batches:
        processor.process_outputs(batch)
    elapsed = time.thread_time() - t0
    assert processor.get_num_unfinished_requests() == len(requests), "a stop fired"
    return elapsed / (steps * len(requests)) * 1e6


def bench_memory(tokenizer: Any, requests: list[Any], tokens: list[list[int]]) -> float:
    """Bytes of heap per request: detokenizers for 16 copies of the requests, each fed its
    token stream (the state of a batch in flight), counted by glibc's ``mallinfo2`` in a
    process run with ``PYTHONMALLOC=malloc`` (so that Python's objects and the filters' Rust
    state are both malloc's)."""
    IncrementalDetokenizer = _vllm("vllm.v1.engine.detokenizer").IncrementalDetokenizer
    libc = ctypes.CDLL(None)

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )]  # fmt: skip

    libc.mallinfo2.restype = MallInfo2

    def in_use() -> int:
        info = libc.mallinfo2()
        return int(info.uordblks + info.hblkhd)

    copies = requests * 16
    streams_ = tokens * 16
    gc.collect()
    before = in_use()
    dets = [IncrementalDetokenizer.from_new_request(tokenizer, r) for r in copies]
    for d, ids in zip(dets, streams_, strict=True):
        for token in ids:
            d.update([token], False)
            d.get_next_output_text(False, True)
    gc.collect()
    grown = in_use() - before
    del dets
    return grown / len(copies)


def memory_child(tokenizer: Any, requests: list[Any], tokens: list[list[int]]) -> None:
    """``--memory``: print the bytes per request of vLLM's own detokenizer and the plugin's."""
    plugin = _vllm("stopstream.vllm")
    result = {}
    for name, enabled in (("stock", False), ("plugin", True)):
        plugin.set_enabled(enabled)
        result[name] = min(bench_memory(tokenizer, requests, tokens) for _ in range(3))
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="few steps (a smoke run)")
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    plugin = _vllm("stopstream.vllm")
    get_tokenizer = _vllm("vllm.tokenizers").get_tokenizer

    plugin.register()
    assert plugin.active()
    with tempfile.TemporaryDirectory() as d:
        model = tiny_model.make_model(Path(d), vocab_size=2000)
        tokenizer = get_tokenizer(str(model))
    text = (tiny_model.REPO / "README.md").read_text(encoding="utf-8")
    ids = tokenizer.encode(text, add_special_tokens=False)
    prompt_ids = tokenizer.encode("Answer the question.")
    steps = 8 if args.quick else 64
    tokens = streams(ids, steps)
    rng = random.Random(0)
    rows = []
    if args.memory:
        memory_child(tokenizer, make_requests(tokenizer, stop_list(4, rng), prompt_ids), tokens)
        return
    child = subprocess.run(
        [sys.executable, __file__, "--memory", *(["--quick"] if args.quick else [])],
        env={**os.environ, "PYTHONMALLOC": "malloc"},
        capture_output=True,
        text=True,
        check=True,
    )
    memory = json.loads(child.stdout.strip().splitlines()[-1])
    for count, kind in ((0, "tags"), (4, "tags"), (100, "tags"), (1000, "tags"), (1000, "words")):
        stops = stop_list(count, rng, kind)
        requests = make_requests(tokenizer, stops, prompt_ids)
        row: dict[str, float] = {}
        for name, enabled in (("stock", False), ("plugin", True)):
            plugin.set_enabled(enabled)
            best_d = min(bench_detokenizer(tokenizer, requests, tokens) for _ in range(5))
            best_p = min(bench_process_outputs(tokenizer, requests, tokens) for _ in range(5))
            row[f"detok_{name}"], row[f"proc_{name}"] = best_d, best_p
        if count == 4:
            for name, enabled in (("stock", False), ("plugin", True), ("stock", False)):
                plugin.set_enabled(enabled)
                memory[name] = min(
                    memory.get(name, 1e18), bench_memory(tokenizer, requests, tokens)
                )
        plugin.set_enabled(True)
        rows.append((f"{count}" + (" (words)" if kind == "words" else ""), row))
    load = os.getloadavg()
    print(
        f"256 requests, DELTA, {steps} steps, best of 5, CPU time of the thread; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(
        "| stops | detokenizer: stock | plugin | plugin / stock "
        "| process_outputs: stock | plugin | plugin / stock |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        print(
            f"| {label} | {r['detok_stock']:.2f} µs | {r['detok_plugin']:.2f} µs "
            f"| {r['detok_plugin'] / r['detok_stock']:.2f}x "
            f"| {r['proc_stock']:.2f} µs | {r['proc_plugin']:.2f} µs "
            f"| {r['proc_plugin'] / r['proc_stock']:.2f}x |"
        )
    print(
        f"memory per request (4 stops, {steps} tokens each, heap): stock "
        f"{memory['stock']:.0f} B, plugin {memory['plugin']:.0f} B "
        f"({memory['plugin'] / memory['stock']:.2f}x)"
    )
    flat = [r["detok_plugin"] for c, r in rows if c in ("4", "100", "1000")]
    print(f"plugin detokenizer, max / min over 4, 100, 1000 stops: {max(flat) / min(flat):.2f}x")


if __name__ == "__main__":
    main()
