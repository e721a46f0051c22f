"""A checkpoint of a partition's write model: its store cut into chunks, and the manifest that vouches for them.

A checkpoint is what a new owner loads instead of replaying the log from offset 0: every
key-value pair of the store as committed at applied offset O, packed into chunks of about
CHUNK_BYTES, and a manifest naming O, the epoch and owner that wrote it, how many chunks
there are, where the first one is in the checkpoints partition, and a SHA-256 over them.
``engine.runtime.checkpoints`` writes them to ``<ns>.checkpoints`` and reads them back;
this module is the format, pure but for :func:`load_checked` (which writes into an empty store).

Chunk format: a sequence of ``>II`` (key length, value length) headers each followed by
the key and the value. Manifest format: one JSON object (FORMAT 1).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from engine.errors import CheckpointError as CheckpointError  # its name here too
from projections.store import OFFSET_KEY, ProjectionStore
from projections.views import keys as k

FORMAT = 1
CHUNK_BYTES = 512 * 1024
MANIFEST_KEY = b"manifest"
_HEADER = struct.Struct(">II")


@dataclass(frozen=True, slots=True)
class Manifest:
    """What vouches for one checkpoint: where it stands in the events and how to find and check its chunks."""

    events_offset: int  # the store reflects the events up to and including this offset
    epoch: int  # the newest valid claim in the snapshot: the writer's own
    owner: str
    chunks: int
    first_chunk_offset: int  # in the checkpoints partition; chunk i is at first_chunk_offset + i
    sha256: str  # over the chunks' values, in order
    keys: int
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


def chunked(pairs: Iterable[tuple[bytes, bytes]], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The pairs packed into chunks of about ``size`` bytes (the last one smaller; none for no pairs)."""
    parts: list[bytes] = []
    filled = 0
    for key, value in pairs:
        parts += (_HEADER.pack(len(key), len(value)), key, value)
        filled += 8 + len(key) + len(value)
        if filled >= size:
            yield b"".join(parts)
            parts, filled = [], 0
    if parts:
        yield b"".join(parts)


def unpacked(chunk: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The pairs of one chunk; CheckpointError if it is cut short."""
    view, at, end = memoryview(chunk), 0, len(chunk)
    while at < end:
        if at + 8 > end:
            raise CheckpointError("a chunk ends inside a pair's header")
        klen, vlen = _HEADER.unpack_from(view, at)
        at += 8
        if at + klen + vlen > end:
            raise CheckpointError("a chunk ends inside a pair")
        yield bytes(view[at:at + klen]), bytes(view[at + klen:at + klen + vlen])
        at += klen + vlen


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


def check_snapshot(manifest: Manifest, pairs: dict[bytes, bytes]) -> None:
    """CheckpointError unless the snapshot stands where the manifest says, under the manifest's own claim:
    its applied offset is the manifest's, its newest valid claim is the manifest's epoch, by its owner."""
    applied = pairs.get(OFFSET_KEY)
    if applied is None or int(applied) != manifest.events_offset:
        raise CheckpointError(f"the snapshot's applied offset {applied!r} is not the manifest's "
                              f"{manifest.events_offset}")
    epoch = pairs.get(k.EPOCH)
    if epoch is None or int(epoch) != manifest.epoch:
        raise CheckpointError(f"the snapshot's newest claim is epoch {epoch!r}, the manifest's {manifest.epoch}")
    claim = pairs.get(k.CLAIMS + k.num(manifest.epoch), b"")
    if claim.split(b"\x00", 1)[0].decode(errors="replace") != manifest.owner:
        raise CheckpointError(f"the snapshot's claim of epoch {manifest.epoch} is not {manifest.owner}'s")


def load_checked(store: ProjectionStore, manifest: Manifest, chunks: list[bytes], batch_keys: int = 50_000) -> None:
    """Write a checkpoint's pairs into an empty store, checking them on the way (CheckpointError if they do not
    hold up: count, checksum, the snapshot's offset and claim). Its applied offset goes last, so a load cut
    short, or refused after some pairs were written, leaves data without an offset: a store to wipe."""
    check(manifest, chunks)
    needed = {OFFSET_KEY, k.EPOCH, k.CLAIMS + k.num(manifest.epoch)}
    found: dict[bytes, bytes] = {}
    pending: list[tuple[bytes, bytes]] = []
    count = 0
    for chunk in chunks:
        for key, value in unpacked(chunk):
            count += 1
            if key in needed:
                found[key] = value
                if key == OFFSET_KEY:
                    continue
            pending.append((key, value))
        if len(pending) >= batch_keys:
            store.write_raw(pending)
            pending = []
    if count != manifest.keys:
        raise CheckpointError(f"{count} keys in the chunks, the manifest names {manifest.keys}")
    check_snapshot(manifest, found)
    store.write_raw(pending)
    store.commit({}, manifest.events_offset, indexed=False)
