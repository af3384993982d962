"""Fails on any import cycle between the modules of `rust/src` (the crate, bindings included) or of
`python/stopstream`, and prints each cycle.

A module is a file (`rust/src/py/sync/fast.rs` is `crate::py::sync::fast`; a `mod.rs` is its
folder's module). Rust: an edge for each path a file names into another module of the crate
(`crate::a::b`, `super::b`, `self::b`, a child module's name), whether in `use` or in code; a
module's own children (`mod x;`) are not edges, nor is `#[cfg(test)]` code. Python: an edge for
each `import`/`from ... import` of a package module, at any level of the file (type-only imports
under `TYPE_CHECKING` included: they are a dependency all the same).

    python .ci/cycles.py [--graph]
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rust_modules(src: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        modules["::".join(["crate", *parts])] = path
    return modules


_PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
_USE_GROUP = re.compile(
    r"\buse\s+((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S
)


def _strip_tests(text: str) -> str:
    """The file without its `#[cfg(test)]` items (a test module's uses are not the module's)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        j = text.find("{", m.end())
        semi = text.find(";", m.end())
        if semi != -1 and (j == -1 or semi < j):
            i = semi + 1
            continue
        depth, k = 0, j
        while k < len(text):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    out.append(text[i:])
    return "".join(out)


def _no_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def rust_edges(src: Path) -> dict[str, set[str]]:
    modules = rust_modules(src)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        text = _no_comments(_strip_tests(path.read_text()))
        here = module.split("::")
        paths: list[str] = [m.group(1) for m in _PATH.finditer(text)]
        for group in _USE_GROUP.finditer(text):
            prefix = group.group(1)
            for item in re.split(r"[,\s]+", group.group(2)):
                item = item.strip().split("::")[0].strip("{} ")
                if item and item not in ("self", "*"):
                    paths.append(f"{prefix}::{item}")
        for p in paths:
            parts = p.split("::")
            if parts[0] == "crate":
                full = parts
            elif parts[0] == "self":
                full = here + parts[1:]
            else:  # super (possibly repeated)
                base = here[:]
                while parts and parts[0] == "super":
                    base = base[:-1]
                    parts = parts[1:]
                full = base + parts
            # The longest prefix that is a module of the crate.
            for n in range(len(full), 0, -1):
                target = "::".join(full[:n])
                if target in modules:
                    break
            else:
                continue
            if target != module and not target.startswith(module + "::") and target != "crate":
                # A parent module's items other than its children count: `super::Foo`.
                edges[module].add(target)
    return edges


def python_edges(package: Path, name: str) -> dict[str, set[str]]:
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).with_suffix("")
        parts = [name, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    # Compiled modules (a stub beside them, no source): leaves.
    for stub in package.rglob("*.pyi"):
        if not stub.with_suffix(".py").exists():
            rel = stub.relative_to(package).with_suffix("")
            modules[".".join([name, *rel.parts])] = stub
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        if path.suffix == ".pyi":
            continue
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".")
                    if not is_package:
                        base = base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # `from . import x` names the module x where there is one, else the
                # package's (or module's) own attribute.
                targets = [
                    f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix
                    for a in node.names
                ]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != module and t != name:
                    edges[module].add(t)
                elif t == name and module != name:
                    # `from stopstream import x`: the package itself, a module like any other.
                    edges[module].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    found = 0
    graphs = {
        "rust/src": rust_edges(ROOT / "rust" / "src"),
        "python/stopstream": python_edges(ROOT / "python" / "stopstream", "stopstream"),
    }
    for where, edges in graphs.items():
        if "--graph" in sys.argv:
            for m in sorted(edges):
                print(f"{m} -> {', '.join(sorted(edges[m]))}")
        for component in cycles(edges):
            found += 1
            inner = {m: sorted(edges[m] & set(component)) for m in component}
            print(
                f"cycle in {where}: "
                + "; ".join(f"{m} -> {', '.join(t)}" for m, t in inner.items())
            )
        print(f"{where}: {len(edges)} modules, {sum(len(e) for e in edges.values())} edges")
    if found:
        print(f"{found} import cycle(s)")
        return 1
    print("no import cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
