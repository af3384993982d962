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

A self-hosted vLLM that runs the stopstream vLLM plugin enforces every stop itself:
``split_stops(stops, "vllm", plugin=True)`` still fills its own ``stop`` (up to its count) and
puts everything else, patterns, kept stops and skip regions included, in the options the plugin
reads from the request's ``vllm_xargs``; nothing is left to enforce locally::

    split = split_stops(stops, "vllm", plugin=True)
    client.chat.completions.create(..., stop=split.upstream,
                                   extra_body={"vllm_xargs": split.vllm_xargs()})

The table (``PROVIDERS``) errs toward sending less: a stop kept local is still enforced, while
one the upstream rejects fails the whole request. Every figure names its source; the ones only
secondary sources give say so. ``limit`` overrides the count whenever the table is wrong for
your deployment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from stopstream._core import Regex, StopSet
from stopstream._vllm_options import EXTRA_KEY

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


class _Pair(NamedTuple):
    upstream: list[str]
    rest: list[Any]


class StopSplit(_Pair):
    """``upstream``: the stops to send upstream; ``rest``: the ones only enforced locally;
    ``plugin``: for a split made with ``plugin=True``, the options the stopstream vLLM plugin
    reads (``None`` otherwise), which ``vllm_xargs()`` makes ready to send.

    It unpacks, indexes and compares with a tuple as the pair ``(upstream, rest)``: ``plugin``
    is an attribute beside the pair, so ``upstream, rest = split_stops(...)`` keeps working.
    """

    plugin: dict[str, Any] | None = None

    def __new__(
        cls, upstream: list[str], rest: list[Any], plugin: dict[str, Any] | None = None
    ) -> StopSplit:
        split = super().__new__(cls, upstream, rest)
        split.plugin = plugin
        return split

    def __repr__(self) -> str:
        pair = super().__repr__()
        return pair if self.plugin is None else f"{pair[:-1]}, plugin={self.plugin!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StopSplit) and self.plugin != other.plugin:
            return False
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        # tuple's own ``!=`` would not see ``plugin``.
        return not self == other

    __hash__ = _Pair.__hash__

    def vllm_xargs(self) -> dict[str, str]:
        """The request's ``vllm_xargs`` for a split made with ``plugin=True``:
        ``{"stopstream": "<plugin as JSON>"}`` (the server's ``vllm_xargs`` takes strings, not
        objects), or ``{}`` when the upstream's own ``stop`` took every stop. Send it as
        ``extra_body={"vllm_xargs": split.vllm_xargs()}``, merged with any ``vllm_xargs`` of
        your own.

        Raises:
            ValueError: the split was made without ``plugin=True`` (its ``rest`` is for local
                enforcement, not for the plugin).
        """
        if self.plugin is None:
            raise ValueError("vllm_xargs() needs a split made with plugin=True")
        return {EXTRA_KEY: json.dumps(self.plugin)} if self.plugin else {}


def _with_plugin_options(xargs: object, options: dict[str, Any]) -> dict[str, Any]:
    """The request's ``vllm_xargs`` with ``options`` for the vLLM plugin. Options the client sent
    keep theirs (their skip regions then cover these stops too) and get these stops after their
    own; options the plugin cannot read are left for the server to reject (a 400 naming them)."""
    merged = dict(xargs) if isinstance(xargs, Mapping) else {}
    given = merged.get(EXTRA_KEY)
    if given is not None:
        try:
            given = json.loads(given) if isinstance(given, str) else given
        except (ValueError, RecursionError):  # too deep: the server rejects it too
            return merged
        own = given.get("stop", []) if isinstance(given, Mapping) else None
        own = [own] if isinstance(own, str) else own
        if not isinstance(own, list):
            return merged
        options = {**given, "stop": [*own, *options["stop"]]}
    merged[EXTRA_KEY] = json.dumps(options)
    return merged


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


def _included(item: object, include_stop: bool) -> bool:
    """Whether a stop's text is kept: its own flag, else the list's ``include_stop``."""
    own = getattr(item, "include", None)
    return include_stop if own is None else own is True


def _local_only(item: object, include_stop: bool) -> bool:
    """A stop the upstream cannot apply as we do: a pattern, or one whose text is kept (the
    upstream always drops the stop)."""
    return not isinstance(item, str) or _included(item, include_stop)


def _plugin_stop(item: Any, include_stop: bool) -> str | dict[str, Any]:
    """One stop as the vLLM plugin reads it. A plain string, as in the request's own ``stop``,
    is cut with ``include_stop_str_in_output`` off (vLLM's default); the others say their flag."""
    include = _included(item, include_stop)
    if isinstance(item, Regex):
        return {"regex": item.pattern, "include": include}
    if isinstance(item, str):
        return {"text": item, "include": True} if include else item
    return {"text": item.text, "include": include}


def split_stops(
    stops: Stops,
    provider: str | int | None,
    model: str | None = None,
    *,
    limit: int | None = None,
    plugin: bool = False,
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

    ``plugin=True`` (provider ``"vllm"`` only: a vLLM server running the stopstream plugin):
    ``upstream`` is as without it (but a stop listed after an ``include=True`` one follows
    that one to the plugin, which keeps their order), ``rest`` is empty, and ``plugin`` holds
    everything else (``vllm_xargs()`` makes it the request's ``vllm_xargs``): each stop in the
    plugin's form (``include=True`` stops and patterns too), ``skip`` and ``skip_until``. The
    plugin takes all that a ``StopSet`` holds, so nothing is left to enforce locally. Its own
    bounds on a request's options apply (a request over one is a 400), and it rejects pattern
    stops with ``min_tokens``.

    >>> split = split_stops(["a", "b", "c", "d", "e"], "vllm", plugin=True)
    >>> split
    StopSplit(upstream=['a', 'b', 'c', 'd'], rest=[], plugin={'stop': ['e']})
    >>> split.vllm_xargs()
    {'stopstream': '{"stop": ["e"]}'}

    >>> split_stops(["a", "b", "a", "c", "d", "e"], "openai")
    StopSplit(upstream=['a', 'b', 'c', 'd'], rest=['e'])
    >>> split_stops(["</answer>", "\\n"], "openai", "o3")
    StopSplit(upstream=[], rest=['</answer>', '\\n'])
    >>> split_stops(["</answer>", "\\n"], "anthropic")
    StopSplit(upstream=['</answer>'], rest=['\\n'])
    """
    if plugin and provider != "vllm":
        raise ValueError(
            f"plugin=True is for provider 'vllm' (its stopstream plugin), not {provider!r}"
        )
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
    # The plugin reads the request's own ``stop`` before its options, and between two stops
    # matching the same text the first listed wins: once a kept stop goes to the plugin, a later
    # stop that the upstream could take follows it there, so it cannot overtake it.
    kept_ahead = False
    for item in items:
        if item in seen:
            continue
        seen.add(item)
        if (
            (count is None or len(upstream) < count)
            and not regions
            and not kept_ahead
            and not _local_only(item, compiled.include_stop)
            and limits.accepts(item)
        ):
            upstream.append(item)
        else:
            rest.append(item)
            kept_ahead = kept_ahead or (plugin and _included(item, compiled.include_stop))
    if not plugin:
        return StopSplit(upstream, rest)
    options: dict[str, Any] = {}
    if rest:
        options["stop"] = [_plugin_stop(item, compiled.include_stop) for item in rest]
        if compiled.skip is not None:
            options["skip"] = [list(pair) for pair in compiled.skip]
        if compiled.skip_until is not None:
            options["skip_until"] = compiled.skip_until
    return StopSplit(upstream, [], options)
