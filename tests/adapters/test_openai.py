"""``stopstream.openai``: stop sequences on Chat Completions chunk streams (dicts and SDK objects).

No network here: chunks are built in memory. The end-to-end tests run the real SDK over HTTP.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai.types.chat as openai_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from stopstream.openai import awrap_chat, wrap_chat
from stopstream.reference import reference_truncate

Chunk = dict[str, Any]


def chunk(
    content: str | None = None,
    index: int = 0,
    finish: str | None = None,
    *,
    usage: Any = None,
    **delta: Any,
) -> Chunk:
    if content is not None:
        delta["content"] = content
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": usage,
    }


def usage_chunk(tokens: int) -> Chunk:
    usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
    return {**chunk(), "choices": [], "usage": usage}


class Upstream:
    """A sync upstream recording how far it was read and whether it was closed."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.pulled = 0
        self.closed = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.pulled >= len(self.chunks):
            raise StopIteration
        self.pulled += 1
        return self.chunks[self.pulled - 1]

    def close(self) -> None:
        self.closed += 1


class SDKLikeStream:
    """Like ``openai.Stream``: ``__iter__`` is a generator, ``close()`` releases the response."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.closed = 0
        self.finalized = False

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self.chunks
        finally:
            self.finalized = True

    def close(self) -> None:
        self.closed += 1


def contents(chunks: list[Chunk], index: int = 0) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in chunks
        if c["choices"] and c["choices"][0]["index"] == index
    )


def test_stop_truncates_the_chunk_and_closes_the_upstream() -> None:
    upstream = Upstream(
        [chunk("", role="assistant"), chunk("Hello </ans"), chunk("wer> tail"), chunk("more")]
    )
    stream = wrap_chat(upstream, ["</answer>", "\n\nUser:"])
    out = list(stream)
    assert [c["choices"][0]["delta"]["content"] for c in out] == ["", "Hello ", ""]
    last = out[-1]["choices"][0]
    assert last["finish_reason"] == "stop"
    assert last["stop_reason"] == "</answer>"
    assert out[0] is upstream.chunks[0]  # unchanged chunks are passed on as they are
    assert upstream.pulled == 3 and upstream.closed == 1
    assert stream.stop_sequences == {0: "</answer>"}
    assert stream.stop_indices == {0: 0}
    assert stream.finish_reasons == {0: "stop"}
    assert stream.stop_sequence == "</answer>"
    assert stream.stopped


def test_input_dicts_are_not_modified() -> None:
    chunks = [chunk("a </a"), chunk("nswer> b"), chunk("c")]
    before = copy.deepcopy(chunks)
    list(wrap_chat(chunks, "</answer>"))
    assert chunks == before


def test_include_stop_keeps_the_stop_text() -> None:
    out = list(wrap_chat([chunk("x </ans"), chunk("wer> y")], ["</answer>"], include_stop=True))
    assert contents(out) == "x </answer>"
    assert out[-1]["choices"][0]["finish_reason"] == "stop"


def test_held_text_is_released_with_the_finish_reason() -> None:
    upstream = Upstream([chunk("a </ans"), chunk(None, finish="length"), usage_chunk(5)])
    stream = wrap_chat(upstream, ["</answer>"])
    out = list(stream)
    assert [c["choices"][0]["delta"].get("content") for c in out[:2]] == ["a ", "</ans"]
    assert out[1]["choices"][0]["finish_reason"] == "length"
    assert out[2] is upstream.chunks[2]
    assert upstream.closed == 0  # ran out by itself: not closed
    assert stream.stop_sequences == {0: None}
    assert stream.finish_reasons == {0: "length"}
    assert not stream.stopped


def test_a_dropped_stream_invents_no_ending_and_keeps_the_held_text() -> None:
    stream = wrap_chat([chunk("a </ans")], ["</answer>"])
    out = list(stream)
    assert contents(out) == "a "
    assert all(c["choices"][0]["finish_reason"] is None for c in out)
    assert not stream.complete
    assert stream.pending == {0: "</ans"}


def test_complete_once_every_choice_has_its_finish_reason() -> None:
    stream = wrap_chat([chunk("a </ans"), chunk(None, finish="length")], ["</answer>"])
    out = list(stream)
    assert contents(out) == "a </ans"
    assert stream.complete
    assert stream.pending == {}


def test_upstream_stop_reason_is_reported() -> None:
    # vLLM names the stop it applied; a hybrid gateway sent that stop upstream.
    final = chunk(None, finish="stop")
    final["choices"][0]["stop_reason"] = "###"
    stream = wrap_chat([chunk("done"), final], ["</answer>", "###"])
    out = list(stream)
    assert out[-1] is final
    assert stream.stop_sequences == {0: "###"} and stream.stop_indices == {0: 1}
    assert not stream.stopped


def test_n_choices_are_filtered_separately() -> None:
    upstream = Upstream(
        [
            chunk("", 0, role="assistant"),
            chunk("", 1, role="assistant"),
            chunk("one STOP", 0),
            chunk("two ST", 1),
            chunk(" after", 0),  # dropped: choice 0 has stopped
            chunk("OP x", 1),
            chunk("never", 1),
        ]
    )
    stream = wrap_chat(upstream, ["STOP"])
    out = list(stream)
    assert contents(out, 0) == "one "
    assert contents(out, 1) == "two "
    assert len(out) == 5
    assert upstream.pulled == 6 and upstream.closed == 1
    assert stream.stop_sequences == {0: "STOP", 1: "STOP"}
    assert [c["choices"][0]["finish_reason"] for c in out[2:]] == ["stop", None, "stop"]


def test_n_keeps_the_stream_open_until_every_requested_choice_stopped() -> None:
    chunks = [chunk("a STOP", 0), chunk("b", 1), chunk("c STOP", 1), chunk("z", 1)]
    upstream = Upstream(chunks)
    out = list(wrap_chat(upstream, ["STOP"], n=2))
    assert upstream.pulled == 3 and upstream.closed == 1
    assert contents(out, 1) == "bc "
    # Without n, the stream closes once every choice seen so far has stopped.
    upstream = Upstream(chunks)
    list(wrap_chat(upstream, ["STOP"]))
    assert upstream.pulled == 1


def test_a_choice_finished_upstream_counts_as_done() -> None:
    upstream = Upstream(
        [chunk("a", 0), chunk(None, 0, "length"), chunk("b STOP", 1), chunk("c", 1)]
    )
    stream = wrap_chat(upstream, ["STOP"])
    list(stream)
    assert upstream.pulled == 3 and upstream.closed == 1
    assert stream.finish_reasons == {0: "length", 1: "stop"}


def test_several_choices_in_one_chunk() -> None:
    both = chunk("x STOP", 0)
    both["choices"].append({"index": 1, "delta": {"content": "y"}, "finish_reason": None})
    upstream = Upstream([both, chunk("z", 0), {**chunk("w", 1)}])
    out = list(wrap_chat(upstream, ["STOP"]))
    assert [c["delta"]["content"] for c in out[0]["choices"]] == ["x ", "y"]
    assert [c["index"] for c in out[1]["choices"]] == [1]  # choice 0's delta dropped
    assert len(out) == 2


def test_other_delta_fields_pass_untouched() -> None:
    tool = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"q": "STOP"}'},
    }
    chunks = [
        chunk(None, tool_calls=[tool]),
        chunk(None, refusal="I won't say STOP"),
        chunk(None, reasoning_content="thinking STOP"),
        chunk("text"),
        chunk(None, finish="tool_calls"),
    ]
    stream = wrap_chat(chunks, ["STOP"])
    out = list(stream)
    assert all(a is b for a, b in zip(out, chunks, strict=True))
    assert not stream.stopped


def test_the_stop_chunk_keeps_its_other_fields() -> None:
    stop = chunk("ab STOP cd", tool_calls=[{"index": 0, "function": {"arguments": "{}"}}])
    stop["choices"][0]["logprobs"] = {"content": []}
    stop["system_fingerprint"] = "fp"
    out = list(wrap_chat([stop], ["STOP"]))
    choice = out[0]["choices"][0]
    assert choice["delta"] == {
        "tool_calls": [{"index": 0, "function": {"arguments": "{}"}}],
        "content": "ab ",
    }
    assert choice["logprobs"] == {"content": []}
    assert out[0]["system_fingerprint"] == "fp"


def test_non_chunk_objects_pass_through() -> None:
    error = {"error": {"message": "overloaded"}}
    out = list(wrap_chat([chunk("a"), error, chunk("b")], ["STOP"]))
    assert out[1] is error and len(out) == 3


def test_close_without_known_usage_ends_after_the_stop_chunk() -> None:
    upstream = Upstream([chunk("a STOP"), chunk(None, finish="stop"), usage_chunk(9)])
    out = list(wrap_chat(upstream, ["STOP"]))
    assert len(out) == 1 and upstream.closed == 1


def test_close_with_known_usage_ends_with_a_usage_chunk() -> None:
    # Continuous usage statistics (vLLM): every chunk carries the usage so far.
    u1 = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    u2 = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    upstream = Upstream([chunk("a", usage=u1), chunk(" STOP", usage=u2), usage_chunk(9)])
    out = list(wrap_chat(upstream, ["STOP"]))
    assert len(out) == 3
    assert out[-1]["choices"] == [] and out[-1]["usage"] == u2
    assert out[-1]["id"] == "chatcmpl-1"


def test_drain_reads_the_upstream_and_delivers_the_final_usage() -> None:
    final = usage_chunk(9)
    upstream = Upstream([chunk("a STOP"), chunk(" more"), chunk(None, finish="stop"), final])
    stream = wrap_chat(upstream, ["STOP"], on_stop="drain")
    out = list(stream)
    assert contents(out) == "a "
    assert out[-1]["usage"] == final["usage"] and out[-1]["choices"] == []
    assert len(out) == 2
    assert upstream.pulled == 4 and upstream.closed == 0


def test_drain_strips_choices_from_a_usage_carrying_chunk() -> None:
    u = {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    out = list(wrap_chat([chunk("a STOP"), chunk("b", usage=u)], ["STOP"], on_stop="drain"))
    assert out[-1]["choices"] == [] and out[-1]["usage"] == u


def test_sdk_stream_object_is_closed_with_its_iterator() -> None:
    sdk = SDKLikeStream([chunk("a STOP"), chunk("b")])
    with wrap_chat(sdk, ["STOP"]) as stream:
        assert len(list(stream)) == 1
    assert sdk.closed == 1 and sdk.finalized


def test_closing_the_wrapper_closes_the_upstream_once() -> None:
    upstream = Upstream([chunk("a"), chunk("b")])
    with wrap_chat(upstream, ["STOP"]) as stream:
        next(stream)
    stream.close()
    assert upstream.closed == 1
    assert list(stream) == []


def test_upstream_exception_propagates() -> None:
    def failing() -> Iterator[Chunk]:
        yield chunk("a </an")
        raise ConnectionError("reset")

    stream = wrap_chat(failing(), ["</answer>"])
    assert next(stream)["choices"][0]["delta"]["content"] == "a "
    with pytest.raises(ConnectionError):
        next(stream)
    assert list(stream) == []


def test_concurrent_next_is_an_error_and_close_does_not_wait_for_it() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow() -> Iterator[Chunk]:
        yield chunk("a")
        entered.set()
        release.wait(10)
        yield chunk("b")

    stream = wrap_chat(slow(), ["STOP"])
    next(stream)
    results: list[Chunk] = []
    reader = threading.Thread(target=lambda: results.extend(stream))
    reader.start()
    assert entered.wait(10)
    with pytest.raises(RuntimeError, match="already being iterated"):
        next(stream)
    stream.close()  # returns at once: the running pull ends the stream when it returns
    release.set()
    reader.join(10)
    assert results == []  # the item pulled after the close is not delivered
    assert list(stream) == []


def test_close_from_inside_the_upstream_ends_the_stream() -> None:
    closed: list[bool] = []

    def upstream() -> Iterator[Chunk]:
        try:
            yield chunk("a")
            stream.close()
            yield chunk("b")
        except GeneratorExit:
            closed.append(True)
            raise

    stream = wrap_chat(upstream(), ["STOP"])
    next(stream)
    assert list(stream) == []
    assert closed == [True]


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="on_stop"):
        wrap_chat([], ["x"], on_stop="later")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="n must"):
        wrap_chat([], ["x"], n=0)
    with pytest.raises(ValueError, match="position 1"):
        wrap_chat([], ["x", ""])
    with pytest.raises(TypeError):
        wrap_chat(42, ["x"])  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="int"):
        next(wrap_chat([42], ["x"]))


def test_no_stops_pass_everything() -> None:
    chunks = [chunk("a"), chunk("b", finish="stop")]
    out = list(wrap_chat(chunks, None))
    assert all(a is b for a, b in zip(out, chunks, strict=True))


@settings(max_examples=examples(200), deadline=None)
@given(
    text=st.text(alphabet="ab</>", max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=8),
    stops=st.lists(st.text(alphabet="ab</>", min_size=1, max_size=4), max_size=4),
    include_stop=st.booleans(),
    finish=st.booleans(),
)
def test_output_matches_truncate_however_split(
    text: str, cuts: list[int], stops: list[str], include_stop: bool, finish: bool
) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    chunks = [chunk(text[a:b]) for a, b in itertools.pairwise(bounds)]
    if finish:
        chunks.append(chunk(None, finish="length"))
    stream = wrap_chat(chunks, stops, include_stop=include_stop)
    out = list(stream)
    expected, stop = reference_truncate(text, stops, include_stop)
    # A stream dropped before its finish_reason keeps its held text instead of releasing it.
    held = "".join(stream.pending.values())
    assert contents(out) + held == expected
    assert held == "" or not (finish or stop is not None)
    assert stream.complete == (bool(chunks) and (finish or stop is not None))
    assert stream.stop_sequences.get(0) == stop


# --- SDK objects ---------------------------------------------------------------------------------


def sdk_chunk(*args: Any, **kwargs: Any) -> Any:
    return openai_types.ChatCompletionChunk.construct(**chunk(*args, **kwargs))


def test_sdk_chunks_in_sdk_chunks_out() -> None:
    chunks = [sdk_chunk("", role="assistant"), sdk_chunk("Hi </an"), sdk_chunk("swer>!", role="x")]
    stream = wrap_chat(chunks, ["</answer>"])
    out = list(stream)
    assert all(isinstance(c, openai_types.ChatCompletionChunk) for c in out)
    assert out[0] is chunks[0]
    assert [c.choices[0].delta.content for c in out] == ["", "Hi ", ""]
    last = out[-1].choices[0]
    assert last.finish_reason == "stop"
    assert last.stop_reason == "</answer>"  # an extra field, as vLLM's
    assert last.delta.role == "x"  # the other delta fields are kept
    assert isinstance(last.delta, openai_types.chat_completion_chunk.ChoiceDelta)
    assert out[-1].model_dump(exclude_unset=True)["choices"][0]["stop_reason"] == "</answer>"


def test_sdk_chunks_synthesized_usage_chunk() -> None:
    u = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    out = list(wrap_chat([sdk_chunk("a STOP", usage=u)], ["STOP"]))
    assert isinstance(out[-1], openai_types.ChatCompletionChunk)
    assert out[-1].choices == [] and out[-1].usage is not None
    assert out[-1].usage.completion_tokens == 1


# --- async ---------------------------------------------------------------------------------------


class AsyncUpstream:
    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.pulled = 0
        self.closed = 0

    async def gen(self) -> AsyncIterator[Any]:
        for c in self.chunks:
            self.pulled += 1
            yield c

    def __aiter__(self) -> AsyncIterator[Any]:
        return self.gen()

    async def close(self) -> None:  # an async close(), like the SDKs' AsyncStream
        self.closed += 1


def test_async_stop_closes_the_upstream() -> None:
    async def main() -> None:
        upstream = AsyncUpstream([chunk("a </ans"), chunk("wer>b"), chunk("c")])
        async with awrap_chat(upstream, ["</answer>"]) as stream:
            out = [c async for c in stream]
        assert contents(out) == "a "
        assert out[-1]["choices"][0]["stop_reason"] == "</answer>"
        assert upstream.pulled == 2 and upstream.closed == 1
        assert stream.stop_sequences == {0: "</answer>"}

    asyncio.run(main())


def test_async_drain() -> None:
    async def main() -> None:
        upstream = AsyncUpstream([chunk("a STOP"), chunk("b"), usage_chunk(3)])
        out = [c async for c in awrap_chat(upstream, ["STOP"], on_stop="drain")]
        assert upstream.pulled == 3 and upstream.closed == 0
        assert out[-1]["usage"]["completion_tokens"] == 3

    asyncio.run(main())
