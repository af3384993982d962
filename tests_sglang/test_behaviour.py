"""What the plugin changes in SGLang, case by case, each next to what SGLang's own functions do
with the same request (the ``sglang_own`` fixture): the stop that fires, where the text is cut,
what a streamed step holds, and what reaches the client."""

from __future__ import annotations

from typing import Any

import pytest
from sglang.srt.managers import schedule_batch

from conftest import ByteTokenizer, Run
from stopstream.sglang import CUT_KEY


def run_text(tokenizer: ByteTokenizer, chunks: list[list[str]], **kw: Any) -> tuple[Run, list[str]]:
    """Steps of tokens given as strings (one token per string); the text streamed per step."""
    run = Run(tokenizer, **kw)
    per_step = []
    for step in chunks:
        before = run.text
        done = run.step([tokenizer.id(t.encode()) for t in step])
        per_step.append(run.text[len(before) :])
        if done:
            break
    run.end()
    return run, per_step


def test_earliest_end_beats_list_order(tokenizer: ByteTokenizer) -> None:
    run, _ = run_text(tokenizer, [["x"], ["x"], ["a"], ["b"], ["c"], ["d"]], stop=["abcd", "bc"])
    assert run.req.finished_reason.matched == "bc"
    assert run.text == "xxa"


def test_sglang_own_takes_list_order(tokenizer: ByteTokenizer, sglang_own: None) -> None:
    # One step carrying "abcd": SGLang's own check takes the first listed stop found.
    run, _ = run_text(tokenizer, [["x", "abcd"]], stop=["abcd", "bc"])
    assert run.req.finished_reason.matched == "abcd"
    assert run.text == "x"


def test_equal_end_longest_wins(tokenizer: ByteTokenizer) -> None:
    run, _ = run_text(tokenizer, [["xx", "ab"]], stop=["b", "ab"])
    assert run.req.finished_reason.matched == "ab"
    assert run.text == "xx"


def test_sglang_own_equal_end_list_order(tokenizer: ByteTokenizer, sglang_own: None) -> None:
    run, _ = run_text(tokenizer, [["xx", "ab"]], stop=["b", "ab"])
    assert run.req.finished_reason.matched == "b"
    assert run.text == "xxa"


def test_cut_at_the_match_not_the_first_occurrence(tokenizer: ByteTokenizer) -> None:
    # "END" occurs inside the skipped region first; the stop fires after it. SGLang's trim by
    # output.find("END") would cut inside the region.
    run, _ = run_text(
        tokenizer,
        [["<t>", "END", "</t>", " ok ", "END", " more"]],
        custom={"stopstream": {"stop": ["END"], "skip": [["<t>", "</t>"]]}},
    )
    assert run.text == "<t>END</t> ok "
    assert run.req.finished_reason.matched == "END"


def test_tokens_after_the_stop_in_one_step_are_dropped(tokenizer: ByteTokenizer) -> None:
    # Speculative decoding: four tokens accepted at once, the stop completes in the second.
    run, _ = run_text(tokenizer, [["he", "y.", "x", "y"]], stop=["."])
    assert run.req.finished_len == 2
    assert run.text == "hey"


def test_holdback_is_exactly_the_partial_stop(tokenizer: ByteTokenizer) -> None:
    run, steps = run_text(tokenizer, [["Hello "], ["</"], ["ans"], ["x"]], stop=["</answer>"])
    # "</" and "</ans" could still become the stop: those steps are held, then released.
    assert steps == ["Hello ", "", "", "</ansx"]
    assert run.req.finished_reason.to_json()["type"] == "length"


def test_regex_stops_are_held_too(tokenizer: ByteTokenizer) -> None:
    run, steps = run_text(
        tokenizer,
        [["n"], ["="], ["12"], ["3"], [";"]],
        custom={"stopstream": {"stop": [{"regex": r"=\d+;"}]}},
    )
    # After "=", "=12" and "=123" a match may still complete: nothing of it goes out.
    assert steps == ["n", "", "", "", ""]
    assert run.text == "n"
    assert run.req.finished_reason.matched == "=123;"


def test_sglang_own_never_holds_for_regex(tokenizer: ByteTokenizer, sglang_own: None) -> None:
    _, steps = run_text(tokenizer, [["n="], ["12"], ["3"], [";"]], stop_regex=[r"=\d+;"])
    assert steps[:3] == ["n=", "12", "3"]  # streamed, then the stop arrives too late


def test_no_holdback_without_a_partial_match(tokenizer: ByteTokenizer) -> None:
    _, steps = run_text(tokenizer, [["a"], ["b"], ["c"]], stop=["xyz"])
    assert steps == ["a", "b", "c"]


def test_no_stop_trim_keeps_the_stop(tokenizer: ByteTokenizer) -> None:
    run, steps = run_text(
        tokenizer, [["a\n"], ["\nUser: hi"]], stop=["\n\nUser:"], no_stop_trim=True
    )
    # §2.5 with include_stop: nothing is ever held.
    assert steps == ["a\n", "\nUser:"]
    assert run.text == "a\n\nUser:"


def test_per_stop_include(tokenizer: ByteTokenizer) -> None:
    options = {"stop": [{"text": "</answer>", "include": True}]}
    run, _ = run_text(
        tokenizer,
        [["<answer>42"], ["</answer> tail"]],
        stop=["\n\nUser:"],
        custom={"stopstream": options},
    )
    assert run.text == "<answer>42</answer>"
    assert run.req.finished_reason.matched == "</answer>"


def test_sglang_stop_regex_in_the_rust_dialect(tokenizer: ByteTokenizer) -> None:
    run, _ = run_text(tokenizer, [["x1"], ["23y z"]], stop_regex=[r"\d{3}y"])
    assert run.text == "x"
    json = run.req.finished_reason.to_json()
    assert json["matched"] == "123y"  # the matched text, not the pattern


def test_python_only_stop_regex_left_to_sglang(tokenizer: ByteTokenizer) -> None:
    # Look-behind is Python's, not stopstream's: SGLang's own check serves that request.
    run, _ = run_text(tokenizer, [["ab"], ["c"], ["d"]], stop_regex=[r"(?<=a)bc"])
    assert run.req.__dict__["_stopstream"] == "stock"
    assert run.req.finished_reason.matched == r"(?<=a)bc"


def test_the_cut_does_not_reach_the_client(tokenizer: ByteTokenizer) -> None:
    run, _ = run_text(tokenizer, [["ab", "c"]], stop=["b"])
    # The detokenizer took the cut out of the finish reason it forwards.
    assert run.finish_json == {"type": "stop", "matched": "b"}
    assert CUT_KEY not in run.finish_json


def test_characters_split_over_tokens(tokenizer: ByteTokenizer) -> None:
    run = Run(tokenizer, stop=["\u00e9x"])
    e = "\u00e9".encode()
    for piece in [b"a", e[:1], e[1:], b"y", e[:1], e[1:] + b"x", b"tail"]:
        if run.step([tokenizer.id(piece)]):
            break
    run.end()
    assert run.text == "a\u00e9y"
    assert run.req.finished_len == 6


def test_requests_without_stops_untouched(tokenizer: ByteTokenizer) -> None:
    run, steps = run_text(tokenizer, [["a"], ["b"]])
    assert steps == ["a", "b"]
    assert run.req.__dict__["_stopstream"] == "none"


@pytest.mark.parametrize("k", [1, 2, 3])
def test_stop_found_in_any_accepted_token(tokenizer: ByteTokenizer, k: int) -> None:
    tokens = ["a", "b", "<", "/s", ">", "c", "d"]
    steps = [tokens[i : i + k] for i in range(0, len(tokens), k)]
    run, _ = run_text(tokenizer, steps, stop=["</s>"])
    assert run.text == "ab"
    assert run.req.finished_len == 5


def test_a_stop_string_before_a_regex_of_the_same_match(tokenizer: ByteTokenizer) -> None:
    # SGLang checks its stop strings before its regexes: so they are listed (§2: first listed).
    run, _ = run_text(tokenizer, [["x"], ["ab"]], stop=["ab"], stop_regex=["a."])
    assert isinstance(run.req.finished_reason, schedule_batch.FINISH_MATCHED_STR)
    assert run.text == "x"


def test_sglang_own_keeps_a_regex_match(tokenizer: ByteTokenizer, sglang_own: None) -> None:
    # SGLang reports a regex stop by its pattern and trims at output.find(pattern).
    run, _ = run_text(tokenizer, [["n"], ["="], ["12"], ["3"], [";"], ["x"]], stop_regex=[r"=\d+;"])
    assert run.req.finished_reason.matched == r"=\d+;"
    assert run.text == "n=123;"


def test_sglang_own_holds_with_no_stop_trim(tokenizer: ByteTokenizer, sglang_own: None) -> None:
    _, steps = run_text(tokenizer, [["x<"], ["/b"], ["y"]], stop=["</a>"], no_stop_trim=True)
    # "x<" is held ("<" begins the stop), then "</b" is not a prefix: both steps go out.
    assert steps == ["", "x</b", "y"]


def test_no_stop_trim_never_holds(tokenizer: ByteTokenizer) -> None:
    _, steps = run_text(tokenizer, [["x<"], ["/b"], ["y"]], stop=["</a>"], no_stop_trim=True)
    assert steps == ["x<", "/b", "y"]
