"""Plants mutants in the installed plugin (holdback, the min_tokens rule, the token cut, the
streamed token ids, on both paths; the activation check, the bounds on options, the reasoning
skip), runs the vLLM tests that cover each against it, and restores the file: every mutant must
make the suite fail (the runner, shared by every engine's table, is ``.ci/mutate.py``).

    ~/.cache/stopstream/venv-vllm/bin/python mutants.py [NAME-PART ...] [-- PYTEST-ARGS]
    (from tests_vllm/)
"""

import pathlib
import sys
from typing import Any

import stopstream._plugin
import stopstream._vllm_detok
import stopstream._vllm_fast
import stopstream._vllm_options
import stopstream.vllm

TEXT = pathlib.Path(stopstream._vllm_detok.__file__)
TOKENS = pathlib.Path(stopstream._vllm_fast.__file__)
OPTIONS = pathlib.Path(stopstream._vllm_options.__file__)
PLUGIN = pathlib.Path(stopstream.vllm.__file__)
SHARED = pathlib.Path(stopstream._plugin.__file__)
HERE = pathlib.Path(__file__).resolve().parent

# The engine tests; the served ones start servers (a minute each) and run only for the mutants
# they cover.
ENGINE = [
    "--ignore=test_served.py",
    "--ignore=test_hostile.py",
    "--ignore=test_served_reasoning.py",
]

MUTANTS: list[tuple[Any, ...]] = [
    (
        "text path, holdback: held text released a step early",
        TEXT,
        "            self._out += self._filter.feed(piece)\n",
        "            self._out += self._filter.feed(piece) + self._filter.pending\n",
    ),
    (
        "text path, min_tokens: the filter never quiet",
        TEXT,
        "            f._quiet(True)\n",
        "            pass\n",
    ),
    (
        "text path, min_tokens: the rule starts one token early",
        TEXT,
        "if self._quiet and self.num_output_tokens() >= self._options.min_tokens:",
        "if self._quiet and self.num_output_tokens() >= self._options.min_tokens - 1:",
    ),
    (
        "text path, token cut: tokens after the stop in the same step kept",
        TEXT,
        "            if self._feed(piece):\n                return self._stop\n",
        "            if not self._done and self._feed(piece):\n                pass\n",
    ),
    (
        "text path, streamed ids: one token ahead of its text",
        TEXT,
        "        released = bisect_right(self._ends, len(self._out))\n",
        "        released = min(\n"
        "            self.num_output_tokens(), bisect_right(self._ends, len(self._out)) + 1\n"
        "        )\n",
    ),
    (
        "token-id path, holdback: held text released a step early",
        TOKENS,
        "                    self._held = self._held + text if self._held else text\n",
        "                    self._held = self._held + text + self._filter.pending\n",
    ),
    (
        "token-id path, token cut: the token completing the stop dropped",
        TOKENS,
        "            self._steady = False\n            self._stop = f.stop_sequence\n",
        "            self._steady = False\n            self._ids.pop()\n"
        "            self._stop = f.stop_sequence\n",
    ),
    (
        "token-id path, streamed ids: released tokens counted twice",
        TOKENS,
        "                self._released += piece.tokens\n",
        "                self._released += 2 * piece.tokens\n",
    ),
    (
        "token-id path, the usual step: a held token released before its text",
        TOKENS,
        "                self._released += piece.tokens\n",
        "                self._released += 1\n",
    ),
    (
        "activation: a differing surface not seen",
        SHARED,
        "    if problems:\n        return Verdict(\n",
        "    if False:\n        return Verdict(\n",
        ["test_activation.py"],
    ),
    (
        "activation: the Rust frontend not seen",
        PLUGIN,
        '        if env_on("VLLM_USE_RUST_FRONTEND"):\n',
        '        if env_on("VLLM_USE_RUST_FRONTEND_X"):\n',
        ["test_activation.py"],
    ),
    (
        "activation: options served in silence while inactive",
        PLUGIN,
        "            _reject_options(verdict.reason)\n",
        "            pass\n",
        ["test_activation.py"],
    ),
    (
        "activation: a newer release refused",
        SHARED,
        "    if release in engine.tested:\n",
        "    if release not in engine.tested:\n        return Verdict(False, version, 'untested')\n"
        "    if release in engine.tested:\n",
        ["test_activation.py"],
    ),
    (
        "bounds: the compiled-size bound not applied",
        OPTIONS,
        "            return Regex(value, include=include, size_limit=bounds.regex_size)\n",
        "            return Regex(value, include=include)\n",
        ["test_hostile.py"],
    ),
    (
        "bounds: the stop count off by one",
        OPTIONS,
        "    if count > bounds.stops:\n",
        "    if count > bounds.stops + 1:\n",
        ["test_hostile.py"],
    ),
    (
        "bounds: sixteen times the regex stops allowed (what the worst request costs the server)",
        OPTIONS,
        "    regexes: int = 4\n",
        "    regexes: int = 64\n",
        ["test_hostile.py::test_the_worst_requests_cost_the_server_milliseconds"],
    ),
    (
        "bounds: deep JSON a 500",
        OPTIONS,
        "        except RecursionError:\n",
        "        except ZeroDivisionError:\n",
        ["test_hostile.py"],
    ),
    (
        "reasoning: the parser's markers not taken",
        PLUGIN,
        "        return parser.reasoning_start_str, parser.reasoning_end_str\n",
        "        return None, parser.reasoning_end_str\n",
        ["test_served_reasoning.py"],
    ),
    (
        "reasoning: a prompt that opens the reasoning not seen",
        SHARED,
        "    if start is None or not prompt_ids:\n",
        "    if True:\n",
        ["test_served_reasoning.py"],
    ),
]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / ".ci"))
    from mutate import run

    sys.exit(run(MUTANTS, ENGINE, HERE))
