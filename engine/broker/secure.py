"""A secure local broker's credentials: the source of truth for its users, passwords and TLS files.

``epochq broker start --secure`` makes them in ``<home>/broker/secure/`` (deleted with the
broker's data): a CA and the broker's certificate (:mod:`engine.broker.tls`), one SCRAM-SHA-512
password per user, a client certificate per role user (``CN=<user>``), and per user env files
(mode 0600) of ``EPOCHQ_*`` settings to source: ``<user>.env`` (SASL_SSL) and
``<user>-mtls.env`` (SSL with the user's certificate, on the mTLS listener). Both ways a user
is the same principal, ``User:<user>``. ``admin`` is the broker's own identity and a super
user; ``engine``, ``service`` and ``auditor`` get only what ``epochq acl apply`` grants them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.broker.tls import BROKER_CN, TlsFiles, make_tls_files

__all__ = ["ADMIN", "MECHANISM", "USERS", "SecureSetup", "make_secure_setup", "server_settings"]

ADMIN = "admin"
USERS = (ADMIN, "engine", "service", "auditor")
CERT_USERS = USERS[1:]
PRINCIPAL_RULES = "RULE:^CN=([a-z]+)$/$1/,DEFAULT"
"""A user certificate's ``CN=engine`` is ``User:engine``, the SCRAM user's principal; anything else stays whole."""
MECHANISM = "SCRAM-SHA-512"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SECURE_DIR = "secure"


@dataclass(frozen=True, slots=True)
class SecureSetup:
    """The TLS files and the SCRAM users of one secure local broker."""

    directory: Path
    tls: TlsFiles
    passwords: Mapping[str, str]

    def scram_args(self) -> list[str]:
        """``StorageTool format`` arguments that create every user's SCRAM credential."""
        args: list[str] = []
        for user, password in self.passwords.items():
            args += ["--add-scram", f"{MECHANISM}=[name={user},password={password}]"]
        return args

    def env_file(self, user: str, mtls: bool = False) -> Path:
        """Where ``user``'s settings are written (``mtls``: those for the mTLS listener)."""
        return self.directory / "users" / f"{user}{'-mtls' if mtls else ''}.env"

    def mtls_env(self, user: str, tls_bootstrap: str) -> dict[str, str]:
        """The ``EPOCHQ_*`` variables that make an epochq process connect as ``user`` with its certificate."""
        cert, key = self.tls.clients[user]
        return {
            "EPOCHQ_BOOTSTRAP": tls_bootstrap,
            "EPOCHQ_SECURITY_PROTOCOL": "SSL",
            "EPOCHQ_SSL_CA_FILE": str(self.tls.ca_file),
            "EPOCHQ_SSL_CERT_FILE": str(cert),
            "EPOCHQ_SSL_KEY_FILE": str(key),
        }

    def client_env(self, user: str, bootstrap: str) -> dict[str, str]:
        """The ``EPOCHQ_*`` variables that make an epochq process connect as ``user``."""
        return {
            "EPOCHQ_BOOTSTRAP": bootstrap,
            "EPOCHQ_SECURITY_PROTOCOL": "SASL_SSL",
            "EPOCHQ_SASL_MECHANISM": MECHANISM,
            "EPOCHQ_SASL_USERNAME": user,
            "EPOCHQ_SASL_PASSWORD": self.passwords[user],
            "EPOCHQ_SSL_CA_FILE": str(self.tls.ca_file),
        }

    def client_config(self, user: str, bootstrap: str) -> dict[str, str]:
        """librdkafka settings connecting as ``user`` (the readiness check's admin client)."""
        return {
            "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.username": user, "sasl.password": self.passwords[user], "ssl.ca.location": str(self.tls.ca_file),
        }

    def write_env_files(self, bootstrap: str, tls_bootstrap: str | None = None) -> dict[str, Path]:
        """Write the env files (mode 0600): one per user, and one per certificate user with ``tls_bootstrap``.

        Returns file name stem (``engine``, ``engine-mtls``, …) → path."""
        paths = {user: _write_env(self.env_file(user), self.client_env(user, bootstrap)) for user in self.passwords}
        if tls_bootstrap is not None:
            paths.update({f"{user}-mtls": _write_env(self.env_file(user, mtls=True), self.mtls_env(user, tls_bootstrap))
                          for user in self.tls.clients})
        return paths


def _write_env(path: Path, env: Mapping[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(f"{k}={v}\n" for k, v in env.items()))
    return path


def make_secure_setup(data_root: Path) -> SecureSetup:
    """Make a fresh CA, broker certificate and user passwords under ``data_root``."""
    directory = data_root / SECURE_DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    passwords = {user: secrets.token_urlsafe(24) for user in USERS}
    tls = make_tls_files(directory, CERT_USERS)
    return SecureSetup(directory, tls, passwords)


def server_settings(setup: SecureSetup) -> dict[str, str]:
    """The broker settings that make its client listener SASL_SSL and turn the authorizer on.

    Clients and brokers talk over ``SASL_SSL`` (SCRAM-SHA-512, the broker as ``admin``);
    clients may also use the ``SSL`` listener with a user certificate (mTLS). The controller
    listener is TLS with client certificates, the broker's own, so its principal is the
    certificate's subject. Both are super users; anyone else needs an ACL.
    """
    jaas = f'{SCRAM_MODULE} required username="{ADMIN}" password="{setup.passwords[ADMIN]}";'
    return {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL",
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules": PRINCIPAL_RULES,
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(setup.tls.keystore_file),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(setup.tls.ca_file),
        "authorizer.class.name": AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN};User:CN={BROKER_CN}",
    }
