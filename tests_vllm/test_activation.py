"""Which vLLM the plugin serves (contract §10.1): decided by the surfaces it patches, with one
warning line for a release it was not tested against; inactive, saying why, where a surface
differs, under ``STOPSTREAM_VLLM=0`` and under ``VLLM_USE_RUST_FRONTEND=1``; and while inactive, a
request carrying stopstream options is rejected at validation, never served without its stops.

Each case runs in a fresh interpreter: registering patches vLLM's classes for good.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

# Registers the plugin in a fresh process after `SETUP` has run, and reports what it decided
# and what validation does with a request carrying stopstream options.
SCRIPT = """
import json, logging, sys
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
import vllm
{setup}
import stopstream.vllm as plugin
from stopstream.vllm import _logger
log = _logger()
log.addHandler(Keep())
log.setLevel(logging.INFO)
log.propagate = False
plugin.register()
from vllm import SamplingParams
verdict = plugin._state["verdict"]
params = SamplingParams(max_tokens=4, extra_args={{"stopstream": {{"stop": ["a"]}}}})
try:
    params.verify(None, None, None, None)
    error = None
except Exception as e:
    error = f"{{type(e).__name__}}: {{e}}"
print(json.dumps({{
    "active": plugin.active(), "reason": verdict.reason, "warning": verdict.warning,
    "error": error, "log": [r for r in records if "stopstream" in r],
}}))
"""


def run(setup: str = "", **env: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(setup=setup)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_a_tested_release_is_served() -> None:
    import vllm

    got = run()
    assert got["active"] is True, got
    assert got["warning"] is None
    assert ".".join(vllm.__version__.split(".")[:2]) in str(got["reason"])
    # An active plugin validates the options, and these are fine (the model config is not
    # needed by the options; vLLM's own checks may still object to the None arguments).
    assert got["error"] is None or "stopstream" not in str(got["error"])


def test_a_newer_release_with_the_same_surfaces_is_served_with_one_warning() -> None:
    got = run("vllm.__version__ = '0.99.1'")
    assert got["active"] is True, got
    warnings = [line for line in got["log"] if "not a release the plugin was tested" in line]
    assert len(warnings) == 1 and "0.99.1" in warnings[0], got


@pytest.mark.parametrize(
    ("setup", "env", "words"),
    [
        ("", {"STOPSTREAM_VLLM": "0"}, "STOPSTREAM_VLLM=0"),
        ("", {"VLLM_USE_RUST_FRONTEND": "1"}, "VLLM_USE_RUST_FRONTEND=1"),
        (
            "import vllm.v1.engine.output_processor as op\n"
            "del op.RequestState._new_completion_output",
            {},
            "RequestState._new_completion_output",
        ),
        (
            "import vllm.v1.engine.detokenizer as d\n"
            "def update(self, token_ids, stop_terminated): pass\n"
            "d.BaseIncrementalDetokenizer.update = update",
            {},
            "BaseIncrementalDetokenizer",
        ),
        (
            "import vllm.sampling_params as sp\n"
            "f = sp.SamplingParams.verify\n"
            "def verify(self, model_config, tokenizer=None): return None\n"
            "sp.SamplingParams.verify = verify",
            {},
            "SamplingParams.verify",
        ),
        (
            "import vllm.v1.engine.detokenizer as d\ndel d.IncrementalDetokenizer.from_new_request",
            {},
            "from_new_request",
        ),
    ],
)
def test_an_inactive_plugin_says_why_and_rejects_stopstream_options(
    setup: str, env: dict[str, str], words: str
) -> None:
    got = run(setup, **env)
    assert got["active"] is False, got
    assert words in str(got["reason"]), got
    lines = [line for line in got["log"] if "inactive" in line]
    assert len(lines) == 1 and words in lines[0], got
    if "SamplingParams.verify" in words:
        return  # the replaced verify is not vLLM's: nothing to reject with
    error = str(got["error"])
    assert "stopstream vLLM plugin is inactive" in error and words in error, got
    assert error.startswith("StopstreamOptionError"), got


def test_the_command_reports_the_verdict_and_the_bounds() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "stopstream.vllm"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("stopstream vLLM plugin: active (vLLM "), out.stdout
    assert "STOPSTREAM_VLLM_MAX_STOPS=1024" in out.stdout
    off = subprocess.run(
        [sys.executable, "-m", "stopstream.vllm"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_USE_RUST_FRONTEND": "1", "STOPSTREAM_VLLM_MAX_STOPS": "x"},
    )
    assert off.returncode == 1
    assert "inactive" in off.stdout and "VLLM_USE_RUST_FRONTEND=1" in off.stdout
    assert "STOPSTREAM_VLLM_MAX_STOPS='x' is not a positive whole number" in off.stdout
