"""Client-side building of commands: due times, payloads, the CLI's --payload and --run-at. No broker."""

from __future__ import annotations

import io
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.cli.common import parse_time, read_payload
from engine.commands import due_us, encode_payload
from engine.contract import messages as m
from engine.contract.ids import new_uuid4s
from engine.errors import ValidationError

NOW = 1_800_000_000_000_000


def test_due_times_from_run_at_or_delay() -> None:
    assert due_us(None, None, NOW) is None
    assert due_us(None, 2.5, NOW) == NOW + 2_500_000
    assert due_us(1_700_000_000.25, None, NOW) == 1_700_000_000_250_000  # the past: kept, it means now
    aware = datetime(2027, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    assert due_us(aware, None, NOW) == int(aware.timestamp()) * 1_000_000


@pytest.mark.parametrize(("run_at", "delay", "field"), [
    (-1.0, None, "run_at"),
    (None, -5, "delay"),
    (float("nan"), None, "run_at"),
    (datetime(2027, 1, 1), None, "run_at"),  # naive
    (datetime(1, 1, 1, tzinfo=UTC), None, "run_at"),
    (datetime(9999, 1, 1, tzinfo=UTC), None, "run_at"),
    ("tomorrow", None, "run_at"),
    (1.0, 1.0, "run_at"),  # both
])
def test_bad_due_times_name_their_field(run_at: object, delay: object, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        due_us(run_at, delay, NOW)  # type: ignore[arg-type]
    assert caught.value.field == field and str(caught.value).startswith(f"{field}: ")


def test_payloads_are_compact_json_bytes_or_refused() -> None:
    assert encode_payload({"a": [1, "é", None]}).data == b'{"a":[1,"\\u00e9",null]}'
    assert encode_payload(b"\x00raw") == m.Payload(b"\x00raw", "application/octet-stream")
    circular: list[object] = []
    circular.append(circular)
    for bad in ({"x": float("nan")}, {"x": object()}, circular):
        with pytest.raises(ValidationError, match="^payload: cannot be encoded as JSON"):
            encode_payload(bad)


def test_fresh_ids_are_version_4_uuids() -> None:
    import uuid

    ids = new_uuid4s(500)
    assert len(set(ids)) == 500
    assert all(str(uuid.UUID(i)) == i and uuid.UUID(i).version == 4 and uuid.UUID(i).variant == uuid.RFC_4122
               for i in ids)


def test_cli_payload_inline_file_and_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_payload('{"to": "a@b.c"}') == {"to": "a@b.c"}
    big = tmp_path / "big.json"
    big.write_text('{"blob": "' + "x" * 300_000 + '"}')  # over the 128 KiB an argument can carry
    assert len(read_payload(f"@{big}")["blob"]) == 300_000
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'[1, 2]')))
    assert read_payload("-") == [1, 2]


@pytest.mark.parametrize(("text", "words"), [
    ("{bad", "the text given is not JSON"),
    ("@/no/such/file.json", "cannot read @/no/such/file.json: No such file or directory"),
])
def test_cli_payload_errors_are_one_line_naming_payload(text: str, words: str) -> None:
    with pytest.raises(ValidationError, match=f"^payload: .*{words}"):
        read_payload(text)


def test_cli_times_need_iso_and_a_zone() -> None:
    assert parse_time("2026-12-01T09:00:00+01:00", "run_at") == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert parse_time(None, "run_at") is None
    for text in ("tomorrow", "2026-12-01T09:00:00"):
        with pytest.raises(ValidationError, match="^run_at: "):
            parse_time(text, "run_at")


def test_a_batchs_dependents_come_in_a_wave_after_their_dependencies_and_a_cycle_is_refused() -> None:
    from engine.commands import dependencies, dependency_waves

    def job(job_id: str, *after: str) -> m.Command:
        return m.Command(f"c-{job_id}", job_id, "acme", 0, m.SubmitJob("t", m.Payload(b"{}"),
                                                                       depends_on=dict.fromkeys(after, "cancel")))

    a, b, c, d = job("a"), job("b", "a"), job("c", "b", "outside"), job("d", "outside")
    assert [[x.job_id for x in wave] for wave in dependency_waves([c, b, a, d])] == [["a", "d"], ["b"], ["c"]]
    with pytest.raises(ValidationError, match="^depends_on: the jobs x, y wait for each other in a cycle"):
        dependency_waves([job("x", "y"), job("y", "x")])
    assert dependencies(["a", "b", "a"], "run") == {"a": "run", "b": "run"}
    with pytest.raises(ValidationError, match="^if_dependency_fails: must be cancel or run, got 'later'"):
        dependencies(["a"], "later")
    with pytest.raises(ValidationError, match="^depends_on: must be a list of job ids, got str"):
        dependencies("a")
