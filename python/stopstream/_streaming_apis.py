"""The streaming APIs stopstream knows, one row each: the one place their facts live.

``stopstream.sse`` (how a body is framed), the command line (``--sse NAME``: which machine,
what to report, what a finished body ends with) and ``stopstream.asgi`` (where a request keeps
its stops, where it goes upstream, how an error looks, the whole-response rules and the SSE
wrapper of each route) read this table. A new streaming API is its module
(its ``Machine`` and view) and one row here (plus, for speed, its shape in the core's tables;
until then ``native=False`` runs its SSE bodies in Python).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stopstream import gemini
from stopstream._responses import ResponsesMachine, truncate_response
from stopstream.anthropic import MessagesMachine, truncate_message
from stopstream.gemini import GeminiMachine
from stopstream.openai import ChatMachine, truncate_chat

if TYPE_CHECKING:
    from stopstream._adapter import Machine, OnStop, Shape
    from stopstream._types import Stops


@dataclass(frozen=True)
class StreamingApi:
    """One streaming API."""

    name: str  # the command line's ``--sse`` name
    label: str  # what messages call it ("Chat Completions")
    shape: Shape  # its machine's ``shape``: the native stage's rules for the common event
    # (stops, include_stop, on_stop, count of parallel streams or None) -> its machine
    machine: Callable[[Stops, bool | None, OnStop, int | None], Machine]
    final_event: str  # what a finished stream ends with, as messages name it
    done: bool  # ``data: [DONE]`` ends the SSE body and follows a stop
    named: bool  # the SSE events a machine adds get an ``event:`` line naming their type
    per: str | None  # what each parallel text stream is ("choice"), or None: one stream
    ended: Callable[[Any], bool]  # a stream's view -> whether the body reached its final event
    truncate: Callable[..., Any]  # its whole (non-streamed) response's ``truncate_*``
    # The core parses its SSE bodies and handles the common event natively (it knows the
    # shape); otherwise ``stopstream.sse.SSEDriver`` runs the body in Python, same output.
    native: bool = True
    # What a gateway in front of the API reads (``stopstream.asgi``); ``path`` None: no route.
    path: str | None = None  # the endpoint on the provider's host ("/v1/messages")
    base_path: str = ""  # the start of ``path`` that its SDK's base URL holds ("/v1")
    stop_field: str | None = None  # the request's stop list; None: the API has none
    count_field: str | None = None  # the request's count of parallel text streams ("n")
    # (message, the request field at fault or None) -> an error body in the API's shape
    error: Callable[[str, str | None], dict[str, Any]] | None = None


def _openai_error(message: str, param: str | None) -> dict[str, Any]:
    # https://platform.openai.com/docs/guides/error-codes: {"error": {message, type, param, code}}
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return {"error": error}


def _anthropic_error(message: str, _param: str | None) -> dict[str, Any]:
    # https://docs.anthropic.com/en/api/errors: {"type": "error", "error": {type, message}}
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _all_finished(view: Any) -> bool:
    reasons = view.finish_reasons
    return bool(reasons) and None not in reasons.values()


def _complete(view: Any) -> bool:
    return bool(view.complete)


def _has_stop_reason(view: Any) -> bool:
    return view.stop_reason is not None


CHAT = StreamingApi(
    name="openai",
    label="Chat Completions",
    shape="chat",
    machine=ChatMachine,
    final_event="a finish_reason for every choice",
    done=True,
    named=False,
    per="choice",
    ended=_all_finished,
    truncate=truncate_chat,
    path="/v1/chat/completions",
    base_path="/v1",
    stop_field="stop",
    count_field="n",
    error=_openai_error,
)
RESPONSES = StreamingApi(
    name="responses",
    label="Responses",
    shape="responses",
    machine=lambda stops, include_stop, on_stop, _count: ResponsesMachine(
        stops, include_stop, on_stop
    ),
    final_event="response.completed, .incomplete or .failed",
    done=False,
    named=True,
    per=None,
    ended=_complete,
    truncate=truncate_response,
    path="/v1/responses",
    base_path="/v1",
    stop_field=None,  # `ResponseCreateParams` has no `stop`
    error=_openai_error,
)
MESSAGES = StreamingApi(
    name="anthropic",
    label="Messages",
    shape="messages",
    machine=lambda stops, include_stop, on_stop, _count: MessagesMachine(
        stops, include_stop, on_stop
    ),
    final_event="message_delta with its stop_reason",
    done=False,
    named=True,
    per=None,
    ended=_has_stop_reason,
    truncate=truncate_message,
    path="/v1/messages",
    stop_field="stop_sequences",
    error=_anthropic_error,
)
GEMINI = StreamingApi(
    name="gemini",
    label="Gemini",
    shape="gemini",
    machine=GeminiMachine,
    final_event="a finishReason for every candidate",
    done=False,
    named=False,
    per="candidate",
    ended=_complete,
    truncate=gemini.truncate_response,
)

#: By command-line name, in the order the command line lists them.
APIS: dict[str, StreamingApi] = {api.name: api for api in (CHAT, RESPONSES, MESSAGES, GEMINI)}
#: By machine shape.
BY_SHAPE: dict[Shape, StreamingApi] = {api.shape: api for api in APIS.values()}
