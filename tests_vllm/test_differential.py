"""Differential test in the engine: requests with stops drawn from their own unstopped output,
run through `vllm.LLM` with the plugin, must give §2's cut of the unstopped output (text,
`token_ids`, `finish_reason`, `stop_reason`); the same requests through vLLM's own stops are
compared too, and every difference must have a known reason."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from oracle import Expected, all_matches, decode_offsets, draw_stops, expected
from tiny_model import whole_character_ids

import stopstream
import stopstream.vllm
from stopstream import _vllm_fast

PROMPTS = ["Hello world", "The answer is", "café — ", "日本語", "stop strings: "]
REQUESTS = 220
MAX_TOKENS = 40


def outputs_of(request_outputs: list[Any]) -> list[list[Any]]:
    return [sorted(r.outputs, key=lambda c: c.index) for r in request_outputs]


@pytest.fixture(scope="module")
def runs(llm: Any) -> dict[str, Any]:
    from vllm import SamplingParams

    import stopstream.vllm

    rng = random.Random(20260601)
    # Half of the requests sample only tokens that are whole UTF-8 on their own, so their text
    # stays valid and the token-id path serves them to the end; the random weights make the
    # other half's text full of invalid bytes, which the text path serves.
    vocab = _vllm_fast.vocab_for(llm.get_tokenizer())
    assert vocab is not None
    clean = whole_character_ids(vocab)
    base = []
    # `min_tokens` also keeps the end-of-sequence token from being sampled: the unstopped
    # request has the same, so that both sample the same tokens.
    min_rng = random.Random(11)
    for i in range(REQUESTS):
        n = 2 if i % 11 == 0 else 1
        base.append(
            dict(
                prompt=PROMPTS[i % len(PROMPTS)],
                seed=1000 + 10 * i,
                n=n,
                logprobs=1 if i % 7 == 0 else None,
                allowed_token_ids=clean if i % 2 == 0 else None,
                min_tokens=0 if min_rng.random() < 0.6 else min_rng.randint(1, 20),
            )
        )

    def params(b: dict[str, Any], **kw: Any) -> Any:
        return SamplingParams(
            seed=b["seed"],
            n=b["n"],
            temperature=1.0,
            max_tokens=MAX_TOKENS,
            logprobs=b["logprobs"],
            allowed_token_ids=b["allowed_token_ids"],
            min_tokens=b["min_tokens"],
            **kw,
        )

    unstopped = outputs_of(
        llm.generate([b["prompt"] for b in base], [params(b) for b in base], use_tqdm=False)
    )
    prompt_ids = []
    tokenizer = llm.get_tokenizer()
    cases = []
    for b, outs in zip(base, unstopped, strict=True):
        prompt_ids.append(tokenizer.encode(b["prompt"]))
        stops = draw_stops(rng, outs[0].text)
        include = rng.random() < 0.3
        cases.append(dict(stops=stops, include=include, min_tokens=b["min_tokens"]))
    stopped_params = [
        params(b, stop=c["stops"], include_stop_str_in_output=c["include"])
        for b, c in zip(base, cases, strict=True)
    ]
    prompts = [b["prompt"] for b in base]
    before = dict(_vllm_fast.STATS)
    plugin = outputs_of(llm.generate(prompts, stopped_params, use_tqdm=False))
    token_path = {k: _vllm_fast.STATS[k] - before[k] for k in before}
    print("token-id path:", token_path)
    stopstream.vllm.set_token_path(False)
    try:
        text_path = outputs_of(llm.generate(prompts, stopped_params, use_tqdm=False))
    finally:
        stopstream.vllm.set_token_path(True)
    stopstream.vllm.set_enabled(False)
    try:
        stock = outputs_of(llm.generate(prompts, stopped_params, use_tqdm=False))
    finally:
        stopstream.vllm.set_enabled(True)
    return dict(
        base=base,
        cases=cases,
        unstopped=unstopped,
        plugin=plugin,
        text_path=text_path,
        token_path=token_path,
        stock=stock,
        tokenizer=tokenizer,
        params=stopped_params,
    )


def expectations(runs: dict[str, Any]) -> list[tuple[int, int, Expected, Any, Any]]:
    """(request, child, expected, plugin's output, stock vLLM's output) for every output."""
    rows = []
    for i, (case, outs) in enumerate(zip(runs["cases"], runs["unstopped"], strict=True)):
        for j, u in enumerate(outs):
            eos = u.finish_reason == "stop"
            prompt_ids = runs["tokenizer"].encode(runs["base"][i]["prompt"])
            texts = decode_offsets(
                runs["tokenizer"], prompt_ids, list(u.token_ids), eos, runs["params"][i]
            )
            assert texts[-1] == u.text, "the oracle's decoding is vLLM's"
            e = expected(
                texts,
                list(u.token_ids),
                u.finish_reason,
                u.stop_reason,
                case["stops"],
                case["include"],
                case["min_tokens"],
            )
            rows.append((i, j, e, runs["plugin"][i][j], runs["stock"][i][j]))
    return rows


def test_same_seed_same_tokens(runs: dict[str, Any]) -> None:
    """Seeded sampling: a request with stops generates the unstopped request's tokens."""
    for i, outs in enumerate(runs["plugin"]):
        for j, c in enumerate(outs):
            full = list(runs["unstopped"][i][j].token_ids)
            assert list(c.token_ids) == full[: len(c.token_ids)], (i, j)


def test_both_paths_serve_requests(runs: dict[str, Any]) -> None:
    """The token-id path served requests, kept some to the end and handed some over."""
    served = runs["token_path"]
    assert served["requests"] > 50
    assert 0 < served["handed_over"] < served["requests"]


def test_the_text_path_gives_what_the_token_path_gives(runs: dict[str, Any]) -> None:
    for a, b in zip(runs["plugin"], runs["text_path"], strict=True):
        for x, y in zip(a, b, strict=True):
            assert (x.text, list(x.token_ids), x.finish_reason, x.stop_reason) == (
                y.text,
                list(y.token_ids),
                y.finish_reason,
                y.stop_reason,
            )


def test_plugin_gives_the_contract(runs: dict[str, Any]) -> None:
    rows = expectations(runs)
    assert len(rows) >= 200
    fired = 0
    for i, j, e, got, _ in rows:
        where = (i, j, runs["cases"][i], e.match)
        assert got.text == e.text, where
        assert list(got.token_ids) == e.token_ids, where
        assert got.finish_reason == e.finish_reason, where
        assert got.stop_reason == e.stop_reason, where
        if got.logprobs is not None:
            assert len(got.logprobs) == len(got.token_ids), where
        fired += e.match is not None
        if runs["cases"][i]["min_tokens"] == 0:
            # stopstream.truncate is the one-shot oracle of the same rule.
            cut, stop = stopstream.truncate(
                runs["unstopped"][i][j].text,
                runs["cases"][i]["stops"],
                include_stop=runs["cases"][i]["include"],
            )
            assert (cut, stop) == (e.text, e.stop_reason if e.match else None), where
    # The draw makes most requests stop, some not.
    assert fired > len(rows) // 2
    assert fired < len(rows)


def why_stock_differs(case: dict[str, Any], full_text: str, e: Expected, stock: Any) -> str:
    """The reason vLLM's own stops give another output, or "unexplained"."""
    if e.match is not None:
        _, end, index = e.match
        same_end = [m for m in all_matches(full_text, case["stops"]) if m[1] == end]
        if any(m[2] < index for m in same_end):
            return "tie at one end: vLLM takes the first listed, §2.2 the longest"
    return "unexplained"


def test_stock_vllm_agrees_where_it_is_right(runs: dict[str, Any]) -> None:
    reasons: Counter[str] = Counter()
    for i, j, e, _, stock in expectations(runs):
        same = (stock.text, list(stock.token_ids), stock.finish_reason, stock.stop_reason) == (
            e.text,
            e.token_ids,
            e.finish_reason,
            e.stop_reason,
        )
        if not same:
            reasons[
                why_stock_differs(runs["cases"][i], runs["unstopped"][i][j].text, e, stock)
            ] += 1
    print("stock vLLM differs from the contract:", dict(reasons))
    assert reasons["unexplained"] == 0, reasons
