"""vLLM 0.33 added a token-in/token-out path whose derenderer
(``vllm/renderers/online_derenderer.py``) decodes a finished request's token ids and cuts the
text again at a string ``stop_reason``, with vLLM's ``check_stop_strings`` (the first occurrence
of that string). The plugin reports the text that matched, so the derenderer cuts where the
plugin did: its ``_decode_output``, given the ids, ``finish_reason`` and ``stop_reason`` the
plugin sent, gives the plugin's text.

A regex with an assertion (``\\bend\\b``) could match later than an earlier occurrence of its
matched text; the derenderer would cut at that occurrence. These patterns have none."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from frontend.driver import make_request, vllm
from frontend.test_frontend import (
    PROMPT,
    check_all,
    draw_tokens,
    several,
    stopped_requests,
    texts_of,
)
from frontend.test_frontend import corpus as corpus  # the fixture


def derenderer() -> Any:
    module = vllm("vllm.renderers.online_derenderer")
    if not hasattr(module.OnlineDerenderer, "_decode_output"):
        pytest.skip("this release's derenderer does not cut at stop_reason (0.33 added that)")
    # Only the decoding is used: no server state beyond the end-of-sequence ids.
    d = object.__new__(module.OnlineDerenderer)
    d._eos_token_id = None
    d._model_eos_token_ids = ()
    return module, d


def decode(module: Any, d: Any, tokenizer: Any, prompt: list[int], r: Any, seen: Any) -> Any:
    request = SimpleNamespace(
        include_stop_str_in_output=bool(r.params.include_stop_str_in_output),
        min_tokens=int(r.params.min_tokens or 0),
        ignore_eos=False,
        stop_token_ids=[],
        stop=list(r.params.stop or []),
    )
    state = module._seed_stream_state(tokenizer, prompt, True)
    return d._decode_output(
        tokenizer,
        list(seen.ids),
        seen.finish_reason,
        seen.stop_reason,
        request,
        state,
        skip_special_tokens=True,
        spaces_between_special_tokens=True,
    )


@pytest.mark.parametrize("kind", ["literal", "regex"])
def test_the_derenderer_cuts_where_the_plugin_did(
    tokenizer: Any, corpus: list[int], kind: str
) -> None:
    module, d = derenderer()
    prompt = tokenizer.encode(PROMPT)
    if kind == "literal":
        requests = stopped_requests(tokenizer, corpus, 21, steps=several, logprobs=None)
    else:
        rng = random.Random(22)
        tokens = [draw_tokens(rng, corpus, tokenizer, 2 * k) for k in range(24)]
        texts = texts_of(tokenizer, tokens)
        requests = []
        for k, (t, x) in enumerate(zip(tokens, texts, strict=True)):
            c = rng.choice([c for c in x[-1] if c.isascii() and c.isalnum()] or ["q"])
            regex = rng.choice([f"{c}.{{2}}", f"{c}\\w", "[0-9]+[.]"])
            requests.append(
                make_request(
                    f"r{k}",
                    t,
                    prompt,
                    steps=several(rng),
                    stop=["zzq"],
                    include_stop_str_in_output=rng.random() < 0.3,
                    extra_args={"stopstream": {"stop": [{"regex": regex}]}},
                )
            )
    result, found = check_all(tokenizer, requests, "tokens", literal=kind == "literal")
    checked = 0
    for r in requests:
        key = (r.rid, 0)
        seen = result.last(key)
        if found[key].fired is None:
            continue
        text, reason = decode(module, d, tokenizer, prompt, r, seen)
        assert (text, reason) == (seen.text, seen.stop_reason), (key, seen.stop_reason)
        checked += 1
    assert checked >= len(requests) // 2
