"""``epochq tenants set|list|remove``: the compacted tenants table."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.contract.messages import TenantConfig
from engine.contract.signing import load_public_key
from engine.errors import NotFoundError
from engine.runtime.tenants import TenantDirectory, remove_tenant, set_tenant


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``tenants`` subcommand."""
    parser = sub.add_parser("tenants", help="set, list or remove tenants (weights, queue limits, products)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    put = verbs.add_parser("set", help="create or update a tenant")
    put.add_argument("tenant")
    put.add_argument("--weight", type=float, required=True, help="fair-share weight, > 0")
    put.add_argument("--max-queued", type=int,
                     help="limit on the tenant's queued jobs in each partition (up to N x partitions in all)")
    put.add_argument("--product", help="the product the tenant belongs to (for scoped tasks)")
    keys = put.add_mutually_exclusive_group()
    keys.add_argument("--public-key", action="append", type=Path, metavar="FILE",
                      help="PEM Ed25519 public key that signs the tenant's commands; repeat once while rotating "
                           "(default: keep the table's keys)")
    keys.add_argument("--no-public-key", action="store_true", help="remove the tenant's keys")
    put.add_argument("--json", action="store_true")
    put.set_defaults(func=_set)
    listing = verbs.add_parser("list", help="every tenant in the table")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    remove = verbs.add_parser("remove", help="remove a tenant (a tombstone on the compacted topic)")
    remove.add_argument("tenant")
    remove.set_defaults(func=_remove)
    for verb in (put, listing, remove):
        add_connection_flags(verb)


def _set(args: argparse.Namespace) -> int:
    keys = [] if args.no_public_key else [load_public_key(f) for f in args.public_key] if args.public_key else None
    config = set_tenant(settings_from(args), args.tenant, args.weight, args.max_queued, args.product, keys)
    if args.json:
        print_json(tenant_json(config))
    else:
        print(f"tenant {config.tenant_id} set: {_describe(config)}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with TenantDirectory(settings_from(args)) as directory:
        table = directory.all()
    configs = [table[t] for t in sorted(table)]
    if args.json:
        print_json([tenant_json(c) for c in configs])
        return 0
    if not configs:
        print("no tenants (every tenant has weight 1 and no queue limit)")
    for config in configs:
        print(f"{config.tenant_id}: {_describe(config)}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with TenantDirectory(settings) as directory:
        known = args.tenant in directory.all()
    if not known:
        raise NotFoundError(f"no tenant {args.tenant!r} in {settings.tenants_topic} (`epochq tenants list` shows them)")
    remove_tenant(settings, args.tenant)
    print(f"tenant {args.tenant} removed")
    return 0


def tenant_json(config: TenantConfig) -> dict[str, Any]:
    """One tenant as a JSON object."""
    return {"tenant_id": config.tenant_id, "weight": config.weight, "max_queued": config.max_queued,
            "product": config.product, "updated_at": config.updated_at,
            "public_keys": [base64.b64encode(k).decode() for k in config.public_keys]}


def _describe(config: TenantConfig) -> str:
    limit = "no limit" if config.max_queued is None else f"max {config.max_queued} queued per partition"
    product = f", product {config.product}" if config.product else ""
    keys = f", {len(config.public_keys)} signing key(s)" if config.public_keys else ""
    return f"weight {config.weight:g}, {limit}{product}{keys}"
