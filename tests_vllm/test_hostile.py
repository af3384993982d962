"""Options any client can send, against the running server (contract §10.2): every request over a
bound is a 400 naming it, refused before anything is compiled; the worst request within the
bounds costs the server milliseconds, so it cannot hold up the other streams; and what requests
leave behind stays bounded.

The figures are printed (``pytest -s``) for the record. What is asserted is CPU time and memory,
not wall time: on a shared two-core machine the wall time of anything served grows with the
machine's other load, far beyond what the options cost.
"""

from __future__ import annotations

from typing import Any

import pytest
from hostile import OVER_BOUND, B, post, request, worst_allowed
from served import Server

from stopstream._vllm_options import BOUND_ENV


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
    # What the refusal costs the server is measured in CPU time below; the wall time is for the
    # record (it grows with the machine's other load).
    print(f"\n400 for {bound}: best {min(times) * 1000:.1f} ms of {len(times)}")


def test_the_worst_allowed_request_is_served(served: Server) -> None:
    for k in range(3):
        status, text, seconds = post(served.url, request(worst_allowed(1000 + k), max_tokens=4))
        assert status == 200, text[:500]
        print(f"\nworst allowed request: {seconds * 1000:.1f} ms end to end")


def cpu_seconds(pids: list[int]) -> float:
    """The CPU seconds these processes have spent, all their threads."""
    import psutil

    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def engine_pids(served: Server) -> list[int]:
    """The engine-core processes (titled ``VLLM::EngineCore``)."""
    import psutil

    root = psutil.Process(served.pid)
    return [p.pid for p in root.children(recursive=True) if "enginecore" in p.name().lower()]


def test_the_worst_requests_cost_the_server_milliseconds(served: Server) -> None:
    """What a request's options can make other streams wait is the CPU the server spends on
    them: an API server reads and compiles a request's options on its event loop, one thread,
    so every millisecond they cost is a millisecond every stream and ``/health`` on that
    process waits. So this measures the API servers' CPU time (all threads, a superset) over
    the same requests sent with
    no options, with the worst allowed options, and with options over a bound. CPU time,
    unlike the gaps a stream sees, does not grow with the machine's other load: on this
    two-core machine a quiet stream's 99th-percentile gap ranged from 5 ms to 7 s between
    runs, from other work alone.

    Each kind is sent in rounds of 20, three rounds interleaved, and the best round counts: a
    full garbage collection in an API server (0.4-1.9 s measured) lands in one round, not in
    all three. Without the bounds, one request of ten 45-byte patterns held a server for 25 s.
    """
    api, engine = served.api_server_pids(), engine_pids(served)
    assert len(api) == 2 and len(engine) == 1, (api, engine)
    kinds: dict[str, Any] = {
        "plain": lambda k: {},
        "worst allowed": lambda k: worst_allowed(20_000 + k),
        "over a bound": lambda k: OVER_BOUND[k % len(OVER_BOUND)][1],
    }
    expected = {"plain": 200, "worst allowed": 200, "over a bound": 400}
    rounds, count = 3, 20
    best: dict[str, tuple[float, float]] = {}
    for r in range(rounds):
        for kind, options in kinds.items():
            api_before, engine_before = cpu_seconds(api), cpu_seconds(engine)
            for k in range(count):
                status, text, _ = post(served.url, request(options(r * count + k)))
                assert status == expected[kind], (kind, status, text[:300])
            spent = (
                (cpu_seconds(api) - api_before) / count,
                (cpu_seconds(engine) - engine_before) / count,
            )
            best[kind] = min(best.get(kind, spent), spent)
    plain = best["plain"][0]
    for kind, (api_cost, engine_cost) in best.items():
        print(
            f"\n{kind}: {api_cost * 1000:.1f} ms of API-server CPU a request "
            f"({(api_cost - plain) * 1000:+.1f} ms against plain), engine core "
            f"{engine_cost * 1000:.1f} ms (best of {rounds} rounds of {count})"
        )
    # The worst allowed request reads about 32 KiB of JSON and compiles 1,020 literals and four
    # regexes at the compiled-size bound: 7.4 ms measured in one process. An over-bound one is
    # refused before anything is compiled.
    assert best["worst allowed"][0] - plain < 0.03
    assert best["over a bound"][0] - plain < 0.005


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
