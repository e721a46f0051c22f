"""The topics of a namespace: created once, checked on every start, never silently fixed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from engine.config import Settings
from engine.errors import AccessDeniedError, EpochqError, KafkaUnavailableError, TopicMismatchError, ValidationError
from engine.runtime.kafka import schemas
from engine.runtime.kafka import DENIED_CODES, denied
from engine.runtime.kafka.admin import AdminClient, ConfigResource, NewTopic, admin_for, create_topics, results
from engine.runtime.kafka.errors import translated

EVENTS_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
COMMANDS_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}
TENANTS_CONFIG = {"cleanup.policy": "compact"}
WORKERS_CONFIG = {"cleanup.policy": "compact,delete", "retention.ms": str(24 * 3600 * 1000),
                  "segment.ms": str(3600 * 1000), "min.cleanable.dirty.ratio": "0.1"}
"""The engines' heartbeats: one record per instance kept (compacted), none older than a day (an
instance that died a day ago is forgotten), small segments so compaction keeps the topic small."""
CHECKPOINTS_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(3600 * 1000), "min.cleanable.dirty.ratio": "0.1",
                      "max.message.bytes": str(2 * 1024 * 1024)}
"""Checkpoints of the owners' write models (``engine.runtime.checkpoints``): compacted, so a partition keeps
about one checkpoint (its newest manifest and chunks), never the history of them."""
TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the broker says about one topic."""

    name: str
    partitions: int
    replication: int
    config: dict[str, str]


def workers_topic(settings: Settings) -> str:
    """The compacted topic of the engines' heartbeats (``engine.questions.workers``)."""
    return f"{settings.namespace}.workers"


def checkpoints_topic(settings: Settings) -> str:
    """The compacted topic of the write models' checkpoints, one partition per job partition."""
    return f"{settings.namespace}.checkpoints"


def wanted_topics(settings: Settings, partitions: int, replication: int) -> list[NewTopic]:
    """The topics a namespace needs, with their configs."""
    specs = [
        (settings.commands_topic, partitions, COMMANDS_CONFIG),
        (settings.events_topic, partitions, EVENTS_CONFIG),
        (settings.tenants_topic, 1, TENANTS_CONFIG),
        (workers_topic(settings), 1, WORKERS_CONFIG),
        (settings.schemas_topic, 1, schemas.SCHEMAS_CONFIG),
        (checkpoints_topic(settings), partitions, CHECKPOINTS_CONFIG),
    ]
    return [NewTopic(n, p, replication, config=dict(c)) for n, p, c in specs]


def ensure_topics(settings: Settings, partitions: int | None = None, replication: int | None = None) -> list[TopicInfo]:
    """Create missing topics, verify them, and register every shipped schema in ``<ns>.schemas``.

    Raises TopicMismatchError on a conflict.

    ``partitions`` and ``replication`` are what missing topics are created with (default 6 and 1);
    when given, existing topics must have them too: a different count is refused, never changed.
    """
    for name, count in (("partitions", partitions), ("replication", replication)):
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValidationError(f"{name}: must be a whole number >= 1, got {count!r}", name)
    admin = admin_for(settings)
    existing = _list(admin)
    count = partitions or (partition_count(settings, admin) if settings.events_topic in existing else 6)
    wanted = wanted_topics(settings, count, replication or 1)  # a checkpoints topic added later: as many as events
    missing = [t for t in wanted if t.topic not in existing]
    if missing:
        _create(admin, missing)
        _await_metadata(admin, [t.topic for t in wanted])
    infos = describe_topics(settings, admin)
    check_topics(settings, infos)
    check_asked(settings, infos, partitions, replication)
    schemas.publish_shipped(settings)
    return infos


def ensure_schemas_topic(settings: Settings) -> None:
    """Create ``<ns>.schemas`` in a namespace made before it existed (an engine's start does this),
    with the events topic's replication, and register every shipped schema in it."""
    admin = admin_for(settings)
    if settings.schemas_topic not in _list(admin):
        events = [i for i in describe_topics(settings, admin) if i.name == settings.events_topic]
        replication = events[0].replication if events else 1
        _create(admin, [NewTopic(settings.schemas_topic, 1, replication, config=dict(schemas.SCHEMAS_CONFIG))])
        _await_metadata(admin, [settings.schemas_topic])
    schemas.publish_shipped(settings)


DISPATCH_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(24 * 3600 * 1000)}
"""A pool's dispatch topic (docs/workers.md): an attempt's record matters for its lease only, a day is plenty."""


def ensure_dispatch_topic(settings: Settings, topic: str) -> None:
    """Create a pool's dispatch topic if it is missing, with as many partitions as the commands topic (one
    worker per partition at most reads it) and the events topic's replication."""
    admin = admin_for(settings)
    with translated("cannot list topics"):
        meta = admin.list_topics(timeout=TIMEOUT_S).topics
    if topic in meta:
        return
    # the metadata only: an engine or a worker may DESCRIBE the namespace's topics, not DESCRIBE_CONFIGS them
    commands, events = meta.get(settings.commands_topic), meta.get(settings.events_topic)
    partitions = len(commands.partitions) if commands is not None else 6
    replication = min((len(p.replicas) for p in events.partitions.values()), default=1) if events is not None else 1
    try:
        _create(admin, [NewTopic(topic, partitions, replication, config=dict(DISPATCH_CONFIG))])
    except AccessDeniedError as e:  # a worker: only engines (and admins) may create a pool's topic
        pool = topic.removeprefix(f"{settings.namespace}.dispatch.")
        raise AccessDeniedError(
            f"cannot read {topic}: this principal does not see it and may not create it; either it is not a worker "
            f"of pool {pool!r} (an admin grants one: epochq acl apply --worker USER={pool}), or the topic does not "
            f"exist yet (an engine whose app has a task of pool {pool!r} creates it when it starts)") from e
    _await_metadata(admin, [topic])


def check_asked(settings: Settings, infos: list[TopicInfo], partitions: int | None, replication: int | None) -> None:
    """Refuse existing topics whose partition count or replication differs from what was asked for."""
    problems = []
    for info in infos:
        if partitions is not None and info.name in _names(settings)[:2] and info.partitions != partitions:
            problems.append(f"{info.name} has {info.partitions} partitions, not {partitions}")
        if replication is not None and info.replication != replication:
            problems.append(f"{info.name} has replication {info.replication}, not {replication}")
    if problems:
        raise TopicMismatchError("; ".join(problems) + ": existing topics are never changed; "
                                 "drop the flag to use them as they are, or use another --namespace")


def _list(admin: AdminClient) -> set[str]:
    with translated("cannot list topics"):
        return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def _create(admin: AdminClient, topics: list[NewTopic]) -> None:
    create_topics(admin, topics, TIMEOUT_S)


def _await_metadata(admin: AdminClient, names: list[str], timeout_s: float = 15.0) -> None:
    """Wait until freshly created topics show up in the cluster metadata."""
    deadline = time.monotonic() + timeout_s
    while not set(names) <= _list(admin):
        if time.monotonic() > deadline:
            raise KafkaUnavailableError(f"topics {names} were created but do not appear in the metadata")
        time.sleep(0.1)


def describe_topics(settings: Settings, admin: AdminClient | None = None) -> list[TopicInfo]:
    """Partition counts, replication and the relevant configs of the namespace's topics."""
    admin = admin or admin_for(settings)
    names = [*_names(settings), workers_topic(settings), settings.schemas_topic, checkpoints_topic(settings)]
    with translated("cannot describe the topics"):
        meta = admin.list_topics(timeout=TIMEOUT_S).topics
    present = [n for n in names if n in meta]
    configs = _configs(admin, present)
    return [_info(n, meta[n], configs[n]) for n in present]


def _info(name: str, meta: object, config: dict[str, str]) -> TopicInfo:
    parts = meta.partitions  # type: ignore[attr-defined]
    replication = min((len(p.replicas) for p in parts.values()), default=0)
    return TopicInfo(name, len(parts), replication, config)


def _configs(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:  # none exists, or none this principal may describe
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
    out: dict[str, dict[str, str]] = {}
    asked = admin.describe_configs(resources, request_timeout=TIMEOUT_S)
    for res, entries in zip(asked, results(asked.values(), "cannot describe the topics' configs"), strict=True):
        keep = ("cleanup.policy", "retention.ms", "min.insync.replicas")
        out[res.name] = {k: entries[k].value for k in keep if k in entries}
    return out


def check_topics(settings: Settings, infos: list[TopicInfo]) -> None:
    """Refuse topics that break the contract; name the topic and what is wrong."""
    by_name = {i.name: i for i in infos}
    problems = [f"topic {n} is missing" for n in _names(settings) if n not in by_name]
    commands, events = by_name.get(settings.commands_topic), by_name.get(settings.events_topic)
    if commands and events and commands.partitions != events.partitions:
        problems.append(
            f"{commands.name} has {commands.partitions} partitions but {events.name} has "
            f"{events.partitions}: they must be co-partitioned (same count)"
        )
    if events and "compact" in events.config.get("cleanup.policy", ""):
        problems.append(f"{events.name} is compacted; the event history must use cleanup.policy=delete")
    if events and events.config.get("retention.ms") not in ("-1", None):
        problems.append(f"{events.name} has retention.ms={events.config['retention.ms']}; it must be -1 (forever)")
    tenants = by_name.get(settings.tenants_topic)
    if tenants and "compact" not in tenants.config.get("cleanup.policy", ""):
        problems.append(f"{tenants.name} must be compacted (cleanup.policy=compact)")
    registry = by_name.get(settings.schemas_topic)
    if registry and "compact" not in registry.config.get("cleanup.policy", ""):
        problems.append(f"{registry.name} must be compacted (cleanup.policy=compact): it keeps every writer schema")
    if problems:
        raise TopicMismatchError("; ".join(problems) + ". epochq refuses to start; fix the topics by hand.")


def _names(settings: Settings) -> list[str]:
    return [settings.commands_topic, settings.events_topic, settings.tenants_topic]


def topic_exists(settings: Settings, name: str) -> bool:
    """Whether topic ``name`` exists (False too when it cannot be described); an engine without its
    namespace's checkpoints topic (made before it existed) says so once and writes no checkpoints."""
    try:
        with translated(f"cannot describe {name}"):
            meta = admin_for(settings).list_topics(timeout=TIMEOUT_S).topics.get(name)  # named, it might auto-create
    except EpochqError:
        return False
    found = meta is not None and meta.error is None
    if not found:
        import logging

        logging.getLogger("epochq.checkpoints").warning(
            "topic %s is missing: no checkpoints (a new owner replays from offset 0); run `epochq topics ensure`", name)
    return found


def partition_count(settings: Settings, admin: AdminClient | None = None) -> int:
    """The partition count of the events topic (equal to the commands topic's)."""
    admin = admin or admin_for(settings)
    with translated(f"cannot describe {settings.events_topic}"):
        meta = admin.list_topics(settings.events_topic, timeout=TIMEOUT_S).topics[settings.events_topic]
    if meta.error is not None and meta.error.code() in DENIED_CODES:
        raise denied(meta.error, f"cannot describe {settings.events_topic}")
    if meta.error is not None:
        raise TopicMismatchError(f"topic {settings.events_topic} is missing: run `epochq topics ensure`")
    return len(meta.partitions)
