"""Streams in the exact shapes of the OpenAI Responses API and Gemini's ``streamGenerateContent``.

Used by the adapters' unit tests (as dicts) and by ``fake_providers`` (as SSE bodies served to
the real SDK clients).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Event = dict[str, Any]

RESPONSE_USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 8},
    "total_tokens": 52,
}


@dataclass
class Item:
    """One output item of a response: ``kind`` is ``message``, ``reasoning`` or ``function_call``.

    ``parts``: for a message, the deltas of each content part; for reasoning, the deltas of each
    summary part; for a function call, one list: the argument deltas.
    """

    kind: str
    parts: list[list[str]]
    name: str = "lookup"


@dataclass
class ResponseScript:
    items: list[Item]
    terminal: str | None = "response.completed"  # None: the stream just ends
    model: str = "gpt-test"
    logprobs: bool = False
    usage: dict[str, Any] = field(default_factory=lambda: dict(RESPONSE_USAGE))


def _response(script: ResponseScript, status: str, output: list[Event]) -> Event:
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": script.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": script.usage if status != "in_progress" else None,
        "metadata": {},
    }


def _logprob(token: str) -> Event:
    return {"token": token, "logprob": -0.5, "top_logprobs": []}


def response_events(script: ResponseScript) -> list[Event]:
    """The events of one streamed response, numbered from 0, as the API sends them."""
    events: list[Event] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, **fields, "sequence_number": len(events)})

    add("response.created", response=_response(script, "in_progress", []))
    add("response.in_progress", response=_response(script, "in_progress", []))
    output: list[Event] = []
    for index, item in enumerate(script.items):
        if item.kind == "message":
            item_id = f"msg_{index}"
            add(
                "response.output_item.added",
                output_index=index,
                item={
                    "id": item_id,
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                },
            )
            content: list[Event] = []
            for c, deltas in enumerate(item.parts):
                part: Event = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                ids = {"item_id": item_id, "output_index": index, "content_index": c}
                add("response.content_part.added", **ids, part=part)
                for delta in deltas:
                    logprobs = [_logprob(delta)] if script.logprobs else []
                    add("response.output_text.delta", **ids, delta=delta, logprobs=logprobs)
                text = "".join(deltas)
                all_logprobs = [_logprob(d) for d in deltas] if script.logprobs else []
                add("response.output_text.done", **ids, text=text, logprobs=all_logprobs)
                done_part = {**part, "text": text, "logprobs": all_logprobs}
                add("response.content_part.done", **ids, part=done_part)
                content.append(done_part)
            done = {
                "id": item_id,
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        elif item.kind == "reasoning":
            item_id = f"rs_{index}"
            add(
                "response.output_item.added",
                output_index=index,
                item={"id": item_id, "type": "reasoning", "summary": []},
            )
            summary: list[Event] = []
            for s, deltas in enumerate(item.parts):
                ids = {"item_id": item_id, "output_index": index, "summary_index": s}
                empty = {"type": "summary_text", "text": ""}
                add("response.reasoning_summary_part.added", **ids, part=empty)
                for delta in deltas:
                    add("response.reasoning_summary_text.delta", **ids, delta=delta)
                text = "".join(deltas)
                add("response.reasoning_summary_text.done", **ids, text=text)
                add("response.reasoning_summary_part.done", **ids, part={**empty, "text": text})
                summary.append({"type": "summary_text", "text": text})
            done = {"id": item_id, "type": "reasoning", "summary": summary}
        else:
            item_id = f"fc_{index}"
            call = {
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "call_id": f"call_{index}",
                "name": item.name,
                "arguments": "",
            }
            add("response.output_item.added", output_index=index, item=call)
            ids = {"item_id": item_id, "output_index": index}
            for delta in item.parts[0]:
                add("response.function_call_arguments.delta", **ids, delta=delta)
            arguments = "".join(item.parts[0])
            add("response.function_call_arguments.done", **ids, arguments=arguments)
            done = {**call, "status": "completed", "arguments": arguments}
        add("response.output_item.done", output_index=index, item=done)
        output.append(done)
    if script.terminal is not None:
        status = script.terminal.rpartition(".")[2]
        add(script.terminal, response=_response(script, status, output))
    return events


def responses_sse(events: list[Event]) -> list[str]:
    """SSE blocks (without their blank line) as the Responses API writes them."""
    return [f"event: {e['type']}\ndata: {json.dumps(e)}" for e in events]


# --- Gemini ----------------------------------------------------------------------------------


def gemini_usage(output_tokens: int) -> Event:
    return {
        "promptTokenCount": 9,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": 9 + output_tokens,
        "thoughtsTokenCount": 5,
    }


def gemini_chunk(
    parts: list[Event] | None,
    *,
    index: int = 0,
    finish: str | None = None,
    tokens: int = 1,
    **candidate: Any,
) -> Event:
    """One ``GenerateContentResponse`` of a stream, camelCase as on the wire."""
    cand: Event = {"index": index, **candidate}
    if parts is not None:
        cand["content"] = {"parts": parts, "role": "model"}
    if finish is not None:
        cand["finishReason"] = finish
    return {
        "candidates": [cand],
        "usageMetadata": gemini_usage(tokens),
        "modelVersion": "gemini-test",
        "responseId": "resp-gemini",
    }


def text(value: str, **extra: Any) -> Event:
    return {"text": value, **extra}


def thought(value: str) -> Event:
    return {"text": value, "thought": True}


def function_call(name: str, args: dict[str, Any]) -> Event:
    return {"functionCall": {"name": name, "args": args}}


def gemini_sse(chunks: list[Event]) -> list[str]:
    """SSE blocks (without their blank line) as ``alt=sse`` writes them."""
    return [f"data: {json.dumps(c)}" for c in chunks]
