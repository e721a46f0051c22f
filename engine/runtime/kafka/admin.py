"""Admin requests: the edge's AdminClient for a cluster, and the types its requests are made of.

Topics (``engine.runtime.topics``), ACLs (``engine.runtime.acls``, ``epochq acl``) and the local
broker's readiness probe (``engine.broker.ready``) ask through these; a librdkafka error comes out
typed (``engine.runtime.kafka.errors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicCollection as TopicCollection
from confluent_kafka.admin import AclBinding as AclBinding
from confluent_kafka.admin import AclBindingFilter as AclBindingFilter
from confluent_kafka.admin import AclOperation as AclOperation
from confluent_kafka.admin import AclPermissionType as AclPermissionType
from confluent_kafka.admin import AdminClient as AdminClient
from confluent_kafka.admin import ConfigResource as ConfigResource
from confluent_kafka.admin import NewTopic as NewTopic
from confluent_kafka.admin import ResourcePatternType as ResourcePatternType
from confluent_kafka.admin import ResourceType as ResourceType

from engine.config import Settings
from engine.runtime.kafka.errors import failure, kafka_error, translated
from projections.identity import log_identity_of


def admin_for(settings: Settings) -> AdminClient:
    """An AdminClient for the configured cluster."""
    return AdminClient(settings.kafka_config())


def admin_with(conf: Mapping[str, Any]) -> AdminClient:
    """An AdminClient from librdkafka settings as they are (the local broker's probe of its own nodes)."""
    return AdminClient(dict(conf))


LOGIN_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
"""What librdkafka's error callback says when the brokers refuse a login (SASL credentials, a TLS handshake)."""


def refused_login(settings: Settings, timeout: float = 3.0) -> str | None:
    """Why the brokers refuse this process's login, asked anew (None: they accept it, or nothing says so).

    A client whose login is refused fails its call as "broker transport failure"; the reason reaches only its
    error callback, and only once polled: so a command that failed to reach Kafka asks this before saying so."""
    said: list[str] = []
    conf = {**settings.kafka_config(),
            "error_cb": lambda e: said.append(e.str()) if e.code() in LOGIN_CODES else None}
    admin = AdminClient(conf)
    try:
        admin.list_topics(timeout=timeout)
        return None
    except KafkaException:
        admin.poll(0.5)
    return said[0].split(": ", 1)[-1] if said else None  # without librdkafka's "sasl_ssl://host:port/bootstrap: "


def listed_broker_ids(admin: AdminClient, timeout: float) -> set[int]:
    """The ids of the brokers the cluster's metadata lists; none when it does not answer within ``timeout``."""
    try:
        return set(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return set()


def create_topics(admin: AdminClient, topics: list[NewTopic], timeout: float) -> None:
    """Create ``topics``; one that exists already is left as it is."""
    for name, future in admin.create_topics(topics, request_timeout=timeout).items():
        try:
            future.result()
        except KafkaException as e:
            err = kafka_error(e)
            if err is None or err.name() != "TOPIC_ALREADY_EXISTS":
                raise failure(e, f"cannot create topic {name}") from e


def results(futures: Iterable[Any], what: str) -> list[Any]:
    """The result of each of an admin request's futures, a librdkafka error typed as ``what`` failing."""
    try:
        return [future.result() for future in futures]
    except KafkaException as e:
        raise failure(e, what) from e


def log_identity(settings: Settings, topic: str, timeout: float = 10.0) -> str:
    """The identity of ``topic``'s log (``projections.identity``): the cluster's id and the topic's id.

    One metadata and one describe request; KafkaUnavailableError (or AccessDeniedError) when they fail."""
    admin = admin_for(settings)
    with translated(f"cannot describe {topic}"):
        cluster = admin.list_topics(topic, timeout=timeout).cluster_id
        found = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
    return log_identity_of(str(cluster), str(found.topic_id))
