"""Every librdkafka error translated where it enters: the edge's one table of codes and its typed errors.

The owner's transactional calls go through ``kafka.call`` and ``kafka.produce_owned``
(:func:`translate`: fenced, aborted, …). Every other call — a read, an admin request, a writer's
produce, a delivery report — goes through :func:`translated` (a block) or :func:`failure` (one
error): a refusal is ``AccessDeniedError``, anything else ``KafkaUnavailableError`` (retryable),
each naming what was being done. Outside this package no code sees a ``KafkaException``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaError, KafkaException

from engine.errors import (
    AccessDeniedError,
    EpochqError,
    FencedError,
    KafkaUnavailableError,
    ProducerFailedError,
    TransactionAbortedError,
    ValidationError,
)

FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
TRANSIENT_READ_CODES = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                        KafkaError.REQUEST_TIMED_OUT, KafkaError._DESTROY_BROKER, KafkaError.OFFSET_NOT_AVAILABLE}
"""Errors of an offset query that a moment's wait fixes (a topic just created, a leader moving; a dead
broker's handle dropped from the metadata: ``_DESTROY_BROKER``, asked of the new leader next time; a new
leader whose high watermark is not caught up yet: ``OFFSET_NOT_AVAILABLE``)."""
DENIED_CODES = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}
"""Errors that say the brokers refused this principal: an ACL or a login is missing, waiting fixes nothing."""
PARTITION_EOF = KafkaError._PARTITION_EOF
"""A message's "error" at the end of a partition: no error at all (consumers that ask for it)."""
RECORD_FAULTS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_EXCEPTION,
    KafkaError.INVALID_REQUIRED_ACKS, KafkaError.POLICY_VIOLATION, KafkaError._UNKNOWN_TOPIC,
    KafkaError._MSG_TIMED_OUT,
})
"""Delivery errors of a handler's record (``ctx.produce``) that are the record's own (its size, its topic), not
the transaction's. A record that timed out is blamed too: a topic deleted after the check times out its records,
and re-deciding the same records would abort every transaction after it; in an outage the attempts blamed are
retried by their policy."""
UNSAID_FATAL = KafkaError._FATAL
"""A call on a producer already failed for good: the cause (a fence, or not) is not in the error."""


def kafka_error(error: BaseException | KafkaError | None) -> KafkaError | None:
    """The librdkafka error an exception (or a delivery report) carries; None for anything else."""
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


def record_fault(error: BaseException | KafkaError | None) -> str | None:
    """``NAME: text`` of an error that is a produced record's own (:data:`RECORD_FAULTS`); None for any other."""
    err = kafka_error(error)
    if err is None or err.code() not in RECORD_FAULTS:
        return None
    return f"{err.name()}: {err.str()}"


def failure(error: BaseException | KafkaError, what: str) -> EpochqError:
    """The typed error for a librdkafka error met while doing ``what`` (its message starts with ``what``)."""
    err = kafka_error(error)
    if err is None:
        return KafkaUnavailableError(f"{what}: {error}")
    if err.code() in DENIED_CODES:
        return denied(err, what)
    return KafkaUnavailableError(f"{what}: {err.str()}")


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Run a block of client calls; a librdkafka error in it is raised as :func:`failure` says."""
    try:
        yield
    except KafkaException as e:
        raise failure(e, what) from e


def typed(error: BaseException) -> BaseException:
    """A librdkafka exception that escaped translation, typed now (``kafka.translate``); any other as it is.
    For the last resort of a page or a command: one line, never a traceback."""
    if isinstance(error, KafkaException) and kafka_error(error) is not None:
        return translate(error)
    return error


def is_end_of_partition(error: KafkaError | None) -> bool:
    """Whether a message's error only says the partition's end was reached."""
    return error is not None and error.code() == PARTITION_EOF


def denied(err: KafkaError, what: str) -> AccessDeniedError:
    """The error of an operation the brokers refused this principal."""
    return AccessDeniedError(f"{what}: {err.name()}: {err.str()} (check the credentials, or the ACLs: "
                             "`epochq acl list`)")


def read_refused(err: KafkaError | None, topic: str) -> AccessDeniedError | None:
    """The error of a waiter's read the brokers refused (the outcomes are in ``topic``); None for any other.

    A service that may only write commands sends its command, then cannot follow it: say that, never
    "no engine decided it"."""
    if err is None or err.code() not in DENIED_CODES:
        return None
    return AccessDeniedError(f"not authorized to read {topic} ({err.name()}): the command was sent, but its outcome "
                             "is in that topic; grant this principal READ with `epochq acl apply --auditor NAME` "
                             "(docs/security.md), or do not wait")


def translate(error: KafkaException) -> Exception:
    """The typed error for a librdkafka exception.

    A fatal producer error is a fence (``FencedError``: step down) when it says so (:data:`FENCED_CODES`, or
    "fenced" in its text) or does not say why (:data:`UNSAID_FATAL`); any other (``INVALID_TXN_STATE`` at the
    end of a transaction, say) is ``ProducerFailedError``: the producer is dead, the partition is still ours."""
    err: KafkaError = error.args[0]
    if err.code() in DENIED_CODES:
        return denied(err, "the brokers refused")
    if err.code() in FENCED_CODES or (err.fatal() and "fenc" in err.str().lower()):
        return FencedError(f"producer fenced: {err.str()}")
    if err.fatal() and err.code() == UNSAID_FATAL:
        return FencedError(f"fatal producer error (treated as fenced): {err.str()}")
    if err.fatal():
        return ProducerFailedError(f"producer failed for good, not fenced ({err.name()}): {err.str()}")
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return ValidationError(f"record too large for the broker: {err.str()}")
    if err.txn_requires_abort() or err.retriable():
        return TransactionAbortedError(err.str())
    return KafkaUnavailableError(err.str())
