"""The dispatch record's value is the JSON documented in docs/workers.md, byte for byte what ``json.dumps`` gives."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from engine.contract import messages as m
from engine.runtime.remote.dispatch import Dispatch, decode_dispatch, encode_dispatch


def reference(d: Dispatch) -> bytes:
    """The format as a dict dumped by ``json``: what docs/workers.md describes field by field."""
    p = d.payload
    fields: dict[str, Any] = {
        "format": 1, "job_id": d.job_id, "tenant": d.tenant, "task_type": d.task_type, "attempt": d.attempt,
        "epoch": d.epoch, "replays": d.replays, "partition": d.partition, "fencing_token": d.fencing_token,
        "lane": d.lane, "pool": d.pool, "lease_s": d.lease_s, "timeout_s": d.timeout_s,
        "dispatched_at_us": d.dispatched_at_us, "idempotency_key": d.idempotency_key, "traceparent": d.traceparent,
        "payload": {"data": base64.b64encode(p.data).decode(), "content_type": p.content_type,
                    "schema_name": p.schema_name, "schema_version": p.schema_version}}
    if d.dependencies is not None:
        fields["dependencies"] = {job: [status, None if result is None else base64.b64encode(result).decode(), error]
                                  for job, (status, result, error) in d.dependencies.items()}
    return json.dumps(fields, separators=(",", ":")).encode()


def dispatch(**changes: Any) -> Dispatch:
    fields: dict[str, Any] = dict(
        job_id="0b6f3c5e-8c1f-4f0e-9a43-0c6f1d2f0e11", tenant="acme", task_type="resize", attempt=2, epoch=7,
        replays=1, partition=3, fencing_token=(7 << 32) | (1 << 16) | 2, lane="NORMAL",
        payload=m.Payload(b'{"w": 640}', "application/json", "", 1), pool="gpu", lease_s=30.0, timeout_s=300.0,
        dispatched_at_us=1_765_000_000_123_456)
    fields.update(changes)
    return Dispatch(**fields)


@pytest.mark.parametrize("d", [
    dispatch(),
    dispatch(tenant='ténant "quoted" \\ \n\t\u2603 \U0001f600', task_type="a\x00b", lane="HIGH",
             idempotency_key="order-17 ✓", traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    dispatch(payload=m.Payload(bytes(range(256)), "application/octet-stream", "img.v2", 3), lease_s=0.25,
             timeout_s=float("inf"), attempt=0, replays=0),
    dispatch(lease_s=1e-7, timeout_s=12345678901.5, epoch=0, fencing_token=0),
    dispatch(dependencies={"dep-1": ("succeeded", b"\x00\xffok", ""), 'dép "2"': ("failed", None, "boom \u2603")}),
    dispatch(dependencies={}),
], ids=["plain", "escapes", "binary-and-infinite-timeout", "small-and-large-floats", "dependencies", "no-deps"])
def test_a_dispatch_is_encoded_as_json_dumps_writes_it_and_decodes_to_itself(d: Dispatch) -> None:
    raw = encode_dispatch(d)
    assert raw == reference(d)
    assert decode_dispatch(raw) == d
