"""Options any client can send, against the running server (contract §10.2): every request over a
bound is a 400 naming it, at once; the worst request within the bounds does not hold up the
other streams on the server; and what requests leave behind stays bounded.

The figures are printed (``pytest -s``) for the record; the assertions carry margins for a
shared two-core machine, whose own noise is larger than anything the options cost.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from served import Server

from stopstream._vllm_options import BOUND_ENV, Bounds

B = Bounds()


def post(server: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, str, float]:
    """POST a completion; the status, the body and the seconds it took."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        server + "/v1/completions", data=data, headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            text = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    return status, text, time.perf_counter() - start


def request(options: Any, max_tokens: int = 1) -> dict[str, Any]:
    raw = options if isinstance(options, str) else json.dumps(options)
    return {
        "model": "tiny",
        "prompt": "hostile",
        "max_tokens": max_tokens,
        "vllm_xargs": {"stopstream": raw},
    }


def worst_allowed(k: int) -> dict[str, Any]:
    """Every bound at its limit, all of it new to the server (nothing cached helps): the most
    stops, the most stop bytes, and the most regex stops of the most costly kind to compile
    within the compiled-size bound (about 1.6 ms each)."""
    regexes = [{"regex": rf"(\w\s?){{1,3}}z{k}x{i}"} for i in range(B.regexes)]
    pattern_bytes = sum(len(r["regex"]) for r in regexes)
    count = B.stops - B.regexes
    size = (B.stop_bytes - pattern_bytes) // count
    literals = [f"{k:06}-{i:05}-".ljust(size, "q") for i in range(count)]
    return {"stop": literals + regexes}


OVER_BOUND = [
    ("stops", {"stop": [f"s{i}" for i in range(B.stops + 1)]}),
    ("stop_bytes", {"stop": ["x" * (B.stop_bytes + 1)]}),
    ("regexes", {"stop": [{"regex": f"a{i}"} for i in range(B.regexes + 1)]}),
    ("pattern_bytes", {"stop": [{"regex": "a" * (B.pattern_bytes + 1)}]}),
    ("regex_size", {"stop": [{"regex": r"(\w+\s?){1,200}z"}]}),
    ("skip_pairs", {"skip": [["<", ">"]] * (B.skip_pairs + 1)}),
    ("option_bytes", {"stop": ["a"], "skip_until": "b" * B.option_bytes}),
    ("depth", "[" * (B.option_bytes // 2)),
]


@pytest.mark.parametrize(("bound", "options"), OVER_BOUND, ids=[b for b, _ in OVER_BOUND])
def test_a_request_over_a_bound_is_a_400_naming_it_at_once(
    served: Server, bound: str, options: Any
) -> None:
    times = []
    for _ in range(3):
        status, text, seconds = post(served.url, request(options))
        assert status == 400, (bound, status, text[:500])
        if bound == "depth":
            assert "nested too deeply" in text
        else:
            assert BOUND_ENV[bound] in text and str(getattr(B, bound)) in text, text[:500]
        times.append(seconds)
    print(f"\n400 for {bound}: best {min(times) * 1000:.1f} ms of {len(times)}")
    # Best of three: one request can meet the machine's own hiccup.
    assert min(times) < 0.1, times


def test_the_worst_allowed_request_is_served(served: Server) -> None:
    for k in range(3):
        status, text, seconds = post(served.url, request(worst_allowed(1000 + k), max_tokens=4))
        assert status == 200, text[:500]
        print(f"\nworst allowed request: {seconds * 1000:.1f} ms end to end")


def p99(values: list[float]) -> float:
    """The 99th percentile: what all but the rarest 1% stay within."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Pace:
    """A victim stream's gaps between chunks, and the waits for ``/health`` polled every 50 ms,
    over one phase."""

    def __init__(self, server: str, seconds: float) -> None:
        self.server, self.seconds = server, seconds
        self.gaps: list[float] = []
        self.waits: list[float] = []

    def victim(self, stop: threading.Event) -> None:
        body = {
            "model": "tiny",
            "prompt": "victim",
            "max_tokens": 3000,
            "ignore_eos": True,
            "stream": True,
            "stop": ["never-in-this-text"],
        }
        data = json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + "/v1/completions",
            data=data,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
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
            with urllib.request.urlopen(self.server + "/health", timeout=60):
                pass
            self.waits.append(time.perf_counter() - start)
            time.sleep(0.05)

    def run(self, load: Any = None) -> Pace:
        stop = threading.Event()
        threads = [
            threading.Thread(target=self.victim, args=(stop,)),
            threading.Thread(target=self.health, args=(stop,)),
        ]
        if load is not None:
            threads.append(threading.Thread(target=load, args=(stop,)))
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        stop.set()
        for t in threads:
            t.join(90)
        # The first gaps are the stream's start, not its pace.
        self.gaps = self.gaps[5:]
        return self

    @property
    def figures(self) -> tuple[float, float, float, float]:
        """The victim's 99th-percentile and worst gap, ``/health``'s 99th-percentile and worst
        wait."""
        return p99(self.gaps), max(self.gaps), p99(self.waits), max(self.waits)


def test_other_streams_keep_their_pace_while_the_worst_requests_arrive(served: Server) -> None:
    """The same run twice: a victim stream and ``/health`` polling while another client sends
    requests back to back, without stop options (quiet) and then the worst allowed ones and
    over-bound ones (loud). The quiet run has the same requests in the engine, so the
    difference is what the options cost the server.

    What is compared is the 99th percentile of the victim's gaps (and of ``/health``'s waits),
    with the worst ones printed: the worst gap of a run is the server's own pauses, with or
    without options. vLLM's API servers run full garbage collections over about 670,000
    objects, measured at 0.4-1.9 s each on this two-core machine under load, and the CPU
    engine stalls for seconds now and then; a run meets a few of them at most, so they stay
    above the 99th percentile, where a cost paid by every hostile request (tens a run) would
    not."""
    sent = {"allowed": 0, "over": 0, "plain": 0}

    def plain(stop: threading.Event) -> None:
        while not stop.is_set():
            status, text, _ = post(served.url, request({}))
            assert status == 200, text[:300]
            sent["plain"] += 1

    def hostile(stop: threading.Event) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            status, text, _ = post(served.url, request(worst_allowed(k)))
            assert status == 200, text[:300]
            sent["allowed"] += 1
            options = OVER_BOUND[k % len(OVER_BOUND)][1]
            status, _, _ = post(served.url, request(options))
            assert status == 400
            sent["over"] += 1

    # The engine's first batches mixing a prefill with a stream's steps take seconds on CPU
    # (its kernels warm up), whatever the requests carry: not part of either run. Each run is
    # made up to three times and its best one counts.
    Pace(served.url, 3).run(plain)
    rounds = []
    for _ in range(3):
        quiet = Pace(served.url, 6).run(plain).figures
        loud = Pace(served.url, 6).run(hostile).figures
        rounds.append((quiet, loud))
        print(
            f"\nround {len(rounds)}: victim gaps p99 {quiet[0] * 1000:.0f} ms quiet, "
            f"{loud[0] * 1000:.0f} ms loud (worst {quiet[1] * 1000:.0f} / {loud[1] * 1000:.0f}); "
            f"/health p99 {quiet[2] * 1000:.0f} ms quiet, {loud[2] * 1000:.0f} ms loud (worst "
            f"{quiet[3] * 1000:.0f} / {loud[3] * 1000:.0f})"
        )
        quiet_gap, quiet_wait = min(r[0][0] for r in rounds), min(r[0][2] for r in rounds)
        loud_gap, loud_wait = min(r[1][0] for r in rounds), min(r[1][2] for r in rounds)
        if loud_gap <= quiet_gap + 0.05 and loud_wait <= quiet_wait + 0.05:
            break
    print(
        f"\nbest of {len(rounds)}: victim gaps p99 {quiet_gap * 1000:.0f} ms quiet "
        f"({sent['plain']} plain requests), {loud_gap * 1000:.0f} ms loud ({sent['allowed']} "
        f"worst allowed and {sent['over']} over-bound requests); /health p99 "
        f"{quiet_wait * 1000:.0f} ms quiet, {loud_wait * 1000:.0f} ms loud"
    )
    assert sent["allowed"] >= 10
    assert loud_gap <= quiet_gap + 0.05
    assert loud_wait <= quiet_wait + 0.05


def test_api_server_memory_stays_flat_over_fresh_maximal_lists(served: Server) -> None:
    """200 requests, each with a maximal stop list never sent before: the API servers' memory
    after the second hundred is what it was after the first (what the plugin keeps is bounded
    in bytes; a finished request leaves nothing behind)."""
    import psutil

    procs = [psutil.Process(pid) for pid in served.api_server_pids()]
    assert len(procs) == 2

    def rss() -> float:
        return float(sum(p.memory_info().rss for p in procs)) / 2**20

    def send(first: int, count: int) -> None:
        for k in range(first, first + count):
            status, text, _ = post(served.url, request(worst_allowed(10_000 + k)))
            assert status == 200, text[:300]

    before = rss()
    send(0, 100)
    middle = rss()
    send(100, 100)
    after = rss()
    print(
        f"\nAPI servers' RSS: {before:.0f} MiB before, {middle:.0f} after 100 maximal lists, "
        f"{after:.0f} after 200"
    )
    assert after - middle < 16, (before, middle, after)
