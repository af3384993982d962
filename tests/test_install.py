"""The tests exercise the installed package, never the source tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import stopstream
from stopstream import _core


@pytest.mark.skipif(
    os.environ.get("STOPSTREAM_EXPECT_INSTALLED") != "1",
    reason="set STOPSTREAM_EXPECT_INSTALLED=1 when testing an installed wheel",
)
def test_package_comes_from_site_packages() -> None:
    for module in (stopstream, _core):
        path = Path(module.__file__ or "")
        assert "site-packages" in path.parts, path
        assert not (path.parent.parent / "pyproject.toml").exists(), path


def test_compiled_core_is_loaded() -> None:
    assert Path(_core.__file__ or "").suffix in (".so", ".pyd")
    assert stopstream.StopFilter is _core.StopFilter
