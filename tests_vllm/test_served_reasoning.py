"""Reasoning-aware stops in a served vLLM (contract §10.3): a server started with
``--reasoning-parser deepseek_r1`` and ``STOPSTREAM_VLLM_SKIP_REASONING=1`` keeps every stop,
``stop`` included, out of the model's reasoning, with the markers its parser names.

The tiny model samples from a few tokens (``allowed_token_ids``: nine letters and ``</think>``),
so its text repeats and closes the reasoning at random places; prompts that end with
``<think>`` open the reasoning (as templates of reasoning models do). The oracle is a
``StopFilter`` with the same markers over the unstopped text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import running_server

import stopstream

OPENED = "Reason about it: <think>"
CLOSED = "Reasoned: <think> done </think>"


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(
        model_dir,
        tmp_path_factory.mktemp("reasoning-server"),
        "--reasoning-parser",
        "deepseek_r1",
        env={"STOPSTREAM_VLLM_SKIP_REASONING": "1"},
    ) as s:
        yield s.url


@pytest.fixture(scope="module")
def allowed(model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tokenizer.convert_tokens_to_ids([*"abcdefghi", "</think>"])
    assert all(isinstance(i, int) and i >= 0 for i in ids)
    return list(ids)


def complete(
    server: str,
    prompt: str,
    allowed: list[int],
    seed: int,
    stop: list[str] | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)
    body: dict[str, Any] = {"allowed_token_ids": allowed, "ignore_eos": True}
    if options is not None:
        body["vllm_xargs"] = {"stopstream": json.dumps(options)}
    return client.completions.create(
        model="tiny",
        prompt=prompt,
        max_tokens=48,
        temperature=1.0,
        seed=seed,
        stop=stop,
        extra_body=body,
    ).choices[0]


def stop_in_both(text: str, opened: bool) -> str | None:
    """Two letters found both inside the reasoning and after it, if any."""
    if opened:
        inside, _, after = text.partition("</think>")
    else:
        inside, after = "", text
    for i in range(len(after) - 1):
        s = after[i : i + 2]
        if "<" not in s and ">" not in s and (s in inside or not opened):
            return s
    return None


@pytest.mark.parametrize("opened", [True, False])
def test_stops_wait_for_the_end_of_the_reasoning(
    server: str, allowed: list[int], opened: bool
) -> None:
    prompt = OPENED if opened else CLOSED
    checked = fired_late = 0
    for seed in range(12):
        text = complete(server, prompt, allowed, seed).text
        stop = stop_in_both(text, opened)
        if stop is None:
            continue
        f = stopstream.StopFilter(
            [stop], skip=[("<think>", "</think>")], skip_until="</think>" if opened else None
        )
        want = f.feed(text) + f.finish()
        got = complete(server, prompt, allowed, seed, stop=[stop])
        assert got.text == want, (prompt, text, stop)
        assert (got.finish_reason, got.stop_reason) == ("stop", stop), (text, stop)
        checked += 1
        if opened and stop in text.partition("</think>")[0]:
            fired_late += 1  # it occurred inside the reasoning first, and did not fire there
        # A request that opts out: the stop fires wherever it first ends.
        out = complete(server, prompt, allowed, seed, [stop], {"skip_reasoning": False})
        plain, _ = stopstream.truncate(text, [stop])
        assert out.text == plain
    assert checked >= 6
    if opened:
        assert fired_late >= 3


def test_extra_stops_and_regex_skip_the_reasoning_too(server: str, allowed: list[int]) -> None:
    for seed in range(20, 26):
        text = complete(server, OPENED, allowed, seed).text
        stop = stop_in_both(text, True)
        if stop is None:
            continue
        pattern = f"{stop[0]}[a-i]{stop[1]}"
        stops: list[Any] = ["zz", stopstream.Regex(pattern)]
        got = complete(server, OPENED, allowed, seed, ["zz"], {"stop": [{"regex": pattern}]})
        want = stopstream.StopFilter(stops, skip=[("<think>", "</think>")], skip_until="</think>")
        assert got.text == want.feed(text) + want.finish()
        if want.stopped:
            assert got.stop_reason == want.stop_sequence


def test_chat_splits_the_reasoning_and_cuts_the_answer(server: str, allowed: list[int]) -> None:
    """The chat endpoint's parser puts the reasoning in its own field, unchanged; the answer is
    cut at the first stop after the reasoning."""
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)
    checked = 0
    for seed in range(30, 40):
        kw: dict[str, Any] = dict(
            model="tiny",
            messages=[{"role": "user", "content": OPENED}],
            max_tokens=48,
            temperature=1.0,
            seed=seed,
        )
        body = {"allowed_token_ids": allowed, "ignore_eos": True}
        full = client.chat.completions.create(extra_body=body, **kw).choices[0].message
        reasoning = _reasoning(full)
        answer = full.content or ""
        if not answer:
            continue
        text = reasoning + "</think>" + answer
        stop = stop_in_both(text, True)
        if stop is None:
            continue
        cut = stopstream.StopFilter([stop], skip=[("<think>", "</think>")], skip_until="</think>")
        want = cut.feed(text) + cut.finish()
        got = client.chat.completions.create(stop=[stop], extra_body=body, **kw).choices[0]
        assert _reasoning(got.message) == reasoning
        assert (got.message.content or "") == want.partition("</think>")[2]
        assert got.finish_reason == "stop"
        checked += 1
    assert checked >= 3


def _reasoning(message: Any) -> str:
    extra = message.model_extra or {}
    value = extra.get("reasoning_content") or extra.get("reasoning") or ""
    return str(value)
