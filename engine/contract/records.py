"""How frozen dataclasses become Avro record dicts and back: the codec's general (fastavro) path.

The fast path (:mod:`engine.contract.avro_codegen`) writes and reads the dataclasses directly;
this mapping serves records written with an older schema version (resolved by fastavro into the
newest), and encodes whatever the fast path refuses, so that fastavro's own error names the field.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

_PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "bytes", "string"})


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    if not names:
        return lambda obj: ()
    return operator.attrgetter(*names)


class RecordMap:
    """How one frozen dataclass becomes an Avro record dict and back; worked out once per class.

    Optional fields (``["null", primitive]`` unions) are written in fastavro's tuple notation,
    ``(branch, value)``: the writer then picks the branch without trying each one.
    """

    __slots__ = ("cls", "names", "_get", "nested", "optional")

    def __init__(self, cls: type, schema: dict[str, Any], records: Mapping[str, dict[str, Any]]):
        hints = typing.get_type_hints(cls)
        types = {f["name"]: f["type"] for f in schema.get("fields", ())}
        self.cls = cls
        self.names = tuple(f.name for f in dataclasses.fields(cls))
        self._get = _getter(self.names)
        self.nested = tuple((n, RecordMap(hints[n], _record_schema(types.get(n), records), records))
                            for n in self.names if dataclasses.is_dataclass(hints[n]))
        self.optional = tuple((n, branch) for n in self.names
                              if (branch := _optional_branch(types.get(n))) is not None)

    def to_dict(self, obj: Any) -> dict[str, Any]:
        datum = dict(zip(self.names, self._get(obj)))
        for name, branch in self.optional:
            value = datum[name]
            if value is not None:
                datum[name] = (branch, value)
        for name, sub in self.nested:
            datum[name] = sub.to_dict(datum[name])
        return datum

    def from_dict(self, datum: dict[str, Any]) -> Any:
        for name, sub in self.nested:
            datum[name] = sub.from_dict(datum[name])
        return self.cls(**datum)


def _record_schema(node: Any, records: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(node, dict):
        return node
    return records.get(node, {}) if isinstance(node, str) else {}


def _optional_branch(node: Any) -> str | None:
    """``"long"`` for a ``["null", "long"]`` union (primitive branch only), else None."""
    if not isinstance(node, list) or len(node) != 2 or "null" not in node:
        return None
    other = node[1] if node[0] == "null" else node[0]
    name = other.get("type") if isinstance(other, dict) else other
    return name if name in _PRIMITIVES else None


def records_of(node: Any, found: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Every record schema defined inside a parsed schema (maps' values included), by full name."""
    found = {} if found is None else found
    if isinstance(node, list):
        for item in node:
            records_of(item, found)
    elif isinstance(node, dict) and node.get("type") == "record":
        found[node["name"]] = node
        for field in node["fields"]:
            records_of(field["type"], found)
    elif isinstance(node, dict) and node.get("type") == "map":
        records_of(node["values"], found)
    return found


def builder(cls: type[T]) -> Callable[..., T]:
    """A positional constructor of the frozen slotted dataclass ``cls``, every field required.

    It fills a plain slotted twin of ``cls`` and then sets its ``__class__`` (see
    ``engine.contract.avro_readers.twin_of``): the same object ``cls(...)`` builds, at a third
    of the cost, for the few records built once per event on the hot path.
    """
    from engine.contract.avro_readers import twin_of

    twin = twin_of(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))
    if twin is None:
        return cls
    body = "".join(f"    o.{n} = {n}\n" for n in names)
    source = f"def build({', '.join(names)}):\n    o = Twin()\n{body}    o.__class__ = Cls\n    return o\n"
    namespace: dict[str, Any] = {"Twin": twin, "Cls": cls}
    exec(compile(source, f"<build {cls.__name__}>", "exec"), namespace)  # noqa: S102 - fixed template
    return namespace["build"]  # type: ignore[no-any-return]
