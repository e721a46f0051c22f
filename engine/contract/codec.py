"""Avro single-object encoding of the contract: the one place where bytes become messages.

A record on any epochq topic is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of
the writer schema's Parsing Canonical Form + the Avro binary body. Every shipped version
``schemas/vN/<subject>.avsc`` is kept and looked up by fingerprint; the newest one writes, and
reads: a record written with an older version is resolved into the newest. Anything that is not
such a record raises :class:`~engine.errors.DecodeError`, never another exception.

A fingerprint no shipped version has is looked up in the installed schema sources
(:mod:`engine.contract.learned`; the runtime's reads ``<ns>.schemas``) and kept. A record of a
body type the reader's union lacks (a newer writer added it) raises
:class:`~engine.errors.UnknownTypeError` naming the type: readers skip and count it.

Schemas are parsed with their ``logicalType`` attributes removed, so timestamps stay plain int
microseconds both ways. Parsing Canonical Form drops ``logicalType``, so the fingerprints are
those of the shipped files.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Generic, TypeVar

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError

from engine.contract import learned
from engine.contract.avro_codegen import Unsupported, compile_writers
from engine.contract.avro_fast import MalformedError
from engine.contract.avro_readers import compile_reader
from engine.contract.messages import COMMAND_BODIES, EVENT_BODIES, Command, Event, TenantConfig
from engine.contract.records import RecordMap, records_of
from engine.contract.versions import (
    HEADER_SIZE,
    LEARNED,
    MAGIC,
    SchemaVersion,
    load_version,
    versions_in,
)
from engine.errors import ContractError, DecodeError, UnknownTypeError, ValidationError

SUBJECTS = ("command", "event", "tenant")
_DETAIL_LIMIT = 160
MessageT = TypeVar("MessageT")


class SchemaCatalog:
    """Every shipped version of one subject's schema, by fingerprint; the newest reads and writes."""

    def __init__(self, subject: str, versions: Iterable[SchemaVersion]):
        ordered = sorted(versions, key=lambda v: v.version)
        if not ordered:
            raise ContractError(f"no schema versions for subject {subject!r}")
        self.subject = subject
        self.versions: tuple[SchemaVersion, ...] = tuple(ordered)
        self.current = ordered[-1]
        self._header = self.current.header
        self._by_header = {v.header: v for v in ordered}
        self._body_names = self._find_body_names()

    @classmethod
    def from_dir(cls, root: Traversable, subject: str) -> SchemaCatalog:
        """Load ``root/v*/<subject>.avsc`` (any directory: the package's, or a test's)."""
        return cls(subject, versions_in(root, subject))

    def version_for(self, fingerprint: bytes) -> SchemaVersion | None:
        """The shipped (or already learned) version with this 8-byte fingerprint, if any."""
        return self._by_header.get(MAGIC + fingerprint)

    def learn(self, fingerprint: bytes) -> SchemaVersion | None:
        """The writer schema with this fingerprint from the installed sources, checked and kept; or None.

        What a source returns is used only if it is a schema of this subject (its envelope's
        name) whose fingerprint is the one asked for.
        """
        text = learned.lookup(fingerprint)
        if text is None:
            return None
        try:
            version = load_version(self.subject, LEARNED, text)
        except Exception:  # noqa: BLE001 - a value that is no schema is as good as none
            return None
        if version.fingerprint != fingerprint or version.parsed.get("name") != self.current.parsed.get("name"):
            return None
        self._by_header[version.header] = version
        return version

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
            # fastavro's compiled reader reports some ends of input (mid-varint) as IndexError.
            ran_out = isinstance(e, EOFError) or (isinstance(e, IndexError) and buf.tell() >= len(raw))
            unknown = self._unknown_type(raw, version) if isinstance(e, SchemaResolutionError) else None
            raise (unknown or self.body_error(e, version, ran_out)) from e
        self.check_end(buf.tell(), len(raw))
        return datum  # type: ignore[return-value]

    def body_error(self, error: Exception, version: SchemaVersion, ran_out: bool) -> DecodeError:
        """The DecodeError for a body that ``version`` could not read."""
        if ran_out:
            reason = f"truncated body: the {self.subject} {version.label} record ends early ({_brief(error)})"
        elif isinstance(error, SchemaResolutionError):
            reason = f"cannot resolve {self.subject} {version.label} into v{self.current.version}: {_brief(error)}"
        else:
            reason = f"malformed body for {self.subject} {version.label}: {_brief(error)}"
        return DecodeError(reason)

    def _unknown_type(self, raw: bytes, version: SchemaVersion) -> UnknownTypeError | None:
        """The UnknownTypeError for a record whose body type the reader lacks (read with its writer alone)."""
        buf = io.BytesIO(raw)
        buf.seek(HEADER_SIZE)
        try:
            datum = schemaless_reader(buf, version.parsed, None, return_record_name=True)
        except Exception:  # noqa: BLE001 - not readable even by its writer: body_error says why
            return None
        body = datum.get("body") if isinstance(datum, dict) else None
        name = body[0].rsplit(".", 1)[-1] if isinstance(body, tuple) else None
        if name is None or name in self._body_names:
            return None
        return UnknownTypeError(name, f"unknown type {name}: written with {self.subject} {version.label}, "
                                      f"which this reader (v{self.current.version}) does not have")

    def check_end(self, end: int, size: int) -> None:
        """Raise DecodeError unless the record ended exactly at the end of the value."""
        if end != size:
            raise DecodeError(f"trailing bytes: {size - end} after the {self.subject} record")

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
        learnt = self.learn(raw[2:HEADER_SIZE])
        if learnt is not None:
            return raw, learnt
        known = ", ".join(f"v{v.version}={v.fingerprint.hex()}" for v in self.versions)
        raise DecodeError(f"unknown fingerprint {raw[2:HEADER_SIZE].hex()}: "
                          f"no {self.subject} schema has it (known: {known}; nor the schemas topic)")

    def body_names(self) -> dict[str, str]:
        """Short name -> full name of the record branches of the envelope's ``body`` union."""
        return dict(self._body_names)

    def _find_body_names(self) -> dict[str, str]:
        for field in self.current.parsed.get("fields", ()):
            if field["name"] == "body":
                return {b["name"].rsplit(".", 1)[-1]: b["name"] for b in field["type"]
                        if isinstance(b, dict) and "name" in b}
        return {}


def _brief(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".rstrip(": ")
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


class MessageCodec(Generic[MessageT]):
    """The typed face of a SchemaCatalog: envelope dataclasses (with a body union) to bytes and back.

    Messages written with the current schema go through functions generated for it once
    (:mod:`engine.contract.avro_codegen`): the same bytes as fastavro, without building dicts.
    Records of older versions are resolved by fastavro; a message the fast writer refuses is
    handed to fastavro, which writes it or raises a ValidationError naming the field.
    """

    def __init__(self, catalog: SchemaCatalog, envelope: type[MessageT], bodies: Mapping[str, type] | None = None):
        self.catalog = catalog
        records = records_of(catalog.current.parsed)
        self._envelope = RecordMap(envelope, catalog.current.parsed, records)
        full_names = catalog.body_names()
        self._by_type: dict[type, tuple[str, RecordMap]] = {}
        self._by_name: dict[str, RecordMap] = {}
        for short, cls in (bodies or {}).items():
            if short in full_names:
                body_map = RecordMap(cls, records[full_names[short]], records)
                self._by_type[cls] = (full_names[short], body_map)
                self._by_name[full_names[short]] = body_map
        self._has_body = bodies is not None
        self._writers, self._reader = _fast_path(catalog, envelope, bodies)
        self._fast_header = catalog.current.header if self._reader is not None else None

    def encode(self, message: MessageT) -> bytes:
        """The single-object record of one message, written with the newest schema."""
        if type(message) is self._envelope.cls:
            writer = self._writers.get(type(message.body) if self._has_body else self._envelope.cls)  # type: ignore[attr-defined]
            if writer is not None:
                try:
                    return writer(message)
                except Exception:  # noqa: BLE001, S110 - fastavro below writes it, or says what is wrong
                    pass
        return self.encode_general(message)

    def encode_general(self, message: MessageT) -> bytes:
        """:meth:`encode` through fastavro (dataclass -> dict -> ``schemaless_writer``)."""
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
        if type(raw) is bytes and raw[:HEADER_SIZE] == self._fast_header:
            return self._decode_current(raw)
        return self.decode_general(raw)

    def decode_general(self, raw: bytes) -> MessageT:
        """:meth:`decode` through fastavro (``schemaless_reader`` -> dict -> dataclass), any version."""
        datum = self.catalog.decode(raw)
        if self._has_body:
            name, body = datum["body"]
            body_map = self._by_name.get(name)
            if body_map is None:
                raise DecodeError(f"unmapped body: record {name} has no {self.catalog.subject} class")
            datum["body"] = _build(body_map, body, name)
        return _build(self._envelope, datum, self.catalog.subject)  # type: ignore[no-any-return]

    def _decode_current(self, raw: bytes) -> MessageT:
        """A record of the current schema, through the generated reader.

        Bytes no valid record holds (MalformedError) and counts larger than what is left
        (TruncatedError) are reported at once; anything else it cannot read, or reads to anywhere but the
        end, the fastavro path reads again, and either decodes or says precisely why not.
        """
        try:
            message, end = self._reader(raw)  # type: ignore[misc]
            if end == len(raw):
                return message  # type: ignore[no-any-return]
        except (MalformedError, EOFError) as e:
            raise self.catalog.body_error(e, self.catalog.current, isinstance(e, EOFError)) from e
        except Exception:  # noqa: BLE001, S110 - explained by decode_general below
            pass
        return self.decode_general(raw)

    def decode_at(self, raw: bytes, topic: str, partition: int, offset: int) -> MessageT:
        """:meth:`decode`, with any DecodeError naming where in the log the record sits."""
        try:
            return self.decode(raw)
        except DecodeError as e:
            raise e.located(topic, partition, offset) from e.__cause__


def _fast_path(catalog: SchemaCatalog, envelope: type, bodies: Mapping[str, type] | None) -> tuple[
        dict[type, Callable[[Any], bytes]], Callable[[bytes], tuple[Any, int]] | None]:
    """The generated writers and reader of the current schema (none for a schema they cannot do)."""
    schema = catalog.current.parsed
    try:
        writers = compile_writers(schema, catalog.current.header, envelope, bodies)
    except Unsupported:
        writers = {}
    try:
        reader = compile_reader(schema, HEADER_SIZE, catalog.subject, envelope, bodies)
    except Unsupported:
        reader = None
    return writers, reader


def _build(record_map: RecordMap, datum: dict[str, Any], what: str) -> Any:
    try:
        return record_map.from_dict(datum)
    except (TypeError, ValueError, KeyError) as e:
        raise DecodeError(f"unmapped record: {what} does not fit {record_map.cls.__name__} ({_brief(e)})") from e


# --- the shipped contract ----------------------------------------------------------------------


@functools.cache
def catalog(subject: str) -> SchemaCatalog:
    """The shipped catalog of one subject (``command``, ``event`` or ``tenant``), loaded once."""
    if subject not in SUBJECTS:
        raise ContractError(f"unknown subject {subject!r}; expected one of {SUBJECTS}")
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
