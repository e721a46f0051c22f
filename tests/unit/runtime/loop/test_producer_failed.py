"""What the apply step makes of a transaction whose producer died: a fence steps down, anything else sets the
partition up again (issue 32, item 6). From the librdkafka error to the lifecycle's next move, without a broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from engine.runtime import kafka
from engine.runtime.loop.apply import Next, Verdict, next_step, judge
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.write import Written, _abort


def verdict_on(error: KafkaError, state: State) -> tuple[Verdict, Next]:
    """The verdict and the next move of a transaction whose commit raised ``error`` in a partition in ``state``."""
    partition = Partition(0, "owner-a")
    partition.state = state
    typed = kafka.translate(KafkaException(error))
    written = Written(partition, Staged(), error=_abort(None, typed))  # type: ignore[arg-type]  # never aborts
    verdict, _ = judge(written)
    return verdict, next_step(written, verdict, state).next


INVALID = KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)


@pytest.mark.parametrize("state", [State.ACTIVE, State.CLAIMING])
def test_a_producer_failed_without_a_fence_sets_the_partition_up_again(state: State) -> None:
    assert verdict_on(INVALID, state) == (Verdict.PRODUCER_FAILED, Next.RECREATE)


def test_a_producer_failed_while_handing_back_is_dropped() -> None:
    assert verdict_on(INVALID, State.REVOKING) == (Verdict.PRODUCER_FAILED, Next.DROP)


@pytest.mark.parametrize("error", [
    KafkaError(KafkaError.PRODUCER_FENCED, "Broker: Producer fenced", fatal=True),
    KafkaError(KafkaError._FENCED, "Local: This instance has been fenced by a newer instance", fatal=True),
    KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True),
])
@pytest.mark.parametrize("state", [State.ACTIVE, State.CLAIMING, State.REVOKING])
def test_a_real_fence_still_steps_the_partition_down(error: KafkaError, state: State) -> None:
    assert verdict_on(error, state) == (Verdict.FENCED, Next.STEP_DOWN)
