"""What the engine plugins (``stopstream.vllm``, ``stopstream.sglang``) share: the verdict on
the engine installed here, the switches read from the environment, the check of the surfaces a
plugin replaces, the first and last steps of ``register`` and the ``python -m`` report.

An engine's own module keeps only what is its own: which surfaces it needs, how it installs
itself, how it rejects options while inactive. Importing this module imports no engine.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._vllm_options import Bounds, Reasoning


@dataclass(frozen=True)
class Verdict:
    """Whether the plugin serves this engine (``active``), and why (``reason``); ``warning``:
    a line to log while serving (a release not tested)."""

    active: bool
    version: str
    reason: str
    warning: str | None = None


@dataclass(frozen=True)
class Engine:
    """An engine's facts, as the shared steps need them."""

    name: str  # as users write it: "vLLM", "SGLang"
    module: str  # the package that carries ``__version__``
    switch: str  # the environment variable that turns the plugin off with 0
    tested: tuple[str, ...]  # the releases CI runs, as ``release`` gives them
    release: Callable[[str], str]  # a version, as ``tested`` lists it
    bound_env: dict[str, str]  # each bound's environment variable
    verb: str  # what the plugin does to the engine's functions: "patches", "replaces"
    skip_reasoning_env: str  # the server's default for ``skip_reasoning`` (1: on)


def engine_module(name: str) -> Any:
    """An engine's module, typed ``Any``: the package is type-checked without the engines."""
    return importlib.import_module(name)


def env_off(name: str) -> bool:
    """``name`` says off (0, false, no, off); unset says on."""
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


def env_on(name: str) -> bool:
    """``name`` says on (anything but 0, false, no, off and empty); unset says off."""
    return os.environ.get(name, "0").strip().lower() not in ("", "0", "false", "no", "off")


def params(func: Any) -> list[str]:
    """A function's parameter names."""
    return list(inspect.signature(func).parameters)


class Surfaces:
    """What differs from the surfaces a plugin relies on: each :meth:`need` not met names one."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def need(self, ok: Callable[[], Any], what: str) -> None:
        try:
            there = ok()
        except Exception:  # a missing attribute, a signature inspect cannot read
            there = False
        if not there:
            self.problems.append(what)


def installed_version(engine: Engine) -> str:
    """The engine's version; ``"none"`` when it does not import."""
    try:
        return str(getattr(engine_module(engine.module), "__version__", "unknown"))
    except Exception:
        return "none"


def check(
    engine: Engine, surfaces: Callable[[], list[str]], veto: Callable[[], str | None] | None = None
) -> Verdict:
    """The verdict: off by the switch, the engine not installed, a ``veto`` (a reason the
    engine gives not to serve it), surfaces that differ: inactive, saying which; else active,
    with a warning for a release CI does not run."""
    version = installed_version(engine)
    if env_off(engine.switch):
        return Verdict(False, version, f"turned off by {engine.switch}=0")
    if version == "none":
        return Verdict(False, version, f"{engine.name} is not installed")
    reason = veto() if veto is not None else None
    if reason is not None:
        return Verdict(False, version, reason)
    problems = surfaces()
    if problems:
        return Verdict(
            False,
            version,
            f"this {engine.name} differs from what the plugin {engine.verb}: "
            + "; ".join(problems),
        )
    release = engine.release(version)
    if release in engine.tested:
        return Verdict(True, version, f"{engine.name} {release} is a tested release")
    return Verdict(
        True,
        version,
        f"the surfaces the plugin {engine.verb} are as in the tested releases",
        f"stopstream: {engine.name} {version} is not a release the plugin was tested against "
        f"({', '.join(engine.tested)}); its surfaces match, so the plugin serves it",
    )


def bounds(engine: Engine, state: dict[str, Any]) -> Bounds:
    """This process's bounds on request options (read from the environment once)."""
    found: Bounds | None = state.get("bounds")
    if found is None:
        found, _ = Bounds.from_env(names=engine.bound_env)
        state["bounds"] = found
    return found


def first_steps(
    engine: Engine, state: dict[str, Any], log: logging.Logger, decide: Callable[[], Verdict]
) -> Verdict | None:
    """``register``'s first steps: ``None`` when the plugin is registered already in this
    process; else the bounds read (a bad value logged, its default kept) and the verdict (a
    check that fails is an inactive verdict, never an exception in the engine's start)."""
    if state.get("registered"):
        return None
    state["registered"] = True
    found, problems = Bounds.from_env(names=engine.bound_env)
    state["bounds"] = found
    for problem in problems:
        log.warning("stopstream: %s; that bound keeps its default", problem)
    try:
        return decide()
    except Exception as e:
        return Verdict(
            False, installed_version(engine), f"the check failed ({type(e).__name__}: {e})"
        )


def install(
    engine: Engine, verdict: Verdict, log: logging.Logger, step: Callable[[], None]
) -> Verdict:
    """Run the install ``step`` of an active verdict; a step that fails leaves the plugin
    inactive, logged with its traceback."""
    if not verdict.active:
        return verdict
    try:
        step()
    except Exception as e:
        log.exception("stopstream: could not install the %s plugin; it stays inactive", engine.name)
        return Verdict(False, verdict.version, f"installing failed ({type(e).__name__})")
    return verdict


def server_reasoning(
    engine: Engine,
    state: dict[str, Any],
    log: logging.Logger,
    name: str,
    tokenizer: Any,
    read: Callable[[str, Any], tuple[str | None, str | None]],
) -> Reasoning | None:
    """The server's reasoning markers, ``read(name, tokenizer)`` from the reasoning parser the
    server names (``name``; empty: none), with the engine's ``skip_reasoning`` default; read
    once per parser, tokenizer and default. Also keeps each marker's token id, for
    :func:`opens_reasoning`."""
    default = env_on(engine.skip_reasoning_env)
    key = (name, id(tokenizer), default)
    if "reasoning_key" in state and state["reasoning_key"] == key:
        cached: Reasoning | None = state["reasoning"]
        return cached
    reasoning: Reasoning | None = None
    if name:
        try:
            start, end = read(name, tokenizer)
            reasoning = Reasoning(start or None, end or None, default)
        except Exception:
            log.exception("stopstream: could not read the markers of reasoning parser %r", name)
    if reasoning is None or not (reasoning.start and reasoning.end):
        if default and not state.get("warned_reasoning"):
            state["warned_reasoning"] = True
            log.warning(
                "stopstream: %s=1, but the server has no reasoning parser with start and end "
                "markers (--reasoning-parser): requests keep their stops everywhere unless they "
                "give skip or skip_until",
                engine.skip_reasoning_env,
            )
        reasoning = Reasoning(None, None, default) if default else None
    state["reasoning"] = reasoning
    state["reasoning_key"] = key
    ids: tuple[int | None, int | None] = (None, None)
    if reasoning is not None and reasoning.start and reasoning.end and tokenizer is not None:
        ids = (_single_id(tokenizer, reasoning.start), _single_id(tokenizer, reasoning.end))
    state["marker_ids"] = ids
    return reasoning


def _single_id(tokenizer: Any, text: str) -> int | None:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except Exception:
        return None
    return int(ids[0]) if len(ids) == 1 else None


def opens_reasoning(state: dict[str, Any], prompt_ids: Any) -> bool:
    """Whether the prompt ends inside the reasoning: its last start marker comes after its
    last end marker (marker tokens only; a marker spread over several tokens is not seen)."""
    start, end = state.get("marker_ids", (None, None))
    if start is None or not prompt_ids:
        return False
    for token in reversed(prompt_ids):
        if token == end:
            return False
        if token == start:
            return True
    return False


def report(engine: Engine, verdict: Verdict) -> int:
    """``python -m stopstream.<engine>``: the verdict, why, the bounds on request options and
    the ``skip_reasoning`` default; exit status 0 when the plugin would serve, 1 if not."""
    state = "active" if verdict.active else "inactive"
    print(
        f"stopstream {engine.name} plugin: {state} ({engine.name} {verdict.version}): "
        f"{verdict.reason}"
    )
    if verdict.warning:
        print(f"warning: {verdict.warning}")
    found, problems = Bounds.from_env(names=engine.bound_env)
    for problem in problems:
        print(f"warning: {problem}; that bound keeps its default")
    for name, env in engine.bound_env.items():
        print(f"  {env}={getattr(found, name)}")
    print(f"  {engine.skip_reasoning_env}={int(env_on(engine.skip_reasoning_env))}")
    return 0 if verdict.active else 1
