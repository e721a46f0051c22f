"""The error tree of epochq: every error it raises on purpose, grouped by what the caller does about it.

Five groups under :class:`EpochqError`, one recovery each (docs/errors.md):

- :class:`RetryableError` — transient: try the same step again (after a pause); nothing is wrong
  with the input or the state. ``KafkaUnavailableError``, ``TransactionAbortedError``,
  ``StoreLockedError``, ``OutputRefusedError`` (a record a handler produced, ``ctx.produce``,
  cannot be written: its attempt fails, the partition's other jobs are not touched).
- :class:`InputError` — the caller's mistake: refuse the input (or quarantine the record), name the
  field or the record, never retry it as it is. ``ValidationError``, ``UnknownTaskError``,
  ``NotFoundError``, ``InvalidTransitionError``, ``DecodeError``, ``UnknownTypeError``,
  ``MalformedError``, ``TruncatedError``. A pure function given an argument outside its domain (a weight of 0,
  a priority of 12) raises ``ValidationError`` naming the argument.
- :class:`PartitionLostError` — this instance no longer owns the partition: step down, drop its
  state, hand it over, never retry the write (Kafka Streams' TaskMigrated). ``FencedError``.
- :class:`CorruptedError` — state that cannot be trusted: wipe it and restore from the log (Kafka
  Streams' TaskCorrupted). ``ProjectionCorruptedError``, ``CheckpointError``, ``ProducerFailedError``
  (a partition's producer died without a fence: a new one, restore, claim again).
- :class:`FatalError` — the process cannot go on: stop and fix the cause (a setting, the topics,
  credentials, the local broker, a bug). ``ConfigError``, ``TaskDefinitionError``,
  ``TopicMismatchError``, ``AccessDeniedError``, ``BrokerError`` and its kin, ``IllegalStateError``,
  ``ContractError``, ``BusyError``. An engine meets one while it runs only as a refusal of a partition's
  transaction (``AccessDeniedError``): it holds that partition, says once what to fix, and tries again ever
  less often (loop/refusals.py) instead of stopping, since another engine of the same principal would be
  refused the same.

Every librdkafka error is translated into this tree once, where it enters (the Kafka edge,
``engine.runtime.kafka``, the only package that imports confluent-kafka); a record that makes one
step raise is *poison*: it is set aside as an event and the loop goes on (docs/operations.md).
``Cancelled``, raised in a handler to stop when a cancel was asked for, and ``Unsupported``, raised inside
the codec for what its compiled path does not serve (the fastavro path takes it), are control-flow signals,
not errors: they sit outside the tree. Code in ``engine/`` raises no builtin exception but where a Python
protocol asks for one (a module's ``__getattr__``, a pydantic validator, an abstract stub);
``tests/unit/test_raises.py`` keeps that list.
"""

from __future__ import annotations


class EpochqError(Exception):
    """Base of every error epochq raises on purpose; catch a group below it, not this."""


# --- the five groups ------------------------------------------------------------------------------


class RetryableError(EpochqError):
    """A step failed in a way that trying it again (after a pause) can fix: retry it."""


class InputError(EpochqError):
    """The caller's input is wrong for good: refuse it (or set the record aside), never retry it as it is.

    The message names the field, the job or the record at fault."""


class PartitionLostError(EpochqError):
    """This instance no longer owns a partition: step down, drop its state, hand it over; never retry the write."""


class CorruptedError(EpochqError):
    """State that cannot be trusted: wipe it and restore it from the log (the log is the truth)."""


class FatalError(EpochqError):
    """The process cannot go on: stop, fix the cause (the message names it), start again."""


# --- retryable --------------------------------------------------------------------------------------


class KafkaUnavailableError(RetryableError):
    """The Kafka cluster did not answer within the timeout."""


class TransactionAbortedError(RetryableError):
    """A transaction failed in a way aborting fixes; none of its writes became visible: catch up, decide again."""


class OutputRefusedError(RetryableError):
    """A record a handler gave ``ctx.produce`` cannot be written (the topic is missing, or the engine may
    not WRITE it, or the brokers refused it): the attempt fails with it, and may be retried once fixed."""


class StoreLockedError(RetryableError):
    """A partition's store is held by someone else: its lock file names the holder.

    An engine waits until it lets go; the CLI refuses (stop the holder first)."""

    def __init__(self, partition: int | None, path: str, holder: str):
        self.partition, self.path, self.holder = partition, path, holder
        which = f"partition {partition}" if partition is not None else "store"
        super().__init__(f"{which}: the store at {path} is held by {holder}")


# --- the caller's input ------------------------------------------------------------------------------


class ValidationError(InputError):
    """Input that can never succeed as it is (bad payload, bad field); not retried.

    ``field`` names the field at fault when one is (``run_at``, ``tenant_id``, ...), and
    ``reason`` is the stable code a ``JobRejected`` carries (``invalid_run_at``, ...).
    """

    def __init__(self, message: str, field: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason or (f"invalid_{field}" if field else "invalid")


class UnknownTaskError(ValidationError, KeyError):
    """No handler is registered for a task type: a job of that type can never run here."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown task type"


class NotFoundError(InputError):
    """The job, tenant or schedule a request names does not exist (the CLI exits 1)."""


class InvalidTransitionError(InputError):
    """A trigger that the job's current state does not allow: refuse the command."""

    def __init__(self, state: str, trigger: str):
        self.state = state
        self.trigger = trigger
        super().__init__(f"invalid transition: trigger {trigger!r} is not allowed in state {state!r}")


class DecodeError(InputError):
    """Bytes that are not a known single-object Avro record, located in the log: quarantine the record."""

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


class MalformedError(InputError, ValueError):
    """Bytes that no valid Avro encoding contains (a negative length, an 11-byte varint, …).

    Raised by the compiled readers; the codec reports it as the ``DecodeError`` of the record."""


class TruncatedError(MalformedError, EOFError):
    """Bytes that end before the record does (a block counts more entries than the bytes left can hold).

    Raised by the compiled readers; the codec reports it as a truncated body (still an ``EOFError``, as the
    readers' ends of input are)."""


# --- the partition is lost -------------------------------------------------------------------------


class FencedError(PartitionLostError):
    """A newer owner holds the partition (or a producer failed for good with no word of why): stop writing for it,
    hand it over."""


# --- corrupted state -------------------------------------------------------------------------------


class ProjectionCorruptedError(CorruptedError):
    """A projection store cannot be trusted (e.g. data without an applied offset): wipe it, restore from the log."""


class CheckpointError(CorruptedError, ValueError):
    """A checkpoint that cannot be used (corrupt, incomplete, inconsistent): replay from offset 0 instead."""


class ProducerFailedError(CorruptedError):
    """A partition's transactional producer failed for good, but no newer owner fenced it (a fatal error such as
    ``INVALID_TXN_STATE``): while the group still assigns the partition here, close that producer, set the
    partition up again with a new one, restore it from the log and claim it again (Kafka Streams recreates its
    producer the same way). A fence is :class:`FencedError`."""


# --- fatal ----------------------------------------------------------------------------------------


class ConfigError(FatalError):
    """A setting is missing or invalid; the message names the setting."""


class TaskDefinitionError(ConfigError, ValueError):
    """An ``@app.task`` option is invalid (a name with a space, a bad lane, a ``RetryPolicy`` or
    ``BreakerPolicy`` out of range…): the app cannot be loaded.

    Still a ``ValueError``, as the decorator always raised."""


class TopicMismatchError(FatalError):
    """Existing topics disagree with what epochq needs (missing, partition counts, cleanup policy)."""


class AccessDeniedError(FatalError):
    """The brokers refused this principal an operation (an ACL) or a login; retrying does not help.

    Fix the credentials (docs/security.md) or ask for the ACL (``epochq acl apply``). Fatal, because nothing
    but an operator fixes it: the CLI, a client, a worker and a view stop and say so. A running engine's
    partition whose transaction is refused is the one caller that waits instead of stopping (it holds the
    partition, says once which grant is missing, and tries again ever less often: loop/refusals.py), since
    stopping would only hand the partition to another engine of the same principal, refused the same; it
    waits for the operator, it does not treat the refusal as transient."""


class IllegalStateError(FatalError, RuntimeError):
    """The engine's own code asked for what its own rules lack: a bug, never input. A partition moving
    along an edge its table does not have, a ``JobView`` field that does not exist, an input ``decide`` has
    no rule for, work handed to an executor that is shut down or has no free slot in the lane, metrics
    served twice. Stop; the traceback says where."""


class ContractError(FatalError):
    """The schema contract itself is unusable: a subject with no shipped versions, a subject that does not
    exist, a schema naming a type it does not define. The installation (or a schema being added) is broken:
    fix the ``.avsc`` files; nothing decoded or written with it could be trusted."""


class BusyError(FatalError, RuntimeError):
    """``TestEngine`` did not become idle: something decides anew on every tick (a loop in the test's
    handlers). Fix the handlers."""


class BrokerError(FatalError):
    """The local Apache Kafka broker could not be fetched, started, stopped or reached.

    ``message`` is one line saying what happened and what to do; ``detail`` holds optional
    supporting text (a log or Maven output tail) shown after it (the CLI exits 2).
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.message}\n{self.detail}" if self.detail else self.message


class PrerequisiteError(BrokerError):
    """A tool the broker needs is missing: install it, then start again."""


class JavaNotFoundError(PrerequisiteError):
    """No usable ``java`` (JDK/JRE 17+) on PATH."""


class MavenNotFoundError(PrerequisiteError):
    """No ``mvn`` on PATH, so the Kafka jars cannot be fetched."""


class JarFetchError(BrokerError):
    """Maven ran but did not produce the Kafka jars (network or repository trouble)."""


class PortInUseError(BrokerError):
    """A port asked for explicitly is already taken: pick another or stop its owner."""


class BrokerAlreadyRunningError(BrokerError):
    """A broker with a different shape is already running from the same home: stop it first."""


class BrokerNotRunningError(BrokerError):
    """An operation needs a running broker (or node) that is not there."""


class BrokerStartError(BrokerError):
    """The broker could not be started; the message carries its log tail."""


class BrokerExitedError(BrokerStartError):
    """A broker JVM exited while starting."""


class BrokerTimeoutError(BrokerStartError):
    """The broker did not become ready within the timeout."""


GROUPS: tuple[type[EpochqError], ...] = (RetryableError, InputError, PartitionLostError, CorruptedError, FatalError)
"""The five groups, one recovery each: every other error derives from exactly one of them."""


def group_of(error: BaseException) -> type[EpochqError] | None:
    """The group ``error`` belongs to (what its caller does about it); None for an error not epochq's."""
    return next((g for g in GROUPS if isinstance(error, g)), None)
