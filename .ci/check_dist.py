"""Checks a built wheel and sdist for what a release needs in their metadata and contents.

    python .ci/check_dist.py WHEEL SDIST 3.10 3.11 ...

The versions are the CPythons the wheel was tested on: the classifiers must list exactly those
(`Programming Language :: Python :: 3.X`), and `Requires-Python` must start at the oldest.
Exits 1 with one line per failed check.
"""

from __future__ import annotations

import configparser
import email.parser
import email.policy
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def parse(text: str) -> Message:
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


def check_metadata(where: str, meta: Message, pythons: list[str], errors: list[str]) -> None:
    def need(ok: bool, what: str) -> None:
        if not ok:
            errors.append(f"{where}: {what}")

    version = tomllib.loads((REPO / "rust" / "Cargo.toml").read_text())["package"]["version"]
    need(meta["Name"] == "stopstream", f"Name is {meta['Name']!r}")
    need(meta["Version"] == version, f"Version {meta['Version']!r}, rust/Cargo.toml says {version}")
    need(bool(meta["Summary"]), "no Summary")
    need(
        meta["License-Expression"] == "MIT", f"License-Expression is {meta['License-Expression']!r}"
    )
    need(
        meta.get_all("License-File") == ["LICENSE"], f"License-File {meta.get_all('License-File')}"
    )
    need(
        meta["Description-Content-Type"] == "text/markdown",
        f"Description-Content-Type is {meta['Description-Content-Type']!r}",
    )
    body = meta.get_payload()
    need(isinstance(body, str) and body.lstrip().startswith("# stopstream"), "no README body")

    classifiers = set(meta.get_all("Classifier") or [])
    for c in ("Typing :: Typed", "Programming Language :: Rust"):
        need(c in classifiers, f"no classifier {c!r}")
    listed = sorted(
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if c.startswith("Programming Language :: Python :: 3.")
    )
    key = lambda v: tuple(map(int, v.split(".")))  # noqa: E731
    tested = sorted(set(pythons), key=key)
    need(
        sorted(listed, key=key) == tested,
        f"Python classifiers {listed}, but the tested versions are {tested}",
    )
    need(
        meta["Requires-Python"] == f">={tested[0]}",
        f"Requires-Python {meta['Requires-Python']!r}, the oldest tested is {tested[0]}",
    )

    urls = {u.split(",", 1)[0].strip() for u in meta.get_all("Project-URL") or []}
    for label in ("Homepage", "Repository", "Documentation", "Changelog"):
        need(label in urls, f"no Project-URL {label!r} (has {sorted(urls)})")

    # The core package has no runtime dependency: every requirement belongs to an extra.
    for req in meta.get_all("Requires-Dist") or []:
        need("extra ==" in req, f"runtime dependency {req!r}")


def main() -> int:
    wheel, sdist, *pythons = sys.argv[1:]
    if not pythons:
        sys.exit(__doc__)
    errors: list[str] = []
    changelog = (REPO / "CHANGELOG.md").read_text()

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = parse(z.read(f"{info}/METADATA").decode())
        check_metadata("wheel", meta, pythons, errors)
        for name in (
            f"{info}/licenses/LICENSE",
            "stopstream/py.typed",
            "stopstream/_core.pyi",
            f"{info}/entry_points.txt",
        ):
            if name not in names:
                errors.append(f"wheel: no {name}")
        if not any(
            n.startswith("stopstream/_core.") and n.endswith((".so", ".pyd")) for n in names
        ):
            errors.append("wheel: no compiled stopstream/_core")
        if f"{info}/entry_points.txt" in names:
            entry_points = configparser.ConfigParser()
            entry_points.read_string(z.read(f"{info}/entry_points.txt").decode())
            if entry_points.get("console_scripts", "stopstream", fallback="") != (
                "stopstream._cli:main"
            ):
                errors.append("wheel: no stopstream console script")
        if f"## [{meta['Version']}]" not in changelog:
            errors.append(f"CHANGELOG.md: no section for {meta['Version']}")

    with tarfile.open(sdist) as t:
        names = set(t.getnames())
        top = f"stopstream-{meta['Version']}"
        pkg_info = t.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        check_metadata("sdist", parse(pkg_info.read().decode()), pythons, errors)
        for name in ("LICENSE", "README.md", "pyproject.toml", "Cargo.lock", "rust/Cargo.toml"):
            if f"{top}/{name}" not in names:
                errors.append(f"sdist: no {name}")

    for e in errors:
        print(e)
    if not errors:
        print(f"metadata: {Path(wheel).name} and {Path(sdist).name} complete")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
