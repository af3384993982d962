"""Streaming in the engine (`RequestOutputKind.DELTA`, stepped with `LLMEngine.step`): after
every step the text emitted so far is exactly §2.5's minimal-holdback prefix of the text
decoded so far; the same requests through vLLM's own stops hold `max(len) - 1` characters."""

from __future__ import annotations

import random
from typing import Any

import pytest
from oracle import check_streamed, decode_offsets, expected, held, whole_characters
from tiny_model import whole_character_ids

PROMPT = "The answer is"
MAX_TOKENS = 32


def run_stepped(
    llm: Any, requests: list[tuple[str, Any]], stream_interval: int | None = None
) -> dict[str, list[Any]]:
    """Per request, after each of its outputs: (outputs so far, which is the number of tokens
    generated, one per step; text so far; token ids so far; logprobs so far or None)."""
    engine = llm.llm_engine
    for rid, params in requests:
        if stream_interval is not None:
            params.stream_interval = stream_interval
        engine.add_request(rid, PROMPT, params)
    seen: dict[str, list[Any]] = {rid: [] for rid, _ in requests}
    text = dict.fromkeys(seen, "")
    ids: dict[str, list[int]] = {rid: [] for rid in seen}
    logprobs: dict[str, list[Any]] = {rid: [] for rid in seen}
    scheduler = engine.engine_core.engine_core.scheduler
    open_requests = set(seen)
    while engine.has_unfinished_requests():
        for out in engine.step():
            c = out.outputs[0]
            rid = out.request_id
            if out.finished:
                open_requests.discard(rid)
            text[rid] += c.text
            ids[rid] += list(c.token_ids)
            logprobs[rid] += list(c.logprobs or [])
            seen[rid].append((len(seen[rid]) + 1, text[rid], list(ids[rid]), list(logprobs[rid])))
        # A request whose stop fired was aborted in the engine in the same step.
        assert scheduler.get_num_unfinished_requests() == len(open_requests)
    return seen


@pytest.fixture(scope="module")
def streamed(llm: Any) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    import stopstream.vllm
    from stopstream import _vllm_fast

    rng = random.Random(7)
    seeds = [500 + 3 * i for i in range(30)]
    # Half of the requests sample only tokens that are whole UTF-8 on their own: their text
    # stays valid, and the token-id path streams them to the end.
    vocab = _vllm_fast.vocab_for(llm.get_tokenizer())
    clean = whole_character_ids(vocab)
    allowed = [clean if k % 2 == 0 else None for k in range(len(seeds))]
    unstopped = llm.generate(
        [PROMPT] * len(seeds),
        [
            SamplingParams(seed=s, temperature=1.0, max_tokens=MAX_TOKENS, allowed_token_ids=a)
            for s, a in zip(seeds, allowed, strict=True)
        ],
        use_tqdm=False,
    )
    tokenizer = llm.get_tokenizer()
    cases = []
    for s, allow, u in zip(seeds, allowed, unstopped, strict=True):
        c = u.outputs[0]
        t = c.text
        # Long stops whose prefixes occur often: the case vLLM's fixed holdback costs most.
        stops = []
        for _ in range(rng.randint(1, 4)):
            a = rng.randrange(max(1, len(t) - 1))
            stops.append((t[a : a + rng.randint(2, 4)] or "q") + rng.choice(["", "zzzzzzzz"]))
        include = rng.random() < 0.2
        min_tokens = 0 if rng.random() < 0.7 else rng.randint(1, 10)
        params = SamplingParams(
            seed=s,
            temperature=1.0,
            max_tokens=MAX_TOKENS,
            stop=stops,
            include_stop_str_in_output=include,
            min_tokens=min_tokens,
            output_kind=RequestOutputKind.DELTA,
            logprobs=1,
            allowed_token_ids=allow,
        )
        eos = c.finish_reason == "stop"
        texts = decode_offsets(tokenizer, tokenizer.encode(PROMPT), list(c.token_ids), eos, params)
        cases.append(
            dict(
                stops=stops,
                include=include,
                min_tokens=min_tokens,
                params=params,
                texts=texts,
                unstopped=c,
            )
        )
    plugin = run_stepped(llm, [(f"p{i}", c["params"]) for i, c in enumerate(cases)])
    interval = run_stepped(
        llm, [(f"i{i}", c["params"].clone()) for i, c in enumerate(cases)], stream_interval=3
    )
    stopstream.vllm.set_enabled(False)
    try:
        stock = run_stepped(llm, [(f"s{i}", c["params"]) for i, c in enumerate(cases)])
    finally:
        stopstream.vllm.set_enabled(True)
    return dict(
        cases=cases,
        plugin=plugin,
        stock=stock,
        interval=interval,
        vocab=_vllm_fast.vocab_for(tokenizer),
    )


def test_minimal_holdback_after_every_step(streamed: dict[str, Any]) -> None:
    held_plugin = held_stock = steps = 0
    for i, case in enumerate(streamed["cases"]):
        texts = case["texts"]
        c = case["unstopped"]
        e = expected(
            texts,
            list(c.token_ids),
            c.finish_reason,
            c.stop_reason,
            case["stops"],
            case["include"],
            case["min_tokens"],
        )
        trace = streamed["plugin"][f"p{i}"]
        *running, (_, last_text, last_ids, last_logprobs) = trace
        assert last_text == e.text, (i, case["stops"])
        assert last_ids == e.token_ids, i
        assert len(last_logprobs) == len(last_ids), i
        previous = ""
        for k, emitted, ids, logprobs in running:
            t = texts[k]
            whole = whole_characters(streamed["vocab"], c.token_ids[:k])
            check_streamed(
                (i, k, case["stops"], t),
                emitted=emitted,
                previous=previous,
                want=t[: len(t) - held(t, case["stops"], case["include"])],
                want_whole=whole[: len(whole) - held(whole, case["stops"], case["include"])],
                final=e.text,
                ids=ids,
                logprobs=logprobs,
                token_ids=c.token_ids,
                texts=texts,
                generated=k,
            )
            previous = emitted
            held_plugin += len(t) - len(emitted)
            steps += 1
        for k, emitted, _, _ in streamed["stock"][f"s{i}"][:-1]:
            held_stock += len(texts[k]) - len(emitted)
    print(
        f"characters held per step: plugin {held_plugin / steps:.2f}, "
        f"stock vLLM {held_stock / steps:.2f} ({steps} steps)"
    )
    assert held_plugin < held_stock


def test_stream_interval(streamed: dict[str, Any]) -> None:
    """`stream_interval=3`: the outputs come every third token, and their concatenation is
    the same cut text with the same token ids and logprobs."""
    for i, case in enumerate(streamed["cases"]):
        c = case["unstopped"]
        e = expected(
            case["texts"],
            list(c.token_ids),
            c.finish_reason,
            c.stop_reason,
            case["stops"],
            case["include"],
            case["min_tokens"],
        )
        trace = streamed["interval"][f"i{i}"]
        _, text, ids, logprobs = trace[-1]
        assert (text, ids) == (e.text, e.token_ids), i
        assert len(logprobs) == len(ids), i
        for _, emitted, ids_so_far, _ in trace:
            assert e.text.startswith(emitted) and e.token_ids[: len(ids_so_far)] == ids_so_far
        assert len(trace) <= len(e.token_ids) // 3 + 2, i
