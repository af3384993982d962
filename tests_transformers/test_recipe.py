"""The serving recipe of docs/transformers.md, as written, on the tiny model: the route's
streamed and non-streamed answers are cut at the stop, report it, and agree."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from starlette.testclient import TestClient

import stopstream

PAGE = Path(__file__).resolve().parent.parent / "docs" / "transformers.md"


def recipe() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    (block,) = [b for b in blocks if "Starlette(" in b]
    return block


@pytest.fixture
def app(model: Any, tokenizer: Any) -> Any:
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    namespace: dict[str, Any] = {"model": model, "tokenizer": tokenizer}
    exec(compile(recipe(), str(PAGE), "exec"), namespace)
    return namespace["app"]


def test_recipe(app: Any, model: Any, tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "The answer is"}]
    client = TestClient(app)
    torch.manual_seed(3)
    plain = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 24})
    text = plain.json()["choices"][0]["message"]["content"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    want = stopstream.truncate(text, [stop])[0]
    body = {"messages": messages, "max_tokens": 24, "stop": [stop, "\x00never"] * 3}
    torch.manual_seed(3)
    answer = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert answer["message"]["content"] == want
    assert (answer["finish_reason"], answer["stop_reason"]) == ("stop", stop)
    torch.manual_seed(3)
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    pieces = [e["choices"][0]["delta"].get("content", "") for e in events]
    assert "".join(pieces) == want and all(pieces[:-1])
    assert events[-1]["choices"][0]["stop_reason"] == stop
    bad = client.post("/v1/chat/completions", json={**body, "stop": ["x", ""]})
    assert bad.status_code == 400 and "position 1" in bad.json()["error"]["message"]
