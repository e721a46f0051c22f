"""Who may do what on a namespace's topics: the source of truth for the ACLs epochq's design needs.

Roles (docs/security.md):

- **engine**: exactly what an engine process does (``engine run``, its standby copies and bulk
  restores): reads commands and *writes* them too (a scoped job's children, a schedule's
  occurrences, reports to a parent job or a schedule, all inside its partition's transaction),
  reads and writes events, reads tenants (only admins write them), writes its heartbeats to
  workers, commits the engine group's offsets, reads with its reader groups, and uses the
  transactional ids of its partitions; and, for each ``--output-topic`` (a name or ``prefix*``), WRITE,
  DESCRIBE and DESCRIBE_CONFIGS: the topics its handlers produce to with ``ctx.produce``;
- **service**: writes commands, and may ask where the events log ends (DESCRIBE, no records),
  which a client does so that a job's handle can follow its events later; it reads the writer
  schemas but never writes them;
- **auditor**: reads events and the engines' heartbeats (``epochq workers``), with the reader groups;
- **worker** of a pool (docs/workers.md): reads its pool's dispatch topic in its pool's group, writes its results
  to commands and its heartbeats to workers, reads the writer schemas, and checks (DESCRIBE, DESCRIBE_CONFIGS) the
  output topics its handlers produce to (the engines write those records). With workers, engines also create and
  write every pool's dispatch topic (``<ns>.dispatch.`` prefix) and read the heartbeats (the workers' slots and
  leases).

Nothing else is granted: with the standard authorizer and ``allow.everyone.if.no.acl.found=false``
no other principal (super users aside) writes events, and only engines write ``<ns>.schemas``: a
schema text under a shipped key is what every reader in any language decodes with, so a service
that could write one could make consumers read ``job_id`` as ``tenant_id``. :func:`revoked_acls`
names the older grants ``acl apply`` takes back (WRITE on ``<ns>.schemas`` to anyone but the
engines named). :func:`wanted_acls` and :func:`revoked_acls` are pure; the other functions talk
to the brokers with an AdminClient.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.config import Settings
from engine.errors import ValidationError
from engine.runtime.kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    admin_for,
    results,
)
from engine.runtime.kafka.errors import translated

TIMEOUT_S = 30.0
ROLES = ("engine", "service", "auditor", "worker")


@dataclass(frozen=True, slots=True, order=True)
class AclRule:
    """One rule: ``principal`` may (ALLOW) or may not (DENY) do ``operation`` on a resource name or prefix."""

    principal: str
    resource_type: str
    pattern: str
    name: str
    operation: str
    permission: str = "ALLOW"

    def row(self) -> str:
        """The rule as one line of ``epochq acl list``."""
        return (f"{self.principal:<20} {self.permission:<5} {self.operation:<16} {self.resource_type:<16} "
                f"{self.pattern:<8} {self.name}")


def principal(name: str) -> str:
    """A Kafka principal: ``User:NAME`` for a bare name, a given ``Type:name`` as it is."""
    if not name or name.strip() != name:
        raise ValidationError(f"principal: {name!r} is not a user name", "principal")
    return name if ":" in name else f"User:{name}"


def wanted_acls(namespace: str, engines: Sequence[str], services: Sequence[str],
                auditors: Sequence[str], output_topics: Sequence[str] = (),
                workers: Sequence[tuple[str, str]] = ()) -> list[AclRule]:
    """Every ALLOW rule the namespace's roles need, sorted; principals as given to :func:`principal`.

    ``output_topics``: the topics engines' handlers produce to (``ctx.produce``), each a name or a
    prefix ending in ``*`` (:func:`output_topic`). ``workers``: (principal, pool) of each remote worker."""
    rules = [r for p in engines for r in _engine(namespace, principal(p))]
    if workers:
        rules += [r for p in engines for r in _engine_with_workers(namespace, principal(p))]
    rules += [r for p, pool in workers for r in _worker(namespace, principal(p), pool)]
    rules += [AclRule(principal(p), "TOPIC", pattern, name, op) for p, _ in workers
              for pattern, name in map(output_topic, output_topics) for op in ("DESCRIBE", "DESCRIBE_CONFIGS")]
    rules += [r for p, _ in workers for r in _topic(principal(p), f"{namespace}.schemas", "READ", "DESCRIBE")]
    rules += [AclRule(principal(p), "TOPIC", pattern, name, op) for p in engines
              for pattern, name in map(output_topic, output_topics) for op in OUTPUT_OPERATIONS]
    rules += [r for p in services for r in _service(namespace, principal(p))]
    rules += [r for p in auditors for r in _auditor(namespace, principal(p))]
    # every role reads the writer schemas by fingerprint; only engines register them (and repair a wrong one)
    rules += [r for p in engines for r in _topic(principal(p), f"{namespace}.schemas", "WRITE")]
    rules += [r for p in [*engines, *services, *auditors]
              for r in _topic(principal(p), f"{namespace}.schemas", "READ", "DESCRIBE")]
    return sorted(set(rules))


def revoked_acls(namespace: str, existing: Iterable[AclRule], wanted: Iterable[AclRule]) -> list[AclRule]:
    """The ALLOW rules on the cluster that let someone not in ``wanted`` write ``<ns>.schemas`` (a service, as an
    older ``acl apply`` granted): ``acl apply`` deletes them. Sorted."""
    keep = set(wanted)
    return sorted(r for r in existing if r.resource_type == "TOPIC" and r.pattern == "LITERAL"
                  and r.name == f"{namespace}.schemas" and r.operation in ("WRITE", "ALL")
                  and r.permission == "ALLOW" and r not in keep)


OUTPUT_OPERATIONS = ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")
"""What an engine needs on a topic its handlers produce to: write it, and check it (exists, limit) first."""


def output_topic(pattern: str) -> tuple[str, str]:
    """(``LITERAL``, name) for a topic name, (``PREFIXED``, prefix) for ``prefix*``; ValidationError otherwise."""
    name = pattern[:-1] if pattern.endswith("*") else pattern
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ValidationError(f"--output-topic: {pattern!r} is not a topic name or a prefix ending in *",
                              "output_topic")
    return ("PREFIXED" if pattern.endswith("*") else "LITERAL"), name


def _topic(who: str, name: str, *operations: str) -> list[AclRule]:
    return [AclRule(who, "TOPIC", "LITERAL", name, op) for op in operations]


def _engine(ns: str, who: str) -> list[AclRule]:
    return [
        *_topic(who, f"{ns}.commands", "READ", "WRITE", "DESCRIBE"),  # WRITE: the commands engines send themselves
        *_topic(who, f"{ns}.events", "READ", "WRITE", "DESCRIBE"),
        *_topic(who, f"{ns}.tenants", "READ", "DESCRIBE"),
        *_topic(who, f"{ns}.workers", "WRITE", "DESCRIBE"),
        *_topic(who, f"{ns}.checkpoints", "READ", "WRITE", "DESCRIBE"),
        AclRule(who, "GROUP", "LITERAL", f"{ns}.engine", "READ"),
        AclRule(who, "GROUP", "PREFIXED", f"{ns}.reader.", "READ"),
        AclRule(who, "TRANSACTIONAL_ID", "PREFIXED", f"{ns}.owner.", "WRITE"),
        AclRule(who, "TRANSACTIONAL_ID", "PREFIXED", f"{ns}.owner.", "DESCRIBE"),
    ]


def _engine_with_workers(ns: str, who: str) -> list[AclRule]:
    """What an engine needs besides when remote workers run some of its task types."""
    return [*(AclRule(who, "TOPIC", "PREFIXED", f"{ns}.dispatch.", op) for op in ("CREATE", "WRITE", "DESCRIBE")),
            *_topic(who, f"{ns}.workers", "READ")]


def _worker(ns: str, who: str, pool: str) -> list[AclRule]:
    """A remote worker of ``pool``: its dispatch topic and group, results as commands, heartbeats."""
    return [*_topic(who, f"{ns}.dispatch.{pool}", "READ", "DESCRIBE"),
            AclRule(who, "GROUP", "LITERAL", f"{ns}.pool.{pool}", "READ"),
            AclRule(who, "GROUP", "PREFIXED", f"{ns}.reader.", "READ"),
            *_topic(who, f"{ns}.commands", "WRITE", "DESCRIBE"),
            *_topic(who, f"{ns}.workers", "WRITE", "DESCRIBE")]


def worker_role(value: str) -> tuple[str, str]:
    """``USER=POOL`` (``acl apply --worker``) as (principal, pool); ValidationError naming what is wrong."""
    who, sep, pool = value.rpartition("=")
    if not sep or not who or not pool or not all(c.isalnum() or c in "_-" for c in pool):
        raise ValidationError(f"--worker: {value!r} is not USER=POOL (a pool: letters, digits, '_' or '-')", "worker")
    return who, pool


def _service(ns: str, who: str) -> list[AclRule]:
    return [*_topic(who, f"{ns}.commands", "WRITE", "DESCRIBE"), *_topic(who, f"{ns}.events", "DESCRIBE")]


def _auditor(ns: str, who: str) -> list[AclRule]:
    return [*_topic(who, f"{ns}.events", "READ", "DESCRIBE"), *_topic(who, f"{ns}.workers", "READ", "DESCRIBE"),
            AclRule(who, "GROUP", "PREFIXED", f"{ns}.reader.", "READ")]


def _binding(rule: AclRule) -> AclBinding:
    return AclBinding(ResourceType[rule.resource_type], rule.name, ResourcePatternType[rule.pattern],
                      rule.principal, "*", AclOperation[rule.operation], AclPermissionType[rule.permission])


def _rule(binding: AclBinding) -> AclRule:
    return AclRule(binding.principal, _name(binding.restype), _name(binding.resource_pattern_type), binding.name,
                   _name(binding.operation), _name(binding.permission_type))


def _name(value: object) -> str:
    """An enum member's name (the bindings the broker returns hold enums; their types allow str and int)."""
    return str(getattr(value, "name", value))


def apply_acls(settings: Settings, rules: Iterable[AclRule]) -> int:
    """Create ``rules`` on the cluster (existing ones stay as they are); returns how many were asked for."""
    bindings = [_binding(r) for r in rules]
    if not bindings:
        return 0
    admin = admin_for(settings)
    with translated("cannot create ACLs"):
        asked = admin.create_acls(bindings, request_timeout=TIMEOUT_S)
    results(asked.values(), "cannot create ACLs")
    return len(bindings)


def revoke_acls(settings: Settings, rules: Iterable[AclRule]) -> int:
    """Delete exactly ``rules`` from the cluster; returns how many were asked for."""
    filters = [AclBindingFilter(ResourceType[r.resource_type], r.name, ResourcePatternType[r.pattern], r.principal,
                                "*", AclOperation[r.operation], AclPermissionType[r.permission]) for r in rules]
    if not filters:
        return 0
    admin = admin_for(settings)
    with translated("cannot delete ACLs"):
        asked = admin.delete_acls(filters, request_timeout=TIMEOUT_S)
    results(asked.values(), "cannot delete ACLs")
    return len(filters)


def list_acls(settings: Settings, namespace: str | None = None) -> list[AclRule]:
    """Every ACL on the cluster, or those on resources named under ``namespace`` (``NS.``), sorted."""
    anything: Any = None  # AclBindingFilter's None: any name, principal or host (its types say str)
    any_acl = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY, anything, anything,
                               AclOperation.ANY, AclPermissionType.ANY)
    admin = admin_for(settings)  # held until the answer is in: a collected client cancels its requests
    with translated("cannot list ACLs"):
        found = admin.describe_acls(any_acl, request_timeout=TIMEOUT_S).result()
    rules = [_rule(b) for b in found]
    return sorted(r for r in rules if namespace is None or r.name.startswith(f"{namespace}."))
