"""Every raise in engine/ is a class of the error tree (engine/errors.py), so a caller can act on its group.

A builtin exception is raised only where a Python protocol asks for exactly that one; the rules below say
where, and :data:`ALLOWED` lists the rest by name. Anything else fails this test: raise a tree class named by
what went wrong (docs/errors.md).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILTIN_EXCEPTIONS = frozenset(name for name, value in vars(builtins).items()
                               if isinstance(value, type) and issubclass(value, BaseException))
PYDANTIC_VALIDATORS = frozenset({"field_validator", "model_validator", "validator", "root_validator"})

ALLOWED = {
    ("engine/schedule_client.py", "ScheduleMethods._send", "NotImplementedError"),
    ("engine/schedule_client.py", "ScheduleMethods.tenant_of", "NotImplementedError"),
}
"""(file, function, exception) of builtin raises that are no protocol's but stay: the mixin's stubs of
methods ``Client`` provides (an abstract method's convention)."""


@dataclass(frozen=True)
class Raise:
    """One ``raise`` of a builtin exception: where, in which function, and which exception."""

    path: str
    line: int
    function: str
    exception: str
    decorators: frozenset[str]


def _name(node: ast.expr | None) -> str | None:
    """The name a ``raise`` raises (``ValueError`` of ``raise ValueError(...)``), if it is a plain name."""
    target = node.func if isinstance(node, ast.Call) else node
    return target.id if isinstance(target, ast.Name) else None


def _decorator_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    names = set()
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return frozenset(names)


def builtin_raises(path: Path, root: Path = ROOT) -> list[Raise]:
    """The raises of builtin exceptions in one module, each with its enclosing function's qualified name."""
    found: list[Raise] = []
    relative = path.relative_to(root).as_posix()

    def visit(node: ast.AST, scope: tuple[str, ...], decorators: frozenset[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, (*scope, child.name), _decorator_names(child))
            elif isinstance(child, ast.ClassDef):
                visit(child, (*scope, child.name), frozenset())
            else:
                name = _name(child.exc) if isinstance(child, ast.Raise) else None
                if name in BUILTIN_EXCEPTIONS:
                    found.append(Raise(relative, child.lineno, ".".join(scope), name, decorators))
                visit(child, scope, decorators)

    visit(ast.parse(path.read_text(), str(path)), (), frozenset())
    return found


def protocol_asks_for_it(found: Raise) -> bool:
    """Whether a Python protocol asks for this builtin exception here.

    A module's or class's ``__getattr__`` raises AttributeError (``hasattr`` and ``getattr(x, n, default)``
    rely on it); a pydantic validator raises ValueError or AssertionError (pydantic turns only those into its
    ValidationError, which ``Settings`` then reports as a ``ConfigError``)."""
    if found.function.rsplit(".", 1)[-1] == "__getattr__":
        return found.exception == "AttributeError"
    if found.decorators & PYDANTIC_VALIDATORS:
        return found.exception in {"ValueError", "AssertionError"}
    return False


def test_every_raise_in_engine_is_a_tree_class_or_a_protocols() -> None:
    raises = [r for path in sorted((ROOT / "engine").rglob("*.py")) for r in builtin_raises(path)]
    stray = [f"{r.path}:{r.line} {r.function}: raise {r.exception}" for r in raises
             if not protocol_asks_for_it(r) and (r.path, r.function, r.exception) not in ALLOWED]
    assert stray == []


def test_the_allowed_raises_are_still_there() -> None:
    """An entry of ALLOWED whose raise is gone goes too: the list says only what is true."""
    present = {(r.path, r.function, r.exception) for path in {ROOT / p for p, _, _ in ALLOWED}
               for r in builtin_raises(path)}
    assert ALLOWED <= present


def test_the_scan_sees_a_builtin_raise_and_the_protocols(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text("from pydantic import field_validator\n\n"
                      "def f():\n    raise ValueError('x')\n\n"
                      "def __getattr__(name):\n    raise AttributeError(name)\n\n"
                      "class M:\n    @field_validator('a')\n    def _a(cls, v):\n        raise ValueError(v)\n")
    raises = builtin_raises(module, tmp_path)
    assert [(r.function, r.exception, protocol_asks_for_it(r)) for r in raises] == [
        ("f", "ValueError", False), ("__getattr__", "AttributeError", True), ("M._a", "ValueError", True)]
