"""The provider modules' truncation of non-streaming responses: dicts of the wire shape, and
SDK objects for Chat Completions (the OpenAI SDK's ``ChatCompletion``, objects read by
attribute as LiteLLM's ``ModelResponse``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from stopstream import Stop
from stopstream.anthropic import truncate_message
from stopstream.openai import truncate_chat, truncate_response


def completion(*contents: str | None) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "length"}
            for i, c in enumerate(contents)
        ],
    }


def test_chat_cuts_each_choice_and_names_its_stop() -> None:
    data = completion("one END two", "no stop here", None)
    assert truncate_chat(data, ["END", "STOP"]) is data
    first, second, third = data["choices"]
    assert first["message"]["content"] == "one "
    assert (first["finish_reason"], first["stop_reason"]) == ("stop", "END")
    assert second == completion("no stop here")["choices"][0] | {"index": 1}
    assert third["message"]["content"] is None and "stop_reason" not in third


def test_chat_include_stop() -> None:
    data = truncate_chat(completion("one END two"), ["END"], include_stop=True)
    assert data["choices"][0]["message"]["content"] == "one END"
    data = truncate_chat(completion("one END two"), [Stop("END", include=True)])
    assert data["choices"][0]["message"]["content"] == "one END"


def test_chat_over_the_openai_sdk_object() -> None:
    from openai.types.chat import ChatCompletion

    sdk = ChatCompletion.model_validate(
        {
            "id": "c",
            "created": 0,
            "model": "m",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": "a</answer>b"},
                }
            ],
        }
    )
    truncate_chat(sdk, ["</answer>"])
    choice = sdk.choices[0]
    assert choice.message.content == "a"
    assert choice.finish_reason == "stop"
    assert choice.model_dump()["stop_reason"] == "</answer>"


def test_chat_over_plain_objects() -> None:
    # LiteLLM's ``ModelResponse`` is read and changed the same way: attributes, set in place
    # (``tests/adapters/test_litellm.py`` runs it through the proxy callback).
    message = SimpleNamespace(content="x STOP y")
    choice = SimpleNamespace(message=message, finish_reason="length")
    response = SimpleNamespace(choices=[choice])
    truncate_chat(response, ["STOP"])
    assert message.content == "x "
    assert (choice.finish_reason, choice.stop_reason) == ("stop", "STOP")


def test_message_first_text_block_with_a_stop_ends_it() -> None:
    message: dict[str, Any] = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "END is fine here"},
            {"type": "text", "text": "before"},
            {"type": "text", "text": "cut END here"},
            {"type": "text", "text": "dropped"},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }
    assert truncate_message(message, ["END"]) is message
    assert [b.get("text") for b in message["content"]] == [None, "before", "cut "]
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    untouched = {"content": [{"type": "text", "text": "fine"}], "stop_reason": "end_turn"}
    assert truncate_message(untouched, ["END"])["stop_reason"] == "end_turn"


def test_response_first_output_text_with_a_stop_ends_it() -> None:
    response: dict[str, Any] = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "status": "incomplete",
                "content": [
                    {"type": "output_text", "text": "a END b"},
                    {"type": "output_text", "text": "dropped"},
                ],
            },
            {"type": "message", "content": [{"type": "output_text", "text": "dropped"}]},
        ],
    }
    assert truncate_response(response, ["END"]) is response
    assert len(response["output"]) == 2
    item = response["output"][1]
    assert item["status"] == "completed" and item["content"] == [
        {"type": "output_text", "text": "a "}
    ]
    assert response["status"] == "completed" and response["incomplete_details"] is None
    assert response["stop_sequence"] == "END"


def test_not_a_response_is_a_type_error_naming_it() -> None:
    """Nothing passes unscanned (contract §8): what a truncate_* cannot read is named."""
    with pytest.raises(TypeError, match=r"truncate_chat takes .*, not an object with the keys"):
        truncate_chat({"error": {}}, ["x"])
    with pytest.raises(TypeError, match=r"truncate_chat takes .*, not str"):
        truncate_chat("text", ["x"])
    with pytest.raises(TypeError, match=r"truncate_message takes .*, not list"):
        truncate_message([1], ["x"])
    with pytest.raises(TypeError, match=r"not a whole Chat Completions response"):
        truncate_message({"object": "chat.completion", "choices": []}, ["x"])
    with pytest.raises(TypeError, match=r"truncate_response takes .*, not str"):
        truncate_response("text", ["x"])
    with pytest.raises(TypeError, match=r"not a whole Messages response"):
        truncate_response({"type": "message", "content": []}, ["x"])
    # Items of a response it can read that carry no text stay as they are.
    odd = {"output": [None, "item", {"type": "message", "content": "x"}]}
    assert truncate_response(odd, ["x"]) == {
        "output": [None, "item", {"type": "message", "content": "x"}]
    }
