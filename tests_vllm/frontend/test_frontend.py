"""The plugin in vLLM's frontend, per release: `OutputProcessor.process_outputs` over batches of
hand-built engine outputs, each request checked against its unstopped run (see `driver`): the
final text, token ids, logprobs, `finish_reason` and `stop_reason` (§2, §10), what is streamed
after every output (§2.5's minimal holdback, token ids and logprobs with their text: §7's
release rule), and the abort list (a request whose stop string fires is aborted in the engine
once, and only if the engine has not finished it itself).

Every test runs on both of the plugin's paths (`path`): the token-id path where it applies,
and the text path for every request."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from oracle import check_streamed, draw_stops, whole_characters
from oracle import expected as brute_force
from tiny_model import EXTRA_TEXT, REPO

import stopstream
import stopstream.vllm
from frontend.driver import (
    Expected,
    Request,
    Run,
    expected,
    logprob_of,
    make_request,
    run,
    unstopped_texts,
    vllm,
)
from stopstream import _vllm_fast

TOKENS = 40
PROMPT = "The answer is"


@pytest.fixture(scope="module")
def corpus(tokenizer: Any) -> list[int]:
    """Token ids of real text (this repository's README and the tokenizer's non-ASCII lines)."""
    text = (REPO / "README.md").read_text(encoding="utf-8") + "\n".join(EXTRA_TEXT)
    ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
    return ids


def draw_tokens(rng: random.Random, corpus: list[int], tokenizer: Any, k: int) -> list[int]:
    """``TOKENS`` ids: a window of real text (even ``k``), or random ids (odd ``k``: byte tokens
    that split characters and leave invalid UTF-8, which the token-id path hands over)."""
    if k % 2 == 0:
        start = rng.randrange(len(corpus) - TOKENS)
        return corpus[start : start + TOKENS]
    return [rng.randrange(3, len(tokenizer)) for _ in range(TOKENS)]


def texts_of(
    tokenizer: Any, token_lists: list[list[int]], *, stop_token: bool = False
) -> list[list[str]]:
    """vLLM's text after each token of each list (no stops)."""
    prompt = tokenizer.encode(PROMPT)
    drafts = [
        make_request(f"draft{k}", t, prompt, stop_token=stop_token)
        for k, t in enumerate(token_lists)
    ]
    texts = unstopped_texts(tokenizer, drafts)
    return [texts[(f"draft{k}", 0)] for k in range(len(token_lists))]


def whole_texts(tokenizer: Any, tokens: list[int]) -> list[str]:
    """The whole characters of the tokens' bytes after each token."""
    vocab = _vllm_fast.vocab_for(tokenizer)
    return [whole_characters(vocab, tokens[:k]) for k in range(len(tokens) + 1)]


def check_request(
    result: Run,
    r: Request,
    index: int,
    e: Expected,
    path: str,
    *,
    where: object = None,
) -> None:
    """Sequence ``index`` of ``r`` sent what ``e`` says, streaming included."""
    key = (r.rid, index)
    where = (key, where)
    seen = result.seen[key]
    assert seen, (where, "no output")
    final = seen[-1]
    assert final.finished and not any(s.finished for s in seen[:-1]), where
    assert final.text == e.text, (where, final.text, e.text)
    assert final.ids == e.token_ids, (where, final.ids, e.token_ids)
    assert (final.finish_reason, final.stop_reason) == (e.finish_reason, e.stop_reason), where
    logprobs = r.params.logprobs is not None
    if logprobs:
        # Trimmed with the ids, each the logprob of its own position.
        assert len(final.logprobs) == len(final.ids), (where, len(final.logprobs))
        for position, (t, lp) in enumerate(zip(final.ids, final.logprobs, strict=True)):
            assert lp[t].logprob == logprob_of(position), (where, position)
    else:
        assert final.logprobs == [], where
    # The engine is asked to abort a request whose stop string fired, once, unless it had
    # finished the request itself in that step.
    aborts = 1 if e.fired is not None and key not in result.engine_finished else 0
    assert result.aborted[key] == aborts, (where, result.aborted[key], aborts)
    if r.params.output_kind != vllm("vllm.sampling_params").RequestOutputKind.DELTA:
        assert len(seen) == 1, (where, "FINAL_ONLY sends one output")
        return
    previous = ""
    for s in seen[:-1]:
        g = s.generated
        assert g < len(e.want), (where, "an output after the stop fired")
        if path == "text":
            # vLLM's own decoding: exactly the minimal-holdback output.
            assert s.text == e.want[g], (where, g, s.text, e.want[g])
        check_streamed(
            (where, g),
            emitted=s.text,
            previous=previous,
            want=e.want[g],
            want_whole=e.want_whole[g],
            final=e.text,
            ids=s.ids,
            logprobs=s.logprobs if logprobs else None,
            token_ids=r.tokens[index],
            texts=e.texts,
            generated=g,
        )
        previous = s.text


def check_all(
    tokenizer: Any,
    requests: list[Request],
    path: str,
    *,
    stream_interval: int = 1,
    literal: bool = True,
) -> tuple[Run, dict[tuple[str, int], Expected]]:
    """Run ``requests`` through the frontend and check every sequence; with ``literal``, the
    oracle's result is also checked against the brute-force one of the engine tests."""
    texts = unstopped_texts(tokenizer, requests)
    result = run(tokenizer, requests, stream_interval=stream_interval)
    found = {}
    for r in requests:
        for index in range(len(r.tokens)):
            t = texts[(r.rid, index)]
            e = expected(r, index, t, whole_texts(tokenizer, r.tokens[index]))
            if literal:
                b = brute_force(
                    t,
                    r.tokens[index],
                    e.finish_reason if e.fired is None else "length",
                    e.stop_reason if e.fired is None else None,
                    list(r.params.stop or []),
                    bool(r.params.include_stop_str_in_output),
                    int(r.params.min_tokens or 0),
                )
                assert (b.text, b.token_ids, b.stop_reason) == (
                    e.text,
                    e.token_ids,
                    e.stop_reason,
                ), (r.rid, index)
            check_request(result, r, index, e, path)
            found[(r.rid, index)] = e
    kinds = {result.detokenizers[k] for k in found}
    ours = {"TokenDetokenizer", "StopDetokenizer"}
    assert kinds <= ours, kinds
    if path == "text":
        assert kinds == {"StopDetokenizer"}, kinds
    elif any(not r.params.min_tokens for r in requests):
        # The tiny tokenizer is a byte-level BPE: requests without min_tokens start there.
        assert "TokenDetokenizer" in kinds, kinds
    return result, found


def stopped_requests(
    tokenizer: Any,
    corpus: list[int],
    seed: int,
    count: int = 30,
    *,
    steps: Any = None,
    **params: Any,
) -> list[Request]:
    """``count`` requests with 1-10 stops drawn from their own unstopped text,
    ``include_stop_str_in_output`` at random, logprobs for half of them."""
    rng = random.Random(seed)
    tokens = [draw_tokens(rng, corpus, tokenizer, k) for k in range(count)]
    texts = texts_of(tokenizer, tokens)
    prompt = tokenizer.encode(PROMPT)
    requests = []
    for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
        kw = dict(params)
        kw.setdefault("include_stop_str_in_output", rng.random() < 0.3)
        kw.setdefault("logprobs", 1 if k % 2 == 0 else None)
        requests.append(
            make_request(
                f"r{k}",
                t,
                prompt,
                steps=steps(rng) if steps else (1,),
                stop=draw_stops(rng, x[-1]),
                **kw,
            )
        )
    return requests


def fired_count(found: dict[tuple[str, int], Expected]) -> int:
    return sum(e.fired is not None for e in found.values())


def test_release_and_plugin(release: str) -> None:
    """The release under test, with the plugin active (registered by the conftest)."""
    assert stopstream.vllm.active()
    assert stopstream.vllm._state["version"] == release


def test_one_token_per_step(tokenizer: Any, corpus: list[int], path: str) -> None:
    requests = stopped_requests(tokenizer, corpus, 1)
    _, found = check_all(tokenizer, requests, path)
    assert fired_count(found) >= len(requests) // 2


def several(rng: random.Random) -> Sequence[int]:
    """Tokens per step as speculative decoding delivers them: 1 to 5."""
    return [rng.randint(1, 5) for _ in range(7)]


def test_several_tokens_per_step(tokenizer: Any, corpus: list[int], path: str) -> None:
    """The stop is found at the token that completes it; the step's later tokens (and their
    logprobs) are not kept."""
    requests = stopped_requests(tokenizer, corpus, 2, steps=several, logprobs=1)
    result, found = check_all(tokenizer, requests, path)
    # Stops that fired with tokens after them in the same step.
    trimmed = sum(
        1
        for key, e in found.items()
        if e.fired is not None and result.last(key).generated > e.fired
    )
    assert trimmed >= 5, trimmed


@pytest.mark.parametrize("interval", [3, 4])
def test_stream_interval(tokenizer: Any, corpus: list[int], path: str, interval: int) -> None:
    """``stream_interval``: the engine's (3) or the request's own (4, where the release has
    it): outputs every ``interval`` tokens, each with the minimal holdback at that point."""
    sampling = vllm("vllm.sampling_params")
    per_request = interval == 4
    if per_request and "stream_interval" not in sampling.SamplingParams.__struct_fields__:
        pytest.skip("this release has no per-request stream_interval")
    extra = {"stream_interval": interval} if per_request else {}
    requests = stopped_requests(tokenizer, corpus, 3, steps=several, **extra)
    result, found = check_all(
        tokenizer, requests, path, stream_interval=1 if per_request else interval
    )
    for key, e in found.items():
        assert len(result.seen[key]) <= len(e.token_ids) // interval + 2, key
    assert fired_count(found) >= len(requests) // 2


def test_final_only(tokenizer: Any, corpus: list[int], path: str) -> None:
    final_only = vllm("vllm.sampling_params").RequestOutputKind.FINAL_ONLY
    requests = stopped_requests(
        tokenizer, corpus, 4, steps=several, logprobs=1, output_kind=final_only
    )
    _, found = check_all(tokenizer, requests, path)
    assert fired_count(found) >= len(requests) // 2


def test_stop_across_steps(tokenizer: Any, corpus: list[int], path: str) -> None:
    """A stop that starts in one step's text and ends in the next one's: its first part is
    held at the end of the first step, and it fires in the second."""
    rng = random.Random(5)
    tokens = [draw_tokens(rng, corpus, tokenizer, 2 * k) for k in range(30)]
    texts = texts_of(tokenizer, tokens)
    prompt = tokenizer.encode(PROMPT)
    requests, boundaries = [], {}
    for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
        # Three tokens a step: the text after step j ends at x[3 * j]; a stop of the last two
        # characters there and the next two, at its first occurrence.
        for j in rng.sample(range(2, TOKENS // 3), TOKENS // 3 - 2):
            b = len(x[3 * j])
            stop = x[-1][b - 2 : b + 2]
            if (
                len(stop) == 4
                and len(x[3 * j - 3]) <= b - 2
                and len(x[3 * j + 3]) >= b + 2
                and x[-1].find(stop) == b - 2
            ):
                boundaries[f"r{k}"] = (j, stop)
                break
        else:
            continue
        requests.append(
            make_request(
                f"r{k}",
                t,
                prompt,
                steps=(3,),
                stop=[stop],
                include_stop_str_in_output=rng.random() < 0.3,
                logprobs=1,
            )
        )
    assert len(requests) >= 20, len(requests)
    result, found = check_all(tokenizer, requests, path)
    for r in requests:
        j, stop = boundaries[r.rid]
        e = found[(r.rid, 0)]
        assert e.fired is not None and 3 * j < e.fired <= 3 * j + 3, (r.rid, e.fired, j)
        # After step j: everything before the stop's first two characters (with
        # include_stop_str_in_output, nothing is held).
        after = next(s for s in result.seen[(r.rid, 0)] if s.generated == 3 * j).text
        text = e.texts[3 * j]
        assert after == (text if r.params.include_stop_str_in_output else text[:-2]), r.rid


def test_min_tokens(tokenizer: Any, corpus: list[int], path: str) -> None:
    """No stop that completes within the first ``min_tokens`` tokens fires (vLLM's rule); one
    that began there and ends after them does. (The plugin serves these by its text path.)"""
    rng = random.Random(6)
    tokens = [draw_tokens(rng, corpus, tokenizer, k) for k in range(30)]
    texts = texts_of(tokenizer, tokens)
    prompt = tokenizer.encode(PROMPT)
    requests = []
    for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
        min_tokens = rng.choice([1, 3, 10])
        # Stops from around the end of the first tokens' text, and from anywhere.
        near = len(x[min_tokens])
        a = rng.randrange(max(1, near - 3), max(2, near + 1))
        stops = [x[-1][a : a + rng.randint(2, 4)] or "q", *draw_stops(rng, x[-1])[:3]]
        requests.append(
            make_request(
                f"r{k}",
                t,
                prompt,
                steps=several(rng) if k % 3 == 0 else (1,),
                stop=stops,
                min_tokens=min_tokens,
                include_stop_str_in_output=rng.random() < 0.3,
                logprobs=1 if k % 2 else None,
            )
        )
    _, found = check_all(tokenizer, requests, path)
    assert fired_count(found) >= len(requests) // 3


def test_stop_token_with_stop_string(tokenizer: Any, corpus: list[int], path: str) -> None:
    """The engine ends a request with a stop token id in the same step as a stop string
    completes: the string wins (``stop_reason`` the string, ids through the token completing
    it, no abort: the engine finished the request); without the string, ``stop_reason`` is
    the token id and its text is not output."""
    rng = random.Random(7)
    eos = tokenizer.eos_token_id
    tokens = [[*draw_tokens(rng, corpus, tokenizer, 2 * k)[:-1], eos] for k in range(30)]
    texts = texts_of(tokenizer, tokens, stop_token=True)
    prompt = tokenizer.encode(PROMPT)
    requests = []
    for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
        # The last step: the last four tokens, the stop token among them.
        last = len(x[TOKENS - 4])
        if k % 2 == 0 and len(x[-1]) > last + 1:
            a = rng.randrange(last, len(x[-1]) - 1)
            stops = [x[-1][a : a + 2]]
        else:
            stops = ["zzq"]
        requests.append(
            make_request(
                f"r{k}",
                t,
                prompt,
                steps=(TOKENS - 4, 4),
                stop_token=True,
                stop=stops,
                include_stop_str_in_output=rng.random() < 0.3,
                logprobs=1,
            )
        )
    result, found = check_all(tokenizer, requests, path)
    # Requests whose string fired in the engine's last step (no abort: check_request) and
    # requests the stop token ended.
    in_last_step = [k for k, e in found.items() if e.fired is not None and e.fired > TOKENS - 4]
    by_token = [k for k, e in found.items() if e.stop_reason == eos]
    assert len(in_last_step) >= 5 and len(by_token) >= 10, (in_last_step, by_token)
    assert all(result.aborted[k] == 0 for k in in_last_step)


@pytest.mark.parametrize("kind", ["DELTA", "FINAL_ONLY"])
def test_parallel_sampling(tokenizer: Any, corpus: list[int], path: str, kind: str) -> None:
    """``n=2``: each sequence stops on its own; the parent's outputs carry both (FINAL_ONLY:
    together, once both are done)."""
    rng = random.Random(8)
    output_kind = getattr(vllm("vllm.sampling_params").RequestOutputKind, kind)
    pairs = [
        [draw_tokens(rng, corpus, tokenizer, 2 * k), draw_tokens(rng, corpus, tokenizer, k)]
        for k in range(20)
    ]
    texts = texts_of(tokenizer, [t for pair in pairs for t in pair])
    prompt = tokenizer.encode(PROMPT)
    requests = [
        make_request(
            f"r{k}",
            pair,
            prompt,
            steps=several(rng),
            stop=draw_stops(rng, texts[2 * k][-1])[:2] + draw_stops(rng, texts[2 * k + 1][-1])[:2],
            include_stop_str_in_output=rng.random() < 0.3,
            logprobs=1 if k % 2 else None,
            output_kind=output_kind,
        )
        for k, pair in enumerate(pairs)
    ]
    _, found = check_all(tokenizer, requests, path)
    assert fired_count(found) >= len(found) // 3


@pytest.mark.parametrize("as_json", [False, True])
def test_extra_stops(tokenizer: Any, corpus: list[int], path: str, as_json: bool) -> None:
    """``extra_args["stopstream"]["stop"]``: more stops than ``VLLM_MAX_STOP_STRINGS`` (after
    the request's own), stop objects with their own include flag."""
    cap = int(vllm("vllm.envs").VLLM_MAX_STOP_STRINGS)
    rng = random.Random(9 + as_json)
    tokens = [draw_tokens(rng, corpus, tokenizer, k) for k in range(24)]
    texts = texts_of(tokenizer, tokens)
    prompt = tokenizer.encode(PROMPT)
    requests = []
    for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
        text = x[-1]
        a = rng.randrange(max(1, len(text) - 4))
        own = ["zzzq", text[a + 2 : a + 5] or "q"]
        more: list[Any] = [f"nothere{i}" for i in range(cap + 2)]
        more.append({"text": text[a : a + 3] or "q", "include": True})
        more.append(draw_stops(rng, text)[0])
        options = {"stop": more}
        assert len(own) + len(more) > cap
        requests.append(
            make_request(
                f"r{k}",
                t,
                prompt,
                steps=several(rng) if k % 2 else (1,),
                stop=own,
                logprobs=1 if k % 3 == 0 else None,
                extra_args={"stopstream": json.dumps(options) if as_json else options},
            )
        )
    _, found = check_all(tokenizer, requests, path, literal=False)
    assert fired_count(found) >= len(requests) // 2


def test_regex_stop(tokenizer: Any, corpus: list[int], path: str) -> None:
    """A regex stop (``extra_args``): ``stop_reason`` is the matched text."""
    rng = random.Random(11)
    tokens = [draw_tokens(rng, corpus, tokenizer, k) for k in range(24)]
    texts = texts_of(tokenizer, tokens)
    prompt = tokenizer.encode(PROMPT)
    requests = []
    for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
        # A letter or digit of the text, then two characters or a word character.
        c = rng.choice([c for c in x[-1] if c.isascii() and c.isalnum()] or ["q"])
        regex = rng.choice([f"{c}.{{2}}", f"{c}\\w", "[0-9]+[.]"])
        requests.append(
            make_request(
                f"r{k}",
                t,
                prompt,
                steps=several(rng) if k % 2 else (1,),
                stop=["zzq"],
                include_stop_str_in_output=rng.random() < 0.3,
                logprobs=1 if k % 2 else None,
                extra_args={"stopstream": {"stop": [{"regex": regex}]}},
            )
        )
    _, found = check_all(tokenizer, requests, path, literal=False)
    fired = [e for e in found.values() if e.fired is not None]
    assert len(fired) >= len(requests) // 2
    # The reason is the text matched, not the pattern.
    assert all(e.stop_reason in e.texts[-1] for e in fired)


def test_requests_without_stops_are_vllms(tokenizer: Any, corpus: list[int], path: str) -> None:
    """A request without stops or options gets vLLM's own detokenizer: the same outputs as with
    the plugin switched off."""
    rng = random.Random(12)
    tokens = [draw_tokens(rng, corpus, tokenizer, k) for k in range(10)]
    prompt = tokenizer.encode(PROMPT)
    requests = [
        make_request(f"r{k}", t, prompt, steps=several(rng), logprobs=1)
        for k, t in enumerate(tokens)
    ]
    with_plugin = run(tokenizer, requests)
    stopstream.vllm.set_enabled(False)
    try:
        stock = run(tokenizer, requests)
    finally:
        stopstream.vllm.set_enabled(True)
    assert with_plugin.seen == stock.seen
    assert not with_plugin.aborted
    assert not {"TokenDetokenizer", "StopDetokenizer"} & set(with_plugin.detokenizers.values())
