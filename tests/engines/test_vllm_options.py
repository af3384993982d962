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

from stopstream import Regex, Stop, StopFilter, _vllm_options
from stopstream._vllm_options import BOUND_ENV, Bounds, Reasoning, read_options

LIMIT = Bounds().regex_size


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
        assert o.stops == ("x", "y", "a", Stop("b", include=True), Regex("c+", size_limit=LIMIT))
        assert o.include_stop and o.skip == (("<think>", "</think>"),) and o.skip_until == "</s>"
        assert o.compiled.stops == o.stops and o.compiled.include_stop
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


def test_validation_reads_and_compiles_once() -> None:
    """The detokenizer's read of the same options (after vLLM copies the request) is the
    object validation built: parsed and compiled once."""
    _vllm_options.forget()
    text = json.dumps({"stop": ["a", {"regex": "b+c"}]})
    first = read_options(params(["x"], text))
    again = read_options(params(["x"], str(text)))
    assert first is not None and again is first
    assert read_options(params(["y"], text)) is not first  # the request's own stops differ
    assert read_options(params(["x"], text, include=True)) is not first


def test_the_memo_is_bounded_in_bytes() -> None:
    _vllm_options.forget()
    for k in range(200):
        read_options(params(None, json.dumps({"stop": [f"{k}-" + "x" * 4000]})))
    assert len(_vllm_options._MEMO) <= _vllm_options.MEMO_ENTRIES
    assert _vllm_options._memo_bytes <= _vllm_options.MEMO_BYTES
    # Lists whose compiled automata are large: the bytes bound them, not the count.
    _vllm_options.forget()
    big = [f"{i:05}-".ljust(32, "q") for i in range(900)]
    for k in range(40):
        read_options(params(None, json.dumps({"stop": [f"{k}{s}" for s in big]})))
    assert 0 < len(_vllm_options._MEMO) < 40
    assert _vllm_options._memo_bytes >= len(_vllm_options._MEMO) * 1_000_000
    assert _vllm_options._memo_bytes <= _vllm_options.MEMO_BYTES
    _vllm_options.forget()
    assert not _vllm_options._MEMO


def _over(extra: Any, bound: str, bounds: Bounds | None = None, own: Any = None) -> str:
    with pytest.raises(ValueError) as info:
        read_options(params(own, extra), bounds)
    message = str(info.value)
    assert BOUND_ENV[bound] in message, message
    return message


@pytest.mark.parametrize(
    "bound, extra, own",
    [
        ("stops", {"stop": [f"s{i}" for i in range(1024)]}, ["own"]),
        ("stop_bytes", {"stop": ["x" * (Bounds().stop_bytes + 1)]}, None),
        ("stop_bytes", {"stop": ["x" * 16000], "skip": [["<" * 8000, ">" * 8800]]}, None),
        ("regexes", {"stop": [{"regex": f"a{i}"} for i in range(9)]}, None),
        ("pattern_bytes", {"stop": [{"regex": "a" * 1025}]}, None),
        ("regex_size", {"stop": [{"regex": r"(\w+\s?){1,200}z"}]}, None),
        ("skip_pairs", {"skip": [["<", ">"]] * 17}, None),
        (
            "option_bytes",
            json.dumps({"stop": ["a"], "skip_until": "b" * Bounds().option_bytes}),
            None,
        ),
    ],
)
def test_each_bound_is_a_value_error_naming_it_and_its_limit(
    bound: str, extra: Any, own: Any
) -> None:
    message = _over(extra, bound, own=own)
    assert str(getattr(Bounds(), bound)) in message


def test_bounds_at_their_limit_are_accepted() -> None:
    b = Bounds()
    at = {
        "stop": [f"{i:04}" for i in range(b.stops - b.regexes)]
        + [{"regex": f"r{i}"} for i in range(b.regexes)],
        "skip": [[f"<{i}", f">{i}"] for i in range(b.skip_pairs)],
    }
    o = read_options(params(None, json.dumps(at)))
    assert o is not None and len(o.stops) == b.stops
    assert read_options(params(None, {"stop": [{"regex": "a" * b.pattern_bytes}]})) is not None


def test_a_bound_set_by_the_environment() -> None:
    env = {BOUND_ENV["stops"]: "3", BOUND_ENV["regex_size"]: "2000000", BOUND_ENV["regexes"]: "x"}
    bounds, problems = Bounds.from_env(env)
    assert bounds.stops == 3 and bounds.regex_size == 2000000
    assert bounds.regexes == Bounds().regexes
    assert problems == [f"{BOUND_ENV['regexes']}='x' is not a positive whole number"]
    _over({"stop": ["a", "b", "c"]}, "stops", bounds, own=["d"])
    wide = {"stop": [{"regex": r"\w{1,50}z"}]}
    assert read_options(params(None, wide), bounds) is not None
    _over(wide, "regex_size")


def test_a_deep_or_malformed_option_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        read_options(params(None, "[" * 60_000))
    for deep in ('{"stop": [[["a"]]]}', '{"skip": [[["a", "b"]]]}', '{"stop": [{"text": ["a"]}]}'):
        with pytest.raises(ValueError, match=r'extra_args\["stopstream"\]'):
            read_options(params(None, deep))


def test_a_hostile_pattern_is_rejected_fast() -> None:
    """The kind of request that used to stall a server for 25 s (ten such patterns, 450 bytes)."""
    import time

    hostile = json.dumps({"stop": [{"regex": rf"(\w+\s?){{1,200}}z{k}"} for k in range(4)]})
    start = time.thread_time()
    with pytest.raises(ValueError, match="size limit"):
        read_options(params(None, hostile))
    # Not a timing assertion of the library's speed: a generous ceiling against the 25 s it
    # took without the bound, in this thread's CPU time (which the machine's load leaves alone).
    assert time.thread_time() - start < 2.0


def test_reasoning_markers_become_a_skip_region() -> None:
    markers = Reasoning("<think>", "</think>", default=False)
    asked = read_options(params(["Q:"], {"skip_reasoning": True}), None, markers)
    assert asked is not None and asked.skip == (("<think>", "</think>"),)
    assert asked.skip_until is None and asked.reasoning == markers
    f = StopFilter(asked.compiled)
    assert f.feed("<think>Q: no</think>A. Q: x") + f.finish() == "<think>Q: no</think>A. "
    opened = asked.opened_in_reasoning()
    assert opened.skip_until == "</think>" and opened.compiled.skip_until == "</think>"
    f = StopFilter(opened.compiled)
    assert f.feed("Q: no</think>A. Q: x") + f.finish() == "Q: no</think>A. "
    # Not asked, no server default: the stops apply everywhere.
    plain = read_options(params(["Q:"]), None, markers)
    assert plain is not None and plain.skip is None
    # The server default, and a request that opts out of it.
    on = Reasoning("<think>", "</think>", default=True)
    assert read_options(params(["Q:"]), None, on).skip == (("<think>", "</think>"),)  # type: ignore[union-attr]
    off = read_options(params(["Q:"], {"skip_reasoning": False}), None, on)
    assert off is not None and off.skip is None
    # The request's own pairs follow the server's.
    both = read_options(params(["Q:"], {"skip_reasoning": True, "skip": [["[", "]"]]}), None, on)
    assert both is not None and both.skip == (("<think>", "</think>"), ("[", "]"))


def test_skip_reasoning_without_markers_needs_the_requests_own() -> None:
    with pytest.raises(ValueError, match="no reasoning parser"):
        read_options(params(["Q:"], {"skip_reasoning": True}))
    given = read_options(params(["Q:"], {"skip_reasoning": True, "skip_until": "</think>"}))
    assert given is not None and given.skip_until == "</think>"
    with pytest.raises(ValueError, match="expected a boolean"):
        read_options(params(["Q:"], {"skip_reasoning": "yes"}))
    # The server default without markers changes nothing.
    default = read_options(params(["Q:"]), None, Reasoning(None, None, default=True))
    assert default is not None and default.skip is None
