"""An OpenAI-compatible gateway that enforces any number of stop sequences itself.

Clients send ``stop`` with as many sequences as they like, also for models that reject the
parameter; the gateway sends the upstream what it accepts (4 for OpenAI by default), forwards
the stream, and cuts every choice at the first stop of the full list, exactly as stopstream
specifies, whatever the upstream. The Anthropic Messages API is served the same way on
``/v1/messages`` (``stop_sequences``), and the Responses API on ``/v1/responses``: that API has
no ``stop`` parameter at all, so the gateway takes one (``extra_body={"stop": [...]}`` with the
``openai`` client), sends none upstream and enforces them all. What each upstream is sent is
decided per provider and model by ``stopstream.providers.split_stops``: at most 4 stops to
OpenAI, none to models that reject ``stop`` (o1, o3, o4-mini, the gpt-5 family), no
whitespace-only stop to Anthropic (its API rejects them; they are enforced here).

Run it (``pip install '.[gateway]'`` from the repository root)::

    python examples/gateway.py --port 8080 --upstream https://api.openai.com/v1

and point a client at it::

    client = openai.OpenAI(base_url="http://127.0.0.1:8080/v1")
    client.chat.completions.create(model=..., messages=..., stream=True,
                                   stop=["</answer>", "\\n\\nUser:", "###", "END", "<|im_end|>"])

Options (``--help`` lists them all; a bad value is a startup error, exit status 2):
``--stop-limit`` how many stops the upstream accepts (a number, or a provider name from
``stopstream.providers``: ``openai``, ``gemini``, ``none`` for models that reject ``stop``, ...;
with a name, the request's model picks the provider's model rules); ``--on-stop close`` (default:
cancel generation upstream as soon as every choice stopped) or ``drain`` (read the upstream to the
end, so a requested final usage chunk still arrives); ``--max-connections`` (default 1,000)
upstream connections at once, and the timeouts: ``--timeout`` (default 600 s) the longest wait for
the upstream's next bytes (a stream may be quiet for long while a model thinks),
``--connect-timeout`` (10 s), ``--pool-timeout`` (10 s: how long a request waits for a free
upstream connection when all are in use, then it is answered 503).

A client that goes away cancels its call at once, wherever it is: waiting for a connection,
for the upstream's headers or for its next chunk. The upstream connection is closed then, which
is how the upstream learns to stop generating.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Literal, NamedTuple, Protocol, cast

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

import stopstream
from stopstream import _streaming_apis as apis
from stopstream.providers import split_stops
from stopstream.sse import _awrap

OnStop = Literal["close", "drain"]

# Request headers passed on to the upstream (credentials and API selectors).
FORWARDED_HEADERS = (
    "authorization",
    "openai-organization",
    "openai-project",
    "x-api-key",
    "anthropic-version",
    "anthropic-beta",
)


class UpstreamBody:
    """An upstream response body as an async iterable whose ``aclose()`` closes the response.

    The adapters close their upstream when every stream has stopped: closing the response
    drops the connection, which is how the upstream learns to stop generating.
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._response.aiter_bytes()

    async def aclose(self) -> None:
        await self._response.aclose()


class UpstreamPool:
    """The upstream HTTP clients: ``max_connections`` connections, in clients of ``SHARD``.

    One httpx client with all the connections would cost more CPU than relaying the streams:
    httpcore 1.0's pool walks all its connections on every request and every response close,
    and, for each idle one, all of them again. At concurrency 100, with every connection kept
    alive, that bookkeeping took a quarter of the gateway's CPU time under
    ``benches/gateway_load.py``. Small clients keep each walk
    short. A call goes to the first client with a free connection, so that a load is served by
    as few connections as it needs, kept busy, and the others go idle and expire; the
    connection limit holds overall (when all are busy, a call waits in the least busy client).

    Every connection is kept open between calls (the pool's idle limit counts all connections,
    not the idle ones, so any lower limit closes connections that are needed again at once), and
    for ``KEEPALIVE`` seconds: less than the 5 s after which uvicorn and most Python and Node
    servers close an idle connection, so that the gateway drops it first rather than sending a
    request on a connection the upstream is closing (a 502 for the client).
    """

    SHARD = 16
    KEEPALIVE = 4.0

    def __init__(self, max_connections: int, timeout: httpx.Timeout) -> None:
        shards = -(-max_connections // self.SHARD)
        sizes = [max_connections // shards + (i < max_connections % shards) for i in range(shards)]
        tls = httpx.create_ssl_context()  # one for all: each loads the CA bundle (0.1 s)
        self._clients = [
            httpx.AsyncClient(
                verify=tls,
                timeout=timeout,
                limits=httpx.Limits(
                    max_connections=size,
                    max_keepalive_connections=size,
                    keepalive_expiry=self.KEEPALIVE,
                ),
            )
            for size in sizes
        ]
        self._sizes = sizes
        self._busy = [0] * shards
        self._stack = contextlib.AsyncExitStack()

    def acquire(self) -> tuple[httpx.AsyncClient, Callable[[], None]]:
        """A client for one call, and the function to call when the call is over."""
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
        for client in self._clients:
            await self._stack.enter_async_context(client)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


def _openai_error(status: int, message: str, param: str | None) -> Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=status)


def _anthropic_error(status: int, message: str, _param: str | None) -> Response:
    error = {"type": "invalid_request_error", "message": message}
    return JSONResponse({"type": "error", "error": error}, status_code=status)


class ClientBody(AsyncIterable[bytes], Protocol):
    """What an API's ``wrap`` returns: the SSE body for the client, closed after the call."""

    def aclose(self) -> Awaitable[None]: ...


class Api(NamedTuple):
    """One API the gateway serves: where its stops are in a request, how it answers an error,
    and the streaming API whose rules enforce the stops on its streamed and whole responses."""

    path: str
    stop_field: str  # the request's stop list
    stop_error: str  # the message of a bad stop list (``{}``: the error)
    stop_param: str | None  # the ``param`` an OpenAI-style error names
    error: Callable[[int, str, str | None], Response]
    api: apis.StreamingApi
    count_field: str | None = None  # the request's count of parallel streams (``n``)

    def truncate(self, response: Any, stops: stopstream.StopSet) -> Any:
        return self.api.truncate(response, stops)

    def wrap(
        self,
        body: UpstreamBody,
        stops: stopstream.StopSet,
        on_stop: OnStop,
        payload: dict[str, Any],
    ) -> ClientBody:
        """The client's body: the upstream's with the stops enforced."""
        count = payload.get(self.count_field) if self.count_field else None
        count = count if isinstance(count, int) and count > 1 else None
        return _awrap(self.api, body, stops, on_stop=on_stop, count=count)


CHAT = Api(
    "/v1/chat/completions", "stop", "Invalid 'stop': {}", "stop", _openai_error, apis.CHAT, "n"
)
MESSAGES = Api(
    "/v1/messages", "stop_sequences", "stop_sequences: {}", None, _anthropic_error, apis.MESSAGES
)
RESPONSES = Api(
    "/v1/responses", "stop", "Invalid 'stop': {}", "stop", _openai_error, apis.RESPONSES
)


def create_app(
    upstream: str = "https://api.openai.com/v1",
    *,
    anthropic_upstream: str = "https://api.anthropic.com",
    stop_limit: int | str | None = "openai",
    anthropic_stop_limit: int | str | None = "anthropic",
    on_stop: Literal["close", "drain"] = "close",
    timeout: float = 600.0,
    connect_timeout: float = 10.0,
    pool_timeout: float = 10.0,
    max_connections: int = 1000,
) -> Starlette:
    """The gateway as an ASGI app.

    ``upstream``: the OpenAI-compatible base URL (ending in ``/v1``); ``anthropic_upstream``:
    the Anthropic API's base URL (``/v1/responses`` goes to ``upstream``). ``stop_limit`` /
    ``anthropic_stop_limit``: what to send each upstream, a count or a provider name of
    ``stopstream.providers`` (then split per the request's model, see ``split_stops``); every
    stop is enforced here in any case. The Responses route never sends any (the API has no
    ``stop``). ``on_stop``: ``"close"`` or ``"drain"``, see ``stopstream.openai``.

    The upstream client (see ``UpstreamPool``): at most ``max_connections`` connections at once
    (a stream holds its connection for its whole length, so this is the number of concurrent
    calls; httpx's default is 100), all kept open between calls; ``timeout``: the longest wait
    for the upstream's next bytes (or to write to it), ``connect_timeout`` to connect,
    ``pool_timeout`` for a free connection (then the call is answered 503).

    Every option is checked here: a bad one is a ``ValueError`` naming it, before any request.
    """
    _check_options(
        upstream=upstream,
        anthropic_upstream=anthropic_upstream,
        stop_limit=stop_limit,
        anthropic_stop_limit=anthropic_stop_limit,
        on_stop=on_stop,
        timeout=timeout,
        connect_timeout=connect_timeout,
        pool_timeout=pool_timeout,
        max_connections=max_connections,
    )
    timeouts = httpx.Timeout(timeout, connect=connect_timeout, pool=pool_timeout)
    pools: list[UpstreamPool] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with UpstreamPool(max_connections, timeouts) as pool:
            pools.append(pool)
            try:
                yield
            finally:
                pools.clear()

    async def forward(
        request: Request,
        url: str,
        payload: dict[str, Any],
        stream: bool,
        closing: contextlib.AsyncExitStack,
    ) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        client, release = pools[0].acquire()
        closing.callback(release)
        outgoing = client.build_request("POST", url, json=payload, headers=headers)
        response = await client.send(outgoing, stream=stream)
        closing.push_async_callback(response.aclose)
        return response

    async def passthrough(response: httpx.Response) -> Response:
        content = await response.aread()
        await response.aclose()
        media_type = response.headers.get("content-type", "application/json")
        return Response(content, status_code=response.status_code, media_type=media_type)

    def route(api: Api, url: str, stop_limit: int | str | None) -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                payload = await request.json()
            except ValueError:
                return api.error(400, "The request body is not valid JSON.", None)
            if not isinstance(payload, dict):
                return api.error(400, "The request body must be a JSON object.", None)
            try:
                stops = stopstream.StopSet(payload.get(api.stop_field))
                to_upstream, _rest = split_stops(stops, stop_limit, _model(payload))
            except (TypeError, ValueError) as exc:
                return api.error(400, api.stop_error.format(exc), api.stop_param)
            if to_upstream:
                payload[api.stop_field] = to_upstream
            else:
                payload.pop(api.stop_field, None)
            stream = bool(payload.get("stream"))

            async def call(closing: contextlib.AsyncExitStack) -> Response | AsyncIterable[bytes]:
                try:
                    response = await forward(request, url, payload, stream, closing)
                except httpx.PoolTimeout:
                    return api.error(503, "The gateway is at its upstream connection limit.", None)
                except httpx.HTTPError as exc:
                    return api.error(502, f"Upstream error: {type(exc).__name__}: {exc}", None)
                if response.status_code != 200:
                    return await passthrough(response)
                if not stream:
                    return JSONResponse(api.truncate(response.json(), stops))
                body = api.wrap(UpstreamBody(response), stops, on_stop, payload)
                closing.push_async_callback(body.aclose)
                return body

            return Exchange(call)

        return Route(api.path, endpoint, methods=["POST"])

    return Starlette(
        routes=[
            route(CHAT, f"{upstream}/chat/completions", stop_limit),
            route(MESSAGES, f"{anthropic_upstream}/v1/messages", anthropic_stop_limit),
            # The Responses API has no `stop`: every stop is enforced here, none sent upstream.
            route(RESPONSES, f"{upstream}/responses", 0),
        ],
        lifespan=lifespan,
    )


Call = Callable[[contextlib.AsyncExitStack], Awaitable[Response | AsyncIterable[bytes]]]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class Exchange(Response):
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
                    await send(
                        {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                    )
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


def _model(payload: dict[str, Any]) -> str | None:
    model = payload.get("model")
    return model if isinstance(model, str) else None


def _check_options(
    *,
    upstream: str,
    anthropic_upstream: str,
    stop_limit: int | str | None,
    anthropic_stop_limit: int | str | None,
    on_stop: str,
    timeout: float,
    connect_timeout: float,
    pool_timeout: float,
    max_connections: int,
) -> None:
    """Raise ``ValueError`` naming the first bad option."""
    for name, url in (("upstream", upstream), ("anthropic_upstream", anthropic_upstream)):
        _check_url(name, url)
    for name, limit in (("stop_limit", stop_limit), ("anthropic_stop_limit", anthropic_stop_limit)):
        try:
            split_stops(None, limit)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: {exc}") from None
    if on_stop not in ("close", "drain"):
        raise ValueError(f"on_stop must be 'close' or 'drain', not {on_stop!r}")
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


def _check_url(name: str, url: str) -> None:
    """``ValueError`` unless ``url`` is an http(s) URL with a host (``name``: what it is for)."""
    where = f"{name}: " if name else ""
    try:
        parsed = httpx.URL(url)
    except (TypeError, httpx.InvalidURL) as exc:
        raise ValueError(f"{where}not a URL: {url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{where}not an http(s) URL with a host: {url!r}")


def _stop_limit(value: str) -> int | str:
    """``--stop-limit``: a count or a provider name, checked now rather than per request."""
    limit: int | str = int(value) if value.lstrip("-").isdigit() else value
    try:
        split_stops(None, limit)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return limit


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(value: str) -> int | float:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
        if not number > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {value}")
        return number

    return parse


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0 to 65535): {value!r}")
    return int(value)


def _url(value: str) -> str:
    try:
        _check_url("", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value.rstrip("/")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, every value checked (a bad one: usage message, exit status 2)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_port, default=8080)
    parser.add_argument("--upstream", type=_url, default="https://api.openai.com/v1")
    parser.add_argument("--anthropic-upstream", type=_url, default="https://api.anthropic.com")
    parser.add_argument(
        "--stop-limit",
        type=_stop_limit,
        default="openai",
        help="stops sent to the OpenAI upstream: a number or a provider name (openai, none, ...; "
        "default openai: per the request's model)",
    )
    parser.add_argument(
        "--anthropic-stop-limit",
        type=_stop_limit,
        default="anthropic",
        help="stops sent to the Anthropic upstream (default anthropic: all but whitespace-only)",
    )
    parser.add_argument("--on-stop", choices=("close", "drain"), default="close")
    parser.add_argument(
        "--max-connections",
        type=_positive(int),
        default=1000,
        help="upstream connections at once, so concurrent calls (default 1000)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive(float),
        default=600.0,
        help="seconds to wait for the upstream's next bytes (default 600)",
    )
    parser.add_argument(
        "--connect-timeout", type=_positive(float), default=10.0, help="(default 10)"
    )
    parser.add_argument(
        "--pool-timeout",
        type=_positive(float),
        default=10.0,
        help="seconds a call waits for a free upstream connection, then 503 (default 10)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args = parse_args(argv)
    app = create_app(
        args.upstream,
        anthropic_upstream=args.anthropic_upstream,
        stop_limit=args.stop_limit,
        anthropic_stop_limit=args.anthropic_stop_limit,
        on_stop=cast(Literal["close", "drain"], args.on_stop),
        timeout=args.timeout,
        connect_timeout=args.connect_timeout,
        pool_timeout=args.pool_timeout,
        max_connections=args.max_connections,
    )
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
