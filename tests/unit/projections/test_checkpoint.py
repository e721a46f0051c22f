"""The checkpoint format: manifest codec, chunks, checksum, and the checks a snapshot must pass before it is loaded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from projections.batch import Batch
from projections.checkpoint import (
    CheckpointError, Manifest, chunked, decode_manifest, digest, encode_manifest, load_checked, unpacked,
)
from projections.evolve import WRITE_MODEL, fold
from projections.store import open_store
from tests.unit.factories import claim
from tests.unit.histories import life


def manifest_of(pairs: list[tuple[bytes, bytes]], chunks: list[bytes], epoch: int = 2, owner: str = "owner-a",
                offset: int = 9) -> Manifest:
    return Manifest(offset, epoch, owner, len(chunks), 100, digest(chunks), len(pairs), 1_000)


def test_a_manifest_round_trips() -> None:
    m = Manifest(41, 3, "engine-7", 2, 1_000, "ab" * 32, 10, 5)
    assert decode_manifest(encode_manifest(m)) == m


@pytest.mark.parametrize("raw", [b"", b"{", b'{"events_offset": 1}', b"[]",
                                 encode_manifest(Manifest(1, 1, "o", 1, 0, "x", 1, 0, format=9)),
                                 encode_manifest(Manifest(-5, 1, "o", 1, 0, "x", 1, 0))])
def test_a_bad_manifest_is_refused(raw: bytes) -> None:
    with pytest.raises(CheckpointError):
        decode_manifest(raw)


def test_pairs_round_trip_through_chunks_of_a_bounded_size() -> None:
    pairs = [(b"j:%06d" % i, b"v" * (i % 300)) for i in range(5_000)]
    chunks = list(chunked(pairs, 64 * 1024))
    assert len(chunks) > 5 and all(len(c) < 64 * 1024 + 400 for c in chunks)
    assert [p for c in chunks for p in unpacked(c)] == pairs
    assert list(chunked([])) == []


def test_a_cut_chunk_is_refused() -> None:
    chunk = next(chunked([(b"key", b"value")]))
    with pytest.raises(CheckpointError):
        list(unpacked(chunk[:-2]))


def snapshot(tmp_path: Path) -> list[tuple[bytes, bytes]]:
    store = open_store(tmp_path / "live")
    batch = Batch(store, profile=WRITE_MODEL)
    for offset, event in enumerate([claim(1), claim(2, "owner-b"), *life()]):
        fold(batch, event, offset)
    batch.commit()
    pairs = list(store.items())
    store.close()
    return pairs


def test_a_checked_snapshot_loads_into_an_empty_store_byte_for_byte(tmp_path: Path) -> None:
    pairs = snapshot(tmp_path)
    chunks = list(chunked(pairs, 64))
    manifest = manifest_of(pairs, chunks, epoch=2, owner="owner-b", offset=5)
    store = open_store(tmp_path / "new")
    load_checked(store, manifest, chunks)
    assert list(store.items()) == pairs and store.applied_offset() == 5
    store.close()


@pytest.mark.parametrize("change", [
    dict(epoch=1), dict(owner="owner-a"), dict(events_offset=4), dict(keys=3), dict(chunks=99), dict(sha256="0" * 64),
])
def test_a_snapshot_that_does_not_match_its_manifest_is_refused(tmp_path: Path, change: dict[str, object]) -> None:
    pairs = snapshot(tmp_path)
    chunks = list(chunked(pairs, 64))
    manifest = replace(manifest_of(pairs, chunks, epoch=2, owner="owner-b", offset=5), **change)  # type: ignore[arg-type]
    store = open_store(tmp_path / "new")
    with pytest.raises(CheckpointError):
        load_checked(store, manifest, chunks)
    assert store.applied_offset() < 0  # never an offset: the next open wipes what was written
    store.close()


def test_a_corrupted_chunk_fails_the_checksum(tmp_path: Path) -> None:
    pairs = snapshot(tmp_path)
    chunks = list(chunked(pairs, 64))
    manifest = manifest_of(pairs, chunks, epoch=2, owner="owner-b", offset=5)
    chunks[1] = chunks[1][:-1] + b"X"
    store = open_store(tmp_path / "new")
    with pytest.raises(CheckpointError, match="checksum"):
        load_checked(store, manifest, chunks)
    store.close()
