"""LiteLLM's stream chunks through the Chat Completions adapter (contract §8: objects stay what
they were). ``litellm.completion(..., stream=True, mock_response=...)`` streams offline; its
chunks (``ModelResponseStream``) set fields in ``__init__`` and carry ``_hidden_params``, which
a rebuild from a dict would lose."""

from __future__ import annotations

import asyncio
import os
import warnings
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the package's own import-time warnings
    import litellm

# LiteLLM's own deprecation and pydantic warnings while it streams.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
]

from stopstream.openai import awrap_chat, wrap_chat  # noqa: E402

TEXT = "Hello there </answer> and more text"
MESSAGES = [{"role": "user", "content": "hi"}]


def check(chunks: list[Any], upstream_chunks: list[Any]) -> None:
    assert chunks, "no output"
    for c in chunks:
        assert type(c).__name__ == "ModelResponseStream"
        assert isinstance(c._hidden_params, dict)
        assert "custom_llm_provider" in c._hidden_params
        for choice in c.choices:
            # A real delta object, not a dict: attribute access works.
            assert isinstance(choice.delta.content, (str, type(None)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there "
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].stop_reason == "</answer>"
    # Unchanged chunks are the very objects received.
    assert any(c is u for c in chunks for u in upstream_chunks)
    built: Any = litellm.stream_chunk_builder(chunks, messages=MESSAGES)
    assert built.choices[0].message.content == "Hello there "
    assert built.choices[0].finish_reason == "stop"


class Recording:
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.seen: list[Any] = []

    def __iter__(self) -> Any:
        for c in self.stream:
            self.seen.append(c)
            yield c


def test_litellm_stream_chunks_keep_working() -> None:
    response = litellm.completion(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, mock_response=TEXT
    )
    upstream = Recording(response)
    chunks = list(wrap_chat(upstream, ["</answer>"]))
    check(chunks, upstream.seen)


def test_litellm_async_stream_chunks_keep_working() -> None:
    async def main() -> None:
        response = await litellm.acompletion(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, mock_response=TEXT
        )
        seen: list[Any] = []

        async def recording() -> Any:
            async for c in response:
                seen.append(c)
                yield c

        chunks = [c async for c in awrap_chat(recording(), ["</answer>"])]
        check(chunks, seen)

    asyncio.run(main())
