"""An OpenAI-compatible gateway that enforces any number of stop sequences itself.

Clients send ``stop`` with as many sequences as they like, also for models that reject the
parameter; the gateway sends the upstream what it accepts (4 for OpenAI by default), forwards
the stream, and cuts every choice at the first stop of the full list, exactly as stopstream
specifies, whatever the upstream. The Anthropic Messages API is served the same way on
``/v1/messages`` (``stop_sequences``), and the Responses API on ``/v1/responses``: that API has
no ``stop`` parameter at all, so the gateway takes one (``extra_body={"stop": [...]}`` with the
``openai`` client), sends none upstream and enforces them all. Each route is a
``stopstream.asgi.route``; what each upstream is sent is decided per provider and model by
``stopstream.providers.split_stops``.

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
upstream connections at once, and the timeouts (``stopstream.asgi.UpstreamPool``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from starlette.applications import Starlette

from stopstream import asgi
from stopstream.providers import split_stops


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
    """The gateway as an ASGI app: ``/v1/chat/completions`` and ``/v1/responses`` go to
    ``upstream`` (an OpenAI-style base URL, ending in ``/v1``), ``/v1/messages`` to
    ``anthropic_upstream``. ``stop_limit`` / ``anthropic_stop_limit``: what each is sent, a
    count or a provider name (``split_stops``); the Responses route sends none. A bad option
    is a ``ValueError`` naming it."""
    checks: list[tuple[str, Any, Callable[[Any], object]]] = [
        ("upstream", upstream, _url),
        ("anthropic_upstream", anthropic_upstream, _url),
        ("stop_limit", stop_limit, _stop_limit),
        ("anthropic_stop_limit", anthropic_stop_limit, _stop_limit),
    ]
    for name, value, check in checks:
        try:
            check(value)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"{name}: {exc}") from None
    pool = asgi.UpstreamPool(
        max_connections,
        timeout=timeout,
        connect_timeout=connect_timeout,
        pool_timeout=pool_timeout,
    )
    routes: list[tuple[asgi.Api, str, int | str | None]] = [
        ("chat", upstream, stop_limit),
        ("messages", anthropic_upstream, anthropic_stop_limit),
        ("responses", upstream, "openai-responses"),  # the API has no `stop`: none upstream
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with pool:
            yield

    return Starlette(
        routes=[
            asgi.route(api, url, client=pool, provider=limit, on_stop=on_stop)
            for api, url, limit in routes
        ],
        lifespan=lifespan,
    )


def _stop_limit(value: int | str | None) -> int | str | None:
    """A count or a provider name, checked now rather than per request."""
    limit = int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else value
    try:
        split_stops(None, limit)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return limit


def _url(value: str) -> str:
    try:
        asgi.upstream_url("chat", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("upstream: ")) from None
    return value.rstrip("/")


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, every value checked (a bad one: usage message, exit status 2)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=_port, default=8080)
    add("--upstream", type=_url, default="https://api.openai.com/v1")
    add("--anthropic-upstream", type=_url, default="https://api.anthropic.com")
    add(
        "--stop-limit",
        type=_stop_limit,
        default="openai",
        help="stops sent to the OpenAI upstream: a number or a provider name (openai, none, ...; "
        "default openai: per the request's model)",
    )
    add(
        "--anthropic-stop-limit",
        type=_stop_limit,
        default="anthropic",
        help="stops sent to the Anthropic upstream (default anthropic: all but whitespace-only)",
    )
    add("--on-stop", choices=("close", "drain"), default="close")
    add(
        "--max-connections",
        type=_positive(int),
        default=1000,
        help="upstream connections at once, so concurrent calls (default 1000)",
    )
    add(
        "--timeout",
        type=_positive(float),
        default=600.0,
        help="seconds to wait for the upstream's next bytes (default 600)",
    )
    add("--connect-timeout", type=_positive(float), default=10.0, help="(default 10)")
    add(
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
        on_stop=args.on_stop,
        timeout=args.timeout,
        connect_timeout=args.connect_timeout,
        pool_timeout=args.pool_timeout,
        max_connections=args.max_connections,
    )
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
