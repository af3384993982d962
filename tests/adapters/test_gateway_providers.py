"""End to end: ``examples/gateway.py``'s Responses route and its per-provider stop split.

The real ``openai`` and ``anthropic`` clients talk to the gateway (Starlette, uvicorn), which
forwards to the fake APIs of ``fake_providers`` on loopback. The Responses API has no ``stop``
parameter: the gateway takes one anyway, sends none upstream, and enforces it. The chat route
splits per model (nothing to o3), the Messages route keeps whitespace-only stops local (the
Anthropic API rejects them).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import pytest

from fake_providers import FakeProviders
from fake_upstream import (
    TIMEOUT,
    ChatScript,
    MessagesScript,
    Served,
    assert_closed_early,
    openai_client,
    tail,
    text_deltas,
)
from provider_scripts import Item, ResponseScript, response_events

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e

GATEWAY = Path(__file__).resolve().parents[2] / "examples" / "gateway.py"
STOPS = ["###", "END", "<|im_end|>", "Observation:", "</answer>", "\n\nUser:"]
MESSAGES: Any = [{"role": "user", "content": "Hi"}]


def load_gateway() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stopstream_example_gateway_p", GATEWAY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(providers_server: tuple[FakeProviders, Served]) -> tuple[FakeProviders, Served]:
    """The fake providers of the whole run (``conftest``)."""
    return providers_server


@pytest.fixture
def fake(server: tuple[FakeProviders, Served]) -> FakeProviders:
    fake, _ = server
    fake.reset()
    return fake


@pytest.fixture(scope="module")
def gateway(server: tuple[FakeProviders, Served]) -> Iterator[str]:
    url = server[1].url
    app = load_gateway().create_app(url + "/v1", anthropic_upstream=url, timeout=TIMEOUT)
    with Served(app, lifespan="on") as served:
        yield served.url


def answer_script() -> ResponseScript:
    return ResponseScript(
        [
            Item("reasoning", [["Think </answer> first"]]),
            Item("message", [["The answer", " is 4.</ans", "wer>", *tail(60)]]),
        ]
    )


# --- /v1/responses -----------------------------------------------------------------------------


def test_responses_stream_through_the_gateway(fake: FakeProviders, gateway: str) -> None:
    fake.responses = response_events(answer_script())
    with openai_client(gateway) as client:
        stream = client.responses.create(
            model="gpt-test", input="Hi", stream=True, extra_body={"stop": STOPS}
        )
        events: list[Any] = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "The answer is 4."
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "The answer is 4."
    assert (completed.response.model_extra or {})["stop_sequence"] == "</answer>"
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == "Think </answer> first"
    assert "stop" not in fake.last.body  # the Responses API has no such parameter
    assert_closed_early(fake.last)


def test_responses_non_streaming_through_the_gateway(fake: FakeProviders, gateway: str) -> None:
    fake.responses = response_events(answer_script())
    with openai_client(gateway) as client:
        response = client.responses.create(model="gpt-test", input="Hi", extra_body={"stop": STOPS})
    assert response.output_text == "The answer is 4."
    assert (response.model_extra or {})["stop_sequence"] == "</answer>"
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert "stop" not in fake.last.body


def test_responses_without_stops_pass_through(fake: FakeProviders, gateway: str) -> None:
    fake.responses = response_events(ResponseScript([Item("message", [["Plain </answer>"]])]))
    with openai_client(gateway) as client:
        events: list[Any] = list(client.responses.create(model="m", input="Hi", stream=True))
    assert events[-1].response.output_text == "Plain </answer>"


# --- per-provider splits -----------------------------------------------------------------------


def test_chat_to_a_model_that_rejects_stop(fake: FakeProviders, gateway: str) -> None:
    fake.chat.reject_stop = True  # as o3 does
    fake.chat.chat = ChatScript([text_deltas("The answer", " is 4.", "</ans", "wer>", *tail())])
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(model="o3", messages=MESSAGES, stream=True, stop=STOPS)
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is 4."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "stop" not in fake.chat.last.body
    assert_closed_early(fake.chat.last)


def test_chat_to_a_model_that_takes_four(fake: FakeProviders, gateway: str) -> None:
    fake.chat.chat = ChatScript([text_deltas("a", "</answer>", *tail())])
    with openai_client(gateway) as client:
        list(
            client.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True, stop=STOPS
            )
        )
    assert fake.chat.last.body["stop"] == STOPS[:4]


def test_messages_keep_whitespace_only_stops_local(fake: FakeProviders, gateway: str) -> None:
    fake.chat.messages = MessagesScript(blocks=[("text", ["Line one", "\n", "line two", *tail()])])
    stops = ["\n", "</answer>", " \t"]
    with anthropic.Anthropic(
        base_url=gateway, api_key="sk-test", max_retries=0, timeout=TIMEOUT
    ) as client:
        events: list[Any] = list(
            client.messages.create(
                model="claude-test",
                max_tokens=100,
                messages=MESSAGES,
                stream=True,
                stop_sequences=stops,
            )
        )
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Line one"
    assert events[-2].delta.stop_sequence == "\n"
    # Anthropic rejects whitespace-only stops: only "</answer>" went upstream.
    assert fake.chat.last.body["stop_sequences"] == ["</answer>"]
    assert_closed_early(fake.chat.last)
