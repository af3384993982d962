"""The plugin's detokenizer driven directly, as `OutputProcessor` drives it, with several tokens
per step (as speculative decoding delivers them): the stop is found at the token that
completes it, and the tokens after it in the same step are not kept."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from oracle import decode_offsets, expected

import stopstream.reference
import stopstream.vllm


def make_request(prompt_ids: list[int], **params: Any) -> Any:
    from vllm import SamplingParams

    return SimpleNamespace(
        request_id="r",
        prompt_token_ids=prompt_ids,
        prompt_embeds=None,
        sampling_params=SamplingParams(**params),
    )


def random_tokens(
    llm: Any, seed: int
) -> tuple[random.Random, Any, list[int], list[int], list[str]]:
    """A seeded generator, the tokenizer, a prompt, 40 random output ids and the text after
    each of them as vLLM decodes it."""
    rng = random.Random(seed)
    tokenizer = llm.get_tokenizer()
    prompt_ids = tokenizer.encode("Hello")
    ids = [rng.randrange(3, tokenizer.vocab_size) for _ in range(40)]
    request = make_request(prompt_ids, max_tokens=100)
    texts = decode_offsets(tokenizer, prompt_ids, ids, False, request.sampling_params)
    return rng, tokenizer, prompt_ids, ids, texts


@pytest.mark.parametrize("seed", range(40))
def test_multi_token_steps(llm: Any, seed: int) -> None:
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    rng, tokenizer, prompt_ids, ids, texts = random_tokens(llm, seed)
    full = texts[-1]
    a = rng.randrange(max(1, len(full) - 3))
    stops = [full[a : a + rng.randint(1, 4)] or "x", full[a + 1 : a + 3] or "y"]
    include = rng.random() < 0.3
    min_tokens = rng.choice([0, 0, 3, 10])
    request = make_request(
        prompt_ids,
        max_tokens=100,
        stop=stops,
        include_stop_str_in_output=include,
        min_tokens=min_tokens,
    )
    d = IncrementalDetokenizer.from_new_request(tokenizer, request)
    assert type(d).__name__ == ("StopDetokenizer" if min_tokens else "TokenDetokenizer")
    e = expected(texts, ids, "length", None, stops, include, min_tokens)
    i = 0
    stop = None
    while i < len(ids) and stop is None:
        step = rng.randint(1, 5)
        stop = d.update(ids[i : i + step], False)
        d.get_next_output_text(False, True)
        i += step
    assert stop == (e.stop_reason if e.match else None), (stops, full)
    assert d.output_token_ids == (e.token_ids if e.match else ids[:i]), (stops, full)
    assert d.get_next_output_text(True, False) == (e.text if e.match else texts[min(i, 40)])


@pytest.mark.parametrize("seed", range(40))
def test_min_tokens_with_skip_regions(llm: Any, seed: int) -> None:
    """``min_tokens`` with a skip region: the output is the reference filter's, quiet over the
    first ``min_tokens`` tokens, fed token by token."""
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    rng, tokenizer, prompt_ids, ids, texts = random_tokens(llm, seed)
    full = texts[-1]
    min_tokens = rng.choice([1, 3, 10])
    # Stops and markers from the text, often from around the end of the first tokens.
    near = len(texts[min_tokens])
    a, b = (rng.randrange(max(1, min(near, len(full) - 3))) for _ in range(2))
    stops = [full[a : a + rng.randint(1, 3)] or "x"]
    skip = [[full[b : b + 2] or "<", full[b + 4 : b + 5] or ">"]]
    include = rng.random() < 0.3
    request = make_request(
        prompt_ids,
        max_tokens=100,
        stop=stops,
        include_stop_str_in_output=include,
        min_tokens=min_tokens,
        extra_args={"stopstream": {"skip": skip}},
    )
    d = IncrementalDetokenizer.from_new_request(tokenizer, request)
    assert type(d).__name__ == "StopDetokenizer"
    ref = stopstream.reference.ReferenceStopFilter(stops, include, skip=[(skip[0][0], skip[0][1])])
    ref._quiet(True)
    want, fired_at = "", None
    for k in range(1, len(texts)):
        want += ref.feed(texts[k][len(texts[k - 1]) :])
        if k >= min_tokens:
            ref._quiet(False)
        if ref.stopped:
            fired_at = k
            break
    for i in range(0, len(ids), 3):
        if d.update(ids[i : i + 3], False) is not None:
            break
    if fired_at is None:
        want += ref.finish()
        assert d.get_next_output_text(True, False) == want, (stops, skip, full)
        return
    assert d.get_next_output_text(True, False) == want, (stops, skip, full)
    assert d.output_token_ids == ids[:fired_at], (stops, skip, full)


def test_min_tokens_without_stops(llm: Any) -> None:
    """Stopstream options without stops, and ``min_tokens``: served, the whole text."""
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    _, tokenizer, prompt_ids, ids, texts = random_tokens(llm, 0)
    extra: dict[str, Any] = {"stopstream": {}}
    request = make_request(prompt_ids, max_tokens=100, min_tokens=3, extra_args=extra)
    d = IncrementalDetokenizer.from_new_request(tokenizer, request)
    assert type(d).__name__ == "StopDetokenizer"
    assert d.update(ids, False) is None
    assert d.get_next_output_text(True, False) == texts[-1]


def test_bad_options_are_value_errors_naming_them(llm: Any) -> None:
    from vllm import SamplingParams

    bad = [
        ({"stop": [""]}, 'extra_args["stopstream"]["stop"][0]'),
        ({"stop": [{"regex": "("}]}, '["stop"][0]'),
        ({"stop": [{"regex": "a*"}]}, '["stop"][0]'),
        ({"stop": [{"text": "a", "include": "yes"}]}, '"include"'),
        ({"skip": [["<think>"]]}, '["skip"][0]'),
        ({"skip_until": 3}, '["skip_until"]'),
        ({"stops": ["a"]}, "unknown option 'stops'"),
        ("{not json", "not valid JSON"),
    ]
    for options, words in bad:
        params = SamplingParams(max_tokens=4, extra_args={"stopstream": options})
        with pytest.raises(ValueError, match=None) as info:
            llm.generate(["Hello"], [params], use_tqdm=False)
        assert words in str(info.value), (options, str(info.value))
    # The engine still serves requests afterwards.
    out = llm.generate(["Hello"], [SamplingParams(max_tokens=4, seed=1)], use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4


def test_requests_without_stops_get_vllms_own_detokenizer(llm: Any) -> None:
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    tokenizer = llm.get_tokenizer()
    d = IncrementalDetokenizer.from_new_request(tokenizer, make_request([1, 2], max_tokens=5))
    assert type(d).__name__ == "FastIncrementalDetokenizer"
    assert stopstream.vllm.active()
