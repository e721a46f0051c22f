"""The error tree of epochq, grouped by what the caller does about each error.

- ``ConfigError``: a setting is wrong; fix it and start again.
- ``NotFoundError``: the job, tenant or schedule named does not exist; check the name.
- ``DecodeError``: a record is not a known single-object Avro record; quarantine it.
  ``UnknownTypeError``: a record of a type this reader's schema does not have (written by a
  newer version); skip it and count it.
- ``ValidationError``: input is wrong for good; dead-letter it, never retry.
- ``InvalidTransitionError``: a trigger the job's state does not allow; refuse the command.
- ``FencedError``: a newer owner took the partition; drop its state and hand it over.
- ``ProjectionCorruptedError``: a store is unusable; wipe it and rebuild from the log.
- ``StoreLockedError``: another process (or another opener in this one) holds a partition's
  store; wait until it lets go (an engine tries again), or stop it first (the CLI refuses).
- ``TopicMismatchError``: the topics on the broker contradict the contract; refuse to start.
- ``BrokerError``: the local broker could not be fetched, started or reached.
- ``RetryableError``: the step may succeed if tried again: ``KafkaUnavailableError`` (the
  cluster did not answer in time), ``TransactionAbortedError`` (abort, catch up, decide again).
  ``OutputRefusedError``: a record a handler produced (``ctx.produce``) cannot be written;
  its attempt fails, the other jobs of the partition's transaction are not touched.
- ``FatalError``: the process cannot go on (a setting, a broken client); stop.
  ``AccessDeniedError``: the brokers refused this principal (credentials or ACLs); fix them.

Every librdkafka error is translated into this tree once, where it enters
(``engine.runtime.kafka``); a record that makes one step raise is *poison*: it is set
aside as an event and the loop goes on (docs/operations.md).
"""

from __future__ import annotations


class EpochqError(Exception):
    """Base of every error epochq raises on purpose."""


class ConfigError(EpochqError):
    """A setting is missing or invalid; the message names the setting."""


class TaskDefinitionError(ConfigError, ValueError):
    """An ``@app.task`` option is invalid (a name with a space, a bad lane…): the app cannot be loaded.

    Still a ``ValueError``, as the decorator always raised."""


class NotFoundError(EpochqError):
    """The job, tenant or schedule a request names does not exist (the CLI exits 1)."""


class DecodeError(EpochqError):
    """Bytes that are not a known single-object Avro record, located in the log."""

    def __init__(self, reason: str, topic: str = "?", partition: int = -1, offset: int = -1):
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"cannot decode {topic}[{partition}]@{offset}: {reason}")

    def located(self, topic: str, partition: int, offset: int) -> DecodeError:
        """The same error, now naming where in the log the record sits."""
        return DecodeError(self.reason, topic, partition, offset)


class UnknownTypeError(DecodeError):
    """A well-formed record of a body type the reader's schema lacks (``type_name``): skip it, count it.

    A newer writer added the type; Avro resolution reads every other type of that writer.
    """

    def __init__(self, type_name: str, reason: str, topic: str = "?", partition: int = -1, offset: int = -1):
        self.type_name = type_name
        super().__init__(reason, topic, partition, offset)

    def located(self, topic: str, partition: int, offset: int) -> DecodeError:
        """The same error, now naming where in the log the record sits."""
        return UnknownTypeError(self.type_name, self.reason, topic, partition, offset)


class ValidationError(EpochqError):
    """Input that can never succeed as it is (bad payload, bad field); not retried.

    ``field`` names the field at fault when one is (``run_at``, ``tenant_id``, ...), and
    ``reason`` is the stable code a ``JobRejected`` carries (``invalid_run_at``, ...).
    """

    def __init__(self, message: str, field: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason or (f"invalid_{field}" if field else "invalid")


class InvalidTransitionError(EpochqError):
    """A trigger that the job's current state does not allow."""

    def __init__(self, state: str, trigger: str):
        self.state = state
        self.trigger = trigger
        super().__init__(f"invalid transition: trigger {trigger!r} is not allowed in state {state!r}")


class FencedError(EpochqError):
    """A newer owner holds the partition; this instance must stop writing for it."""


class ProjectionCorruptedError(EpochqError):
    """A projection store cannot be trusted (e.g. data without an applied offset)."""


class StoreLockedError(EpochqError):
    """A partition's store is held by someone else: its lock file names the holder."""

    def __init__(self, partition: int | None, path: str, holder: str):
        self.partition, self.path, self.holder = partition, path, holder
        which = f"partition {partition}" if partition is not None else "store"
        super().__init__(f"{which}: the store at {path} is held by {holder}")


class TopicMismatchError(EpochqError):
    """Existing topics disagree with what epochq needs (partition counts, cleanup policy)."""


class BrokerError(EpochqError):
    """The local Apache Kafka broker could not be fetched, started, stopped or reached."""


class RetryableError(EpochqError):
    """A step failed in a way that trying it again can fix."""


class KafkaUnavailableError(RetryableError):
    """The Kafka cluster did not answer within the timeout."""


class TransactionAbortedError(RetryableError):
    """A transaction failed in a way aborting fixes; none of its writes became visible."""


class OutputRefusedError(RetryableError):
    """A record a handler gave ``ctx.produce`` cannot be written (the topic is missing, or the engine may
    not WRITE it, or the brokers refused it): the attempt fails with it, and may be retried once fixed."""


class FatalError(EpochqError):
    """The process cannot go on: stop it and fix the cause."""


class AccessDeniedError(FatalError):
    """The brokers refused this principal an operation (an ACL) or a login; retrying does not help.

    Fix the credentials (docs/security.md) or ask for the ACL (``epochq acl apply``)."""
