"""stopstream inside vLLM: a general plugin that applies a request's stop strings (contract §10).

vLLM loads the entry points of the ``vllm.general_plugins`` group in each of its processes
(filtered by ``VLLM_PLUGINS``) and calls them; this package registers ``register`` there. vLLM
has no hook for stop strings, so ``register`` replaces the class method
``IncrementalDetokenizer.from_new_request``: a request with stop strings, or with stopstream
options in ``SamplingParams.extra_args["stopstream"]``, gets the token-id path
(:class:`~stopstream._vllm_fast.TokenDetokenizer`) where it reproduces vLLM's text, else the
text path (:class:`~stopstream._vllm_detok.StopDetokenizer` around the detokenizer vLLM would
have made); every other request gets vLLM's own, untouched. ``RequestState`` is patched so
that streamed token ids and logprobs go out with their text. ``SamplingParams.verify`` is
wrapped so that a bad option is a ``ValueError`` at request validation (a 400 from the
server), never an error inside the engine's output loop; the options it reads and compiles
are the ones the detokenizer uses.

Which vLLM: the plugin serves a release whose surfaces are the ones it patches (:func:`check`
looks at them; :data:`TESTED` lists the releases CI runs), with one warning line for a release
not tested. It stays inactive, saying why, where they differ, under ``STOPSTREAM_VLLM=0``, and
under ``VLLM_USE_RUST_FRONTEND=1`` (vLLM-rs then detokenizes and applies stops in Rust). While
it is inactive, a request carrying stopstream options is rejected at validation with the
reason: its stops are never dropped in silence. ``python -m stopstream.vllm`` prints the
verdict for the vLLM of its environment.

Importing this module does not import vLLM (``import stopstream`` never does either); vLLM is
imported by ``register``, which vLLM calls.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from . import _plugin
from ._plugin import Surfaces, Verdict, env_off, env_on
from ._plugin import engine_module as _vllm
from ._plugin import params as _params
from ._vllm_detok import StopDetokenizer
from ._vllm_fast import TokenDetokenizer, vocab_for
from ._vllm_options import BOUND_ENV, EXTRA_KEY, Bounds, Reasoning, RequestStops, read_options

__all__ = [
    "TESTED",
    "Verdict",
    "active",
    "check",
    "main",
    "register",
    "request_stops",
    "set_enabled",
    "set_token_path",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


TESTED = ("0.30", "0.31", "0.32", "0.33", "0.34")
"""The vLLM releases (major.minor) the plugin is tested against in CI."""

_VLLM = _plugin.Engine(
    name="vLLM",
    module="vllm",
    switch="STOPSTREAM_VLLM",
    tested=TESTED,
    release=lambda version: ".".join(version.split(".")[:2]),
    bound_env=BOUND_ENV,
    verb="patches",
    skip_reasoning_env="STOPSTREAM_VLLM_SKIP_REASONING",
)

_state: dict[str, Any] = {}


def _logger() -> logging.Logger:
    try:
        logger: logging.Logger = _vllm("vllm.logger").init_logger("vllm.plugins.stopstream")
        return logger
    except Exception:  # vLLM's logger is a convenience; the standard one always works.
        return logging.getLogger("stopstream.vllm")


def request_stops(params: Any) -> RequestStops | None:
    """The request's stop options (``None``: vLLM's own detokenizer serves it), read with this
    process's bounds and reasoning markers; raises ``ValueError`` naming a bad option."""
    return read_options(params, _bounds(), _state.get("reasoning"))


def _bounds() -> Bounds:
    return _plugin.bounds(_VLLM, _state)


def _surfaces() -> list[str]:
    """What differs from the surfaces the plugin patches and relies on (empty: all there)."""
    surfaces = Surfaces()
    need = surfaces.need
    try:
        detokenizer = _vllm("vllm.v1.engine.detokenizer")
        output_processor = _vllm("vllm.v1.engine.output_processor")
        sampling = _vllm("vllm.sampling_params")
        exceptions = _vllm("vllm.exceptions")
    except Exception as e:  # a module moved or failed to import
        return [f"a module the plugin patches does not import ({type(e).__name__}: {e})"]
    cls = getattr(detokenizer, "IncrementalDetokenizer", None)
    base = getattr(detokenizer, "BaseIncrementalDetokenizer", None)
    factory = cls is not None and cls.__dict__.get("from_new_request")
    need(
        lambda: (
            isinstance(factory, classmethod)
            and _params(factory.__func__)[1:] == ["tokenizer", "request"]
        ),
        "IncrementalDetokenizer.from_new_request(tokenizer, request)",
    )
    need(
        lambda: (
            base is not None
            and _params(base.update)[1:] == ["new_token_ids", "stop_terminated"]
            and _params(base.get_next_output_text)[1:] == ["finished", "delta"]
            and {"stop", "stop_buffer_length", "output_text"}
            <= set(base.__init__.__code__.co_names)
            and hasattr(base, "num_output_tokens")
            and hasattr(cls, "output_token_ids")
        ),
        "BaseIncrementalDetokenizer (update, get_next_output_text, stop, stop_buffer_length, "
        "output_text, output_token_ids, num_output_tokens)",
    )
    need(
        lambda: (
            hasattr(detokenizer, "uses_fast_detokenizer")
            or hasattr(detokenizer, "TokenizersBackend")
        ),
        "detokenizer.uses_fast_detokenizer or TokenizersBackend",
    )
    state = getattr(output_processor, "RequestState", None)
    need(
        lambda: (
            state is not None
            and _params(state._new_completion_output)[1:4]
            == ["token_ids", "finish_reason", "stop_reason"]
        ),
        "RequestState._new_completion_output(token_ids, finish_reason, stop_reason)",
    )
    need(lambda: hasattr(output_processor, "OutputProcessor"), "OutputProcessor")
    if not hasattr(getattr(output_processor, "OutputProcessor", None), "_trim_surplus_tokens"):
        # Before 0.32 the plugin trims a step's tokens after a stop itself.
        need(
            lambda: (
                _params(_vllm("vllm.v1.engine.logprobs").LogprobsProcessor.update_from_output)[1:]
                == ["output"]
                and hasattr(_vllm("vllm.v1.outputs").LogprobsLists, "slice_request")
            ),
            "LogprobsProcessor.update_from_output(output) and LogprobsLists.slice_request",
        )
    params = getattr(sampling, "SamplingParams", None)
    need(
        lambda: (
            params is not None
            and _params(params.verify)[1:5]
            == ["model_config", "speculative_config", "structured_outputs_config", "tokenizer"]
            and {
                "stop",
                "include_stop_str_in_output",
                "min_tokens",
                "max_tokens",
                "skip_special_tokens",
                "extra_args",
            }
            <= set(getattr(params, "__struct_fields__", ()))
        ),
        "SamplingParams.verify(model_config, speculative_config, structured_outputs_config, "
        "tokenizer) and its stop fields",
    )
    need(lambda: sampling.RequestOutputKind.DELTA, "RequestOutputKind.DELTA")
    need(lambda: exceptions.VLLMValidationError, "vllm.exceptions.VLLMValidationError")
    return surfaces.problems


def check() -> Verdict:
    """Whether the plugin would serve the vLLM installed here, and why (imports vLLM)."""

    def veto() -> str | None:
        if env_on("VLLM_USE_RUST_FRONTEND"):
            return "VLLM_USE_RUST_FRONTEND=1: vLLM-rs detokenizes and applies stops, outside Python"
        return None

    return _plugin.check(_VLLM, _surfaces, veto)


def register() -> None:
    """Install the plugin into the vLLM of this process (idempotent; never raises)."""
    log = _logger()
    verdict = _plugin.first_steps(_VLLM, _state, log, check)
    if verdict is None:
        return
    _state["tokens"] = not env_off("STOPSTREAM_VLLM_TOKENS")
    verdict = _state["verdict"] = _plugin.install(_VLLM, verdict, log, _patch)
    if not verdict.active:
        if verdict.version != "none":
            log.warning("stopstream: vLLM plugin inactive: %s", verdict.reason)
            _reject_options(verdict.reason)
        return
    if verdict.warning:
        log.warning("%s", verdict.warning)
    _state["active"] = True
    _state["version"] = verdict.version
    # Every vLLM process loads the plugin, some before their logging is set up (the API
    # server parses its arguments first); the one line at INFO comes from the process that
    # detokenizes, when its output processor is made.
    log.debug("stopstream: vLLM plugin installed (vLLM %s)", verdict.version)


def _option_error() -> Any:
    """vLLM's server answers 400 to its own validation error only (a bare ValueError is a
    500); this one is both, so `LLM` callers get a ValueError as everywhere else."""
    error = _state.get("option_error")
    if error is None:
        base = getattr(_vllm("vllm.exceptions"), "VLLMValidationError", None)
        bases = (base, ValueError) if base is not None else (ValueError,)
        error = type("StopstreamOptionError", bases, {})
        _state["option_error"] = error
    return error


def _raise_option_error(message: str) -> None:
    error = _option_error()
    try:
        exc = error(message, parameter="extra_args")
    except TypeError:  # a ValueError without vLLM's keyword
        exc = error(message)
    raise exc from None


def _reject_options(reason: str) -> None:
    """While inactive: a request with stopstream options is rejected with the reason, never
    served without its stops."""
    try:
        params_cls: Any = _vllm("vllm.sampling_params").SamplingParams
        verify = params_cls.verify
    except Exception:
        return  # nothing validates requests in Python here
    key = EXTRA_KEY

    def rejecting_verify(self: Any, *args: Any, **kwargs: Any) -> Any:
        extra = getattr(self, "extra_args", None)
        if extra and key in extra:
            _raise_option_error(
                f'extra_args["{key}"]: the stopstream vLLM plugin is inactive in this server '
                f"({reason}), so these stop options cannot be applied"
            )
        return verify(self, *args, **kwargs)

    params_cls.verify = rejecting_verify


def _reasoning(config: Any, tokenizer: Any) -> Reasoning | None:
    """The server's reasoning markers (from the parser its ``--reasoning-parser`` names,
    built once per tokenizer) and the ``STOPSTREAM_VLLM_SKIP_REASONING`` default."""

    def read(name: str, tokenizer: Any) -> tuple[str | None, str | None]:
        if tokenizer is None:
            return None, None
        parser_cls = _vllm("vllm.reasoning").ReasoningParserManager.get_reasoning_parser(name)
        parser = parser_cls(tokenizer)
        return parser.reasoning_start_str, parser.reasoning_end_str

    name = getattr(config, "reasoning_parser", None) or ""
    return _plugin.server_reasoning(_VLLM, _state, _logger(), name, tokenizer, read)


def active() -> bool:
    """Whether the plugin is installed in this process."""
    return bool(_state.get("active"))


def set_enabled(enabled: bool) -> None:
    """Serve requests with stops by stopstream (``True``) or by vLLM's own detokenizer, in this
    process, after :func:`register` (for comparisons: tests and benchmarks)."""
    if "classes" not in _state:
        raise RuntimeError("the stopstream vLLM plugin is not installed in this process")
    cls, stock, patched = _state["classes"]
    cls.from_new_request = patched if enabled else stock


def set_token_path(enabled: bool) -> None:
    """Let requests take the token-id path where it applies (``True``, the default; the
    environment's ``STOPSTREAM_VLLM_TOKENS=0`` says ``False``), or serve every request with stops
    by the text path (for comparisons: tests and benchmarks)."""
    _state["tokens"] = enabled


def _options_for(request: Any) -> RequestStops | None:
    """The request's options, as validation read them (the memo), with the reasoning markers
    set for a prompt that opens the reasoning."""
    options = read_options(request.sampling_params, _bounds(), _state.get("reasoning"))
    if (
        options is not None
        and options.reasoning is not None
        and _plugin.opens_reasoning(_state, getattr(request, "prompt_token_ids", None))
    ):
        options = options.opened_in_reasoning()
    return options


def _patch() -> None:
    SamplingParams: Any = _vllm("vllm.sampling_params").SamplingParams
    detokenizer = _vllm("vllm.v1.engine.detokenizer")

    cls: Any = detokenizer.IncrementalDetokenizer
    original = cls.__dict__["from_new_request"].__func__
    base = detokenizer.BaseIncrementalDetokenizer
    uses_fast = getattr(detokenizer, "uses_fast_detokenizer", None)
    if uses_fast is None:
        # vLLM 0.30/0.31: the same test, written inline in from_new_request.
        backend = detokenizer.TokenizersBackend
        fast_ok = bool(getattr(detokenizer, "USE_FAST_DETOKENIZER", True))

        def uses_fast(tokenizer: Any) -> bool:
            return fast_ok and isinstance(tokenizer, backend)

    def from_new_request(klass: Any, tokenizer: Any, request: Any) -> Any:
        params = request.sampling_params
        if params is None or tokenizer is None:
            return original(klass, tokenizer, request)
        try:
            options = _options_for(request)
        except ValueError:
            # Validation rejects such a request before it gets here; never fail the engine.
            return original(klass, tokenizer, request)
        if options is None:
            return original(klass, tokenizer, request)
        try:
            fast = _token_path(klass, tokenizer, request, options)
            if fast is not None:
                return fast
            inner = original(klass, tokenizer, request)
            if not isinstance(inner, base):
                return inner
            return StopDetokenizer(inner, options, params.max_tokens)
        except Exception:
            _logger().exception("stopstream: a request is served by vLLM's own stops")
            return original(klass, tokenizer, request)

    def text_path(tokenizer: Any, request: Any, options: RequestStops) -> StopDetokenizer:
        """The text path for a request the token-id path hands over."""
        params = request.sampling_params
        return StopDetokenizer(original(cls, tokenizer, request), options, params.max_tokens)

    def _token_path(klass: Any, tokenizer: Any, request: Any, options: RequestStops) -> Any:
        """The token-id path where it gives vLLM's text (see `_vllm_fast`), else None."""
        params = request.sampling_params
        if (
            not _state.get("tokens", True)
            or options.min_tokens
            or not params.skip_special_tokens
            or not uses_fast(tokenizer)
        ):
            return None
        vocab = vocab_for(tokenizer)
        if vocab is None:
            return None
        return TokenDetokenizer(vocab, options, params.max_tokens, text_path, tokenizer, request)

    _state["classes"] = (cls, cls.__dict__["from_new_request"], classmethod(from_new_request))
    cls.from_new_request = _state["classes"][2]

    _patch_streamed_tokens()
    if not hasattr(
        _vllm("vllm.v1.engine.output_processor").OutputProcessor, "_trim_surplus_tokens"
    ):
        _trim_surplus_tokens()
    _announce_with_the_output_processor()

    verify = SamplingParams.verify

    def checked_verify(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = verify(self, *args, **kwargs)
        config = args[2] if len(args) > 2 else kwargs.get("structured_outputs_config")
        tokenizer = args[3] if len(args) > 3 else kwargs.get("tokenizer")
        reasoning = _reasoning(config, tokenizer)
        try:
            read_options(self, _bounds(), reasoning)
        except ValueError as e:
            _raise_option_error(str(e))
        return result

    SamplingParams.verify = checked_verify


def _trim_surplus_tokens() -> None:
    """vLLM before 0.32 keeps the tokens an engine step delivered after the one completing a
    stop string (0.32 drops them, and their logprobs, in ``OutputProcessor
    ._trim_surplus_tokens``). Here the plugin's detokenizer drops them from the step's token ids,
    which the output processor reads after it (the same list), and the logprobs of the step are
    cut to the tokens kept before they are taken."""

    def trimming(update: Callable[..., str | None]) -> Callable[..., str | None]:
        def update_and_trim(self: Any, new_token_ids: list[int], stop_terminated: bool) -> Any:
            before = self.num_output_tokens()
            stop = update(self, new_token_ids, stop_terminated)
            if stop is not None:
                kept = self.num_output_tokens() - before
                if 0 <= kept < len(new_token_ids):
                    del new_token_ids[kept:]
            return stop

        return update_and_trim

    for cls in (TokenDetokenizer, StopDetokenizer):
        cls.update = trimming(cls.update)  # type: ignore[method-assign]

    processor: Any = _vllm("vllm.v1.engine.logprobs").LogprobsProcessor
    take = processor.update_from_output

    def update_from_output(self: Any, output: Any) -> None:
        logprobs = output.new_logprobs
        kept = len(output.new_token_ids)
        if logprobs is not None and len(logprobs.logprobs) > kept:
            output.new_logprobs = logprobs.slice_request(0, kept)
        take(self, output)

    processor.update_from_output = update_from_output


def _patch_streamed_tokens() -> None:
    """Streamed token ids and logprobs go out with their text (contract §10, §7's rule).

    In ``DELTA`` mode vLLM sends each step's new token ids (and the last logprobs) whatever
    text it holds back; for a request the plugin serves, ``RequestState._new_completion_output``
    is given the tokens whose text has been emitted instead, and their own logprobs.
    """
    output_processor = _vllm("vllm.v1.engine.output_processor")
    delta_kind = _vllm("vllm.sampling_params").RequestOutputKind.DELTA
    state_cls: Any = output_processor.RequestState
    original = state_cls._new_completion_output
    ours = (TokenDetokenizer, StopDetokenizer)

    def new_completion_output(
        self: Any, token_ids: Any, finish_reason: Any, stop_reason: Any
    ) -> Any:
        d = self.detokenizer
        if not isinstance(d, ours) or self.output_kind is not delta_kind:
            return original(self, token_ids, finish_reason, stop_reason)
        released = d.stream_tokens(finish_reason is not None, len(token_ids))
        if released is None:
            # The usual step: what vLLM would send is what goes out with the text.
            return original(self, token_ids, finish_reason, stop_reason)
        start, end = released
        out = original(self, d.output_token_ids[start:end], finish_reason, stop_reason)
        logprobs = self.logprobs_processor.logprobs
        if logprobs is not None:
            out.logprobs = logprobs[start:end]
        return out

    state_cls._new_completion_output = new_completion_output


def _announce_with_the_output_processor() -> None:
    """Log the start-up line once, when this process makes its first output processor."""
    cls: Any = _vllm("vllm.v1.engine.output_processor").OutputProcessor
    init = cls.__init__

    def announcing_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not _state.get("announced"):
            _state["announced"] = True
            _logger().info(
                "stopstream: vLLM plugin active (vLLM %s): stop strings are applied by "
                "stopstream (STOPSTREAM_VLLM=0 turns it off)",
                _state.get("version"),
            )

    cls.__init__ = announcing_init


def main(argv: list[str] | None = None) -> int:
    """``python -m stopstream.vllm``: whether the plugin would serve the vLLM installed here,
    why, and the bounds on request options; exit status 0 when it would serve, 1 if not."""
    del argv
    return _plugin.report(_VLLM, check())


if __name__ == "__main__":
    sys.exit(main())
