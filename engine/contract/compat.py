"""Whether two versions of a schema can read each other's records: the gate for shipping vN+1.

``check_compatible(old, new)`` applies Avro's schema resolution rules both ways — **backward**:
the new schema reads old records (the engine reads years of history with its newest schema);
**forward**: the old schema reads new records (engines not yet upgraded read what upgraded
producers write) — and returns the problems as sentences, none when the change is safe. The
checks are pure functions of the raw ``.avsc`` JSON (``doc``, ``logicalType``… are ignored).
Both ways together also forbid the one-way promotions (an old ``int`` reader cannot read a new
``long``); ``string`` ↔ ``bytes`` resolves both ways and passes.

A union growing by a record, an enum by a symbol, is allowed unless ``strict_growth``: old
readers still read every record that does not use it. A new record in the envelope's ``body``
union is a new *type*: a reader without it skips those records, counted and named
(``UnknownTypeError``), so every shipped version reads every other one, both ways
(:func:`reader_problems`, :func:`skipped_types`). Growth anywhere else (an enum symbol, a
record in a nested union) would make whole records unreadable and is reported by
:func:`shipped_problems`. A new primitive branch is a type change, always reported.
``python -m engine.contract.compat`` checks the shipped ``schemas/vN/`` (exit status 1 on a problem).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from engine.errors import ContractError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
COMPLEX = NAMED | {"array", "map"}
PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
"""Writer type -> reader types it resolves into (Avro specification, "Schema Resolution")."""


# --- names ---------------------------------------------------------------------------------------


class Names:
    """Every named type (record, enum, fixed) of one schema, by full name, for resolving references.

    Marks each definition with its full name (``__full_name``): give it a private copy.
    """

    def __init__(self, schema: Any):
        self.types: dict[str, dict[str, Any]] = {}
        self._collect(schema, "")

    def resolve(self, node: Any, namespace: str = "") -> Any:
        """A type node with a reference (``"Payload"`` or a full name) replaced by its definition."""
        if isinstance(node, str) and node not in PRIMITIVES:
            full = node if "." in node else _join(namespace, node)
            found = self.types.get(full) or self.types.get(node)
            if found is None:
                raise ContractError(f"unknown type {node!r}")
            return found
        if isinstance(node, dict) and node.get("type") in PRIMITIVES:
            return node["type"]  # {"type": "long", "logicalType": ...} is plain long
        if isinstance(node, dict) and isinstance(node.get("type"), (str, list)) and node["type"] not in COMPLEX:
            return self.resolve(node["type"], namespace)  # {"type": "Payload"} or {"type": [...]}
        return node

    def _collect(self, node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for item in node:
                self._collect(item, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in NAMED:
                full = full_name(node, namespace)
                node["__full_name"] = full
                self.types[full] = node
                namespace = full.rpartition(".")[0]
            if kind in ("record", "error"):
                for f in node.get("fields", ()):
                    self._collect(f["type"], namespace)
            elif kind == "array":
                self._collect(node.get("items"), namespace)
            elif kind == "map":
                self._collect(node.get("values"), namespace)
            elif isinstance(kind, (dict, list)):
                self._collect(kind, namespace)


def full_name(node: Mapping[str, Any], namespace: str = "") -> str:
    """The full name of a named type, its own namespace or the enclosing one."""
    name = str(node["name"])
    if "." in name:
        return name
    return _join(str(node.get("namespace", namespace) or ""), name)


def _join(namespace: str, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name


def _short(name: str) -> str:
    return name.rpartition(".")[2]


# --- resolution ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Side:
    """One side of a resolution: its schema's names and the namespace in effect at this node."""

    names: Names
    namespace: str = ""

    def at(self, node: Any) -> tuple[Any, _Side]:
        resolved = self.names.resolve(node, self.namespace)
        if isinstance(resolved, dict) and "__full_name" in resolved:
            return resolved, _Side(self.names, resolved["__full_name"].rpartition(".")[0])
        return resolved, self


def kind_of(node: Any) -> str:
    """``"int"``, ``"record"``, ``"union"``…: the kind of a resolved type node."""
    if isinstance(node, list):
        return "union"
    if isinstance(node, dict):
        return str(node.get("type"))
    return str(node)


def describe(node: Any) -> str:
    """A short name for a resolved type node: ``long``, ``record SubmitJob``, ``map``."""
    kind = kind_of(node)
    if kind in NAMED:
        return f"{kind} {_short(node['__full_name'])}"
    return kind


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing a reader cannot resolve, at a path like ``CommandEnvelope.body<SubmitJob>.labels``.

    ``kind``: ``"field"`` — the reader has a field without a default that the writer lacks;
    ``"growth"`` — the writer has a named union branch (a record) or an enum symbol the reader
    lacks: only records that use it are unreadable; ``"type"`` — anything else.
    """

    path: str
    text: str
    kind: str = "type"

    def __str__(self) -> str:
        return f"{self.path}: {self.text}"


class _Resolution:
    """Walks a writer schema and a reader schema together, collecting what cannot be resolved."""

    def __init__(self, writer: Any, reader: Any):
        self.writer, self.reader = _Side(Names(writer)), _Side(Names(reader))
        self.problems: list[Problem] = []
        self._active: set[tuple[int, int]] = set()  # pairs being checked further up: recursion

    def run(self, writer: Any, reader: Any) -> list[Problem]:
        self.check(writer, self.writer, reader, self.reader, _root_path(reader))
        return self.problems

    def check(self, w: Any, ws: _Side, r: Any, rs: _Side, path: str) -> None:
        w, ws = ws.at(w)
        r, rs = rs.at(r)
        pair = (id(w), id(r))
        if pair in self._active:  # a recursive type met itself: already being checked
            return
        self._active.add(pair)
        try:
            self._check(w, ws, r, rs, path)
        finally:
            self._active.discard(pair)

    def _check(self, w: Any, ws: _Side, r: Any, rs: _Side, path: str) -> None:
        if kind_of(w) == "union":
            self._writer_union(w, ws, r, rs, path)
        elif kind_of(r) == "union":
            self._into_union(w, ws, r, rs, path)
        elif not matches(w, r):
            self.problems.append(Problem(path, f"type changed from {describe(w)} to {describe(r)}"))
        else:
            self._same_kind(w, ws, r, rs, path)

    def _writer_union(self, w: list[Any], ws: _Side, r: Any, rs: _Side, path: str) -> None:
        for branch in w:
            b, bs = ws.at(branch)
            candidates = r if kind_of(r) == "union" else [r]
            target = _first_match(b, candidates, rs)
            if target is None:
                self._branch_missing(b, r, path)
            else:
                self.check(b, bs, target, rs, _branch_path(path, b))

    def _branch_missing(self, branch: Any, r: Any, path: str) -> None:
        if kind_of(r) != "union":
            self.problems.append(Problem(path, f"type changed from a union with {describe(branch)} to {describe(r)}"))
        else:
            kind = "growth" if kind_of(branch) in NAMED else "type"
            self.problems.append(Problem(path, f"union branch {describe(branch)} is missing", kind=kind))

    def _into_union(self, w: Any, ws: _Side, r: list[Any], rs: _Side, path: str) -> None:
        target = _first_match(w, r, rs)
        if target is None:
            self.problems.append(Problem(path, f"type changed from {describe(w)} to a union without it"))
        else:
            self.check(w, ws, target, rs, path)

    def _same_kind(self, w: Any, ws: _Side, r: Any, rs: _Side, path: str) -> None:
        kind = kind_of(r)
        if kind in ("record", "error"):
            self._record(w, ws, r, rs, path)
        elif kind == "enum":
            self._enum(w, r, path)
        elif kind == "fixed" and w.get("size") != r.get("size"):
            self.problems.append(Problem(path, f"fixed size changed from {w.get('size')} to {r.get('size')}"))
        elif kind == "array":
            self.check(w["items"], ws, r["items"], rs, f"{path}[]")
        elif kind == "map":
            self.check(w["values"], ws, r["values"], rs, f"{path}{{}}")

    def _record(self, w: dict[str, Any], ws: _Side, r: dict[str, Any], rs: _Side, path: str) -> None:
        written = {f["name"]: f for f in w.get("fields", ())}
        for field in r.get("fields", ()):
            here = f"{path}.{field['name']}"
            if field["name"] in written:
                self.check(written[field["name"]]["type"], ws, field["type"], rs, here)
            elif "default" not in field:
                self.problems.append(Problem(here, "the reader's field has no default and the writer lacks it",
                                             kind="field"))

    def _enum(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        if "default" in r and r["default"] in r.get("symbols", ()):
            return
        missing = [s for s in w.get("symbols", ()) if s not in r.get("symbols", ())]
        if missing:
            self.problems.append(Problem(path, f"enum symbol(s) {', '.join(missing)} missing (and no enum default)",
                                         kind="growth"))


def matches(w: Any, r: Any) -> bool:
    """Whether a writer type resolves into a reader type at this level (names, kinds, promotions)."""
    wk, rk = kind_of(w), kind_of(r)
    if wk in NAMED or rk in NAMED:
        return wk == rk and _short(w["__full_name"]) == _short(r["__full_name"])
    return wk == rk or rk in PROMOTIONS.get(wk, ())


def _first_match(w: Any, branches: list[Any], side: _Side) -> Any | None:
    """The reader branch a writer type resolves into: exact kind/name first, then a promotion."""
    resolved = [(b, side.at(b)[0]) for b in branches]
    for raw, b in resolved:
        if kind_of(w) == kind_of(b) and matches(w, b):
            return raw
    for raw, b in resolved:
        if matches(w, b):
            return raw
    return None


def _root_path(schema: Any) -> str:
    return _short(full_name(schema)) if isinstance(schema, dict) and "name" in schema else "<root>"


def _branch_path(path: str, branch: Any) -> str:
    return f"{path}<{_short(branch['__full_name'])}>" if kind_of(branch) in NAMED else path


# --- the public checks --------------------------------------------------------------------------


def resolution_problems(writer: Any, reader: Any) -> list[str]:
    """What stops ``reader`` from reading records written with ``writer`` (Avro resolution)."""
    return [str(p) for p in _resolve(writer, reader)]


def reader_problems(writer: Any, reader: Any) -> list[str]:
    """What stops ``reader`` from reading ``writer``'s records, apart from body types it skips."""
    return [str(p) for p in _resolve(writer, reader) if not _skippable(p, reader)]


def skipped_types(writer: Any, reader: Any) -> list[str]:
    """The body types (short names) of ``writer`` that ``reader`` lacks: its readers skip those records."""
    return [p.text.split(" ")[3] for p in _resolve(writer, reader) if _skippable(p, reader)]


def _skippable(problem: Problem, reader: Any) -> bool:
    """A whole record missing from the envelope's ``body`` union: the record is skipped, not misread."""
    return (problem.kind == "growth" and problem.path == f"{_root_path(reader)}.body"
            and problem.text.startswith("union branch record "))


def _resolve(writer: Any, reader: Any) -> list[Problem]:
    writer, reader = _copy(writer), _copy(reader)
    return _Resolution(writer, reader).run(writer, reader)


def check_compatible(old: Any, new: Any, *, strict_growth: bool = False) -> list[str]:
    """Problems with shipping ``new`` after ``old``: backward (new reads old) and forward (old reads new).

    Without ``strict_growth``, a union branch or enum symbol that only ``new`` has is not a
    forward problem (see the module docstring); removing one always is a backward problem.
    """
    backward = [f"backward (new reads old): {_say(p, FIELD_ADDED)}" for p in _resolve(old, new)]
    forward = [f"forward (old reads new): {_say(p, FIELD_REMOVED)}" for p in _resolve(new, old)
               if strict_growth or p.kind != "growth"]
    return backward + forward + [f"new schema: {p}" for p in default_problems(new)]


FIELD_ADDED = "field added without a default: records written before it cannot be read"
FIELD_REMOVED = "field removed, and the old schema has no default for it: old readers cannot read new records"


def _say(problem: Problem, missing_field: str) -> str:
    return f"{problem.path}: {missing_field}" if problem.kind == "field" else str(problem)


def _copy(schema: Any) -> Any:
    return json.loads(json.dumps(schema))


# --- defaults ---------------------------------------------------------------------------------


def default_problems(schema: Any) -> list[str]:
    """Fields whose default does not fit their type (for a union: its first branch)."""
    schema = _copy(schema)
    return list(_bad_defaults(schema, _Side(Names(schema)), _root_path(schema), set()))


def _bad_defaults(node: Any, side: _Side, path: str, seen: set[int]) -> Iterator[str]:
    node, side = side.at(node)
    if id(node) in seen or not isinstance(node, (dict, list)):
        return
    seen.add(id(node))
    if isinstance(node, list):  # a union
        for b in node:
            yield from _bad_defaults(b, side, _branch_path(path, side.at(b)[0]), seen)
        return
    kind = kind_of(node)
    if kind in ("record", "error"):
        for f in node.get("fields", ()):
            here = f"{path}.{f['name']}"
            if "default" in f and not fits(f["default"], f["type"], side):
                yield f"{here}: default {json.dumps(f['default'])} does not fit the field's type"
            yield from _bad_defaults(f["type"], side, here, seen)
    elif kind == "array":
        yield from _bad_defaults(node["items"], side, f"{path}[]", seen)
    elif kind == "map":
        yield from _bad_defaults(node["values"], side, f"{path}{{}}", seen)


_JSON_OF: Mapping[str, tuple[type, ...]] = {
    "boolean": (bool,), "int": (int,), "long": (int,), "float": (int, float), "double": (int, float),
    "bytes": (str,), "string": (str,), "fixed": (str,),
}


def fits(value: Any, node: Any, side: _Side) -> bool:
    """Whether a JSON default value fits a type (Avro: a union's default fits its first branch)."""
    node, side = side.at(node)
    kind = kind_of(node)
    if kind == "union":
        return bool(node) and fits(value, node[0], side)
    if kind == "null":
        return value is None
    if kind in _JSON_OF:  # JSON true/false are Python bools, which are ints too
        return isinstance(value, _JSON_OF[kind]) and isinstance(value, bool) == (kind == "boolean")
    if kind == "enum":
        return value in node.get("symbols", ())
    if kind == "array":
        return isinstance(value, list) and all(fits(v, node["items"], side) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(fits(v, node["values"], side) for v in value.values())
    if kind in ("record", "error"):
        return isinstance(value, dict) and all(
            fits(value[f["name"]], f["type"], side) if f["name"] in value else "default" in f
            for f in node.get("fields", ()))
    return False


# --- the shipped schemas ------------------------------------------------------------------------


def shipped_versions(subject: str) -> list[tuple[int, dict[str, Any]]]:
    """(version, raw schema) of every shipped ``schemas/vN/<subject>.avsc``, oldest first."""
    root = resources.files("engine.schemas")
    found = []
    for entry in root.iterdir():
        path = entry / f"{subject}.avsc"
        if entry.name[:1] == "v" and entry.name[1:].isdigit() and path.is_file():
            found.append((int(entry.name[1:]), json.loads(path.read_text(encoding="utf-8"))))
    return sorted(found, key=lambda pair: pair[0])


def shipped_problems(subjects: tuple[str, ...] = ("command", "event", "tenant")) -> list[str]:
    """Problems of each shipped step, and of every shipped version reading every other one, both ways.

    A reader may lack a writer's body types (it skips those records); nothing else may stop it.
    """
    out = []
    for subject in subjects:
        versions = shipped_versions(subject)
        for (a, old), (b, new) in zip(versions, versions[1:]):
            out += [f"{subject} v{a} -> v{b}: {p}" for p in check_compatible(old, new)]
        for a, writer in versions:
            for b, reader in versions:
                if a != b:
                    out += [f"{subject} v{b} reading v{a}: {p}" for p in reader_problems(writer, reader)]
    return out


def main() -> int:
    """``python -m engine.contract.compat``: check every shipped schema version; exit 1 on a problem."""
    problems = shipped_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s)" if problems else "every shipped schema version is compatible")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
