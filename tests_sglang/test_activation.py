"""Activation: the plugin serves an SGLang whose surfaces are the ones it replaces; otherwise
(or under STOPSTREAM_SGLANG=0) it stays inactive with one log line saying why, leaves SGLang's
own functions in place, and rejects requests that carry stopstream options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sglang.srt.managers import schedule_batch
from sglang.srt.managers.detokenizer_manager import DetokenizerManager

import stopstream.sglang

SITE = Path(__file__).resolve().parent / "site"

# A fresh process: SGLang's plugin loading, as its scheduler runs it, after `prelude`.
SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s", stream=sys.stdout)
from sglang.srt.managers import schedule_batch
from sglang.srt.sampling.sampling_params import SamplingParams
{prelude}
from sglang.srt.plugins import load_plugins
load_plugins()
import stopstream.sglang
print("ACTIVE", stopstream.sglang.active())
print("REPLACED", schedule_batch.Req._check_str_based_finish.__name__,
      hasattr(schedule_batch.Req._check_str_based_finish, "__wrapped__"))
params = SamplingParams(max_new_tokens=4, custom_params={{"stopstream": {{"stop": ["x"]}}}})
try:
    params.normalize(None)
    print("NORMALIZED")
except ValueError as e:
    print("REJECTED", e)
"""


# Each: the prelude run before SGLang loads its plugins, and the environment. The processes
# start together (each spends most of its time importing SGLang).
PROCESSES = {
    "default": ("", {}),
    "off": ("", {"STOPSTREAM_SGLANG": "0"}),
    "differs": ("schedule_batch.Req.check_match_stop_str_prefix = lambda self, tail: False", {}),
}


@pytest.fixture(scope="module")
def outputs() -> dict[str, list[str]]:
    """The output of each process of PROCESSES, and of ``python -m stopstream.sglang``."""
    commands = {
        name: [sys.executable, "-c", SCRIPT.format(prelude=prelude)]
        for name, (prelude, _) in PROCESSES.items()
    }
    commands["command line"] = [sys.executable, "-m", "stopstream.sglang"]
    started = {
        name: subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SITE), **PROCESSES.get(name, ("", {}))[1]},
        )
        for name, command in commands.items()
    }
    found = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, (name, err[-3000:])
        found[name] = out.splitlines()
    return found


def plugin_lines(lines: list[str]) -> list[str]:
    return [s for s in lines if "stopstream: SGLang plugin" in s]


def test_active_here() -> None:
    verdict = stopstream.sglang.check()
    assert verdict.active, verdict.reason
    assert verdict.reason == "SGLang 0.5.23 is a tested release"


def test_loaded_by_sglang_one_line(outputs: dict[str, list[str]]) -> None:
    lines = outputs["default"]
    assert plugin_lines(lines) == [
        "sglang.srt.plugins.stopstream stopstream: SGLang plugin active (SGLang 0.5.23): stops "
        "are applied by stopstream (STOPSTREAM_SGLANG=0 turns it off)"
    ]
    assert "ACTIVE True" in lines
    assert "REPLACED _check_str_based_finish True" in lines
    assert "NORMALIZED" in lines


def test_turned_off(outputs: dict[str, list[str]]) -> None:
    lines = outputs["off"]
    assert plugin_lines(lines) == [
        "sglang.srt.plugins.stopstream stopstream: SGLang plugin inactive: turned off by "
        "STOPSTREAM_SGLANG=0"
    ]
    assert "ACTIVE False" in lines
    assert "REPLACED _check_str_based_finish False" in lines
    rejected = [s for s in lines if s.startswith("REJECTED")]
    assert rejected and "plugin is inactive in this server (turned off" in rejected[0]


def test_inactive_where_a_surface_differs(outputs: dict[str, list[str]]) -> None:
    lines = outputs["differs"]
    (line,) = plugin_lines(lines)
    assert "inactive: this SGLang differs from what the plugin replaces" in line
    assert "Req.check_match_stop_str_prefix()" in line
    assert "ACTIVE False" in lines
    assert "REPLACED _check_str_based_finish False" in lines
    assert any(s.startswith("REJECTED") for s in lines)


@pytest.mark.parametrize(
    ("owner", "name", "replacement", "named"),
    [
        (schedule_batch.Req, "_check_str_based_finish", lambda self: False, "_check_str_based"),
        (
            schedule_batch.Req,
            "update_finish_state",
            lambda self, new_accepted_len=1: None,
            "called by update_finish_state",
        ),
        (
            DetokenizerManager,
            "trim_matched_stop",
            lambda self, output, finished_reason: output,
            "trim_matched_stop",
        ),
        (schedule_batch, "FINISH_MATCHED_STR", None, "FINISH_MATCHED_STR"),
    ],
)
def test_check_sees_each_surface(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, replacement: Any, named: str
) -> None:
    monkeypatch.setattr(owner, name, replacement)
    verdict = stopstream.sglang.check()
    assert not verdict.active
    assert named in verdict.reason


def test_an_untested_release_with_the_same_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    import sglang

    monkeypatch.setattr(sglang, "__version__", "0.5.99")
    verdict = stopstream.sglang.check()
    assert verdict.active
    assert verdict.warning is not None and "0.5.99" in verdict.warning


def test_the_command_line(outputs: dict[str, list[str]]) -> None:
    lines = outputs["command line"]
    assert lines[0] == (
        "stopstream SGLang plugin: active (SGLang 0.5.23): SGLang 0.5.23 is a tested release"
    )
    assert "  STOPSTREAM_SGLANG_MAX_STOPS=1024" in lines
    assert "  STOPSTREAM_SGLANG_SKIP_REASONING=0" in lines
