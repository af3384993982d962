"""Plants mutants in the installed SGLang plugin (the winner, the cut, the holdback, the reasoning
skip, activation), runs the SGLang tests that cover each against it, and restores the file: every
mutant must make the suite fail (the runner, shared by every engine's table, is ``.ci/mutate.py``).

    ~/.cache/stopstream/venv-sglang/bin/python mutants.py [NAME-PART ...] [-- PYTEST-ARGS]
    (from tests_sglang/)
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import stopstream._plugin
import stopstream._sglang_stream
import stopstream.sglang

STREAM = pathlib.Path(stopstream._sglang_stream.__file__)
PLUGIN = pathlib.Path(stopstream.sglang.__file__)
SHARED = pathlib.Path(stopstream._plugin.__file__)
HERE = pathlib.Path(__file__).resolve().parent

# The in-process tests; the activation ones start processes and run for their mutants only.
FAST = ["--ignore=test_activation.py"]

MUTANTS: list[tuple[Any, ...]] = [
    (
        "winner: SGLang's regexes listed before its stop strings",
        PLUGIN,
        "        items[own:own] = [Regex(p) for p in regexes]\n",
        "        items[0:0] = [Regex(p) for p in regexes]\n",
    ),
    (
        "winner: the kind of the stop read from the wrong item",
        STREAM,
        "                self.fired = Fired(matched, self._regex[index], self.consumed, drop)\n",
        "                self.fired = Fired(matched, self._regex[0], self.consumed, drop)\n",
    ),
    (
        "winner: a stop seen only at the last token of a step",
        STREAM,
        "            if self._filter.stopped:\n",
        "            if self._filter.stopped and self.consumed == total:\n",
    ),
    (
        "cut: one character too many dropped",
        STREAM,
        "                drop = self._fed - self._emitted + self._tail\n",
        "                drop = self._fed - self._emitted + self._tail + 1\n",
    ),
    (
        "cut: at the first occurrence of the matched text (SGLang's trim)",
        PLUGIN,
        "                return output[: len(output) - drop]\n",
        "                return output[: output.find(finished_reason['matched'])]\n",
    ),
    (
        "cut: the token after the stop's kept",
        STREAM,
        "                self.fired = Fired(matched, self._regex[index], self.consumed, drop)\n",
        "                self.fired = Fired(matched, self._regex[index], self.consumed + 1,"
        " drop)\n",
    ),
    (
        "cut: the detokenizer ignores the scheduler's cut",
        PLUGIN,
        "        if isinstance(finished_reason, dict) and CUT_KEY in finished_reason:\n",
        "        if False:\n",
    ),
    (
        "holdback: never held",
        STREAM,
        "        return bool(self._filter.pending)\n",
        "        return False\n",
    ),
    (
        "holdback: a one-character partial stop released",
        STREAM,
        "        return bool(self._filter.pending)\n",
        "        return len(self._filter.pending) > 1\n",
    ),
    (
        "holdback: every step held while stops are set (whole-output hold)",
        STREAM,
        "        return bool(self._filter.pending)\n",
        "        return True\n",
    ),
    (
        "holdback: SGLang's own hold kept",
        PLUGIN,
        "        if isinstance(st, RequestStream):\n            return st.held()\n",
        "        if isinstance(st, RequestStream):\n            return bool(stock_hold(self))\n",
    ),
    (
        "reasoning: the server's parser not read",
        PLUGIN,
        '        name = _sglang("sglang.srt.runtime_context").get_serving()'
        '.reasoning_parser or ""\n',
        '        name = ""\n',
        ["test_reasoning.py"],
    ),
    (
        "reasoning: a parser that starts inside the reasoning not seen",
        PLUGIN,
        '        and (_state.get("forced") or _plugin.opens_reasoning(_state, prompt_ids))\n',
        "        and _plugin.opens_reasoning(_state, prompt_ids)\n",
        ["test_reasoning.py"],
    ),
    (
        "reasoning: the server's default not applied",
        SHARED,
        "    default = env_on(engine.skip_reasoning_env)\n",
        "    default = False\n",
        ["test_reasoning.py"],
    ),
    (
        "activation: a differing surface not seen",
        SHARED,
        "    if problems:\n        return Verdict(\n",
        "    if False:\n        return Verdict(\n",
        ["test_activation.py", "-k", "surface"],
    ),
    (
        "activation: options served in silence while inactive",
        PLUGIN,
        "        if isinstance(extra, dict) and EXTRA_KEY in extra:\n"
        "            raise ValueError(\n",
        "        if False:\n            raise ValueError(\n",
        ["test_activation.py", "-k", "turned_off"],
    ),
]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / ".ci"))
    from mutate import run

    sys.exit(run(MUTANTS, FAST, HERE))
