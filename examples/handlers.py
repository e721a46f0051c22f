"""Example handlers: what a team writing Python handlers for epochq writes.

Run them with ``epochq engine run examples.handlers:app``.
"""

from __future__ import annotations

import random
import time

from pydantic import BaseModel, Field

from engine import App, RetryPolicy

app = App()


class Email(BaseModel):
    """An e-mail to send."""

    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    subject: str
    body: str = ""


@app.task("email.send", retry=RetryPolicy(max_attempts=3, base_delay=0.2), timeout=10)
def send_email(ctx, payload: Email) -> dict:  # type: ignore[no-untyped-def]
    """Pretend to send an e-mail; the payload is validated against ``Email`` first."""
    time.sleep(random.uniform(0.005, 0.03))
    ctx.logger.info("sent to %s", payload.to)
    return {"sent_to": payload.to, "attempt": ctx.attempt}


@app.task("otp.send", lane="HIGH", timeout=5)
def send_otp(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """A one-time password: pinned to the HIGH lane so it never waits behind bulk work."""
    return {"delivered": payload["phone"]}


@app.task("report.generate", retry=RetryPolicy(max_attempts=2), timeout=30)
def generate_report(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Slow work on the LOW lane (submitted with a low priority)."""
    time.sleep(0.3)
    return {"rows": payload.get("rows", 100)}


@app.task("payment.charge", retry=RetryPolicy(max_attempts=4, base_delay=0.3, max_delay=2.0))
def charge(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """A flaky downstream: the first two attempts fail, the third succeeds."""
    if ctx.attempt < 3:
        raise ConnectionError(f"payment gateway timeout (attempt {ctx.attempt})")
    return {"charged": payload["amount"], "idempotency_key": ctx.idempotency_key}


@app.task("webhook.deliver", retry=RetryPolicy(max_attempts=3, base_delay=0.2, max_delay=1.0))
def deliver_webhook(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """A receiver that is down for good: this job ends in the dead-letter queue."""
    raise RuntimeError(f"POST {payload['url']} -> 503 Service Unavailable")
