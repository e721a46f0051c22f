"""Per-message Avro encoders and decoders, generated once from the current schema: the fast path.

For every body class of an envelope (``Event`` with ``JobQueued``, ``Command`` with
``SubmitJob``, …) :func:`compile_writers` emits one Python function that writes the envelope's
fields, the body's union index as a constant, and the body's fields, straight from the
dataclasses' attributes into one ``b"".join``: no dicts, no schema walk, no union search per
call. :func:`compile_reader` emits one function that reads the envelope's fields inline, picks
the body's decoder by its union index and builds the dataclasses directly.

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
from engine.errors import DecodeError

_PRIMITIVE_WRITERS = {"int": "write_long", "long": "write_long", "string": "write_string",
                      "bytes": "write_bytes", "double": "pack_double", "float": "pack_float"}
_RUNTIME = {name: getattr(avro_fast, name) for name in (
    "ONE_BYTE", "write_long", "write_string", "write_bytes", "pack_double", "pack_float",
    "ZIGZAG", "read_long", "read_span", "read_double", "read_float", "bad_count", "bad_branch")}


class Unsupported(Exception):
    """A schema the generator does not compile; the codec uses fastavro for it instead."""


def body_field(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The envelope's ``body`` field (a union of records), if it has one."""
    return next((f for f in record["fields"] if f["name"] == "body" and isinstance(f["type"], list)), None)


class _Module:
    """Generated source and the constants it refers to, compiled into one namespace."""

    def __init__(self, what: str, records: Mapping[str, dict[str, Any]]):
        self.what = what
        self.records = records
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = dict(_RUNTIME)
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
    return node.get("type") if isinstance(node, dict) else node  # type: ignore[no-any-return]


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


def _write_expr(module: _Module, node: Any, value: str, classes: Mapping[str, type]) -> str:
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


def _write_parts(module: _Module, node: Any, value: str, classes: Mapping[str, type]) -> list[str]:
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


def _inline_record(module: _Module, record: Mapping[str, Any], var: str, value: str,
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


def _value_writer(module: _Module, node: Mapping[str, Any], classes: Mapping[str, type]) -> str:
    """The name of a map writer for a map schema."""
    name = module.temp()
    module.lines.append(f"def {name}_value(v): return {_write_expr(module, node['values'], 'v', classes)}")
    module.lines.append(f"{name} = map_writer({name}_value)")
    module.namespace["map_writer"] = avro_fast.map_writer
    return name


def _record_writer(module: _Module, record: Mapping[str, Any], classes: Mapping[str, type]) -> str:
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


def _nested_classes(*classes: type) -> dict[str, type]:
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


def _branches(module: _Module, schema: Mapping[str, Any],
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
    classes = _nested_classes(envelope, *(bodies or {}).values())
    module = _Module(f"writers {schema['name']}", records_of(schema))
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


def _envelope_parts(module: _Module, schema: Mapping[str, Any], envelope: type,
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


# --- readers -------------------------------------------------------------------------------------


def _long(var: str) -> list[str]:
    """Statements reading an Avro int or long into ``var`` (one byte by table, longer ones by call)."""
    return [f"{var} = ZIGZAG[raw[pos]]", "pos += 1",
            f"if {var} is None: {var}, pos = read_long(raw, pos - 1)"]


def _sized(module: _Module, var: str, decode: bool) -> list[str]:
    """Statements reading Avro bytes (or a string, if ``decode``) into ``var``.

    No bounds check: a slice past the end is short, and then the record cannot end where the
    value does, which the caller checks (and then the fastavro path reports the truncation).
    """
    end = module.temp()
    return [f"{end} = raw[pos]",  # a length under 64 is one even byte: twice the length
            f"if {end} & 129: pos, {end} = read_span(raw, pos)",
            "else:", "    pos += 1", f"    {end} = ({end} >> 1) + pos",
            f"{var} = raw[pos:{end}]{'.decode()' if decode else ''}", f"pos = {end}"]


def _read_stmts(module: _Module, node: Any, var: str, classes: Mapping[str, type]) -> list[str]:
    """Statements reading a value of schema ``node`` at ``pos`` into the local ``var``."""
    kind = type_name(node)
    if kind in ("int", "long"):
        return _long(var)
    if kind in ("string", "bytes"):
        return _sized(module, var, kind == "string")
    if kind == "boolean":
        return [f"{var} = raw[pos] != 0", "pos += 1"]
    if kind == "null":
        return [f"{var} = None"]
    if kind in ("float", "double"):
        return [f"{var}, pos = read_{kind}(raw, pos)"]
    if kind == "map":
        return [f"if raw[pos]: {var}, pos = {_map_reader(module, node, classes)}(raw, pos)",
                "else:", f"    {var} = {{}}", "    pos += 1"]
    optional = null_union(node)
    if optional is not None:  # the index is one byte: 0 or 2
        index, other = optional
        return [f"{var} = raw[pos]", "pos += 1", f"if {var} == {2 * index}: {var} = None",
                f"elif {var} == {2 - 2 * index}:", *_indent(_read_stmts(module, other, var, classes)),
                f"else: bad_branch({var})"]
    if kind == "union":
        raise Unsupported(f"union {node!r}")
    record = module.record(node)
    if record["name"] in module.inlining:  # a recursive record: through its function
        return [f"{var}, pos = {_record_reader(module, record, classes)}(raw, pos)"]
    return _record_stmts(module, record, var, classes)


def _indent(lines: list[str], levels: int = 1) -> list[str]:
    return ["    " * levels + line for line in lines]


def _map_reader(module: _Module, node: Mapping[str, Any], classes: Mapping[str, type]) -> str:
    """The name of a generated ``(raw, pos) -> (dict, pos)`` function for a map schema.

    Blocks of entries until a 0 count; a negative count is followed by the block's size in bytes.
    A count larger than the bytes left is refused before looping (every entry takes a byte or more).
    """
    name, count = f"read_{module.temp()}", module.temp()
    key, value = module.temp(), module.temp()
    body = ["size = len(raw)", "result = {}", *_long(count), f"while {count}:",
            f"    if {count} < 0:", f"        {count} = -{count}", *_indent(_long(module.temp()), 2),
            f"    if {count} > size - pos: bad_count({count}, size - pos)",
            f"    for _ in range({count}):",
            *_indent(_sized(module, key, True), 2), *_indent(_read_stmts(module, node["values"], value, classes), 2),
            f"        result[{key}] = {value}", *_indent(_long(count)), "return result, pos"]
    module.lines.append("\n".join([f"def {name}(raw, pos):", *_indent(body)]))
    return name


def twin_of(cls: type) -> type | None:
    """A plain slotted class laid out like the frozen dataclass ``cls``, or None.

    A decoder fills an instance of it with plain attribute stores, then sets its ``__class__`` to
    ``cls``: the object is then exactly what ``cls(...)`` builds (no ``__post_init__`` to skip),
    at a third of the cost of a frozen dataclass's ``object.__setattr__`` per field.
    """
    slots = cls.__dict__.get("__slots__")
    fields = tuple(f.name for f in dataclasses.fields(cls))
    if slots is None or tuple(slots) != fields or hasattr(cls, "__post_init__") or cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Slots", (), {"__slots__": tuple(slots)})
    try:
        twin().__class__ = cls
    except TypeError:
        return None
    return twin


def _build(module: _Module, cls: type, values: Mapping[str, str], var: str) -> list[str]:
    """Statements building ``var``, an instance of ``cls``, from the locals named in ``values``."""
    fields = dataclasses.fields(cls)
    twin = twin_of(cls)
    for f in fields:
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise Unsupported(f"{cls.__name__}.{f.name} is not in the schema and has no default")
    if twin is None:
        args = ", ".join(f"{name}={var}" for name, var in values.items())
        return [f"{var} = {module.const(cls, 'cls')}({args})"]
    lines = [f"{var} = {module.const(twin, 'twin')}()"]
    for f in fields:
        if f.name in values:
            lines.append(f"{var}.{f.name} = {values[f.name]}")
        elif f.default is not dataclasses.MISSING:
            lines.append(f"{var}.{f.name} = {module.const(f.default, 'default')}")
        else:
            lines.append(f"{var}.{f.name} = {module.const(f.default_factory, 'factory')}()")
    return [*lines, f"{var}.__class__ = {module.const(cls, 'cls')}"]


def _record_stmts(module: _Module, record: Mapping[str, Any], var: str, classes: Mapping[str, type]) -> list[str]:
    """Statements reading a record's fields into locals and building its dataclass into ``var``."""
    cls = class_of(record["name"], classes)
    if cls is None:
        raise Unsupported(f"no class for record {record['name']}")
    module.inlining.add(record["name"])
    lines, values = [], {}
    for field, node in matched_fields(cls, record):
        values[field] = f"{var}_{field}"
        lines.extend(_read_stmts(module, node, values[field], classes))
    module.inlining.discard(record["name"])
    return [*lines, *_build(module, cls, values, var)]


def _record_reader(module: _Module, record: Mapping[str, Any], classes: Mapping[str, type]) -> str:
    """The name of a generated ``(raw, pos) -> (instance, pos)`` function for a record."""
    if record["name"] not in module.done:
        name = module.done[record["name"]] = f"read_{module.temp()}"
        body = _indent([*_record_stmts(module, record, "o", classes), "return o, pos"])
        module.lines.append("\n".join([f"def {name}(raw, pos):", *body]))
    return module.done[record["name"]]


def compile_reader(schema: dict[str, Any], header_size: int, what: str, envelope: type,
                   bodies: Mapping[str, type] | None) -> Callable[[bytes], tuple[Any, int]]:
    """One function reading a whole record written with ``schema``: ``raw -> (message, end)``.

    It raises EOFError or IndexError if ``raw`` ends early, ValueError (UnicodeDecodeError
    included) if it is not a valid encoding, DecodeError for a body without a class; the
    caller checks that ``end`` is ``len(raw)``.
    """
    classes = _nested_classes(envelope, *(bodies or {}).values())
    classes.update(bodies or {})
    module = _Module(f"reader {schema['name']}", records_of(schema))
    lines, values = [f"pos = {header_size}"], {}
    for field, node in matched_fields(envelope, schema):
        values[field] = var = f"f_{field}"
        if field == "body" and bodies is not None and body_field(schema) is not None:
            lines.extend(_body_stmts(module, node, var, what, classes))
        else:
            lines.extend(_read_stmts(module, node, var, classes))
    body = _indent([*lines, *_build(module, envelope, values, "o"), "return o, pos"])
    module.lines.append("\n".join(["def read_envelope(raw):", *body]))
    return module.compile()["read_envelope"]  # type: ignore[no-any-return]


def _body_stmts(module: _Module, union: list[Any], var: str, what: str, classes: Mapping[str, type]) -> list[str]:
    """Statements reading the body union: its branches inline, picked by a binary tree of ifs."""
    branches = []
    for node in union:
        record = module.record(node)
        if class_of(record["name"], classes) is None:
            reason = module.const(f"unmapped body: record {record['name']} has no {what} class")
            branches.append([f"raise DecodeError({reason})"])
        else:
            branches.append(_record_stmts(module, record, var, classes))
    module.namespace["DecodeError"] = DecodeError
    if len(branches) > 63:
        raise Unsupported("a union of more than 63 branches")  # its index would not be one byte
    return [f"{var} = raw[pos]", "pos += 1",  # the index is one even byte, twice the index
            f"if {var} & 1 or {var} >= {2 * len(branches)}: bad_branch({var})",
            *_pick(var, branches, 0, len(branches))]


def _pick(var: str, branches: list[list[str]], low: int, high: int) -> list[str]:
    """The statements of the branch whose index byte is ``var`` (``2 * low`` to ``2 * high - 2``)."""
    if high - low == 1:
        return branches[low]
    middle = (low + high) // 2
    return [f"if {var} < {2 * middle}:", *_indent(_pick(var, branches, low, middle)),
            "else:", *_indent(_pick(var, branches, middle, high))]
