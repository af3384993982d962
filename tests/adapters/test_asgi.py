"""End to end: ``stopstream.asgi``'s routes, served by uvicorn on loopback in front of the fake
APIs (``fake_providers``), driven by the real ``openai`` and ``anthropic`` clients.

Per API (Chat Completions, Responses, Messages), streamed and whole: every stop enforced, the
one that fired reported in the API's own fields, the upstream connection closed at the stop and
when the client goes away. A vLLM upstream that runs the plugin gets the rest of the stops in
``vllm_xargs``. Hostile requests are refused with a 400 (413 for a body over its bound) naming
the problem, before anything reaches the upstream. The pieces also make a FastAPI endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from fake_providers import FakeProviders
from fake_upstream import (
    TIMEOUT,
    ChatScript,
    MessagesScript,
    Served,
    anthropic_client,
    assert_closed_early,
    chat_text,
    openai_client,
    tail,
    text_deltas,
)
from provider_scripts import Item, ResponseScript, response_events
from stopstream import asgi

# Real servers: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e

STOPS = ["###", "END", "<|im_end|>", "Observation:", "</answer>", "\n\nUser:"]
MESSAGES: Any = [{"role": "user", "content": "Hi"}]


def app_of(routes: list[Any], pool: asgi.UpstreamPool | httpx.AsyncClient) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with pool:
            yield

    return Starlette(routes=routes, lifespan=lifespan)


def three_routes(url: str, pool: asgi.UpstreamPool, **options: Any) -> list[Any]:
    return [
        asgi.route("chat", url + "/v1", client=pool, provider="openai", **options),
        asgi.route("responses", url + "/v1", client=pool, provider="openai-responses", **options),
        asgi.route("messages", url, client=pool, provider="anthropic", **options),
    ]


@pytest.fixture
def fake(providers_server: tuple[FakeProviders, Served]) -> FakeProviders:
    fake, _ = providers_server
    fake.reset()
    return fake


@pytest.fixture(scope="module")
def gateway(providers_server: tuple[FakeProviders, Served]) -> Iterator[str]:
    """The three routes with their defaults."""
    pool = asgi.UpstreamPool(8, timeout=TIMEOUT)
    with Served(app_of(three_routes(providers_server[1].url, pool), pool), lifespan="on") as s:
        yield s.url


@pytest.fixture(scope="module")
def tight(providers_server: tuple[FakeProviders, Served]) -> Iterator[str]:
    """The three routes with small bounds."""
    pool = asgi.UpstreamPool(8, timeout=TIMEOUT)
    bounds = {"max_stops": 8, "max_stop_bytes": 64, "max_body_bytes": 4096}
    routes = three_routes(providers_server[1].url, pool, **bounds)
    with Served(app_of(routes, pool), lifespan="on") as s:
        yield s.url


@pytest.fixture(scope="module")
def vllm_gateway(providers_server: tuple[FakeProviders, Served]) -> Iterator[str]:
    """A Chat route to a vLLM that runs the stopstream plugin, over one httpx client."""
    client = httpx.AsyncClient(timeout=TIMEOUT)
    url = providers_server[1].url + "/v1"
    route = asgi.route("chat", url, client=client, provider="vllm", plugin=True)
    with Served(app_of([route], client), lifespan="on") as s:
        yield s.url


def stop_reason(choice: Any) -> Any:
    return (choice.model_extra or {}).get("stop_reason")


def answer_script() -> ResponseScript:
    return ResponseScript([Item("message", [["The answer", " is 4.</ans", "wer>", *tail(60)]])])


# --- Chat Completions ------------------------------------------------------------------------


def test_chat_stream(fake: FakeProviders, gateway: str) -> None:
    fake.chat.chat = ChatScript([text_deltas("The answer", " is 4.", "</ans", "wer>", *tail())])
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True, stop=STOPS
            )
        )
    assert chat_text(chunks) == "The answer is 4."
    last = chunks[-1].choices[0]
    assert (last.finish_reason, stop_reason(last)) == ("stop", "</answer>")
    assert fake.chat.last.body["stop"] == STOPS[:4]  # OpenAI takes 4
    assert_closed_early(fake.chat.last)


def test_chat_whole(fake: FakeProviders, gateway: str) -> None:
    fake.chat.chat = ChatScript([text_deltas("Result", " here.", "\n\nUser:", " more")])
    with openai_client(gateway) as client:
        completion = client.chat.completions.create(model="o3", messages=MESSAGES, stop=STOPS)
    choice = completion.choices[0]
    assert choice.message.content == "Result here."
    assert (choice.finish_reason, stop_reason(choice)) == ("stop", "\n\nUser:")
    assert "stop" not in fake.chat.last.body  # o3 rejects `stop`


def test_chat_n_choices(fake: FakeProviders, gateway: str) -> None:
    fake.chat.chat = ChatScript(
        [text_deltas("one", "END", *tail()), text_deltas("two", " ###", *tail())]
    )
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o-mini", messages=MESSAGES, stream=True, stop=["Observation:"], n=2
            )
        )
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts[0].startswith("oneEND tail0") and "Observation" not in texts[0]
    assert fake.chat.last.body["n"] == 2


# --- Responses -------------------------------------------------------------------------------


def test_responses_stream(fake: FakeProviders, gateway: str) -> None:
    fake.responses = response_events(answer_script())
    with openai_client(gateway) as client:
        events: list[Any] = list(
            client.responses.create(
                model="gpt-4o", input="Hi", stream=True, extra_body={"stop": STOPS}
            )
        )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "The answer is 4."
    completed = events[-1]
    assert completed.type == "response.completed"
    assert (completed.response.model_extra or {})["stop_sequence"] == "</answer>"
    assert "stop" not in fake.last.body  # the Responses API has no such parameter
    assert_closed_early(fake.last)


def test_responses_whole(fake: FakeProviders, gateway: str) -> None:
    fake.responses = response_events(answer_script())
    with openai_client(gateway) as client:
        response = client.responses.create(model="gpt-4o", input="Hi", extra_body={"stop": STOPS})
    assert response.output_text == "The answer is 4."
    assert (response.model_extra or {})["stop_sequence"] == "</answer>"
    assert "stop" not in fake.last.body


# --- Messages --------------------------------------------------------------------------------


def test_messages_stream(fake: FakeProviders, gateway: str) -> None:
    fake.chat.messages = MessagesScript([("text", ["Sure: ", "42", "\n", "\nUser:", *tail()])])
    stops = [*STOPS, "\t"]
    with anthropic_client(gateway) as client:
        events: list[Any] = list(
            client.messages.create(
                model="claude-test",
                max_tokens=100,
                messages=MESSAGES,
                stream=True,
                stop_sequences=stops,
            )
        )
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Sure: 42"
    final = events[-2]
    assert (final.delta.stop_reason, final.delta.stop_sequence) == ("stop_sequence", "\n\nUser:")
    assert fake.chat.last.body["stop_sequences"] == STOPS  # not the whitespace-only "\t"
    assert_closed_early(fake.chat.last)


def test_messages_whole(fake: FakeProviders, gateway: str) -> None:
    fake.chat.messages = MessagesScript([("text", ["Sure: ", "42", "###", " tail"])])
    with anthropic_client(gateway) as client:
        message = client.messages.create(
            model="claude-test", max_tokens=100, messages=MESSAGES, stop_sequences=STOPS
        )
    assert message.content[0].type == "text" and message.content[0].text == "Sure: 42"
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "###")


# --- The client goes away --------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_disconnect_closes_the_upstream(fake: FakeProviders, gateway: str, api: str) -> None:
    fake.chat.chat = ChatScript([text_deltas(*tail(150))])
    fake.chat.messages = MessagesScript([("text", tail(150))])
    fake.responses = response_events(ResponseScript([Item("message", [tail(150)])]))
    payload: dict[str, Any] = {"model": "m", "stream": True, "stop": STOPS}
    if api == "chat":
        path, records = "/v1/chat/completions", fake.chat.records
        payload["messages"] = MESSAGES
    elif api == "responses":
        path, records = "/v1/responses", fake.records
        payload["input"] = "Hi"
    else:
        path, records = "/v1/messages", fake.chat.records
        payload.update(max_tokens=100, messages=MESSAGES, stop_sequences=payload.pop("stop"))
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        client.stream("POST", gateway + path, json=payload) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if "tail3" in line:
                break  # the client goes away mid-stream
    assert_closed_early(records[-1])


# --- A vLLM upstream that runs the plugin ----------------------------------------------------


def test_vllm_plugin_gets_the_rest_in_vllm_xargs(fake: FakeProviders, vllm_gateway: str) -> None:
    # The fake applies only its own `stop`: the rest is the plugin's, not the gateway's.
    fake.chat.chat = ChatScript([text_deltas("a", "</answer>", "b", "###", "c")])
    own = {"stopstream": json.dumps({"stop": ["STOP"], "skip_reasoning": True}), "x": "1"}
    with openai_client(vllm_gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="llama",
                messages=MESSAGES,
                stream=True,
                stop=STOPS,
                extra_body={"vllm_xargs": own},
            )
        )
    body = fake.chat.last.body
    assert body["stop"] == STOPS[:4]  # vLLM's own `stop` takes 4
    assert body["vllm_xargs"]["x"] == "1"
    options = json.loads(body["vllm_xargs"]["stopstream"])
    assert options == {"stop": ["STOP", *STOPS[4:]], "skip_reasoning": True}
    assert chat_text(chunks) == "a</answer>b"  # cut by the upstream only


def test_vllm_plugin_with_few_stops_sends_no_xargs(fake: FakeProviders, vllm_gateway: str) -> None:
    with openai_client(vllm_gateway) as client:
        client.chat.completions.create(model="llama", messages=MESSAGES, stop=["a", "b"])
    assert fake.chat.last.body["stop"] == ["a", "b"]
    assert "vllm_xargs" not in fake.chat.last.body


# --- Hostile requests ------------------------------------------------------------------------

BAD_STOPS = [
    ({"a": 1}, "expected a string or an array of strings, not an object"),
    (["a", 3], "the stop at position 1 is a number, not a string"),
    (["a", None], "the stop at position 1 is null, not a string"),
    ([True], "the stop at position 0 is a boolean, not a string"),
    (4, "expected a string or an array of strings, not a number"),
    (["a", ""], "stop at position 1 is empty"),
    (["s"] * 9, "9 stops, over the gateway's bound of 8 (max_stops)"),
    (["x" * 40, "y" * 30], "over the gateway's bound of 64 bytes (max_stop_bytes)"),
]


@pytest.mark.parametrize(("stops", "message"), BAD_STOPS)
def test_bad_stops_are_a_400_for_openai_clients(
    fake: FakeProviders, tight: str, stops: Any, message: str
) -> None:
    with openai_client(tight) as client:
        with pytest.raises(openai.BadRequestError, match=re.escape(message)) as chat:
            client.chat.completions.create(model="m", messages=MESSAGES, stop=stops)
        with pytest.raises(openai.BadRequestError, match=re.escape(message)) as responses:
            client.responses.create(model="m", input="Hi", extra_body={"stop": stops})
    for info in (chat, responses):
        body: Any = info.value.body
        assert (body["param"], body["type"]) == ("stop", "invalid_request_error")
        assert body["message"].startswith("Invalid 'stop': ")
    assert fake.records == fake.chat.records == []  # nothing reached the upstream


@pytest.mark.parametrize(("stops", "message"), BAD_STOPS)
def test_bad_stops_are_a_400_for_anthropic_clients(
    fake: FakeProviders, tight: str, stops: Any, message: str
) -> None:
    with (
        anthropic_client(tight) as client,
        pytest.raises(anthropic.BadRequestError, match=re.escape(message)) as info,
    ):
        client.messages.create(
            model="claude-test", max_tokens=10, messages=MESSAGES, stop_sequences=stops
        )
    body: Any = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("Invalid 'stop_sequences': ")
    assert fake.chat.records == []


@pytest.mark.parametrize(
    ("content", "status", "message"),
    [
        (b"{", 400, "The request body is not valid JSON."),
        (b"\xff", 400, "The request body is not valid JSON."),
        (b"[" * 2000 + b"]" * 2000, 400, "The request body is not valid JSON."),
        (b"[1, 2]", 400, "The request body must be a JSON object."),
        (b'{"stop": "' + b"x" * 5000 + b'"}', 413, "over the gateway's bound of 4096 bytes"),
    ],
)
def test_bad_bodies(
    fake: FakeProviders, tight: str, content: bytes, status: int, message: str
) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        response = client.post(tight + "/v1/chat/completions", content=content)
        chunked = client.post(tight + "/v1/messages", content=iter([content]))  # no length
    assert response.status_code == status
    assert message in response.json()["error"]["message"]
    assert chunked.status_code == status
    assert message in chunked.json()["error"]["message"]
    assert fake.chat.records == []


def test_a_million_stops_are_refused_before_compiling(fake: FakeProviders, gateway: str) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        response = client.post(
            gateway + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stop": ["a"] * 1_000_000},
        )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == (
        f"Invalid 'stop': 1000000 stops, over the gateway's bound of {asgi.MAX_STOPS} (max_stops)."
    )
    assert fake.chat.records == []


def test_an_upstream_error_passes_through(fake: FakeProviders, gateway: str) -> None:
    fake.chat.reject_stop = True
    with (
        openai_client(gateway) as client,
        pytest.raises(openai.BadRequestError, match="'stop' is not supported") as info,
    ):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stop=["x"])
    assert info.value.status_code == 400


# --- FastAPI -----------------------------------------------------------------------------------


def test_fastapi_endpoint_from_the_pieces(
    fake: FakeProviders, providers_server: tuple[FakeProviders, Served]
) -> None:
    from fastapi import FastAPI

    base = providers_server[1].url + "/v1"
    clients: list[httpx.AsyncClient] = []
    pool = asgi.UpstreamPool(4, timeout=TIMEOUT)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client, pool:
            clients.append(client)
            yield

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            payload = await asgi.read_json(request)
            prepared = asgi.prepare("chat", payload, "openai")
        except asgi.GatewayError as exc:
            return exc.response("chat")
        payload["user"] = "gateway"  # the endpoint's own business
        url = asgi.upstream_url("chat", base)
        upstream = clients[0].build_request("POST", url, json=payload)
        return asgi.relay("chat", await clients[0].send(upstream, stream=True), prepared)

    # The whole endpoint, mounted as FastAPI does: no stop sent upstream (a count of 0).
    app.post("/v1/messages")(
        asgi.endpoint("messages", providers_server[1].url, client=pool, provider=0)
    )
    fake.chat.messages = MessagesScript([("text", ["Fast", "API", "END", *tail()])])
    fake.chat.chat = ChatScript([text_deltas("Fast", "API", "</answer>", *tail())])
    with Served(app, lifespan="on") as served, openai_client(served.url) as client:
        chunks = list(
            client.chat.completions.create(model="m", messages=MESSAGES, stream=True, stop=STOPS)
        )
        assert chat_text(chunks) == "FastAPI"
        assert stop_reason(chunks[-1].choices[0]) == "</answer>"
        assert fake.chat.last.body["user"] == "gateway"
        assert_closed_early(fake.chat.last)
        with pytest.raises(openai.BadRequestError, match="position 0 is empty"):
            client.chat.completions.create(model="m", messages=MESSAGES, stop=[""])
        with anthropic_client(served.url) as messages:
            message = messages.messages.create(
                model="c", max_tokens=5, messages=MESSAGES, stop_sequences=STOPS
            )
        assert message.content[0].type == "text" and message.content[0].text == "FastAPI"
        assert message.stop_sequence == "END"
        assert "stop_sequences" not in fake.chat.last.body


# --- Options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "upstream", "options", "message"),
    [
        (
            "gemini",
            "http://h/v1",
            {},
            "unknown API 'gemini' (served: 'chat', 'responses', 'messages'",
        ),
        ("chat", "h/v1", {}, "upstream: not an http(s) URL with a host: 'h/v1'"),
        ("chat", "http://h/v1", {"provider": "opena1"}, "provider: unknown provider 'opena1'"),
        ("chat", "http://h/v1", {"provider": -1}, "provider: limit must be >= 0"),
        ("chat", "http://h/v1", {"plugin": True}, "provider: plugin=True is for provider 'vllm'"),
        ("chat", "http://h/v1", {"on_stop": "later"}, "on_stop must be 'close' or 'drain'"),
        ("chat", "http://h/v1", {"max_stops": 0}, "max_stops must be an int >= 1"),
        ("chat", "http://h/v1", {"max_body_bytes": 1.5}, "max_body_bytes must be an int >= 1"),
        ("chat", "http://h/v1", {"client": object()}, "client must be an httpx.AsyncClient or"),
    ],
)
def test_route_checks_its_options(
    api: Any, upstream: str, options: dict[str, Any], message: str
) -> None:
    options = {"client": asgi.UpstreamPool(1), "provider": "openai", **options}
    with pytest.raises(ValueError, match=re.escape(message)):
        asgi.route(api, upstream, **options)


def test_routes_paths_and_urls() -> None:
    pool = asgi.UpstreamPool(1)
    paths = [r.path for r in three_routes("http://h", pool)]
    assert paths == ["/v1/chat/completions", "/v1/responses", "/v1/messages"]
    custom = asgi.route("chat", "http://h/v1", client=pool, provider=None, path="/chat")
    assert custom.path == "/chat"
    assert asgi.upstream_url("chat", "https://api.openai.com/v1/") == (
        "https://api.openai.com/v1/chat/completions"
    )
    assert asgi.upstream_url("responses", "http://vllm:8000/v1") == "http://vllm:8000/v1/responses"
    assert asgi.upstream_url("messages", "https://api.anthropic.com") == (
        "https://api.anthropic.com/v1/messages"
    )


def test_prepare_rewrites_the_payload() -> None:
    payload: dict[str, Any] = {"model": "gpt-4o", "stop": "END", "n": 3}
    prepared = asgi.prepare("chat", payload, "openai")
    assert (payload["stop"], prepared.parallel, list(prepared.stops.stops)) == (["END"], 3, ["END"])
    payload = {"model": "o3", "stop": ["a", "b"], "n": True}
    prepared = asgi.prepare("chat", payload, "openai")
    assert "stop" not in payload and prepared.parallel is None
    assert prepared.split == (["a"] * 0, ["a", "b"])
    payload = {"stop": ["a", "b"]}
    prepared = asgi.prepare("responses", payload, "vllm", limit=1, plugin=True)
    assert payload["stop"] == ["a"] and not prepared.stops
    assert json.loads(payload["vllm_xargs"]["stopstream"]) == {"stop": ["b"]}


def test_pool_options_and_lifespans() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_connections": 0}, "max_connections must be >= 1"),
        ({"max_connections": "8"}, "max_connections must be an int"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0"),
        ({"pool_timeout": True}, "pool_timeout must be a number of seconds > 0"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            asgi.UpstreamPool(**options)
    pool = asgi.UpstreamPool(40)
    with pytest.raises(RuntimeError, match="not open"):
        pool.acquire()

    async def twice() -> None:
        for _ in range(2):  # an app may run its lifespan more than once
            async with pool:
                first, release = pool.acquire()
                assert pool.acquire()[0] is first  # fills one client before the next
                release()

    asyncio.run(twice())


def test_importing_stopstream_imports_no_starlette() -> None:
    code = (
        "import sys, stopstream, stopstream.sse, stopstream.providers, stopstream.openai;"
        "assert not {'starlette', 'httpx', 'anyio'} & set(sys.modules), sys.modules.keys()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
