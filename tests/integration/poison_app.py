"""The integration handlers, in an engine whose steps raise for marked payloads: poison, injected.

Imported by the engine process (``epochq engine run tests.integration.poison_app:app``); a
job whose payload has ``{"poison": STEP}`` makes that step raise, as a bug or a record the
engine cannot handle would.
"""

from __future__ import annotations

import json

from engine.domain.decide import AttemptFinished, CommandInput, StartAttempt, TimerFired
from engine.runtime.loop import draft as draft_module
from tests.integration.apps import app

__all__ = ["app"]

STEPS = {CommandInput: "decide", StartAttempt: "start", AttemptFinished: "result", TimerFired: "timer"}
_real_decide = draft_module.decide


def _poison_of(job, given) -> str | None:  # type: ignore[no-untyped-def]
    if job is not None:
        data = job.payload.data
    elif isinstance(given, CommandInput) and hasattr(given.command.body, "payload"):
        data = given.command.body.payload.data
    else:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value.get("poison") if isinstance(value, dict) else None


def _decide(job, given, ctx):  # type: ignore[no-untyped-def]
    step = STEPS.get(type(given))
    if step is not None and _poison_of(job, given) == step:
        raise RuntimeError(f"injected poison in the {step} step")
    return _real_decide(job, given, ctx)


draft_module.decide = _decide
