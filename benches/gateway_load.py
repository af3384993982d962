"""Load through the example gateway against the same load sent straight to the fake upstream.

Usage (from the repository root, with the gateway extra installed)::

    python benches/gateway_load.py            # 3 interleaved rounds of 600 requests: ~1 min
    python benches/gateway_load.py --quick    # 1 round of 200 requests: ~15 s
    python benches/gateway_load.py --gateway path/to/other/gateway.py   # compare a version

The fake model server (``tests/fake_upstream.py``) and the gateway (``examples/gateway.py``)
each run as a real uvicorn server in a process of its own on 127.0.0.1; this process is the
load generator: streaming chat completions at a fixed concurrency (100 by default), each a
stream of ``--events`` content deltas paced ``--delay`` seconds apart by the upstream, with six
stops (none fires, so both paths carry the same text). It reports requests per second and the
time to the first body byte (p50, p99) of each path, and what the gateway adds. Rounds
alternate direct / gateway so that other work on the machine weighs on both alike; the load
average is printed with the results. Every response is checked (status 200, the whole text,
``data: [DONE]``): the process exits with status 2 when one is wrong.
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


@dataclass
class Result:
    """One path's measurements, over all its rounds."""

    seconds: float = 0.0
    requests: int = 0
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


@contextmanager
def server(args: list[str], port: int) -> Iterator[None]:
    # Quiet: the gateway logs every request; its errors would show as wrong responses.
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port, proc)
        yield
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


async def one_request(conn: Connection, payload: bytes, events: int, result: Result) -> None:
    try:
        status, ttfb, body = await conn.post("/v1/chat/completions", payload)
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
    port: int, stops: list[str], events: int, requests: int, concurrency: int, result: Result
) -> None:
    payload = json.dumps({"model": "fake", "messages": [], "stream": True, "stop": stops})
    body = payload.encode()
    conns = [Connection(port) for _ in range(concurrency)]
    left = requests

    async def worker(conn: Connection, sink: Result) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one_request(conn, body, events, sink)

    try:
        # Warm up: open the connections, fill caches.
        warm = Result()
        await asyncio.gather(*(one_request(c, body, events, warm) for c in conns))
        result.failures += warm.failures
        start = time.perf_counter()
        await asyncio.gather(*(worker(c, result) for c in conns))
        result.seconds += time.perf_counter() - start
        result.requests += requests
    finally:
        for conn in conns:
            conn.close()


def report(direct: Result, gateway: Result, args: argparse.Namespace) -> None:
    print(
        f"gateway load: {args.requests} requests x {args.rounds} round(s) per path at "
        f"concurrency {args.concurrency}, {args.events} events {args.delay * 1000:g} ms apart; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    print()
    print("| path | requests/s | TTFB p50 | TTFB p99 |")
    print("|---|---:|---:|---:|")
    for name, r in (("direct", direct), ("gateway", gateway)):
        print(
            f"| {name} | {r.rps:.0f} | {r.quantile(0.5) * 1000:.1f} ms "
            f"| {r.quantile(0.99) * 1000:.1f} ms |"
        )
    ratio = gateway.rps / direct.rps if direct.rps else 0.0
    p50 = (gateway.quantile(0.5) - direct.quantile(0.5)) * 1000
    p99 = (gateway.quantile(0.99) - direct.quantile(0.99)) * 1000
    print()
    print(
        f"gateway/direct throughput: {ratio:.2f}x; added TTFB: p50 {p50:+.1f} ms, p99 {p99:+.1f} ms"
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
    args = parser.parse_args(argv)
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream, args.events, args.delay)
        return 0
    args.requests = args.requests or (200 if args.quick else 600)
    args.rounds = args.rounds or (1 if args.quick else 3)
    upstream_port, gateway_port = free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    direct, gateway = Result(), Result()
    upstream_args = [__file__, "--serve-upstream", str(upstream_port)]
    upstream_args += ["--events", str(args.events), "--delay", str(args.delay)]
    gateway_args = [str(args.gateway), "--port", str(gateway_port)]
    gateway_args += ["--upstream", f"{upstream_url}/v1"]
    with server(upstream_args, upstream_port), server(gateway_args, gateway_port):
        for _ in range(args.rounds):
            for port, stops, result in (
                (upstream_port, STOPS[:4], direct),
                (gateway_port, STOPS, gateway),
            ):
                asyncio.run(load(port, stops, args.events, args.requests, args.concurrency, result))
    report(direct, gateway, args)
    failures = direct.failures + gateway.failures
    if failures:
        print(f"\n{len(failures)} wrong responses, e.g. {failures[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
