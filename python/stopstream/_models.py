"""SDK objects to and from ``dict``: the provider adapters' machines read and emit dicts.

Nothing here imports a provider SDK. SDK objects are read with ``model_dump``; a changed one is
made with the object's own ``model_copy`` (only what changed is replaced, recursively), so its
class, private state and helper methods survive (LiteLLM's ``ModelResponseStream`` included).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

JSON = dict[str, Any]


def as_json(item: object) -> JSON:
    """A ``dict`` view of one event: the dict itself, or an SDK model's ``model_dump``."""
    if isinstance(item, dict):
        return item
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        try:
            # Events are built without validation: do not warn about values of unexpected types.
            data = dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
        except (TypeError, ValueError):  # the SDKs' pydantic v1 shim rejects ``warnings``
            data = dump(mode="json", by_alias=True, exclude_unset=True)
        if isinstance(data, dict):
            return data
    raise TypeError(
        f"expected a dict or an SDK model object (with model_dump), not {type(item).__name__}"
    )


_MISSING = object()


def _field_names(cls: type[Any]) -> dict[str, str]:
    """API name (alias) -> attribute name, for a pydantic model class."""
    fields = getattr(cls, "model_fields", None)
    if not isinstance(fields, dict):
        return {}
    return {(getattr(f, "alias", None) or name): name for name, f in fields.items()}


def _build(owner: type[Any], name: str, value: object) -> object:
    """A value for field ``name`` of model class ``owner`` built from plain data."""
    fields = getattr(owner, "model_fields", None)
    field = fields.get(name) if isinstance(fields, dict) else None
    if field is None:
        return value
    try:
        from pydantic import TypeAdapter

        return TypeAdapter(field.annotation).validate_python(value)
    except Exception:
        return value


def _converted(owner: type[Any], name: str, current: object, new: object, old: object) -> object:
    if isinstance(new, dict):
        if callable(getattr(current, "model_copy", None)):
            before = old if isinstance(old, dict) else as_json(current)
            return update_model(current, new, before)
        return _build(owner, name, new)
    if isinstance(new, list) and isinstance(current, list):
        olds = old if isinstance(old, list) and len(old) == len(current) else None
        if olds is None:
            olds = [as_json(c) if callable(getattr(c, "model_dump", None)) else c for c in current]
        out: list[Any] = []
        for position, value in enumerate(new):
            # The element it came from: the same dict, else the one with its ``index``, else
            # the one at its position.
            source = next((j for j, o in enumerate(olds) if o is value), None)
            if source is not None:
                out.append(current[source])
                continue
            if isinstance(value, dict) and "index" in value:
                source = next(
                    (
                        j
                        for j, o in enumerate(olds)
                        if isinstance(o, dict) and o.get("index") == value["index"]
                    ),
                    None,
                )
            if source is None and position < len(current):
                source = position
            if source is not None and isinstance(value, dict):
                out.append(_converted(owner, name, current[source], value, olds[source]))
            else:
                out.append(value)
        return out
    if isinstance(new, list):
        return _build(owner, name, new)
    return new


def update_model(obj: Any, new: JSON, old: JSON) -> object:
    """A copy of the SDK model ``obj`` (whose dump is ``old``) holding ``new``.

    Made with ``obj.model_copy(update=...)``, replacing only the fields whose values changed
    (recursively, so an unchanged nested object is shared): the class, private attributes and
    helper methods survive, which a rebuild from the dict (``construct``) loses for models that
    set fields in their ``__init__`` (LiteLLM's stream chunks).
    """
    names = _field_names(type(obj))
    update: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if value is before:
            continue
        name = names.get(key, key)
        current = getattr(obj, name, None)
        update[name] = _converted(type(obj), name, current, value, before)
    for key in old:
        if key not in new:
            update[names.get(key, key)] = None
    return obj.model_copy(update=update)


def rebuild_model(cls: type[Any], data: JSON) -> object:
    """A new instance of the SDK model class ``cls`` holding ``data`` (API field names)."""
    construct = getattr(cls, "construct", None)
    if callable(construct) and callable(getattr(cls, "to_dict", None)):
        # The OpenAI / Anthropic SDK models: recursive construction without validation, the
        # way the SDKs themselves build streamed events; unknown keys become extra fields.
        return construct(**data)
    validate = getattr(cls, "model_validate", None)
    if callable(validate):
        return validate(data)
    raise TypeError(f"cannot build a {cls.__name__} from a dict")


Rebuild = Callable[[JSON, object, "JSON | None"], object]
"""``(event, sample, view)``: an SDK object for an emitted event. ``sample`` is the upstream
object it came from (then ``view`` is that object's dict) or, for a synthesized event, the
latest upstream object (``view`` is ``None``)."""


def rebuild_from_sample(value: JSON, sample: object, view: JSON | None) -> object:
    """The default ``Rebuild``: the sample's own ``model_copy``, changed to hold ``value``."""
    if callable(getattr(sample, "model_copy", None)):
        return update_model(sample, value, view if view is not None else as_json(sample))
    return rebuild_model(type(sample), value)
