"""How a job's payload bytes become a handler's argument, and a handler's return value bytes.

Decoding is by content type; a payload that cannot be decoded or does not match the task
type's model raises ``engine.errors.ValidationError`` (dead-letter, never retry). A result
that cannot be encoded raises ``TypeError``: the attempt failed, the payload was fine. A
result over ``MAX_RESULT_BYTES`` raises ``ValidationError``: it could never be written in its
``JobSucceeded`` event (the broker's record limit), and the same handler would return it again.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from engine.contract.messages import Payload
from engine.contract.validation import MAX_RESULT_BYTES
from engine.errors import ValidationError

JSON = "application/json"
TEXT = "text/plain"
BYTES = "application/octet-stream"
CONTENT_TYPES = (JSON, TEXT, BYTES)
MAX_FIELD_ERRORS = 10


def load_payload(payload: Payload, model: type[BaseModel] | None, task_type: str = "?") -> Any:
    """The handler's payload argument: decoded by content type, then validated by ``model``."""
    value = decode_payload(payload, task_type)
    return value if model is None else validate_model(value, model, task_type)


def decode_payload(payload: Payload, task_type: str = "?") -> Any:
    """JSON → Python values, text → ``str``, octet-stream → ``bytes``; else ``ValidationError``."""
    kind = media_type(payload.content_type)
    if kind == JSON:
        return _decode_json(payload.data, task_type)
    if kind == TEXT:
        return _decode_text(payload.data, task_type)
    if kind == BYTES:
        return bytes(payload.data)
    raise ValidationError(
        f"task {task_type!r}: unsupported payload content type {payload.content_type!r} "
        f"(expected one of {', '.join(CONTENT_TYPES)})"
    )


def media_type(content_type: str) -> str:
    """The bare media type: ``"application/json; charset=utf-8"`` → ``"application/json"``."""
    return content_type.split(";", 1)[0].strip().lower()


def _decode_json(data: bytes, task_type: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValidationError(f"task {task_type!r}: payload is not valid JSON: {e}", "payload") from e
    except RecursionError:  # the same bytes are as deep on every attempt: never retried
        raise ValidationError(f"task {task_type!r}: payload: JSON nested too deeply to decode (more than about "
                              f"{sys.getrecursionlimit():,} levels of arrays or objects)", "payload") from None


def _decode_text(data: bytes, task_type: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValidationError(f"task {task_type!r}: text/plain payload is not valid UTF-8: {e}") from e


def validate_model(value: Any, model: type[BaseModel], task_type: str = "?") -> BaseModel:
    """``value`` as an instance of ``model``; a mismatch names every failing field."""
    try:
        return model.model_validate(value)
    except PydanticValidationError as e:
        raise ValidationError(
            f"task {task_type!r}: payload does not match {model.__name__}: {describe_errors(e)}"
        ) from e


def describe_errors(error: PydanticValidationError) -> str:
    """``"to: Field required; age: Input should be a valid integer"`` — fields first."""
    parts = [f"{_location(item['loc'])}: {item['msg']}" for item in error.errors()[:MAX_FIELD_ERRORS]]
    hidden = error.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {hidden} more" if hidden > 0 else "")


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(payload)"


def encode_result(value: Any) -> bytes | None:
    """Result bytes: ``None`` stays ``None``, a model its JSON, anything else sorted JSON in UTF-8 (non-ASCII kept).

    At most ``MAX_RESULT_BYTES``.
    """
    raw = _result_bytes(value)
    if raw is not None and len(raw) > MAX_RESULT_BYTES:
        raise ValidationError(f"result: the handler returned {len(raw):,} bytes; a result is at most "
                              f"{MAX_RESULT_BYTES:,} (it is written into the JobSucceeded event)", "result")
    return raw


def _result_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        return value.model_dump_json().encode()
    try:
        text = json.dumps(value, default=_json_default, sort_keys=True, separators=(",", ":"), allow_nan=False,
                          ensure_ascii=False)
    except RecursionError:  # as deep on every attempt: the result could never be written
        raise ValidationError("result: the handler returned a value nested too deeply to encode as JSON",
                              "result") from None
    except (TypeError, ValueError) as e:
        raise ValidationError(f"result: the handler returned a {type(value).__name__} that is not JSON-encodable "
                              f"({e}); return JSON-compatible data, a pydantic model or None", "result") from e
    try:
        return text.encode()  # UTF-8: "Zoë" stays "Zoë" for a reader in any language
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8: escaped, as JSON allows
        return json.dumps(value, default=_json_default, sort_keys=True, separators=(",", ":")).encode()


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
