"""``stopstream.anthropic``: stop sequences on Messages stream events (dicts and SDK objects).

No network here: events are built in memory. The end-to-end tests run the real SDK over HTTP.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic.types as anthropic_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from stopstream.anthropic import awrap_messages, wrap_messages
from stopstream.reference import reference_truncate

Event = dict[str, Any]

PING: Event = {"type": "ping"}
STOP: Event = {"type": "message_stop"}


def start(input_tokens: int = 10, output_tokens: int = 1) -> Event:
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return {"type": "message_start", "message": message}


def block_start(index: int, kind: str = "text", **fields: Any) -> Event:
    block: dict[str, Any] = {"type": kind, **fields}
    if kind == "text":
        block.setdefault("text", "")
    return {"type": "content_block_start", "index": index, "content_block": block}


def text(index: int, value: str) -> Event:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": value},
    }


def delta(index: int, kind: str, **fields: Any) -> Event:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def block_stop(index: int) -> Event:
    return {"type": "content_block_stop", "index": index}


def message_delta(reason: str = "end_turn", output_tokens: int = 50, **extra: Any) -> Event:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": None, **extra},
        "usage": {"output_tokens": output_tokens},
    }


def message(*middle: Event, reason: str = "end_turn") -> list[Event]:
    return [start(), *middle, message_delta(reason), STOP]


class Upstream:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.pulled = 0
        self.closed = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.pulled >= len(self.events):
            raise StopIteration
        self.pulled += 1
        return self.events[self.pulled - 1]

    def close(self) -> None:
        self.closed += 1


def texts(events: list[Event]) -> dict[int, str]:
    out: dict[int, str] = {}
    for e in events:
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta":
            out[e["index"]] = out.get(e["index"], "") + e["delta"]["text"]
    return out


def test_stop_ends_the_message() -> None:
    events = message(block_start(0), text(0, "Hi </ans"), text(0, "wer> tail"), block_stop(0))
    upstream = Upstream(events)
    stream = wrap_messages(upstream, ["</answer>"])
    out = list(stream)
    assert [e["type"] for e in out] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out[0] is events[0] and out[1] is events[1]
    assert out[2]["delta"] == {"type": "text_delta", "text": "Hi "}
    assert out[3] == {"type": "content_block_stop", "index": 0}
    assert out[4]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "</answer>"}
    # Closed at once: the message_delta carries the usage known from message_start.
    assert out[4]["usage"] == {"input_tokens": 10, "output_tokens": 1}
    assert upstream.pulled == 4 and upstream.closed == 1
    assert stream.stopped
    assert (stream.stop_reason, stream.stop_sequence, stream.stop_index) == (
        "stop_sequence",
        "</answer>",
        0,
    )


def test_stop_in_the_first_delta_emits_no_empty_delta() -> None:
    out = list(wrap_messages(message(block_start(0), text(0, "STOP now")), ["STOP"]))
    assert [e["type"] for e in out][2:] == ["content_block_stop", "message_delta", "message_stop"]


def test_input_events_are_not_modified() -> None:
    events = message(block_start(0), text(0, "a </a"), text(0, "nswer>"), block_stop(0))
    before = copy.deepcopy(events)
    list(wrap_messages(events, "</answer>"))
    assert events == before


def test_held_text_is_released_before_the_block_ends() -> None:
    events = message(
        block_start(0), text(0, "a </an"), block_stop(0), block_start(1), text(1, "swer>")
    )
    events.insert(-2, block_stop(1))
    stream = wrap_messages(events, ["</answer>"])
    out = list(stream)
    kinds = [(e["type"], e.get("index")) for e in out]
    assert kinds[2:5] == [
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
    ]
    # The held-back "</an" went out as its own delta of block 0; blocks are filtered separately.
    assert texts(out) == {0: "a </an", 1: "swer>"}
    assert out[-2] is events[-2] and out[-1] is events[-1]
    assert not stream.stopped and stream.stop_reason == "end_turn"


def test_fully_held_deltas_are_not_emitted() -> None:
    events = message(block_start(0), text(0, "x"), text(0, "<"), text(0, "/"), block_stop(0))
    out = list(wrap_messages(events, ["</answer>"]))
    assert [e["type"] for e in out].count("content_block_delta") == 2
    assert texts(out) == {0: "x</"}


def test_thinking_tool_input_and_citations_pass_untouched() -> None:
    events = message(
        block_start(0, "thinking", thinking="", signature=""),
        delta(0, "thinking_delta", thinking="I must not say STOP"),
        delta(0, "signature_delta", signature="c2ln"),
        block_stop(0),
        block_start(1, "tool_use", id="toolu_1", name="f", input={}),
        delta(1, "input_json_delta", partial_json='{"q": "STOP"}'),
        block_stop(1),
        block_start(2),
        delta(2, "citations_delta", citation={"type": "char_location", "cited_text": "STOP"}),
        text(2, "fine"),
        block_stop(2),
        PING,
        {"type": "error", "error": {"type": "overloaded_error", "message": "STOP"}},
        reason="tool_use",
    )
    stream = wrap_messages(events, ["STOP"])
    out = list(stream)
    assert all(a is b for a, b in zip(out, events, strict=True))
    assert stream.stop_reason == "tool_use" and not stream.stopped


def test_text_in_content_block_start_is_scanned() -> None:
    events = message(block_start(0, text="pre STOP post"), text(0, "x"))
    out = list(wrap_messages(events, ["STOP"]))
    assert out[1]["content_block"] == {"type": "text", "text": "pre "}
    assert [e["type"] for e in out[2:]] == ["content_block_stop", "message_delta", "message_stop"]


def test_drain_keeps_pings_and_reports_the_final_usage() -> None:
    events = message(block_start(0), text(0, "a STOP b"), PING, text(0, "c"), block_stop(0), PING)
    upstream = Upstream(events)
    stream = wrap_messages(upstream, ["STOP"], on_stop="drain")
    out = list(stream)
    assert [e["type"] for e in out] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "ping",
        "message_delta",
        "message_stop",
    ]
    final = out[-2]
    assert final["delta"]["stop_reason"] == "stop_sequence"
    assert final["delta"]["stop_sequence"] == "STOP"
    assert final["usage"] == {"output_tokens": 50}  # the upstream's own
    assert upstream.pulled == len(events) and upstream.closed == 0


def test_drain_without_a_final_message_delta() -> None:
    events = [start(), block_start(0), text(0, "a STOP"), text(0, "b")]
    out = list(wrap_messages(events, ["STOP"], on_stop="drain"))
    assert [e["type"] for e in out][-2:] == ["message_delta", "message_stop"]
    assert out[-2]["usage"] == {"input_tokens": 10, "output_tokens": 1}


def test_upstream_stop_sequence_is_reported() -> None:
    final = message_delta("stop_sequence")
    final["delta"]["stop_sequence"] = "###"
    stream = wrap_messages([start(), block_start(0), text(0, "x"), final, STOP], ["STOP", "###"])
    list(stream)
    assert (stream.stop_reason, stream.stop_sequence, stream.stop_index) == (
        "stop_sequence",
        "###",
        1,
    )
    assert not stream.stopped


def test_a_dropped_stream_invents_no_ending_and_keeps_the_held_text() -> None:
    stream = wrap_messages([start(), block_start(0), text(0, "a </ans")], ["</answer>"])
    out = list(stream)
    assert texts(out) == {0: "a "}
    assert [e["type"] for e in out][-1] == "content_block_delta"
    assert not stream.complete
    assert stream.pending == "</ans"


def test_upstream_exception_propagates() -> None:
    def failing() -> Iterator[Event]:
        yield start()
        raise ConnectionError("reset")

    stream = wrap_messages(failing(), ["x"])
    next(stream)
    with pytest.raises(ConnectionError):
        next(stream)


@settings(max_examples=examples(200), deadline=None)
@given(
    value=st.text(alphabet="ab</>", max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=8),
    stops=st.lists(st.text(alphabet="ab</>", min_size=1, max_size=4), max_size=4),
    include_stop=st.booleans(),
)
def test_output_matches_truncate_however_split(
    value: str, cuts: list[int], stops: list[str], include_stop: bool
) -> None:
    bounds = sorted({0, len(value), *(c for c in cuts if c <= len(value))})
    deltas = [text(0, value[a:b]) for a, b in itertools.pairwise(bounds)]
    stream = wrap_messages(
        message(block_start(0), *deltas, block_stop(0)), stops, include_stop=include_stop
    )
    out = list(stream)
    expected, stop = reference_truncate(value, stops, include_stop)
    assert texts(out).get(0, "") == expected
    assert stream.stop_sequence == stop
    assert all(e["delta"]["text"] for e in out if e["type"] == "content_block_delta")
    assert [e["type"] for e in out][-2:] == ["message_delta", "message_stop"]


# --- SDK objects ---------------------------------------------------------------------------------


def sdk(events: list[Event]) -> list[Any]:
    from anthropic._models import construct_type

    union = anthropic_types.RawMessageStreamEvent
    return [construct_type(value=e, type_=union) for e in events]


def test_sdk_events_in_sdk_events_out() -> None:
    events = sdk(message(block_start(0), text(0, "Hi </an"), text(0, "swer> x"), block_stop(0)))
    stream = wrap_messages(events, ["</answer>"])
    out = list(stream)
    assert [type(e).__name__ for e in out] == [
        "RawMessageStartEvent",
        "RawContentBlockStartEvent",
        "RawContentBlockDeltaEvent",
        "RawContentBlockStopEvent",
        "RawMessageDeltaEvent",
        "RawMessageStopEvent",
    ]
    assert out[0] is events[0]
    assert out[2].delta.text == "Hi "
    assert out[4].delta.stop_reason == "stop_sequence"
    assert out[4].delta.stop_sequence == "</answer>"
    assert out[4].usage.output_tokens == 1


# --- async ---------------------------------------------------------------------------------------


class AsyncUpstream:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.pulled = 0
        self.closed = 0

    async def gen(self) -> AsyncIterator[Any]:
        for e in self.events:
            self.pulled += 1
            yield e

    def __aiter__(self) -> AsyncIterator[Any]:
        return self.gen()

    async def close(self) -> None:
        self.closed += 1


def test_async_stop_closes_the_upstream() -> None:
    async def main() -> None:
        upstream = AsyncUpstream(message(block_start(0), text(0, "a STOP"), text(0, "b")))
        async with awrap_messages(upstream, ["STOP"]) as stream:
            out = [e async for e in stream]
        assert texts(out) == {0: "a "}
        assert out[-2]["delta"]["stop_sequence"] == "STOP"
        assert upstream.pulled == 3 and upstream.closed == 1

    asyncio.run(main())


def test_stop_sequences_per_text_block() -> None:
    from stopstream.anthropic import wrap_messages

    events = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "b<"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "/x>"}},
    ]
    with wrap_messages(iter(events), ["</x>"]) as stream:
        list(stream)
    assert stream.stop_sequences == {0: None, 1: "</x>"}
    assert stream.stop_sequence == "</x>"
