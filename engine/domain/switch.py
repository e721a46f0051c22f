"""``type_switch``: ``functools.singledispatch`` for the hot path, on the exact type of the first argument.

singledispatch looks a type up through the MRO and a weak-keyed cache on every call; the
fold and decide dispatch on concrete message classes only, so one dict lookup does. Same
shape in the code: decorate the default, then ``@f.register`` each case (by annotation).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


class TypeSwitch(Generic[R]):
    """A function chosen by ``type(first argument)``, the default when no case is registered."""

    def __init__(self, default: Callable[..., R]):
        self.default = default
        self.cases: dict[type, Callable[..., R]] = {}
        self.__doc__, self.__name__ = default.__doc__, default.__name__

    def register(self, fn: F) -> F:
        """Register ``fn`` for the class its first parameter is annotated with.

        Only that annotation is evaluated, so the others (the return type, say) may name what
        the module defines further down.
        """
        first = next(iter(inspect.signature(fn).parameters.values()))
        self.cases[_evaluated(first.annotation, fn)] = fn
        return fn

    def __call__(self, arg: Any, *rest: Any) -> R:
        return self.cases.get(type(arg), self.default)(arg, *rest)


def _evaluated(annotation: Any, fn: Any) -> Any:
    """The class a parameter annotation names; a postponed one (a string) is evaluated the way
    ``typing.get_type_hints`` does, in the function's module."""
    if isinstance(annotation, str):
        return eval(annotation, getattr(fn, "__globals__", {}))  # noqa: S307 - the module's own annotation
    return annotation


def type_switch(default: Callable[..., R]) -> TypeSwitch[R]:
    """Decorate the default case of a switch on the first argument's exact type."""
    return TypeSwitch(default)
