"""vLLM's frontend without an engine: one ``OutputProcessor`` fed batches of
``EngineCoreOutput``s made by hand, as the engine core sends them (several requests a step, one
or more tokens each, the finish the engine decides: its length, or a stop token id), and what
the contract says each request's outputs must be.

The oracle for a request is its unstopped run: the same token ids through the same output
processor with no stops (vLLM's own detokenizer, one token a step) give vLLM's text after each
token; the stops are then applied to that text by a reference filter
(``stopstream.reference.ReferenceStopFilter`` for literal stops, ``stopstream.StopFilter`` where
a regex is among them), fed token by token, quiet over the first ``min_tokens`` tokens.
"""

from __future__ import annotations

import copy
import importlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import stopstream
import stopstream.reference


def vllm(module: str) -> Any:
    """A vLLM module (typed ``Any``: the tests are type-checked without vLLM)."""
    return importlib.import_module(module)


def logprob_of(position: int) -> float:
    """The sampled token's logprob the engine reports at output ``position``: exact in
    float32, so a streamed logprob tells which position it belongs to."""
    return -(position + 1) / 8


@dataclass
class Request:
    """One request as the engine core runs it: ``tokens[i]`` are the ids sequence ``i`` samples
    (``n`` = their number; more than one makes a parallel-sampling parent), ``steps`` the
    number of tokens the engine delivers per step (cycled), ``stop_token``: the last id of each
    sequence is a stop token id, so the engine finishes it with ``stop`` (else ``length``)."""

    rid: str
    params: Any
    tokens: list[list[int]]
    prompt_ids: list[int]
    steps: Sequence[int] = (1,)
    stop_token: bool = False


@dataclass
class Seen:
    """A sequence's outputs so far, after one more ``CompletionOutput``: all text, ids and
    logprobs received (the sum of the deltas, or the last whole output), and how many tokens
    the engine had generated for it then."""

    generated: int
    text: str
    ids: list[int]
    logprobs: list[Any]
    finished: bool
    finish_reason: str | None
    stop_reason: Any


@dataclass
class Run:
    """What the frontend sent, per sequence (``(rid, index)``), and what it asked the engine."""

    seen: dict[tuple[str, int], list[Seen]] = field(default_factory=dict)
    # How often each sequence was in `reqs_to_abort`, and whether the engine had finished it
    # itself by then.
    aborted: Counter[tuple[str, int]] = field(default_factory=Counter)
    engine_finished: set[tuple[str, int]] = field(default_factory=set)
    # The detokenizer the plugin gave each sequence (its class name).
    detokenizers: dict[tuple[str, int], str] = field(default_factory=dict)

    def last(self, key: tuple[str, int]) -> Seen:
        return self.seen[key][-1]


@dataclass
class _Sequence:
    """The engine's side of one sequence: what it has sent so far."""

    key: tuple[str, int]
    child_id: str
    tokens: list[int]
    steps: Sequence[int]
    stop_token: bool
    logprobs: bool
    delta: bool
    vocab_size: int
    sent: int = 0

    def next_output(self, step: int) -> Any:
        engine = vllm("vllm.v1.engine")
        count = self.steps[step % len(self.steps)]
        new = self.tokens[self.sent : self.sent + count]
        first = self.sent
        self.sent += len(new)
        finish = stop_reason = None
        if self.sent >= len(self.tokens):
            finish = engine.FinishReason.STOP if self.stop_token else engine.FinishReason.LENGTH
            stop_reason = self.tokens[-1] if self.stop_token else None
        return engine.EngineCoreOutput(
            request_id=self.child_id,
            new_token_ids=list(new),
            new_logprobs=self._logprobs(new, first) if self.logprobs else None,
            finish_reason=finish,
            stop_reason=stop_reason,
        )

    def _logprobs(self, new: list[int], first: int) -> Any:
        """One row per new token: the sampled token first (rank 1), then one other."""
        import numpy as np

        lists = vllm("vllm.v1.outputs").LogprobsLists
        ids = [[t, (t + 1) % self.vocab_size] for t in new]
        values = [[logprob_of(first + i), -50.0] for i in range(len(new))]
        return lists(
            np.array(ids, dtype=np.int32),
            np.array(values, dtype=np.float32),
            np.ones(len(new), dtype=np.int32),
        )


def run(tokenizer: Any, requests: list[Request], *, stream_interval: int = 1) -> Run:
    """Run ``requests`` to their end through one ``OutputProcessor``, all of them in every
    step, and record what it sends. A sequence the frontend asks to abort leaves the engine
    (after one more output already on its way, which the frontend must ignore)."""
    engine = vllm("vllm.v1.engine")
    processor = vllm("vllm.v1.engine.output_processor").OutputProcessor(
        tokenizer, log_stats=False, stream_interval=stream_interval
    )
    parallel = vllm("vllm.v1.engine.parallel_sampling")
    delta_kind = vllm("vllm.sampling_params").RequestOutputKind.DELTA
    result = Run()
    live: dict[str, _Sequence] = {}
    by_key: dict[tuple[str, int], _Sequence] = {}
    for r in requests:
        core = engine.EngineCoreRequest(
            request_id=f"{r.rid}-int",
            external_req_id=r.rid,
            prompt_token_ids=list(r.prompt_ids),
            mm_features=None,
            sampling_params=r.params,
            pooling_params=None,
            arrival_time=0.0,
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
        )
        children: list[tuple[str, Any, Any]] = []
        if len(r.tokens) == 1:
            children.append((core.request_id, core, None))
        else:
            assert r.params.n == len(r.tokens)
            parent = parallel.ParentRequest(core)
            for index in range(len(r.tokens)):
                child_id, child_params = parent.get_child_info(index)
                child = copy.copy(core)
                child.request_id = child_id
                child.sampling_params = child_params
                children.append((child_id, child, parent))
        for index, (child_id, child, parent) in enumerate(children):
            processor.add_request(child, None, parent, index)
            seq = _Sequence(
                key=(r.rid, index),
                child_id=child_id,
                tokens=r.tokens[index],
                steps=r.steps,
                stop_token=r.stop_token,
                logprobs=r.params.logprobs is not None,
                delta=r.params.output_kind == delta_kind,
                vocab_size=len(tokenizer),
            )
            live[child_id] = seq
            by_key[seq.key] = seq
            result.seen[seq.key] = []
            state = processor.request_states[child_id]
            result.detokenizers[seq.key] = type(state.detokenizer).__name__

    step = 0
    in_flight: list[Any] = []
    while live or in_flight:
        outputs = in_flight + [seq.next_output(step) for seq in live.values()]
        in_flight = []
        for out in outputs:
            if out.finish_reason is not None and out.request_id in live:
                result.engine_finished.add(live.pop(out.request_id).key)
        processed = processor.process_outputs(outputs)
        for request_output in processed.request_outputs:
            for c in request_output.outputs:
                key = (request_output.request_id, c.index)
                _record(result, by_key[key], c)
        for child_id in processed.reqs_to_abort:
            seq = next(s for s in by_key.values() if s.child_id == child_id)
            result.aborted[seq.key] += 1
            assert not processor.has_request(child_id), child_id
            if child_id in live:
                # The engine had sent this step's output already; one more is on its way.
                del live[child_id]
                in_flight.append(
                    engine.EngineCoreOutput(request_id=child_id, new_token_ids=[seq.tokens[0]])
                )
        step += 1
    assert not processor.has_unfinished_requests()
    return result


def _record(result: Run, seq: _Sequence, c: Any) -> None:
    seen = result.seen[seq.key]
    assert not (seen and seen[-1].finished), (seq.key, "an output after the final one")
    before = seen[-1] if seen and seq.delta else Seen(0, "", [], [], False, None, None)
    seen.append(
        Seen(
            generated=seq.sent,
            text=before.text + c.text,
            ids=before.ids + list(c.token_ids),
            logprobs=before.logprobs + list(c.logprobs or []),
            finished=c.finish_reason is not None,
            finish_reason=c.finish_reason,
            stop_reason=c.stop_reason,
        )
    )


def make_request(
    rid: str,
    tokens: list[int] | list[list[int]],
    prompt_ids: list[int],
    *,
    steps: Sequence[int] = (1,),
    stop_token: bool = False,
    **params: Any,
) -> Request:
    """A :class:`Request` with ``SamplingParams(**params)`` (``DELTA`` unless said; ``n`` and
    ``max_tokens`` from the tokens)."""
    sampling = vllm("vllm.sampling_params")
    sequences: list[list[int]] = (
        [list(t) for t in tokens] if tokens and isinstance(tokens[0], list) else [list(tokens)]  # type: ignore[arg-type]
    )
    params.setdefault("output_kind", sampling.RequestOutputKind.DELTA)
    params.setdefault("max_tokens", max(len(t) for t in sequences))
    if len(sequences) > 1:
        params["n"] = len(sequences)
    return Request(rid, sampling.SamplingParams(**params), sequences, prompt_ids, steps, stop_token)


# The oracle -------------------------------------------------------------------------------


@dataclass
class Expected:
    """A sequence's whole output per the contract, and what it streams: ``texts[k]`` is vLLM's
    text after ``k`` tokens, ``want[k]`` the §2.5 output of it (over the first ``fired`` tokens
    when a stop fires), ``want_whole[k]`` the same over the whole characters of the tokens'
    bytes."""

    text: str
    token_ids: list[int]
    finish_reason: str
    stop_reason: Any
    fired: int | None
    texts: list[str]
    want: list[str]
    want_whole: list[str]


def unstopped_texts(tokenizer: Any, requests: list[Request]) -> dict[tuple[str, int], list[str]]:
    """vLLM's text after each token of every sequence, from a run without stops (one token a
    step; the same detokenizing options and ending)."""
    plain = []
    for r in requests:
        p = r.params
        for i, tokens in enumerate(r.tokens):
            plain.append(
                make_request(
                    f"{r.rid}/{i}",
                    tokens,
                    r.prompt_ids,
                    stop_token=r.stop_token,
                    skip_special_tokens=p.skip_special_tokens,
                    spaces_between_special_tokens=p.spaces_between_special_tokens,
                    include_stop_str_in_output=p.include_stop_str_in_output,
                )
            )
    out = run(tokenizer, plain)
    texts = {}
    for r in requests:
        for i, tokens in enumerate(r.tokens):
            seen = out.seen[(f"{r.rid}/{i}", 0)]
            assert [s.generated for s in seen] == list(range(1, len(tokens) + 1))
            texts[(r.rid, i)] = ["", *(s.text for s in seen)]
    return texts


def stops_of(params: Any) -> tuple[list[Any], dict[str, Any]]:
    """A request's stops as the contract reads them (its own ``stop``, then
    ``extra_args["stopstream"]["stop"]``) as ``stopstream`` items, and the skip options."""
    stops: list[Any] = list(params.stop or [])
    options: dict[str, Any] = {}
    extra = (params.extra_args or {}).get("stopstream")
    if isinstance(extra, str):
        extra = json.loads(extra)
    for item in (extra or {}).get("stop", []):
        if isinstance(item, str):
            stops.append(item)
        elif "regex" in item:
            stops.append(stopstream.Regex(item["regex"], include=item.get("include")))
        else:
            stops.append(stopstream.Stop(item["text"], include=item.get("include")))
    for name in ("skip", "skip_until"):
        if extra and name in extra:
            options[name] = extra[name]
    return stops, options


def _reference(stops: list[Any], include: bool, options: dict[str, Any], quiet: bool) -> Any:
    if any(isinstance(s, stopstream.Regex) for s in stops):
        return stopstream.StopFilter(stops, include_stop=include, **options)
    # Stop items where they have their own flag, or where the filter is to be quiet (which
    # only a composed list can be).
    literal = [
        stopstream.reference.Stop(s.text, s.include)
        if isinstance(s, stopstream.Stop)
        else stopstream.reference.Stop(s)
        if quiet
        else s
        for s in stops
    ]
    skip = [tuple(p) for p in options.get("skip", [])] or None
    return stopstream.reference.ReferenceStopFilter(
        literal, include, skip=skip, skip_until=options.get("skip_until")
    )


def _outputs(
    texts: list[str], stops: list[Any], include: bool, options: dict[str, Any], min_tokens: int
) -> tuple[list[str], int | None, Any]:
    """The filter's output after each token's text (``[k]``: after ``k`` tokens), where it fired
    (a token count) and the filter."""
    quiet = min_tokens > 0
    f = _reference(stops, include, options, quiet)
    if quiet:
        f._quiet(True)
    out = [""]
    for k in range(1, len(texts)):
        out.append(out[-1] + f.feed(texts[k][len(texts[k - 1]) :]))
        if quiet and k >= min_tokens:
            f._quiet(False)
            quiet = False
        if f.stopped:
            return out, k, f
    return out, None, f


def expected(r: Request, index: int, texts: list[str], whole: list[str] | None = None) -> Expected:
    """What sequence ``index`` of request ``r`` must output (``texts``: its unstopped texts;
    ``whole``: the whole characters of its tokens' bytes after each token, default ``texts``)."""
    p = r.params
    tokens = r.tokens[index]
    stops, options = stops_of(p)
    include = bool(p.include_stop_str_in_output)
    min_tokens = int(p.min_tokens or 0)
    want, fired, f = _outputs(texts, stops, include, options, min_tokens)
    want_whole, _, _ = _outputs(whole or texts, stops, include, options, min_tokens)
    # A stop complete in the whole characters first is not yet in vLLM's text: the output
    # over the whole characters stays the one it fired with.
    want_whole += want_whole[-1:] * (len(want) - len(want_whole))
    if fired is not None:
        return Expected(
            want[fired], tokens[:fired], "stop", f.stop_sequence, fired, texts, want, want_whole
        )
    end = want[-1] + f.finish()
    if f.stop_reason == "stop_sequence":  # a stop decided by the end of the text
        return Expected(end, tokens, "stop", f.stop_sequence, len(tokens), texts, want, want_whole)
    assert end == texts[-1]
    finish = "stop" if r.stop_token else "length"
    reason = tokens[-1] if r.stop_token else None
    return Expected(end, tokens, finish, reason, None, texts, want, want_whole)
