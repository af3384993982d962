"""stopstream inside SGLang: a general plugin that applies a request's stops (contract §11).

SGLang loads the entry points of the ``sglang.srt.plugins`` group (filtered by
``SGLANG_PLUGINS``) in its processes (the server's, the scheduler's, the detokenizer's) and
calls them; this package registers :func:`register` there. It replaces, through SGLang's
``HookRegistry``:

- ``Req._check_str_based_finish`` (the scheduler's stop check, once per request per step):
  the request's text is decoded a token at a time and fed to a stopstream filter, so the stop
  that fires is §2's (earliest end, then longest, then first listed), regex stops included,
  for every token a step accepted (speculative decoding), at a cost that does not grow with
  the number of stops;
- ``Req.check_match_stop_str_prefix`` (whether a streamed step is held back): held exactly
  while the text ends with something that could still become a stop (§2.5, regex stops
  included), never otherwise;
- ``DetokenizerManager.trim_matched_stop`` (the final text's cut): at the match the scheduler
  found (the finish reason carries the cut to the detokenizer process), not at the first
  occurrence of the matched text.

``no_stop_trim`` is §2's ``include_stop``. More stops and options come in
``SamplingParams.custom_params["stopstream"]`` (the vLLM plugin's options, §10: ``stop``,
``skip``, ``skip_until``, ``skip_reasoning``), bounded as §10.2 (``STOPSTREAM_SGLANG_MAX_*``)
and checked when SGLang normalizes the request's sampling parameters, so a bad option is a
``ValueError`` there (a 400 from the server).

Which SGLang: the plugin serves a release whose surfaces are the ones it replaces (:func:`check`
looks at them); it stays inactive, saying why in one log line, where they differ and under
``STOPSTREAM_SGLANG=0``; while inactive, a request carrying stopstream options is rejected
rather than served without them. ``python -m stopstream.sglang`` prints the verdict.

Importing this module does not import SGLang; :func:`register` does.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from . import _plugin
from ._core import Regex, StopSet
from ._plugin import Surfaces, Verdict
from ._plugin import engine_module as _sglang
from ._plugin import params as _params
from ._sglang_stream import Fired, RequestStream, decoder_for
from ._vllm_options import EXTRA_KEY, Bounds, Dialect, Reasoning, RequestStops, read_options

__all__ = [
    "BOUND_ENV",
    "CUT_KEY",
    "SGLANG",
    "TESTED",
    "Verdict",
    "active",
    "check",
    "main",
    "register",
    "request_options",
    "set_enabled",
]


def __dir__() -> list[str]:
    return sorted(__all__)


TESTED = ("0.5.23",)
"""The SGLang releases the plugin is tested against in CI."""

#: SGLang's names: options in ``SamplingParams.custom_params``, bounds ``STOPSTREAM_SGLANG_MAX_*``.
SGLANG = Dialect(field="custom_params", prefix="STOPSTREAM_SGLANG_")
#: The environment variable of each bound.
BOUND_ENV = SGLANG.env_names()
#: The key of the finish reason that carries the cut from the scheduler to the detokenizer
#: (characters to drop from the end of the text through the stop's token); the detokenizer
#: removes it, so clients see SGLang's own finish reason.
CUT_KEY = "stopstream_cut"

_REQ = "sglang.srt.managers.schedule_batch.Req"
_DETOK = "sglang.srt.managers.detokenizer_manager.DetokenizerManager"
_PARAMS = "sglang.srt.sampling.sampling_params.SamplingParams"
TARGETS = {
    "check": f"{_REQ}._check_str_based_finish",
    "hold": f"{_REQ}.check_match_stop_str_prefix",
    "trim": f"{_DETOK}.trim_matched_stop",
    "normalize": f"{_PARAMS}.normalize",
    "reason": "sglang.srt.managers.schedule_batch.FINISH_MATCHED_STR.to_json",
    "regex_reason": "sglang.srt.managers.schedule_batch.FINISHED_MATCHED_REGEX.to_json",
}

# The attribute of a Req that holds its state: a RequestStream, _STOCK (served by SGLang's
# own functions) or _NONE (no stops at all).
_ATTR = "_stopstream"
_STOCK = "stock"
_NONE = "none"

_SGLANG = _plugin.Engine(
    name="SGLang",
    module="sglang",
    switch="STOPSTREAM_SGLANG",
    tested=TESTED,
    release=str,
    bound_env=BOUND_ENV,
    verb="replaces",
    skip_reasoning_env="STOPSTREAM_SGLANG_SKIP_REASONING",
)

_state: dict[str, Any] = {}


def _logger() -> logging.Logger:
    # Under SGLang's own logger tree, so its log configuration shows the line.
    return logging.getLogger("sglang.srt.plugins.stopstream")


def _bounds() -> Bounds:
    return _plugin.bounds(_SGLANG, _state)


def _surfaces() -> list[str]:
    """What differs from the surfaces the plugin replaces and relies on (empty: all there)."""
    surfaces = Surfaces()
    need = surfaces.need
    try:
        batch = _sglang("sglang.srt.managers.schedule_batch")
        detok = _sglang("sglang.srt.managers.detokenizer_manager")
        sampling = _sglang("sglang.srt.sampling.sampling_params")
        hooks = _sglang("sglang.srt.plugins.hook_registry")
    except Exception as e:  # a module moved or failed to import
        return [f"a module the plugin hooks does not import ({type(e).__name__}: {e})"]
    req: Any = getattr(batch, "Req", None)
    need(
        lambda: (
            _params(req._check_str_based_finish) == ["self", "new_accepted_len"]
            and "_check_str_based_finish" in req.update_finish_state.__code__.co_names
        ),
        "Req._check_str_based_finish(new_accepted_len), called by update_finish_state",
    )
    need(
        lambda: _params(req.check_match_stop_str_prefix) == ["self"],
        "Req.check_match_stop_str_prefix()",
    )
    need(
        lambda: (
            {
                "output_ids",
                "finished_reason",
                "finished_len",
                "sampling_params",
                "tokenizer",
                "origin_input_ids_unpadded",
            }
            <= set(req.__init__.__code__.co_names)
        ),
        "Req's output_ids, finished_reason, finished_len, sampling_params, tokenizer",
    )
    need(
        lambda: (
            all(
                _params(getattr(batch, name).__init__)[1:] == ["matched"]
                for name in ("FINISH_MATCHED_STR", "FINISHED_MATCHED_REGEX")
            )
            and batch.FINISH_MATCHED_STR("x").to_json() == {"type": "stop", "matched": "x"}
            and _params(batch.FINISH_ABORT.__init__)[1:] == ["message", "status_code", "err_type"]
        ),
        "FINISH_MATCHED_STR(matched), FINISHED_MATCHED_REGEX(matched), FINISH_ABORT",
    )
    need(
        lambda: (
            _params(detok.DetokenizerManager.trim_matched_stop)
            == ["self", "output", "finished_reason", "no_stop_trim"]
        ),
        "DetokenizerManager.trim_matched_stop(output, finished_reason, no_stop_trim)",
    )
    params: Any = getattr(sampling, "SamplingParams", None)
    need(
        lambda: (
            _params(params.normalize) == ["self", "tokenizer"]
            and {
                "stop_strs",
                "stop_regex_strs",
                "no_stop_trim",
                "custom_params",
                "skip_special_tokens",
                "spaces_between_special_tokens",
            }
            <= set(params.__struct_fields__)
        ),
        "SamplingParams.normalize(tokenizer) and its stop fields",
    )
    need(
        lambda: callable(hooks.HookRegistry.register) and hooks.HookType.REPLACE,
        "HookRegistry.register and HookType.REPLACE",
    )
    return surfaces.problems


def check() -> Verdict:
    """Whether the plugin would serve the SGLang installed here, and why (imports SGLang)."""
    return _plugin.check(_SGLANG, _surfaces)


def active() -> bool:
    """Whether the plugin's hooks are registered in this process."""
    return bool(_state.get("active"))


def set_enabled(enabled: bool) -> None:
    """Serve requests by the plugin's functions (``True``) or by SGLang's own, in this
    process, once SGLang has applied the plugin's hooks (for comparisons: tests and
    benchmarks). The options' check at normalization stays."""
    if "stock" not in _state:
        raise RuntimeError("the stopstream SGLang plugin is not installed in this process")
    req = _sglang("sglang.srt.managers.schedule_batch").Req
    detok = _sglang("sglang.srt.managers.detokenizer_manager").DetokenizerManager
    places = (
        (req, "_check_str_based_finish"),
        (req, "check_match_stop_str_prefix"),
        (detok, "trim_matched_stop"),
    )
    if "patched" not in _state:
        current = tuple(getattr(owner, name) for owner, name in places)
        if current[0] is _state["stock"][0]:
            raise RuntimeError("SGLang has not applied the plugin's hooks yet")
        _state["patched"] = current
    for (owner, name), function in zip(
        places, _state["patched"] if enabled else _state["stock"], strict=True
    ):
        setattr(owner, name, function)


class _Options:
    """The fields of SGLang's ``SamplingParams`` that :func:`read_options` reads, by its names."""

    __slots__ = ("custom_params", "include_stop_str_in_output", "min_tokens", "stop")

    def __init__(self, params: Any) -> None:
        self.stop = tuple(params.stop_strs or ())
        self.include_stop_str_in_output = bool(params.no_stop_trim)
        # SGLang's stop strings do not wait for min_new_tokens (it only holds EOS back).
        self.min_tokens = 0
        self.custom_params = params.custom_params


def _reasoning(tokenizer: Any) -> Reasoning | None:
    """The server's reasoning markers (from the parser its ``--reasoning-parser`` names, as
    SGLang builds it) and the ``STOPSTREAM_SGLANG_SKIP_REASONING`` default. Also notes whether
    that parser takes every output to start inside the reasoning (DeepSeek-R1's does: its
    template opens it)."""

    def read(name: str, tokenizer: Any) -> tuple[str | None, str | None]:
        parser_cls = _sglang("sglang.srt.parser.reasoning_parser").ReasoningParser
        detector = parser_cls(model_type=name, stream_reasoning=False, tokenizer=tokenizer).detector
        _state["forced"] = bool(getattr(detector, "force_reasoning", False))
        return detector.think_start_token, detector.think_end_token

    try:
        name = _sglang("sglang.srt.runtime_context").get_serving().reasoning_parser or ""
    except Exception:  # no server configuration in this process (SGLang used as a library)
        name = ""
    return _plugin.server_reasoning(_SGLANG, _state, _logger(), name, tokenizer, read)


def request_options(
    params: Any, tokenizer: Any = None, prompt_ids: Any = None
) -> tuple[RequestStops, StopSet, tuple[bool, ...]] | None:
    """A request's stops (``None``: no stop at all): the options read from its normalized
    ``SamplingParams`` (its ``stop``, its ``stop_regex`` after them, then
    ``custom_params["stopstream"]["stop"]``), the list compiled, and which items are regexes.
    With ``skip_reasoning`` (or the server's default), the reasoning markers are the server's
    reasoning parser's, built with ``tokenizer``; given ``prompt_ids``, a prompt that opens the
    reasoning (or a parser that starts every output inside it) makes the stops wait for the end
    marker. Raises ``ValueError`` naming a bad option or the bound it passes, and for a
    ``stop_regex`` that is not in stopstream's dialect (the scheduler then leaves the request
    to SGLang's own stops)."""
    regexes = tuple(params.stop_regex_strs or ())
    options = read_options(_Options(params), _bounds(), _reasoning(tokenizer), SGLANG)
    if options is None:
        if not regexes:
            return None
        include = bool(params.no_stop_trim)
        options = RequestStops((), include, None, None, 0, StopSet([]), None)
    if (
        options.reasoning is not None
        and prompt_ids is not None
        and (_state.get("forced") or _plugin.opens_reasoning(_state, prompt_ids))
    ):
        options = options.opened_in_reasoning()
    own = len(params.stop_strs or ())
    items: list[Any] = list(options.stops)
    compiled = options.compiled
    if regexes:
        # SGLang checks its stop strings, then its regexes: so they are listed.
        items[own:own] = [Regex(p) for p in regexes]
        compiled = StopSet(
            items,
            include_stop=options.include_stop,
            skip=options.skip,
            skip_until=options.skip_until,
        )
    return options, compiled, tuple(isinstance(s, Regex) for s in items)


def _has_options(params: Any) -> bool:
    extra = getattr(params, "custom_params", None)
    return isinstance(extra, dict) and EXTRA_KEY in extra


def _stream_for(req: Any) -> Any:
    """The request's state, made at its first stop check."""
    st = req.__dict__.get(_ATTR)
    if st is not None and (not isinstance(st, RequestStream) or st.source is req.output_ids):
        return st
    # First check, or SGLang restarted the request with a new output array: (re)read it all.
    params = req.sampling_params
    try:
        found = request_options(params, req.tokenizer, req.origin_input_ids_unpadded)
    except ValueError as e:
        if _has_options(params):
            raise
        # SGLang's own fields that stopstream does not take (a `stop_regex` in Python's
        # dialect only, stops over a bound): SGLang's own check serves the request, as it
        # would without the plugin.
        _logger().info("stopstream: request %s is served by SGLang's stops (%s)", req.rid, e)
        st = _STOCK
    else:
        if found is None:
            st = _NONE
        else:
            _options, compiled, regex = found
            decode = decoder_for(req.tokenizer, params)
            st = RequestStream(compiled, regex, decode, req.origin_input_ids_unpadded)
            st.source = req.output_ids
    req.__dict__[_ATTR] = st
    return st


def _install(batch: Any, detok: Any, sampling: Any, registry: Any, hook_type: Any) -> None:
    """Register the hooks (SGLang applies them after every plugin has registered)."""
    req_cls = batch.Req
    stock_check = req_cls._check_str_based_finish
    stock_hold = req_cls.check_match_stop_str_prefix
    stock_trim = detok.DetokenizerManager.trim_matched_stop
    matched_str = batch.FINISH_MATCHED_STR
    matched_regex = batch.FINISHED_MATCHED_REGEX
    abort = batch.FINISH_ABORT
    log = _logger()

    def finish_reason(fired: Fired) -> Any:
        reason = (matched_regex if fired.regex else matched_str)(matched=fired.matched)
        # An instance attribute (the reason stays SGLang's own class); to_json adds it.
        reason.stopstream_cut = fired.drop
        return reason

    def with_cut(data: Any, self: Any) -> Any:
        """The finish reason as SGLang sends it to the detokenizer, with the cut."""
        cut = self.__dict__.get("stopstream_cut")
        if cut is not None and isinstance(data, dict):
            data[CUT_KEY] = cut
        return data

    def check_str_based_finish(self: Any, new_accepted_len: int = 1) -> bool:
        """§2 over the request's text, every accepted token in order (replaces SGLang's)."""
        try:
            st = _stream_for(self)
        except ValueError as e:
            # Normalization rejects such a request first; never fail the scheduler.
            self.finished_reason = abort(str(e), 400, "BadRequestError")
            return True
        except Exception:
            log.exception("stopstream: request %s is served by SGLang's stops", self.rid)
            st = self.__dict__[_ATTR] = _STOCK
        if st is _NONE:
            return False
        if st is _STOCK:
            return bool(stock_check(self, new_accepted_len))
        try:
            fired = st.advance(self.output_ids)
        except Exception:
            log.exception("stopstream: the stop check failed; request %s ends", self.rid)
            self.finished_reason = abort("stop check failed", 500, "InternalServerError")
            return True
        if fired is None:
            return False
        self.finished_reason = finish_reason(fired)
        self.finished_len = fired.tokens
        return True

    def check_match_stop_str_prefix(self: Any) -> bool:
        """Hold the step while the text could still become a stop (replaces SGLang's)."""
        st = self.__dict__.get(_ATTR)
        if isinstance(st, RequestStream):
            return st.held()
        if st is _NONE:
            return False
        return bool(stock_hold(self))

    def trim_matched_stop(self: Any, output: Any, finished_reason: Any, no_stop_trim: bool) -> Any:
        """Cut the final text where the scheduler's check cut it (replaces SGLang's)."""
        if isinstance(finished_reason, dict) and CUT_KEY in finished_reason:
            if not isinstance(output, str):
                # Token ids: the scheduler already ended them with the stop's token.
                return output
            drop = finished_reason.pop(CUT_KEY)
            if isinstance(drop, int) and 0 < drop <= len(output):
                return output[: len(output) - drop]
            return output
        return stock_trim(self, output, finished_reason, no_stop_trim)

    def normalize(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
        """SGLang's normalization, then the request's stop options read (a bad one is a
        ``ValueError`` here, which SGLang answers with a 400)."""
        result = original(self, *args, **kwargs)
        try:
            request_options(self, args[0] if args else kwargs.get("tokenizer"))
        except ValueError:
            if _has_options(self):
                raise
            # Left to SGLang's own stops (see _stream_for).
        return result

    registry.register(TARGETS["check"], check_str_based_finish, hook_type.REPLACE)
    registry.register(TARGETS["hold"], check_match_stop_str_prefix, hook_type.REPLACE)
    registry.register(TARGETS["trim"], trim_matched_stop, hook_type.REPLACE)
    registry.register(TARGETS["normalize"], normalize, hook_type.AROUND)
    registry.register(TARGETS["reason"], with_cut, hook_type.AFTER)
    registry.register(TARGETS["regex_reason"], with_cut, hook_type.AFTER)
    _state["stock"] = (stock_check, stock_hold, stock_trim)


def _reject_options(reason: str, sampling: Any, registry: Any, hook_type: Any) -> None:
    """While inactive: a request with stopstream options is rejected with the reason, never
    served without its stops."""

    def normalize(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
        extra = getattr(self, "custom_params", None)
        if isinstance(extra, dict) and EXTRA_KEY in extra:
            raise ValueError(
                f'custom_params["{EXTRA_KEY}"]: the stopstream SGLang plugin is inactive in '
                f"this server ({reason}), so these stop options cannot be applied"
            )
        return original(self, *args, **kwargs)

    registry.register(TARGETS["normalize"], normalize, hook_type.AROUND)


def register() -> None:
    """Register the plugin's hooks in the SGLang of this process (idempotent; never raises).
    Logs one line: active (with SGLang's version) or inactive and why."""
    log = _logger()
    verdict = _plugin.first_steps(_SGLANG, _state, log, check)
    if verdict is None:
        return
    registry = hook_type = None
    if verdict.version != "none":
        try:
            hooks = _sglang("sglang.srt.plugins.hook_registry")
            registry, hook_type = hooks.HookRegistry, hooks.HookType
        except Exception as e:
            verdict = Verdict(False, verdict.version, f"no HookRegistry ({type(e).__name__})")

    def install() -> None:
        _install(
            _sglang("sglang.srt.managers.schedule_batch"),
            _sglang("sglang.srt.managers.detokenizer_manager"),
            _sglang("sglang.srt.sampling.sampling_params"),
            registry,
            hook_type,
        )

    verdict = _state["verdict"] = _plugin.install(_SGLANG, verdict, log, install)
    if not verdict.active:
        log.warning("stopstream: SGLang plugin inactive: %s", verdict.reason)
        if registry is not None:
            try:
                _reject_options(
                    verdict.reason,
                    _sglang("sglang.srt.sampling.sampling_params"),
                    registry,
                    hook_type,
                )
            except Exception:
                log.exception("stopstream: could not guard requests with stopstream options")
        return
    if verdict.warning:
        log.warning("%s", verdict.warning)
    _state["active"] = True
    log.info(
        "stopstream: SGLang plugin active (SGLang %s): stops are applied by stopstream "
        "(STOPSTREAM_SGLANG=0 turns it off)",
        verdict.version,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m stopstream.sglang``: whether the plugin would serve the SGLang installed
    here, why, and the bounds on request options; exit status 0 when it would serve, 1 if not."""
    del argv
    return _plugin.report(_SGLANG, check())


if __name__ == "__main__":
    sys.exit(main())
