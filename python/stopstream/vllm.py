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
server), never an error inside the engine's output loop.

``STOPSTREAM_VLLM=0`` turns the plugin off. It patches only the vLLM versions it was tested
against (:data:`TESTED`); under any other it logs that and does nothing.

Importing this module does not import vLLM (``import stopstream`` never does either); vLLM is
imported by ``register``, which vLLM calls.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

from ._vllm_detok import StopDetokenizer
from ._vllm_fast import TokenDetokenizer, vocab_for
from ._vllm_options import RequestStops, read_options

__all__ = ["TESTED", "active", "register", "request_stops", "set_enabled", "set_token_path"]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


TESTED = ("0.32.",)
"""Prefixes of the vLLM versions the plugin was tested against."""

_state: dict[str, Any] = {}


def _vllm(module: str) -> Any:
    """A vLLM module, typed ``Any``: the package is type-checked without vLLM installed."""
    return importlib.import_module(module)


def _logger() -> logging.Logger:
    try:
        logger: logging.Logger = _vllm("vllm.logger").init_logger("vllm.plugins.stopstream")
        return logger
    except Exception:  # vLLM's logger is a convenience; the standard one always works.
        return logging.getLogger("stopstream.vllm")


def request_stops(params: Any) -> RequestStops | None:
    """The request's stop options (``None``: vLLM's own detokenizer serves it); raises
    ``ValueError`` naming a bad option."""
    return read_options(params)


def register() -> None:
    """Install the plugin into the vLLM of this process (idempotent; never raises)."""
    if _state.get("registered"):
        return
    _state["registered"] = True
    log = _logger()
    _state["tokens"] = not _off("STOPSTREAM_VLLM_TOKENS")
    if _off("STOPSTREAM_VLLM"):
        log.info("stopstream: vLLM plugin off (STOPSTREAM_VLLM=0)")
        return
    try:
        vllm = _vllm("vllm")
    except ImportError:
        log.info("stopstream: vLLM is not installed; the vLLM plugin stays inactive")
        return
    try:
        version = str(getattr(vllm, "__version__", "unknown"))
        if not version.startswith(TESTED):
            log.warning(
                "stopstream: vLLM %s is not a version the plugin was tested against (%s); "
                "the plugin stays inactive",
                version,
                ", ".join(t + "x" for t in TESTED),
            )
            return
        _patch()
    except Exception:
        log.exception("stopstream: could not install the vLLM plugin; it stays inactive")
        return
    _state["active"] = True
    _state["version"] = version
    # Every vLLM process loads the plugin, some before their logging is set up (the API
    # server parses its arguments first); the one line at INFO comes from the process that
    # detokenizes, when its output processor is made.
    log.debug("stopstream: vLLM plugin installed (vLLM %s)", version)


def _off(name: str) -> bool:
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


def set_token_path(enabled: bool) -> None:
    """Let requests take the token-id path where it applies (``True``, the default; the
    environment's ``STOPSTREAM_VLLM_TOKENS=0`` says ``False``), or serve every request with stops
    by the text path (for comparisons: tests and benchmarks)."""
    _state["tokens"] = enabled


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


def _patch() -> None:
    SamplingParams: Any = _vllm("vllm.sampling_params").SamplingParams
    detokenizer = _vllm("vllm.v1.engine.detokenizer")

    cls: Any = detokenizer.IncrementalDetokenizer
    original = cls.__dict__["from_new_request"].__func__
    base = detokenizer.BaseIncrementalDetokenizer

    def from_new_request(klass: Any, tokenizer: Any, request: Any) -> Any:
        params = request.sampling_params
        if params is None or tokenizer is None:
            return original(klass, tokenizer, request)
        try:
            options = read_options(params)
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

    def text_path(tokenizer: Any, request: Any) -> StopDetokenizer:
        """The text path for a request the token-id path hands over (its options read again:
        a request in flight keeps nothing it does not need on every step)."""
        params = request.sampling_params
        options = read_options(params)
        assert options is not None
        return StopDetokenizer(original(cls, tokenizer, request), options, params.max_tokens)

    def _token_path(klass: Any, tokenizer: Any, request: Any, options: RequestStops) -> Any:
        """The token-id path where it gives vLLM's text (see `_vllm_fast`), else None."""
        params = request.sampling_params
        if (
            not _state.get("tokens", True)
            or options.min_tokens
            or not params.skip_special_tokens
            or not detokenizer.uses_fast_detokenizer(tokenizer)
        ):
            return None
        vocab = vocab_for(tokenizer)
        if vocab is None:
            return None

        try:
            return TokenDetokenizer(
                vocab, options, params.max_tokens, text_path, tokenizer, request
            )
        except (TypeError, ValueError):
            # This build's TokenStopFilter does not take these stops (regex, skip).
            return None

    _state["classes"] = (cls, cls.__dict__["from_new_request"], classmethod(from_new_request))
    cls.from_new_request = _state["classes"][2]

    _patch_streamed_tokens()
    _announce_with_the_output_processor()

    verify = SamplingParams.verify
    # vLLM's server answers 400 to its own validation error only (a bare ValueError is a 500);
    # this one is both, so `LLM` callers get a ValueError as everywhere else.
    option_error: Any = type(
        "StopstreamOptionError", (_vllm("vllm.exceptions").VLLMValidationError, ValueError), {}
    )

    def checked_verify(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = verify(self, *args, **kwargs)
        try:
            read_options(self)
        except ValueError as e:
            raise option_error(str(e), parameter="extra_args") from None
        return result

    SamplingParams.verify = checked_verify


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
