"""``type_switch``: ``functools.singledispatch`` for the hot path, on the exact type of the first argument.

singledispatch looks a type up through the MRO and a weak-keyed cache on every call; the
fold and decide dispatch on concrete message classes only, so one dict lookup does. Same
shape in the code: decorate the default, then ``@f.register`` each case (by annotation).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


class TypeSwitch:
    """A function chosen by ``type(first argument)``, the default when no case is registered."""

    def __init__(self, default: Callable[..., Any]):
        self.default = default
        self.cases: dict[type, Callable[..., Any]] = {}
        self.__doc__, self.__name__ = default.__doc__, default.__name__

    def register(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register ``fn`` for the class its first parameter is annotated with."""
        first = next(iter(inspect.signature(fn).parameters))
        self.cases[typing.get_type_hints(fn)[first]] = fn
        return fn

    def __call__(self, arg: Any, *rest: Any) -> Any:
        return self.cases.get(type(arg), self.default)(arg, *rest)


def type_switch(default: Callable[..., Any]) -> TypeSwitch:
    """Decorate the default case of a switch on the first argument's exact type."""
    return TypeSwitch(default)
