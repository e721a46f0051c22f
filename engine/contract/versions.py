"""One schema version of a subject: parsed from its .avsc text, with its fingerprint and header.

Schemas are parsed with their ``logicalType`` attributes removed, so timestamps stay plain int
microseconds both ways. Parsing Canonical Form drops ``logicalType``, so the fingerprints are
those of the files.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Iterable
from importlib.resources.abc import Traversable
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

MAGIC = b"\xc3\x01"
HEADER_SIZE = 10
LEARNED = -1
"""The version number of a schema learned from a schema source (its real number is not in the schema)."""
_VERSION_DIR = re.compile(r"v(\d+)")


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One schema of a subject: its version number (-1: learned, not shipped), fingerprint, parsed form, text."""

    subject: str
    version: int
    fingerprint: bytes
    canonical_form: str
    parsed: dict[str, Any]
    text: str = ""

    @property
    def label(self) -> str:
        """``v3``, or ``schema 1f2e…`` for one learned from a schema source."""
        return f"v{self.version}" if self.version >= 0 else f"schema {self.fingerprint.hex()}"

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
        parsed=typing.cast(dict[str, Any], parse_schema(strip_logical_types(raw))),
        text=text,
    )


def versions_in(root: Traversable, subject: str) -> Iterable[SchemaVersion]:
    for entry in root.iterdir():
        match = _VERSION_DIR.fullmatch(entry.name)
        path = entry / f"{subject}.avsc"
        if match and entry.is_dir() and path.is_file():
            try:
                yield load_version(subject, int(match.group(1)), path.read_text(encoding="utf-8"))
            except Exception as e:
                e.add_note(f"while loading {path}")
                raise
