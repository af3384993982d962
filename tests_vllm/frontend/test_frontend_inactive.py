"""The plugin switched off (``STOPSTREAM_VLLM=0``), per release: a request carrying
``extra_args["stopstream"]`` is rejected where vLLM validates a request
(``SamplingParams.verify``, which vLLM's input processor calls for every request before the
engine sees it), with a ``ValueError`` naming the reason; a request without stopstream options
is left to vLLM. Contract §10.1: never a 200 that drops the request's stops.

It runs in a fresh interpreter: this session registered the plugin, and registering patches
vLLM's classes for good.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json

import vllm
import stopstream.vllm as plugin

plugin.register()
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError

result = {"version": vllm.__version__, "active": plugin.active()}
for name, extra in (("options", {"stopstream": {"stop": ["a"]}}), ("none", None)):
    params = SamplingParams(max_tokens=4, extra_args=extra)
    try:
        # As vLLM's input processor calls it (model_config, speculative_config,
        # structured_outputs_config, tokenizer); without a model, vLLM's own checks fail.
        params.verify(None, None, None, None)
        result[name] = None
    except Exception as e:
        result[name] = {
            "type": type(e).__name__,
            "value_error": isinstance(e, ValueError),
            "validation_error": isinstance(e, VLLMValidationError),
            "message": str(e),
        }
print(json.dumps(result))
"""


def test_options_rejected_while_off(release: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env={**os.environ, "STOPSTREAM_VLLM": "0"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["version"] == release
    assert result["active"] is False
    rejected = result["options"]
    # EXPECTED (§10.1): while the plugin is inactive, a request with extra_args["stopstream"]
    # is REJECTED at validation: a ValueError that vLLM's server answers with a 400
    # (VLLMValidationError), naming the option and why it cannot be applied (the plugin is
    # off: STOPSTREAM_VLLM=0), never served without its stops.
    assert rejected is not None, "a request with stopstream options passed validation"
    assert rejected["value_error"] and rejected["validation_error"], rejected
    assert 'extra_args["stopstream"]' in rejected["message"], rejected
    assert "STOPSTREAM_VLLM=0" in rejected["message"], rejected
    # A request without stopstream options reaches vLLM's own checks (which fail here, with no
    # model config), not the plugin's.
    untouched = result["none"]
    assert untouched is None or "stopstream" not in untouched["message"], untouched
