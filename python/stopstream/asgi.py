"""Gateway routes for Starlette and FastAPI that enforce stop sequences on the APIs they relay.

One route per API: OpenAI Chat Completions (``"chat"``), OpenAI Responses (``"responses"``) and
Anthropic Messages (``"messages"``), streamed or not. A route reads the request's stops (``stop``;
``stop_sequences`` for Messages; the Responses API has none, so the route takes ``stop`` there),
bounds them, sends the upstream what ``stopstream.providers.split_stops`` says it accepts, and
relays the answer with every stop enforced and the stop that fired reported, as the adapters of
``stopstream.sse`` (streamed) and the provider modules' ``truncate_*`` (whole) do. The upstream
connection is closed as soon as every text stream stopped, when the client goes away (also
while the route waits for a connection or for the upstream's headers), and at the end::

    import contextlib
    from starlette.applications import Starlette
    from stopstream import asgi

    pool = asgi.UpstreamPool(max_connections=1000)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with pool:
            yield

    app = Starlette(
        routes=[
            asgi.route("chat", "https://api.openai.com/v1", client=pool, provider="openai"),
            asgi.route("messages", "https://api.anthropic.com", client=pool,
                       provider="anthropic"),
        ],
        lifespan=lifespan,
    )

A route forwards the request's credentials (``FORWARDED_HEADERS``) and nothing else of its
headers. With FastAPI, mount the same endpoint (``app.post(path)(asgi.endpoint(...))``) or write
your own from the pieces: ``read_json`` (the body, bounded), ``prepare`` (the stops read, bounded
and split; the payload made ready for the upstream), ``upstream_url``, ``relay`` (the client's
response over the upstream's), ``GatewayError`` (a refused request, as the API's error body)::

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            payload = await asgi.read_json(request)
            prepared = asgi.prepare("chat", payload, "openai")
        except asgi.GatewayError as exc:
            return exc.response("chat")
        url = asgi.upstream_url("chat", "https://api.openai.com/v1")
        upstream = client.build_request("POST", url, json=payload, headers=...)
        return asgi.relay("chat", await client.send(upstream, stream=True), prepared)

A self-hosted vLLM that runs the stopstream plugin enforces every stop itself: with
``provider="vllm", plugin=True`` the stops beyond its ``stop`` travel in the request's
``vllm_xargs`` (``split_stops(..., "vllm", plugin=True)``) and the route relays the answer as
it comes, with no stop enforced here.

Whatever a client sends is bounded before it costs anything: the body (``max_body_bytes``, a
413), the stops (``max_stops``, ``max_stop_bytes``: the vLLM plugin's defaults), and a malformed
stop list or body is a 400 naming the problem, in the API's error shape.

This module imports Starlette and httpx (``pip install 'stopstream[gateway]'``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Collection
from typing import Any, Literal, NamedTuple

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from stopstream._adapter import OnStop, check_on_stop
from stopstream._core import StopSet
from stopstream._streaming_apis import BY_SHAPE, StreamingApi
from stopstream._vllm_options import Bounds
from stopstream.providers import StopSplit, _with_plugin_options, split_stops
from stopstream.sse import _awrap

__all__ = [
    "FORWARDED_HEADERS",
    "MAX_BODY_BYTES",
    "MAX_STOPS",
    "MAX_STOP_BYTES",
    "Api",
    "GatewayError",
    "Prepared",
    "UpstreamPool",
    "endpoint",
    "prepare",
    "read_json",
    "relay",
    "route",
    "upstream_url",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


Api = Literal["chat", "responses", "messages"]
"""The APIs a route serves: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages."""

#: Request headers passed on to the upstream: credentials and API selectors.
FORWARDED_HEADERS: tuple[str, ...] = (
    "authorization",
    "openai-organization",
    "openai-project",
    "x-api-key",
    "anthropic-version",
    "anthropic-beta",
)
#: A request's stops at most, and their UTF-8 bytes at most: the vLLM plugin's bounds, so a
#: list the gateway takes is one the plugin takes too.
MAX_STOPS: int = Bounds.stops
MAX_STOP_BYTES: int = Bounds.stop_bytes
#: A request body's bytes at most (images travel inline as base64: generous).
MAX_BODY_BYTES: int = 32 << 20

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _api(api: str) -> StreamingApi:
    """The registry's row of a served API; ``ValueError`` naming the served ones."""
    row = next((r for shape, r in BY_SHAPE.items() if shape == api), None)
    if row is None or row.path is None or row.error is None:
        served = ", ".join(repr(s) for s, r in BY_SHAPE.items() if r.path is not None)
        raise ValueError(f"unknown API {api!r} (served: {served})")
    return row


def _stop_field(row: StreamingApi) -> str:
    # An API without a stop parameter (Responses) takes one here under the common name.
    return row.stop_field or "stop"


class GatewayError(Exception):
    """A request refused before anything was sent upstream (an ``Exception``).

    ``status``: the HTTP status (400, 413); ``message`` names the problem (the bound and its
    limit for a request over one); ``param``: the request field at fault, or ``None``.
    """

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def response(self, api: Api) -> Response:
        """This error as ``api``'s error response (its JSON shape, this status)."""
        return _error(_api(api), self.status, self.message, self.param)


def _error(row: StreamingApi, status: int, message: str, param: str | None = None) -> Response:
    assert row.error is not None  # `_api` checked it
    return JSONResponse(row.error(message, param), status_code=status)


def upstream_url(api: Api, base_url: str) -> str:
    """The URL of ``api``'s endpoint under ``base_url``, the base URL its SDK client takes
    (OpenAI's ends in ``/v1``: ``https://api.openai.com/v1``; Anthropic's does not:
    ``https://api.anthropic.com``).

    Raises:
        ValueError: ``api`` is not served, or ``base_url`` is not an http(s) URL with a host.
    """
    row = _api(api)
    try:
        parsed = httpx.URL(base_url)
    except (TypeError, httpx.InvalidURL) as exc:
        raise ValueError(f"upstream: not a URL: {base_url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"upstream: not an http(s) URL with a host: {base_url!r}")
    assert row.path is not None
    return base_url.rstrip("/") + row.path[len(row.base_path) :]


async def read_json(request: Request, *, max_body_bytes: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request's body as a JSON object, read no further than ``max_body_bytes``.

    Raises:
        GatewayError: 413 for a body over the bound; 400 for a body that is not a JSON object.
    """
    over = GatewayError(
        413,
        f"The request body is over the gateway's bound of {max_body_bytes} bytes (max_body_bytes).",
    )
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_body_bytes:
        raise over  # before reading any of it
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body_bytes:
            raise over
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        raise GatewayError(400, "The request body is not valid JSON.") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "The request body must be a JSON object.")
    return payload


class Prepared(NamedTuple):
    """A request made ready for its upstream by ``prepare``."""

    #: The stops to enforce on the answer: the request's whole list (also those sent
    #: upstream), or none when a vLLM plugin enforces them all.
    stops: StopSet
    #: How the list was split: ``upstream`` went in the request's stop field, ``plugin`` (with
    #: ``plugin=True``) in its ``vllm_xargs``.
    split: StopSplit
    #: The request's count of parallel text streams (Chat's ``n``) when over 1, else ``None``.
    parallel: int | None


def _stop_list(value: object, field: str, max_stops: int, max_stop_bytes: int) -> list[str]:
    """The request's stop list, bounded before anything is compiled."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise GatewayError(
            400,
            f"Invalid '{field}': expected a string or an array of strings, "
            f"not {_json_type(value)}.",
            field,
        )
    if len(items) > max_stops:
        raise GatewayError(
            400,
            f"Invalid '{field}': {len(items)} stops, over the gateway's bound of {max_stops} "
            "(max_stops).",
            field,
        )
    size = 0
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise GatewayError(
                400,
                f"Invalid '{field}': the stop at position {position} is {_json_type(item)}, "
                "not a string.",
                field,
            )
        # JSON may carry lone surrogates ("\ud800"): counted as the core stores them.
        size += len(item.encode("utf-8", "surrogatepass"))
        if size > max_stop_bytes:
            raise GatewayError(
                400,
                f"Invalid '{field}': the stops take over the gateway's bound of "
                f"{max_stop_bytes} bytes (max_stop_bytes).",
                field,
            )
    return items


def _json_type(value: object) -> str:
    """What a decoded JSON value is, as messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: a bool is an int
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def prepare(
    api: Api,
    payload: dict[str, Any],
    provider: str | int | None,
    *,
    limit: int | None = None,
    plugin: bool = False,
    max_stops: int = MAX_STOPS,
    max_stop_bytes: int = MAX_STOP_BYTES,
) -> Prepared:
    """Read, bound and split the stops of ``payload`` (a request of ``api``), and make the
    payload ready for the upstream, in place.

    ``provider``, ``limit`` and ``plugin``: as ``stopstream.providers.split_stops`` takes them
    (the request's ``model`` picks the model rules). The payload's stop field then holds what
    the upstream accepts (or is removed), and with ``plugin=True`` its ``vllm_xargs`` holds the
    rest (after stop options the client sent there).

    Raises:
        GatewayError: 400 naming the problem: a stop list that is not a string or an array
            of non-empty strings, or over ``max_stops`` stops or ``max_stop_bytes`` bytes.
        ValueError: ``api`` is not served, or ``provider``, ``limit`` or ``plugin`` are
            wrong (a configuration error, not the request's).
    """
    row = _api(api)
    field = _stop_field(row)
    stops = _stop_list(payload.get(field), field, max_stops, max_stop_bytes)
    try:
        compiled = StopSet(stops)
    except (TypeError, ValueError) as exc:  # an empty stop, named by its position
        raise GatewayError(400, f"Invalid '{field}': {exc}.", field) from None
    model = payload.get("model")
    split = split_stops(
        compiled, provider, model if isinstance(model, str) else None, limit=limit, plugin=plugin
    )
    if split.upstream:
        payload[field] = split.upstream
    else:
        payload.pop(field, None)
    if split.plugin:
        payload["vllm_xargs"] = _with_plugin_options(payload.get("vllm_xargs"), split.plugin)
    count = payload.get(row.count_field) if row.count_field else None
    many = isinstance(count, int) and not isinstance(count, bool) and count > 1
    return Prepared(StopSet(None) if plugin else compiled, split, count if many else None)


def relay(
    api: Api, response: httpx.Response, prepared: Prepared, *, on_stop: OnStop = "close"
) -> Response:
    """The client's response over ``response``, the upstream's (sent with ``stream=True``).

    An SSE body (``text/event-stream``) streams with ``prepared.stops`` enforced (as
    ``stopstream.sse`` does: the stop that fired named in the API's own fields, the upstream
    closed once every text stream stopped, or read to its end with ``on_stop="drain"``); a
    JSON body is cut whole (the API's ``truncate_*``); any status but 200 passes as it is. The
    returned response owns ``response``: it closes it when it ends, however it ends, and as
    soon as the client goes away.
    """
    row = _api(api)
    on_stop = check_on_stop(on_stop)

    async def call(closing: contextlib.AsyncExitStack) -> Response | AsyncIterable[bytes]:
        return await _answer(row, response, prepared, on_stop, closing)

    return _Exchange(call)


class _Body:
    """An upstream body as an async iterable whose ``aclose()`` closes the response: the
    adapters close their upstream when every stream stopped, which drops the connection, which
    is how the upstream learns to stop generating."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._response.aiter_bytes()

    async def aclose(self) -> None:
        await self._response.aclose()


async def _answer(
    row: StreamingApi,
    response: httpx.Response,
    prepared: Prepared,
    on_stop: OnStop,
    closing: contextlib.AsyncExitStack,
) -> Response | AsyncIterable[bytes]:
    closing.push_async_callback(response.aclose)
    content_type = response.headers.get("content-type", "application/json")
    if response.status_code != 200:
        content = await response.aread()
        return Response(content, status_code=response.status_code, media_type=content_type)
    if content_type.startswith("text/event-stream"):
        if not prepared.stops:
            return response.aiter_bytes()  # nothing to enforce: the bytes as they come
        body = _awrap(
            row, _Body(response), prepared.stops, on_stop=on_stop, count=prepared.parallel
        )
        closing.push_async_callback(body.aclose)
        return body
    content = await response.aread()
    if not prepared.stops:
        return Response(content, media_type=content_type)
    try:
        whole = json.loads(content)
    except (ValueError, RecursionError):
        return _error(row, 502, "Upstream error: the response is not valid JSON.")
    return JSONResponse(row.truncate(whole, prepared.stops))


Call = Callable[[contextlib.AsyncExitStack], Awaitable[Response | AsyncIterable[bytes]]]


class _Exchange(Response):
    """One call forwarded upstream, as a response that the client's disconnect cancels.

    ``call(closing)`` forwards the request and returns the response to send: a ``Response``,
    or an async iterable of SSE bytes to stream. Whatever it opens upstream it registers in
    ``closing``, which is closed when the exchange ends, however it ends.

    Starlette's ``StreamingResponse`` is not enough for a proxy. It listens for the disconnect
    only once the response starts, so a client that left while the gateway waited for a pool
    connection or for the upstream's headers still has its request sent upstream and its stream
    started (and with a full pool, that call takes a connection a waiting client needed). With
    servers that declare ASGI 2.4 it does not listen at all and relies on ``send`` raising once
    the client is gone. It never closes its body iterator: if the cancellation lands while the
    response waits in ``send`` (flow control, a slow client), the relaying generator stays
    suspended at its ``yield`` and the ``finally`` that closes the upstream runs only when the
    generator is garbage collected. Here a task watches for ``http.disconnect`` from the start
    and cancels the exchange wherever it waits; the upstream is then closed at once, shielded
    from that cancellation (an ``await`` in a cancelled scope would be cancelled itself).
    """

    background = None  # read by FastAPI, which may attach tasks to a response it returns

    def __init__(self, call: Call) -> None:  # no super().__init__: there is no body yet
        self._call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        error: Exception | None = None
        async with anyio.create_task_group() as watch:
            watch.start_soon(_cancel_on_disconnect, receive, watch.cancel_scope)
            closing = contextlib.AsyncExitStack()
            try:
                answer = await self._call(closing)
                if isinstance(answer, Response):
                    await answer(scope, receive, send)
                else:
                    start = {"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS}
                    await send(start)
                    async for piece in answer:
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client went away (how ASGI 2.4 servers report it on send)
            except Exception as exc:  # raised after the upstream is closed, outside the group
                error = exc
            finally:
                with anyio.CancelScope(shield=True):
                    await closing.aclose()
                watch.cancel_scope.cancel()
        if error is not None:
            raise error


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


class UpstreamPool:
    """Upstream HTTP clients for many concurrent streams: ``max_connections`` connections in
    all, in ``httpx.AsyncClient``s of ``SHARD`` connections each. Enter it (``async with``)
    in the app's lifespan; a route takes it as its ``client``.

    One httpx client with all the connections would cost more CPU than relaying the streams:
    httpcore 1.0's pool walks all its connections on every request and every response close,
    and, for each idle one, all of them again. At concurrency 100, with every connection kept
    alive, that bookkeeping took a quarter of the gateway's CPU time under
    ``benches/gateway_load.py``. Small clients keep each walk short. A call goes to the first
    client with a free connection, so that a load is served by as few connections as it needs,
    kept busy, and the others go idle and expire; the connection limit holds overall (when all
    are busy, a call waits in the least busy client, at most ``pool_timeout`` seconds).

    Every connection is kept open between calls (the pool's idle limit counts all connections,
    not the idle ones, so any lower limit closes connections that are needed again at once), and
    for ``KEEPALIVE`` seconds: less than the 5 s after which uvicorn and most Python and Node
    servers close an idle connection, so that the gateway drops it first rather than sending a
    request on a connection the upstream is closing (a 502 for the client).

    ``timeout``: the longest wait for the upstream's next bytes (a stream may be quiet for long
    while a model thinks) or to write to it; ``connect_timeout``; ``pool_timeout``: how long a
    call waits for a free connection, then it is answered 503. A bad value is a ``ValueError``
    naming it.
    """

    SHARD = 16
    KEEPALIVE = 4.0

    def __init__(
        self,
        max_connections: int = 1000,
        *,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        pool_timeout: float = 10.0,
    ) -> None:
        for name, seconds in (
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("pool_timeout", pool_timeout),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, not {seconds!r}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise ValueError(f"max_connections must be an int, not {max_connections!r}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, not {max_connections}")
        self._timeouts = httpx.Timeout(timeout, connect=connect_timeout, pool=pool_timeout)
        shards = -(-max_connections // self.SHARD)
        self._sizes = [
            max_connections // shards + (i < max_connections % shards) for i in range(shards)
        ]
        self._busy = [0] * shards
        self._clients: list[httpx.AsyncClient] = []
        self._stack = contextlib.AsyncExitStack()

    def acquire(self) -> tuple[httpx.AsyncClient, Callable[[], None]]:
        """A client for one call, and the function to call when the call is over."""
        if not self._clients:
            raise RuntimeError("the UpstreamPool is not open: enter it in the app's lifespan")
        busy = self._busy
        shard = next(
            (i for i, (n, size) in enumerate(zip(busy, self._sizes, strict=True)) if n < size),
            busy.index(min(busy)),
        )
        busy[shard] += 1

        def release() -> None:
            busy[shard] -= 1

        return self._clients[shard], release

    async def __aenter__(self) -> UpstreamPool:
        # The clients are made here, not in __init__: a closed httpx client cannot reopen, and
        # an app may run its lifespan more than once.
        if self._clients:
            raise RuntimeError("the UpstreamPool is already open")
        tls = httpx.create_ssl_context()  # one for all: each loads the CA bundle (0.1 s)
        for size in self._sizes:
            limits = httpx.Limits(
                max_connections=size,
                max_keepalive_connections=size,
                keepalive_expiry=self.KEEPALIVE,
            )
            client = httpx.AsyncClient(verify=tls, timeout=self._timeouts, limits=limits)
            self._clients.append(await self._stack.enter_async_context(client))
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._clients = []
            self._busy = [0] * len(self._sizes)


def _no_release() -> None:
    pass


def endpoint(
    api: Api,
    upstream: str,
    *,
    client: httpx.AsyncClient | UpstreamPool,
    provider: str | int | None,
    limit: int | None = None,
    plugin: bool = False,
    on_stop: OnStop = "close",
    forward_headers: Collection[str] = FORWARDED_HEADERS,
    max_stops: int = MAX_STOPS,
    max_stop_bytes: int = MAX_STOP_BYTES,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint serving ``api`` in front of ``upstream`` (its SDK's base URL, see
    ``upstream_url``), for Starlette (``route`` wraps it) or FastAPI (``app.post(path)(...)``).

    ``client``: the upstream's HTTP client (opened and closed by the app's lifespan).
    ``provider``, ``limit``, ``plugin``: what the upstream is sent, as ``split_stops`` takes
    them (``"openai"``, ``"openai-responses"``, ``"anthropic"``, ``"vllm"`` with ``plugin=True``
    for a vLLM that runs the stopstream plugin, a count...). ``on_stop``: ``"close"`` (cancel
    generation upstream once every text stream stopped) or ``"drain"`` (read it to its end, so
    final usage arrives). ``forward_headers``: the request headers passed on (lower case).
    ``max_*``: the bounds of ``read_json`` and ``prepare``.

    A refused request (a bad or over-bound stop list, a body that is not a JSON object) is
    answered in the API's error shape, 400 (413 over ``max_body_bytes``); a call that waited
    ``pool_timeout`` for a connection, 503; an upstream that could not be reached, 502.

    Raises:
        ValueError: a bad option, named (checked here, before any request).
    """
    row = _api(api)
    url = upstream_url(api, upstream)
    try:
        split_stops(None, provider, limit=limit, plugin=plugin)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"provider: {exc}") from None
    on_stop = check_on_stop(on_stop)
    for name, bound in (
        ("max_stops", max_stops),
        ("max_stop_bytes", max_stop_bytes),
        ("max_body_bytes", max_body_bytes),
    ):
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise ValueError(f"{name} must be an int >= 1, not {bound!r}")
    headers_kept = frozenset(h.lower() for h in forward_headers)
    if isinstance(client, UpstreamPool):
        acquire = client.acquire
    elif isinstance(client, httpx.AsyncClient):
        one = client

        def acquire() -> tuple[httpx.AsyncClient, Callable[[], None]]:
            return one, _no_release

    else:
        raise ValueError(f"client must be an httpx.AsyncClient or an UpstreamPool, not {client!r}")

    async def handle(request: Request) -> Response:
        try:
            payload = await read_json(request, max_body_bytes=max_body_bytes)
            prepared = prepare(
                api,
                payload,
                provider,
                limit=limit,
                plugin=plugin,
                max_stops=max_stops,
                max_stop_bytes=max_stop_bytes,
            )
        except GatewayError as exc:
            return _error(row, exc.status, exc.message, exc.param)
        headers = {k: v for k, v in request.headers.items() if k in headers_kept}

        async def call(closing: contextlib.AsyncExitStack) -> Response | AsyncIterable[bytes]:
            http, release = acquire()
            closing.callback(release)
            outgoing = http.build_request("POST", url, json=payload, headers=headers)
            try:
                response = await http.send(outgoing, stream=True)
            except httpx.PoolTimeout:
                return _error(row, 503, "The gateway is at its upstream connection limit.")
            except httpx.HTTPError as exc:
                return _error(row, 502, f"Upstream error: {type(exc).__name__}: {exc}")
            return await _answer(row, response, prepared, on_stop, closing)

        return _Exchange(call)

    return handle


def route(
    api: Api,
    upstream: str,
    *,
    client: httpx.AsyncClient | UpstreamPool,
    provider: str | int | None,
    path: str | None = None,
    limit: int | None = None,
    plugin: bool = False,
    on_stop: OnStop = "close",
    forward_headers: Collection[str] = FORWARDED_HEADERS,
    max_stops: int = MAX_STOPS,
    max_stop_bytes: int = MAX_STOP_BYTES,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Route:
    """A Starlette ``Route`` (``POST``) serving ``api`` with ``endpoint``'s options, at
    ``path`` (default: the API's own, ``/v1/chat/completions``, ``/v1/responses`` or
    ``/v1/messages``)."""
    handle = endpoint(
        api,
        upstream,
        client=client,
        provider=provider,
        limit=limit,
        plugin=plugin,
        on_stop=on_stop,
        forward_headers=forward_headers,
        max_stops=max_stops,
        max_stop_bytes=max_stop_bytes,
        max_body_bytes=max_body_bytes,
    )
    default = _api(api).path
    assert default is not None
    return Route(path or default, handle, methods=["POST"])
