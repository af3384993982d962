"""``stopstream --sse responses`` and ``--sse gemini``: the Responses API's and Gemini's bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provider_scripts import (
    Item,
    ResponseScript,
    gemini_chunk,
    gemini_sse,
    response_events,
    responses_sse,
    text,
    thought,
)
from test_cli import run_cli

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e


def events_of(data: bytes) -> list[Any]:
    blocks = data.replace(b"\r\n", b"\n").split(b"\n\n")
    out = []
    for block in blocks:
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(json.loads(line[6:]))
    return out


def responses_body(events: list[Any]) -> bytes:
    return "".join(b + "\n\n" for b in responses_sse(events)).encode()


def gemini_body(chunks: list[Any]) -> bytes:
    return "".join(b + "\r\n\r\n" for b in gemini_sse(chunks)).encode()


def test_responses_body_is_cut_and_closed() -> None:
    script = ResponseScript([Item("message", [["The answer", " is 4.</ans", "wer> tail"]])])
    result = run_cli(
        ["--sse", "responses", "-s", "</answer>"], responses_body(response_events(script))
    )
    assert result.returncode == 0, result.stderr
    events = events_of(result.stdout)
    text_ = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text_ == "The answer is 4."
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["stop_sequence"] == "</answer>"
    assert b"stop sequence 0: '</answer>'" in result.stderr


def test_responses_body_cut_short_is_reported() -> None:
    events = response_events(ResponseScript([Item("message", [["cut", " short"]])], terminal=None))
    result = run_cli(["--sse", "responses", "-s", "</answer>"], responses_body(events))
    assert result.returncode == 1
    assert b"ended before its final event" in result.stderr
    assert b"Responses" in result.stderr


def test_gemini_body_is_cut_and_named() -> None:
    chunks = [
        gemini_chunk([thought("plan </answer>")]),
        gemini_chunk([text("The answer is 4.</ans")]),
        gemini_chunk([text("wer> tail")]),
        gemini_chunk([text("")], finish="STOP"),
    ]
    result = run_cli(["--sse", "gemini", "-s", "</answer>"], gemini_body(chunks))
    assert result.returncode == 0, result.stderr
    out = events_of(result.stdout)
    assert out[0] == chunks[0]  # the thought passed untouched
    last = out[-1]["candidates"][0]
    assert last["finishReason"] == "STOP" and last["finishMessage"] == "</answer>"
    assert b"candidate 0: stop sequence 0: '</answer>'" in result.stderr


@pytest.mark.parametrize("finish", [None, "MAX_TOKENS"])
def test_gemini_body_without_a_stop(finish: str | None) -> None:
    chunks = [gemini_chunk([text("plain </an")])]
    if finish is not None:
        chunks.append(gemini_chunk([text("")], finish=finish))
    result = run_cli(["--sse", "gemini", "-s", "</answer>"], gemini_body(chunks))
    if finish is None:
        assert result.returncode == 1 and b"ended before its final event" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert (
            "".join(
                p["text"]
                for c in events_of(result.stdout)
                for p in c["candidates"][0]["content"]["parts"]
            )
            == "plain </an"
        )
