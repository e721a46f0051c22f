"""The write step: one Kafka transaction per partition with staged work.

A transaction carries the partition's events for the tick (already encoded), the commands
its decisions send (a scoped job's children, reports), and the offset of the last command
it consumed. Producing is CPU work done here in turn; ``send_offsets`` and ``commit`` wait
on the brokers, so the partitions' transactions wait for them side by side.

The delivery reports of a transaction's first and last event give their offsets: the apply
step checks from them that nothing else landed between our events before it folds them.

Writes do not hold the loop up: a partition's transaction is produced in the loop and
committed on a commit thread, and the loop goes on deciding for the other partitions; the
partition itself decides nothing more until its transaction has ended (``Written.done``)
and the apply step has taken it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.contract.codec import encode_command
from engine.contract.partitioner import partition_for
from engine.errors import AccessDeniedError, CorruptedError, FatalError, PartitionLostError, TransactionAbortedError
from engine.runtime.kafka.ports import Transaction
from engine.runtime.loop import effects_kafka
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Partition
from engine.runtime.loop.written import Written as Written  # its name here too (the writer makes them)
from engine.runtime.signatures import CommandSigner


Explain = Callable[[AccessDeniedError, list[str], int], AccessDeniedError]
"""(the refusal, the topics the transaction wrote, its partition) -> the refusal naming what is missing."""


class Writer:
    """Writes staged work, one transaction per partition, committing them in parallel."""

    def __init__(self, events_topic: str, commands_topic: str, partitions: int, threads: int = 8,
                 signer: CommandSigner | None = None, explain: Explain | None = None):
        self.events_topic, self.commands_topic, self.partitions = events_topic, commands_topic, partitions
        self.signer = signer  # signs the commands engines send themselves (docs/security.md)
        self.explain = explain  # names what a refused transaction misses (``kafka.explain_refusal``)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="epochq-commit")

    def launch(self, partition: Partition, staged: Staged, group: Any, wake: Callable[[], None]) -> Written:
        """Produce ``staged`` as the partition's transaction and commit it on a commit thread; ``wake()`` when done."""
        written = self._produce(partition, staged)
        if written.error is None:
            written.future = self._pool.submit(self._commit, written, group)
            written.future.add_done_callback(lambda _: wake())
        return written

    def launch_call(self, partition: Partition, wake: Callable[[], None], call: Callable[..., Any],
                    *args: Any) -> Written:
        """Run ``call(*args)`` (a whole transaction of the partition's producer, e.g. a checkpoint) on a commit
        thread as the partition's next transaction, with nothing staged; ``wake()`` when done."""
        written = Written(partition, Staged())
        written.future = self._pool.submit(self._call, written, call, args)
        written.future.add_done_callback(lambda _: wake())
        return written

    def _call(self, written: Written, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            call(*args)
        except Exception as e:  # noqa: BLE001 - typed at the edge; anything else aborts and resyncs too
            written.error = _abort(written.partition.producer, e)  # type: ignore[arg-type]

    def write(self, work: list[tuple[Partition, Staged]], group: Any) -> list[Written]:
        """Write each partition's transaction and wait for all of them (shutdown, tests)."""
        written = [self.launch(partition, staged, group, lambda: None) for partition, staged in work]
        for w in written:
            finish(w)
        return written

    def _produce(self, partition: Partition, staged: Staged) -> Written:
        written = Written(partition, staged)
        producer: Transaction = partition.producer  # type: ignore[assignment]
        try:
            producer.begin()
            self._produce_events(written, producer)
            for command in staged.commands:
                target = partition_for(command.job_id, self.partitions)
                value = encode_command(command)
                producer.produce(self.commands_topic, value, command.job_id.encode(), target,
                                 headers=self.signer.headers(value) if self.signer is not None else None)
            if staged.outputs:
                effects_kafka.produce(written, producer)
        except Exception as e:  # noqa: BLE001 - typed at the edge; anything else aborts and resyncs too
            written.error = _abort(producer, self._refused(e, written))
        return written

    def _produce_events(self, written: Written, producer: Transaction) -> None:
        """Every event of the transaction, in order; only the first and the last ask for a delivery report
        (:meth:`Transaction.produce_run`). A traced job's events carry their ``traceparent`` header
        (``Staged.traced``); the others carry no header."""
        staged = written.staged
        keys = [event.job_id.encode() if event.job_id else None for event in staged.events]
        producer.produce_run(self.events_topic, written.partition.number, staged.raws, keys, staged.traced,
                             written.delivered)

    def _commit(self, written: Written, group: Any) -> None:
        producer: Transaction = written.partition.producer  # type: ignore[assignment]
        staged = written.staged
        try:
            if staged.next_command_offset is not None:
                producer.send_offsets(self.commands_topic, written.partition.number, staged.next_command_offset, group)
            producer.commit()
        except Exception as e:  # noqa: BLE001 - typed at the edge; anything else aborts and resyncs too
            written.error = _abort(producer, self._refused(e, written))

    def _refused(self, error: Exception, written: Written) -> Exception:
        """An authorization refusal, explained (which operation on which topic); any other error as it is."""
        if not isinstance(error, AccessDeniedError) or self.explain is None:
            return error
        topics = [self.events_topic] + ([self.commands_topic] if written.staged.commands else [])
        return self.explain(error, topics, written.partition.number)

    def close(self) -> None:
        """Stop the commit threads."""
        self._pool.shutdown(wait=False)


def finish(written: Written) -> Written:
    """Wait for the transaction to end and collect its delivery reports (in the loop's thread)."""
    if written.future is not None:
        written.future.result()
    if written.error is None and written.staged.events and (written.first is None or written.last is None):
        written.partition.producer.serve()  # type: ignore[union-attr]  # serve what the commit's flush queued
    return written


def _abort(producer: Transaction, error: Exception) -> Exception:
    """Abort the open transaction after ``error``; the error that decides what happens next (a fenced or failed
    producer aborts nothing: it can do nothing more)."""
    if isinstance(error, (PartitionLostError, CorruptedError)):
        return error
    try:
        producer.abort()
    except (PartitionLostError, CorruptedError, TransactionAbortedError) as abort_error:
        return abort_error
    except Exception as abort_error:  # noqa: BLE001 - an unreachable cluster: resync will find out
        return TransactionAbortedError(f"abort failed: {abort_error}")
    if isinstance(error, (TransactionAbortedError, FatalError)):
        return error  # fatal (refused for authorization): the loop backs off (engine/runtime/loop/refusals.py)
    return TransactionAbortedError(str(error))
