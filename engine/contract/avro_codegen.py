"""Per-message Avro writers, generated once from the current schema: the codec's fast path.

For every body class of an envelope (``Event`` with ``JobQueued``, ``Command`` with
``SubmitJob``, …) :func:`compile_writers` emits one Python function that writes the envelope's
fields, the body's union index as a constant, and the body's fields, straight from the
dataclasses' attributes into one ``b"".join``: no dicts, no schema walk, no union search per
call. The readers (:mod:`engine.contract.avro_readers`) are generated with the same machinery.

Both are built with ``exec`` from fixed templates filled in with field names and schema
constants (as :mod:`engine.domain.jobs` does for ``JobView`` replace). A schema feature they do
not handle (a union other than ``[null, T]``, arrays, enums, fixed, a field without a
dataclass attribute) raises :class:`Unsupported`, and the codec keeps the fastavro path for it.
"""

from __future__ import annotations

import dataclasses
import itertools
import typing
from collections.abc import Callable, Mapping
from typing import Any

from engine.contract import avro_fast
from engine.contract.records import records_of
from engine.contract.avro_fast import Unsupported as Unsupported  # raised here too; the codec falls back on it

_PRIMITIVE_WRITERS = {"int": "write_long", "long": "write_long", "string": "write_string",
                      "bytes": "write_bytes", "double": "pack_double", "float": "pack_float"}
RUNTIME = {name: getattr(avro_fast, name) for name in (
    "ONE_BYTE", "write_long", "write_string", "write_bytes", "pack_double", "pack_float",
    "ZIGZAG", "read_long", "read_span", "read_double", "read_float", "bad_count", "bad_branch")}


def body_field(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The envelope's ``body`` field (a union of records), if it has one."""
    return next((f for f in record["fields"] if f["name"] == "body" and isinstance(f["type"], list)), None)


class Module:
    """Generated source and the constants it refers to, compiled into one namespace."""

    def __init__(self, what: str, records: Mapping[str, dict[str, Any]]):
        self.what = what
        self.records = records
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = dict(RUNTIME)
        self._names: dict[int, str] = {}
        self._ids = itertools.count()
        self.done: dict[str, str] = {}  # record full name -> generated function
        self.inlining: set[str] = set()  # records being written inline (a recursive one is not)

    def const(self, value: Any, hint: str = "k") -> str:
        """A name in the namespace bound to ``value`` (one name per distinct object)."""
        key = id(value)
        if key not in self._names:
            self._names[key] = f"_{hint}{next(self._ids)}"
            self.namespace[self._names[key]] = value
        return self._names[key]

    def temp(self) -> str:
        """A fresh local variable name."""
        return f"t{next(self._ids)}"

    def record(self, node: Any) -> dict[str, Any]:
        """The record schema ``node`` is or names."""
        found = self.records.get(node) if isinstance(node, str) else node
        if not isinstance(found, dict) or found.get("type") != "record":
            raise Unsupported(f"not a record: {node!r}")
        return found

    def compile(self) -> dict[str, Any]:
        """Run the source; return the namespace holding the generated functions."""
        exec(compile("\n".join(self.lines) + "\n", f"<avro {self.what}>", "exec"), self.namespace)  # noqa: S102
        return self.namespace


def null_union(node: Any) -> tuple[int, Any] | None:
    """``(index of null, the other branch)`` for a two-branch union with null, else None."""
    if isinstance(node, list) and len(node) == 2 and "null" in node:
        index = node.index("null")
        return index, node[1 - index]
    return None


def type_name(node: Any) -> str:
    """``"long"``, ``"record"``, ``"map"``, …, a named type's full name, or ``"union"``."""
    if isinstance(node, list):
        return "union"
    return str(node.get("type") if isinstance(node, dict) else node)


def matched_fields(cls: type, record: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, schema) of the record's fields; Unsupported unless each is an attribute of ``cls``."""
    names = {f.name for f in dataclasses.fields(cls)}
    fields = [(f["name"], f["type"]) for f in record["fields"]]
    missing = [name for name, _ in fields if name not in names]
    if missing:
        raise Unsupported(f"{cls.__name__} has no field {missing[0]!r}")
    return fields


def class_of(record_name: str, bodies: Mapping[str, type]) -> type | None:
    """The dataclass named like a record (short name), if there is one."""
    return bodies.get(record_name.rsplit(".", 1)[-1])


# --- writers -------------------------------------------------------------------------------------


def _write_expr(module: Module, node: Any, value: str, classes: Mapping[str, type]) -> str:
    """An expression writing the Python value ``value`` (an expression) as ``node``."""
    kind = type_name(node)
    if kind in _PRIMITIVE_WRITERS:
        return f"{_PRIMITIVE_WRITERS[kind]}({value})"
    if kind == "boolean":
        return f"(b'\\x01' if {value} else b'\\x00')"
    if kind == "null":
        return "b''"
    if kind == "map":
        return f"{_value_writer(module, node, classes)}({value})"
    optional = null_union(node)
    if optional is not None:
        index, other = optional
        var = module.temp()
        null, some = module.const(avro_fast.write_long(index)), module.const(avro_fast.write_long(1 - index))
        return f"({null} if ({var} := {value}) is None else {some} + {_write_expr(module, other, var, classes)})"
    if kind == "union":
        raise Unsupported(f"union {node!r}")
    return f"{_record_writer(module, module.record(node), classes)}({value})"


def _write_parts(module: Module, node: Any, value: str, classes: Mapping[str, type]) -> list[str]:
    """Expressions whose bytes, joined, write ``value`` as ``node``: strings, longs and records
    are written inline (no call per field) where they are not inside a union."""
    kind, var = type_name(node), module.temp()
    if kind in ("int", "long"):  # one byte for -64..63, else write_long
        zigzag = f"(({var} := {value}) << 1) ^ ({var} >> 63)"
        return [f"(ONE_BYTE[z{var}] if not (z{var} := {zigzag}) >> 7 else write_long({var}))"]
    if kind == "string":
        size = f"(n{var} := len({var} := {value}.encode()))"
        return [f"(ONE_BYTE[n{var} << 1] if {size} < 64 else write_long(n{var}))", var]
    optional = null_union(node)
    if optional is not None:  # the index byte, then the value's parts, each empty for None
        index, other = optional
        null, some = module.const(avro_fast.write_long(index)), module.const(avro_fast.write_long(1 - index))
        first, *rest = _write_parts(module, other, var, classes)
        return [f"({null} if ({var} := {value}) is None else {some} + {first})",
                *(f"(b'' if {var} is None else {part})" for part in rest)]
    if kind == "record" or (isinstance(node, str) and node in module.records):
        parts = _inline_record(module, module.record(node), var, value, classes)
        if parts is not None:
            return parts
    return [_write_expr(module, node, value, classes)]


def _inline_record(module: Module, record: Mapping[str, Any], var: str, value: str,
                   classes: Mapping[str, type]) -> list[str] | None:
    """The parts of a nested record's fields, ``var`` bound to it in the first; None if recursive."""
    cls = class_of(record["name"], classes)
    if cls is None or record["name"] in module.inlining:
        return None
    module.inlining.add(record["name"])
    fields = matched_fields(cls, record)
    parts = [p for i, (f, t) in enumerate(fields)
             for p in _write_parts(module, t, f"{f'({var} := {value})' if i == 0 else var}.{f}", classes)]
    module.inlining.discard(record["name"])
    return parts or ["b''"]


def _value_writer(module: Module, node: Mapping[str, Any], classes: Mapping[str, type]) -> str:
    """The name of a map writer for a map schema."""
    name = module.temp()
    module.lines.append(f"def {name}_value(v): return {_write_expr(module, node['values'], 'v', classes)}")
    module.lines.append(f"{name} = map_writer({name}_value)")
    module.namespace["map_writer"] = avro_fast.map_writer
    return name


def _record_writer(module: Module, record: Mapping[str, Any], classes: Mapping[str, type]) -> str:
    """The name of a function writing a nested record (a dataclass) to bytes."""
    if record["name"] in module.done:
        return module.done[record["name"]]
    cls = class_of(record["name"], classes)
    if cls is None:
        raise Unsupported(f"no class for record {record['name']}")
    name = module.done[record["name"]] = f"write_{module.temp()}"
    parts = [_write_expr(module, t, f"o.{f}", classes) for f, t in matched_fields(cls, record)]
    module.lines.append(f"def {name}(o):\n    return _join(({', '.join(parts)},))")
    return name


def nested_classes(*classes: type) -> dict[str, type]:
    """Dataclasses that fields of ``classes`` hold (``Payload``, also in ``X | None`` or maps), by name."""
    found: dict[str, type] = {}
    hints = [hint for cls in classes for hint in typing.get_type_hints(cls).values()]
    while hints:
        hint = hints.pop()
        hints.extend(typing.get_args(hint))
        if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hint.__name__ not in found:
            found[hint.__name__] = hint
            hints.extend(typing.get_type_hints(hint).values())
    return found


def _branches(module: Module, schema: Mapping[str, Any],
              bodies: Mapping[str, type] | None) -> list[tuple[int, dict[str, Any] | None]]:
    """(union index, record) of each body branch; ``[(-1, None)]`` for an envelope without one."""
    union = body_field(schema) if bodies is not None else None
    if union is None:
        return [(-1, None)]
    return [(index, module.record(node)) for index, node in enumerate(union["type"])]


def compile_writers(schema: dict[str, Any], header: bytes, envelope: type,
                    bodies: Mapping[str, type] | None) -> dict[type, Callable[[Any], bytes]]:
    """One writer per body class (or one for ``envelope`` itself when it has no body union).

    A writer takes the envelope message and returns its whole single-object record (header
    included); the caller has checked the message's and the body's exact types.
    """
    classes = nested_classes(envelope, *(bodies or {}).values())
    module = Module(f"writers {schema['name']}", records_of(schema))
    module.namespace.update(_join=b"".join, _HEADER=header)
    made: dict[type, str] = {}
    for index, record in _branches(module, schema, bodies):
        cls = envelope if record is None else class_of(record["name"], bodies or {})
        if cls is None:
            continue
        made[cls] = name = f"encode_{module.temp()}"
        parts = ", ".join(["_HEADER", *_envelope_parts(module, schema, envelope, (index, record, cls), classes)])
        body = "    b = m.body\n" if record is not None else ""
        module.lines.append(f"def {name}(m):\n{body}    return _join(({parts},))")
    namespace = module.compile()
    return {cls: namespace[name] for cls, name in made.items()}


def _envelope_parts(module: Module, schema: Mapping[str, Any], envelope: type,
                    branch: tuple[int, dict[str, Any] | None, type], classes: Mapping[str, type]) -> list[str]:
    """Expressions for the envelope's fields, with the body's union index and fields in its place."""
    index, record, cls = branch
    parts = []
    for name, node in matched_fields(envelope, schema):
        if record is None or name != "body":
            parts.extend(_write_parts(module, node, f"m.{name}", classes))
            continue
        parts.append(module.const(avro_fast.write_long(index)))
        parts.extend(p for f, t in matched_fields(cls, record) for p in _write_parts(module, t, f"b.{f}", classes))
    return parts
