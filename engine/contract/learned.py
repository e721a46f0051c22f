"""Writer schemas the codec does not ship, looked up by fingerprint in the sources the runtime installs.

Every record names its writer schema by fingerprint. The codec ships every version it knows;
for any other fingerprint (a record written by a newer epochq, or by a producer with a schema
of its own) it asks the *sources*: callables from an 8-byte fingerprint (wire order) to the
schema's JSON text, or None. The runtime installs one per namespace, which reads
``<ns>.schemas`` (:mod:`engine.runtime.kafka.schemas`); the contract itself does no I/O and imports
no Kafka. The codec checks what a source returns (the text must have that fingerprint and be a
schema of the subject) before it reads a record with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

SchemaSource = Callable[[bytes], "str | None"]

_sources: list[SchemaSource] = []
_lock = threading.Lock()


def add_source(source: SchemaSource) -> None:
    """Install a source (once: installing the same one again does nothing)."""
    with _lock:
        if source not in _sources:
            _sources.append(source)


def remove_source(source: SchemaSource) -> None:
    """Uninstall a source (a source never installed is ignored)."""
    with _lock:
        if source in _sources:
            _sources.remove(source)


def lookup(fingerprint: bytes) -> str | None:
    """The schema text a source has for ``fingerprint``, asking them in the order installed."""
    with _lock:
        sources = list(_sources)
    for source in sources:
        text = source(fingerprint)
        if text:
            return text
    return None


def skipped_line(counts: Mapping[str, int]) -> str:
    """One line naming the records a reader skipped, by type: what it tells the person running it."""
    total = sum(counts.values())
    kinds = ", ".join(f"{name} x{n}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"skipped {total} record(s) of {len(counts)} type(s) this reader's schema does not have: {kinds}"
