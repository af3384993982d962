"""Plants mutants in ``stopstream.transformers`` (the streamer's holdback, the criterion's per-row
stop, the cut), runs the tests that cover each against it, and restores the file: every mutant must
make the suite fail (the runner, shared by every engine's table, is ``.ci/mutate.py``).

    PYTHONPATH=<overlay>[:../python] python mutants.py [NAME-PART ...] [-- PYTEST-ARGS]
    (from tests_transformers/; `-- test_generate.py` runs the differential test alone)

The module mutated is the one ``import stopstream.transformers`` finds (the tree's with
``../python`` on the path, else the installed one).
"""

import pathlib
import sys

import stopstream.transformers

MODULE = pathlib.Path(stopstream.transformers.__file__)
HERE = pathlib.Path(__file__).resolve().parent

_EDITS: list[tuple[str, ...]] = [
    (
        "streamer, holdback: held text released with each token",
        "        text = self._filter.feed(ids).text\n",
        "        text = self._filter.feed(ids).text + self._filter.pending\n",
    ),
    (
        "streamer, holdback: one character held too many until the end",
        "        text = self._filter.feed(ids).text\n        if text:\n",
        "        text = self._filter.feed(ids).text\n"
        "        self._late, text = text[-1:], getattr(self, '_late', '') + text[:-1]\n"
        "        if text:\n",
    ),
    (
        "streamer: the prompt fed to the stops",
        "        if self._next_is_prompt:\n            self._next_is_prompt = False\n",
        "        if False:\n            self._next_is_prompt = False\n",
    ),
    (
        "criterion, per row: the first row's state for every row",
        "        return torch.tensor([f.stopped for f in filters], dtype=torch.bool, "
        "device=input_ids.device)\n",
        "        return torch.tensor([filters[0].stopped for f in filters], dtype=torch.bool, "
        "device=input_ids.device)\n",
    ),
    (
        "criterion, per row: a row ends one token late",
        "        active = [i for i, f in enumerate(filters) if not f.stopped]\n",
        "        late = [f.stopped for f in filters]\n"
        "        active = [i for i, f in enumerate(filters) if not f.stopped]\n",
        "        return torch.tensor([f.stopped for f in filters], dtype=torch.bool, "
        "device=input_ids.device)\n",
        "        return torch.tensor(late, dtype=torch.bool, device=input_ids.device)\n",
    ),
    (
        "criterion: the prompt's last token taken as new",
        "        start = self._prompt_length if self._prompt_length is not None else length - 1\n",
        "        start = self._prompt_length if self._prompt_length is not None else length - 2\n",
    ),
    (
        "criterion: only the last of several new tokens fed",
        "        new = input_ids[:, fed].tolist() if length - fed == 1 else "
        "input_ids[:, fed:].tolist()\n",
        "        new = input_ids[:, -1].tolist()\n",
    ),
    (
        "criterion: beam search's reordered rows not read again",
        "        if torch.equal(input_ids[:, :width], seen):\n",
        "        if True:\n",
    ),
    (
        "cut: the token completing the stop dropped",
        "                    taken = k + 1\n",
        "                    taken = k\n",
    ),
    (
        "cut: what the end of the stream releases dropped",
        "                pieces.append(f.finish().text)\n",
        "                f.finish()\n",
    ),
    (
        "vocabulary cache: a tokenizer that grew read from the cache",
        "        if alive is tokenizer and known == size:\n",
        "        if alive is tokenizer:\n",
    ),
]


MUTANTS = [(name, MODULE, *edits) for name, *edits in _EDITS]

if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / ".ci"))
    from mutate import run

    sys.exit(run(MUTANTS, [], HERE))
