"""One error tree: every error epochq defines sits in exactly one group, the one that says what to do."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

from engine import errors
from engine.errors import (
    GROUPS,
    CorruptedError,
    EpochqError,
    FatalError,
    InputError,
    PartitionLostError,
    RetryableError,
    group_of,
)

SIGNALS = {"engine.runtime.execution.context.Cancelled", "engine.contract.avro_fast.Unsupported"}
"""Control-flow signals, not errors (docs/errors.md): they stay outside the tree."""

EXPECTED = {
    RetryableError: ["KafkaUnavailableError", "TransactionAbortedError", "StoreLockedError", "OutputRefusedError"],
    InputError: ["ValidationError", "UnknownTaskError", "NotFoundError", "InvalidTransitionError", "DecodeError",
                 "UnknownTypeError", "MalformedError", "TruncatedError"],
    PartitionLostError: ["FencedError"],
    CorruptedError: ["ProjectionCorruptedError", "CheckpointError", "ProducerFailedError"],
    FatalError: ["ConfigError", "TaskDefinitionError", "TopicMismatchError", "AccessDeniedError", "IllegalStateError",
                 "ContractError", "BusyError", "BrokerError", "PrerequisiteError", "JavaNotFoundError",
                 "MavenNotFoundError", "JarFetchError", "PortInUseError", "BrokerAlreadyRunningError",
                 "BrokerNotRunningError", "BrokerStartError", "BrokerExitedError", "BrokerTimeoutError"],
}


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = [root]
    found += [importlib.import_module(info.name) for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return found


def _exceptions_defined_in(packages: tuple[str, ...]) -> set[type[BaseException]]:
    return {cls for package in packages for module in _modules(package)
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__.startswith(packages)}


def test_every_exception_epochq_defines_is_in_the_tree_or_a_signal() -> None:
    outside = {f"{c.__module__}.{c.__qualname__}" for c in _exceptions_defined_in(("engine", "projections"))
               if not issubclass(c, EpochqError)}
    assert outside == SIGNALS


def test_every_error_is_defined_in_engine_errors() -> None:
    elsewhere = {c.__qualname__ for c in _exceptions_defined_in(("engine", "projections"))
                 if issubclass(c, EpochqError) and c.__module__ != "engine.errors"}
    assert elsewhere == set()


def test_every_error_belongs_to_exactly_one_group() -> None:
    tree = [c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, EpochqError)]
    for cls in tree:
        if cls is EpochqError or cls in GROUPS:
            assert cls.__bases__ == ((Exception,) if cls is EpochqError else (EpochqError,)), cls
            continue
        assert [g for g in GROUPS if issubclass(cls, g)] and sum(issubclass(cls, g) for g in GROUPS) == 1, cls
    named = {name for names in EXPECTED.values() for name in names}
    assert named == {c.__name__ for c in tree} - {"EpochqError"} - {g.__name__ for g in GROUPS}


@pytest.mark.parametrize(("group", "name"), [(g, n) for g, names in EXPECTED.items() for n in names])
def test_each_error_sits_in_the_group_of_its_recovery(group: type[EpochqError], name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, group)
    assert group_of(cls.__new__(cls)) is group


def test_the_names_users_catch_still_import_from_where_they_did() -> None:
    from engine.app import UnknownTaskError
    from engine.broker import BrokerError
    from engine.broker.errors import BrokerStartError, JavaNotFoundError, PortInUseError
    from engine.contract.avro_codegen import Unsupported
    from engine.contract.avro_fast import MalformedError
    from engine.runtime.loop.partition import IllegalTransition
    from engine.testing import BusyError
    from projections.checkpoint import CheckpointError

    assert BrokerError is errors.BrokerError and issubclass(BrokerStartError, errors.BrokerError)
    assert {JavaNotFoundError, PortInUseError} <= {errors.JavaNotFoundError, errors.PortInUseError}
    assert issubclass(UnknownTaskError, KeyError) and issubclass(UnknownTaskError, errors.ValidationError)
    assert issubclass(MalformedError, ValueError) and issubclass(CheckpointError, ValueError)
    assert issubclass(IllegalTransition, RuntimeError) and issubclass(BusyError, RuntimeError)
    assert not issubclass(Unsupported, errors.EpochqError)  # a signal the codec falls back on, not an error


def test_an_error_not_epochqs_has_no_group() -> None:
    assert group_of(RuntimeError("x")) is None
    assert group_of(errors.StoreLockedError(3, "/s/p0003", "pid 7")) is RetryableError
