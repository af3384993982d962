"""End to end, with real components: the real ``openai`` client's ``responses.create(stream=True)``
and the real ``google-genai`` client talk over HTTP to a fake Responses / Gemini API (served by
uvicorn on 127.0.0.1), and the adapters run on the SDKs' own stream objects. Whenever a stop
fires, the fake must see the connection dropped before it has sent everything.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import openai
import pytest
from google import genai
from google.genai import types as genai_types
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from fake_providers import FakeProviders
from fake_upstream import TIMEOUT, Record, Served, assert_closed_early, openai_client, tail
from provider_scripts import (
    Item,
    ResponseScript,
    function_call,
    gemini_chunk,
    response_events,
    text,
    thought,
)
from stopstream import Regex
from stopstream.gemini import awrap, wrap
from stopstream.openai import awrap_responses, wrap_responses

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e

STOPS = ["###", "END", "<|im_end|>", "Observation:", "</answer>", "\n\nUser:"]


@pytest.fixture(scope="module")
def server(providers_server: tuple[FakeProviders, Served]) -> tuple[FakeProviders, Served]:
    """The fake providers of the whole run (``conftest``)."""
    return providers_server


@pytest.fixture
def fake(server: tuple[FakeProviders, Served]) -> FakeProviders:
    fake, _ = server
    fake.reset()
    return fake


@pytest.fixture
def url(server: tuple[FakeProviders, Served]) -> str:
    return server[1].url


def assert_completed(record: Record) -> None:
    assert record.finished.wait(TIMEOUT)
    assert record.completed.is_set() and not record.disconnected.is_set()


# --- OpenAI Responses ------------------------------------------------------------------------


def responses_script() -> ResponseScript:
    return ResponseScript(
        [
            Item("reasoning", [["Think: </answer> ", "and \n\nUser: too"]]),
            Item("function_call", [['{"q": "</ans', 'wer>"}']]),
            Item("message", [["The answer", " is 4.</ans", "wer>", *tail(60)]]),
        ]
    )


def by_type(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def test_responses_stop_with_the_real_client(fake: FakeProviders, url: str) -> None:
    fake.responses = response_events(responses_script())
    with openai_client(url) as client:
        upstream = client.responses.create(model="gpt-test", input="Hi", stream=True)
        with wrap_responses(upstream, STOPS) as stream:
            events: list[Any] = list(stream)
    text_deltas = by_type(events, "response.output_text.delta")
    assert all(isinstance(e, ResponseTextDeltaEvent) for e in text_deltas)
    assert "".join(e.delta for e in text_deltas) == "The answer is 4."
    done, part_done, item_done, completed = events[-4:]
    assert isinstance(done, ResponseTextDoneEvent) and done.text == "The answer is 4."
    assert part_done.part.text == "The answer is 4."
    assert isinstance(item_done, ResponseOutputItemDoneEvent)
    assert item_done.item.model_dump()["status"] == "completed"
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.response.status == "completed"
    assert completed.response.output_text == "The answer is 4."  # the SDK's own helper
    assert (completed.response.model_extra or {})["stop_sequence"] == "</answer>"
    assert [item.type for item in completed.response.output] == [
        "reasoning",
        "function_call",
        "message",
    ]
    # The reasoning summary and the tool arguments passed untouched.
    summary = by_type(events, "response.reasoning_summary_text.delta")
    assert "".join(e.delta for e in summary) == "Think: </answer> and \n\nUser: too"
    arguments = by_type(events, "response.function_call_arguments.delta")
    assert "".join(e.delta for e in arguments) == '{"q": "</answer>"}'
    numbers = [e.sequence_number for e in events]
    assert all(b > a for a, b in itertools.pairwise(numbers))
    assert stream.stop_sequence == "</answer>" and stream.complete
    assert_closed_early(fake.last)


@pytest.mark.parametrize("on_stop", ["close", "drain"])
def test_responses_stop_decided_by_the_end_with_the_real_client(
    fake: FakeProviders, url: str, on_stop: str
) -> None:
    # "\bend\b" needs the character after "end": only the end of the text decides it, after
    # the deltas; every closing event and the SDK's ``output_text`` must hold the cut text.
    fake.responses = response_events(ResponseScript([Item("message", [["It is", " the e", "nd"]])]))
    with openai_client(url) as client:
        upstream = client.responses.create(model="gpt-test", input="Hi", stream=True)
        with wrap_responses(upstream, [Regex(r"\bend\b")], on_stop=on_stop) as stream:  # type: ignore[call-overload]
            events: list[Any] = list(stream)
    text_deltas = by_type(events, "response.output_text.delta")
    assert "".join(e.delta for e in text_deltas) == "It is the "
    done, part_done, item_done, completed = events[-4:]
    assert isinstance(done, ResponseTextDoneEvent) and done.text == "It is the "
    assert part_done.part.text == "It is the "
    assert item_done.item.model_dump()["content"][-1]["text"] == "It is the "
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.response.status == "completed"
    assert completed.response.output_text == "It is the "
    assert (completed.response.model_extra or {})["stop_sequence"] == "end"
    assert len(by_type(events, "response.output_text.done")) == 1
    assert len(by_type(events, "response.completed")) == 1
    assert all(b > a for a, b in itertools.pairwise(e.sequence_number for e in events))
    assert stream.stop_sequence == "end" and stream.complete and stream.stopped


def test_responses_without_a_stop(fake: FakeProviders, url: str) -> None:
    fake.responses = response_events(ResponseScript([Item("message", [["Plain", " </an"]])]))
    with openai_client(url) as client:
        upstream = client.responses.create(model="gpt-test", input="Hi", stream=True)
        with wrap_responses(upstream, STOPS) as stream:
            events: list[Any] = list(stream)
    deltas = by_type(events, "response.output_text.delta")
    assert "".join(e.delta for e in deltas) == "Plain </an"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Plain </an"
    assert stream.complete and not stream.stopped
    assert_completed(fake.last)


def test_responses_upstream_closed_early(fake: FakeProviders, url: str) -> None:
    events = response_events(ResponseScript([Item("message", [["cut", " </an"]])], terminal=None))
    fake.responses = events[: [e["type"] for e in events].index("response.output_text.done")]
    with openai_client(url) as client:
        upstream = client.responses.create(model="gpt-test", input="Hi", stream=True)
        with wrap_responses(upstream, STOPS) as stream:
            out: list[Any] = list(stream)
    assert "".join(e.delta for e in by_type(out, "response.output_text.delta")) == "cut "
    assert out[-1].type == "response.output_text.delta"  # nothing invented
    assert not stream.complete and stream.pending == {(0, 0): "</an"}


def test_responses_async_client(fake: FakeProviders, url: str) -> None:
    fake.responses = response_events(responses_script())

    async def main() -> tuple[list[Any], bool]:
        async with openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT
        ) as client:
            upstream = await client.responses.create(model="gpt-test", input="Hi", stream=True)
            async with awrap_responses(upstream, STOPS) as stream:
                return [e async for e in stream], stream.complete

    events, complete = asyncio.run(main())
    assert events[-1].response.output_text == "The answer is 4."
    assert complete
    assert_closed_early(fake.last)


# --- Gemini ------------------------------------------------------------------------------------


def gemini_client(url: str) -> genai.Client:
    options = genai_types.HttpOptions(base_url=url, timeout=int(TIMEOUT * 1000))
    return genai.Client(api_key="test-key", http_options=options)


def gemini_script() -> list[dict[str, Any]]:
    return [
        gemini_chunk([thought("Plan: answer, then </answer> and \n\nUser:")], tokens=1),
        gemini_chunk([function_call("lookup", {"q": "</answer>"})], tokens=2),
        gemini_chunk([text("The answer")], tokens=3),
        gemini_chunk([text(" is 4.</ans")], tokens=4),
        gemini_chunk([text("wer>")], tokens=5),
        *[gemini_chunk([text(piece)], tokens=6 + i) for i, piece in enumerate(tail(60))],
        gemini_chunk([text("")], finish="STOP", tokens=70),
    ]


def answer_text(chunks: list[Any]) -> str:
    return "".join(c.text or "" for c in chunks)


def test_gemini_stop_with_the_real_client(fake: FakeProviders, url: str) -> None:
    fake.gemini = gemini_script()
    client = gemini_client(url)
    upstream = client.models.generate_content_stream(model="gemini-test", contents="Hi")
    with wrap(upstream, STOPS) as stream:
        chunks: list[Any] = list(stream)
    assert all(isinstance(c, genai_types.GenerateContentResponse) for c in chunks)
    assert answer_text(chunks) == "The answer is 4."
    last = chunks[-1].candidates[0]
    assert last.finish_reason == genai_types.FinishReason.STOP
    assert last.finish_message == "</answer>"
    # The thought part and the function call passed untouched.
    thoughts = [p.text for c in chunks for p in c.candidates[0].content.parts or [] if p.thought]
    assert thoughts == ["Plan: answer, then </answer> and \n\nUser:"]
    calls = [c.function_calls for c in chunks if c.function_calls]
    assert calls[0][0].args == {"q": "</answer>"}
    assert stream.stop_sequences == {0: "</answer>"} and stream.complete
    assert fake.last.body["contents"][0]["parts"] == [{"text": "Hi"}]
    assert_closed_early(fake.last)


def test_gemini_upstream_closed_early(fake: FakeProviders, url: str) -> None:
    fake.gemini = [gemini_chunk([text("cut")]), gemini_chunk([text(" </an")])]
    client = gemini_client(url)  # kept: the client closes its connections when collected
    upstream = client.models.generate_content_stream(model="gemini-test", contents="x")
    with wrap(upstream, STOPS) as stream:
        chunks: list[Any] = list(stream)
    assert answer_text(chunks) == "cut "
    assert chunks[-1].candidates[0].finish_reason is None  # nothing invented
    assert not stream.complete and stream.pending == {0: "</an"}


def test_gemini_without_a_stop(fake: FakeProviders, url: str) -> None:
    fake.gemini = [
        gemini_chunk([text("Plain")]),
        gemini_chunk([text(" </an")]),
        gemini_chunk([text("")], finish="MAX_TOKENS"),
    ]
    client = gemini_client(url)  # kept: the client closes its connections when collected
    upstream = client.models.generate_content_stream(model="gemini-test", contents="x")
    with wrap(upstream, STOPS) as stream:
        chunks: list[Any] = list(stream)
    assert answer_text(chunks) == "Plain </an"
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.MAX_TOKENS
    assert stream.complete and not stream.stopped
    assert_completed(fake.last)


# With aiohttp installed (LiteLLM brings it), the SDK's async client uses it, and it warns.
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
def test_gemini_async_client(fake: FakeProviders, url: str) -> None:
    fake.gemini = gemini_script()

    async def main() -> tuple[list[Any], bool]:
        client = gemini_client(url)
        upstream = await client.aio.models.generate_content_stream(
            model="gemini-test", contents="Hi"
        )
        async with awrap(upstream, STOPS) as stream:
            return [c async for c in stream], stream.complete

    chunks, complete = asyncio.run(main())
    assert answer_text(chunks) == "The answer is 4."
    assert complete
    assert_closed_early(fake.last)
