"""Avro single-object encoding of the contract: the one place where bytes become messages.

A record on any epochq topic is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of
the writer schema's Parsing Canonical Form + the Avro binary body. Every shipped version
``schemas/vN/<subject>.avsc`` is kept and looked up by fingerprint; the newest one writes, and
reads: a record written with an older version is resolved into the newest. Anything that is not
such a record raises :class:`~engine.errors.DecodeError`, never another exception.

Schemas are parsed with their ``logicalType`` attributes removed, so timestamps stay plain int
microseconds both ways. Parsing Canonical Form drops ``logicalType``, so the fingerprints are
those of the shipped files.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import operator
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Generic, TypeVar

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint, to_parsing_canonical_form

from engine.contract.messages import COMMAND_BODIES, EVENT_BODIES, Command, Event, TenantConfig
from engine.errors import DecodeError, ValidationError

MAGIC = b"\xc3\x01"
HEADER_SIZE = 10
SUBJECTS = ("command", "event", "tenant")

_VERSION_DIR = re.compile(r"v(\d+)")
_PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "bytes", "string"})
_DETAIL_LIMIT = 160
MessageT = TypeVar("MessageT")


# --- schemas -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One shipped schema of a subject: its version number, fingerprint and parsed form."""

    subject: str
    version: int
    fingerprint: bytes
    canonical_form: str
    parsed: dict[str, Any]

    @property
    def header(self) -> bytes:
        """The 10 bytes that open every record written with this schema."""
        return MAGIC + self.fingerprint


def strip_logical_types(node: Any) -> Any:
    """A copy of a schema without ``logicalType`` attributes (default values are left alone)."""
    if isinstance(node, dict):
        return {
            k: (v if k == "default" else strip_logical_types(v))
            for k, v in node.items()
            if k != "logicalType"
        }
    if isinstance(node, list):
        return [strip_logical_types(v) for v in node]
    return node


def load_version(subject: str, version: int, text: str) -> SchemaVersion:
    """Parse one .avsc text into a SchemaVersion (fingerprint of the file as shipped)."""
    raw = json.loads(text)
    canonical = to_parsing_canonical_form(raw)
    return SchemaVersion(
        subject=subject,
        version=version,
        fingerprint=bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO")),
        canonical_form=canonical,
        parsed=parse_schema(strip_logical_types(raw)),
    )


def _versions_in(root: Traversable, subject: str) -> Iterable[SchemaVersion]:
    for entry in root.iterdir():
        match = _VERSION_DIR.fullmatch(entry.name)
        path = entry / f"{subject}.avsc"
        if match and entry.is_dir() and path.is_file():
            try:
                yield load_version(subject, int(match.group(1)), path.read_text(encoding="utf-8"))
            except Exception as e:
                e.add_note(f"while loading {path}")
                raise


class SchemaCatalog:
    """Every shipped version of one subject's schema, by fingerprint; the newest reads and writes."""

    def __init__(self, subject: str, versions: Iterable[SchemaVersion]):
        ordered = sorted(versions, key=lambda v: v.version)
        if not ordered:
            raise FileNotFoundError(f"no schema versions for subject {subject!r}")
        self.subject = subject
        self.versions: tuple[SchemaVersion, ...] = tuple(ordered)
        self.current = ordered[-1]
        self._header = self.current.header
        self._by_header = {v.header: v for v in ordered}

    @classmethod
    def from_dir(cls, root: Traversable, subject: str) -> SchemaCatalog:
        """Load ``root/v*/<subject>.avsc`` (any directory: the package's, or a test's)."""
        return cls(subject, _versions_in(root, subject))

    def version_for(self, fingerprint: bytes) -> SchemaVersion | None:
        """The shipped version with this 8-byte fingerprint, if any."""
        return self._by_header.get(MAGIC + fingerprint)

    def encode(self, datum: Mapping[str, Any], *, strict: bool = False) -> bytes:
        """One single-object record written with the newest schema (unions of records as tuples)."""
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            schemaless_writer(buf, self.current.parsed, datum, strict_allow_default=strict)
        except Exception as e:
            raise ValidationError(f"cannot encode a {self.subject} record: {_brief(e)}") from e
        return buf.getvalue()

    def decode(self, raw: bytes) -> dict[str, Any]:
        """The record's datum in the newest schema, with unions of records as (full name, dict)."""
        version = self._by_header.get(raw[:HEADER_SIZE]) if type(raw) is bytes else None
        if version is None:
            raw, version = self._diagnose(raw)
        buf = io.BytesIO(raw)
        buf.seek(HEADER_SIZE)
        reader = None if version is self.current else self.current.parsed
        try:
            datum = schemaless_reader(buf, version.parsed, reader, return_record_name=True)
        except Exception as e:
            ran_out = isinstance(e, EOFError) or (isinstance(e, IndexError) and buf.tell() >= len(raw))
            raise DecodeError(self._body_failure(e, version, ran_out)) from e
        if buf.tell() != len(raw):
            raise DecodeError(f"trailing bytes: {len(raw) - buf.tell()} after the {self.subject} record")
        return datum  # type: ignore[return-value]

    def _body_failure(self, error: Exception, version: SchemaVersion, ran_out: bool) -> str:
        # fastavro's compiled reader reports some ends of input (mid-varint) as IndexError.
        if ran_out:
            return f"truncated body: the {self.subject} v{version.version} record ends early ({_brief(error)})"
        if isinstance(error, SchemaResolutionError):
            return (f"cannot resolve {self.subject} v{version.version} into "
                    f"v{self.current.version}: {_brief(error)}")
        return f"malformed body for {self.subject} v{version.version}: {_brief(error)}"

    def _diagnose(self, raw: Any) -> tuple[bytes, SchemaVersion]:
        """Say precisely why ``raw`` has no known header, or return it as bytes with its version."""
        if raw is None:
            raise DecodeError("no value: a null record (tombstone) is not a single-object record")
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            raise DecodeError(f"not bytes: got {type(raw).__name__}")
        raw = bytes(raw)
        version = self._by_header.get(raw[:HEADER_SIZE])
        if version is not None:
            return raw, version
        if not raw:
            raise DecodeError("empty: 0 bytes, a single-object record has a 10-byte header")
        if raw[:2] != MAGIC[: len(raw[:2])]:
            raise DecodeError(f"bad magic: starts {raw[:2].hex()}, a single-object record starts c301")
        if len(raw) < HEADER_SIZE:
            raise DecodeError(f"too short: {len(raw)} of the 10 header bytes (magic and fingerprint)")
        known = ", ".join(f"v{v.version}={v.fingerprint.hex()}" for v in self.versions)
        raise DecodeError(f"unknown fingerprint {raw[2:HEADER_SIZE].hex()}: "
                          f"no {self.subject} schema has it (known: {known})")

    def body_names(self) -> dict[str, str]:
        """Short name -> full name of the record branches of the envelope's ``body`` union."""
        for field in self.current.parsed.get("fields", ()):
            if field["name"] == "body":
                return {b["name"].rsplit(".", 1)[-1]: b["name"] for b in field["type"]
                        if isinstance(b, dict) and "name" in b}
        return {}


def _brief(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".rstrip(": ")
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


# --- dataclasses <-> Avro dicts --------------------------------------------------------------


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    if not names:
        return lambda obj: ()
    return operator.attrgetter(*names)


class _RecordMap:
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
        self.nested = tuple((n, _RecordMap(hints[n], _record_schema(types.get(n), records), records))
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


def _records(node: Any, found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every record schema defined inside a parsed schema, by full name."""
    if isinstance(node, list):
        for item in node:
            _records(item, found)
    elif isinstance(node, dict) and node.get("type") == "record":
        found[node["name"]] = node
        for field in node["fields"]:
            _records(field["type"], found)
    return found


class MessageCodec(Generic[MessageT]):
    """The typed face of a SchemaCatalog: envelope dataclasses (with a body union) to bytes and back."""

    def __init__(self, catalog: SchemaCatalog, envelope: type[MessageT], bodies: Mapping[str, type] | None = None):
        self.catalog = catalog
        records = _records(catalog.current.parsed, {})
        self._envelope = _RecordMap(envelope, catalog.current.parsed, records)
        full_names = catalog.body_names()
        self._by_type: dict[type, tuple[str, _RecordMap]] = {}
        self._by_name: dict[str, _RecordMap] = {}
        for short, cls in (bodies or {}).items():
            if short in full_names:
                body_map = _RecordMap(cls, records[full_names[short]], records)
                self._by_type[cls] = (full_names[short], body_map)
                self._by_name[full_names[short]] = body_map
        self._has_body = bodies is not None

    def encode(self, message: MessageT) -> bytes:
        """The single-object record of one message, written with the newest schema."""
        if type(message) is not self._envelope.cls:
            raise ValidationError(f"cannot encode {type(message).__name__} as a {self.catalog.subject}")
        datum = self._envelope.to_dict(message)
        if self._has_body:
            body = datum["body"]
            mapped = self._by_type.get(type(body))
            if mapped is None:
                raise ValidationError(f"{type(body).__name__} is not a {self.catalog.subject} body")
            datum["body"] = (mapped[0], mapped[1].to_dict(body))
        return self.catalog.encode(datum)

    def decode(self, raw: bytes) -> MessageT:
        """The message in ``raw``; DecodeError if it is not one."""
        datum = self.catalog.decode(raw)
        if self._has_body:
            name, body = datum["body"]
            body_map = self._by_name.get(name)
            if body_map is None:
                raise DecodeError(f"unmapped body: record {name} has no {self.catalog.subject} class")
            datum["body"] = _build(body_map, body, name)
        return _build(self._envelope, datum, self.catalog.subject)  # type: ignore[no-any-return]

    def decode_at(self, raw: bytes, topic: str, partition: int, offset: int) -> MessageT:
        """:meth:`decode`, with any DecodeError naming where in the log the record sits."""
        try:
            return self.decode(raw)
        except DecodeError as e:
            raise e.located(topic, partition, offset) from e.__cause__


def _build(record_map: _RecordMap, datum: dict[str, Any], what: str) -> Any:
    try:
        return record_map.from_dict(datum)
    except (TypeError, ValueError, KeyError) as e:
        raise DecodeError(f"unmapped record: {what} does not fit {record_map.cls.__name__} ({_brief(e)})") from e


# --- the shipped contract ----------------------------------------------------------------------


@functools.cache
def catalog(subject: str) -> SchemaCatalog:
    """The shipped catalog of one subject (``command``, ``event`` or ``tenant``), loaded once."""
    if subject not in SUBJECTS:
        raise ValueError(f"unknown subject {subject!r}; expected one of {SUBJECTS}")
    return SchemaCatalog.from_dir(resources.files("engine.schemas"), subject)


@functools.cache
def _codec(subject: str) -> MessageCodec[Any]:
    if subject == "command":
        return MessageCodec(catalog(subject), Command, COMMAND_BODIES)
    if subject == "event":
        return MessageCodec(catalog(subject), Event, EVENT_BODIES)
    return MessageCodec(catalog("tenant"), TenantConfig)


def encode_command(command: Command) -> bytes:
    """The wire bytes of one command."""
    return _codec("command").encode(command)


def decode_command(raw: bytes) -> Command:
    """The command in ``raw``; DecodeError if it is not one."""
    return _codec("command").decode(raw)  # type: ignore[no-any-return]


def decode_command_at(raw: bytes, topic: str, partition: int, offset: int) -> Command:
    """:func:`decode_command`, with a DecodeError located at topic[partition]@offset."""
    return _codec("command").decode_at(raw, topic, partition, offset)  # type: ignore[no-any-return]


def encode_event(event: Event) -> bytes:
    """The wire bytes of one event."""
    return _codec("event").encode(event)


def decode_event(raw: bytes) -> Event:
    """The event in ``raw``; DecodeError if it is not one."""
    return _codec("event").decode(raw)  # type: ignore[no-any-return]


def decode_event_at(raw: bytes, topic: str, partition: int, offset: int) -> Event:
    """:func:`decode_event`, with a DecodeError located at topic[partition]@offset."""
    return _codec("event").decode_at(raw, topic, partition, offset)  # type: ignore[no-any-return]


def encode_tenant(config: TenantConfig | Mapping[str, Any]) -> bytes:
    """The wire bytes of one tenant configuration (a TenantConfig, or a dict of its fields)."""
    if isinstance(config, TenantConfig):
        return _codec("tenant").encode(config)
    return encode("tenant", config)


def decode_tenant(raw: bytes) -> TenantConfig:
    """The tenant configuration in ``raw``; DecodeError if it is not one."""
    return _codec("tenant").decode(raw)  # type: ignore[no-any-return]


def encode(subject: str, datum: Mapping[str, Any]) -> bytes:
    """Encode a plain dict; a ``body`` is ``(record_name, dict)``, short or full name; strict fields."""
    body = datum.get("body")
    if isinstance(body, tuple) and len(body) == 2:
        full = catalog(subject).body_names().get(body[0], body[0])
        datum = {**datum, "body": (full, body[1])}
    return catalog(subject).encode(datum, strict=True)


def decode(subject: str, raw: bytes) -> dict[str, Any]:
    """Decode into a plain dict in the newest schema; a ``body`` comes back as ``(short_name, dict)``."""
    datum = catalog(subject).decode(raw)
    body = datum.get("body")
    if isinstance(body, tuple):
        datum["body"] = (body[0].rsplit(".", 1)[-1], body[1])
    return datum
