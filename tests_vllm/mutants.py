"""Plants mutants in the installed plugin (its holdback, its min_tokens rule, its token cut), runs
the vLLM tests against each, and restores the file: every mutant must make the suite fail.

    .venv-vllm/bin/python tests_vllm/mutants.py
"""

import pathlib
import subprocess
import sys

import stopstream._vllm_detok

site = pathlib.Path(stopstream._vllm_detok.__file__)
here = pathlib.Path(__file__).resolve().parent
orig = site.read_text()
mutants = {
    "holdback: held text released one step early": (
        "                self._out += self._filter.feed(piece)\n",
        "                self._out += self._filter.feed(piece) + self._filter.pending\n",
    ),
    "holdback (min_tokens window): one character too few held": (
        "                    held = k\n",
        "                    held = k - 1\n",
    ),
    "min_tokens: floor one token early": (
        "if self.num_output_tokens() < self._options.min_tokens:",
        "if self.num_output_tokens() < self._options.min_tokens - 1:",
    ),
    "token cut: tokens after the stop in the same step kept": (
        "            if self._feed(piece):\n                return self._stop\n",
        "            if not self._done and self._feed(piece):\n                pass\n",
    ),
}
survivors = []
for name, (a, b) in mutants.items():
    assert orig.count(a) == 1, name
    site.write_text(orig.replace(a, b))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q"], cwd=here, capture_output=True, text=True
        )
        tail = [s for s in r.stdout.splitlines() if "passed" in s or "failed" in s][-1:]
        print(f"{name}: {'killed' if r.returncode else 'SURVIVED'} {tail}", flush=True)
        if r.returncode == 0:
            survivors.append(name)
    finally:
        site.write_text(orig)
sys.exit(1 if survivors else 0)
