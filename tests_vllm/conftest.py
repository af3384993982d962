"""The engine the vLLM tests share: the tiny model in one in-process `vllm.LLM` with the
stopstream plugin (loaded by vLLM from the entry point, as in production).

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the stop logic
lives in the frontend either way, and one process lets a test switch the plugin off
(``stopstream.vllm.set_enabled``) to run the same requests through vLLM's own stops. The served
test starts a real multi-process server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from served import Server, running_server
from tiny_model import engine_kwargs, make_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def llm(model_dir: Path) -> Iterator[Any]:
    from vllm import LLM

    import stopstream.vllm

    engine = LLM(model=str(model_dir), **engine_kwargs())
    assert stopstream.vllm.active(), "the plugin was not loaded by vLLM"
    yield engine
    stopstream.vllm.set_enabled(True)


@pytest.fixture(scope="session")
def served(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The OpenAI-compatible server with two API-server processes in front of one engine: every
    served test is served by both (the kernel spreads new connections over them)."""
    with running_server(
        model_dir, tmp_path_factory.mktemp("server"), "--api-server-count", "2"
    ) as server:
        text = server.log_text()
        active = [line for line in text.splitlines() if "stopstream: vLLM plugin active" in line]
        # One line from each process that detokenizes.
        assert len(active) == 2, text[-3000:]
        assert {line.split(" pid=")[0] for line in active} == {"(ApiServer_0", "(ApiServer_1"}
        yield server
