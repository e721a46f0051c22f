"""The owner's lease table: granted, renewed by token, lapsing once as lease_expired. No broker; the clock passed."""

from __future__ import annotations

from engine.contract.messages import Payload
from engine.domain.fence import fencing_token
from engine.domain.lanes import Lane
from engine.runtime.execution.verdicts import OutcomeKind, RunRequest
from engine.runtime.remote.leases import Leases


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(job_id: str = "j-1", attempt: int = 1, epoch: int = 2, partition: int = 0) -> RunRequest:
    return RunRequest(partition, epoch, job_id, "acme", "t", attempt, Lane.NORMAL, Payload(b"{}"), None, 0.0, 0)


def test_a_lease_lapses_once_unless_a_heartbeat_with_its_token_renews_it() -> None:
    clock = Clock()
    leases = Leases(clock)
    leases.grant(request(), "gpu", 3.0)
    clock.now += 2.0
    assert not leases.renew("j-1", fencing_token(1, 1))  # another epoch's token renews nothing
    assert leases.renew("j-1", fencing_token(2, 1))
    clock.now += 2.5
    assert leases.expire() == [] and leases.next_deadline() == 105.0 and leases.in_flight("gpu") == 1
    clock.now += 1.0
    (lapsed,) = leases.expire()
    assert lapsed.outcome.kind is OutcomeKind.FAILED and lapsed.outcome.error_type == "lease_expired"
    assert lapsed.outcome.retryable and lapsed.request.job_id == "j-1"
    assert leases.expire() == [] and leases.in_flight() == 0 and leases.expiries["gpu"] == 1


def test_a_released_lease_or_one_of_a_partition_given_up_never_lapses() -> None:
    clock = Clock()
    leases = Leases(clock)
    leases.grant(request("a"), "gpu", 1.0)
    leases.grant(request("b", partition=1), "gpu", 1.0)
    leases.release(["a"])
    leases.keep({0})
    clock.now += 5
    assert leases.expire() == [] and leases.in_flight() == 0 and leases.next_deadline() == float("inf")
