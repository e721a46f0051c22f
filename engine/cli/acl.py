"""``epochq acl apply|list``: the Kafka ACLs of a namespace's roles (engine, service, auditor, worker)."""

from __future__ import annotations

import argparse

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.config import Settings
from engine.errors import ConfigError, EpochqError, KafkaUnavailableError
from engine.runtime.acls import (
    TIMEOUT_S, apply_acls, list_acls, revoke_acls, revoked_acls, wanted_acls, worker_role,
)
from engine.runtime.kafka.admin import ConfigResource, ResourceType, admin_for
from engine.runtime.kafka.errors import translated

__all__ = ["register"]

METADATA_TIMEOUT_S = 10.0
"""How long the cluster's metadata may take: a broker that answers at all answers it in milliseconds."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``acl`` subcommand and its verbs to ``subparsers``."""
    parser = subparsers.add_parser("acl", help="write and list the Kafka ACLs of a namespace (docs/security.md)")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    apply = verbs.add_parser("apply", help="allow engines, services and auditors what the design needs, no more")
    add_connection_flags(apply)
    for role, default in (("engine", "engine"), ("service", "service"), ("auditor", "auditor")):
        apply.add_argument(f"--{role}", action="append", metavar="USER",
                           help=f"a {role} principal: a user name or Type:name; repeat for several "
                                f"(default {default})")
    apply.add_argument("--output-topic", action="append", metavar="PATTERN", default=[],
                       help="a topic the engines' handlers produce to (ctx.produce): a name, or a prefix ending "
                            "in * (e.g. 'billing.*'); repeat for several")
    apply.add_argument("--worker", action="append", metavar="USER=POOL", default=[],
                       help="a remote worker principal and the pool it serves (docs/workers.md); repeat for several")
    apply.add_argument("--dry-run", action="store_true", help="print the rules, write nothing")
    apply.set_defaults(func=_apply)
    show = verbs.add_parser("list", help="the ACLs on the namespace's topics, groups and transactional ids")
    add_connection_flags(show)
    show.add_argument("--all", action="store_true", help="every ACL on the cluster, not only the namespace's")
    show.add_argument("--json", action="store_true", help="one JSON document")
    show.set_defaults(func=_list)


def _apply(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if not args.dry_run:
        _require_authorizer(settings)  # before any rule is printed: a broker without an authorizer keeps none
    rules = wanted_acls(settings.namespace, args.engine or ["engine"], args.service or ["service"],
                        args.auditor or ["auditor"], args.output_topic, [worker_role(w) for w in args.worker])
    for rule in rules:
        print(rule.row())
    if args.dry_run:
        print(f"{len(rules)} rules (dry run: nothing written)")
        return 0
    apply_acls(settings, rules)
    print(f"{len(rules)} rules in place for namespace {settings.namespace}")
    stale = revoked_acls(settings.namespace, list_acls(settings, settings.namespace), rules)
    for rule in stale:
        print(f"revoked: {rule.row()}")
    if stale:
        revoke_acls(settings, stale)
        print(f"{len(stale)} rule(s) revoked: only engines write {settings.namespace}.schemas")
    return 0


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    _require_authorizer(settings)
    rules = list_acls(settings, None if args.all else settings.namespace)
    if args.json:
        print_json([{"principal": r.principal, "permission": r.permission, "operation": r.operation,
                     "resource_type": r.resource_type, "pattern": r.pattern, "name": r.name} for r in rules])
        return 0
    for rule in rules:
        print(rule.row())
    if not rules:
        print("no ACLs" + ("" if args.all else f" for namespace {settings.namespace}"))
    return 0


def _require_authorizer(settings: Settings) -> None:
    """ConfigError (exit 2) if the broker says it has no authorizer: it would keep no ACL. When its configuration
    cannot be read (not allowed to describe it), go on: writing the rules then says what is wrong. A broker that
    cannot be reached (or refuses the login) is said at once, not after the ACL request's own time-out."""
    admin = admin_for(settings)
    try:
        with translated("cannot describe the broker"):
            broker = next(iter(admin.list_topics(timeout=METADATA_TIMEOUT_S).brokers))
            found = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker))],
                                           request_timeout=TIMEOUT_S)
            entries = next(iter(found.values())).result()
    except KafkaUnavailableError:
        raise
    except (EpochqError, StopIteration):
        return
    authorizer = entries.get("authorizer.class.name")
    if authorizer is not None and not authorizer.value:
        raise ConfigError(f"acl: the broker at {settings.bootstrap} has no authorizer, so it keeps no ACLs: "
                          "configure one (authorizer.class.name; `epochq broker start --secure` does) and try again")
