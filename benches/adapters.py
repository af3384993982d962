"""The provider adapters against what the gateway spends anyway, side by side in one run.

- ``sse.wrap_openai`` / ``sse.wrap_anthropic`` / ``sse.wrap_responses`` / ``sse.wrap_gemini``
  per event against ``json.loads`` of the event's data (the least a gateway that looks at the
  events pays), and their throughput in MB/s of body against a plain pass-through of the same
  body chunks;
- ``openai.wrap_chat`` / ``anthropic.wrap_messages`` over SDK objects against what the SDK's
  own streaming spends per chunk: its real client reading the same body from an in-memory
  transport of its HTTP library (``httpx``, or ``httpx2`` for the SDKs built on it);
- ``awrap`` against an async generator passing the chunks through, and the async adapters (SSE
  bodies and SDK objects) against their sync twins plus that pass-through.

The events are real token streams (cl100k tokens of the benchmark corpus) in the providers'
wire format, one event per body chunk, with stop lists that never fire.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import contenders
import corpus
import openai

from stopstream import sse
from stopstream.anthropic import awrap_messages, wrap_messages
from stopstream.openai import awrap_chat, wrap_chat

STOPS = ("</answer>", "<|im_end|>", "\n\nUser:", "Observation:")


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Bodies:
    """One token stream as each provider would send it."""

    texts: tuple[str, ...]
    chat_data: tuple[bytes, ...]  # each chunk's JSON
    chat_body: tuple[bytes, ...]  # one event per body chunk
    messages_data: tuple[bytes, ...]
    messages_body: tuple[bytes, ...]
    responses_data: tuple[bytes, ...]
    responses_body: tuple[bytes, ...]
    gemini_data: tuple[bytes, ...]
    gemini_body: tuple[bytes, ...]


def bodies(texts: Sequence[str]) -> Bodies:
    head = {
        "id": "chatcmpl-9x8y7z",
        "object": "chat.completion.chunk",
        "created": 1764547200,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0aa8d3e20b",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return dumps({**head, "choices": [choice]}).encode()

    chat = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chat += [chunk({"content": t}) for t in texts]
    chat.append(chunk({}, "stop"))
    chat_body = [b"data: " + d + b"\n\n" for d in chat] + [b"data: [DONE]\n\n"]

    start = {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-sonnet-4-5",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    }
    events: list[dict[str, Any]] = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
        for t in texts
    ]
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": len(texts)},
        },
        {"type": "message_stop"},
    ]
    messages = [dumps(e).encode() for e in events]
    messages_body = [
        b"event: " + e["type"].encode() + b"\ndata: " + d + b"\n\n"
        for e, d in zip(events, messages, strict=True)
    ]
    responses, responses_body = responses_events(texts)
    gemini, gemini_body = gemini_chunks(texts)
    return Bodies(
        tuple(texts),
        tuple(chat),
        tuple(chat_body),
        tuple(messages),
        tuple(messages_body),
        tuple(responses),
        tuple(responses_body),
        tuple(gemini),
        tuple(gemini_body),
    )


def responses_events(texts: Sequence[str]) -> tuple[list[bytes], list[bytes]]:
    """A Responses API body: one message item of one text part, events as the API writes
    them (``event:`` line, compact JSON, a ``sequence_number`` on each, ``obfuscation``
    padding on the deltas)."""
    item = "msg_67ccd3acc8d48190a77525dc6de64b4104becd0d"
    response = {
        "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becd0d",
        "object": "response",
        "created_at": 1764547200,
        "status": "in_progress",
        "model": "gpt-4.1-2025-04-14",
        "output": [],
    }
    where = {"item_id": item, "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    message = {
        "id": item,
        "type": "message",
        "status": "in_progress",
        "content": [],
        "role": "assistant",
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": message},
        {"type": "response.content_part.added", **where, "part": part},
    ]
    events += [
        {
            "type": "response.output_text.delta",
            **where,
            "delta": t,
            "logprobs": [],
            "obfuscation": "Jm5dXzQ0Ta"[: 10 - len(t) % 10],
        }
        for t in texts
    ]
    text = "".join(texts)
    done_part = {**part, "text": text}
    done_item = {**message, "status": "completed", "content": [done_part]}
    events += [
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": [done_item]},
        },
    ]
    data = [
        dumps({"type": e["type"], "sequence_number": n, **e}).encode() for n, e in enumerate(events)
    ]
    body = [
        b"event: " + e["type"].encode() + b"\ndata: " + d + b"\n\n"
        for e, d in zip(events, data, strict=True)
    ]
    return data, body


def gemini_chunks(texts: Sequence[str]) -> tuple[list[bytes], list[bytes]]:
    """A Gemini ``streamGenerateContent?alt=sse`` body, written as the API writes it (a space
    after each colon, CRLF line endings, usage on every chunk)."""
    tail = {"modelVersion": "gemini-2.5-flash", "responseId": "kHNSaLzTGf2zqtsP8a6ZsAQ"}

    def chunk(text: str, n: int, finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        usage = {"promptTokenCount": 9, "candidatesTokenCount": n, "totalTokenCount": 9 + n}
        value = {"candidates": [candidate], "usageMetadata": usage, **tail}
        return json.dumps(value, ensure_ascii=False, separators=(",", ": ")).encode()

    data = [chunk(t, n + 1) for n, t in enumerate(texts)]
    data.append(chunk("", len(texts), "STOP"))
    return data, [b"data: " + d + b"\r\n\r\n" for d in data]


# -- the SDKs over an in-memory transport ----------------------------------------------------


def _httpx(sdk: Any) -> Any:
    """The HTTP library the SDK's client is built on: ``httpx2`` (recent SDKs) or ``httpx``."""
    if any(b.__module__.startswith("httpx2") for b in sdk.DefaultHttpxClient.__mro__):
        import httpx2

        return httpx2
    import httpx

    return httpx


def _client(sdk: Any, cls: Any, body: Sequence[bytes]) -> Any:
    """The SDK's client, its HTTP client reading ``body`` (one event per read) from memory."""
    http = _httpx(sdk)

    def handler(request: Any) -> Any:
        headers = {"content-type": "text/event-stream"}
        return http.Response(200, headers=headers, content=iter(body))

    transport = http.MockTransport(handler)
    return cls(
        api_key="k", base_url="http://sdk.test", http_client=http.Client(transport=transport)
    )


def openai_stream(body: Sequence[bytes]) -> Callable[[], Iterable[Any]]:
    client = _client(openai, openai.OpenAI, body)

    def run() -> Iterable[Any]:
        return client.chat.completions.create(  # type: ignore[no-any-return]
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )

    return run


def anthropic_stream(body: Sequence[bytes]) -> Callable[[], Iterable[Any]]:
    client = _client(anthropic, anthropic.Anthropic, body)

    def run() -> Iterable[Any]:
        return client.messages.create(  # type: ignore[no-any-return]
            model="claude-opus-4-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        )

    return run


# -- timing ----------------------------------------------------------------------------------


def best_ns(run: Callable[[], object], repeats: int) -> int:
    run()
    best = None
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter_ns()
            run()
            ns = time.perf_counter_ns() - start
        finally:
            gc.enable()
        best = ns if best is None else min(best, ns)
    assert best is not None
    return best


def drain(iterator: Iterable[Any]) -> None:
    for _ in iterator:
        pass


def passthrough(items: Iterable[Any]) -> Iterator[Any]:
    yield from items


async def apassthrough(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


_LOOP = asyncio.new_event_loop()


def adrain(iterator: AsyncIterator[Any]) -> None:
    async def consume() -> None:
        async for _ in iterator:
            pass

    _LOOP.run_until_complete(consume())


@dataclass(frozen=True)
class Row:
    name: str
    ns: float  # per item
    baseline: str
    baseline_ns: float
    target: float | None  # the ratio to stay under, if any

    @property
    def ratio(self) -> float:
        return self.ns / self.baseline_ns


def measure(texts: Sequence[str], repeats: int) -> tuple[list[Row], list[tuple[str, float]]]:
    """Per-item rows (with their baselines) and throughput figures (MB/s)."""
    b = bodies(texts)
    n_chat, n_msg = len(b.chat_body), len(b.messages_body)
    n_resp, n_gem = len(b.responses_body), len(b.gemini_body)
    chat_bytes = sum(map(len, b.chat_body))
    msg_bytes = sum(map(len, b.messages_body))
    resp_bytes = sum(map(len, b.responses_body))
    gem_bytes = sum(map(len, b.gemini_body))

    # Nothing fires (text held back as a possible stop start is released in a later event).
    for stream in (
        sse.wrap_openai(b.chat_body, STOPS),
        sse.wrap_anthropic(b.messages_body, STOPS),
        sse.wrap_responses(b.responses_body, STOPS),
        sse.wrap_gemini(b.gemini_body, STOPS),
    ):
        drain(stream)
        assert stream.complete and not stream.stopped

    def loads(datas: Sequence[bytes]) -> Callable[[], None]:
        def run() -> None:
            for d in datas:
                json.loads(d)

        return run

    rows: list[Row] = []
    loads_chat = best_ns(loads(b.chat_data), repeats) / len(b.chat_data)
    loads_msg = best_ns(loads(b.messages_data), repeats) / len(b.messages_data)
    wrap_o = best_ns(lambda: drain(sse.wrap_openai(b.chat_body, STOPS)), repeats) / n_chat
    wrap_a = best_ns(lambda: drain(sse.wrap_anthropic(b.messages_body, STOPS)), repeats) / n_msg
    rows.append(
        Row("sse.wrap_openai, per event", wrap_o, "json.loads of the event", loads_chat, 0.5)
    )
    rows.append(
        Row("sse.wrap_anthropic, per event", wrap_a, "json.loads of the event", loads_msg, 0.5)
    )
    loads_resp = best_ns(loads(b.responses_data), repeats) / len(b.responses_data)
    loads_gem = best_ns(loads(b.gemini_data), repeats) / len(b.gemini_data)
    wrap_r = best_ns(lambda: drain(sse.wrap_responses(b.responses_body, STOPS)), repeats) / n_resp
    wrap_g = best_ns(lambda: drain(sse.wrap_gemini(b.gemini_body, STOPS)), repeats) / n_gem
    rows.append(
        Row("sse.wrap_responses, per event", wrap_r, "json.loads of the event", loads_resp, 0.5)
    )
    rows.append(
        Row("sse.wrap_gemini, per event", wrap_g, "json.loads of the event", loads_gem, 0.5)
    )
    awrap_o = (
        best_ns(lambda: adrain(sse.awrap_openai(apassthrough(b.chat_body), STOPS)), repeats)
        / n_chat
    )
    afloor_o = best_ns(lambda: adrain(apassthrough(b.chat_body)), repeats) / n_chat
    rows.append(
        Row(
            "sse.awrap_openai, per event",
            awrap_o,
            "sse.wrap_openai + async pass-through",
            wrap_o + afloor_o,
            1.0,
        )
    )
    awrap_a = (
        best_ns(lambda: adrain(sse.awrap_anthropic(apassthrough(b.messages_body), STOPS)), repeats)
        / n_msg
    )
    afloor_a = best_ns(lambda: adrain(apassthrough(b.messages_body)), repeats) / n_msg
    rows.append(
        Row(
            "sse.awrap_anthropic, per event",
            awrap_a,
            "sse.wrap_anthropic + async pass-through",
            wrap_a + afloor_a,
            1.0,
        )
    )

    # The SDKs.
    o_stream, a_stream = openai_stream(b.chat_body), anthropic_stream(b.messages_body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = list(o_stream())
        events = list(a_stream())
    assert len(chunks) == len(b.chat_data) and len(events) == len(b.messages_data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a model name's deprecation notice
        sdk_o = best_ns(lambda: drain(o_stream()), repeats) / len(chunks)
        sdk_a = best_ns(lambda: drain(a_stream()), repeats) / len(events)
    chat = best_ns(lambda: drain(wrap_chat(chunks, STOPS)), repeats) / len(chunks)
    msgs = best_ns(lambda: drain(wrap_messages(events, STOPS)), repeats) / len(events)
    rows.append(
        Row("openai.wrap_chat over SDK chunks", chat, "the openai SDK's streaming", sdk_o, 0.1)
    )
    rows.append(
        Row(
            "anthropic.wrap_messages over SDK events",
            msgs,
            "the anthropic SDK's streaming",
            sdk_a,
            0.1,
        )
    )
    # Their async twins, over the same objects from an async generator.
    achat = best_ns(lambda: adrain(awrap_chat(apassthrough(chunks), STOPS)), repeats) / len(chunks)
    afloor_c = best_ns(lambda: adrain(apassthrough(chunks)), repeats) / len(chunks)
    rows.append(
        Row(
            "openai.awrap_chat over SDK chunks",
            achat,
            "openai.wrap_chat + async pass-through",
            chat + afloor_c,
            1.0,
        )
    )
    amsgs = best_ns(lambda: adrain(awrap_messages(apassthrough(events), STOPS)), repeats) / len(
        events
    )
    afloor_m = best_ns(lambda: adrain(apassthrough(events)), repeats) / len(events)
    rows.append(
        Row(
            "anthropic.awrap_messages over SDK events",
            amsgs,
            "anthropic.wrap_messages + async pass-through",
            msgs + afloor_m,
            1.0,
        )
    )

    # awrap, as in the per-chunk table: both over the same async source.
    afloor = best_ns(lambda: adrain(contenders.async_floor(texts, STOPS)), repeats) / len(texts)
    aw = best_ns(lambda: adrain(contenders.stopstream_awrap(texts, STOPS)), repeats) / len(texts)
    rows.append(Row("stopstream awrap, per chunk", aw, "async-generator pass-through", afloor, 2.0))

    # Throughput: MB of body per second, in (and out: the same bytes, nothing fires).
    floor_o = best_ns(lambda: drain(passthrough(b.chat_body)), repeats)
    floor_a = best_ns(lambda: drain(passthrough(b.messages_body)), repeats)
    floor_r = best_ns(lambda: drain(passthrough(b.responses_body)), repeats)
    floor_g = best_ns(lambda: drain(passthrough(b.gemini_body)), repeats)
    mbps = [
        ("sse.wrap_openai", chat_bytes / (wrap_o * n_chat) * 1e3),
        ("sse.wrap_anthropic", msg_bytes / (wrap_a * n_msg) * 1e3),
        ("sse.wrap_responses", resp_bytes / (wrap_r * n_resp) * 1e3),
        ("sse.wrap_gemini", gem_bytes / (wrap_g * n_gem) * 1e3),
        ("byte pass-through (Chat body)", chat_bytes / floor_o * 1e3),
        ("byte pass-through (Messages body)", msg_bytes / floor_a * 1e3),
        ("byte pass-through (Responses body)", resp_bytes / floor_r * 1e3),
        ("byte pass-through (Gemini body)", gem_bytes / floor_g * 1e3),
    ]
    return rows, mbps


def main() -> None:
    texts = corpus.mixed_stream().prefix(4_000).str_chunks
    if sys.argv[1:2] == ["--dump"]:  # the Chat chunks, for rust/examples/json_scan.rs
        with open(sys.argv[2], "wb") as f:
            f.writelines(d + b"\n" for d in bodies(texts).chat_data)
        return
    rows, mbps = measure(texts, 7)
    for r in rows:
        print(f"{r.name}: {r.ns:.0f} ns vs {r.baseline} {r.baseline_ns:.0f} ns = {r.ratio:.2f}x")
    for name, value in mbps:
        print(f"{name}: {value:.0f} MB/s")


if __name__ == "__main__":
    main()
