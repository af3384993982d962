"""``stopstream.gemini``: stop sequences on Gemini ``generateContent`` streams.

Chunks are built in memory in the API's wire shape (camelCase dicts), as the SDK's snake_case
dumps and as ``google-genai`` ``GenerateContentResponse`` objects; the end-to-end tests run the
real client over HTTP.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.genai import types
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from provider_scripts import (
    Event,
    function_call,
    gemini_chunk,
    gemini_sse,
    gemini_usage,
    text,
    thought,
)
from stopstream import Regex
from stopstream.gemini import awrap, truncate_response, wrap
from stopstream.reference import reference_truncate
from stopstream.sse import SSEParser, wrap_gemini
from stream_support import AsyncCountingIterator, CountingIterator

STOPS = ["</answer>", "\n\nUser:"]


def texts(chunks: list[Any], index: int = 0) -> str:
    """The answer text of candidate ``index`` (thought parts excluded)."""
    out = []
    for c in chunks:
        for cand in c.get("candidates") or []:
            if cand.get("index", 0) != index:
                continue
            for part in (cand.get("content") or {}).get("parts") or []:
                if isinstance(part.get("text"), str) and not part.get("thought"):
                    out.append(part["text"])
    return "".join(out)


def stream_of(*parts: str, finish: str | None = "STOP") -> list[Event]:
    chunks = [gemini_chunk([text(p)], tokens=i + 1) for i, p in enumerate(parts)]
    if finish is not None:
        chunks.append(gemini_chunk([text("")], finish=finish, tokens=len(parts) + 1))
    return chunks


def test_stop_cuts_the_text_and_names_the_stop() -> None:
    chunks = stream_of("The answer", " is 4.</ans", "wer> tail", " more")
    upstream = CountingIterator(chunks)
    stream = wrap(upstream, STOPS)
    out = list(stream)
    assert texts(out) == "The answer is 4."
    last = out[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    assert last["finishMessage"] == "</answer>"
    assert out[0] is chunks[0]
    assert upstream.pulled == 3 and upstream.closed == 1
    assert stream.stop_sequences == {0: "</answer>"} and stream.stop_indices == {0: 0}
    assert stream.stop_sequence == "</answer>"
    assert stream.stopped and stream.complete
    assert stream.finish_reasons == {0: "STOP"}


def test_no_stop_releases_held_text_with_the_finish_reason() -> None:
    chunks = stream_of("Plain", " text </an", finish="MAX_TOKENS")
    stream = wrap(chunks, STOPS)
    out = list(stream)
    assert texts(out) == "Plain text </an"
    assert out[1]["candidates"][0]["content"]["parts"] == [{"text": " text "}]
    assert out[-1]["candidates"][0]["content"]["parts"] == [{"text": "</an"}]
    assert out[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert stream.complete and not stream.stopped
    assert stream.finish_reasons == {0: "MAX_TOKENS"}


def test_finish_chunk_without_text_gets_the_held_text_first() -> None:
    call = function_call("lookup", {"q": "</answer>"})
    chunks = [gemini_chunk([text("a </an")]), gemini_chunk([call], finish="STOP")]
    out = list(wrap(chunks, STOPS))
    assert out[-1]["candidates"][0]["content"]["parts"] == [{"text": "</an"}, call]


def test_thoughts_and_function_calls_pass_untouched() -> None:
    chunks = [
        gemini_chunk([thought("Think: </answer> and \n\nUser: too")]),
        gemini_chunk([function_call("lookup", {"q": "</answer>"})]),
        gemini_chunk([thought("more </ans"), text("Done.")]),
        gemini_chunk([text("")], finish="STOP"),
    ]
    stream = wrap(chunks, STOPS)
    out = list(stream)
    assert all(a is b for a, b in zip(out, chunks, strict=True))
    assert not stream.stopped and stream.complete


def test_parts_after_the_stop_are_dropped_and_signatures_kept() -> None:
    chunk = gemini_chunk(
        [text("x </ans", thoughtSignature="c2ln"), text("wer> y"), function_call("f", {})]
    )
    out = list(wrap([gemini_chunk([text("a")]), chunk], STOPS))
    parts = out[-1]["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "x ", "thoughtSignature": "c2ln"}, {"text": ""}]
    assert out[-1]["usageMetadata"] == chunk["usageMetadata"]


def test_text_held_back_entirely_stays_as_an_empty_part() -> None:
    out = list(wrap(stream_of("a", "</an", "swer>"), STOPS))
    assert out[1]["candidates"][0]["content"]["parts"] == [{"text": ""}]


def test_candidates_are_filtered_separately() -> None:
    chunks = [
        {**gemini_chunk([text("one </answer> x")], index=0)},
        gemini_chunk([text("two")], index=1),
        gemini_chunk([text("after")], index=0),  # dropped: candidate 0 stopped
        gemini_chunk([text(" \n\nUser: y")], index=1),
        gemini_chunk([text("never")], index=1),
    ]
    upstream = CountingIterator(chunks)
    stream = wrap(upstream, STOPS, candidate_count=2)
    out = list(stream)
    assert texts(out, 0) == "one " and texts(out, 1) == "two "
    assert len(out) == 3
    assert upstream.pulled == 4 and upstream.closed == 1
    assert stream.stop_sequences == {0: "</answer>", 1: "\n\nUser:"}


def test_candidate_count_waits_for_every_candidate() -> None:
    chunks = [
        gemini_chunk([text("a </answer>")], index=0),
        gemini_chunk([text("b")], index=1),
        gemini_chunk([text("c")], index=1, finish="STOP"),
    ]
    upstream = CountingIterator(chunks)
    stream = wrap(upstream, STOPS, candidate_count=2)
    list(stream)
    assert upstream.pulled == 3 and upstream.closed == 1  # closed once all are done
    assert stream.complete and stream.stopped
    # Without candidate_count, the stream ends once every candidate seen so far is done.
    upstream = CountingIterator(chunks)
    list(wrap(upstream, STOPS))
    assert upstream.pulled == 1
    with pytest.raises(ValueError, match="candidate_count"):
        wrap([], STOPS, candidate_count=0)


def test_upstream_ended_without_a_finish_reason_is_not_complete() -> None:
    stream = wrap(stream_of("cut </an", finish=None), STOPS)
    out = list(stream)
    assert texts(out) == "cut "
    assert "finishReason" not in out[-1]["candidates"][0]
    assert not stream.complete and stream.pending == {0: "</an"}


def test_upstream_error_propagates_and_is_not_complete() -> None:
    def upstream() -> Iterator[Event]:
        yield gemini_chunk([text("a </an")])
        raise ConnectionError("dropped")

    stream = wrap(upstream(), STOPS)
    with pytest.raises(ConnectionError, match="dropped"):
        list(stream)
    assert not stream.complete and stream.pending == {0: "</an"}


def test_drain_delivers_the_final_usage() -> None:
    chunks = stream_of("a </answer>", " tail", " more")
    upstream = CountingIterator(chunks)
    stream = wrap(upstream, STOPS, on_stop="drain")
    out = list(stream)
    assert upstream.pulled == len(chunks) and upstream.closed == 0
    assert out[-1] == {
        "usageMetadata": gemini_usage(4),
        "modelVersion": "gemini-test",
        "responseId": "resp-gemini",
    }
    assert texts(out) == "a "


def test_snake_case_dicts() -> None:
    chunks = [
        types.GenerateContentResponse.model_validate(c).model_dump(exclude_none=True)
        for c in stream_of("x </ans", "wer> y")
    ]
    out = list(wrap(chunks, STOPS))
    last = out[-1]["candidates"][0]
    assert last["finish_reason"] == "STOP" and last["finish_message"] == "</answer>"
    assert "finishReason" not in last
    assert last["content"]["parts"] == [{"text": ""}]
    assert out[0]["candidates"][0]["content"]["parts"][0]["text"] == "x "


def test_include_stop() -> None:
    out = list(wrap(stream_of("x </ans", "wer> y"), STOPS, include_stop=True))
    assert texts(out) == "x </answer>"


def test_input_chunks_are_not_modified() -> None:
    chunks = stream_of("a </an", "swer> b")
    before = copy.deepcopy(chunks)
    list(wrap(chunks, STOPS))
    assert chunks == before


def test_prompt_feedback_only_chunks_pass() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": gemini_usage(0)}
    stream = wrap([blocked], STOPS)
    assert list(stream) == [blocked] and not stream.complete


@settings(max_examples=examples(150), deadline=None)
@given(
    st.text(alphabet="ab</answer>\nUsr: ", max_size=40),
    st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_text_matches_the_reference_however_it_is_split(text_: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text_)) for c in cuts})
    parts = [text_[a:b] for a, b in zip([0, *points], [*points, len(text_)], strict=True)]
    stream = wrap(stream_of(*parts), STOPS)
    out = list(stream)
    expected, stop = reference_truncate(text_, STOPS)
    assert texts(out) == expected
    assert stream.stop_sequence == stop and stream.complete


# --- whole responses ---------------------------------------------------------------------------

# Texts made of pieces of the stops, so that stops (whole or split across parts) are common.
_TEXT = st.lists(
    st.sampled_from(["a", " ", "</ans", "wer>", "</answer>", "\n", "\n\nUs", "er:"]), max_size=4
).map("".join)
_PART = st.one_of(
    st.builds(text, _TEXT),
    st.builds(thought, _TEXT),
    st.just(function_call("f", {"x": 1})),
)


# The literal stops, and with them one that the end of the text can decide (``a`` last).
_STOP_LISTS = st.sampled_from([STOPS, [*STOPS, Regex(r"a\b")]])


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_PART, max_size=6), st.booleans(), _STOP_LISTS)
@example([text("a"), function_call("f", {"x": 1}), text("</answer>")], False, STOPS)
@example([text("x</ans"), thought("plan"), text("wer>"), text("after")], False, STOPS)
@example([text("x</ans"), thought("plan"), text("wer>"), text("after")], True, STOPS)
@example([text("b "), text("ba")], False, [*STOPS, Regex(r"a\b")])
def test_truncate_response_gives_what_the_stream_adapter_gives(
    parts: list[Event], include_stop: bool, stops: list[str | Regex]
) -> None:
    response = gemini_chunk(parts, finish="MAX_TOKENS")
    streamed = list(wrap([copy.deepcopy(response)], stops, include_stop=include_stop))
    cut = truncate_response(copy.deepcopy(response), stops, include_stop)
    want = streamed[-1]["candidates"][0]
    if "finishMessage" not in want:
        assert cut == response  # no stop: nothing changes, not even where held text was
        return
    assert cut["candidates"][0] == want


def test_truncate_response_cuts_in_place_across_parts() -> None:
    response = gemini_chunk(
        [thought("plan </answer>"), text("The answer is 4.</ans"), text("wer> tail")],
        finish="MAX_TOKENS",
    )
    assert truncate_response(response, STOPS) is response
    candidate = response["candidates"][0]
    # As the stream has it: the held "</ans" was the stop's start, so the part that ends the
    # stop keeps nothing of its text.
    assert candidate["content"]["parts"] == [
        thought("plan </answer>"),
        text("The answer is 4."),
        text(""),
    ]
    assert (candidate["finishReason"], candidate["finishMessage"]) == ("STOP", "</answer>")


def test_truncate_response_snake_case_and_sdk_objects() -> None:
    wire = gemini_chunk([text("a </answer> b")], finish="MAX_TOKENS")
    sdk = types.GenerateContentResponse.model_validate_json(json.dumps(wire))
    snake = sdk.model_dump(mode="json", exclude_none=True)
    candidate = truncate_response(snake, STOPS)["candidates"][0]
    assert (candidate["finish_reason"], candidate["finish_message"]) == ("STOP", "</answer>")
    assert candidate["content"]["parts"] == [{"text": "a "}]
    cut = truncate_response(sdk, STOPS)
    assert isinstance(cut, types.GenerateContentResponse) and cut.text == "a "
    assert cut.candidates is not None
    assert cut.candidates[0].finish_reason == types.FinishReason.STOP
    assert cut.candidates[0].finish_message == "</answer>"
    assert truncate_response(sdk, ["zzz"]) is sdk  # nothing to cut: the object itself


def test_truncate_response_keeps_what_has_no_text_and_names_what_is_not_a_response() -> None:
    odd: dict[str, Any] = {"candidates": [None, {"content": "x"}, {"content": {"parts": [1]}}]}
    assert truncate_response(odd, STOPS) == {
        "candidates": [None, {"content": "x"}, {"content": {"parts": [1]}}]
    }
    assert truncate_response({"promptFeedback": {}}, STOPS) == {"promptFeedback": {}}
    with pytest.raises(TypeError, match="takes a generateContent response, not str"):
        truncate_response("text", STOPS)
    with pytest.raises(TypeError, match="not a Chat Completions chunk"):
        truncate_response({"choices": []}, STOPS)


# --- SDK objects -----------------------------------------------------------------------------


def test_sdk_objects_stay_sdk_objects() -> None:
    signed = "c2lnbmF0dXJl"  # base64 of b"signature"
    chunks: list[Any] = [
        types.GenerateContentResponse.model_validate_json(json.dumps(c))
        for c in [
            gemini_chunk([thought("plan"), text("The answer")]),
            gemini_chunk([text(" is 4.</ans", thoughtSignature=signed)]),
            gemini_chunk([text("wer> tail")]),
        ]
    ]
    stream = wrap(chunks, STOPS)
    out: list[Any] = list(stream)
    assert all(isinstance(c, types.GenerateContentResponse) for c in out)
    assert out[0] is chunks[0]
    assert "".join(c.text or "" for c in out) == "The answer is 4."
    last = out[-1].candidates[0]
    assert last.finish_reason == types.FinishReason.STOP
    assert type(last.finish_reason) is types.FinishReason
    assert last.finish_message == "</answer>"
    out[-1].model_dump()  # no serializer warning (warnings are errors here)
    out[-1].model_dump_json()
    # A changed chunk went through JSON: its bytes fields decode as the SDK decodes a body.
    changed = out[1].candidates[0].content.parts[0]
    assert changed.text == " is 4."
    assert changed.thought_signature == b"signature"
    assert out[1].usage_metadata == chunks[1].usage_metadata


def test_async_wrap() -> None:
    chunks = stream_of("a </ans", "wer> b", " c")

    async def main() -> tuple[list[Any], AsyncCountingIterator[Event]]:
        upstream = AsyncCountingIterator(chunks)
        async with awrap(upstream, STOPS) as stream:
            out = [c async for c in stream]
            assert stream.complete and stream.stop_sequence == "</answer>"
        return out, upstream

    out, upstream = asyncio.run(main())
    assert texts(out) == "a " and upstream.closed == 1


# --- SSE -------------------------------------------------------------------------------------


def parse(data: bytes) -> list[Any]:
    parser = SSEParser()
    return [json.loads(e.data) for e in parser.feed(data) + parser.finish() if e.data is not None]


@pytest.mark.parametrize("size", [1, 9, 10_000])
def test_sse_body_gives_what_the_dict_adapter_gives(size: int) -> None:
    chunks = [
        gemini_chunk([thought("plan </answer>")]),
        *stream_of("x </an", "swer> y"),
    ]
    expected = list(wrap(chunks, STOPS))
    data = "".join(b + "\r\n\r\n" for b in gemini_sse(chunks)).encode()
    stream = wrap_gemini(iter([data[i : i + size] for i in range(0, len(data), size)]), STOPS)
    out = b"".join(stream)
    assert parse(out) == expected
    assert b"event:" not in out and b"[DONE]" not in out
    assert out.startswith((gemini_sse(chunks)[0] + "\r\n\r\n").encode())  # byte for byte
    assert stream.complete and stream.stop_sequences == {0: "</answer>"}


def test_sse_drain_ends_with_the_usage_chunk() -> None:
    chunks = stream_of("a </answer>", " tail")
    data = "".join(b + "\r\n\r\n" for b in gemini_sse(chunks)).encode()
    out = parse(b"".join(wrap_gemini(iter([data]), STOPS, on_stop="drain")))
    assert out[-1] == {
        "usageMetadata": gemini_usage(3),
        "modelVersion": "gemini-test",
        "responseId": "resp-gemini",
    }
    assert out[-2]["candidates"][0]["finishMessage"] == "</answer>"
