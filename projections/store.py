"""One partition's RocksDB store: the folded state and the offset it reflects, written together."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rocksdict import (AccessType, BlockBasedIndexType, BlockBasedOptions, Cache, IngestExternalFileOptions, Options,
                      Rdict, ReadOptions, SstFileWriter, WriteBatch, WriteBufferManager)

from engine.errors import ProjectionCorruptedError
from projections.lock import StoreLock

if TYPE_CHECKING:
    from engine.domain.jobs import JobView

OFFSET_KEY = b"m:offset"
LOG_KEY = b"m:log"
"""The identity of the log the store was folded from (``<cluster id>/<topic id>``), written with the first commit
after the store was bound to it (:meth:`ProjectionStore.bind`): a store of another log is wiped, never folded on
(``projections.identity``). A checkpoint carries its store's."""
TENANT_INDEXED = b"m:tindex"
"""Present when the store has held the tenant index (``t:`` keys) since its first commit: a store
made before the index existed lacks it, and readers then scan the log instead."""
ASIDE_COUNTED = b"m:acount"
"""Present when the store has counted the records its fold did not apply (``projections.views.aside``) since its
first commit: in a store made before, the counts miss what it folded earlier."""
LISTING_INDEXED = b"m:lindex"
"""Present when the store has held the catalog's indexes and counters (``L*``, ``C*`` keys) since its
first commit; ``engine.questions.jobs`` reads a store without it record by record (slowly)."""
HOT_PREFIXES = frozenset({b"m:", b"n:", b"b:", b"v:", b"f:", b"s:", b"k:", b"Cs", b"Ct", b"Cy", b"Cz"})
"""Small keys read on every fold (the newest claim, queue depths, fair-share clocks, breakers): a
writable store keeps the values it read in memory, kept right by its own commits (the fold is
its only writer); HOT_LIMIT bounds them (past it the cache starts afresh)."""
HOT_LIMIT = 50_000
CACHE_BYTES = 64 << 20
WRITE_BUFFER_BYTES = 32 << 20
_CACHE = Cache(CACHE_BYTES)
_WRITE_BUFFERS = WriteBufferManager.new_write_buffer_manager_with_cache(WRITE_BUFFER_BYTES, False, _CACHE)
"""Every store of a process shares one block cache and one memtable budget (charged to the cache),
so RocksDB's memory is bounded by these two figures whatever the number of partitions or jobs
(RocksDB's default, 2 x 64 MB of memtables per store, grows with the jobs written up to that)."""
MEMORY_PROPERTIES = {"memtables": "rocksdb.cur-size-all-mem-tables",
                     "table_readers": "rocksdb.estimate-table-readers-mem"}
"""The RocksDB properties that say how much memory a store holds outside the block cache's own blocks."""


def rocksdb_memory(stores: Iterable[ProjectionStore]) -> dict[str, int]:
    """RocksDB's memory in this process, by kind, in bytes: the shared block cache (which the
    memtables are charged to, so it is the bounded total), the memtables, and the table readers
    (index and filter blocks not held in the cache)."""
    total = {"block_cache": _CACHE.get_usage(), **dict.fromkeys(MEMORY_PROPERTIES, 0)}
    for store in stores:
        for kind, size in store.memory().items():
            total[kind] += size
    return total


def store_path(state_dir: Path, namespace: str, partition: int) -> Path:
    """Where partition ``partition`` of ``namespace`` keeps its projection."""
    return Path(state_dir) / namespace / f"p{partition:04d}"


def owner_partitions(state_dir: Path, namespace: str) -> set[int]:
    """The partitions with an owner's store (a write model) in ``state_dir``; the view's are elsewhere."""
    root = Path(state_dir) / namespace
    if not root.is_dir():
        return set()
    return {int(d.name[1:]) for d in root.iterdir() if d.is_dir() and d.name[:1] == "p" and d.name[1:].isdigit()}


VIEW_DIR = "view"
"""The folder of a state directory's namespace that holds the view's stores (beside the owner's ``pNNNN``)."""


def view_root(state_dir: Path, namespace: str) -> Path:
    """Where the view of ``namespace`` keeps its stores, one per events partition."""
    return Path(state_dir) / namespace / VIEW_DIR


def view_store_path(state_dir: Path, namespace: str, partition: int) -> Path:
    """Where the view keeps partition ``partition`` of ``namespace``: the store every question reads."""
    return view_root(state_dir, namespace) / f"p{partition:04d}"


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_manager(_WRITE_BUFFERS)
    opts.set_write_buffer_size(8 << 20)
    table = BlockBasedOptions()
    table.set_block_cache(_CACHE)
    # Index and Bloom filter partitions live in the block cache, so their memory is bounded by
    # it instead of growing with the jobs on disk; only the small top level of each is pinned.
    # (Whole, unpartitioned index blocks in the cache made every lookup of a new job id reload
    # one, and acceptance fell eightfold; 4 KB partitions are cheap to load.)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_bloom_filter(10, False)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    opts.set_block_based_table_factory(table)
    return opts


class ProjectionStore:
    """The RocksDB store of one partition; every commit carries the applied log offset.

    A store opened with a :class:`~projections.lock.StoreLock` lets go of it when closed or
    wiped (after its files are gone), never earlier.
    """

    def __init__(self, path: Path, read_only: bool = False, lock: StoreLock | None = None,
                 secondary: Path | None = None):
        self.path = Path(path)
        self.read_only = read_only = read_only or secondary is not None
        self.lock = lock
        if read_only and not self.path.exists():
            raise ProjectionCorruptedError(f"no projection at {self.path}: run `epochq projections rebuild`")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        access = AccessType.read_only() if read_only else AccessType.read_write()
        if secondary is not None:  # a reader kept open: catch_up() sees what the writer committed since
            access = AccessType.secondary(str(secondary))
        self._db = Rdict(str(self.path), _options(), access_type=access)
        self.job_cache: dict[str, JobView] = {}  # job id -> decoded JobView, as committed; the fold is the only writer
        self._hot: dict[bytes, bytes | None] | None = None if read_only else {}  # see HOT_PREFIXES
        self._fresh = not read_only and self.applied_offset() < 0  # its first commit marks the tenant index
        self.bound: str | None = None  # the identity of the log it folds, once bound (see LOG_KEY)
        self._stamp: bytes | None = None  # LOG_KEY's value, for the next commit to write

    def applied_offset(self) -> int:
        """The offset of the last event folded into this store, or -1 if none."""
        raw = self._db.get(OFFSET_KEY)
        return -1 if raw is None else int(raw)

    def log_identity(self) -> str | None:
        """The identity of the log this store was folded from, or None if it never learned it (see LOG_KEY)."""
        raw = self._read(LOG_KEY)
        return None if raw is None else raw.decode(errors="replace")

    def bind(self, identity: str) -> None:
        """This store folds the log ``identity`` (``projections.identity.matched`` found it its own): a store that
        does not record it yet (empty, or made before identities were kept) records it with its next commit."""
        self.bound = identity
        self._stamp = None if self.log_identity() == identity else identity.encode()

    def catch_up(self) -> None:
        """A store opened as a secondary: read what its writer has committed since (a few ms)."""
        try:
            self._db.try_catch_up_with_primary()
        except Exception as e:  # rocksdict raises plain exceptions
            raise _translate(self.path, e) from e

    def check(self) -> None:
        """Raise ProjectionCorruptedError if the store holds data but no applied offset."""
        if self.applied_offset() < 0 and next(iter(self._db.keys()), None) is not None:
            raise ProjectionCorruptedError(f"{self.path} holds data but no applied offset")

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key``, or None."""
        hot = self._hot
        if hot is None or key[:2] not in HOT_PREFIXES:
            return self._read(key)
        try:
            return hot[key]
        except KeyError:
            value = hot[key] = self._read(key)
            if len(hot) > HOT_LIMIT:
                hot.clear()
            return value

    def _read(self, key: bytes) -> bytes | None:
        try:
            return self._db.get(key)
        except Exception as e:  # rocksdict raises plain exceptions; a corrupt block is one of them
            raise _translate(self.path, e) from e

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Key-value pairs whose key starts with ``prefix``, in key order, from ``start``."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_successor(prefix))
        yield from self._db.items(from_key=start or prefix, read_opt=opts)

    def keys(self, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]:
        """The keys that start with ``prefix``, in order, from ``start`` (no value is read)."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(_successor(prefix))
        yield from self._db.keys(from_key=start or prefix, read_opt=opts)

    def keys_backwards(self, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]:
        """The keys that start with ``prefix``, last first, from ``start`` (itself or the nearest key before it)."""
        for key in self._db.keys(backwards=True, from_key=start or _successor(prefix)):
            assert isinstance(key, bytes)  # raw mode: keys are bytes
            if not key.startswith(prefix):
                if key < prefix:
                    return
                continue  # the successor itself, where the seek lands
            yield key

    def key_range(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        """The keys in ``[start, stop)``, in order (no value is read)."""
        opts = ReadOptions()
        opts.set_iterate_upper_bound(stop)
        yield from self._db.keys(from_key=start, read_opt=opts)

    def commit(self, changes: dict[bytes, bytes | None], offset: int, indexed: bool = True) -> None:
        """Write ``changes`` (None deletes) and the applied ``offset`` in one WriteBatch.

        ``indexed``: the store holds the tenant index and the catalog (a full fold; a write model does not)."""
        batch = WriteBatch(raw_mode=True)
        for key, value in changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        batch.put(OFFSET_KEY, str(offset).encode())
        if self._fresh and indexed:
            batch.put(TENANT_INDEXED, b"1")
            batch.put(LISTING_INDEXED, b"1")
            batch.put(ASIDE_COUNTED, b"1")
        if self._stamp is not None:
            batch.put(LOG_KEY, self._stamp)
        self._fresh = False
        try:
            self._db.write(batch)
        except Exception as e:  # typed here, where RocksDB's errors enter
            raise _translate(self.path, e) from e
        self._stamp = None
        hot = self._hot
        if hot is not None:
            for key, value in changes.items():
                if key in hot:
                    hot[key] = value

    def export_sst(self, path: Path, skip: frozenset[bytes] = frozenset()) -> tuple[int, bytes | None]:
        """Write every pair as committed now (a RocksDB snapshot) but ``skip``'s into one SST file at ``path``;
        how many pairs it holds and the applied offset's raw value. No file is written for no pairs."""
        writer, count, offset = SstFileWriter(_options()), 0, None
        writer.open(str(path))
        for key, value in self._db.snapshot().items():
            if key == OFFSET_KEY:
                offset = value
            if key not in skip:
                writer[key] = value
                count += 1
        if count:
            writer.finish()
        return count, offset

    def ingest_sst(self, path: Path) -> None:
        """Move the pairs of an SST file (:meth:`export_sst`) into this store as they are: a bulk load whose
        cost does not grow with its number of keys (the file is linked in, not written key by key)."""
        opts = IngestExternalFileOptions()
        opts.set_move_files(True)
        try:
            self._db.ingest_external_file([str(path)], opts)
        except Exception as e:  # typed here, where RocksDB's errors enter
            raise _translate(self.path, e) from e
        self._fresh = False
        self.job_cache.clear()
        if self._hot is not None:
            self._hot.clear()

    def key_count(self) -> int:
        """RocksDB's estimate of the number of keys in the store."""
        try:
            return self._db.property_int_value("rocksdb.estimate-num-keys") or 0
        except Exception:  # noqa: BLE001 - a closed store holds nothing
            return 0

    def memory(self) -> dict[str, int]:
        """Bytes this store's memtables and open table readers hold (0 once closed)."""
        try:
            return {kind: self._db.property_int_value(name) or 0 for kind, name in MEMORY_PROPERTIES.items()}
        except Exception:  # noqa: BLE001 - a closed store holds nothing
            return dict.fromkeys(MEMORY_PROPERTIES, 0)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key-value pair, in key order (for verify)."""
        yield from self._db.items()

    def close(self) -> None:
        """Release the RocksDB handle, then the store's lock."""
        try:
            self._db.close()
        finally:
            self._release()

    def wipe(self) -> None:
        """Close and delete the store, so it can be rebuilt from offset 0; then release its lock."""
        try:
            self._db.close()
            shutil.rmtree(self.path, ignore_errors=True)
        finally:
            self._release()

    def reset(self) -> ProjectionStore:
        """Delete this store and open it again empty, at the same path, its lock held throughout (and bound to the
        same log)."""
        lock, self.lock = self.lock, None
        try:
            self._db.close()
            shutil.rmtree(self.path, ignore_errors=True)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        fresh = _opened(self.path, lock)
        if self.bound is not None:
            fresh.bind(self.bound)
        return fresh

    def _release(self) -> None:
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()


def _translate(path: Path, error: Exception) -> Exception:
    """ProjectionCorruptedError for RocksDB's corruption errors; the error itself otherwise."""
    if "corrupt" in str(error).lower():
        return ProjectionCorruptedError(f"{path}: {error}")
    return error


def _successor(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1]) if prefix and prefix[-1] < 255 else prefix + b"\xff"


def open_store(path: Path, lock: StoreLock | None = None) -> ProjectionStore:
    """Open a store for writing (under ``lock``); a corrupted one (data, no offset) is wiped and reopened empty."""
    store = _opened(path, lock)
    try:
        store.check()
    except ProjectionCorruptedError:
        store = store.reset()
    return store


def open_locked(path: Path, holder: str) -> ProjectionStore:
    """Take the store's lock as ``holder`` (or raise StoreLockedError), then open it for writing."""
    return open_store(path, StoreLock.acquire(path, holder))


def _opened(path: Path, lock: StoreLock | None) -> ProjectionStore:
    """The store at ``path`` opened for writing; ``lock`` released if it cannot be opened."""
    try:
        return ProjectionStore(path, lock=lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
