"""The SDKs' own stream helpers through the adapters (contract §8), with the real clients over
HTTP to the fake providers on loopback: ``client.chat.completions.stream(...)``,
``client.responses.stream(...)`` and ``client.messages.stream(...)``, sync and async, the
manager or the stream it gives. Every event that carries text carries the cut text (snapshots
included), the final object is the cut one and names the stop, the helper's own methods work
after the stop closed the upstream, and the upstream is closed early.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import anthropic
import openai
import pytest

from fake_providers import FakeProviders
from fake_upstream import TIMEOUT, ChatScript, MessagesScript, Record, Served, tail, text_deltas
from provider_scripts import Item, ResponseScript, response_events
from stopstream import anthropic as ss_anthropic
from stopstream import openai as ss_openai

pytestmark = pytest.mark.e2e

STOPS = ["###", "</answer>", "\n\nUser:"]
ANSWER = "The answer is 4."
PARTS = ["The answer", " is 4.</ans", "wer> and", *tail(60)]
STOP = "</answer>"


@pytest.fixture
def fake(providers_server: tuple[FakeProviders, Served]) -> FakeProviders:
    fake, _ = providers_server
    fake.reset()
    fake.chat.chat = ChatScript(choices=[text_deltas(*PARTS)])
    fake.chat.messages = MessagesScript(blocks=[("text", PARTS)])
    fake.responses = response_events(ResponseScript([Item("message", [PARTS])]))
    return fake


@pytest.fixture
def url(providers_server: tuple[FakeProviders, Served]) -> str:
    return providers_server[1].url


def closed_early(record: Record) -> bool:
    return record.disconnected.wait(TIMEOUT) and record.events_sent < record.events_total


def no_stop_text(value: object) -> None:
    """Nothing of the stop in any text an event carries (its parts seen before the cut
    included), wherever it sits in the event; the stop named as the stop that fired is not
    text."""
    dumped = (
        value.model_dump_json(warnings=False) if hasattr(value, "model_dump_json") else str(value)
    )
    for field in ("stop_reason", "stop_sequence"):
        dumped = dumped.replace(f'"{field}":"{STOP}"', "")
    leaks = re.findall(r"</ans|wer>|tail\d", dumped)
    assert not leaks, (leaks, dumped[:400])


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0, timeout=TIMEOUT)


def aoai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk", max_retries=0, timeout=TIMEOUT)


def ant(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk", max_retries=0, timeout=TIMEOUT)


def aant(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk", max_retries=0, timeout=TIMEOUT)


MESSAGES = [{"role": "user", "content": "Hi"}]


# --- OpenAI Chat Completions: chat.completions.stream(...) ----------------------------------


def check_chat(events: list[Any], final: Any) -> None:
    check_final_chat(final)
    for e in events:
        no_stop_text(e)
    deltas = [e.delta for e in events if e.type == "content.delta"]
    assert "".join(deltas) == ANSWER
    snapshots = [e.snapshot for e in events if e.type == "content.delta"]
    assert snapshots[-1] == ANSWER
    (done,) = [e for e in events if e.type == "content.done"]
    assert done.content == ANSWER
    chunks = [e.chunk for e in events if e.type == "chunk"]
    assert chunks[-1].choices[0].finish_reason == "stop"


def check_final_chat(final: Any) -> None:
    assert final.choices[0].message.content == ANSWER
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].model_extra["stop_reason"] == STOP
    no_stop_text(final)


def test_chat_helper_manager(fake: FakeProviders, url: str) -> None:
    with oai(url) as client:
        manager = client.chat.completions.stream(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        with ss_openai.wrap_chat(manager, STOPS) as stream:
            events = list(stream)
            final = stream.get_final_completion()
            assert stream.stop_sequences == {0: STOP}
            assert stream.current_completion_snapshot.choices[0].message.content == ANSWER
    check_chat(events, final)
    assert closed_early(fake.chat.last)


def test_chat_helper_stream_and_its_own_methods_after_the_stop(
    fake: FakeProviders, url: str
) -> None:
    with (
        oai(url) as client,
        client.chat.completions.stream(model="m", messages=MESSAGES) as helper,  # type: ignore[arg-type]
    ):
        stream: Any = ss_openai.wrap_chat(helper, STOPS)
        if True:
            # The helper's own methods, on the helper itself: they read the cut stream.
            final = helper.get_final_completion()
            assert list(stream) == []  # read to its end by get_final_completion
    check_final_chat(final)
    assert closed_early(fake.chat.last)


def test_chat_helper_async(fake: FakeProviders, url: str) -> None:
    async def main() -> tuple[list[Any], Any]:
        async with aoai(url) as client:
            manager = client.chat.completions.stream(model="m", messages=MESSAGES)  # type: ignore[arg-type]
            async with ss_openai.awrap_chat(manager, STOPS) as stream:
                events = [e async for e in stream]
                return events, await stream.get_final_completion()

    events, final = asyncio.run(main())
    check_chat(events, final)
    assert closed_early(fake.chat.last)


# --- OpenAI Responses: responses.stream(...) --------------------------------------------------


def check_responses(events: list[Any], final: Any) -> None:
    for e in events:
        no_stop_text(e)
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(e.delta for e in deltas) == ANSWER
    assert deltas[-1].snapshot == ANSWER
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    assert done.text == ANSWER
    assert events[-1].type == "response.completed"
    assert final.output_text == ANSWER
    assert (final.model_extra or {})["stop_sequence"] == STOP
    no_stop_text(final)


def test_responses_helper_manager(fake: FakeProviders, url: str) -> None:
    with oai(url) as client:
        manager = client.responses.stream(model="m", input="Hi")
        with ss_openai.wrap_responses(manager, STOPS) as stream:
            events = list(stream)
            final = stream.get_final_response()
            assert stream.stop_sequence == STOP and stream.complete
    check_responses(events, final)
    assert closed_early(fake.last)


def test_responses_helper_async(fake: FakeProviders, url: str) -> None:
    async def main() -> tuple[list[Any], Any]:
        async with (
            aoai(url) as client,
            client.responses.stream(model="m", input="Hi") as helper,
        ):
            stream: Any = ss_openai.awrap_responses(helper, STOPS)
            if True:
                events = [e async for e in stream]
                return events, await helper.get_final_response()

    events, final = asyncio.run(main())
    check_responses(events, final)
    assert closed_early(fake.last)


# --- Anthropic Messages: messages.stream(...) -------------------------------------------------


def check_messages(events: list[Any], final: Any) -> None:
    check_final_message(final)
    for e in events:
        no_stop_text(e)
    texts = [e for e in events if e.type == "text"]
    assert "".join(e.text for e in texts) == ANSWER
    assert texts[-1].snapshot == ANSWER


def check_final_message(final: Any) -> None:
    assert final.content[0].text == ANSWER
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == STOP
    no_stop_text(final)


def test_messages_helper_manager_text_stream_and_final(fake: FakeProviders, url: str) -> None:
    with ant(url) as client:
        manager = client.messages.stream(model="m", max_tokens=100, messages=MESSAGES)  # type: ignore[arg-type]
        with ss_anthropic.wrap_messages(manager, STOPS) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
            assert stream.get_final_text() == ANSWER
            assert stream.stop_sequence == STOP and stream.complete
    assert text == ANSWER
    check_final_message(final)
    assert closed_early(fake.chat.last)


def test_messages_helper_events(fake: FakeProviders, url: str) -> None:
    with (
        ant(url) as client,
        client.messages.stream(model="m", max_tokens=100, messages=MESSAGES) as helper,  # type: ignore[arg-type]
    ):
        stream: Any = ss_anthropic.wrap_messages(helper, STOPS)
        if True:
            events = list(stream)
            # After the stop closed the upstream, the helper's own methods still work.
            final = helper.get_final_message()
            assert helper.get_final_text() == ANSWER
    check_messages(events, final)
    assert closed_early(fake.chat.last)


def test_messages_helper_async(fake: FakeProviders, url: str) -> None:
    async def main() -> tuple[str, Any]:
        async with aant(url) as client:
            manager = client.messages.stream(model="m", max_tokens=100, messages=MESSAGES)  # type: ignore[arg-type]
            async with ss_anthropic.awrap_messages(manager, STOPS) as stream:
                text = "".join([t async for t in stream.text_stream])
                return text, await stream.get_final_message()

    text, final = asyncio.run(main())
    assert text == ANSWER
    check_final_message(final)
    assert closed_early(fake.chat.last)


# --- a helper read before it was wrapped -------------------------------------------------------


def test_a_helper_already_read_is_an_error(fake: FakeProviders, url: str) -> None:
    with (
        ant(url) as client,
        client.messages.stream(model="m", max_tokens=100, messages=MESSAGES) as helper,  # type: ignore[arg-type]
    ):
        next(iter(helper))
        if True:
            with pytest.raises(ValueError, match="read before it was wrapped"):
                ss_anthropic.wrap_messages(helper, STOPS)
