"""Requests any client can send the served plugin: the worst allowed stop options and ones over
each bound (shared by ``test_hostile.py`` and ``benches/vllm_pace.py``)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from stopstream._vllm_options import Bounds

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
