"""Whether the bootstrap servers answer at all: the quick check one-shot commands make before any Kafka client.

librdkafka retries an unreachable broker until a request's timeout (10 s for metadata, 30 s
for an admin call) and only then says "transport failure", without the address. A command
a person typed should say within a few seconds which address did not answer, so the ``epochq``
program checks once per process, per bootstrap string, that some bootstrap server accepts a
TCP connection and answers Kafka's ApiVersions request within REACH_TIMEOUT_S, connection and
answer together (``engine.config.check_reach_with``); a listener that accepts and never answers
has not answered. Engines do not: they wait for a broker that is restarting.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from engine.errors import KafkaUnavailableError

REACH_TIMEOUT_S = 3.0
"""How long the check waits for any bootstrap server to accept a connection (name lookup included)."""
API_VERSIONS = struct.pack(">ihhih6s", 16, 18, 0, 1, 6, b"epochq")
"""Kafka's ApiVersions request, version 0, correlation id 1, client id "epochq": size-prefixed, as on the wire."""
_reached: set[str] = set()


def check_reachable(conf: dict[str, Any], timeout: float = REACH_TIMEOUT_S) -> None:
    """Return once some bootstrap server of the client configuration ``conf`` answers; KafkaUnavailableError
    naming each address and why not otherwise, within ``timeout`` seconds. A bootstrap that answered once
    is not checked again."""
    bootstrap = str(conf["bootstrap.servers"])
    if bootstrap in _reached:
        return
    servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
    speak = not str(conf.get("security.protocol", "PLAINTEXT")).endswith("SSL")
    verdicts = _probe_all(servers, timeout, speak)
    if any(verdicts.get(server, "") is None for server in servers):
        _reached.add(bootstrap)
        return
    reasons = "; ".join(f"{server}: {verdicts.get(server) or f'no answer within {timeout:g} s'}" for server in servers)
    raise KafkaUnavailableError(f"cannot reach Kafka at {reasons} (is the broker running and the bootstrap "
                                "address right? `epochq broker status` shows the local one)")


def _probe_all(servers: list[str], timeout: float, speak: bool) -> dict[str, str | None]:
    """Each server's verdict (None: it answered; else why not), as far as known within ``timeout`` s; returns as
    soon as one answers or all have failed. A server missing from the result gave no verdict in time."""
    verdicts: dict[str, str | None] = {}
    settled = threading.Event()
    lock = threading.Lock()

    def probe(server: str) -> None:
        why = connect_error(server, timeout, speak)
        with lock:
            verdicts[server] = why
            if why is None or len(verdicts) == len(servers):
                settled.set()

    for server in servers:  # daemon threads: a name lookup has no timeout of its own
        threading.Thread(target=probe, args=(server,), name=f"reach-{server}", daemon=True).start()
    settled.wait(timeout)
    with lock:
        return dict(verdicts)


def connect_error(server: str, timeout: float, speak: bool = True) -> str | None:
    """Why ``host:port`` does not accept a TCP connection (and, with ``speak``, answer ApiVersions) within
    ``timeout`` s; None when it does."""
    host, _, port = server.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    try:
        addresses = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"host not found ({e.strerror})"
    except (OSError, ValueError) as e:
        return str(e)
    last = "no address"
    for family, kind, proto, _, address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"no answer within {timeout:g} s"
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(left)
                sock.connect(address)
                return _kafka_answers(sock, deadline) if speak else None
        except TimeoutError:
            last = f"no answer within {timeout:g} s"
        except OSError as e:
            last = (e.strerror or str(e)).lower()
    return last


def _kafka_answers(sock: socket.socket, deadline: float) -> str | None:
    """None if the peer answers an ApiVersions request as Kafka does (its correlation id back) before ``deadline``
    (monotonic); why not otherwise (TimeoutError when it says nothing in time)."""
    sock.sendall(API_VERSIONS)
    head = b""
    while len(head) < 8:
        sock.settimeout(max(0.001, deadline - time.monotonic()))  # one deadline for the connect and every read
        chunk = sock.recv(8 - len(head))
        if not chunk:
            return "connection closed without a Kafka answer"
        head += chunk
    size, correlation = struct.unpack(">ii", head)
    return None if correlation == 1 and size >= 4 else "not a Kafka listener"
