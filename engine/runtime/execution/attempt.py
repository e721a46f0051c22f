"""One attempt of a handler, in order: validate the payload, before_execute, execute, after_execute.

Runs in a lane thread, on the engine's event loop (``async def``) or in a child process; it
returns an ``AttemptOutcome`` and never raises for what a handler does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from engine.app import is_class_handler
from engine.contract.messages import Payload
from engine.runtime.execution.context import JobContext
from engine.runtime.execution.payloads import encode_result, load_payload
from engine.runtime.execution.verdicts import AttemptOutcome, since

def run_attempt(handler: Any, model: type[BaseModel] | None, ctx: JobContext, payload: Payload) -> AttemptOutcome:
    """One attempt in order: validate the payload → before_execute → execute → after_execute.

    ``after_execute`` runs whenever ``before_execute`` did; it cannot change the outcome.
    """
    started = time.perf_counter_ns()
    try:
        value = _validated(handler, model, ctx.task_type, payload)
    except Exception as e:  # noqa: BLE001 - a handler's error is its outcome
        return AttemptOutcome.from_exception(e, since(started))
    if not is_class_handler(handler):
        return _call(lambda: handler(ctx, value), ctx, started)
    outcome = _call(lambda: _before_then_execute(handler, ctx, value), ctx, started)
    _after_execute(handler, ctx, value, outcome)
    return outcome


def _validated(handler: Any, model: type[BaseModel] | None, task_type: str, payload: Payload) -> Any:
    value = load_payload(payload, model, task_type)
    hook = getattr(handler, "validate", None) if is_class_handler(handler) else None
    return value if hook is None else hook(value)


def _before_then_execute(handler: Any, ctx: JobContext, value: Any) -> Any:
    hook = getattr(handler, "before_execute", None)
    if hook is not None:
        hook(ctx, value)
    return handler.execute(ctx, value)


def _call(fn: Callable[[], Any], ctx: JobContext, started_ns: int) -> AttemptOutcome:
    try:
        result = encode_result(fn())
    except Exception as e:  # noqa: BLE001 - a handler's error is its outcome
        return AttemptOutcome.from_exception(e, since(started_ns))
    return AttemptOutcome.succeeded(result, since(started_ns), ctx._records)


def _after_execute(handler: Any, ctx: JobContext, value: Any, outcome: AttemptOutcome) -> None:
    hook = getattr(handler, "after_execute", None)
    try:
        if hook is not None:
            hook(ctx, value, outcome)
    except Exception:
        ctx.logger.exception("after_execute raised; the outcome (%s) stands", outcome.kind)


async def run_attempt_async(handler: Any, model: type[BaseModel] | None, ctx: JobContext,
                            payload: Payload) -> AttemptOutcome:
    """:func:`run_attempt` for an ``async def`` handler (or ``execute``), on the engine's event loop."""
    started = time.perf_counter_ns()
    try:
        value = _validated(handler, model, ctx.task_type, payload)
    except Exception as e:  # noqa: BLE001 - a handler's error is its outcome
        return AttemptOutcome.from_exception(e, since(started))
    try:
        if is_class_handler(handler):
            hook = getattr(handler, "before_execute", None)
            if hook is not None:
                hook(ctx, value)
            returned = await handler.execute(ctx, value)
        else:
            returned = await handler(ctx, value)
        outcome = AttemptOutcome.succeeded(encode_result(returned), since(started), ctx._records)
    except Exception as e:  # noqa: BLE001 - a handler's error is its outcome
        outcome = AttemptOutcome.from_exception(e, since(started))
    if is_class_handler(handler):
        _after_execute(handler, ctx, value, outcome)
    return outcome


def run_in_process(handler: Any, model: type[BaseModel] | None, ctx: JobContext, payload: Payload) -> AttemptOutcome:
    """The child's side of a process-pool attempt: the same call order, a picklable outcome.

    The handler arrives pickled, so a handler instance is a fresh copy on every attempt.
    """
    return run_attempt(handler, model, ctx, payload)


def failed_attempt(error: BaseException) -> AttemptOutcome:
    return AttemptOutcome.from_exception(error, 0)
