"""The write step's part of ``ctx.produce`` (see ``effects``): the staged records into the open transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.runtime.kafka.errors import record_fault, typed
from engine.runtime.loop.effects import Output

if TYPE_CHECKING:
    from engine.runtime.kafka.ports import Transaction
    from engine.runtime.loop.write import Written


def produce(written: Written, producer: Transaction) -> None:
    """Produce the staged records into the open transaction, each with a report of its own refusal
    (a delivery error that is the record's own: ``kafka.errors.RECORD_FAULTS``)."""
    for output in written.staged.outputs:
        report = _on_delivery(written, output)
        for record in output.records:
            try:
                producer.produce_reported(record.topic, record.value, record.key, report,
                                          list(record.headers) if record.headers else None)
            except Exception as e:  # refused at once (a topic known to be missing): name the attempt
                _blame(written, output, record.topic, e.__cause__ or e)  # the client's error, typed by the port
                error = typed(e)
                if error is e:
                    raise
                raise error from e


def _on_delivery(written: Written, output: Output) -> Any:
    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            _blame(written, output, msg.topic(), err)
    return on_delivery


def _blame(written: Written, output: Output, topic: str, err: Any) -> None:
    why = record_fault(err)
    if why is not None:
        written.refused[(output.job_id, output.attempt)] = f"{topic}: {why}"
