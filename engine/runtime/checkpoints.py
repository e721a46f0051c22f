"""Checkpoints of the owners' write models in ``<ns>.checkpoints``: written in the owner's transaction, loaded
by a new owner.

Writing (the owner of partition p, between two of its transactions): its store as committed
at applied offset O is written as one SST file and cut into chunks (``projections.checkpoint``),
produced to partition p of the checkpoints topic under keys ``chunk:<i>``, followed by a
manifest (key ``manifest``) naming O, the owner's epoch, the chunk count, the first chunk's
offset and a SHA-256; all in one transaction of the partition's own transactional producer,
so a fenced owner can never commit one. The topic is compacted: the newest chunk of each
index and the newest manifest stay.

Loading (a new owner whose store is empty): the newest committed manifest near the end of
partition p (read_committed), its chunks, their checksum, and the snapshot's own newest
claim (it must be the manifest's epoch, by its owner) are checked; the file is ingested into
the store, and the owner restores the events after O as usual. A missing,
corrupt or inconsistent checkpoint is one WARNING line, and the restore starts at offset 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from engine.config import Settings
from engine.errors import CorruptedError
from engine.runtime.kafka.ports import TopicReader, Transaction, topic_reader
from engine.runtime.topics import checkpoints_topic
from projections.checkpoint import (
    MANIFEST_KEY, CheckpointError, Manifest, chunk_key, decode_manifest, digest, encode_manifest, export, load_checked,
)
from projections.identity import matched
from projections.store import ProjectionStore, open_locked, store_path

log = logging.getLogger("epochq.checkpoints")

TAIL_RECORDS = 4
"""How far back from the end of a checkpoints partition the newest manifest is looked for first (then 4x, ...):
a checkpoint's transaction ends with its manifest, then the commit marker, so the first look mostly finds it
without reading a chunk (each up to 512 KB; 64 records back read a whole checkpoint once more)."""


def cut(store: ProjectionStore, epoch: int, owner: str, now_us: int) -> tuple[list[bytes], Manifest]:
    """The chunks of ``store`` as committed now (a RocksDB snapshot) and their manifest, but for where the
    first chunk will land (``first_chunk_offset`` is set when it is known)."""
    chunks, keys, applied = export(store)
    return chunks, Manifest(applied, epoch, owner, len(chunks), 0, digest(chunks), keys, now_us)


def produce(transaction: Transaction, topic: str, partition: int, chunks: list[bytes], manifest: Manifest) -> Manifest:
    """Write one checkpoint in one transaction of the partition's owner's producer; its manifest.

    Raises what the Kafka edge translates (FencedError for a zombie); the caller aborts."""
    first: list[int] = []
    transaction.begin()
    for i, chunk in enumerate(chunks):
        transaction.produce(topic, chunk, chunk_key(i), partition, first.append if i == 0 else None)
    transaction.flush()  # the first chunk's offset goes into the manifest
    if chunks and not first:
        raise CheckpointError("the first chunk's delivery was not reported")
    manifest = replace(manifest, first_chunk_offset=first[0] if first else 0)
    transaction.produce(topic, encode_manifest(manifest), MANIFEST_KEY, partition)
    transaction.commit()
    return manifest


def write_now(settings: Settings, store: ProjectionStore, transaction: Transaction, partition: int, epoch: int,
              owner: str) -> Manifest:
    """Cut and write a checkpoint at once (a graceful hand-back); the open transaction aborted on failure."""
    chunks, manifest = cut(store, epoch, owner, time.time_ns() // 1000)
    try:
        return produce(transaction, checkpoints_topic(settings), partition, chunks, manifest)
    except Exception:
        try:
            transaction.abort()
        except Exception as e:  # noqa: BLE001 - fenced or unreachable: nothing was committed either way
            log.debug("partition %d: checkpoint abort: %s", partition, e)
        raise


# --- loading ---------------------------------------------------------------------------------


def newest_manifest(reader: TopicReader, topic: str, partition: int) -> Manifest | None:
    """The newest committed manifest of ``topic[partition]``, looked for back from the end; None if none."""
    low, high = reader.watermarks(topic, partition)
    span = TAIL_RECORDS
    while True:
        start = max(low, high - span)
        raw = None
        for _offset, key, value in reader.scan(topic, partition, start, high):
            if key == MANIFEST_KEY:
                raw = value
        if raw is not None:
            return decode_manifest(raw)
        if start <= low:
            return None
        span *= 4


def read_chunks(reader: TopicReader, topic: str, partition: int, manifest: Manifest) -> list[bytes]:
    """The chunks a manifest names, in order; CheckpointError if one is missing or out of place."""
    first, n = manifest.first_chunk_offset, manifest.chunks
    chunks: list[bytes] = []
    for offset, key, value in reader.scan(topic, partition, first, first + n):
        i = offset - first
        if key != chunk_key(i) or i != len(chunks):
            raise CheckpointError(f"offset {offset} holds {key!r}, not chunk {len(chunks)}")
        chunks.append(value or b"")
    return chunks


def seed(settings: Settings, partition: int, holder: str, events_end: int, identity: str,
         reader_for: Callable[[], TopicReader] | None = None) -> int | None:
    """Load the newest checkpoint into partition ``partition``'s store if it is empty; the offset it stands at.

    The store is first checked against the log (``identity``, ``events_end``): one folded from another log is
    wiped (one WARNING line, ``projections.identity``), and so is empty here. None: the store was not empty (it
    restores from where it is), or no usable checkpoint (one WARNING line; it restores from offset 0).
    StoreLockedError passes through (the caller waits)."""
    path = store_path(settings.state_dir, settings.namespace, partition)
    store = matched(open_locked(path, holder), identity, events_end, f"partition {partition}")
    try:
        if store.applied_offset() >= 0:
            return None
        loaded = _load(settings, store, partition, events_end, reader_for)
        if loaded is None and next(iter(store.items()), None) is not None:
            store = store.reset()  # a load cut short left pairs without an offset: start empty
        return loaded
    finally:
        store.close()


def _load(settings: Settings, store: ProjectionStore, partition: int, events_end: int,
          reader_for: Callable[[], TopicReader] | None) -> int | None:
    topic, started = checkpoints_topic(settings), time.monotonic()
    reader = (reader_for or (lambda: topic_reader(settings, "checkpoints")))()
    try:
        manifest = newest_manifest(reader, topic, partition)
        if manifest is None:
            if events_end > 0:
                log.warning("partition %d: no checkpoint in %s; restoring from offset 0", partition, topic)
            return None
        if manifest.events_offset >= events_end:
            raise CheckpointError(f"it stands at events offset {manifest.events_offset}, past the end {events_end}")
        load_checked(store, manifest, read_chunks(reader, topic, partition, manifest))
    except CorruptedError as e:  # the checkpoint, or the store it filled, cannot be trusted: the log is enough
        _fall_back(partition, str(e))
        return None
    except Exception as e:  # noqa: BLE001 - a missing topic, a refused read: the log is enough
        _fall_back(partition, f"{type(e).__name__}: {e}")
        return None
    finally:
        reader.close()
    log.info("partition %d: loaded the checkpoint of epoch %d (%d keys, %d chunks) in %.2f s; restoring from "
             "offset %d", partition, manifest.epoch, manifest.keys, manifest.chunks, time.monotonic() - started,
             manifest.events_offset + 1)
    return manifest.events_offset


def _fall_back(partition: int, why: str) -> None:
    """The one WARNING line of a checkpoint that cannot be used."""
    log.warning("partition %d: checkpoint unusable (%s); restoring from offset 0", partition, why)
