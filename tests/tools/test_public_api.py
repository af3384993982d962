"""The public face: each public module's ``__all__`` is its API, ``dir()`` lists that and
nothing else (not the module's imports or helpers), and every name listed resolves; the type
aliases every caller needs are public."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Iterable
from types import ModuleType

import pytest

import stopstream

PUBLIC: dict[str, list[str]] = {
    "stopstream": [
        "AsyncStopStream",
        "ByteStopFilter",
        "Regex",
        "SkipRegions",
        "Stop",
        "StopFilter",
        "StopItem",
        "StopReason",
        "StopSet",
        "StopStream",
        "Stops",
        "TokenPiece",
        "TokenStopFilter",
        "TokenStopReason",
        "Vocab",
        "__version__",
        "awrap",
        "feed_batch",
        "truncate",
        "wrap",
    ],
    "stopstream.openai": [
        "AsyncChatStopStream",
        "AsyncResponsesStopStream",
        "ChatStopStream",
        "ResponsesStopStream",
        "awrap_chat",
        "awrap_responses",
        "truncate_chat",
        "truncate_response",
        "wrap_chat",
        "wrap_responses",
    ],
    "stopstream.anthropic": [
        "AsyncMessagesStopStream",
        "MessagesStopStream",
        "awrap_messages",
        "truncate_message",
        "wrap_messages",
    ],
    "stopstream.gemini": [
        "AsyncGeminiStopStream",
        "GeminiMachine",
        "GeminiStopStream",
        "awrap",
        "truncate_response",
        "wrap",
    ],
    "stopstream.sse": [
        "AnthropicSSEStream",
        "AsyncAnthropicSSEStream",
        "AsyncGeminiSSEStream",
        "AsyncOpenAISSEStream",
        "AsyncResponsesSSEStream",
        "GeminiSSEStream",
        "OpenAISSEStream",
        "ResponsesSSEStream",
        "awrap_anthropic",
        "awrap_gemini",
        "awrap_openai",
        "awrap_responses",
        "wrap_anthropic",
        "wrap_gemini",
        "wrap_openai",
        "wrap_responses",
    ],
    "stopstream.asgi": [
        "FORWARDED_HEADERS",
        "MAX_BODY_BYTES",
        "MAX_STOPS",
        "MAX_STOP_BYTES",
        "Api",
        "GatewayError",
        "Prepared",
        "UpstreamPool",
        "endpoint",
        "prepare",
        "read_json",
        "relay",
        "route",
        "upstream_url",
    ],
    "stopstream.litellm": ["PROVIDER_NAMES", "StopstreamCallback", "callback"],
    "stopstream.providers": [
        "PROVIDERS",
        "STOP_LIMITS",
        "Limits",
        "ProviderLimits",
        "StopSplit",
        "limits_for",
        "split_stops",
    ],
    "stopstream.reference": [
        "ReferenceByteStopFilter",
        "ReferenceStopFilter",
        "ReferenceTokenStopFilter",
        "Regex",
        "Stop",
        "StopReason",
        "find_stop",
        "held_suffix_length",
        "reference_tokenizer_tokens",
        "reference_truncate",
        "validate_stops",
    ],
    "stopstream.sglang": [
        "BOUND_ENV",
        "CUT_KEY",
        "SGLANG",
        "TESTED",
        "Verdict",
        "active",
        "check",
        "main",
        "register",
        "request_options",
        "set_enabled",
    ],
    "stopstream.vllm": [
        "TESTED",
        "Verdict",
        "active",
        "check",
        "main",
        "register",
        "request_stops",
        "set_enabled",
        "set_token_path",
    ],
}
# The package's dir() also names the submodules it imports on first use.
PACKAGE_SUBMODULES = ["anthropic", "openai", "providers", "sse"]


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_the_public_api(name: str) -> None:
    module = _module(name)
    assert sorted(module.__all__) == sorted(PUBLIC[name])
    for attribute in module.__all__:
        assert getattr(module, attribute) is not None, attribute


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_dir_lists_the_api_only(name: str) -> None:
    module = _module(name)
    extra = PACKAGE_SUBMODULES if name == "stopstream" else []
    assert dir(module) == sorted([*PUBLIC[name], *extra])
    with pytest.raises(AttributeError):
        module.nonexistent  # noqa: B018


def test_the_type_aliases_are_public_and_what_the_filters_report() -> None:
    assert typing.get_args(stopstream.StopReason) == ("stop_sequence", "end")
    assert typing.get_args(stopstream.TokenStopReason) == ("stop_sequence", "stop_token", "end")
    f = stopstream.StopFilter(["b"])
    f.feed("ab")
    assert f.stop_reason in typing.get_args(stopstream.StopReason)

    def first_stop(stops: stopstream.Stops) -> object:
        # Every form `Stops` names is taken where a stop list is.
        return stopstream.truncate("a stop", stops)[1]

    forms: Iterable[stopstream.Stops] = [
        "stop",
        stopstream.Stop("stop"),
        stopstream.Regex("st.p"),
        ["stop"],
        stopstream.StopSet(["stop"]),
    ]
    assert [first_stop(s) for s in forms] == ["stop"] * 5
    assert first_stop(None) is None


def test_stops_is_a_runtime_union() -> None:
    """``Stops`` resolves at run time too (in ``get_type_hints`` of a caller's function)."""

    def takes(stops: stopstream.Stops) -> None: ...

    hint = typing.get_type_hints(takes)["stops"]
    assert {str, stopstream.Stop, stopstream.Regex, stopstream.StopSet, type(None)} <= set(
        typing.get_args(hint)
    )
