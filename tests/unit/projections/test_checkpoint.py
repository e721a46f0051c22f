"""The checkpoint format: manifest codec, an SST file in chunks, checksum, and the checks a snapshot must pass
before it is loaded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from projections.batch import Batch
from projections.checkpoint import (
    CheckpointError, Manifest, decode_manifest, digest, encode_manifest, export, load_checked, sliced,
)
from projections.evolve import WRITE_MODEL, fold
from projections.store import OFFSET_KEY, ProjectionStore, open_store
from tests.unit.factories import claim
from tests.unit.histories import life


def manifest_of(keys: int, chunks: list[bytes], epoch: int = 2, owner: str = "owner-a", offset: int = 9) -> Manifest:
    return Manifest(offset, epoch, owner, len(chunks), 100, digest(chunks), keys, 1_000)


def test_a_manifest_round_trips() -> None:
    m = Manifest(41, 3, "engine-7", 2, 1_000, "ab" * 32, 10, 5)
    assert decode_manifest(encode_manifest(m)) == m


@pytest.mark.parametrize("raw", [b"", b"{", b'{"events_offset": 1}', b"[]",
                                 encode_manifest(Manifest(1, 1, "o", 1, 0, "x", 1, 0, format=9)),
                                 encode_manifest(Manifest(1, 1, "o", 1, 0, "x", 1, 0, format=1)),
                                 encode_manifest(Manifest(-5, 1, "o", 1, 0, "x", 1, 0))])
def test_a_bad_manifest_is_refused(raw: bytes) -> None:
    with pytest.raises(CheckpointError):
        decode_manifest(raw)


def test_bytes_are_cut_into_chunks_of_a_bounded_size() -> None:
    data = bytes(range(256)) * 1000
    chunks = sliced(data, 64 * 1024)
    assert len(chunks) == 4 and all(len(c) <= 64 * 1024 for c in chunks) and b"".join(chunks) == data
    assert sliced(b"") == []


def live_store(tmp_path: Path) -> ProjectionStore:
    store = open_store(tmp_path / "live")
    batch = Batch(store, profile=WRITE_MODEL)
    for offset, event in enumerate([claim(1), claim(2, "owner-b"), *life()]):
        fold(batch, event, offset)
    batch.commit()
    return store


def exported(tmp_path: Path, size: int = 256) -> tuple[list[tuple[bytes, bytes]], list[bytes], Manifest]:
    """The live store's pairs, its checkpoint's chunks (cut small) and their manifest."""
    store = live_store(tmp_path)
    pairs = list(store.items())
    chunks, keys, offset = export(store)
    store.close()
    chunks = sliced(b"".join(chunks), size)
    assert keys == len(pairs) - 1 and offset == 5  # every pair but the offset, which the manifest carries
    return pairs, chunks, manifest_of(keys, chunks, epoch=2, owner="owner-b", offset=offset)


def test_a_checked_snapshot_loads_into_an_empty_store_byte_for_byte(tmp_path: Path) -> None:
    pairs, chunks, manifest = exported(tmp_path)
    assert len(chunks) > 2
    store = open_store(tmp_path / "new")
    load_checked(store, manifest, chunks)
    assert list(store.items()) == pairs and store.applied_offset() == 5
    assert not list(tmp_path.glob("*.sst"))  # the file moved into the store: nothing is left beside it
    store.close()


def test_loading_ingests_the_file_instead_of_writing_the_pairs_one_by_one(tmp_path: Path) -> None:
    _, chunks, manifest = exported(tmp_path)
    store = open_store(tmp_path / "new")
    writes = []
    store.commit = lambda changes, offset, indexed=True: writes.append((changes, offset))  # type: ignore[method-assign]
    load_checked(store, manifest, chunks)
    assert writes == [({}, 5)]  # the offset alone is written: the pairs came in as a table
    store.close()


def test_a_store_with_only_its_offset_exports_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "empty")
    store.commit({}, 3, indexed=False)
    assert export(store) == ([], 0, 3)
    store.close()


@pytest.mark.parametrize("change", [
    dict(epoch=1), dict(owner="owner-a"), dict(chunks=99), dict(sha256="0" * 64),
])
def test_a_snapshot_that_does_not_match_its_manifest_is_refused(tmp_path: Path, change: dict[str, object]) -> None:
    _, chunks, manifest = exported(tmp_path)
    manifest = replace(manifest, **change)  # type: ignore[arg-type]
    store = open_store(tmp_path / "new")
    with pytest.raises(CheckpointError):
        load_checked(store, manifest, chunks)
    assert store.applied_offset() < 0  # never an offset: the next open wipes what was written
    store.close()


def test_a_corrupted_chunk_fails_the_checksum(tmp_path: Path) -> None:
    _, chunks, manifest = exported(tmp_path)
    chunks[1] = chunks[1][:-1] + b"X"
    store = open_store(tmp_path / "new")
    with pytest.raises(CheckpointError, match="checksum"):
        load_checked(store, manifest, chunks)
    store.close()


@pytest.mark.parametrize("cut", ["garbage", "short", "none"])
def test_chunks_that_are_not_a_whole_sst_file_are_refused_with_no_offset(tmp_path: Path, cut: str) -> None:
    _, chunks, _ = exported(tmp_path)
    chunks = {"garbage": [b"not an sst file" * 100], "short": chunks[:-1], "none": []}[cut]
    store = open_store(tmp_path / "new")
    with pytest.raises(CheckpointError):
        load_checked(store, manifest_of(3, chunks, epoch=2, owner="owner-b", offset=5), chunks)
    assert store.get(OFFSET_KEY) is None and not list(tmp_path.glob("*.sst"))
    store.close()
