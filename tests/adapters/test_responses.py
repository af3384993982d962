"""``stopstream.openai.wrap_responses``: stop sequences on OpenAI Responses API event streams.

Events are built in memory in the API's exact shapes (``provider_scripts``), as dicts and as the
SDK's own event objects; the end-to-end tests run the real client over HTTP.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter

from hypothesis_profiles import examples
from provider_scripts import Event, Item, ResponseScript, response_events, responses_sse
from stopstream.openai import awrap_responses, wrap_responses
from stopstream.reference import reference_truncate
from stopstream.sse import SSEParser
from stopstream.sse import wrap_responses as sse_wrap_responses
from stream_support import AsyncCountingIterator, CountingIterator

STOPS = ["</answer>", "\n\nUser:"]
EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def message(*deltas: str) -> Item:
    return Item("message", [list(deltas)])


def text_of(events: list[Any]) -> str:
    return "".join(
        _get(e, "delta") for e in events if _get(e, "type") == "response.output_text.delta"
    )


def _get(event: Any, name: str) -> Any:
    return event[name] if isinstance(event, dict) else getattr(event, name)


def types_of(events: list[Any]) -> list[str]:
    return [_get(e, "type") for e in events]


def assert_numbered(events: list[Any]) -> None:
    numbers = [_get(e, "sequence_number") for e in events]
    assert all(b > a for a, b in itertools.pairwise(numbers)), numbers


def test_stop_cuts_the_text_and_closes_the_response() -> None:
    events = response_events(ResponseScript([message("The answer", " is 4.</ans", "wer> tail")]))
    upstream = CountingIterator(events)
    stream = wrap_responses(upstream, STOPS)
    out = list(stream)
    assert text_of(out) == "The answer is 4."
    assert types_of(out)[-5:] == [
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    done, part_done, item_done, completed = out[-4:]
    assert done["text"] == "The answer is 4."
    assert part_done["part"]["text"] == "The answer is 4."
    assert part_done["part"]["type"] == "output_text"
    assert item_done["item"]["status"] == "completed"
    assert item_done["item"]["content"][0]["text"] == "The answer is 4."
    response = completed["response"]
    assert response["status"] == "completed"
    assert response["stop_sequence"] == "</answer>"
    assert response["id"] == "resp_fake" and response["model"] == "gpt-test"
    assert response["output"] == [item_done["item"]]
    assert_numbered(out)
    assert upstream.closed == 1 and upstream.pulled < len(events)
    assert stream.stop_sequence == "</answer>" and stream.stop_index == 0
    assert stream.stop_sequences == {(0, 0): "</answer>"}
    assert stream.stopped and stream.complete and stream.status == "completed"
    # Everything before the stop's delta is passed on as the very same objects.
    first_delta = types_of(out).index("response.output_text.delta")
    assert all(a is b for a, b in zip(out[:first_delta], events, strict=False))


def test_no_stop_releases_held_text_before_the_part_is_done() -> None:
    events = response_events(ResponseScript([message("Plain", " text </an")]))
    stream = wrap_responses(events, STOPS)
    out = list(stream)
    kinds = types_of(out)
    assert text_of(out) == "Plain text </an"
    done_at = kinds.index("response.output_text.done")
    assert kinds[done_at - 1] == "response.output_text.delta"
    assert out[done_at - 1]["delta"] == "</an"  # the held text, just before the done event
    assert out[done_at]["text"] == "Plain text </an"
    # The upstream's own response.completed: a copy renumbered after the inserted delta.
    assert out[-1] == {**events[-1], "sequence_number": events[-1]["sequence_number"] + 1}
    assert_numbered(out)
    assert stream.complete and not stream.stopped and stream.stop_sequence is None
    assert stream.status == "completed"


def test_reasoning_tool_arguments_and_refusals_pass_untouched() -> None:
    script = ResponseScript(
        [
            Item("reasoning", [["Think: </ans", "wer> and \n\nUser: too"]]),
            Item("function_call", [['{"q": "</ans', 'wer>"}']]),
            message("Done."),
        ]
    )
    events = response_events(script)
    # A refusal delta in the message part, also never scanned.
    refusal = {
        "type": "response.refusal.delta",
        "item_id": "msg_2",
        "output_index": 2,
        "content_index": 1,
        "delta": "no </answer>",
        "sequence_number": 999,
    }
    events.insert(-2, refusal)
    for i, e in enumerate(events):
        e["sequence_number"] = i
    stream = wrap_responses(events, STOPS)
    out = list(stream)
    assert all(a is b for a, b in zip(out, events, strict=True))
    assert not stream.stopped and stream.complete


def test_stop_in_a_later_item_keeps_the_earlier_items_in_the_output() -> None:
    script = ResponseScript(
        [Item("reasoning", [["Plan"]]), message("first part"), message("second </answer> x")]
    )
    out = list(wrap_responses(response_events(script), STOPS))
    response = out[-1]["response"]
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "message"]
    assert response["output"][1]["content"][0]["text"] == "first part"
    assert response["output"][2]["content"][0]["text"] == "second "
    assert out[-2]["output_index"] == 2


def test_stop_in_a_second_content_part_keeps_the_first() -> None:
    script = ResponseScript([Item("message", [["part one"], ["part two </answer> x"]])])
    out = list(wrap_responses(response_events(script), STOPS))
    item = out[-1]["response"]["output"][0]
    assert [p["text"] for p in item["content"]] == ["part one", "part two "]
    assert out[-4]["content_index"] == 1


def test_a_delta_held_back_entirely_is_not_sent_and_its_logprobs_travel_on() -> None:
    script = ResponseScript([message("a", "</", "b")], logprobs=True)
    out = list(wrap_responses(response_events(script), STOPS))
    deltas = [e for e in out if e["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["a", "</b"]
    assert [lp["token"] for lp in deltas[1]["logprobs"]] == ["</", "b"]
    assert_numbered(out)


def test_held_text_released_at_the_done_event_takes_a_fresh_number() -> None:
    script = ResponseScript([message("x </an")])
    events = response_events(script)
    out = list(wrap_responses(events, STOPS))
    # The held " </an" delta is inserted before output_text.done: the events after it that
    # would collide are renumbered copies, the rest are untouched.
    assert_numbered(out)
    assert text_of(out) == "x </an"


def test_logprobs_of_the_cut_text() -> None:
    script = ResponseScript([message("a", "b </answer>", " c")], logprobs=True)
    out = list(wrap_responses(response_events(script), STOPS))
    assert [lp["token"] for lp in out[-4]["logprobs"]] == ["a", "b </answer>"]


def test_include_stop_keeps_the_stop_text() -> None:
    events = response_events(ResponseScript([message("x </ans", "wer> y")]))
    stream = wrap_responses(events, STOPS, include_stop=True)
    out = list(stream)
    assert text_of(out) == "x </answer>"
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == "x </answer>"


def test_upstream_ended_without_a_terminal_event_is_not_complete() -> None:
    events = response_events(ResponseScript([message("cut </an")], terminal=None))
    events = events[: [e["type"] for e in events].index("response.output_text.done")]
    stream = wrap_responses(events, STOPS)
    out = list(stream)
    assert text_of(out) == "cut "
    assert types_of(out)[-1] == "response.output_text.delta"  # no invented ending
    assert not stream.complete and not stream.stopped
    assert stream.pending == {(0, 0): "</an"}


def test_upstream_error_propagates_and_is_not_complete() -> None:
    events = response_events(ResponseScript([message("a </an", "more")]))

    def upstream() -> Iterator[Event]:
        yield from events[:5]
        raise ConnectionError("dropped")

    stream = wrap_responses(upstream(), STOPS)
    with pytest.raises(ConnectionError, match="dropped"):
        list(stream)
    assert not stream.complete and stream.stop_sequence is None


@pytest.mark.parametrize("terminal", ["response.incomplete", "response.failed"])
def test_other_terminal_events_are_complete(terminal: str) -> None:
    stream = wrap_responses(
        response_events(ResponseScript([message("a")], terminal=terminal)), STOPS
    )
    out = list(stream)
    assert out[-1]["type"] == terminal
    assert stream.complete and stream.status == terminal.rpartition(".")[2]


def test_drain_reads_to_the_end_and_reports_the_real_usage() -> None:
    events = response_events(ResponseScript([message("a </answer>", " tail", " more")]))
    upstream = CountingIterator(events)
    stream = wrap_responses(upstream, STOPS, on_stop="drain")
    out = list(stream)
    assert upstream.pulled == len(events) and upstream.closed == 0
    completed = out[-1]
    assert completed["type"] == "response.completed"
    assert completed["response"]["usage"] == events[-1]["response"]["usage"]
    assert completed["response"]["output"][0]["content"][0]["text"] == "a "
    assert completed["response"]["stop_sequence"] == "</answer>"
    assert_numbered(out)


def test_close_reports_the_latest_snapshot_without_usage() -> None:
    out = list(wrap_responses(response_events(ResponseScript([message("a </answer>")])), STOPS))
    assert out[-1]["response"]["usage"] is None


def test_input_events_are_not_modified() -> None:
    events = response_events(ResponseScript([message("a </an", "swer> b")]))
    before = copy.deepcopy(events)
    list(wrap_responses(events, STOPS))
    assert events == before


def test_bad_on_stop_is_rejected() -> None:
    with pytest.raises(ValueError, match="on_stop"):
        wrap_responses([], STOPS, on_stop="wait")  # type: ignore[call-overload]


@settings(max_examples=examples(150), deadline=None)
@given(
    st.text(alphabet="ab</answer>\nUsr: ", max_size=40),
    st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_text_matches_the_reference_however_it_is_split(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    deltas = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    stream = wrap_responses(response_events(ResponseScript([message(*deltas)])), STOPS)
    out = list(stream)
    expected, stop = reference_truncate(text, STOPS)
    assert text_of(out) == expected
    assert stream.stop_sequence == stop
    assert stream.complete
    assert_numbered(out)
    done = [e for e in out if e["type"] == "response.output_text.done"]
    assert [d["text"] for d in done] == [expected]


# --- SDK objects -----------------------------------------------------------------------------


def sdk_events(events: list[Event]) -> list[Any]:
    return [EVENT.validate_python(e) for e in events]


def test_sdk_objects_stay_sdk_objects() -> None:
    events = sdk_events(
        response_events(ResponseScript([message("The answer", " is 4.</ans", "wer> tail")]))
    )
    stream = wrap_responses(events, STOPS)
    out = list(stream)
    assert all(type(e).__module__.startswith("openai.types.responses") for e in out)
    assert all(a is b for a, b in zip(out[:4], events, strict=False))
    delta = out[-5]
    assert isinstance(delta, ResponseTextDeltaEvent) and delta.delta == " is 4."
    completed = out[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.response.output_text == "The answer is 4."  # the SDK's own helper works
    assert (completed.response.model_extra or {})["stop_sequence"] == "</answer>"
    assert completed.response.status == "completed"
    dumped = completed.model_dump(mode="json")
    assert dumped["response"]["stop_sequence"] == "</answer>"
    assert json.loads(completed.to_json())["sequence_number"] == completed.sequence_number


def test_async_wrap_responses() -> None:
    events = response_events(ResponseScript([message("a </ans", "wer> b", " c")]))

    async def main() -> tuple[list[Any], AsyncCountingIterator[Event]]:
        upstream = AsyncCountingIterator(events)
        async with awrap_responses(upstream, STOPS) as stream:
            out = [e async for e in stream]
            assert stream.complete and stream.stop_sequence == "</answer>"
        return out, upstream

    out, upstream = asyncio.run(main())
    assert text_of(out) == "a "
    assert upstream.closed == 1
    assert out[-1]["type"] == "response.completed"


# --- SSE -------------------------------------------------------------------------------------


def sse_body(events: list[Event], eol: str = "\n") -> bytes:
    return "".join(b.replace("\n", eol) + eol + eol for b in responses_sse(events)).encode()


def parse(data: bytes) -> list[tuple[str | None, Any]]:
    parser = SSEParser()
    out: list[tuple[str | None, Any]] = []
    for e in parser.feed(data) + parser.finish():
        if e.data is None:
            continue
        name = next(
            (line[6:].strip().decode() for line in e.lines if line.startswith(b"event:")), None
        )
        out.append((name, json.loads(e.data)))
    return out


@pytest.mark.parametrize("size", [1, 7, 10_000])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_sse_body_gives_what_the_dict_adapter_gives(size: int, eol: str) -> None:
    events = response_events(
        ResponseScript([Item("reasoning", [["plan </answer>"]]), message("x </an", "swer> y")])
    )
    expected = list(wrap_responses(events, STOPS))
    data = sse_body(events, eol)
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    stream = sse_wrap_responses(iter(chunks), STOPS)
    out = b"".join(stream)
    parsed = parse(out)
    assert [value for _, value in parsed] == expected
    assert all(name == value["type"] for name, value in parsed)  # every event is named
    assert stream.complete and stream.stop_sequence == "</answer>"
    # Unchanged events are forwarded byte for byte.
    first = responses_sse(events)[0].replace("\n", eol) + eol + eol
    assert out.startswith(first.encode())


def test_sse_drain_ends_with_the_real_usage() -> None:
    events = response_events(ResponseScript([message("a </answer>", " tail", " more")]))
    stream = sse_wrap_responses(iter([sse_body(events)]), STOPS, on_stop="drain")
    parsed = parse(b"".join(stream))
    name, completed = parsed[-1]
    assert name == "response.completed"
    assert completed["response"]["usage"] == events[-1]["response"]["usage"]
    assert completed["response"]["stop_sequence"] == "</answer>"
    assert [value["type"] for _, value in parsed].count("response.completed") == 1
