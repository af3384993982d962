"""SGLang's kernels (``sgl_kernel``) need a GPU; the modules the tests use only import them.
The same stub as ``sglang.test.test_utils.maybe_stub_sgl_kernel``, whose module imports SGLang's
benchmark and evaluation stack. Installed on import."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any
from unittest.mock import MagicMock


class KernelStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``sgl_kernel`` module: any attribute is a ``MagicMock``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "sgl_kernel" or name.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        module.__getattr__ = lambda name: MagicMock()


if not any(isinstance(f, KernelStub) for f in sys.meta_path):
    sys.meta_path.insert(0, KernelStub())
