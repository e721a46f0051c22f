"""``epochq topics ensure|describe``."""

from __future__ import annotations

import argparse

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.errors import TopicMismatchError
from engine.runtime.topics import check_topics, describe_topics, ensure_topics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``topics`` subcommand."""
    parser = sub.add_parser("topics", help="create or check the namespace's topics")
    verbs = parser.add_subparsers(dest="verb", required=True)
    ensure = verbs.add_parser("ensure", help="create missing topics and verify all of them")
    add_connection_flags(ensure)
    ensure.add_argument("--partitions", type=int,
                        help="partition count of commands and events (default 6); existing topics must have it")
    ensure.add_argument("--replication", type=int, help="replication factor (default 1); existing topics must have it")
    ensure.set_defaults(func=_ensure)
    describe = verbs.add_parser("describe", help="show the namespace's topics")
    add_connection_flags(describe)
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(func=_describe)


def _ensure(args: argparse.Namespace) -> int:
    infos = ensure_topics(settings_from(args), args.partitions, args.replication)
    for info in infos:
        print(f"{info.name}: {info.partitions} partitions, replication {info.replication}, {info.config}")
    return 0


def _describe(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    infos = describe_topics(settings)
    if not infos:
        raise TopicMismatchError(f"namespace {settings.namespace} has none of its topics: "
                                 "run `epochq topics ensure` first")
    if args.json:
        print_json([i.__dict__ if hasattr(i, "__dict__") else _as_dict(i) for i in infos])
    else:
        for info in infos:
            print(f"{info.name}: {info.partitions} partitions, replication {info.replication}, {info.config}")
    check_topics(settings, infos)
    return 0


def _as_dict(info: object) -> dict[str, object]:
    return {s: getattr(info, s) for s in info.__slots__}  # type: ignore[attr-defined]
