"""What hostile stop options do to the other streams on a served vLLM with the plugin, in wall
time: a victim stream's gaps between chunks and ``/health``'s waits (polled every 50 ms), while
another client sends requests back to back, first without stop options (quiet), then the worst
allowed ones and over-bound ones (loud). Also the API servers' CPU time a request, the measure
``tests_vllm/test_hostile.py`` asserts.

Wall time is what users feel, and what a shared machine's other load inflates: on this two-core
machine the quiet run's 99th-percentile gap ranged from 5 ms to 7 s between runs, from other
work alone. So it is measured here, at low load (say the load with the figures), and never
asserted. The server is the tests' (the tiny model, two API servers, CPU).

    .venv-vllm/bin/python benches/vllm_pace.py [--quick] [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests_vllm"))
# The tests' server, tiny model and hostile requests (modules of tests_vllm/, found through the
# path above; typed Any, as this file is type-checked where vLLM is not installed).
served: Any = importlib.import_module("served")
tiny_model: Any = importlib.import_module("tiny_model")
hostile: Any = importlib.import_module("hostile")


def p99(values: list[float]) -> float:
    """The 99th percentile: what all but the rarest 1% stay within (0 for no values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


class Pace:
    """A victim stream's gaps between chunks and ``/health``'s waits over one phase."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url, self.seconds = url, seconds
        self.gaps: list[float] = []
        self.waits: list[float] = []
        self.sent = 0

    def victim(self, stop: threading.Event) -> None:
        body = {
            "model": "tiny",
            "prompt": "victim",
            "max_tokens": 3000,
            "ignore_eos": True,
            "stream": True,
            "stop": ["never-in-this-text"],
        }
        req = urllib.request.Request(
            self.url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            last = None
            for line in r:
                if not line.startswith(b"data:"):
                    continue
                now = time.perf_counter()
                if last is not None:
                    self.gaps.append(now - last)
                last = now
                if stop.is_set():
                    break

    def health(self, stop: threading.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            with urllib.request.urlopen(self.url + "/health", timeout=120):
                pass
            self.waits.append(time.perf_counter() - start)
            time.sleep(0.05)

    def run(self, load: Callable[[Pace, threading.Event], None]) -> Pace:
        stop = threading.Event()
        threads = [
            threading.Thread(target=self.victim, args=(stop,)),
            threading.Thread(target=self.health, args=(stop,)),
            threading.Thread(target=load, args=(self, stop)),
        ]
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        stop.set()
        for t in threads:
            t.join(180)
        self.gaps = self.gaps[5:]  # the stream's start, not its pace
        return self

    def row(self, name: str) -> str:
        return (
            f"| {name} | {self.sent} | {p99(self.gaps) * 1000:.0f} / "
            f"{max(self.gaps, default=0) * 1000:.0f} | {p99(self.waits) * 1000:.0f} / "
            f"{max(self.waits, default=0) * 1000:.0f} |"
        )


def plain(pace: Pace, stop: threading.Event) -> None:
    while not stop.is_set():
        status, text, _ = hostile.post(pace.url, hostile.request({}))
        assert status == 200, text[:300]
        pace.sent += 1


def loud(pace: Pace, stop: threading.Event) -> None:
    k = 0
    while not stop.is_set():
        k += 1
        status, text, _ = hostile.post(pace.url, hostile.request(hostile.worst_allowed(k)))
        assert status == 200, text[:300]
        options = hostile.OVER_BOUND[k % len(hostile.OVER_BOUND)][1]
        status, _, _ = hostile.post(pace.url, hostile.request(options))
        assert status == 400
        pace.sent += 2


def cpu_cost(server: Any, make: Callable[[int], Any], count: int) -> float:
    """The API servers' CPU seconds a request (all their threads)."""
    psutil: Any = importlib.import_module("psutil")  # vLLM's dependency
    procs = [psutil.Process(pid) for pid in server.api_server_pids()]

    def spent() -> float:
        return sum(sum(p.cpu_times()[:2]) for p in procs)

    before = spent()
    for k in range(count):
        hostile.post(server.url, hostile.request(make(k)))
    return (spent() - before) / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    parser.add_argument("--seconds", type=float, default=6.0, help="each phase's length")
    parser.add_argument("--rounds", type=int, default=3, help="quiet/loud pairs")
    args = parser.parse_args()
    seconds, rounds = (2.0, 1) if args.quick else (args.seconds, args.rounds)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model.make_model(Path(tmp) / "model")
        work = Path(tmp) / "server"
        work.mkdir()
        with served.running_server(model, work, "--api-server-count", "2") as server:
            Pace(server.url, 2.0 if args.quick else 3.0).run(plain)  # the engine's warm-up
            print(f"load average at start: {os.getloadavg()[0]:.1f}")
            print("| phase | requests | victim gap p99 / worst (ms) | /health p99 / worst (ms) |")
            print("|---|---|---|---|")
            for r in range(rounds):
                print(Pace(server.url, seconds).run(plain).row(f"quiet {r + 1}"), flush=True)
                print(Pace(server.url, seconds).run(loud).row(f"loud {r + 1}"), flush=True)
            count = 5 if args.quick else 20
            base = cpu_cost(server, lambda k: {}, count)
            worst = cpu_cost(server, lambda k: hostile.worst_allowed(50_000 + k), count)
            bounds = hostile.OVER_BOUND
            over = cpu_cost(server, lambda k: bounds[k % len(bounds)][1], count)
            print(
                f"API-server CPU a request: plain {base * 1000:.1f} ms, worst allowed "
                f"{worst * 1000:.1f} ms, over a bound {over * 1000:.1f} ms ({count} each)"
            )
            print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
