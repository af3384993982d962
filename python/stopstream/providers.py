"""Hybrid enforcement: send the upstream the stops it accepts, enforce every stop locally.

Providers cap the ``stop`` parameter (OpenAI takes 4 sequences, Gemini 5), reject some stops
(Anthropic: whitespace-only ones) and some models reject the parameter outright (OpenAI's
reasoning models; the Responses API has none at all). ``split_stops`` splits a stop list into
the part to send upstream and the rest; the gateway sends the first part (so the upstream stops
generating early when one of those fires, which saves tokens) and applies the *whole* list
locally with the adapters::

    from stopstream.providers import split_stops
    from stopstream.sse import awrap_openai

    stops = request["stop"]                              # any number of stops
    upstream, rest = split_stops(stops, "openai", request["model"])
    if upstream:
        request["stop"] = upstream
    else:
        request.pop("stop", None)                        # o3, gpt-5, ...: no stop at all
    ...                                                  # forward the request
    body = awrap_openai(response.aiter_bytes(), stops)   # enforce all of them locally

When a stop sent upstream fires, the upstream cuts the text and finishes the choice itself
(``finish_reason: "stop"``; OpenAI does not say which stop, vLLM and Anthropic do) and the local
filter releases what it held back. The result is the one local enforcement alone would give,
except when a local-only stop would have completed inside the upstream's match: the upstream
cannot know it. With ``include_stop=True`` the upstream's stops are cut without their text, so
send nothing upstream (``limit=0``) when the stop text must be kept; for the same reason
``include=True`` stops and pattern stops never go upstream.

The table (``PROVIDERS``) errs toward sending less: a stop kept local is still enforced, while
one the upstream rejects fails the whole request. Every figure names its source; the ones only
secondary sources give say so. ``limit`` overrides the count whenever the table is wrong for
your deployment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from stopstream._core import StopSet

if TYPE_CHECKING:
    from stopstream._types import Stops

__all__ = [
    "PROVIDERS",
    "STOP_LIMITS",
    "Limits",
    "ProviderLimits",
    "StopSplit",
    "limits_for",
    "split_stops",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


@dataclass(frozen=True)
class Limits:
    """What one upstream (a provider, or one of its model families) accepts as ``stop``.

    ``count``: how many stop sequences (``0``: the parameter is rejected or does not exist;
    ``None``: no known limit). ``max_length``: the longest stop accepted, in characters
    (``None``: no known cap). ``rejects_whitespace_only``: stops made only of whitespace are
    rejected (Anthropic).
    """

    count: int | None
    max_length: int | None = None
    rejects_whitespace_only: bool = False

    def accepts(self, stop: str) -> bool:
        """Whether the upstream accepts ``stop`` itself (its count aside)."""
        if self.max_length is not None and len(stop) > self.max_length:
            return False
        return not (self.rejects_whitespace_only and not stop.strip())


@dataclass(frozen=True)
class ProviderLimits:
    """A provider's default ``Limits`` and its model rules.

    ``models``: ``(pattern, limits)`` pairs; a pattern is a regular expression matched at the
    start of the model name (so a plain name is a prefix: ``"o3"`` covers ``o3-mini`` and
    ``o3-2025-04-16``). The first rule that matches wins, so specific rules come first.
    """

    default: Limits
    models: tuple[tuple[str, Limits], ...] = ()

    def for_model(self, model: str | None) -> Limits:
        if model:
            name = _model_name(model)
            for pattern, limits in self.models:
                if re.match(pattern, name):
                    return limits
        return self.default


_NONE = Limits(0)

#: Per provider: how many stops the upstream accepts, and the model families that differ.
PROVIDERS: dict[str, ProviderLimits] = {
    # OpenAI Chat Completions: "you can pass up to four stop sequences" (OpenAI help center,
    # "How do I use stop sequences in the OpenAI API?"; the API answers more with "Invalid
    # 'stop': array too long. Expected an array with maximum length 4", litellm #18921).
    # Reasoning models reject the parameter ("Unsupported parameter: 'stop' is not supported
    # with this model."): o3 and o4-mini ("Not supported with latest reasoning models `o3`
    # and `o4-mini`", the openai SDK's `stop` docstring), o1 (secondary sources only:
    # unconfirmed), the gpt-5 family (gpt-5, -mini, -nano, 5.1, 5.2: smolagents #1662 and
    # #1893, litellm #15244). Proposals that gpt-5.5 accepts it again (litellm #28650,
    # #28662) were closed unmerged: unconfirmed, so gpt-5.x stays at none.
    "openai": ProviderLimits(
        Limits(4),
        (
            ("o1", _NONE),
            ("o3", _NONE),
            ("o4-mini", _NONE),
            ("gpt-5", _NONE),
        ),
    ),
    # OpenAI Responses API: `ResponseCreateParams` has no `stop` parameter at all.
    "openai-responses": ProviderLimits(_NONE),
    # Anthropic Messages: whitespace-only stops fail the request ("stop_sequences: each stop
    # sequence must contain non-whitespace", litellm #3286; litellm drops them, #7484). No
    # count or length limit is documented: unconfirmed, so none is assumed.
    "anthropic": ProviderLimits(Limits(None, rejects_whitespace_only=True)),
    # Gemini API: "the set of character sequences (up to 5)" (ai.google.dev GenerationConfig
    # reference, quoted in simonw/llm-gemini #45); more fail with "the number of
    # stop_sequences must not exceed 5" (continuedev/continue #2702).
    "gemini": ProviderLimits(Limits(5)),
    # Vertex AI: "stopSequences value of 10 but the supported range is from 1 (inclusive) to 6
    # (exclusive)" (continuedev/continue #7849); "must not exceed 5" (litellm #18921).
    "vertex": ProviderLimits(Limits(5)),
    # Bedrock Converse: `InferenceConfiguration.stopSequences` holds 0 to 2,500 items, each at
    # least 1 character (Bedrock API reference), and "for actual values consult the limits
    # defined by your specific model". DeepSeek models there cap each stop at 10 characters
    # (secondary source only: unconfirmed). Claude models on Bedrock are assumed to keep
    # Anthropic's whitespace rule (unconfirmed). Model ids may carry a cross-region prefix
    # (`us.`, `eu.`, ...), which is ignored.
    "bedrock": ProviderLimits(
        Limits(2500),
        (
            ("deepseek\\.", Limits(2500, max_length=10)),
            ("anthropic\\.", Limits(2500, rejects_whitespace_only=True)),
        ),
    ),
    # Mistral: "Mistral accepts up to 4 stop sequences" (LangChain's ChatMistralAI reference;
    # Mistral's own reference documents `stop` without a count): secondary, unconfirmed.
    "mistral": ProviderLimits(Limits(4)),
    # Cohere Chat (v1 and v2): `stop_sequences`, "a maximum of five" (secondary, citing
    # Cohere's API reference): unconfirmed at the source.
    "cohere": ProviderLimits(Limits(5)),
    # Groq (OpenAI-compatible): 4, as OpenAI (secondary sources only; Groq's API reference
    # documents `stop` without a count): unconfirmed.
    "groq": ProviderLimits(Limits(4)),
    # DeepSeek: "up to 16" stop sequences (secondary, citing DeepSeek's API reference):
    # unconfirmed at the source.
    "deepseek": ProviderLimits(Limits(16)),
    # xAI: 4 (secondary sources only: unconfirmed). "presencePenalty, frequencyPenalty and
    # stop cannot be used with reasoning models" (xAI's reasoning guide, quoted in
    # lidge-jun/opencodex #5280; bifrost #1286 strips `stop` for them): grok-3-mini, the grok-4
    # family and grok-code; their `-non-reasoning` variants are not reasoning models.
    "xai": ProviderLimits(
        Limits(4),
        (
            ("grok-[\\w.-]*non-reasoning", Limits(4)),
            ("grok-3-mini", _NONE),
            ("grok-4", _NONE),
            ("grok-code", _NONE),
        ),
    ),
    # vLLM's OpenAI-compatible server (and its Anthropic and Cohere routes): `stop` is
    # `Field(max_length=envs.VLLM_MAX_STOP_STRINGS)`, default 4 (vllm 0.32
    # `vllm/entrypoints/generate/base/protocol.py`, `vllm/envs.py`; vllm #51447, #51997);
    # five stops are a 400 ("at most 4 items"). A server started with a higher
    # `VLLM_MAX_STOP_STRINGS` takes more: pass `limit=`. Empty stops are rejected (#50746).
    # With the stopstream vLLM plugin installed, `extra_body` takes any number locally.
    "vllm": ProviderLimits(Limits(4)),
    # SGLang's OpenAI-compatible server: `stop: Optional[Union[str, List[str]]]` with no count
    # or length cap (sgl-project/sglang `python/sglang/srt/entrypoints/openai/protocol.py`,
    # CompletionRequest and ChatCompletionRequest); its scheduler checks every stop each step.
    "sglang": ProviderLimits(Limits(None)),
    # For a model known to reject `stop`, whoever serves it.
    "none": ProviderLimits(_NONE),
}

#: Each provider's default count (``None``: no known limit). Kept for existing callers;
#: ``limits_for`` knows the model rules too.
STOP_LIMITS: dict[str, int | None] = {name: p.default.count for name, p in PROVIDERS.items()}

# Bedrock's cross-region inference profile prefixes ("us.anthropic.claude-...").
_REGION_PREFIX = re.compile(r"(?:us|us-gov|eu|apac|jp|au|ca|global)\.(?=[a-z])")


def _model_name(model: str) -> str:
    """The model name the rules see: without a ``provider/`` route or a region prefix."""
    name = model.rsplit("/", 1)[-1]
    m = _REGION_PREFIX.match(name)
    return name[m.end() :] if m else name


class StopSplit(NamedTuple):
    """``upstream``: the stops to send upstream; ``rest``: the ones only enforced locally."""

    upstream: list[str]
    rest: list[Any]


def limits_for(provider: str, model: str | None = None) -> Limits:
    """The ``Limits`` of ``provider`` for ``model`` (the provider's default for an unknown one).

    An unknown provider is a ``ValueError`` naming the known ones.
    """
    try:
        table = PROVIDERS[provider]
    except (KeyError, TypeError):
        known = ", ".join(repr(name) for name in PROVIDERS)
        raise ValueError(f"unknown provider {provider!r} (known: {known})") from None
    return table.for_model(model)


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


def _local_only(item: object, include_stop: bool) -> bool:
    """A stop the upstream cannot apply as we do: a pattern, or one whose text is kept (its own
    flag, else the list's ``include_stop``: the upstream always drops the stop)."""
    if not isinstance(item, str):
        return True
    own = getattr(item, "include", None)
    return include_stop if own is None else own is True


def split_stops(
    stops: Stops,
    provider: str | int | None,
    model: str | None = None,
    *,
    limit: int | None = None,
) -> StopSplit:
    """Split ``stops`` into what the upstream accepts and the rest.

    ``stops``: anything stopstream accepts as stops (a ``StopSet`` too), validated the same
    way. ``provider``: a name from ``PROVIDERS`` (``model`` then picks its model rules), or a
    bare count (an ``int``; ``0`` for a model that rejects ``stop``) or ``None`` for no limit.
    ``limit``: overrides the count the table gives.

    ``upstream`` holds, in the order given, the first distinct stops the upstream accepts, up
    to its count; ``rest`` every other distinct stop (over the count, rejected by the upstream,
    patterns, stops whose text is kept: ``include=True``, or a ``StopSet`` with
    ``include_stop=True``; every stop of a ``StopSet`` with skip regions, which the upstream
    would not see). Enforce the full list locally.

    >>> split_stops(["a", "b", "a", "c", "d", "e"], "openai")
    StopSplit(upstream=['a', 'b', 'c', 'd'], rest=['e'])
    >>> split_stops(["</answer>", "\\n"], "openai", "o3")
    StopSplit(upstream=[], rest=['</answer>', '\\n'])
    >>> split_stops(["</answer>", "\\n"], "anthropic")
    StopSplit(upstream=['</answer>'], rest=['\\n'])
    """
    if provider is None:
        limits = Limits(None)
    elif isinstance(provider, str):
        limits = limits_for(provider, model)
    else:
        limits = Limits(_count(provider, "limit"))
    count = limits.count if limit is None else _count(limit, "limit")
    compiled = stops if isinstance(stops, StopSet) else StopSet(stops)  # validated
    items: Sequence[Any] = compiled.stops  # the items as given
    # The upstream sees no skip regions: it would cut inside one, where no stop may start.
    regions = compiled.skip is not None or compiled.skip_until is not None
    upstream: list[str] = []
    rest: list[Any] = []
    seen: set[Any] = set()
    for item in items:
        if item in seen:
            continue
        seen.add(item)
        if (
            (count is None or len(upstream) < count)
            and not regions
            and not _local_only(item, compiled.include_stop)
            and limits.accepts(item)
        ):
            upstream.append(item)
        else:
            rest.append(item)
    return StopSplit(upstream, rest)
