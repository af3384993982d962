"""Shared machinery of the provider adapters.

An adapter is a *machine* that takes one decoded stream event (a JSON object as a ``dict``) at a
time and returns the events to emit in its place. Every emitted event is paired with its
*origin*: the input event it was derived from (the very same object when it passes through
unchanged), or ``None`` for an event the machine synthesized. A *driver* (``ModelDriver`` here,
``SSEDriver`` in ``stopstream.sse``) turns a machine into a lifecycle stage (see
``stopstream._lifecycle``): it converts SDK objects to and from ``dict`` or parses SSE bytes.
``SyncAdapterStream`` / ``AsyncAdapterStream`` run a stage from an upstream by the one stream
lifecycle that ``wrap`` and ``awrap`` follow too, and report what the machine's ``View``
reads from it: the two classes serve every provider and every input (SDK objects, dicts, SSE
bytes); the provider modules' stream class names are aliases of them.

Nothing here imports a provider SDK. ``ModelDriver`` converts SDK objects to and from ``dict``
with ``stopstream._models``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NamedTuple, Protocol, TypeVar

from stopstream._core import SyncDriver
from stopstream._lifecycle import AsyncPull
from stopstream._models import JSON, Rebuild, as_json, rebuild_from_sample
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from typing_extensions import Self

    from stopstream._core import Regex, Stop, StopFilter
    from stopstream._lifecycle import Stage
    from stopstream._types import Stops

Emit = tuple[JSON, JSON | None]
OnStop = Literal["close", "drain"]

_Out = TypeVar("_Out")


def check_on_stop(on_stop: object) -> OnStop:
    if on_stop == "close":
        return "close"
    if on_stop == "drain":
        return "drain"
    raise ValueError(f"on_stop must be 'close' or 'drain', not {on_stop!r}")


Shape = Literal["chat", "messages", "responses", "gemini"]
"""A provider's event shape: which rules the native SSE stage applies to the common event."""


class Machine(Protocol):
    """An adapter's state machine over decoded events: what ``ModelDriver`` and the SSE layer
    (``stopstream.sse``) drive, and what an adapter stream reports from (``view``)."""

    #: The provider's event shape (``stopstream.sse`` frames events and picks its native
    #: common case by it).
    shape: ClassVar[Shape]

    @property
    def open(self) -> bool:
        """No stop or ending yet: the fast paths may handle an item."""
        ...

    @property
    def closing(self) -> bool:
        """Every stream stopped and ``on_stop="close"``: close the upstream, then call ``end``."""
        ...

    @property
    def finished(self) -> bool:
        """The last item owed was emitted: anything later is dropped."""
        ...

    @property
    def stopped(self) -> bool:
        """A stop fired here and ended the stream (every text stream stopped or finished)."""
        ...

    @property
    def complete(self) -> bool:
        """The provider's terminal event was seen, or every text stream stopped."""
        ...

    @property
    def sequence(self) -> int | None:
        """The last sequence number emitted, for a shape that numbers its events; else
        ``None``."""
        ...

    def feed(self, event: JSON) -> list[Emit]: ...

    def end(self) -> list[Emit]:
        """The upstream ended by itself, or was closed after a stop: the events still owed."""
        ...

    def text_filters(self) -> list[OpenText]:
        """The open text streams a fast path may feed."""
        ...

    def note_seen(self, seen: bytes | int) -> None:
        """What a fast path handled that the machine records: Chat's latest chunk with choices
        (its JSON bytes or SDK object), the Responses' latest sequence number."""
        ...

    def view(self) -> View:
        """What a stream over this machine reports."""
        ...


class OpenText(NamedTuple):
    """An open text stream a fast path may feed."""

    key: Any  # its id: an index, or the Responses API's ``(output_index, content_index)``
    filter: StopFilter  # the very filter the machine feeds
    # The list the fast path appends each emitted text to (the Responses API's parts, as
    # ``_delta`` does), or ``None``.
    emitted: list[str] | None = None


class Phase(str, Enum):
    """The phase an adapter's machine is in (see ``Phases``); a ``str``, equal to its value."""

    __str__ = str.__str__

    OPEN = "open"  # no stop or ending yet: the fast paths may handle an item
    DRAINING = "draining"  # a stop fired with ``on_stop="drain"``: read the upstream to its end
    CLOSING = "closing"  # close the upstream, then call ``end``
    ENDED = "ended"  # the last item owed was emitted


# The members as module names: the machines compare phases on every item, and an attribute
# lookup on an enum class costs several times a global's. They compare with ``is`` (a phase is
# always one of these four objects): ``==`` on a ``str`` enum misses the interpreter's string
# fast path, and ``in (A, B)`` builds a tuple per item.
OPEN_PHASE, DRAINING_PHASE, CLOSING_PHASE, ENDED_PHASE = tuple(Phase)


class Phases:
    """The phase an adapter's machine is in, and what is read from it, for every provider:
    ``open`` (no stop or ending yet: the fast paths may handle an item), ``draining`` (a stop
    fired with ``on_stop="drain"``: the upstream is read to its end), ``closing`` (close the
    upstream, then call ``end``) and ``ended`` (the last item owed was emitted)."""

    _stops: tuple[str | Stop | Regex, ...]
    _phase: Phase

    def __init__(self, stops: Stops, include_stop: bool | None, on_stop: OnStop) -> None:
        self._set = stop_set(stops, include_stop)  # validates and compiles the stops once
        self._stops = self._set.stops
        self._on_stop = check_on_stop(on_stop)
        self._phase = OPEN_PHASE

    @property
    def stops(self) -> tuple[str | Stop | Regex, ...]:
        return self._stops

    @property
    def open(self) -> bool:
        """No stop or ending yet: the fast paths may handle an item."""
        return self._phase is OPEN_PHASE

    @property
    def closing(self) -> bool:
        return self._phase is CLOSING_PHASE

    @property
    def draining(self) -> bool:
        return self._phase is DRAINING_PHASE

    @property
    def finished(self) -> bool:
        """The last item owed to the client was emitted: anything later is dropped."""
        return self._phase is ENDED_PHASE

    @property
    def sequence(self) -> int | None:
        return None

    def note_seen(self, seen: bytes | int) -> None:
        """Nothing handled by a fast path needs recording (see ``Machine.note_seen``)."""


def scan(f: StopFilter, text: object, ends: bool) -> str | None:
    """What one event of a text stream emits: ``text`` fed to the stream's filter and, where the
    text stream ends with this event (``ends``), what ``finish()`` releases.

    Every adapter feeds its text streams through here, so that the end of a text stream decides
    like any chunk: a stop that needed the end to fire (``\\bend\\b``, ``x$``) leaves
    ``f.stopped`` set exactly as one seen mid-stream, and the caller's one stop branch reports
    it (the cut, the provider's stop fields, the final events). ``None``: the event carried no
    text (not a ``str``) and nothing was released.
    """
    out = f.feed(text) if isinstance(text, str) else None
    if ends and not f.stopped:
        tail = f.finish()
        if tail:
            out = tail if out is None else out + tail
    return out


def looks_like(item: JSON) -> str:
    """What a decoded item looks like, for the error of an adapter that cannot read it: the
    item or whole response of each streaming API, told apart by the fields that mark it."""
    kind, obj = item.get("type"), item.get("object")
    if obj == "chat.completion":
        return "a whole Chat Completions response (truncate_chat takes it)"
    if obj == "chat.completion.chunk" or isinstance(item.get("choices"), list):
        return "a Chat Completions chunk (wrap_chat takes it)"
    if obj == "response" or kind == "response":
        return "a whole Responses response (truncate_response takes it)"
    if kind == "message":
        return "a whole Messages response (truncate_message takes it)"
    if isinstance(kind, str) and (kind.startswith("response.") or kind == "error"):
        return f"a Responses event {kind!r} (wrap_responses takes it)"
    if isinstance(kind, str):
        return f"a Messages event {kind!r} (wrap_messages takes it)"
    if isinstance(item.get("candidates"), list):
        return "a Gemini chunk (stopstream.gemini.wrap takes it)"
    return f"an object with the keys {sorted(map(str, item))[:8]}"


def not_readable(takes: str, item: JSON) -> TypeError:
    """The error of an item an adapter cannot read (contract §8): what it takes, what it got.
    Raised from a machine's ``feed``, it is a bad item (§9.3)."""
    return TypeError(f"{takes}, not {looks_like(item)}")


# --- SDK objects and dicts as a stage (the conversions are ``_models``'s) ---------------------


class ModelDriver:
    """A machine as a lifecycle stage over dicts or SDK objects, emitting the same kind.

    An event that passes through unchanged is emitted as the very object received; a changed or
    synthesized one is a new ``dict`` for dict input, or an SDK object made by ``rebuild``.
    """

    __slots__ = ("_last", "_machine", "_rebuild", "closing")

    def __init__(self, machine: Machine, rebuild: Rebuild = rebuild_from_sample) -> None:
        self._machine = machine
        self._rebuild = rebuild
        self._last: object = None
        # The machine's ``closing``, copied after each call into it: read after every item, it
        # is a plain attribute (no Python frame), and only the machine's calls change it.
        self.closing = machine.closing

    def push(self, item: Any) -> list[Any]:
        try:
            view = as_json(item)
        except TypeError:
            takes = getattr(self._machine, "takes", None)
            if takes is None:
                raise
            raise TypeError(f"{takes}, not {type(item).__name__}") from None
        self._last = item
        machine = self._machine
        try:
            return [self._output(value, item, view) for value, _ in machine.feed(view)]
        finally:
            self.closing = machine.closing

    def end(self) -> list[Any]:
        machine = self._machine
        try:
            return [self._output(value, self._last, None) for value, _ in machine.end()]
        finally:
            self.closing = machine.closing

    @staticmethod
    def plain(cls: type[Any], known: dict[type[Any], bool]) -> bool:
        """Whether items of class ``cls`` are SDK objects rather than mappings (cached in
        ``known``: an ABC ``isinstance`` check costs more than the rest of a fast path)."""
        plain = known.get(cls)
        if plain is None:
            plain = known[cls] = not issubclass(cls, Mapping)
        return plain

    def _output(self, value: JSON, item: object, view: JSON | None) -> object:
        if value is view:
            return item
        if item is None or isinstance(item, Mapping):
            return value
        return self._rebuild(value, item, view)


# --- what the streams report -------------------------------------------------------------------


class View:
    """What an adapter stream reports, read from its machine at each access.

    A machine supplies its view (``Machine.view``); the stream classes forward every public
    attribute they do not have themselves to it, so one stream class serves every provider.
    Views have no ``__slots__`` (one view per stream), so that the typed names of the streams
    (``stopstream.openai.ChatStopStream``...) can derive from a stream class and a view.
    """

    def __init__(self, machine: Any) -> None:
        self._machine = machine

    @property
    def stops(self) -> tuple[str | Stop | Regex, ...]:
        return self._machine.stops  # type: ignore[no-any-return]


class SingleView(View):
    """What a stream of one text reports (an Anthropic message, a Responses response), read
    from its machine, which keeps ``stopped``, ``stop_sequence``, ``stop_index`` and
    ``complete``."""

    @property
    def stopped(self) -> bool:
        """A stop fired here."""
        return bool(self._machine.stopped)

    @property
    def stop_sequence(self) -> str | None:
        """The stop that ended the text: fired here, or one the upstream applied and named (an
        Anthropic message's ``stop_sequence``); ``None`` otherwise."""
        return self._machine.stop_sequence  # type: ignore[no-any-return]

    @property
    def stop_index(self) -> int | None:
        """The position of ``stop_sequence`` in ``stops``, or ``None``."""
        return self._machine.stop_index  # type: ignore[no-any-return]

    @property
    def complete(self) -> bool:
        """The stream ended: its terminal event arrived (``message_stop``, a Responses
        terminal event), or a stop fired here. ``False`` while it runs and when the upstream
        ended or failed without one (a dropped stream)."""
        return bool(self._machine.complete)


def _view_names(view: View) -> list[str]:
    return [name for name in dir(type(view)) if not name.startswith("_")]


# --- the streams ------------------------------------------------------------------------------


class _ViewAttributes:
    """What both adapter stream classes report beyond their own names: the machine's view
    (read only for names the class lacks, so the stream's own attributes cost nothing)."""

    __slots__ = ()
    _view: View | None

    def __getattr__(self, name: str) -> Any:
        if name[:1] != "_":
            try:
                return getattr(self._view, name)
            except AttributeError:
                pass
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        names = object.__dir__(self)
        return sorted({*names, *_view_names(self._view)} if self._view is not None else names)


class SyncAdapterStream(_ViewAttributes, SyncDriver, Generic[_Out]):
    """Iterator over a stage's output, fed from a sync upstream by the stream lifecycle.

    The stream is the native driver (``stopstream._core.SyncDriver``), the one under ``wrap``:
    the same rules for a stop, a close (also from another thread during a pull; see
    ``stopstream.wrap``), a bad item, an upstream error, and a stream dropped after a partial
    read, and no Python frame per item. What the stream reports (``stop_sequence``,
    ``complete``...) is its machine's ``view``.
    """

    __slots__ = ("__weakref__", "_view")

    def __init__(self, source: Iterable[Any], stage: Stage, view: View | None = None) -> None:
        self._view = view

    if TYPE_CHECKING:  # native: the typed view of ``SyncDriver``'s methods

        def __iter__(self) -> Self: ...

        def __next__(self) -> _Out: ...


class AsyncAdapterStream(_ViewAttributes, AsyncPull[_Out]):
    """Async twin of ``SyncAdapterStream``: ``aclose()``, ``async with``, the same rules, the
    same view."""

    __slots__ = ("_view",)

    def __init__(self, source: AsyncIterable[Any], stage: Stage, view: View | None = None) -> None:
        if not isinstance(source, AsyncIterable):
            raise TypeError(f"stream must be an async iterable, not {type(source).__name__}")
        self._view = view
        super().__init__(source, stage)
