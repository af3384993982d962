"""`extra_args["stopstream"]` in the engine: more stops than `VLLM_MAX_STOP_STRINGS`, stop
objects with their own include flag, regex stops, skip regions; the oracle is
`stopstream.truncate` on the unstopped output (the same rules, one shot)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from oracle import decode_offsets

import stopstream
from stopstream import _vllm_fast

PROMPT = "stop strings: "


@pytest.mark.parametrize("as_json", [False, True])
def test_extra_stops(llm: Any, as_json: bool) -> None:
    from vllm import SamplingParams

    rng = random.Random(int(as_json))
    tokenizer = llm.get_tokenizer()
    seeds = [3000 + 7 * i for i in range(24)]
    unstopped = llm.generate(
        [PROMPT] * len(seeds),
        [SamplingParams(seed=s, temperature=1.0, max_tokens=40) for s in seeds],
        use_tqdm=False,
    )
    requests, oracles = [], []
    for s, u in zip(seeds, unstopped, strict=True):
        text = u.outputs[0].text
        a = rng.randrange(max(1, len(text) - 4))
        own = ["zzzq", text[a + 2 : a + 5] or "q"]
        items: list[Any] = [f"nothere{k}" for k in range(6)]
        objects: list[Any] = [stopstream.Stop(text[a : a + 3] or "q", include=True)]
        wire: list[Any] = [{"text": text[a : a + 3] or "q", "include": True}]
        if rng.random() < 0.5:
            c = text[a + 1] if len(text) > a + 1 else "q"
            objects.append(stopstream.Regex(f"{_escape(c)}.{{2}}"))
            wire.append({"regex": f"{_escape(c)}.{{2}}"})
        options: dict[str, Any] = {"stop": items + wire}
        stops_all: list[Any] = [*own, *items, *objects]
        skip_until = None
        if rng.random() < 0.3:
            skip_until = text[a : a + 2] or None
            options["skip_until"] = skip_until
        extra = json.dumps(options) if as_json else options
        requests.append(
            SamplingParams(
                seed=s, temperature=1.0, max_tokens=40, stop=own, extra_args={"stopstream": extra}
            )
        )
        oracles.append((stops_all, skip_until, u.outputs[0]))
    before = dict(_vllm_fast.STATS)
    got = llm.generate([PROMPT] * len(seeds), requests, use_tqdm=False)
    # Regex stops and skip markers take the token-id path too (the tiny tokenizer is a
    # byte-level vocabulary); a request leaves it only at invalid UTF-8.
    served = _vllm_fast.STATS["requests"] - before["requests"]
    assert served == len(seeds), _vllm_fast.STATS
    fired = 0
    for (stops_all, skip_until, u), g, params in zip(oracles, got, requests, strict=True):
        c = g.outputs[0]
        f = stopstream.StopFilter(stops_all, skip_until=skip_until)
        want = f.feed(u.text) + f.finish()
        assert c.text == want, (stops_all, u.text)
        if f.stop_reason == "stop_sequence":
            fired += 1
            assert (c.finish_reason, c.stop_reason) == ("stop", f.stop_sequence)
            texts = decode_offsets(
                tokenizer,
                tokenizer.encode(PROMPT),
                list(u.token_ids),
                u.finish_reason == "stop",
                params,
            )
            # The match ends where the filter saw it: at the cut, or the cut plus the stop.
            ends = [len(want), len(want) + len(f.stop_sequence or "")]
            kept = len(c.token_ids)
            assert list(c.token_ids) == list(u.token_ids[:kept])
            assert any(len(texts[kept]) >= e > len(texts[kept - 1]) for e in ends)
        else:
            assert (c.text, list(c.token_ids)) == (u.text, list(u.token_ids))
    assert fired >= len(seeds) // 2


def _escape(c: str) -> str:
    import re

    return re.escape(c)
