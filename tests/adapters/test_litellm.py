"""``stopstream.litellm``: the LiteLLM proxy callback.

The hooks are run on LiteLLM's own chunk and response objects, then the real proxy (the one of
``docs/litellm.md``'s recipe, registering ``stopstream.litellm.callback``: ``conftest``) runs on
loopback in front of the fake OpenAI-compatible upstream (``fake_upstream``), and the real
``openai`` client talks to it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

# LiteLLM fetches a model price map over the network at import time unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

litellm = pytest.importorskip("litellm")

from litellm.types.utils import ModelResponse, ModelResponseStream  # noqa: E402

from fake_upstream import (  # noqa: E402
    TIMEOUT,
    ChatScript,
    FakeUpstream,
    Served,
    assert_closed_early,
    chat_text,
    tail,
    text_deltas,
)
from litellm_support import RecipeProxy, free_port, litellm_script, running_proxy  # noqa: E402
from stopstream.litellm import StopstreamCallback, callback  # noqa: E402

# LiteLLM's own models warn while pydantic builds their schemas.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Item .*ReadOnly:UserWarning"),
    # With the recipe's tests on one xdist worker: one proxy for both.
    pytest.mark.xdist_group("litellm"),
]

STOPS = ["###", "END", "<|im_end|>", "Observation:", "</answer>", "\n\nUser:"]
MESSAGES: Any = [{"role": "user", "content": "Hi"}]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- the pre-call hook ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "upstream"),
    [
        ("openai/gpt-4o", STOPS[:4]),
        ("openai/o3", None),
        ("openai/gpt-5-mini", None),
        ("gemini/gemini-2.5-flash", STOPS[:5]),
        ("xai/grok-4", None),
        ("deepseek/deepseek-chat", STOPS),
        ("hosted_vllm/my-model", STOPS[:4]),  # vLLM's VLLM_MAX_STOP_STRINGS
        ("somebody/my-model", None),  # a provider the table does not know: nothing sent
    ],
)
def test_pre_call_sends_what_the_upstream_accepts(model: str, upstream: list[str] | None) -> None:
    data: dict[str, Any] = {"model": model, "messages": MESSAGES, "stop": list(STOPS)}
    out = run(callback.async_pre_call_hook(None, None, data, "acompletion"))
    assert out.get("stop") == upstream
    assert out["metadata"]["stopstream_stops"] == STOPS


def test_pre_call_keeps_whitespace_only_stops_from_anthropic() -> None:
    data: dict[str, Any] = {"model": "anthropic/claude-sonnet-4-5", "stop": ["\n", "</a>", " "]}
    out = run(callback.async_pre_call_hook(None, None, data, "acompletion"))
    assert out["stop"] == ["</a>"]
    assert out["metadata"]["stopstream_stops"] == ["\n", "</a>", " "]


def test_pre_call_leaves_other_requests_alone() -> None:
    data: dict[str, Any] = {"model": "openai/o3", "input": "x", "stop": ["a"]}
    assert run(callback.async_pre_call_hook(None, None, dict(data), "aembedding")) == data
    plain: dict[str, Any] = {"model": "openai/o3", "messages": MESSAGES}
    assert run(callback.async_pre_call_hook(None, None, dict(plain), "acompletion")) == plain


def test_options() -> None:
    custom = StopstreamCallback(provider_names={"hosted_vllm": "openai"}, limits={"big": 1})
    data: dict[str, Any] = {"model": "hosted_vllm/m", "stop": list(STOPS)}
    assert run(custom.async_pre_call_hook(None, None, data, "acompletion"))["stop"] == STOPS[:4]
    data = {"model": "big", "stop": list(STOPS)}
    assert run(custom.async_pre_call_hook(None, None, data, "acompletion"))["stop"] == STOPS[:1]
    with pytest.raises(ValueError, match="unknown provider"):
        StopstreamCallback(default_provider="nope")


def plugin_options(data: dict[str, Any]) -> Any:
    return json.loads(data["vllm_xargs"]["stopstream"])


def test_pre_call_sends_the_rest_to_the_vllm_plugin() -> None:
    plugin = StopstreamCallback(vllm_plugin=True)
    data: dict[str, Any] = {"model": "hosted_vllm/my-model", "stop": list(STOPS)}
    out = run(plugin.async_pre_call_hook(None, None, data, "acompletion"))
    assert out["stop"] == STOPS[:4]
    assert out["vllm_xargs"] == {"stopstream": json.dumps({"stop": STOPS[4:]})}
    assert out["metadata"]["stopstream_stops"] == []  # nothing enforced here
    # Options the client sent keep theirs, and the plugin gets these stops after its own.
    own = {"stop": [{"regex": "x+"}], "skip_until": "</think>"}
    xargs = {"stopstream": json.dumps(own), "seed_hint": 7}
    data = {"model": "hosted_vllm/m", "stop": STOPS, "vllm_xargs": xargs}
    out = run(plugin.async_pre_call_hook(None, None, data, "acompletion"))
    assert plugin_options(out) == {"stop": [{"regex": "x+"}, *STOPS[4:]], "skip_until": "</think>"}
    assert out["vllm_xargs"]["seed_hint"] == 7
    # Options the plugin cannot read are the server's to reject (a 400 naming them).
    data = {"model": "hosted_vllm/m", "stop": STOPS, "vllm_xargs": {"stopstream": "{oops"}}
    assert run(plugin.async_pre_call_hook(None, None, data, "acompletion"))["vllm_xargs"] == {
        "stopstream": "{oops"
    }
    # Within vLLM's count nothing goes to the plugin; other providers are as before.
    data = {"model": "hosted_vllm/m", "stop": STOPS[:4]}
    assert "vllm_xargs" not in run(plugin.async_pre_call_hook(None, None, data, "acompletion"))
    data = {"model": "openai/gpt-4o", "stop": list(STOPS)}
    out = run(plugin.async_pre_call_hook(None, None, data, "acompletion"))
    assert "vllm_xargs" not in out and out["metadata"]["stopstream_stops"] == STOPS
    # Without the option, a vLLM deployment's rest is enforced here.
    data = {"model": "hosted_vllm/m", "stop": list(STOPS)}
    out = run(callback.async_pre_call_hook(None, None, data, "acompletion"))
    assert "vllm_xargs" not in out and out["metadata"]["stopstream_stops"] == STOPS


# --- the streaming hook, on LiteLLM's chunk objects -----------------------------------------


def chunk(content: str | None, finish: str | None = None) -> ModelResponseStream:
    delta = {} if content is None else {"content": content}
    choice: Any = {"index": 0, "delta": delta, "finish_reason": finish}
    made = ModelResponseStream(id="chatcmpl-1", created=1, model="gpt-test", choices=[choice])
    made._hidden_params = {"model_id": "deployment-1", "additional_headers": {"x-test": "1"}}
    return made


class Upstream:
    """An async iterator of chunks with ``aclose``, like LiteLLM's ``CustomStreamWrapper``."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.pulled = 0
        self.closed = 0

    def __aiter__(self) -> Upstream:
        return self

    async def __anext__(self) -> Any:
        if self.pulled >= len(self.chunks):
            raise StopAsyncIteration
        self.pulled += 1
        return self.chunks[self.pulled - 1]

    async def aclose(self) -> None:
        self.closed += 1


def test_streaming_hook_cuts_and_keeps_litellm_chunks_working() -> None:
    chunks = [chunk("The answer"), chunk(" is 4.</ans"), chunk("wer> tail"), chunk(" more")]
    upstream = Upstream(chunks)
    request: dict[str, Any] = {"metadata": {"stopstream_stops": STOPS}}

    async def main() -> list[Any]:
        hook = callback.async_post_call_streaming_iterator_hook(None, upstream, request)
        return [c async for c in hook]

    out = run(main())
    assert out[0] is chunks[0]
    assert all(type(c) is ModelResponseStream for c in out)
    assert "".join(c.choices[0].delta.content or "" for c in out) == "The answer is 4."
    last = out[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.choices[0].stop_reason == "</answer>"
    # Where the proxy's writer keeps it: LiteLLM's fast path writes standard fields only.
    assert last.provider_specific_fields == {"stop_reason": "</answer>"}
    assert all(c.provider_specific_fields is None for c in out[:-1])
    assert last._hidden_params == chunks[1]._hidden_params  # private state kept
    assert upstream.closed == 1 and upstream.pulled == 3
    built = litellm.stream_chunk_builder(out)
    assert built.choices[0].message.content == "The answer is 4."
    assert built.choices[0].finish_reason == "stop"


def test_streaming_hook_without_stops_passes_everything() -> None:
    chunks = [chunk("a </answer>"), chunk(None, "stop")]

    async def main() -> list[Any]:
        hook = callback.async_post_call_streaming_iterator_hook(None, Upstream(chunks), {})
        return [c async for c in hook]

    assert run(main()) == chunks


def test_success_hook_truncates() -> None:
    response = ModelResponse(
        choices=[
            {"index": 0, "message": {"role": "assistant", "content": "a </answer> b"}},
            {"index": 1, "message": {"role": "assistant", "content": "plain"}},
        ]
    )
    data: dict[str, Any] = {"metadata": {"stopstream_stops": STOPS}}
    out = run(callback.async_post_call_success_hook(data, None, response))
    assert out.choices[0].message.content == "a "
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].stop_reason == "</answer>"
    assert getattr(out.choices[1], "stop_reason", None) is None
    assert out.choices[1].message.content == "plain"


# --- the real proxy --------------------------------------------------------------------------


@pytest.fixture
def fake(litellm_upstream: tuple[FakeUpstream, Served]) -> FakeUpstream:
    fake, _ = litellm_upstream
    fake.reset()
    return fake


@pytest.fixture
def proxy(litellm_proxy: RecipeProxy) -> RecipeProxy:
    """The proxy of docs/litellm.md's recipe (started once per run, by conftest): models
    ``gpt-4o`` and ``o3``, both OpenAI ones, sent to the fake upstream."""
    return litellm_proxy


def client(proxy: RecipeProxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key=proxy.env["LITELLM_MASTER_KEY"],
        max_retries=0,
        timeout=TIMEOUT,
    )


@pytest.mark.e2e
def test_proxy_model_that_rejects_stop(fake: FakeUpstream, proxy: RecipeProxy) -> None:
    fake.reject_stop = True  # like o3: any `stop` is a 400
    fake.chat = ChatScript([text_deltas("The answer", " is 4.", "</ans", "wer>", *tail())])
    with client(proxy) as c:
        chunks = list(
            c.chat.completions.create(model="o3", messages=MESSAGES, stream=True, stop=STOPS)
        )
    assert chat_text(chunks) == "The answer is 4."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].stop_reason == "</answer>"  # type: ignore[attr-defined]
    assert "stop" not in fake.last.body
    assert not any("stopstream" in key for key in fake.last.body)
    assert_closed_early(fake.last)


@pytest.mark.e2e
def test_proxy_model_that_takes_four(fake: FakeUpstream, proxy: RecipeProxy) -> None:
    # "</answer>" is the fifth stop: only the proxy's callback knows it.
    fake.chat = ChatScript([text_deltas("The answer", " is 4.", "</ans", "wer>", *tail())])
    with client(proxy) as c:
        chunks = list(
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True, stop=STOPS)
        )
    assert fake.last.body["stop"] == STOPS[:4]
    assert chat_text(chunks) == "The answer is 4."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert_closed_early(fake.last)


@pytest.mark.e2e
def test_proxy_upstream_stop_and_local_stop_together(
    fake: FakeUpstream, proxy: RecipeProxy
) -> None:
    # "###" goes upstream and the fake applies it; "\n\nUser:" (local only) comes first.
    fake.chat = ChatScript([text_deltas("Hi", "\n", "\nUser: x ###", " after")])
    with client(proxy) as c:
        chunks = list(
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True, stop=STOPS)
        )
    assert chat_text(chunks) == "Hi"
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.e2e
def test_proxy_non_streaming(fake: FakeUpstream, proxy: RecipeProxy) -> None:
    fake.reject_stop = True
    fake.chat = ChatScript([text_deltas("The answer is 4.</answer> more")])
    with client(proxy) as c:
        response = c.chat.completions.create(model="o3", messages=MESSAGES, stop=STOPS)
    assert response.choices[0].message.content == "The answer is 4."
    assert response.choices[0].finish_reason == "stop"
    assert response.choices[0].stop_reason == "</answer>"  # type: ignore[attr-defined]
    assert "stop" not in fake.last.body


@pytest.mark.e2e
def test_proxy_without_stops_passes_through(fake: FakeUpstream, proxy: RecipeProxy) -> None:
    fake.chat = ChatScript([text_deltas("Plain", " </answer> text")])
    with client(proxy) as c:
        chunks = list(c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))
    assert chat_text(chunks) == "Plain </answer> text"


# A proxy with a vLLM deployment that runs the stopstream plugin (the fake stands in for it).
PLUGIN_CONFIG = """\
model_list:
  - model_name: my-vllm
    litellm_params:
      model: hosted_vllm/my-model
      api_base: {api_base}
litellm_settings:
  callbacks: plugin_callback.callback
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""
PLUGIN_CALLBACK = """\
from stopstream.litellm import StopstreamCallback

callback = StopstreamCallback(vllm_plugin=True)
"""
PLUGIN_KEY = "sk-plugin-proxy-key"


@pytest.fixture(scope="module")
def plugin_proxy(
    litellm_upstream: tuple[FakeUpstream, Served], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory: Path = tmp_path_factory.mktemp("plugin-proxy")
    api_base = litellm_upstream[1].url + "/v1"
    (directory / "config.yaml").write_text(PLUGIN_CONFIG.format(api_base=api_base))
    (directory / "plugin_callback.py").write_text(PLUGIN_CALLBACK)
    port = str(free_port())
    command = [litellm_script(), "--config", "config.yaml", "--host", "127.0.0.1", "--port", port]
    env = {**os.environ, "LITELLM_MASTER_KEY": PLUGIN_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with running_proxy(command, f"http://127.0.0.1:{port}", env, directory) as url:
        yield url


@pytest.mark.e2e
def test_proxy_vllm_plugin_gets_the_rest_in_vllm_xargs(
    fake: FakeUpstream, plugin_proxy: str
) -> None:
    # The fake applies `stop` only: "</answer>", the fifth stop, is the plugin's, and it reaches
    # the client uncut, so the proxy enforced nothing itself.
    fake.chat = ChatScript([text_deltas("The answer", " is 4.", "</ans", "wer> more")])
    c = openai.OpenAI(
        base_url=plugin_proxy + "/v1", api_key=PLUGIN_KEY, max_retries=0, timeout=TIMEOUT
    )
    with c:
        chunks = list(
            c.chat.completions.create(model="my-vllm", messages=MESSAGES, stream=True, stop=STOPS)
        )
        assert chat_text(chunks) == "The answer is 4.</answer> more"
        body = fake.last.body
        assert body["stop"] == STOPS[:4]
        assert body["vllm_xargs"] == {"stopstream": json.dumps({"stop": STOPS[4:]})}
        # Not streamed, with the client's own options for the plugin: merged.
        own = {"vllm_xargs": {"stopstream": json.dumps({"skip_until": "</think>"})}}
        response = c.chat.completions.create(
            model="my-vllm", messages=MESSAGES, stop=STOPS, extra_body=own
        )
    assert response.choices[0].message.content == "The answer is 4.</answer> more"
    assert plugin_options(fake.last.body) == {"skip_until": "</think>", "stop": STOPS[4:]}
    assert fake.last.body["stop"] == STOPS[:4]


# --- the SDK (docs/litellm.md, "The LiteLLM SDK") ------------------------------------------


# LiteLLM's own deprecation and pydantic warnings while it streams.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_sdk_callback_does_nothing_and_wrap_chat_does_it() -> None:
    from stopstream.openai import wrap_chat
    from stopstream.providers import split_stops

    def stream(stop: list[str]) -> Any:
        return litellm.completion(
            model="openai/gpt-4o",
            messages=MESSAGES,
            stop=stop,
            stream=True,
            mock_response="The answer is 4.</answer> tail text",  # offline
        )

    saved = litellm.callbacks
    litellm.callbacks = [callback]
    try:
        # The proxy's hooks are not the SDK's: nothing is cut.
        assert chat_text(list(stream(STOPS))) == "The answer is 4.</answer> tail text"
    finally:
        litellm.callbacks = saved
    upstream, _ = split_stops(STOPS, "openai", "gpt-4o")
    assert upstream == STOPS[:4]
    with wrap_chat(stream(upstream), STOPS) as chunks:
        assert chat_text(list(chunks)) == "The answer is 4."
        assert chunks.stop_sequence == "</answer>"
