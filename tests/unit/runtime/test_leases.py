"""The owner's lease table: granted, renewed by token, lapsing once as lease_expired. No broker; the clock passed."""

from __future__ import annotations

from engine.contract.messages import Payload
from engine.domain.fence import fencing_token
from engine.domain.lanes import Lane
from engine.runtime.execution.verdicts import AttemptOutcomeKind, RunRequest
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
    assert lapsed.outcome.kind is AttemptOutcomeKind.FAILED and lapsed.outcome.error_type == "lease_expired"
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


def test_the_counts_per_pool_follow_grants_renewals_releases_expiries_and_partitions_given_up() -> None:
    clock = Clock()
    leases = Leases(clock)
    leases.grant(request("a"), "gpu", 1.0)
    leases.grant(request("b", partition=1), "gpu", 1.0)
    leases.grant(request("c", partition=1), "cpu", 9.0)
    leases.grant(request("a", attempt=2), "gpu", 1.0)  # granted again (a retry): counted once
    assert (leases.in_flight("gpu"), leases.in_flight("cpu"), leases.in_flight()) == (2, 1, 3)
    leases.keep({0, 1})  # nothing given up: nothing dropped
    assert leases.in_flight() == 3
    clock.now += 2
    assert len(leases.expire()) == 2 and (leases.in_flight("gpu"), leases.in_flight("cpu")) == (0, 1)
    leases.release(["c", "c", "nobody"])
    assert leases.in_flight("cpu") == 0 and leases.in_flight() == 0
    leases.grant(request("d", partition=2), "cpu", 9.0)
    leases.keep({0})
    assert leases.in_flight("cpu") == 0 and leases.lease("d") is None
