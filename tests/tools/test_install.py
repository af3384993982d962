"""The tests exercise the installed package, never the source tree."""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

import stopstream
from stopstream import _core


def test_package_comes_from_its_installation() -> None:
    """An installed wheel is imported from site-packages (never from the tree the tests run
    in); an editable install from its own source tree. ``STOPSTREAM_EXPECT_INSTALLED=1`` (the
    runs of a built wheel) requires the former."""
    dist = metadata.distribution("stopstream")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    editable = bool(direct.get("dir_info", {}).get("editable"))
    if os.environ.get("STOPSTREAM_EXPECT_INSTALLED") == "1":
        assert not editable, direct
    for module in (stopstream, _core):
        path = Path(module.__file__ or "")
        if editable:
            source = Path(direct["url"].removeprefix("file://"))
            assert path.is_relative_to(source / "python"), (path, source)
        else:
            assert "site-packages" in path.parts, path
            assert not (path.parent.parent / "pyproject.toml").exists(), path


def test_compiled_core_is_loaded() -> None:
    assert Path(_core.__file__ or "").suffix in (".so", ".pyd")
    assert stopstream.StopFilter is _core.StopFilter
