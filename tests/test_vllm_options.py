"""The vLLM plugin's parts that need no vLLM: reading a request's options, and importing and
registering the plugin where vLLM is not installed (the tests in a real vLLM are in
tests_vllm/, see docs/vllm.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from stopstream import Regex, Stop
from stopstream._vllm_options import read_options


def params(stop: Any = None, extra: Any = None, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(
        stop=stop,
        extra_args=None if extra is None else {"stopstream": extra},
        include_stop_str_in_output=kw.get("include", False),
        min_tokens=kw.get("min_tokens", 0),
    )


def test_no_stops_and_no_options_leave_the_request_to_vllm() -> None:
    assert read_options(params()) is None
    assert read_options(params([])) is None


def test_own_stops_come_first_then_the_extra_ones() -> None:
    extra = {
        "stop": ["a", {"text": "b", "include": True}, {"regex": "c+"}],
        "skip": [["<think>", "</think>"]],
        "skip_until": "</s>",
    }
    for given in (extra, json.dumps(extra)):
        o = read_options(params(["x", "y"], given, include=True))
        assert o is not None
        assert o.stops == ("x", "y", "a", Stop("b", include=True), Regex("c+"))
        assert o.include_stop and o.skip == (("<think>", "</think>"),) and o.skip_until == "</s>"
        assert o.has_regex
    assert read_options(params("z")).stops == ("z",)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"stop": [""]}, '["stop"][0]'),
        ({"stop": ["ok", 3]}, '["stop"][1]'),
        ({"stop": [{"regex": "("}]}, '["stop"][0]'),
        ({"stop": [{"regex": "a*"}]}, '["stop"][0]'),
        ({"stop": [{"text": "a", "regex": "b"}]}, '["stop"][0]'),
        ({"stop": [{"text": "a", "include": 1}]}, '"include"'),
        ({"stop": 5}, '["stop"]'),
        ({"skip": [["a"]]}, '["skip"][0]'),
        ({"skip_until": ""}, '["skip_until"]'),
        ({"stops": []}, "unknown option 'stops'"),
        ("{", "not valid JSON"),
        ([1], "expected an object"),
    ],
)
def test_bad_options_name_themselves(extra: Any, words: str) -> None:
    with pytest.raises(ValueError) as info:
        read_options(params(None, extra))
    assert 'extra_args["stopstream"]' in str(info.value)
    assert words in str(info.value)


def test_regex_stops_cannot_be_combined_with_min_tokens() -> None:
    assert read_options(params(["a"], {"stop": ["b"]}, min_tokens=3)) is not None
    skip = {"stop": [{"text": "b", "include": True}], "skip": [["<", ">"]], "skip_until": "!"}
    assert read_options(params(["a"], skip, min_tokens=3)) is not None
    with pytest.raises(ValueError, match="regex stops cannot be combined with min_tokens"):
        read_options(params(["a"], {"stop": [{"regex": "b+"}]}, min_tokens=3))


def test_the_plugin_imports_and_registers_without_vllm() -> None:
    code = (
        "import sys, stopstream, stopstream.vllm as v\n"
        "assert 'vllm' not in sys.modules\n"
        "try:\n    import vllm  # noqa\nexcept ImportError:\n"
        "    v.register(); assert not v.active()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
