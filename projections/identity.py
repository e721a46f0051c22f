"""Which log a store was folded from: a store of another log (a cluster or a topic made again) is wiped, not trusted.

A log's identity is its cluster's id and its topic's id, ``<cluster id>/<topic id>``: a topic
deleted and created again under the same name has a new topic id, a new cluster a new cluster
id, while the names and the offsets start over. A store records the identity of the log it
folds (``projections.store.LOG_KEY``, with the commit after it was bound to it); whoever opens
one to fold a log into it first asks :func:`matched`, once per store opened. A store that
records another identity, or whose applied offset is at or past the log's end (a store ahead
of its log is corrupt), is wiped with one WARNING line and the log is folded from offset 0. A
store made before identities were kept records none: it is judged by its offset, and learns
its identity with its next commit.
"""

from __future__ import annotations

import logging

from projections.store import ProjectionStore

log = logging.getLogger("epochq.projections")


def log_identity_of(cluster_id: str, topic_id: str) -> str:
    """The identity of a log: the cluster's id and the topic's."""
    return f"{cluster_id}/{topic_id}"


def described(identity: str) -> str:
    """A log's identity as an operator reads it: ``topic id T of cluster C``."""
    cluster, _, topic = identity.partition("/")
    return f"topic id {topic} of cluster {cluster}"


def mismatch(store: ProjectionStore, identity: str, end: int) -> str | None:
    """Why ``store`` cannot be a fold of the log ``identity`` whose end offset is now ``end``: it records another
    log's identity, or its applied offset is at or past that end (ahead of the log: corrupt). None if it can.

    A store that records no identity (empty, or made before identities were kept) is judged by its offset alone."""
    found, applied = store.log_identity(), store.applied_offset()
    if found is not None and found != identity:
        return f"it folded {described(found)}; this log is {described(identity)}"
    if applied >= end:
        return f"its applied offset {applied} is beyond the log's end ({end})"
    return None


def matched(store: ProjectionStore, identity: str, end: int, label: str) -> ProjectionStore:
    """``store`` bound to the log ``identity`` (end offset ``end``) it is to fold; wiped and opened again empty
    first, with one WARNING line starting with ``label``, when it was folded from another (:func:`mismatch`).

    Once per store opened: it reads two keys."""
    why = mismatch(store, identity, end)
    if why is not None:
        log.warning("%s: store %s was folded from another log (%s); wiping it and folding this log from offset 0",
                    label, store.path, why)
        store = store.reset()
    store.bind(identity)
    return store
