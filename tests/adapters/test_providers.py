"""``stopstream.providers``: what to send upstream, what to enforce only locally."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

import stopstream
from stopstream import Regex, Stop, StopSet
from stopstream._vllm_options import read_options
from stopstream.providers import (
    PROVIDERS,
    STOP_LIMITS,
    Limits,
    StopSplit,
    limits_for,
    split_stops,
)

STOPS = ["</answer>", "\n\nUser:", "###", "END", "<|im_end|>", "Observation:"]


@pytest.mark.parametrize(
    ("limit", "upstream"),
    [("openai", 4), ("gemini", 5), ("none", 0), (0, 0), (2, 2), (10, 6), (None, 6)],
)
def test_split_by_limit(limit: int | str | None, upstream: int) -> None:
    split = split_stops(STOPS, limit)
    assert split == StopSplit(STOPS[:upstream], STOPS[upstream:])
    assert [*split.upstream, *split.rest] == STOPS


def test_duplicates_are_sent_once_and_inputs_are_validated() -> None:
    assert split_stops(["a", "a", "b", "a", "c"], 2) == (["a", "b"], ["c"])
    assert split_stops("one", "openai") == (["one"], [])
    assert split_stops(None, "openai") == ([], [])
    with pytest.raises(ValueError, match="position 1"):
        split_stops(["a", ""], 4)
    with pytest.raises(ValueError, match="unknown provider"):
        split_stops(STOPS, "mistrall")
    with pytest.raises(ValueError, match=">= 0"):
        split_stops(STOPS, -1)
    with pytest.raises(TypeError):
        split_stops(STOPS, 1.5)  # type: ignore[arg-type]
    assert STOP_LIMITS["openai"] == 4 and STOP_LIMITS["gemini"] == 5


# --- the table: every provider and model family ------------------------------------------------


@dataclass(frozen=True)
class Case:
    provider: str
    model: str | None
    count: int | None
    whitespace_rejected: bool = False
    max_length: int | None = None


CASES = [
    Case("openai", None, 4),
    Case("openai", "gpt-4o", 4),
    Case("openai", "gpt-4.1-mini", 4),
    Case("openai", "o1", 0),
    Case("openai", "o1-mini", 0),
    Case("openai", "o3", 0),
    Case("openai", "o3-mini-2025-01-31", 0),
    Case("openai", "o4-mini", 0),
    Case("openai", "gpt-5", 0),
    Case("openai", "gpt-5-mini", 0),
    Case("openai", "gpt-5-nano", 0),
    Case("openai", "gpt-5.2", 0),
    Case("openai", "openai/o3", 0),  # a LiteLLM-style route prefix
    Case("openai", "some-future-model", 4),  # unknown: the provider's default
    Case("openai-responses", None, 0),
    Case("openai-responses", "gpt-4o", 0),
    Case("anthropic", None, None, whitespace_rejected=True),
    Case("anthropic", "claude-sonnet-4-5", None, whitespace_rejected=True),
    Case("gemini", None, 5),
    Case("gemini", "gemini-2.5-flash", 5),
    Case("vertex", "gemini-2.5-pro", 5),
    Case("bedrock", None, 2500),
    Case("bedrock", "amazon.nova-pro-v1:0", 2500),
    Case("bedrock", "deepseek.r1-v1:0", 2500, max_length=10),
    Case("bedrock", "us.deepseek.r1-v1:0", 2500, max_length=10),
    Case("bedrock", "anthropic.claude-3-haiku", 2500, whitespace_rejected=True),
    Case("bedrock", "eu.anthropic.claude-3-haiku", 2500, whitespace_rejected=True),
    Case("mistral", "mistral-large-latest", 4),
    Case("cohere", "command-r-plus", 5),
    Case("groq", "llama-3.3-70b-versatile", 4),
    Case("deepseek", "deepseek-chat", 16),
    Case("xai", None, 4),
    Case("xai", "grok-3", 4),
    Case("xai", "grok-3-mini", 0),
    Case("xai", "grok-3-mini-fast", 0),
    Case("xai", "grok-4", 0),
    Case("xai", "grok-4-0709", 0),
    Case("xai", "grok-code-fast-1", 0),
    Case("xai", "grok-4-fast-non-reasoning", 4),
    Case("xai", "grok-4-1-fast-non-reasoning", 4),
    Case("vllm", None, 4),
    Case("vllm", "meta-llama/Llama-3.1-8B-Instruct", 4),
    Case("sglang", None, None),
    Case("sglang", "Qwen/Qwen3-8B", None),
    Case("none", None, 0),
    Case("none", "anything", 0),
]


def test_every_provider_has_cases() -> None:
    assert {case.provider for case in CASES} == set(PROVIDERS)


def ids(case: Case) -> str:
    return f"{case.provider}:{case.model}"


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_limits_per_provider_and_model(case: Case) -> None:
    limits = limits_for(case.provider, case.model)
    assert limits.count == case.count
    assert limits.rejects_whitespace_only is case.whitespace_rejected
    assert limits.max_length == case.max_length


MANY = [f"<stop{i}>" for i in range(3000)]


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_split_per_provider_and_model(case: Case) -> None:
    stops = ["\n", *MANY, " \t", "a-long-stop-sequence", "</answer>"]
    split = split_stops(stops, case.provider, case.model)
    limits = Limits(case.count, case.max_length, case.whitespace_rejected)
    accepted = [s for s in stops if limits.accepts(s)]
    expected = accepted if case.count is None else accepted[: case.count]
    assert split.upstream == expected
    assert split.rest == [s for s in stops if s not in expected]  # the order kept
    if case.whitespace_rejected:
        assert "\n" in split.rest and " \t" in split.rest
    if case.max_length is not None:
        assert all(len(s) <= case.max_length for s in split.upstream)
        assert "a-long-stop-sequence" in split.rest


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_limit_overrides_the_table(case: Case) -> None:
    split = split_stops(STOPS, case.provider, case.model, limit=2)
    assert split.upstream == STOPS[:2]
    assert split_stops(STOPS, case.provider, case.model, limit=0).upstream == []


def test_anthropic_whitespace_only_stops_stay_local_and_keep_their_order() -> None:
    split = split_stops(["\n", "</answer>", "\n\n", "User:", "  "], "anthropic")
    assert split == (["</answer>", "User:"], ["\n", "\n\n", "  "])


def test_an_unknown_provider_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown provider 'openia'") as info:
        split_stops(STOPS, "openia")
    for name in PROVIDERS:
        assert repr(name) in str(info.value)
    with pytest.raises(ValueError, match="unknown provider"):
        limits_for("")


def test_bad_limit() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        split_stops(STOPS, "openai", limit=-1)
    with pytest.raises(TypeError):
        split_stops(STOPS, "openai", limit=True)


class PatternLike:
    """Stands for a stop object that is not a literal string (a pattern)."""

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PatternLike)


class IncludedLiteral(str):
    """A literal stop whose text is kept (``include=True``)."""

    include = True


def test_patterns_and_included_stops_stay_local() -> None:
    # The check split_stops makes on each stop item (as the filter's ``stops`` returns it).
    from stopstream import providers

    assert not providers._local_only("a", False)
    assert providers._local_only("a", True)  # a StopSet's include_stop
    assert providers._local_only(PatternLike(), False)
    assert providers._local_only(IncludedLiteral("b"), False)


def test_stop_and_regex_items_stay_local() -> None:
    from stopstream import Regex, Stop

    stops: list[str | Stop | Regex] = ["a", Regex(r"\d+"), Stop("b", include=True), Stop("c")]
    stops += ["a", "d"]
    split = split_stops(stops, "openai")
    assert split.upstream == ["a", "d"]
    assert split.rest == [Regex(r"\d+"), Stop("b", include=True), Stop("c")]


def test_a_stop_sets_own_flags_keep_its_stops_local() -> None:
    from stopstream import Stop, StopSet

    # The provider would cut before "</answer>" and drop it: a set that keeps its stops must
    # enforce them all itself.
    kept = StopSet(["</answer>", "x", Stop("y", include=False)], include_stop=True)
    split = split_stops(kept, "openai")
    assert split.upstream == [] and split.rest == ["</answer>", "x", Stop("y", include=False)]
    assert split_stops(StopSet(["a", "b"]), "openai").upstream == ["a", "b"]
    # The upstream sees no skip regions: a stop there could cut the reasoning.
    for regions in ({"skip_until": "</think>"}, {"skip": [("<think>", "</think>")]}):
        split = split_stops(StopSet(["a"], **regions), "openai")
        assert split.upstream == [] and split.rest == ["a"]


def test_vllm_keeps_four_upstream_unless_told_otherwise() -> None:
    stops = [f"s{i}" for i in range(7)]
    split = split_stops(stops, "vllm")
    assert list(split.upstream) == stops[:4] and list(split.rest) == stops[4:]
    # A server started with VLLM_MAX_STOP_STRINGS=6.
    split = split_stops(stops, "vllm", limit=6)
    assert list(split.upstream) == stops[:6] and list(split.rest) == stops[6:]
    split = split_stops(stops, "sglang")
    assert list(split.upstream) == stops and not split.rest


# --- a vLLM server running the stopstream plugin: the rest goes in `vllm_xargs` ---------------


_SIX = [f"s{i}" for i in range(6)]
_THINK = ("<think>", "</think>")
# (stops, limit, upstream, the plugin's options, a text where a stop fires)
PLUGIN_CASES = [
    pytest.param(_SIX, None, _SIX[:4], {"stop": _SIX[4:]}, "xs5s4", id="over-the-count"),
    pytest.param(_SIX, 6, _SIX, {}, "xs3", id="all-fit"),
    pytest.param(_SIX, 0, [], {"stop": _SIX}, "xs1s0", id="limit-0"),
    pytest.param(
        ["a", "a", "b", "c", "d", "b", "e", "e"],
        None,
        ["a", "b", "c", "d"],
        {"stop": ["e"]},
        "xey",
        id="duplicates",
    ),
    pytest.param(
        [Regex(r"\d+"), "a", Stop("c")],
        None,
        ["a"],
        {"stop": [{"regex": r"\d+", "include": False}, {"text": "c", "include": False}]},
        "xc1a",
        id="regex-and-stop",
    ),
    pytest.param(
        ["a", Stop("b", include=True), "b", "c"],
        None,
        ["a"],  # "b" follows the kept "b" to the plugin: listed first, the kept one wins
        {"stop": [{"text": "b", "include": True}, "b", "c"]},
        "xbay",
        id="include-keeps-its-place",
    ),
    pytest.param(
        StopSet(["a", Stop("y", include=False), Regex("z+")], include_stop=True),
        None,
        [],
        {
            "stop": [
                {"text": "a", "include": True},
                {"text": "y", "include": False},
                {"regex": "z+", "include": True},
            ]
        },
        "xzzya",
        id="set-include-stop",
    ),
    pytest.param(
        StopSet(["a", "b"], skip=[_THINK]),
        None,
        [],
        {"stop": ["a", "b"], "skip": [list(_THINK)]},
        "<think>a</think>xby",
        id="skip",
    ),
    pytest.param(
        StopSet(["a"], skip_until="</think>"),
        None,
        [],
        {"stop": ["a"], "skip_until": "</think>"},
        "a</think>xay",
        id="skip-until",
    ),
    pytest.param(None, None, [], {}, "xy", id="no-stops"),
]


@pytest.mark.parametrize(("stops", "limit", "upstream", "options", "text"), PLUGIN_CASES)
def test_plugin_split(
    stops: Any, limit: int | None, upstream: list[str], options: dict[str, Any], text: str
) -> None:
    split = split_stops(stops, "vllm", limit=limit, plugin=True)
    assert split == StopSplit(upstream, [], options)
    assert (split.upstream, split.rest, split.plugin) == (upstream, [], options)
    assert split.vllm_xargs() == ({"stopstream": json.dumps(options)} if options else {})


def _kinds(stops: StopSet) -> set[tuple[str, str, bool]]:
    """Each stop as what it matches: its kind, its text or pattern, whether its text is kept."""
    kinds = set()
    for item in stops.stops:
        own = None if isinstance(item, str) else item.include
        kept = stops.include_stop if own is None else own
        if isinstance(item, Regex):
            kinds.add(("regex", item.pattern, kept))
        else:
            kinds.add(("text", item if isinstance(item, str) else item.text, kept))
    return kinds


@pytest.mark.parametrize(("stops", "limit", "upstream", "options", "text"), PLUGIN_CASES)
def test_plugin_split_is_what_the_plugin_reads(
    stops: Any, limit: int | None, upstream: list[str], options: dict[str, Any], text: str
) -> None:
    """The request the split makes (``stop`` and the ``vllm_xargs`` as sent: a JSON string),
    read by the plugin's own reader, cuts text as the stops given do."""
    split = split_stops(stops, "vllm", limit=limit, plugin=True)
    xargs = json.loads(json.dumps(split.vllm_xargs()))  # over the wire
    params = SimpleNamespace(
        stop=split.upstream, extra_args=xargs, include_stop_str_in_output=False, min_tokens=0
    )
    read = read_options(params)
    given = StopSet(stops)
    if read is None:
        assert not given.stops
        return
    served = StopSet(read.stops, read.include_stop, skip=read.skip, skip_until=read.skip_until)
    assert (served.skip, served.skip_until) == (given.skip, given.skip_until)
    assert _kinds(served) == _kinds(given)
    assert stopstream.truncate(text, given)[1] is not None
    assert stopstream.truncate(text, served) == stopstream.truncate(text, given)


def test_plugin_split_shape_and_errors() -> None:
    split = split_stops(STOPS, "vllm", plugin=True)
    upstream, rest = split  # a pair, as ever
    assert (upstream, rest) == (STOPS[:4], []) and split == (STOPS[:4], [])
    assert split != StopSplit(STOPS[:4], [])  # the plugin's options are part of the value
    assert split == pickle.loads(pickle.dumps(split))
    assert repr(split).endswith(", plugin={'stop': ['<|im_end|>', 'Observation:']})")
    assert repr(split_stops(STOPS, "vllm")).endswith("rest=['<|im_end|>', 'Observation:'])")
    with pytest.raises(ValueError, match="plugin=True"):
        split_stops(STOPS, "vllm").vllm_xargs()  # a rest to enforce locally, not to send
    for provider in ("openai", "sglang", 4, None):
        with pytest.raises(ValueError, match="plugin=True is for provider 'vllm'"):
            split_stops(STOPS, provider, plugin=True)
