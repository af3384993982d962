"""The frontend harness (contract §10, §10.1): vLLM's own output processor driven by hand in
this process, with hand-built engine requests and outputs; no engine, no model, so every release
runs it in seconds, wherever its frontend Python imports (the CUDA builds' too).

The plugin is registered here, as vLLM's plugin loader would (no engine runs that loader).
``STOPSTREAM_EXPECT_VLLM=<version>`` makes the session check that it imports that release (the
releases other than the venv's come first on ``PYTHONPATH``, see .ci/vllm-frontends).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from frontend.driver import vllm


def pytest_report_header(config: pytest.Config) -> str:
    module = vllm("vllm")
    return f"vllm {module.__version__} from {Path(module.__file__).parent}"


@pytest.fixture(scope="session")
def release() -> str:
    """The vLLM release under test (checked against ``STOPSTREAM_EXPECT_VLLM`` when set)."""
    version = str(vllm("vllm").__version__)
    expect = os.environ.get("STOPSTREAM_EXPECT_VLLM")
    if expect:
        assert version == expect, f"imported vLLM {version}, expected {expect}"
    return version


@pytest.fixture(scope="session", autouse=True)
def plugin(release: str) -> None:
    import stopstream.vllm

    stopstream.vllm.register()
    verdict = stopstream.vllm._state.get("verdict")
    assert stopstream.vllm.active(), f"the plugin is inactive on vLLM {release}: {verdict}"


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests' tiny byte-level BPE, loaded by vLLM as a served model's tokenizer (from the
    tiny model's directory: vLLM reads its config too)."""
    from tiny_model import make_model

    directory = make_model(tmp_path_factory.mktemp("tiny-model"))
    return vllm("vllm.tokenizers").get_tokenizer(str(directory))


@pytest.fixture(params=["tokens", "text"])
def path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Which of the plugin's paths serves requests with stops: the token-id path where it
    applies (the default), or the text path for all."""
    import stopstream.vllm

    stopstream.vllm.set_token_path(request.param == "tokens")
    yield str(request.param)
    stopstream.vllm.set_token_path(True)
