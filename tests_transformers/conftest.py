"""The tiny model and tokenizer the transformers tests share (made once per session, offline).

torch runs on one thread: the model is tiny, and on a machine shared with other work more
threads only wait on each other.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tiny
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    tok = tiny.make_tokenizer()
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="session")
def model(tokenizer: Any) -> Any:
    return tiny.make_model(tokenizer)
