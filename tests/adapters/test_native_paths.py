"""The native fast paths against the Python rules they shortcut, byte for byte.

- SSE: ``wrap_openai`` / ``wrap_anthropic`` / ``wrap_responses`` / ``wrap_gemini`` (native
  parsing, the common text delta handled in Rust) against the pure-Python stage ``SSEDriver``
  (``SSEParser`` plus the machine for every event) on generated bodies split anywhere: the
  same pieces, the same attributes.
- SDK objects: ``wrap_chat`` / ``wrap_messages`` (a fast path of attribute reads and one native
  call) against ``ModelDriver`` over the same machine: the same objects (identity for unchanged
  ones, class and dump for changed ones), the same attributes.

Bodies are compact JSON with non-ASCII kept as is (``json.dumps(..., ensure_ascii=False,
separators=(",", ":"))``), as the providers send them: for those a spliced event (only the text
string replaced) equals the Python path's re-serialization, so byte equality holds.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk
from pydantic import TypeAdapter

from hypothesis_profiles import examples
from stopstream import Regex, sse
from stopstream import _streaming_apis as apis
from stopstream._adapter import ModelDriver, OnStop, SyncAdapterStream
from stopstream._responses import ResponsesMachine
from stopstream.anthropic import MessagesMachine, _rebuild, wrap_messages
from stopstream.gemini import GeminiMachine
from stopstream.openai import ChatMachine, wrap_chat
from stopstream.sse import SSEDriver, wrap_anthropic, wrap_gemini, wrap_openai, wrap_responses

# Characters that JSON escapes, multi-byte ones, and the letters the stops are made of.
CHARS = list('ab "\\\n\t\x01\x1fé日😀/')
TEXT = st.text(alphabet=st.sampled_from(CHARS), max_size=8)
# Mostly two or three characters long, so that text is often held back and released later
# (which changes events) and less often matched whole.
STOPS = st.lists(
    st.text(alphabet=st.sampled_from(list('ab "\\\né😀')), min_size=2, max_size=3),
    min_size=1,
    max_size=3,
)
EOL = st.sampled_from(["\n", "\r\n", "\r"])
ON_STOP = st.sampled_from(["close", "drain"])


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def block(lines: list[str], eol: str) -> str:
    return "".join(line + eol for line in lines) + eol


@st.composite
def chat_events(draw: st.DrawFn, n: int) -> list[list[str]]:
    """The lines of each event of a Chat Completions body."""
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events: list[list[str]] = []
    for i in range(n):
        if draw(st.booleans()) or i == 0:
            role = {
                "index": i,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
            }
            events.append(["data: " + dumps({**head, "choices": [role]})])
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["text", "text", "text", "multi", "other"]))
        if kind == "other":
            events.append(
                draw(
                    st.sampled_from(
                        [
                            [": keep-alive"],
                            ["id: 7", "retry: 10"],
                            ["data: not json"],  # a bad item, the same on both paths
                            ['data: {"choices":[]} trailing'],
                            [
                                'data: {"choices":[{"index":0,"delta":{"content":"a\\\\b",'
                                '"content":"ok"},"finish_reason":null}]}'
                            ],
                            ["data: " + dumps({"choices": [], "usage": {"total_tokens": 3}})],
                            ["data: " + dumps({"error": {"message": "x"}})],
                            ["data: " + dumps({**head, "choices": []})],
                        ]
                    )
                )
            )
            continue
        choices = []
        for i in draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True)):
            choice: dict[str, Any] = {"index": i, "delta": {"content": draw(TEXT)}}
            if draw(st.integers(0, 9)) == 0:
                choice["finish_reason"] = "stop"
            elif draw(st.booleans()):
                choice["finish_reason"] = None
            choices.append(choice)
        chunk = {**head, "choices": choices}
        if kind == "multi":
            text = json.dumps(chunk, ensure_ascii=False, indent=1)
            events.append(["data: " + line for line in text.split("\n")])
        else:
            extra = draw(st.sampled_from([[], [": c"], ["id: 1"], ["event: x"]]))
            events.append([*extra, "data: " + dumps(chunk)])
    for i in range(n):
        if draw(st.booleans()):
            done = {"index": i, "delta": {}, "finish_reason": "length"}
            events.append(["data: " + dumps({**head, "choices": [done]})])
    if draw(st.booleans()):
        events.append(["data: " + dumps({**head, "choices": [], "usage": {"total_tokens": 9}})])
    if draw(st.booleans()):
        events.append(["data: [DONE]"])
    return events


MESSAGE_START: dict[str, Any] = {
    "type": "message_start",
    "message": {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "x",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}


@st.composite
def messages_events(draw: st.DrawFn) -> list[list[str]]:
    """The lines of each event of a Messages body."""
    events: list[dict[str, Any]] = [MESSAGE_START]
    kinds = draw(
        st.lists(st.sampled_from(["text", "text", "thinking", "tool_use"]), min_size=1, max_size=3)
    )
    for index, kind in enumerate(kinds):
        if kind == "text":
            block_: dict[str, Any] = {"type": "text", "text": draw(TEXT)}
        elif kind == "thinking":
            block_ = {"type": "thinking", "thinking": ""}
        else:
            block_ = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
        if draw(st.integers(0, 5)) > 0:
            events.append({"type": "content_block_start", "index": index, "content_block": block_})
        for _ in range(draw(st.integers(0, 6))):
            if draw(st.integers(0, 4)) == 0:
                events.append({"type": "ping"})
            if kind == "text":
                delta = {"type": "text_delta", "text": draw(TEXT)}
            elif kind == "thinking":
                delta = {"type": "thinking_delta", "thinking": draw(TEXT)}
            else:
                delta = {"type": "input_json_delta", "partial_json": draw(TEXT)}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        if draw(st.integers(0, 5)) > 0:
            events.append({"type": "content_block_stop", "index": index})
    # Late text deltas of earlier blocks (open ones too, when their stop was left out): after a
    # stop that drains, the machine drops them.
    texts = [index for index, kind in enumerate(kinds) if kind == "text"]
    for index in draw(st.lists(st.sampled_from(texts), max_size=2)) if texts else []:
        delta = {"type": "text_delta", "text": draw(TEXT)}
        events.append({"type": "content_block_delta", "index": index, "delta": delta})
    if draw(st.booleans()):
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 9},
            }
        )
        if draw(st.booleans()):
            events.append({"type": "message_stop"})
    out: list[list[str]] = []
    for event in events:
        if draw(st.integers(0, 9)) == 0:
            out.append([": keep-alive"])
        out.append([f"event: {event['type']}", "data: " + dumps(event)])
    return out


@st.composite
def responses_events(draw: st.DrawFn) -> list[list[str]]:
    """The lines of each event of a Responses body: message items of one or two text parts
    (keys like (0, 1) and (1, 0) both occur), reasoning and function-call items, logprobs now
    and then, sequence numbers that sometimes repeat (the machine renumbers those) or are
    missing, keys in any order, deltas of two parts interleaved, items interleaved, parts never
    closed (still open when the next item's deltas come), and a terminal event or none."""
    events: list[dict[str, Any]] = []
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    events.append({"type": "response.created", "response": response})
    if draw(st.booleans()):
        events.append({"type": "response.in_progress", "response": response})
    kinds = draw(
        st.lists(
            st.sampled_from(["message", "message", "reasoning", "call"]), min_size=1, max_size=2
        )
    )
    items: list[list[dict[str, Any]]] = []
    for output_index, kind in enumerate(kinds):
        item_id = f"item_{output_index}"
        item: list[dict[str, Any]] = []
        items.append(item)
        added = {"id": item_id, "type": kind, "status": "in_progress"}
        item.append(
            {"type": "response.output_item.added", "output_index": output_index, "item": added}
        )
        if kind == "reasoning":
            for _ in range(draw(st.integers(0, 2))):
                summary = {"item_id": item_id, "output_index": output_index, "summary_index": 0}
                item.append(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        **summary,
                        "delta": draw(TEXT),
                    }
                )
        elif kind == "call":
            for _ in range(draw(st.integers(0, 2))):
                item.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item_id,
                        "output_index": output_index,
                        "delta": draw(TEXT),
                    }
                )
        else:
            n_parts = draw(st.integers(1, 2))
            deltas: list[dict[str, Any]] = []
            for content_index in range(n_parts):
                where = {
                    "item_id": item_id,
                    "output_index": output_index,
                    "content_index": content_index,
                }
                if draw(st.integers(0, 5)) > 0:
                    part = {"type": "output_text", "text": "", "annotations": []}
                    item.append({"type": "response.content_part.added", **where, "part": part})
                for _ in range(draw(st.integers(0, 5))):
                    delta: dict[str, Any] = {
                        "type": "response.output_text.delta",
                        **where,
                        "delta": draw(TEXT),
                    }
                    logprobs = draw(
                        st.sampled_from(
                            [[], [], [], None, "absent", [{"token": "t", "logprob": -1.0}]]
                        )
                    )
                    if logprobs != "absent":
                        delta["logprobs"] = logprobs
                    deltas.append(delta)
            if draw(st.booleans()):
                deltas = draw(st.permutations(deltas))  # two parts interleaved
            item += deltas
            for content_index in range(n_parts):
                if draw(st.integers(0, 3)) == 0:
                    continue  # left open: its deltas meet the next item's
                where = {
                    "item_id": item_id,
                    "output_index": output_index,
                    "content_index": content_index,
                }
                text = "".join(d["delta"] for d in deltas if d["content_index"] == content_index)
                item.append(
                    {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
                )
                part = {"type": "output_text", "text": text, "annotations": []}
                item.append({"type": "response.content_part.done", **where, "part": part})
        done = {**added, "status": "completed"}
        item.append(
            {"type": "response.output_item.done", "output_index": output_index, "item": done}
        )
    if draw(st.booleans()):
        events += [e for item in items for e in item]
    else:  # the items' events interleaved, each item's in its order
        while any(items):
            left = [item for item in items if item]
            events.append(left[draw(st.integers(0, len(left) - 1))].pop(0))
    terminal = draw(st.sampled_from(["response.completed", "response.incomplete", None]))
    if terminal is not None:
        events.append({"type": terminal, "response": {**response, "status": terminal[9:]}})
    numbering = draw(st.sampled_from(["plain", "plain", "repeats", "none"]))
    seq = 0
    out: list[list[str]] = []
    for event in events:
        if numbering != "none":
            if numbering == "repeats" and draw(st.integers(0, 5)) == 0:
                seq -= 1
            if draw(st.integers(0, 30)) > 0:
                event = {"type": event["type"], "sequence_number": seq, **event}
            seq += 1
        if draw(st.integers(0, 4)) == 0:
            event = dict(draw(st.permutations(list(event.items()))))  # keys in any order
        if draw(st.integers(0, 9)) == 0:
            out.append([": keep-alive"])
        out.append([f"event: {event['type']}", "data: " + dumps(event)])
    return out


@st.composite
def gemini_events(draw: st.DrawFn, n: int) -> list[list[str]]:
    """The lines of each event of a Gemini ``alt=sse`` body: candidates with their ``index``
    (or, where it is their position, without it or with ``null``; three candidates give
    chunks like ``[{"index": 2}, {}]``), text parts mixed with thought parts, function calls,
    empty and signed parts, finish reasons, usage on every chunk, and chunks without
    candidates."""
    usage = {"promptTokenCount": 4, "totalTokenCount": 9}
    tail = {"usageMetadata": usage, "modelVersion": "gemini-x", "responseId": "r"}
    part_kinds = st.sampled_from(
        ["text", "text", "text", "thought", "call", "signed", "plain_false"]
    )
    events: list[list[str]] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["chunk", "chunk", "chunk", "chunk", "other"]))
        if kind == "other":
            other = draw(
                st.sampled_from(
                    [
                        {"promptFeedback": {"blockReason": "OTHER"}},
                        {"candidates": [], **tail},
                        {"error": {"code": 500}},
                    ]
                )
            )
            events.append(["data: " + dumps(other)])
            continue
        candidates = []
        chosen = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        if n > 1 and draw(st.integers(0, 9)) == 0:
            chosen.append(chosen[0])  # one index twice
        for position, index in enumerate(chosen):
            parts: list[dict[str, Any]] = []
            for part_kind in draw(st.lists(part_kinds, min_size=0, max_size=3)):
                if part_kind == "text":
                    parts.append({"text": draw(TEXT)})
                elif part_kind == "thought":
                    parts.append({"text": draw(TEXT), "thought": True})
                elif part_kind == "plain_false":
                    parts.append({"thought": False, "text": draw(TEXT)})
                elif part_kind == "signed":
                    parts.append({"text": draw(TEXT), "thoughtSignature": "c2ln"})
                else:
                    parts.append({"functionCall": {"name": "f", "args": {"a": [1, "x"]}}})
            candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
            how = draw(st.sampled_from(["first", "last", "absent", "null"]))
            if how == "first":
                candidate = {"index": index, **candidate}
            elif how == "last" or index != position:
                candidate["index"] = index
            elif how == "null":
                candidate["index"] = None
            if draw(st.integers(0, 9)) == 0:
                candidate["finishReason"] = draw(st.sampled_from(["STOP", "MAX_TOKENS"]))
            candidates.append(candidate)
        events.append(["data: " + dumps({"candidates": candidates, **tail})])
    return events


@st.composite
def bodies(draw: st.DrawFn, events: st.SearchStrategy[list[list[str]]]) -> list[bytes]:
    """A body split anywhere: optional byte order mark, one line ending, optional cut tail."""
    eol = draw(EOL)
    text = "".join(block(lines, eol) for lines in draw(events))
    if draw(st.booleans()):
        text = "\ufeff" + text
    if draw(st.integers(0, 4)) == 0:
        text += draw(st.sampled_from(['data: {"x"', "data: cut", eol, "\r", ": c" + eol]))
    data = text.encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def run(stream: Any) -> list[Any]:
    """Every piece, then the bad item's error if one ends the stream."""
    out: list[Any] = []
    with stream:
        try:
            out.extend(stream)
        except ValueError as exc:
            out.append((type(exc), str(exc)))
    return out


def chat_attributes(s: Any) -> tuple[Any, ...]:
    return (s.stop_sequences, s.stop_indices, s.finish_reasons, s.complete, s.pending, s.stopped)


def messages_attributes(s: Any) -> tuple[Any, ...]:
    return (s.stop_sequence, s.stop_index, s.stop_reason, s.complete, s.pending, s.stopped)


FAST = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@FAST
@given(data=st.data(), n=st.integers(1, 2), stops=STOPS, include=st.booleans(), on_stop=ON_STOP)
def test_sse_openai_native_matches_python(
    data: st.DataObject, n: int, stops: list[str], include: bool, on_stop: str
) -> None:
    pieces = data.draw(bodies(chat_events(n)))
    give_n = data.draw(st.sampled_from([None, n]))
    native = wrap_openai(pieces, stops, include_stop=include, on_stop=on_stop, n=give_n)  # type: ignore[arg-type]
    machine = ChatMachine(stops, include, on_stop, give_n)  # type: ignore[arg-type]
    python = SyncAdapterStream[bytes](pieces, SSEDriver(machine))
    assert run(native) == run(python)
    assert chat_attributes(native) == (
        machine.stop_sequences,
        machine.stop_indices,
        machine.finish_reasons,
        machine.complete,
        machine.pending,
        machine.stopped,
    )


@FAST
@given(data=st.data(), stops=STOPS, include=st.booleans(), on_stop=ON_STOP)
def test_sse_anthropic_native_matches_python(
    data: st.DataObject, stops: list[str], include: bool, on_stop: str
) -> None:
    pieces = data.draw(bodies(messages_events()))
    native = wrap_anthropic(pieces, stops, include_stop=include, on_stop=on_stop)  # type: ignore[arg-type]
    machine = MessagesMachine(stops, include, on_stop)  # type: ignore[arg-type]
    python = SyncAdapterStream[bytes](pieces, SSEDriver(machine))
    assert run(native) == run(python)
    assert messages_attributes(native) == (
        machine.stop_sequence,
        machine.stop_index,
        machine.stop_reason,
        machine.complete,
        machine.pending,
        machine.stopped,
    )


def responses_attributes(s: Any) -> tuple[Any, ...]:
    return (
        s.stop_sequence,
        s.stop_index,
        s.stop_sequences,
        s.complete,
        s.status,
        s.pending,
        s.stopped,
    )


@FAST
@given(data=st.data(), stops=STOPS, include=st.booleans(), on_stop=ON_STOP)
def test_sse_responses_native_matches_python(
    data: st.DataObject, stops: list[str], include: bool, on_stop: OnStop
) -> None:
    pieces = data.draw(bodies(responses_events()))
    native = wrap_responses(pieces, stops, include_stop=include, on_stop=on_stop)
    machine = ResponsesMachine(stops, include, on_stop)
    python = SyncAdapterStream[bytes](pieces, SSEDriver(machine))
    assert run(native) == run(python)
    assert responses_attributes(native) == (
        machine.stop_sequence,
        machine.stop_index,
        machine.stop_sequences,
        machine.complete,
        machine.status,
        machine.pending,
        machine.stopped,
    )


@pytest.mark.slow
@FAST
@given(data=st.data(), n=st.integers(1, 3), stops=STOPS, include=st.booleans(), on_stop=ON_STOP)
def test_sse_gemini_native_matches_python(
    data: st.DataObject, n: int, stops: list[str], include: bool, on_stop: OnStop
) -> None:
    pieces = data.draw(bodies(gemini_events(n)))
    count = data.draw(st.sampled_from([None, n]))
    native = wrap_gemini(
        pieces, stops, include_stop=include, on_stop=on_stop, candidate_count=count
    )
    machine = GeminiMachine(stops, include, on_stop, count)
    python = SyncAdapterStream[bytes](pieces, SSEDriver(machine))
    assert run(native) == run(python)
    assert chat_attributes(native) == (
        machine.stop_sequences,
        machine.stop_indices,
        machine.finish_reasons,
        machine.complete,
        machine.pending,
        machine.stopped,
    )


# --- SDK objects ------------------------------------------------------------------------------

CHUNK = TypeAdapter(ChatCompletionChunk)
EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def objects(events: list[list[str]], build: Callable[[Any], Any]) -> list[Any]:
    out = []
    for lines in events:
        values = [line[6:] for line in lines if line.startswith("data: ")]
        if len(values) != 1:
            continue
        try:
            value = json.loads(values[0])
        except ValueError:
            continue
        try:
            out.append(build(value))
        except Exception:
            continue
    return out


def same_objects(a: list[Any], b: list[Any], given_objects: list[Any]) -> None:
    assert [type(x) for x in a] == [type(x) for x in b]
    assert [x.model_dump() for x in a] == [x.model_dump() for x in b]
    ids = {id(x) for x in given_objects}
    assert [id(x) in ids and x for x in a] == [id(x) in ids and x for x in b]


@FAST
@given(data=st.data(), n=st.integers(1, 2), stops=STOPS, include=st.booleans(), on_stop=ON_STOP)
def test_sdk_chat_fast_path_matches_the_machine(
    data: st.DataObject, n: int, stops: list[str], include: bool, on_stop: str
) -> None:
    chunks = objects(data.draw(chat_events(n)), CHUNK.validate_python)
    native = wrap_chat(chunks, stops, include_stop=include, on_stop=on_stop)  # type: ignore[call-overload]
    machine = ChatMachine(stops, include, on_stop)  # type: ignore[arg-type]
    python = SyncAdapterStream[Any](chunks, ModelDriver(machine))
    same_objects(run(native), run(python), chunks)
    assert chat_attributes(native) == (
        machine.stop_sequences,
        machine.stop_indices,
        machine.finish_reasons,
        machine.complete,
        machine.pending,
        machine.stopped,
    )


@FAST
@given(data=st.data(), stops=STOPS, include=st.booleans(), on_stop=ON_STOP)
def test_sdk_messages_fast_path_matches_the_machine(
    data: st.DataObject, stops: list[str], include: bool, on_stop: str
) -> None:
    events = objects(data.draw(messages_events()), EVENT.validate_python)
    native = wrap_messages(events, stops, include_stop=include, on_stop=on_stop)  # type: ignore[call-overload]
    machine = MessagesMachine(stops, include, on_stop)  # type: ignore[arg-type]
    python = SyncAdapterStream[Any](events, ModelDriver(machine, _rebuild))
    same_objects(run(native), run(python), events)
    assert messages_attributes(native) == (
        machine.stop_sequence,
        machine.stop_index,
        machine.stop_reason,
        machine.complete,
        machine.pending,
        machine.stopped,
    )


# --- hand-picked cases ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    ['say "hi"\\', "tab\there\nnew", "\x00\x07\x1f\x7f", "é日😀\u2028", ""],
)
def test_splice_escapes_like_json_dumps(content: str) -> None:
    head = {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": content + "ST"}}]}
    data = ("data: " + dumps(head) + "\n\n" + "data: " + dumps(chunk) + "\n\n").encode()
    native = b"".join(wrap_openai([data], ["STOP"]))
    machine = ChatMachine(["STOP"])
    python = b"".join(SyncAdapterStream[bytes]([data], SSEDriver(machine)))
    assert native == python
    assert ('"content":' + json.dumps(content, ensure_ascii=False) + "}").encode() in native


def test_a_spliced_event_keeps_every_other_byte() -> None:
    role = 'data:{"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
    chunk = 'id: 3\ndata:  { "x" : 1 , "choices":[ {"delta":{"content" : %s},"index":0} ]}\n\n'
    out = b"".join(wrap_openai([(role + chunk % '"a\\u0041 ST"').encode()], ["STOP"]))
    assert out == (role + chunk % '"aA "').encode()


def test_responses_part_keys_are_read_by_name_not_by_place() -> None:
    # Parts (0, 1) and (1, 0) both open, their deltas naming content_index first.
    head = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0},
        {"type": "response.output_item.added", "sequence_number": 2, "output_index": 1},
    ]
    deltas = []
    for n, (o, c, text) in enumerate(
        [(0, 1, "x"), (1, 0, "y"), (0, 1, "a"), (1, 0, "z"), (0, 1, "b"), (1, 0, "STOP")]
    ):
        delta = {"content_index": c, "output_index": o, "delta": text, "logprobs": []}
        kind = {"type": "response.output_text.delta", "sequence_number": 3 + n}
        deltas.append({**kind, **delta})
    events = [*head, *deltas]
    data = "".join(f"event: {e['type']}\ndata: {dumps(e)}\n\n" for e in events).encode()
    stops = ["STOP", "ab"]
    native = wrap_responses([data], stops)
    machine = ResponsesMachine(stops)
    assert run(native) == run(SyncAdapterStream[bytes]([data], SSEDriver(machine)))
    assert native.stop_sequences == machine.stop_sequences == {(0, 1): "ab", (1, 0): None}


def test_gemini_candidates_without_index_are_named_by_position() -> None:
    # Three candidates, then a chunk whose second candidate has no index: it is candidate 1,
    # whose held "a" meets the "b".
    def chunk(*candidates: dict[str, Any]) -> str:
        return "data: " + dumps({"candidates": list(candidates)}) + "\r\n\r\n"

    def cand(text: str, **index: int) -> dict[str, Any]:
        return {"content": {"parts": [{"text": text}], "role": "model"}, **index}

    first = chunk(cand("x", index=0), cand("y a", index=1), cand("z", index=2))
    data = (first + chunk(cand("q", index=2), cand("b c")) + chunk(cand("w", index=0))).encode()
    stops = ["STOP", "ab"]
    native = wrap_gemini([data], stops)
    machine = GeminiMachine(stops)
    assert run(native) == run(SyncAdapterStream[bytes]([data], SSEDriver(machine)))
    assert native.stop_sequences == machine.stop_sequences == {0: None, 1: "ab", 2: None}
    assert native.pending == machine.pending == {0: "", 2: ""}


def test_lone_surrogates_go_to_the_python_path() -> None:
    role = 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
    chunk = 'data: {"choices":[{"index":0,"delta":{"content":"\\ud800 ST"}}]}\n\n'
    out = b"".join(wrap_openai([(role + chunk).encode()], ["STOP"]))
    assert b'"\\ud800 "' in out


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_composed_stop_lists_take_the_full_rules(eol: str) -> None:
    # A regex stop: the native stage hands every text delta to the machine, with the same
    # outcome as the Python path.
    stops: list[str | Regex] = [Regex(r"ST\w+"), "</a>"]
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    chunks = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in ("ab <", "/a", "x")]
    texts = ["one S", "TOP two", "x"]
    chunks += [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    events = [role, *chunks]
    data = "".join("data: " + dumps(e) + eol + eol for e in events).encode()
    for size in (1, 7, len(data)):
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        native = run(wrap_openai(parts, stops))
        python = run(SyncAdapterStream[bytes](parts, SSEDriver(ChatMachine(stops))))
        assert native == python
        sdk = [
            CHUNK.validate_python(
                {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", **e}
            )
            for e in events
        ]
        fast = run(wrap_chat(sdk, stops))
        slow = run(SyncAdapterStream[Any](sdk, ModelDriver(ChatMachine(stops))))
        same_objects(fast, slow, sdk)


def test_sdk_messages_after_a_drained_stop_no_block_is_fed() -> None:
    # Block 0 is left open; block 1 fires the stop; with on_stop="drain" a later delta of
    # block 0 is dropped, as the machine drops it, not fed where its filter still is.
    def delta(index: int, text: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        }

    def start(index: int) -> dict[str, Any]:
        return {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        }

    values = [
        MESSAGE_START,
        start(0),
        delta(0, "a"),
        start(1),
        delta(1, "b STOP"),
        delta(0, "late"),
        {"type": "message_stop"},
    ]
    events = [EVENT.validate_python(v) for v in values]
    native = run(wrap_messages(events, ["STOP"], on_stop="drain"))
    machine = MessagesMachine(["STOP"], None, "drain")
    python = run(SyncAdapterStream[Any](events, ModelDriver(machine, _rebuild)))
    same_objects(native, python, events)
    assert "late" not in repr([e.model_dump() for e in native])


class _AttrDict(dict[str, Any]):
    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _AttrMapping(Mapping[str, Any]):
    """A mapping that also answers attribute reads, as an SDK object does."""

    def __init__(self, value: dict[str, Any]) -> None:
        self._value = {k: _AttrDict(v) if isinstance(v, dict) else v for k, v in value.items()}

    def __getitem__(self, key: str) -> Any:
        return self._value[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_value"][name]
        except KeyError:
            raise AttributeError(name) from None


def test_sdk_stage_leaves_mappings_to_the_machine() -> None:
    # Events that are mappings become dicts, whatever attributes they also answer: a released
    # text is not rebuilt with the SDK's model_copy.
    def delta(text: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text},
        }

    values = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        delta("hello ST"),
        delta("x world"),
        {"type": "content_block_stop", "index": 0},
    ]
    out: list[Any] = list(wrap_messages([_AttrMapping(v) for v in values], ["STOP"]))
    texts = [dict(e["delta"])["text"] for e in out if e["type"] == "content_block_delta"]
    assert texts == ["hello ", "STx world"]
    assert all(type(e) is dict for e in out[1:3])
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        _AttrMapping(
            {
                **chunk,
                "usage": None,
                "choices": [_AttrDict(index=0, finish_reason=None, delta=_AttrDict(content=t))],
            }
        )
        for t in ["hello ST", "x world"]
    ]
    emitted: list[Any] = list(wrap_chat(chunks, ["STOP"]))
    assert [type(c) for c in emitted] == [dict, dict]


def test_sse_stage_keeps_its_table_when_the_state_cannot_be_read() -> None:
    # A state that fails to read is an error, and the stage's tables stay as they were: both
    # choices' filters, not the core's table of two streams beside one filter.
    from stopstream._core import StopFilter, _SSEStage

    class Driver:
        def __init__(self) -> None:
            self.calls = 0
            self.filters = [StopFilter(["STOP"]), StopFilter(["STOP"])]

        def _state(self) -> tuple[bool, bool, list[tuple[Any, ...]], None]:
            self.calls += 1
            second: Any = self.filters[1] if self.calls == 1 else "no filter"
            return True, False, [(0, self.filters[0]), (1, second)], None

        def _slow(self, event: Any, eol: bytes, seen: Any) -> bytes:
            return b""

    class Event:
        def __init__(self, *_: Any) -> None:
            pass

    driver = Driver()
    stage = _SSEStage(driver._slow, driver._state, lambda *_: b"", "chat", Event)
    with pytest.raises(TypeError):
        stage.push(b"data: [DONE]\n\n")
    for index in (0, 1):
        event = b'data: {"choices":[{"index":%d,"delta":{"content":"x"}}]}\n\n' % index
        assert stage.push(event) == event


def test_sse_stage_in_a_reference_cycle_is_collected() -> None:
    import gc
    import weakref

    from stopstream._core import StopFilter, _SSEStage

    class Driver:
        stage: Any = None

        def __init__(self) -> None:
            self.filter = StopFilter(["STOP"])

        def _state(self) -> tuple[bool, bool, list[tuple[Any, ...]], None]:
            return True, False, [(0, self.filter)], None

        def _slow(self, event: Any, eol: bytes, seen: Any) -> bytes:
            return b""

        def _end(self, eol: bytes, seen: Any) -> bytes:
            return b""

    class Event:
        def __init__(self, *_: Any) -> None:
            pass

    driver = Driver()
    driver.stage = _SSEStage(driver._slow, driver._state, driver._end, "chat", Event)
    gone = weakref.ref(driver)
    del driver
    gc.collect()
    assert gone() is None


def test_an_api_without_native_rules_runs_its_sse_bodies_in_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A row with ``native=False`` (a new API the core has no shape for yet) gets the
    # pure-Python stage, with the same output as the native one.
    body = [
        b'data: {"choices":[{"index":0,"delta":{"content":"Hello, wor"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"ld! END more"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    native = b"".join(wrap_openai(body, ["END"]))
    monkeypatch.setitem(apis.BY_SHAPE, "chat", dataclasses.replace(apis.CHAT, native=False))
    assert isinstance(sse.native_stage(ChatMachine(["END"])), SSEDriver)
    stream = wrap_openai(body, ["END"])
    assert b"".join(stream) == native
    assert stream.stop_sequences == {0: "END"}
