"""``stopstream.sse``: raw SSE bodies in, filtered SSE bodies out; and ``stopstream --sse``."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_profiles import examples
from stopstream._cli import main
from stopstream.sse import SSEParser, awrap_anthropic, awrap_openai, wrap_anthropic, wrap_openai


def chat_event(content: str | None, finish: str | None = None, index: int = 0) -> str:
    delta = {} if content is None else {"content": content}
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"id": "c", "choices": [choice]}, separators=(",", ":"))


def anthropic_event(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: " + json.dumps(data, separators=(",", ":"))


def body(*events: str, eol: str = "\n") -> bytes:
    return "".join(e.replace("\n", eol) + eol + eol for e in events).encode()


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def parse(data: bytes) -> list[tuple[str | None, Any]]:
    """(event name, JSON data or raw string) of each event of a body, per the SSE rules."""
    parser = SSEParser()
    events = parser.feed(data) + parser.finish()
    out: list[tuple[str | None, Any]] = []
    for e in events:
        raw = e.data
        if raw is None:
            continue
        name = None
        for line in e.lines:
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
        value = raw.decode()
        try:
            out.append((name, json.loads(value)))
        except ValueError:
            out.append((name, value))
    return out


def chat_text(data: bytes) -> str:
    return "".join(
        d["choices"][0]["delta"].get("content") or ""
        for _, d in parse(data)
        if isinstance(d, dict) and d.get("choices")
    )


OPENAI_BODY = body(
    chat_event(""),
    ": keep-alive",
    chat_event("Hello </an"),
    chat_event("swer> tail"),
    chat_event(" more"),
    chat_event(None, "stop"),
    "data: [DONE]",
)


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_parser_splits_events_anywhere(eol: str) -> None:
    data = body("id: 1\ndata: a\ndata: b", ": comment", "event: x\ndata:c", "retry: 5", eol=eol)
    whole = SSEParser()
    # A final "\r" may be half of a "\r\n": that event completes at the end of the body.
    expected = [(e.raw, e.data) for e in whole.feed(data) + whole.finish()]
    assert [d for _, d in expected] == [b"a\nb", None, b"c", None]
    assert b"".join(raw for raw, _ in expected) == data
    for size in (1, 2, 3, 7):
        parser = SSEParser()
        got = [(e.raw, e.data) for p in pieces(data, size) for e in parser.feed(p)]
        assert got + [(e.raw, e.data) for e in parser.finish()] == expected


def test_parser_field_syntax() -> None:
    parser = SSEParser()
    events = parser.feed(b"\xef\xbb\xbfdata:no space\ndata:  two spaces\ndata\n\n")
    assert [e.data for e in events] == [b"no space\n two spaces\n"]


@pytest.mark.parametrize("tail", [b"data: y", b"data: y\r\n", b"data: y\n", b"event: x\r"])
def test_parser_never_dispatches_an_unfinished_last_block(tail: bytes) -> None:
    # WHATWG: an event the body ends in the middle of, before its blank line, is not dispatched.
    parser = SSEParser()
    (first,) = parser.feed(b"data: x\r\n\r\n" + tail)
    assert first.data == b"x"
    assert parser.finish() == []


def test_parser_a_final_cr_ends_the_last_block() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r\r") == []  # the last "\r" may be half of "\r\n"
    (last,) = parser.finish()
    assert last.data == b"x" and last.raw == b"data: x\r\r"


# --- OpenAI ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 5, 10_000])
def test_openai_body(size: int) -> None:
    source = iter(pieces(OPENAI_BODY, size))
    stream = wrap_openai(source, ["</answer>"])
    out = b"".join(stream)
    events = parse(out)
    assert chat_text(out) == "Hello "
    stop_chunk = events[-2][1]
    assert stop_chunk["choices"][0]["finish_reason"] == "stop"
    assert stop_chunk["choices"][0]["stop_reason"] == "</answer>"
    assert events[-1] == (None, "[DONE]")
    assert b": keep-alive\n\n" in out
    assert stream.stop_sequences == {0: "</answer>"}
    if size < len(OPENAI_BODY):
        assert next(source, None) is not None  # the rest of the body was not read


def test_openai_unchanged_events_are_forwarded_byte_for_byte() -> None:
    data = body(
        'data: {"id": "c",  "choices": [{"index": 0, "delta": {"content": "hé"}}]}',
        'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        "data: [DONE]",
        eol="\r\n",
    )
    assert b"".join(wrap_openai(pieces(data, 3), ["</answer>"])) == data


def test_openai_changed_events_keep_their_other_lines() -> None:
    data = body(
        ": c1\nid: 7\n" + chat_event("a </an") + "\nretry: 10",
        chat_event(None, "length"),
        "data: [DONE]",
        eol="\r\n",
    )
    out = b"".join(wrap_openai([data], ["</answer>"]))
    first, _, _ = out.partition(b"\r\n\r\n")
    lines = first.split(b"\r\n")
    assert lines[:2] == [b": c1", b"id: 7"] and lines[3] == b"retry: 10"
    assert json.loads(lines[2][6:])["choices"][0]["delta"]["content"] == "a "
    assert chat_text(out) == "a </an"
    assert out.endswith(b"data: [DONE]\r\n\r\n")


def test_openai_multi_line_data_is_rewritten_as_one_line() -> None:
    payload = {"id": "c", "choices": [{"index": 0, "delta": {"content": "x STOP"}}]}
    text = json.dumps(payload, indent=1)
    data = ("\n".join("data: " + line for line in text.split("\n")) + "\n\n").encode()
    out = b"".join(wrap_openai([data], ["STOP"]))
    assert out.count(b"data: ") == 2  # the chunk, then [DONE]
    assert chat_text(out) == "x "


def test_openai_json_that_is_not_an_event_and_surrogates() -> None:
    data = body(
        "data: 42",
        'data: {"choices":[{"index":0,"delta":{"content":"\\ud800 STOP"}}]}',
    )
    out = b"".join(wrap_openai([data], ["STOP"]))
    assert out.startswith(b"data: 42\n\n")  # JSON, not an object: no text in it
    assert b'"\\ud800 "' in out  # a lone surrogate stays a JSON escape
    assert out.endswith(b"data: [DONE]\n\n")


def test_openai_drain_keeps_the_upstream_done_and_usage() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 9, "total_tokens": 10}
    data = body(
        chat_event("a STOP"),
        ": keep-alive",
        chat_event(" b"),
        chat_event(None, "stop"),
        "data: " + json.dumps({"id": "c", "choices": [], "usage": usage}),
        "data: [DONE]",
    )
    source = iter(pieces(data, 4))
    out = b"".join(wrap_openai(source, ["STOP"], on_stop="drain"))
    events = parse(out)
    assert [type(d).__name__ for _, d in events] == ["dict", "dict", "str"]
    assert events[1][1]["usage"] == usage and events[1][1]["choices"] == []
    assert events[2][1] == "[DONE]"
    assert out.count(b"keep-alive") == 1  # keep-alives still pass while draining
    assert next(source, None) is None


def test_openai_n_choices() -> None:
    data = body(
        chat_event("one STOP", index=0),
        chat_event("two", index=1),
        chat_event(" more", index=0),
        chat_event(" STOP", index=1),
        chat_event("never", index=1),
    )
    stream = wrap_openai([data], ["STOP"], n=2)
    out = b"".join(stream)
    contents = [d["choices"][0]["delta"]["content"] for _, d in parse(out) if isinstance(d, dict)]
    assert contents == ["one ", "two", " "]
    assert stream.stop_sequences == {0: "STOP", 1: "STOP"}


def test_openai_rejects_non_bytes() -> None:
    with pytest.raises(TypeError, match="bytes"):
        list(wrap_openai([1], ["x"]))  # type: ignore[list-item]


@settings(max_examples=examples(150), deadline=None)
@given(
    text=st.text(alphabet="ab</>é\n", max_size=25),
    token_cuts=st.lists(st.integers(0, 25), max_size=6),
    size=st.integers(1, 40),
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
)
def test_openai_body_matches_truncate(
    text: str, token_cuts: list[int], size: int, eol: str
) -> None:
    from stopstream.reference import reference_truncate

    stops = ["</a>", "\n\n", "b<"]
    bounds = sorted({0, len(text), *(c for c in token_cuts if c <= len(text))})
    events = [chat_event(text[a:b]) for a, b in itertools.pairwise(bounds)]
    data = body(*events, chat_event(None, "stop"), "data: [DONE]", eol=eol)
    out = b"".join(wrap_openai(pieces(data, size), stops))
    expected, _ = reference_truncate(text, stops)
    assert chat_text(out) == expected
    assert parse(out)[-1] == (None, "[DONE]")


# --- Anthropic -------------------------------------------------------------------------------

MESSAGE_START = {
    "type": "message_start",
    "message": {"id": "m", "usage": {"input_tokens": 3, "output_tokens": 1}},
}


def anthropic_body(*texts: str, eol: str = "\n") -> bytes:
    events = [
        anthropic_event(MESSAGE_START),
        anthropic_event(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
        ),
    ]
    for t in texts:
        events.append(
            anthropic_event(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": t},
                }
            )
        )
        events.append(anthropic_event({"type": "ping"}))
    events.append(anthropic_event({"type": "content_block_stop", "index": 0}))
    events.append(
        anthropic_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 20},
            }
        )
    )
    events.append(anthropic_event({"type": "message_stop"}))
    return body(*events, eol=eol)


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_anthropic_body(eol: str) -> None:
    data = anthropic_body("Hi </ans", "wer> tail", " more", eol=eol)
    stream = wrap_anthropic(pieces(data, 3), ["</answer>"])
    out = b"".join(stream)
    events = parse(out)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "ping",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == d["type"] for name, d in events)
    assert events[2][1]["delta"]["text"] == "Hi "
    assert events[5][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "</answer>"}
    assert events[5][1]["usage"] == {"input_tokens": 3, "output_tokens": 1}
    assert eol.encode() * 2 in out and (eol == "\r\n") == (b"\r\n" in out)
    assert stream.stop_sequence == "</answer>"


def test_anthropic_body_without_a_stop_is_unchanged() -> None:
    data = anthropic_body("Hi", " there")
    assert b"".join(wrap_anthropic(pieces(data, 5), ["</answer>"])) == data


def test_anthropic_drain_uses_the_final_usage() -> None:
    data = anthropic_body("a STOP", " b")
    out = b"".join(wrap_anthropic([data], ["STOP"], on_stop="drain"))
    events = parse(out)
    assert [n for n, _ in events][-3:] == ["ping", "message_delta", "message_stop"]
    assert events[-2][1]["usage"] == {"output_tokens": 20}
    assert events[-2][1]["delta"]["stop_sequence"] == "STOP"


# --- async -----------------------------------------------------------------------------------


class AsyncBody:
    def __init__(self, data: bytes, size: int) -> None:
        self.chunks = pieces(data, size)
        self.pulled = 0
        self.closed = 0

    async def gen(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            self.pulled += 1
            yield c

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.gen()

    async def aclose(self) -> None:
        self.closed += 1


def test_async_twins() -> None:
    async def main() -> None:
        upstream = AsyncBody(OPENAI_BODY, 8)
        async with awrap_openai(upstream, ["</answer>"]) as stream:
            out = b"".join([p async for p in stream])
        assert chat_text(out) == "Hello "
        assert upstream.closed == 1 and upstream.pulled < len(upstream.chunks)

        upstream = AsyncBody(anthropic_body("x STOP", "y"), 8)
        out = b"".join([p async for p in awrap_anthropic(upstream, ["STOP"])])
        assert parse(out)[-2][1]["delta"]["stop_sequence"] == "STOP"
        assert upstream.closed == 1

    asyncio.run(main())


# --- command line ----------------------------------------------------------------------------


def test_cli_sse_openai(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    source = tmp_path / "body.sse"
    source.write_bytes(OPENAI_BODY)
    assert main(["--sse", "openai", "-s", "</answer>", str(source)]) == 0
    out, err = capsysbinary.readouterr()
    assert chat_text(out) == "Hello "
    assert out.endswith(b"data: [DONE]\n\n")
    assert err == b"stopstream: choice 0: stop sequence 0: '</answer>'\n"


def test_cli_sse_anthropic_from_stdin() -> None:
    data = anthropic_body("a\\n", "b\n\nUser: x")
    done = subprocess.run(
        [sys.executable, "-m", "stopstream", "--sse", "anthropic", "-e", "-s", r"\n\nUser:"],
        input=data,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    events = parse(done.stdout)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "a\\nb"
    assert events[-2][1]["delta"]["stop_sequence"] == "\n\nUser:"
    assert done.stderr == b"stopstream: stop sequence 0: '\\n\\nUser:'\n"


def test_cli_sse_without_a_stop(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    data = anthropic_body("plain")

    def fake_chunks(_src: Any) -> Iterator[bytes]:
        yield data

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("stopstream._cli._chunks", fake_chunks)
        assert main(["--sse", "anthropic", "-s", "STOP", "--on-stop", "drain"]) == 0
    out, err = capsysbinary.readouterr()
    assert out == data
    assert err == b"stopstream: end of input, no stop sequence\n"


# --- what is forwarded was scanned -------------------------------------------------------------

_CHAT_OK = chat_event("fine ")
# An event each API reads that carries no text (another API's event is a bad item too).
_OK = {
    "openai": _CHAT_OK,
    "anthropic": 'data: {"type":"ping"}',
    "responses": 'data: {"type":"response.queued","sequence_number":0}',
    "gemini": 'data: {"usageMetadata":{}}',
}
_BAD_DATA = [
    pytest.param(b'{"choices":[{"index":0,"delta":{"content":"a\xff</x>"}}]}', id="invalid-utf8"),
    pytest.param(b'{"choices":[{"index":0,"delta":{"content":"a\x01</x>"}}]}', id="control"),
    pytest.param(b'{"choices":[]} </x>', id="trailing-bytes"),
    pytest.param(b"not json </x>", id="not-json"),
]


@pytest.mark.parametrize("bad", _BAD_DATA)
@pytest.mark.parametrize("shape", ["openai", "anthropic", "responses", "gemini"])
def test_data_that_cannot_be_parsed_is_a_bad_item(bad: bytes, shape: str) -> None:
    from stopstream import sse

    closes: list[int] = []

    class Body:
        def __iter__(self) -> Iterator[bytes]:
            yield body(_OK[shape])
            yield b"data: " + bad + b"\n\n"
            yield body(_OK[shape])

        def close(self) -> None:
            closes.append(1)

    stream = getattr(sse, f"wrap_{shape}")(Body(), ["</x>"])
    out = [next(stream)]  # the good event before it
    with pytest.raises(ValueError, match="an SSE event's data is not valid"):
        next(stream)
    assert b"</x>" not in b"".join(out)
    with pytest.raises(StopIteration):
        next(stream)
    assert closes == [1]


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices":[{"index":0,"delta":{"content":"a</x>b","content":"ok"},"finish_reason":null}]}',
        b'{"choices":[{"index":0,"delta":{"content":"ok","content":"a</x>b"},"finish_reason":null}]}',
        b'{"choices":[{"index":0,"delta":{"content":"ok","cont\\u0065nt":"a</x>b"}}]}',
    ],
    ids=["first", "last", "escaped-key"],
)
def test_an_event_repeating_a_key_is_forwarded_as_scanned(data: bytes) -> None:
    out = b"".join(wrap_openai([b"data: " + data + b"\n\n"], ["</x>"]))
    assert b"a</x>b" not in out  # no unscanned copy of the text reaches the client
    # One key per object: what any client's parser reads is what was scanned.
    assert out.count(b'"content"') == 1


def test_data_that_is_json_but_not_an_object_passes() -> None:
    data = body("data: [1, 2]", 'data: "a string"', chat_event("ok"))
    assert b"".join(wrap_openai([data], ["</x>"])).startswith(
        b'data: [1, 2]\n\ndata: "a string"\n\n'
    )


# --- the end of a text stream decides like any chunk -------------------------------------------


def test_cli_sse_reports_a_stop_decided_by_the_end(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    source = tmp_path / "body.sse"
    source.write_bytes(body(chat_event("the e"), chat_event("nd"), chat_event(None, "length")))
    assert main(["--sse", "openai", "-r", r"\bend\b", str(source)]) == 0
    out, err = capsysbinary.readouterr()
    assert chat_text(out) == "the "
    events = [d for _, d in parse(out) if isinstance(d, dict)]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"][0]["stop_reason"] == "end"
    assert err == b"stopstream: choice 0: stop sequence 0: 'end'\n"


@pytest.mark.parametrize("shape", ["openai", "anthropic", "responses", "gemini"])
def test_async_data_that_cannot_be_parsed_is_a_bad_item(shape: str) -> None:
    from stopstream import sse

    closes: list[int] = []

    class Body:
        async def _gen(self) -> AsyncIterator[bytes]:
            yield body(_OK[shape])
            yield b"data: {} trailing </x>\n\n"
            yield body(_CHAT_OK)

        def __aiter__(self) -> AsyncIterator[bytes]:
            return self._gen()

        async def aclose(self) -> None:
            closes.append(1)

    async def main() -> list[bytes]:
        out: list[bytes] = []
        stream = getattr(sse, f"awrap_{shape}")(Body(), ["</x>"])
        out.append(await stream.__anext__())
        with pytest.raises(ValueError, match="not valid JSON"):
            await stream.__anext__()
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        return out

    assert b"</x>" not in b"".join(asyncio.run(main()))
    assert closes == [1]
