"""Per-message Avro readers, generated once from the current schema: the codec's fast path.

:func:`compile_reader` emits one Python function that reads a whole record of an envelope
schema: the envelope's fields inline, the body picked by a binary tree of comparisons on its
union index byte, the body's fields inline, and the dataclasses built directly (through a
slotted twin, :func:`twin_of`). It does not explain failures: it raises, and the codec asks the
fastavro path why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from engine.contract.avro_codegen import (
    Module,
    Unsupported,
    body_field,
    class_of,
    matched_fields,
    nested_classes,
    null_union,
    type_name,
)
from engine.contract.records import records_of
from engine.errors import DecodeError


def _long(var: str) -> list[str]:
    """Statements reading an Avro int or long into ``var`` (one byte by table, longer ones by call)."""
    return [f"{var} = ZIGZAG[raw[pos]]", "pos += 1",
            f"if {var} is None: {var}, pos = read_long(raw, pos - 1)"]


def _sized(module: Module, var: str, decode: bool) -> list[str]:
    """Statements reading Avro bytes (or a string, if ``decode``) into ``var``.

    No bounds check: a slice past the end is short, and then the record cannot end where the
    value does, which the caller checks (and then the fastavro path reports the truncation).
    """
    end = module.temp()
    return [f"{end} = raw[pos]",  # a length under 64 is one even byte: twice the length
            f"if {end} & 129: pos, {end} = read_span(raw, pos)",
            "else:", "    pos += 1", f"    {end} = ({end} >> 1) + pos",
            f"{var} = raw[pos:{end}]{'.decode()' if decode else ''}", f"pos = {end}"]


def _read_stmts(module: Module, node: Any, var: str, classes: Mapping[str, type]) -> list[str]:
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


def _map_reader(module: Module, node: Mapping[str, Any], classes: Mapping[str, type]) -> str:
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


def _build(module: Module, cls: type, values: Mapping[str, str], var: str) -> list[str]:
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


def _record_stmts(module: Module, record: Mapping[str, Any], var: str, classes: Mapping[str, type]) -> list[str]:
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


def _record_reader(module: Module, record: Mapping[str, Any], classes: Mapping[str, type]) -> str:
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
    classes = nested_classes(envelope, *(bodies or {}).values())
    classes.update(bodies or {})
    module = Module(f"reader {schema['name']}", records_of(schema))
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


def _body_stmts(module: Module, union: list[Any], var: str, what: str, classes: Mapping[str, type]) -> list[str]:
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
