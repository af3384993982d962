"""custom_params["stopstream"]: read when SGLang normalizes a request's sampling parameters, so
a bad option is a ValueError there (SGLang's answer to a bad request: a 400), naming the option
or the bound and its environment variable; and never an error inside the scheduler."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sglang.srt.sampling.sampling_params import SamplingParams

from conftest import ByteTokenizer, Run
from stopstream.sglang import BOUND_ENV, SGLANG, request_options


def normalize(tokenizer: ByteTokenizer, options: Any, **kw: Any) -> SamplingParams:
    params = SamplingParams(max_new_tokens=10, custom_params={"stopstream": options}, **kw)
    params.normalize(tokenizer)
    return params


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stop": [""]}, r'custom_params\["stopstream"\]\["stop"\]\[0\]: a stop cannot be empty'),
        ({"stop": [{"regex": "a("}]}, r'custom_params\["stopstream"\]\["stop"\]\[0\]: invalid'),
        ({"stop": [{"regex": "a*"}]}, r"empty string"),
        ({"stop": [{"text": "a", "regex": "b"}]}, r"one of them"),
        ({"stop": [3]}, r"a stop is a string or an object"),
        ({"stop": "x", "nope": 1}, r"unknown option 'nope'"),
        ({"skip": [["a"]]}, r'custom_params\["stopstream"\]\["skip"\]\[0\]: expected \[open'),
        ({"skip_until": ""}, r"skip_until"),
        ({"skip_reasoning": True}, r"skip_reasoning"),
        ("{not json", r"not valid JSON"),
        ([1], r"expected an object"),
    ],
)
def test_bad_options_are_value_errors(tokenizer: ByteTokenizer, options: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        normalize(tokenizer, options)


@pytest.mark.parametrize(
    ("options", "bound"),
    [
        ({"stop": [f"s{i}" for i in range(1025)]}, "stops"),
        ({"stop": ["x" * (33 << 10)]}, "stop_bytes"),
        ({"stop": [{"regex": f"a{i}"} for i in range(9)]}, "regexes"),
        ({"stop": [{"regex": "a" * 1025}]}, "pattern_bytes"),
        ({"stop": [{"regex": r"\w{500}"}]}, "regex_size"),
        ({"skip": [["a", "b"]] * 17}, "skip_pairs"),
        (json.dumps({"stop": ["y" * (130 << 10)]}), "option_bytes"),
    ],
)
def test_bounds_name_the_bound_and_its_variable(
    tokenizer: ByteTokenizer, options: Any, bound: str
) -> None:
    with pytest.raises(ValueError, match=BOUND_ENV[bound]):
        normalize(tokenizer, options)
    assert BOUND_ENV[bound].startswith("STOPSTREAM_SGLANG_MAX_")


def test_deep_json_is_a_value_error(tokenizer: ByteTokenizer) -> None:
    with pytest.raises(ValueError, match=r"nested too deeply|not valid JSON"):
        normalize(tokenizer, "[" * 100_000)


def test_request_stop_counts_toward_the_bound(tokenizer: ByteTokenizer) -> None:
    # SGLang's own `stop` (at most 32) and the options' stops together.
    with pytest.raises(ValueError, match=BOUND_ENV["stops"]):
        normalize(
            tokenizer,
            {"stop": [f"o{i}" for i in range(1024 - 3)]},
            stop=["a", "b", "c", "d"],
        )


def test_options_beyond_sglangs_stop_cap(tokenizer: ByteTokenizer) -> None:
    # SGLang caps `stop` at 32; the options take up to the bound.
    params = normalize(tokenizer, {"stop": [f"w{i}" for i in range(1000)]})
    found = request_options(params)
    assert found is not None
    assert len(found[0].stops) == 1000


def test_json_string_options(tokenizer: ByteTokenizer) -> None:
    run = Run(tokenizer, custom={"stopstream": json.dumps({"stop": [{"regex": "b+c"}]})})
    for t in ["a", "bb", "c", "d"]:
        if run.step([tokenizer.id(t.encode())]):
            break
    run.end()
    assert run.text == "a"
    assert run.req.finished_reason.matched == "bbc"


def test_bad_options_in_the_scheduler_abort_the_request(tokenizer: ByteTokenizer) -> None:
    # Normalization rejects these first; if a request gets past it, the scheduler ends that
    # request with a 400-style abort, never raises.
    run = Run(tokenizer, custom={"stopstream": {"stop": ["ok"]}})
    run.req.sampling_params.custom_params = {"stopstream": {"stop": [""]}}
    run.step([tokenizer.id(b"a")])
    reason = run.req.finished_reason.to_json()
    assert reason["type"] == "abort"
    assert reason["status_code"] == 400
    assert "a stop cannot be empty" in reason["message"]


def test_bounds_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from stopstream._vllm_options import Bounds

    monkeypatch.setenv("STOPSTREAM_SGLANG_MAX_STOPS", "7")
    bounds, problems = Bounds.from_env(names=SGLANG.env_names())
    assert bounds.stops == 7
    assert problems == []
