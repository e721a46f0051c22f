"""The registry of task types: which handler runs a task type, with which options.

A handler is a function ``(ctx, payload) -> result`` or a class (instantiated once with no
arguments, or an instance given to :meth:`App.register`) with an ``execute(self, ctx,
payload)`` method and optional ``validate``, ``before_execute`` and ``after_execute`` hooks.
Every option is checked here, at registration, so a bad option fails at import time and
never at run time.
"""

from __future__ import annotations

import inspect
import math
import re
import pickle
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from engine.domain.lanes import Lane
from engine.domain.breaker import BreakerPolicy
from engine.domain.inputs import TaskPolicy
from engine.domain.retry import RetryPolicy
from engine.errors import TaskDefinitionError
from engine.errors import UnknownTaskError as UnknownTaskError  # its name here too

ExecutorKind = Literal["thread", "process"]
EXECUTORS: tuple[str, ...] = ("thread", "process")
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_LEASE_S = 30.0
POOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,100}$")
H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """Everything the executor needs to know about one task type, fixed at registration.

    ``handler`` is the function, or the one instance of the handler class. ``model`` is the
    pydantic model the payload is validated against (``None``: plain decoded payload).
    ``timeout`` is in seconds; ``lane`` pins the task type to a lane (``None``: by priority).
    """

    name: str
    handler: Any
    model: type[BaseModel] | None
    retry: RetryPolicy
    timeout: float
    lane: Lane | None
    executor: ExecutorKind
    breaker: BreakerPolicy | None = None
    pool: str | None = None  # run by remote workers of this pool (docs/workers.md); None: in the engine's process
    lease: float = DEFAULT_LEASE_S  # seconds a remote attempt lives without a heartbeat

    @property
    def is_class_handler(self) -> bool:
        """Whether the handler is an object with ``execute`` (and maybe hooks), not a function."""
        return is_class_handler(self.handler)

    @property
    def is_async(self) -> bool:
        """Whether the handler is ``async def`` (it runs on the engine's event loop, not in a thread)."""
        return is_async_handler(self.handler)


class App:
    """The task types this process can run, by name; the source of truth for their options."""

    def __init__(self) -> None:
        self._specs: dict[str, TaskSpec] = {}

    def task(
        self,
        name: str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        timeout: float = DEFAULT_TIMEOUT_S,
        lane: Lane | str | None = None,
        model: type[BaseModel] | None = None,
        executor: str = "thread",
        breaker: BreakerPolicy | None = None,
        pool: str | None = None,
        lease: float = DEFAULT_LEASE_S,
    ) -> Callable[[H], H]:
        """A decorator registering a function or a class as the handler of ``name``.

        The decorated object is returned unchanged, so it stays callable and picklable.
        """

        def decorate(handler: H) -> H:
            self.register(name, handler, retry=retry, timeout=timeout, lane=lane, model=model, executor=executor,
                          breaker=breaker, pool=pool, lease=lease)
            return handler

        return decorate

    def register(
        self,
        name: str,
        handler: Any,
        *,
        retry: RetryPolicy = RetryPolicy(),
        timeout: float = DEFAULT_TIMEOUT_S,
        lane: Lane | str | None = None,
        model: type[BaseModel] | None = None,
        executor: str = "thread",
        breaker: BreakerPolicy | None = None,
        pool: str | None = None,
        lease: float = DEFAULT_LEASE_S,
    ) -> TaskSpec:
        """Register ``handler`` for task type ``name``; a ``TaskDefinitionError`` (a ``ValueError``) names any bad
        option."""
        _check_name(name)
        if name in self._specs:
            raise TaskDefinitionError(f"task {name!r}: already registered (handler {self._specs[name].handler!r})")
        resolved = _resolve_handler(name, handler)
        spec = TaskSpec(
            name=name,
            handler=resolved,
            model=_resolve_model(name, resolved, model),
            retry=_check_retry(name, retry),
            timeout=_check_timeout(name, timeout),
            lane=_check_lane(name, lane),
            executor=_check_executor(name, executor, resolved),
            breaker=_check_breaker(name, breaker),
            pool=_check_pool(name, pool),
            lease=_check_lease(name, lease),
        )
        self._specs[name] = spec
        return spec

    def spec(self, name: str) -> TaskSpec:
        """The spec of task type ``name``; ``UnknownTaskError`` if none is registered."""
        try:
            return self._specs[name]
        except KeyError:
            known = ", ".join(sorted(self._specs)) or "none"
            raise UnknownTaskError(f"unknown task type {name!r} (registered: {known})") from None

    @property
    def task_types(self) -> frozenset[str]:
        """The names of every registered task type."""
        return frozenset(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def policies(self) -> dict[str, TaskPolicy]:
        """What decide needs of each task type: its retry policy and pinned lane."""
        return {name: TaskPolicy(spec.retry, spec.lane.value if spec.lane else None)
                for name, spec in self._specs.items()}


def _check_breaker(name: str, breaker: Any) -> BreakerPolicy | None:
    if breaker is not None and not isinstance(breaker, BreakerPolicy):
        raise TaskDefinitionError(f"task {name!r}: breaker must be a BreakerPolicy or None, got {breaker!r}")
    return breaker


def is_class_handler(handler: Any) -> bool:
    """Whether ``handler`` is a handler object (has ``execute``) rather than a function."""
    return not isinstance(handler, type) and callable(getattr(handler, "execute", None))


def is_async_handler(handler: Any) -> bool:
    """Whether the handler's function (or ``execute`` method) is ``async def``."""
    return inspect.iscoroutinefunction(handler.execute if is_class_handler(handler) else handler)


# --- checks, one per option -------------------------------------------------------------


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name or name != name.strip() or any(c.isspace() for c in name):
        raise TaskDefinitionError(f"task name: expected a non-empty string without whitespace, got {name!r}")


def _resolve_handler(name: str, handler: Any) -> Any:
    """The callable or instance that will run ``name``: classes are instantiated here, once."""
    if isinstance(handler, type):
        handler = _instantiate(name, handler)
    if is_class_handler(handler):
        _check_arity(name, handler.execute, "execute")
        return handler
    if callable(handler):
        _check_arity(name, handler, "handler")
        return handler
    raise TaskDefinitionError(
        f"task {name!r}: handler must be a function (ctx, payload) or a class with execute(), got {handler!r}"
    )


def _instantiate(name: str, cls: type) -> Any:
    if not callable(getattr(cls, "execute", None)):
        raise TaskDefinitionError(f"task {name!r}: handler class {cls.__qualname__} has no execute(self, ctx, payload) "
                                  "method")
    try:
        return cls()
    except Exception as e:
        raise TaskDefinitionError(f"task {name!r}: handler class {cls.__qualname__} needs a no-argument "
                                  f"constructor: {e}") from e


def _check_arity(name: str, fn: Callable[..., Any], what: str) -> None:
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise TaskDefinitionError(f"task {name!r}: {what} must accept (ctx, payload)") from None
    except ValueError:
        return  # no signature available (some builtins): trust the caller


def _resolve_model(name: str, handler: Any, model: Any) -> type[BaseModel] | None:
    """The explicit ``model``, else the payload parameter's annotation when it is a model."""
    if model is not None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TaskDefinitionError(f"task {name!r}: model must be a pydantic BaseModel subclass, got {model!r}")
        return model
    fn = handler.execute if is_class_handler(handler) else handler
    hint = _payload_annotation(name, fn)
    return hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None


def _payload_annotation(name: str, fn: Callable[..., Any]) -> Any:
    """The resolved annotation of the payload (second) parameter of ``fn``, or ``None``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except ValueError:
        return None
    if len(params) < 2 or params[1].annotation is inspect.Parameter.empty:
        return None
    target = getattr(fn, "__func__", fn)
    try:
        return typing.get_type_hints(target).get(params[1].name)
    except Exception:  # noqa: BLE001 - another parameter's annotation may not resolve; try only ours
        return _eval_annotation(name, target, params[1].annotation)


def _eval_annotation(name: str, fn: Any, annotation: Any) -> Any:
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, getattr(fn, "__globals__", {}))  # noqa: S307 - what get_type_hints does
    except Exception as e:
        raise TaskDefinitionError(
            f"task {name!r}: cannot resolve the payload annotation {annotation!r} ({e}); pass model= explicitly"
        ) from e


def _check_retry(name: str, retry: object) -> RetryPolicy:
    if not isinstance(retry, RetryPolicy):
        raise TaskDefinitionError(f"task {name!r}: retry must be a RetryPolicy, got {retry!r}")
    return retry


def _check_timeout(name: str, timeout: object) -> float:
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not ok or not math.isfinite(timeout) or timeout <= 0:  # type: ignore[arg-type, operator]
        raise TaskDefinitionError(f"task {name!r}: timeout must be a finite number of seconds > 0, got {timeout!r}")
    return float(timeout)  # type: ignore[arg-type]


def _check_pool(name: str, pool: object) -> str | None:
    if pool is None:
        return None
    if not isinstance(pool, str) or not POOL_NAME.match(pool):
        raise TaskDefinitionError(f"task {name!r}: pool must be 1-100 letters, digits, '_' or '-', got {pool!r}")
    return pool


def _check_lease(name: str, lease: object) -> float:
    ok = isinstance(lease, (int, float)) and not isinstance(lease, bool)
    if not ok or not math.isfinite(lease) or lease < 1:  # type: ignore[arg-type, operator]
        raise TaskDefinitionError(f"task {name!r}: lease must be a finite number of seconds >= 1, got {lease!r}")
    return float(lease)  # type: ignore[arg-type]


def _check_lane(name: str, lane: Lane | str | None) -> Lane | None:
    if lane is None:
        return None
    try:
        resolved = Lane(lane.upper()) if isinstance(lane, str) else Lane(lane)
    except ValueError:
        raise TaskDefinitionError(f"task {name!r}: lane must be one of HIGH, NORMAL, LOW, BATCH, "
                                  f"got {lane!r}") from None
    if resolved is Lane.DEAD:
        raise TaskDefinitionError(f"task {name!r}: lane DEAD is the dead-letter queue, not a lane to run in")
    return resolved


def _check_executor(name: str, executor: object, handler: Any) -> ExecutorKind:
    if executor not in EXECUTORS:
        raise TaskDefinitionError(f"task {name!r}: executor must be 'thread' or 'process', got {executor!r}")
    if executor == "process" and is_async_handler(handler):
        raise TaskDefinitionError(f"task {name!r}: an async handler runs on the engine's event loop; "
                         "executor='process' is for blocking, CPU-heavy sync handlers")
    if executor == "process":
        _check_picklable(name, handler)
    return typing.cast(ExecutorKind, executor)


def _check_picklable(name: str, handler: Any) -> None:
    """Refuse a process handler the child could not receive: it must be importable by name.

    At decoration time the function or class is not yet bound in its module, so pickling
    it whole would fail; check its shape, and pickle an instance's state on its own.
    """
    target = handler if inspect.isfunction(handler) or isinstance(handler, type) else type(handler)
    qualname = getattr(target, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise TaskDefinitionError(
            f"task {name!r}: executor='process' needs a module-level function or class, got {qualname!r}"
        )
    if target is handler:
        return
    try:
        pickle.dumps(handler.__reduce_ex__(pickle.DEFAULT_PROTOCOL)[2:])
    except Exception as e:
        raise TaskDefinitionError(f"task {name!r}: executor='process' needs a picklable handler instance: {e}") from e
