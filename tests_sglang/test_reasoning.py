"""Reasoning-aware stops (contract §10.3 through §11): with ``skip_reasoning`` (or the server's
``STOPSTREAM_SGLANG_SKIP_REASONING=1``), a request's stops, SGLang's own ``stop`` included, do not
fire inside the model's reasoning; the markers are those of the reasoning parser the server
names (``--reasoning-parser``), read from SGLang's own runtime configuration and parser.

Each server configuration is a fresh process (SGLang's configuration is process-wide): SGLang
loads the plugin, a runtime configuration is published as SGLang's launcher publishes it (a
tiny model config, the parser named), then requests go through SGLang's ``Req`` and detokenizer
as in the other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent

SCRIPT = """
import json, sys, tempfile
sys.path[:0] = [{site!r}, {here!r}]
import conftest
from transformers import LlamaConfig
from sglang.srt import runtime_context
from sglang.srt.server_args import ServerArgs

model = tempfile.mkdtemp()
LlamaConfig(
    vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=2, architectures=["LlamaForCausalLM"],
).save_pretrained(model)
runtime_context.publish(
    ServerArgs(model_path=model, reasoning_parser={parser!r}, skip_tokenizer_init=True,
               device="cpu"),
    role="test",
)
results = []
for case in json.loads(sys.argv[1]):
    tokenizer = conftest.ByteTokenizer()
    try:
        run = conftest.Run(
            tokenizer, stop=case["stop"], custom=case["custom"], prompt=case["prompt"]
        )
    except ValueError as e:
        results.append({{"error": str(e)}})
        continue
    ids = [tokenizer.id(bytes([b])) for b in case["text"].encode()]
    for _ in run.feed(ids, [1] * len(ids)):
        pass
    run.end()
    results.append({{"text": run.text, "finish": run.finish_json}})
print("RESULTS", json.dumps(results))
"""

THINK = "<think>Q: is it 2?\n\nUser: no.</think>It is 2.\n\nUser: next"
R1 = "Q: is it 2?\n\nUser: no.</think>It is 2.\n\nUser: next"


def case(text: str, stop: Any, custom: Any = None, prompt: str = "Q: ") -> dict[str, Any]:
    return {"text": text, "stop": stop, "custom": custom, "prompt": prompt}


# Each configuration: the parser, the environment, and (request, what the client gets).
CONFIGS: dict[str, tuple[str, dict[str, str], list[tuple[dict[str, Any], Any]]]] = {
    "qwen3": (
        "qwen3",
        {},
        [
            # The stop inside the reasoning does not fire; the one after it does.
            (case(THINK, ["\n\nUser:"], {"stopstream": {"skip_reasoning": True}}), THINK[:-12]),
            # Without skip_reasoning the first one fires, as in SGLang.
            (case(THINK, ["\n\nUser:"]), "<think>Q: is it 2?"),
            # stopstream's own stops too; the request's own skip regions are kept beside.
            (
                case(
                    THINK + " <x>\n\nUser:</x> end. fin",
                    None,
                    {"stopstream": {"stop": ["fin", "end."], "skip_reasoning": True}},
                ),
                THINK + " <x>\n\nUser:</x> ",
            ),
        ],
    ),
    "deepseek-r1": (
        "deepseek-r1",
        {},
        [
            # The parser takes every output to start inside the reasoning (the template opens
            # it): the stops wait for the end marker, with no start marker in the text.
            (case(R1, ["\n\nUser:"], {"stopstream": {"skip_reasoning": True}}), R1[:-12]),
            (case(R1, ["\n\nUser:"]), "Q: is it 2?"),
        ],
    ),
    "qwen3, the server's default on": (
        "qwen3",
        {"STOPSTREAM_SGLANG_SKIP_REASONING": "1"},
        [
            # A request with SGLang's own stop only: the default applies.
            (case(THINK, ["\n\nUser:"]), THINK[:-12]),
            # A request can still say no.
            (
                case(THINK, ["\n\nUser:"], {"stopstream": {"skip_reasoning": False}}),
                "<think>Q: is it 2?",
            ),
        ],
    ),
}


@pytest.fixture(scope="module")
def results() -> dict[str, list[dict[str, Any]]]:
    started = {}
    for name, (parser, env, cases) in CONFIGS.items():
        script = SCRIPT.format(site=str(HERE / "site"), here=str(HERE), parser=parser)
        started[name] = subprocess.Popen(
            [sys.executable, "-c", script, json.dumps([c for c, _ in cases])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
    found = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, (name, err[-3000:])
        (line,) = [s for s in out.splitlines() if s.startswith("RESULTS ")]
        found[name] = json.loads(line.removeprefix("RESULTS "))
    return found


@pytest.mark.parametrize("config", list(CONFIGS))
def test_stops_wait_for_the_end_of_the_reasoning(
    results: dict[str, list[dict[str, Any]]], config: str
) -> None:
    for (request, expected), got in zip(CONFIGS[config][2], results[config], strict=True):
        assert "error" not in got, (request, got)
        assert got["text"] == expected, (request, got)
        assert got["finish"]["type"] == "stop", (request, got)
