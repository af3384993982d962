"""For the tests' subprocesses (PYTHONPATH=tests_sglang/site): SGLang without its GPU kernels."""

import kernel_stub  # noqa: F401
