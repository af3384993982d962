"""A Griffe extension for the API reference (mkdocs.yml): a class of the compiled module is made
by ``__new__`` (PyO3's constructor), declared so in ``stopstream/_core.pyi``. mkdocstrings shows a
class's constructor in its heading only from ``__init__`` (``merge_init_into_class``), so here a
class with ``__new__`` and no ``__init__`` gets an ``__init__`` of the same parameters (``self``
for ``cls``) and docstring, and loses ``__new__``: the reference shows ``StopFilter(stops, ...)``
rather than a ``__new__`` heading. The stubs themselves are unchanged."""

from __future__ import annotations

from typing import Any

import griffe


class NewAsInit(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        new = cls.members.get("__new__")
        if not isinstance(new, griffe.Function) or "__init__" in cls.members:
            return
        params = list(new.parameters)
        if params and params[0].name == "cls":
            params[0] = griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
        init = griffe.Function(
            "__init__",
            lineno=new.lineno,
            endlineno=new.endlineno,
            parameters=griffe.Parameters(*params),
            returns="None",
            docstring=new.docstring,
        )
        cls.set_member("__init__", init)
        cls.del_member("__new__")
