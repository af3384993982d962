"""SGLang's request with the plugin against stopstream's reference (contract §2, §6), over
random texts cut into random tokens (characters split too), one token per step or several
(speculative decoding): the stop that fires, the token the request ends with, the final text,
and after every step the streamed text (never a character of a stop; held only while the text
could still become one).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from sglang.srt.managers.schedule_batch import FINISHED_MATCHED_REGEX

from conftest import ByteTokenizer, Run
from stopstream import reference

TEXT = "ab\u00e9- \n1\u65e5<>/"
# The characters the reference tries after the text to find a regex's holdback (what the
# patterns below need), and how many.
ALPHABET = "ab\u00e9- \n1\u65e5"
HORIZON = 3
LITERALS = ["ab", "b", "a-b", "</a>", "\u00e9\u65e5", "1 1", "<", "bb", "a", "-\n", "ba b"]
# Patterns without assertions: the end of a request is decided after the stop check, so a
# pattern that needs the end of the text never fires there (docs/sglang.md).
PATTERNS = [r"1+-", r"a[b\u00e9]{2}", r"-[ab]+ ", r"\u65e5.a", r"b\d"]


def pieces(tokenizer: ByteTokenizer, ids: list[int]) -> list[str]:
    """The text each token completes (a character split over tokens belongs to the token
    that completes it)."""
    data = b""
    done = ""
    out = []
    for i in ids:
        data += tokenizer.pieces[i]
        text = data.decode("utf-8", "ignore") if not _incomplete(data) else _complete(data)
        out.append(text[len(done) :])
        done = text
    return out


def _incomplete(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError as e:
        return e.end == len(data) and e.reason == "unexpected end of data"
    return False


def _complete(data: bytes) -> str:
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode()
        except UnicodeDecodeError:
            continue
    raise AssertionError("the test texts are valid UTF-8")


def to_reference(item: Any) -> Any:
    if isinstance(item, str):
        return item
    if "text" in item:
        return reference.Stop(item["text"], item.get("include"))
    return reference.Regex(item["regex"], item.get("include"))


class Expected:
    """The reference fed the request's text token by token (contract §2.4: chunking does not
    matter): the final text, the stop, how many tokens are kept, whether the stop is a regex,
    and after each token the text so far and what it holds back."""

    def __init__(
        self, tokenizer: ByteTokenizer, ids: list[int], stops: list[Any], include: bool, **skip: Any
    ) -> None:
        ref = reference.ReferenceStopFilter(
            stops, include, alphabet=ALPHABET, horizon=HORIZON, **skip
        )
        out, text = "", ""
        self.texts: list[str] = [""]
        self.held: list[str] = [""]
        self.stop: str | None = None
        self.regex = False
        self.kept = len(ids)
        for n, piece in enumerate(pieces(tokenizer, ids), 1):
            out += ref.feed(piece)
            text += piece
            self.texts.append(text)
            self.held.append(ref.pending)
            if ref.stopped:
                assert ref.stop_index is not None
                self.stop, self.kept = ref.stop_sequence, n
                self.regex = isinstance(stops[ref.stop_index], reference.Regex)
                break
        self.final = out if self.stop is not None else tokenizer.decode(ids)


def check_streaming(
    run: Run, tokenizer: ByteTokenizer, ids: list[int], n: int, e: Expected
) -> None:
    """After a step that read ``n`` tokens (the request still open): nothing past the final
    text went out, and the step was held only if the text could still become a stop."""
    streamed = run.text
    assert e.final.startswith(streamed), (streamed, e.final)
    text, held = e.texts[n], e.held[n]
    if not held and not tokenizer.decode(ids[:n]).endswith("\ufffd"):
        assert streamed == text, ("held without a reason", streamed, text)
    else:
        # Held (or a character incomplete, which SGLang's detokenizer never sends part of).
        assert len(streamed) <= len(text) - len(held), ("leak", streamed, text, held)


def random_case(rng: random.Random) -> tuple[list[Any], bool, dict[str, Any]]:
    own = rng.sample(LITERALS, rng.randint(0, 3))
    extra: list[Any] = []
    for _ in range(rng.randint(0, 3)):
        kind = rng.random()
        include = rng.choice([None, True, False])
        if kind < 0.4:
            extra.append(rng.choice(LITERALS))
        elif kind < 0.7:
            extra.append({"text": rng.choice(LITERALS), "include": include})
        else:
            extra.append({"regex": rng.choice(PATTERNS), "include": include})
    if not own and not extra:
        own = [rng.choice(LITERALS)]
    return own, rng.random() < 0.3, {"stop": extra} if extra else {}


@pytest.mark.parametrize("seed", range(200))
def test_random_streams(seed: int) -> None:
    rng = random.Random(seed)
    tokenizer = ByteTokenizer()
    own, include, options = random_case(rng)
    text = "".join(rng.choice(TEXT) for _ in range(rng.randint(1, 40)))
    ids = tokenizer.tokenize(text, rng)
    custom = {"stopstream": options} if options else None
    stops = [*own, *(to_reference(s) for s in options.get("stop", []))]
    e = Expected(tokenizer, ids, stops, include)
    run = Run(tokenizer, stop=own or None, custom=custom, no_stop_trim=include)
    speculative = rng.random() < 0.5
    steps = [rng.randint(1, 4) if speculative else 1 for _ in ids]
    for n in run.feed(ids, steps):
        if not run.req.finished():
            check_streaming(run, tokenizer, ids, n, e)
    run.end()
    assert run.text == e.final, (text, stops, include)
    req = run.req
    if e.stop is None:
        assert req.finished_reason.to_json()["type"] == "length"
    else:
        assert req.finished_reason.matched == e.stop
        assert isinstance(req.finished_reason, FINISHED_MATCHED_REGEX) == e.regex
        assert req.finished_len == e.kept
        assert list(req.output_ids_through_stop) == ids[: e.kept]


@pytest.mark.parametrize("seed", range(60))
def test_random_skip_regions(seed: int) -> None:
    """skip and skip_until (contract §6.4) from custom_params, against the reference."""
    rng = random.Random(1000 + seed)
    tokenizer = ByteTokenizer()
    markers = {"skip": [["<a>", "</a>"]]} if rng.random() < 0.5 else {"skip_until": "</a>"}
    options = {"stop": [rng.choice(["b", "ab", "1", "a-"])], **markers}
    text = "".join(rng.choice(["a", "b", "1", "-", "<a>", "</a>", " "]) for _ in range(25))
    ids = tokenizer.tokenize(text, rng)
    stops = list(options["stop"])
    skip = {
        "skip": [tuple(p) for p in markers["skip"]] if "skip" in markers else None,
        "skip_until": markers.get("skip_until"),
    }
    e = Expected(tokenizer, ids, stops, False, **skip)
    run = Run(tokenizer, custom={"stopstream": options})
    for n in run.feed(ids, [rng.randint(1, 3) for _ in ids]):
        if not run.req.finished():
            check_streaming(run, tokenizer, ids, n, e)
    run.end()
    assert run.text == e.final
    if e.stop is not None:
        assert run.req.finished_reason.matched == e.stop
        assert run.req.finished_len == e.kept
