"""Who may do what (engine/domain/authority.py): a tenant's key acts for that tenant only; operators and engines
may do anything; unsigned commands (signatures not required) as before."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.contract import messages as m
from engine.contract.signing import Signer, authenticate, sign
from engine.domain.authority import refusal
from tests.unit.signed import TOPIC, command, raw

PAYLOAD = m.Payload(b"{}", "application/json", "")


def cmd(body: m.CommandBody, tenant: str = "globex", job_id: str = "job-1") -> m.Command:
    return m.Command("cmd-1", job_id, tenant, 1, body)


def submit(scope: str | None = None, parent: str | None = None) -> m.SubmitJob:
    return m.SubmitJob("bar.ok", PAYLOAD, scope=scope, parent_job_id=parent)


def upsert(tenant: str) -> m.UpsertSchedule:
    return m.UpsertSchedule("nightly", tenant, "bar.ok", "* * * * *", PAYLOAD)


ATTACKS = [
    (cmd(m.PauseTaskType("bar.ok")), None, "an operator's command"),
    (cmd(m.ResumeTaskType("bar.ok")), None, "an operator's command"),
    (cmd(m.SetRateLimit("bar.ok", 0.01, 1)), None, "an operator's command"),
    (cmd(m.ClearRateLimit("bar.ok")), None, "an operator's command"),
    (cmd(submit("global")), None, "scope 'global' runs jobs as other tenants"),
    (cmd(submit("product:shop")), None, "scope 'product:shop' runs jobs as other tenants"),
    (cmd(submit(parent="p-1")), None, "parent_job_id: only engines"),
    (cmd(upsert("acme")), None, "would run jobs as tenant 'acme'"),
    (cmd(upsert("globex")), "acme", "schedule 'nightly' belongs to tenant 'acme'"),  # taking over acme's schedule id
    (cmd(m.PauseSchedule("nightly")), "acme", "belongs to tenant 'acme'"),
    (cmd(m.ResumeSchedule("nightly")), "acme", "belongs to tenant 'acme'"),
    (cmd(m.RemoveSchedule("nightly")), "acme", "belongs to tenant 'acme'"),
]


def test_a_tenants_key_cannot_reach_other_tenants_work() -> None:
    for command_, owner, says in ATTACKS:
        why = refusal(command_, Signer.TENANT, owner)
        assert why is not None and says in why, (command_.body, why)


def test_operators_and_engines_may_do_all_of_it_and_unsigned_commands_are_decided_as_before() -> None:
    for command_, owner, _ in ATTACKS:
        for signer in (Signer.OPERATOR, Signer.ENGINE, Signer.UNSIGNED):
            assert refusal(command_, signer, owner) is None, (signer, command_.body)


def test_a_tenant_keeps_every_power_over_its_own_work() -> None:
    own = [cmd(submit()), cmd(submit("tenant")), cmd(upsert("globex")), cmd(m.PauseSchedule("nightly")),
           cmd(m.RemoveSchedule("nightly")), cmd(m.CancelJob("changed my mind")), cmd(m.ReplayDeadJob())]
    for command_ in own:
        for owner in (None, "globex"):
            assert refusal(command_, Signer.TENANT, owner) is None, command_.body


def test_an_operator_key_signs_for_any_tenant_but_never_an_engines_internal_command() -> None:
    acme, operator, engine = (Ed25519PrivateKey.generate() for _ in range(3))
    value = command("acme")
    proof = authenticate("acme", TOPIC, value, sign(operator, TOPIC, value), [raw(acme)], [raw(engine)], True,
                         operator_keys=[raw(operator)])
    assert proof.refusal is None and proof.signer is Signer.OPERATOR and not proof.by_engine
    assert authenticate("", TOPIC, value, sign(operator, TOPIC, value), [], [raw(engine)], True,
                        operator_keys=[raw(operator)]).signer is Signer.OPERATOR  # a pause has no tenant
    internal = authenticate("acme", TOPIC, value, sign(operator, TOPIC, value), [raw(acme)], [raw(engine)], True,
                            internal=True, operator_keys=[raw(operator)])
    assert internal.refusal is not None
    tenant = authenticate("acme", TOPIC, value, sign(acme, TOPIC, value), [raw(acme)], [raw(engine)], True,
                          operator_keys=[raw(operator)])
    assert tenant.signer is Signer.TENANT


def test_the_cli_says_refused_not_already_paused_when_the_signer_lacks_the_power(capsys) -> None:  # type: ignore[no-untyped-def]
    """The partitions' answers as the log gives them (a CommandRefused event each), folded as a waiter folds them."""
    from engine.cli.common import refused
    from engine.questions.logged import LoggedEvent
    from engine.questions.outcome import Outcome
    from engine.questions.tally import tally

    def answered(n: int, state: str, reason: str) -> Outcome:
        outcome = Outcome(f"tasktype:echo#{n}")
        refusal = m.CommandRefused("PauseTaskType", state, reason)
        outcome.apply(LoggedEvent(n, m.Event(f"e{n}", outcome.job_id, None, 1, "o", 0, refusal)))
        return outcome

    already = answered(0, "paused", "task type 'echo' is already paused")
    denied = answered(1, "unknown", "unauthorized: an operator's command")
    assert not refused("pause echo", tally([already])) and capsys.readouterr().err == ""
    assert refused("pause echo", tally([already, denied]))
    assert capsys.readouterr().err == ("epochq: pause echo: refused in 1 of 2 partition(s): unauthorized: "
                                       "an operator's command\n")
