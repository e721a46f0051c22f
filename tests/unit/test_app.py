"""Registering task types: handlers of every shape, the payload model, and refused options."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

from engine.app import App, TaskSpec, UnknownTaskError
from engine.domain.lanes import Lane
from engine.domain.retry import RetryPolicy
from engine.errors import ValidationError


class Email(BaseModel):
    to: str
    subject: str = ""


class Sms(BaseModel):
    number: str


def send_email(ctx: Any, payload: Email) -> dict[str, bool]:
    return {"sent": True}


def plain(ctx: Any, payload: dict[str, Any]) -> None:
    return None


def untyped(ctx, payload):  # type: ignore[no-untyped-def]
    return payload


class EmailHandler:
    instances = 0

    def __init__(self) -> None:
        EmailHandler.instances += 1

    def execute(self, ctx: Any, payload: Email) -> str:
        return payload.to


class Locked:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def execute(self, ctx: Any, payload: dict[str, Any]) -> None:
        return None


def test_decorated_function_is_registered_with_defaults_and_returned_unchanged() -> None:
    app = App()
    decorated = app.task("email.send")(send_email)
    spec = app.spec("email.send")
    assert decorated is send_email
    assert isinstance(spec, TaskSpec)
    assert (spec.handler, spec.model, spec.retry, spec.timeout, spec.lane, spec.executor) == (
        send_email, Email, RetryPolicy(), 300.0, None, "thread"
    )
    assert app.task_types == frozenset({"email.send"})


def test_options_are_kept_on_the_spec() -> None:
    app = App()
    retry = RetryPolicy(max_attempts=5, base_delay=0.5)
    spec = app.register("sms", plain, retry=retry, timeout=2, lane="high", model=Sms)
    assert (spec.retry, spec.timeout, spec.lane, spec.model) == (retry, 2.0, Lane.HIGH, Sms)


def test_decorated_class_is_instantiated_once() -> None:
    app = App()
    before = EmailHandler.instances
    returned = app.task("email.class")(EmailHandler)
    spec = app.spec("email.class")
    assert returned is EmailHandler
    assert isinstance(spec.handler, EmailHandler)
    assert spec.is_class_handler
    assert EmailHandler.instances == before + 1
    assert spec.model is Email  # inferred from execute's annotation


def test_an_instance_can_be_registered() -> None:
    app = App()
    handler = EmailHandler()
    assert app.register("email.instance", handler).handler is handler


def test_model_is_inferred_only_from_a_pydantic_annotation() -> None:
    app = App()
    assert app.register("typed", send_email).model is Email
    assert app.register("dict", plain).model is None
    assert app.register("untyped", untyped).model is None


def test_explicit_model_wins_over_the_annotation() -> None:
    app = App()
    assert app.register("email.sms", send_email, model=Sms).model is Sms


def test_annotation_resolves_even_when_another_parameter_does_not() -> None:
    def handler(ctx: NotImportedHere, payload: Email) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    assert App().register("t", handler).model is Email


def test_unresolvable_payload_annotation_asks_for_an_explicit_model() -> None:
    def handler(ctx: Any, payload: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(ValueError, match="model="):
        App().register("t", handler)
    assert App().register("t", handler, model=Email).model is Email


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": "30"}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"executor": "fork"}, "executor"),
        ({"lane": "DEAD"}, "lane DEAD"),
        ({"lane": Lane.DEAD}, "lane DEAD"),
        ({"lane": "FAST"}, "lane"),
        ({"retry": 3}, "retry"),
        ({"model": dict}, "model"),
    ],
)
def test_bad_options_name_the_task_and_the_option(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        App().register("job.x", plain, **options)
    assert "'job.x'" in str(info.value)


def test_duplicate_names_are_refused() -> None:
    app = App()
    app.register("dup", plain)
    with pytest.raises(ValueError, match="'dup': already registered"):
        app.register("dup", untyped)


@pytest.mark.parametrize("name", ["", " x", "a b", 3])
def test_bad_names_are_refused(name: Any) -> None:
    with pytest.raises(ValueError, match="task name"):
        App().register(name, plain)


def test_handlers_of_the_wrong_shape_are_refused() -> None:
    class NoExecute:
        pass

    class NeedsArgs:
        def __init__(self, x: int) -> None:
            self.x = x

        def execute(self, ctx: Any, payload: Any) -> None:
            return None

    app = App()
    with pytest.raises(ValueError, match="no execute"):
        app.register("a", NoExecute)
    with pytest.raises(ValueError, match="no-argument constructor"):
        app.register("b", NeedsArgs)
    with pytest.raises(ValueError, match=r"accept \(ctx, payload\)"):
        app.register("c", lambda ctx: None)
    with pytest.raises(ValueError, match="handler must be"):
        app.register("d", 42)


def test_process_executor_refuses_what_a_child_process_cannot_import() -> None:
    def local(ctx: Any, payload: Any) -> None:
        return None

    app = App()
    with pytest.raises(ValueError, match="'local'.*module-level|module-level"):
        app.register("a", local, executor="process")
    with pytest.raises(ValueError, match="module-level"):
        app.register("b", lambda ctx, payload: None, executor="process")
    with pytest.raises(ValueError, match="picklable handler instance"):
        app.register("c", Locked(), executor="process")
    assert app.register("d", send_email, executor="process").executor == "process"
    assert app.register("e", EmailHandler, executor="process").executor == "process"


def test_unknown_task_type_is_a_validation_error_and_a_key_error() -> None:
    app = App()
    app.register("known", plain)
    with pytest.raises(UnknownTaskError, match="'nope'.*registered: known") as info:
        app.spec("nope")
    assert isinstance(info.value, ValidationError)
    assert isinstance(info.value, KeyError)
    assert "nope" not in app and "known" in app
