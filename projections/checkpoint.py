"""A checkpoint of a partition's write model: its store as one RocksDB SST file cut into chunks, and the manifest.

A checkpoint is what a new owner loads instead of replaying the log from offset 0: every
key-value pair of the store as committed at applied offset O but the offset itself, written
in key order into one SST file (RocksDB's own table format, compressed, with its own block
checksums), whose bytes are cut into chunks of CHUNK_BYTES; and a manifest naming O, the epoch
and owner that wrote it, how many chunks there are, where the first one is in the checkpoints
partition, and a SHA-256 over them. ``engine.runtime.checkpoints`` writes them to
``<ns>.checkpoints`` and reads them back; this module is the format, and the two passes over a
store that make and load one (:func:`export`, :func:`load_checked`).

Loading ingests the file into the empty store (RocksDB links it in as a table): its cost is
that of reading the bytes, not of writing the pairs one by one, so it hardly grows with the
number of keys (FORMAT 1 chunks held the pairs themselves, and loading 333,000 of them took
seconds of Python). Manifest format: one JSON object (FORMAT 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.errors import CheckpointError as CheckpointError  # its name here too
from projections.identity import described
from projections.store import OFFSET_KEY, ProjectionStore
from projections.views import keys as k

FORMAT = 2
CHUNK_BYTES = 512 * 1024
MANIFEST_KEY = b"manifest"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What vouches for one checkpoint: where it stands in the events and how to find and check its chunks."""

    events_offset: int  # the store reflects the events up to and including this offset
    epoch: int  # the newest valid claim in the snapshot: the writer's own
    owner: str
    chunks: int
    first_chunk_offset: int  # in the checkpoints partition; chunk i is at first_chunk_offset + i
    sha256: str  # over the chunks' values, in order
    keys: int  # pairs in the file, for operators
    written_at: int  # µs, for operators
    format: int = FORMAT


def encode_manifest(manifest: Manifest) -> bytes:
    """A manifest's record value."""
    return json.dumps(asdict(manifest), sort_keys=True).encode()


def decode_manifest(raw: bytes | None) -> Manifest:
    """A manifest from its record value; CheckpointError naming what is wrong."""
    try:
        fields = json.loads(raw or b"")
        manifest = Manifest(**fields)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"unreadable manifest: {e}") from e
    if manifest.format != FORMAT:
        raise CheckpointError(f"manifest format {manifest.format}, expected {FORMAT}")
    if min(manifest.events_offset, manifest.epoch, manifest.chunks, manifest.first_chunk_offset) < 0:
        raise CheckpointError("manifest with a negative offset, epoch or chunk count")
    return manifest


def chunk_key(index: int) -> bytes:
    """The record key of chunk ``index``."""
    return b"chunk:%d" % index


def sliced(data: bytes, size: int = CHUNK_BYTES) -> list[bytes]:
    """``data`` cut into chunks of ``size`` bytes (the last one shorter; none for no bytes)."""
    return [data[at:at + size] for at in range(0, len(data), size)]


def digest(chunks: Iterable[bytes]) -> str:
    """The SHA-256 of the chunks, in order."""
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def check(manifest: Manifest, chunks: list[bytes]) -> None:
    """CheckpointError unless ``chunks`` are the ones the manifest vouches for."""
    if len(chunks) != manifest.chunks:
        raise CheckpointError(f"{len(chunks)} chunks found, the manifest names {manifest.chunks}")
    if digest(chunks) != manifest.sha256:
        raise CheckpointError("the chunks' checksum differs from the manifest's")


def check_snapshot(manifest: Manifest, read: Callable[[bytes], bytes | None]) -> None:
    """CheckpointError unless the snapshot (read through ``read``) stands under the manifest's own claim: its
    newest valid claim is the manifest's epoch, by the manifest's owner."""
    epoch = read(k.EPOCH)
    if epoch is None or int(epoch) != manifest.epoch:
        raise CheckpointError(f"the snapshot's newest claim is epoch {epoch!r}, the manifest's {manifest.epoch}")
    claim = read(k.CLAIMS + k.num(manifest.epoch)) or b""
    if claim.split(b"\x00", 1)[0].decode(errors="replace") != manifest.owner:
        raise CheckpointError(f"the snapshot's claim of epoch {manifest.epoch} is not {manifest.owner}'s")


def export(store: ProjectionStore) -> tuple[list[bytes], int, int]:
    """The chunks of ``store`` as committed now (a RocksDB snapshot), how many pairs they hold and the applied
    offset they stand at (-1: none). The SST file is written beside the store and removed."""
    path = _scratch(store)
    try:
        keys, offset = store.export_sst(path, skip=frozenset({OFFSET_KEY}))
        data = path.read_bytes() if keys else b""
    finally:
        path.unlink(missing_ok=True)
    return sliced(data), keys, -1 if offset is None else int(offset)


def load_checked(store: ProjectionStore, manifest: Manifest, chunks: list[bytes]) -> None:
    """Load a checkpoint into an empty store, checking it on the way (CheckpointError if it does not hold up:
    chunk count, checksum, a file RocksDB refuses, the snapshot's claim, the log it was cut from). Its applied
    offset, the manifest's, is written last, so a load cut short, or refused after the file went in, leaves data
    without an offset: a store to wipe."""
    check(manifest, chunks)
    if not chunks:
        raise CheckpointError("a checkpoint without chunks")
    path = _scratch(store)
    try:
        with open(path, "wb") as f:
            f.writelines(chunks)
        store.ingest_sst(path)
    except OSError as e:
        raise CheckpointError(f"its SST file could not be written beside the store: {e}") from e
    except Exception as e:  # RocksDB refused the file (corrupt, not an SST): rocksdict raises plain exceptions
        raise CheckpointError(f"RocksDB refused its SST file: {e}") from e
    finally:
        path.unlink(missing_ok=True)
    check_snapshot(manifest, store.get)
    check_log(store)
    store.commit({}, manifest.events_offset, indexed=False)


def check_log(store: ProjectionStore) -> None:
    """CheckpointError unless the snapshot loaded into ``store`` was cut from the log the store is bound to
    (a snapshot that records no log, cut before identities were kept, is taken as this log's)."""
    found, bound = store.log_identity(), store.bound
    if found is not None and bound is not None and found != bound:
        raise CheckpointError(f"it was cut from another log ({described(found)}; this log is {described(bound)})")


def _scratch(store: ProjectionStore) -> Path:
    """A new empty file beside ``store`` (the same file system, so that ingesting it moves it)."""
    store.path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{store.path.name}-", suffix=".sst", dir=store.path.parent)
    os.close(fd)
    return Path(name)
