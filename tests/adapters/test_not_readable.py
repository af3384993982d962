"""Nothing passes unscanned in silence (contract §8): an item an adapter cannot read as its
API's stream item (another API's event, a whole response, a string) is a ``TypeError`` naming
what it got and what the adapter takes, raised as a bad item (§9.3: the stream ends and the
upstream is closed); items of the right API that carry no text pass unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stopstream import anthropic, gemini, openai

CHUNK = {
    "id": "c",
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
}
COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
}
MESSAGES_DELTA = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "text_delta", "text": "hi"},
}
WHOLE_MESSAGE = {"type": "message", "content": [{"type": "text", "text": "hi"}]}
RESPONSES_DELTA = {
    "type": "response.output_text.delta",
    "item_id": "i",
    "output_index": 0,
    "content_index": 0,
    "delta": "hi",
    "sequence_number": 1,
}
WHOLE_RESPONSE = {"object": "response", "output": []}
GEMINI = {"candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"}}]}

ADAPTERS: dict[str, Callable[..., Any]] = {
    "wrap_chat": openai.wrap_chat,
    "wrap_messages": anthropic.wrap_messages,
    "wrap_responses": openai.wrap_responses,
    "gemini.wrap": gemini.wrap,
}
# What each adapter reads, and what it must name as another API's item.
OWN = {
    "wrap_chat": CHUNK,
    "wrap_messages": MESSAGES_DELTA,
    "wrap_responses": RESPONSES_DELTA,
    "gemini.wrap": GEMINI,
}
NAMED = [
    (CHUNK, "a Chat Completions chunk"),
    (COMPLETION, "a whole Chat Completions response"),
    (MESSAGES_DELTA, "a Messages event 'content_block_delta'"),
    (WHOLE_MESSAGE, "a whole Messages response"),
    (RESPONSES_DELTA, "a Responses event 'response.output_text.delta'"),
    (WHOLE_RESPONSE, "a whole Responses response"),
    (GEMINI, "a Gemini chunk"),
    ("a string", "not str"),
]
# Items of the right API with no text: passed on as they are.
NO_TEXT: dict[str, list[Any]] = {
    "wrap_chat": [{"error": {"message": "overloaded"}}, {"id": "c", "choices": [], "usage": {}}],
    "wrap_messages": [{"type": "ping"}, {"type": "a_future_event"}],
    "wrap_responses": [{"type": "response.a_future_event", "sequence_number": 2}],
    "gemini.wrap": [{"usageMetadata": {"totalTokenCount": 3}}, {"promptFeedback": {}}],
}


class Upstream:
    def __init__(self, items: list[Any]) -> None:
        self.items, self.closes = items, 0

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def close(self) -> None:
        self.closes += 1


CASES = [
    pytest.param(name, item, shown, id=f"{name}-{shown}")
    for name in ADAPTERS
    for item, shown in NAMED
    if item is not OWN[name]
]


@pytest.mark.parametrize(("name", "item", "shown"), CASES)
def test_an_item_of_another_api_is_a_bad_item_naming_it(name: str, item: Any, shown: str) -> None:
    up = Upstream([item, OWN[name]])
    stream = ADAPTERS[name](up, ["STOP"])
    with pytest.raises(TypeError) as info:
        next(stream)
    message = str(info.value)
    assert f"{name} takes" in message, message
    assert shown in message, message
    assert up.closes == 1
    with pytest.raises(StopIteration):
        next(stream)


@pytest.mark.parametrize("name", ADAPTERS)
def test_items_of_the_right_api_without_text_pass_unchanged(name: str) -> None:
    items = NO_TEXT[name]
    out: list[Any] = list(ADAPTERS[name](Upstream(list(items)), ["STOP"]))
    assert out == items
