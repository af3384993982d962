"""Load through the example gateway against the same load sent straight to the fake upstream,
and the gateway's CPU with stops against its own pass-through twin.

Usage (from the repository root, with the gateway extra installed)::

    python benches/gateway_load.py            # 4 interleaved rounds of 600 requests: ~2 min
    python benches/gateway_load.py --quick    # 1 round of 200 requests: ~15 s
    python benches/gateway_load.py --gateway path/to/other/gateway.py   # compare a version

(``--gateway``: a program with the example's ``create_app(upstream)``.)

The fake model server (``tests/fake_upstream.py``) and the gateway (``examples/gateway.py``)
each run as a real uvicorn server in a process of its own on 127.0.0.1; this process is the
load generator: streaming chat completions at a fixed concurrency (100 by default), each a
stream of ``--events`` content deltas paced ``--delay`` seconds apart by the upstream, with six
stops (none fires, so both paths carry the same text). It reports requests per second and the
time to the first body byte (p50, p99) of each path, and what the gateway adds.

A third path goes through the gateway's pass-through twin: one more route in the gateway's
process, ``/twin/v1/chat/completions``, the same ``stopstream.asgi`` route told that its
upstream enforces every stop (``provider="vllm", plugin=True``) and sent the 4 stops the
gateway sends upstream. It relays the upstream's bytes unchanged, through the same server and
HTTP stack, and the upstream gets the very requests it gets from the gateway (so both relay
the same paced streams). The process's CPU time (user + system, from ``/proc``) per request of
the gateway path against the twin's is stopstream's share of the relay: reading, bounding and
splitting the stops, and the SSE adapter over every event. Rounds alternate the paths (the
twin and the gateway take turns going first) so that other work on the machine weighs on all
alike; the load (``uptime``) is printed with the results. Every response is checked (status
200, the whole text, ``data: [DONE]``): the process exits with status 2 when one is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GATEWAY = ROOT / "examples" / "gateway.py"
STOPS = ["###", "END", "<|im_end|>", "Observation:", "</answer>", "\n\nUser:"]
TEXT_PIECE = " token"
CHAT = "/v1/chat/completions"
TWIN = "/twin/v1/chat/completions"


@dataclass
class Result:
    """One path's measurements, over all its rounds."""

    seconds: float = 0.0
    requests: int = 0
    cpu: float = 0.0  # the relaying process's CPU seconds over the rounds (Linux only)
    ttfb: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def quantile(self, q: float) -> float:
        ordered = sorted(self.ttfb)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port} after {timeout} s")


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time of process ``pid`` (0.0 where ``/proc`` is missing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {os.getloadavg()[0]:.2f}"


@contextmanager
def server(args: list[str], port: int) -> Iterator[int]:
    # Quiet: the gateway logs every request; its errors would show as wrong responses.
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port, proc)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def serve_upstream(port: int, events: int, delay: float) -> None:
    """The fake model server, streaming ``events`` content deltas per request."""
    sys.path.insert(0, str(ROOT / "tests"))
    import uvicorn

    from fake_upstream import ChatScript, FakeUpstream, text_deltas

    fake = FakeUpstream()
    fake.chat = ChatScript([text_deltas(*[TEXT_PIECE] * events)])
    fake.delay = delay
    fake.split_events = False
    uvicorn.run(fake, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def serve_gateway(port: int, upstream: str, program: Path) -> None:
    """The gateway program's app, served as its ``main`` serves it, with the twin's route."""
    import contextlib
    import importlib.util
    from collections.abc import AsyncIterator

    import uvicorn
    from starlette.applications import Starlette

    from stopstream import asgi

    spec = importlib.util.spec_from_file_location("gateway_under_test", program)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app: Starlette = module.create_app(upstream)
    pool = asgi.UpstreamPool()  # as the gateway's, with its defaults
    # With the plugin's split, what the upstream's `stop` takes is all there is: 4 stops go
    # upstream, none is left to enforce here, and the route forwards the body's bytes.
    twin = asgi.route("chat", upstream, client=pool, provider="vllm", plugin=True, path=TWIN)
    app.router.routes.append(twin)
    gateway_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with gateway_lifespan(app), pool:
            yield

    app.router.lifespan_context = lifespan
    uvicorn.run(app, host="127.0.0.1", port=port)


class Connection:
    """A keep-alive HTTP/1.1 connection of the load generator.

    A few lines over asyncio streams rather than an HTTP client library, so that the load
    generator costs little next to the servers it measures (on 2 cores they share the CPU).
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, float, bytes]:
        """Status, seconds to the first body byte, and the body (chunked transfer decoded)."""
        if self.streams is None:
            self.streams = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self.streams
        start = time.perf_counter()
        writer.write(
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = head.lower()
        out = bytearray()
        first = 0.0
        if b"transfer-encoding: chunked" in headers:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if not first:
                    first = time.perf_counter() - start
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                out += (await reader.readexactly(size + 2))[:-2]
        else:
            length = int(headers.split(b"content-length:")[1].split(b"\r\n")[0])
            out += await reader.readexactly(length)
            first = time.perf_counter() - start
        if b"connection: close" in headers:
            writer.close()
            self.streams = None
        return status, first, bytes(out)

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()


async def one_request(
    conn: Connection, path: str, payload: bytes, events: int, result: Result
) -> None:
    try:
        status, ttfb, body = await conn.post(path, payload)
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        conn.close()
        conn.streams = None
        result.failures.append(f"{type(exc).__name__}: {exc}")
        return
    # Cheap checks (the client must not be the bottleneck): every token, then the end.
    tokens = body.count(TEXT_PIECE.encode() + b'"')
    if status != 200 or tokens != events or not body.rstrip().endswith(b"data: [DONE]"):
        result.failures.append(f"status {status}, {tokens} tokens of {events}: {body[:200]!r}")
        return
    result.ttfb.append(ttfb)


async def load(
    port: int,
    path: str,
    stops: list[str],
    args: argparse.Namespace,
    result: Result,
    pid: int | None = None,
) -> None:
    """``args.requests`` calls to ``path`` at ``args.concurrency``; ``pid``: the process whose
    CPU time they cost."""
    events = args.events
    payload = json.dumps({"model": "fake", "messages": [], "stream": True, "stop": stops})
    body = payload.encode()
    conns = [Connection(port) for _ in range(args.concurrency)]
    left = args.requests

    async def worker(conn: Connection, sink: Result) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one_request(conn, path, body, events, sink)

    try:
        # Warm up: open the connections, fill caches.
        warm = Result()
        await asyncio.gather(*(one_request(c, path, body, events, warm) for c in conns))
        result.failures += warm.failures
        cpu = cpu_seconds(pid) if pid is not None else 0.0
        start = time.perf_counter()
        await asyncio.gather(*(worker(c, result) for c in conns))
        result.seconds += time.perf_counter() - start
        result.requests += args.requests
        if pid is not None:
            result.cpu += cpu_seconds(pid) - cpu
    finally:
        for conn in conns:
            conn.close()


def report(
    direct: Result, gateway: Result, twin: Result, args: argparse.Namespace, load: str
) -> None:
    print(
        f"gateway load: {args.requests} requests x {args.rounds} round(s) per path at "
        f"concurrency {args.concurrency}, {args.events} events {args.delay * 1000:g} ms apart; "
        f"{os.cpu_count()} cores"
    )
    print(f"uptime before: {load}")
    print(f"uptime after:  {uptime()}")
    print()
    print("| path | requests/s | TTFB p50 | TTFB p99 | relay CPU per request |")
    print("|---|---:|---:|---:|---:|")
    for name, r in (("direct", direct), ("gateway", gateway), ("twin", twin)):
        cpu = f"{r.cpu / r.requests * 1e6:.0f} µs" if r.cpu and r.requests else "-"
        print(
            f"| {name} | {r.rps:.0f} | {r.quantile(0.5) * 1000:.1f} ms "
            f"| {r.quantile(0.99) * 1000:.1f} ms | {cpu} |"
        )
    ratio = gateway.rps / direct.rps if direct.rps else 0.0
    p50 = (gateway.quantile(0.5) - direct.quantile(0.5)) * 1000
    p99 = (gateway.quantile(0.99) - direct.quantile(0.99)) * 1000
    print()
    print(
        f"gateway/direct throughput: {ratio:.2f}x; added TTFB: p50 {p50:+.1f} ms, p99 {p99:+.1f} ms"
    )
    if gateway.cpu and twin.cpu:
        share = (gateway.cpu / gateway.requests) / (twin.cpu / twin.requests)
        print(
            f"gateway CPU / pass-through twin's, per request: {share:.2f}x "
            f"({gateway.cpu:.2f} s / {gateway.requests} requests against "
            f"{twin.cpu:.2f} s / {twin.requests})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one short round (smoke run)")
    parser.add_argument("--requests", type=int, help="requests per round and path")
    parser.add_argument("--rounds", type=int, help="rounds per path")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--events", type=int, default=40, help="content deltas per stream")
    parser.add_argument("--delay", type=float, default=0.005, help="seconds between events")
    parser.add_argument("--gateway", type=Path, default=GATEWAY, help="the gateway program")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-gateway", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream, args.events, args.delay)
        return 0
    if args.serve_gateway is not None:
        serve_gateway(args.serve_gateway, args.upstream, args.gateway)
        return 0
    args.requests = args.requests or (200 if args.quick else 600)
    args.rounds = args.rounds or (1 if args.quick else 4)
    upstream_port, gateway_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    direct, gateway, twin = Result(), Result(), Result()
    upstream_args = [__file__, "--serve-upstream", str(upstream_port)]
    upstream_args += ["--events", str(args.events), "--delay", str(args.delay)]
    gateway_args = [__file__, "--serve-gateway", str(gateway_port), "--gateway", str(args.gateway)]
    gateway_args += ["--upstream", f"{upstream_url}/v1"]
    load_before = uptime()
    with server(upstream_args, upstream_port), server(gateway_args, gateway_port) as pid:
        for round_ in range(args.rounds):
            paths = [(CHAT, STOPS, gateway), (TWIN, STOPS[:4], twin)]
            if round_ % 2:
                paths.reverse()  # neither of the two always goes first
            asyncio.run(load(upstream_port, CHAT, STOPS[:4], args, direct))
            for path, stops, result in paths:
                asyncio.run(load(gateway_port, path, stops, args, result, pid))
    report(direct, gateway, twin, args, load_before)
    failures = direct.failures + gateway.failures + twin.failures
    if failures:
        print(f"\n{len(failures)} wrong responses, e.g. {failures[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
