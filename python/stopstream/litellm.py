"""Stop sequences for the LiteLLM proxy: any number, on every model, enforced exactly.

Register the callback in the proxy's ``config.yaml``::

    litellm_settings:
      callbacks: stopstream.litellm.callback

For each chat completion request with ``stop`` (``/v1/chat/completions``):

- before the call, ``split_stops`` decides, from the deployment's provider and model (see
  ``stopstream.providers``), which stops go upstream: at most 4 to OpenAI, none to a model that
  rejects ``stop`` (o1, o3, o4-mini, the gpt-5 family, xAI's reasoning models), no
  whitespace-only ones to Anthropic, at most 4 (``VLLM_MAX_STOP_STRINGS``) to a vLLM server
  (``hosted_vllm``). The request carries only those;
- streamed responses are filtered with ``stopstream.openai.awrap_chat`` on LiteLLM's
  ``ModelResponseStream`` chunks (a changed chunk keeps its class and ``_hidden_params``):
  every stop of the original list cuts the text, the choice ends with ``finish_reason:
  "stop"`` and ``stop_reason`` (the stop that fired; the chunk also gets LiteLLM's
  ``provider_specific_fields: {"stop_reason": ...}``, without which the proxy's fast chunk
  writer would drop it), and the upstream stream is closed at once (which drops the provider
  connection and ends generation there);
- non-streamed responses are cut with ``stopstream.openai.truncate_chat`` (a cut choice gets
  ``finish_reason: "stop"`` and ``stop_reason`` naming the stop).

These are proxy hooks: registered in the LiteLLM SDK (``litellm.callbacks``), the callback does
nothing; wrap the SDK's stream with ``stopstream.openai.wrap_chat`` instead (``docs/litellm.md``).

The provider and model are those of the model group's first deployment in the proxy's
``model_list`` (or of the model name itself outside the proxy); for a group whose deployments
differ, give the group a count of its own (``StopstreamCallback(limits={"group": 0})``).

vLLM servers that run the stopstream vLLM plugin enforce any number of stops themselves: with
``StopstreamCallback(vllm_plugin=True)``, a request to a deployment of the table's ``"vllm"``
row (``hosted_vllm``) sends the first 4 stops in ``stop`` and the others in its ``vllm_xargs``
(``split_stops(..., plugin=True)``; stop options the client sent there keep theirs and get
these after them), and the callback enforces none of them: the server cuts the text and ends
the choice (LiteLLM relays vLLM's ``stop_reason`` only in a non-streamed choice's
``provider_specific_fields``). Only for servers that run the plugin: a vLLM without it ignores
``vllm_xargs``. To configure the callback, put an instance in a module of your own
(``callback = StopstreamCallback(vllm_plugin=True)``) and name that in ``callbacks:``.

Requests in other shapes (``/v1/messages``, ``/v1/responses``, embeddings, ...) pass
untouched. A provider the table does not know gets no stops upstream (``default_provider``:
``"none"``), so its requests cannot fail on them; every stop is still enforced here.

This module imports ``litellm`` (``pip install 'stopstream[litellm]'``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

import stopstream
from stopstream.openai import awrap_chat, truncate_chat
from stopstream.providers import PROVIDERS, _with_plugin_options, split_stops

__all__ = ["PROVIDER_NAMES", "StopstreamCallback", "callback"]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


#: LiteLLM's provider names -> ``stopstream.providers`` names.
PROVIDER_NAMES: dict[str, str] = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "vertex_ai": "vertex",
    "vertex_ai_beta": "vertex",
    "bedrock": "bedrock",
    "bedrock_converse": "bedrock",
    "mistral": "mistral",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "groq": "groq",
    "deepseek": "deepseek",
    "xai": "xai",
    "hosted_vllm": "vllm",
}

# Where the full stop list of a request is kept between the hooks (LiteLLM never sends its
# ``metadata`` upstream).
_KEY = "stopstream_stops"
_CHAT_CALLS = frozenset({"completion", "acompletion"})


class StopstreamCallback(CustomLogger):
    """The LiteLLM ``CustomLogger`` that splits and enforces stop sequences.

    ``provider_names``: extra LiteLLM provider name -> ``stopstream.providers`` name entries
    (for a LiteLLM provider the table does not name: ``{"openrouter": "openai"}``).
    ``default_provider``: the table entry for providers not named. ``limits``: per model group
    (the model name clients send), a count that overrides the table. ``vllm_plugin``: the
    deployments of the ``"vllm"`` row run the stopstream vLLM plugin, so their stops beyond
    ``stop`` go in the request's ``vllm_xargs`` and none is enforced here.
    """

    def __init__(
        self,
        provider_names: Mapping[str, str] | None = None,
        default_provider: str = "none",
        limits: Mapping[str, int] | None = None,
        vllm_plugin: bool = False,
    ) -> None:
        super().__init__()
        names = dict(PROVIDER_NAMES)
        names.update(provider_names or {})
        for name in (*names.values(), default_provider):
            if name not in PROVIDERS:
                known = ", ".join(repr(p) for p in PROVIDERS)
                raise ValueError(f"unknown provider {name!r} (known: {known})")
        self.provider_names = names
        self.default_provider = default_provider
        self.limits = dict(limits or {})
        self.vllm_plugin = vllm_plugin

    # --- which upstream ---------------------------------------------------------------------

    def target(self, data: Mapping[str, Any]) -> tuple[str, str | None]:
        """The ``stopstream.providers`` name and the model name a request goes to."""
        group = data.get("model")
        model = group if isinstance(group, str) else None
        custom: str | None = None
        deployment = _deployment(model)
        if deployment is not None:
            params = deployment.get("litellm_params") or {}
            model = params.get("model", model)
            custom = params.get("custom_llm_provider")
        if not model:
            return self.default_provider, None
        try:
            import litellm

            name, provider, _, _ = litellm.get_llm_provider(model=model, custom_llm_provider=custom)
        except Exception:  # no provider LiteLLM knows: the default
            return self.default_provider, model
        return self.provider_names.get(provider, self.default_provider), name

    # --- the hooks --------------------------------------------------------------------------

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        if call_type not in _CHAT_CALLS or data.get("stop") is None:
            return data
        stops = list(stopstream.StopFilter(data["stop"]).stops)  # a bad list fails here
        provider, model = self.target(data)
        group = data.get("model")
        limit = self.limits.get(group) if isinstance(group, str) else None
        plugin = self.vllm_plugin and provider == "vllm"
        split = split_stops(stops, provider, model, limit=limit, plugin=plugin)
        if split.upstream:
            data["stop"] = split.upstream
        else:
            del data["stop"]
        if split.plugin:
            data["vllm_xargs"] = _with_plugin_options(data.get("vllm_xargs"), split.plugin)
        metadata = data.get("metadata")
        if not isinstance(metadata, dict):
            metadata = data["metadata"] = {}
        # The stops enforced here: none when the server's plugin enforces them all.
        metadata[_KEY] = split.rest if plugin else stops
        return data

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        stops = _stops_of(request_data)
        if not stops:
            async for chunk in response:
                yield chunk
            return
        n = request_data.get("n")
        async with awrap_chat(
            response, stops, n=n if isinstance(n, int) and n > 1 else None
        ) as stream:
            async for chunk in stream:
                yield _reporting(chunk)

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        stops = _stops_of(data)
        if not stops:
            return response
        truncate_chat(response, stops)
        return response


def _reporting(chunk: Any) -> Any:
    """The chunk, made to keep its choices' ``stop_reason`` on the way to the proxy's client.

    The proxy writes a plain text chunk with a fast serializer of the standard fields only; a
    chunk with ``provider_specific_fields`` (LiteLLM's own place for fields beyond OpenAI's) is
    written in full. The chunk in which a stop fired gets ``{"stop_reason": stop}`` there.
    """
    stop = next(
        (
            reason
            for choice in getattr(chunk, "choices", None) or []
            if isinstance(reason := getattr(choice, "stop_reason", None), str)
        ),
        None,
    )
    if stop is None or not hasattr(chunk, "provider_specific_fields"):
        return chunk
    fields = chunk.provider_specific_fields
    chunk.provider_specific_fields = {
        **(fields if isinstance(fields, dict) else {}),
        "stop_reason": stop,
    }
    return chunk


def _stops_of(data: Mapping[str, Any]) -> list[Any] | None:
    metadata = data.get("metadata")
    stops = metadata.get(_KEY) if isinstance(metadata, dict) else None
    return stops if isinstance(stops, list) else None


def _deployment(group: str | None) -> Mapping[str, Any] | None:
    """The proxy's first deployment for a model group, if the proxy has a router."""
    if group is None:
        return None
    try:
        from litellm.proxy.proxy_server import llm_router
    except Exception:  # not running inside the proxy
        return None
    if llm_router is None:
        return None
    deployments = llm_router.get_model_list(model_name=group) or []
    return deployments[0] if deployments else None


#: The instance the proxy config names: ``callbacks: stopstream.litellm.callback``.
callback = StopstreamCallback()
