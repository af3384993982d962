"""An OpenAI-compatible gateway that enforces any number of stop sequences itself.

Clients send ``stop`` with as many sequences as they like, also for models that reject the
parameter; the gateway sends the upstream what it accepts (4 for OpenAI by default), forwards
the stream, and cuts every choice at the first stop of the full list, exactly as stopstream
specifies, whatever the upstream. The Anthropic Messages API is served the same way on
``/v1/messages`` (``stop_sequences``).

Run it (``pip install '.[gateway]'`` from the repository root)::

    python examples/gateway.py --port 8080 --upstream https://api.openai.com/v1

and point a client at it::

    client = openai.OpenAI(base_url="http://127.0.0.1:8080/v1")
    client.chat.completions.create(model=..., messages=..., stream=True,
                                   stop=["</answer>", "\\n\\nUser:", "###", "END", "<|im_end|>"])

Options: ``--stop-limit`` how many stops the upstream accepts (a number, ``openai``,
``gemini``, or ``none`` for models that reject ``stop``); ``--on-stop close`` (default: cancel
generation upstream as soon as every choice stopped) or ``drain`` (read the upstream to the
end, so a requested final usage chunk still arrives).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Literal, cast

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import stopstream
from stopstream.providers import split_stops
from stopstream.sse import awrap_anthropic, awrap_openai

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


def _openai_error(status: int, message: str, param: str | None = None) -> Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=status)


def _anthropic_error(status: int, message: str) -> Response:
    error = {"type": "invalid_request_error", "message": message}
    return JSONResponse({"type": "error", "error": error}, status_code=status)


def create_app(
    upstream: str = "https://api.openai.com/v1",
    *,
    anthropic_upstream: str = "https://api.anthropic.com",
    stop_limit: int | str | None = "openai",
    anthropic_stop_limit: int | str | None = 0,
    on_stop: Literal["close", "drain"] = "close",
    timeout: float = 600.0,
) -> Starlette:
    """The gateway as an ASGI app.

    ``upstream``: the OpenAI-compatible base URL (ending in ``/v1``); ``anthropic_upstream``:
    the Anthropic API's base URL. ``stop_limit`` / ``anthropic_stop_limit``: how many stops to
    send each upstream (see ``stopstream.providers.split_stops``); every stop is enforced here
    in any case. The Anthropic route sends none by default, so stops behave the same on both
    routes. ``on_stop``: ``"close"`` or ``"drain"``, see ``stopstream.openai``.
    """
    if on_stop not in ("close", "drain"):
        raise ValueError(f"on_stop must be 'close' or 'drain', not {on_stop!r}")
    clients: list[httpx.AsyncClient] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0)) as client:
            clients.append(client)
            try:
                yield
            finally:
                clients.clear()

    async def forward(
        request: Request, url: str, payload: dict[str, Any], stream: bool
    ) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        client = clients[0]
        outgoing = client.build_request("POST", url, json=payload, headers=headers)
        return await client.send(outgoing, stream=stream)

    async def passthrough(response: httpx.Response) -> Response:
        content = await response.aread()
        await response.aclose()
        media_type = response.headers.get("content-type", "application/json")
        return Response(content, status_code=response.status_code, media_type=media_type)

    async def chat_completions(request: Request) -> Response:
        try:
            payload = await request.json()
        except ValueError:
            return _openai_error(400, "The request body is not valid JSON.")
        if not isinstance(payload, dict):
            return _openai_error(400, "The request body must be a JSON object.")
        try:
            stops = stopstream.StopSet(payload.get("stop"))
            to_upstream, _rest = split_stops(stops, stop_limit)
        except (TypeError, ValueError) as exc:
            return _openai_error(400, f"Invalid 'stop': {exc}", "stop")
        if to_upstream:
            payload["stop"] = to_upstream
        else:
            payload.pop("stop", None)
        stream = bool(payload.get("stream"))
        try:
            response = await forward(request, f"{upstream}/chat/completions", payload, stream)
        except httpx.HTTPError as exc:
            return _openai_error(502, f"Upstream error: {exc}")
        if response.status_code != 200:
            return await passthrough(response)
        if not stream:
            return JSONResponse(_truncate_completion(response.json(), stops))
        n = payload.get("n")
        body = awrap_openai(
            UpstreamBody(response),
            stops,
            on_stop=on_stop,
            n=n if isinstance(n, int) and n > 1 else None,
        )
        return _relay(body, response)

    async def messages(request: Request) -> Response:
        try:
            payload = await request.json()
        except ValueError:
            return _anthropic_error(400, "The request body is not valid JSON.")
        if not isinstance(payload, dict):
            return _anthropic_error(400, "The request body must be a JSON object.")
        try:
            stops = stopstream.StopSet(payload.get("stop_sequences"))
            to_upstream, _rest = split_stops(stops, anthropic_stop_limit)
        except (TypeError, ValueError) as exc:
            return _anthropic_error(400, f"stop_sequences: {exc}")
        if to_upstream:
            payload["stop_sequences"] = to_upstream
        else:
            payload.pop("stop_sequences", None)
        stream = bool(payload.get("stream"))
        try:
            response = await forward(request, f"{anthropic_upstream}/v1/messages", payload, stream)
        except httpx.HTTPError as exc:
            return _anthropic_error(502, f"Upstream error: {exc}")
        if response.status_code != 200:
            return await passthrough(response)
        if not stream:
            return JSONResponse(_truncate_message(response.json(), stops))
        body = awrap_anthropic(UpstreamBody(response), stops, on_stop=on_stop)
        return _relay(body, response)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def _relay(body: AsyncIterable[bytes], response: httpx.Response) -> StreamingResponse:
    """Stream ``body`` to the client and close it and the upstream however the response ends.

    Starlette cancels the response task when the client disconnects; the ``finally`` block then
    closes the upstream at once, rather than whenever the generator is garbage collected.
    """

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for piece in body:
                yield piece
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()
            await response.aclose()

    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return StreamingResponse(relay(), media_type="text/event-stream", headers=headers)


def _truncate_completion(data: Any, stops: stopstream.StopSet) -> Any:
    """Apply the stops to a non-streaming chat completion."""
    choices = data.get("choices") if isinstance(data, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            continue
        text, stop = stopstream.truncate(message["content"], stops)
        if stop is not None:
            message["content"] = text
            choice["finish_reason"] = "stop"
            choice["stop_reason"] = stop
    return data


def _truncate_message(data: Any, stops: stopstream.StopSet) -> Any:
    """Apply the stops to a non-streaming message: the first text block with a stop ends it."""
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, list):
        return data
    for position, block in enumerate(content):
        if not (isinstance(block, dict) and block.get("type") == "text"):
            continue
        text, stop = stopstream.truncate(block.get("text") or "", stops)
        if stop is not None:
            block["text"] = text
            del content[position + 1 :]
            data["stop_reason"] = "stop_sequence"
            data["stop_sequence"] = stop
            break
    return data


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--upstream", default="https://api.openai.com/v1")
    parser.add_argument("--anthropic-upstream", default="https://api.anthropic.com")
    parser.add_argument("--stop-limit", default="openai", help="a number, openai, gemini, none")
    parser.add_argument("--on-stop", choices=("close", "drain"), default="close")
    args = parser.parse_args()
    limit: int | str = int(args.stop_limit) if args.stop_limit.isdigit() else args.stop_limit
    app = create_app(
        args.upstream.rstrip("/"),
        anthropic_upstream=args.anthropic_upstream.rstrip("/"),
        stop_limit=limit,
        on_stop=cast(Literal["close", "drain"], args.on_stop),
    )
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
