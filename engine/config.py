"""Settings of an epochq process: the one place that reads ``EPOCHQ_*`` variables.

Flags override the environment, the environment overrides defaults. Every value is typed
and validated; a bad one raises ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import logging

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from engine.clientlogs import error_callback, throttled
from engine.errors import ConfigError

ENV_PREFIX = "EPOCHQ_"
SECURITY_FIELDS = ("security_protocol", "sasl_mechanism", "sasl_username", "sasl_password", "ssl_ca_file",
                   "ssl_cert_file", "ssl_key_file", "ssl_key_password", "signing_key_file", "engine_key_file",
                   "require_signatures", "operator_key_file", "operator_public_key_file", "worker_key_file",
                   "pool_public_keys_dir")
ENV_FIELDS = ("bootstrap", "namespace", "state_dir", "owner_id", "max_payload_bytes", "dedup_window_s",
              *SECURITY_FIELDS)
KafkaConfig = dict[str, Any]
_client_logger: list[logging.Logger] = [throttled(logging.getLogger("epochq.kafka"))]
"""Where librdkafka's own lines and errors go: a throttled logger (engine/clientlogs.py), or a command's own."""
_reach_check: list[Callable[[KafkaConfig], None]] = []  # checks the bootstrap answers first (one-shot CLI)


def route_client_logs(logger: logging.Logger) -> None:
    """Send the log lines of every Kafka client made from now on to ``logger`` instead of stderr.

    librdkafka writes its own lines (``%3|…|FAIL|…``) straight to stderr; a CLI command routes
    them to a quiet logger so that a user sees the command's one line, not a page of retries.
    """
    _client_logger[:] = [throttled(logger)]


def check_reach_with(check: Callable[[KafkaConfig], None] | None) -> None:
    """Call ``check(config)`` before every Kafka client configuration is handed out (None: stop checking).

    The ``epochq`` program's one-shot commands install ``engine.runtime.reach.check_reachable``,
    so an unreachable broker is one line naming the address within seconds, not a client's
    metadata timeout; engines never do (they wait for a broker that restarts).
    """
    _reach_check[:] = [check] if check is not None else []
"""A librdkafka configuration, as confluent-kafka's clients take it."""
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"]
SaslMechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


def default_state_dir() -> Path:
    """Where projections live unless told otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "epochq" / "projections"


class Settings(BaseModel):
    """Connection, naming and storage settings shared by the engine, the client and the CLI."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str | None = Field(default=None, description="Kafka bootstrap servers")
    namespace: str = Field(default="epochq", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")
    state_dir: Path = Field(default_factory=default_state_dir)
    owner_id: str | None = Field(default=None, description="This engine instance's name")
    max_payload_bytes: int = Field(default=512 * 1024, gt=0, le=768 * 1024,
                                   description="largest job payload (and handler result) accepted; at most 768 KiB, "
                                               "so every event fits Kafka's default 1 MB record limit")
    dedup_window_s: int = Field(default=7 * 86_400, ge=0,
                                description="seconds an ended job's id (and idempotency key) is remembered by the "
                                            "owners of a namespace after it completed or was cancelled; 0: for ever. "
                                            "Every engine of a namespace uses the same value")
    security_protocol: SecurityProtocol = Field(default="PLAINTEXT", description="how clients reach the brokers")
    sasl_mechanism: SaslMechanism = Field(default="SCRAM-SHA-512", description="SASL mechanism (SASL_* protocols)")
    sasl_username: str | None = Field(default=None, description="SASL user (SASL_* protocols)")
    sasl_password: SecretStr | None = Field(default=None, description="SASL password; never printed")
    ssl_ca_file: Path | None = Field(default=None, description="PEM file of the CA that signed the brokers' certs")
    ssl_cert_file: Path | None = Field(default=None, description="PEM client certificate (mTLS)")
    ssl_key_file: Path | None = Field(default=None, description="PEM private key of the client certificate (mTLS)")
    ssl_key_password: SecretStr | None = Field(default=None, description="password of ssl_key_file, if encrypted")
    signing_key_file: Path | None = Field(default=None, description="a client's Ed25519 private key (PEM): it signs "
                                                                    "the commands it sends for its tenant")
    engine_key_file: Path | None = Field(default=None, description="the engines' shared Ed25519 private key (PEM): "
                                                                   "it signs the commands engines send themselves")
    require_signatures: bool = Field(default=False, description="engines refuse commands that do not prove "
                                                                "their tenant with a signature")
    operator_key_file: Path | None = Field(default=None, description="an operator's Ed25519 private key (PEM): it "
                                                                     "signs every command its client sends, with "
                                                                     "an operator's powers (docs/security.md)")
    operator_public_key_file: Path | None = Field(default=None, description="the operators' Ed25519 public key(s) "
                                                                            "(PEM, one or two): engines grant "
                                                                            "commands they sign an operator's powers")
    worker_key_file: Path | None = Field(default=None, description="a remote worker's Ed25519 private key (PEM), its "
                                                                   "pool's: it signs the worker's results")
    pool_public_keys_dir: Path | None = Field(default=None, description="a directory of <pool>.pem files, each a "
                                              "pool's Ed25519 public key(s) (one or two): engines accept a result "
                                              "its pool's key signs")

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap_has_port(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port...], got {value!r}")
        return value

    @model_validator(mode="after")
    def _security_is_complete(self) -> Settings:
        """SASL needs a user and a password; a client certificate needs its key; TLS settings need TLS."""
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and not (self.sasl_username and self.sasl_password):
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_username and sasl_password")
        if not sasl and (self.sasl_username or self.sasl_password):
            raise ValueError("sasl_username/sasl_password need security_protocol SASL_SSL or SASL_PLAINTEXT")
        if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
            raise ValueError("ssl_cert_file and ssl_key_file go together (mTLS)")
        tls_files = (self.ssl_ca_file, self.ssl_cert_file, self.ssl_key_file)
        if not self.security_protocol.endswith("SSL") and any(f is not None for f in tls_files):
            raise ValueError("ssl_* files need security_protocol SSL or SASL_SSL")
        return self

    def kafka_config(self) -> KafkaConfig:
        """The librdkafka settings every client of epochq starts from: the brokers and how to authenticate.

        The one place security reaches a client config; the secrets stay out of ``repr`` and logs.
        """
        conf: KafkaConfig = {"bootstrap.servers": self.require_bootstrap(), "security.protocol": self.security_protocol}
        for check in _reach_check:
            check(conf)
        if self.security_protocol.startswith("SASL_") and self.sasl_password is not None:
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": str(self.sasl_username),
                         "sasl.password": self.sasl_password.get_secret_value()})
        optional = {"ssl.ca.location": self.ssl_ca_file, "ssl.certificate.location": self.ssl_cert_file,
                    "ssl.key.location": self.ssl_key_file}
        conf.update({key: str(path) for key, path in optional.items() if path is not None})
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        conf["logger"] = _client_logger[0]
        conf["error_cb"] = error_callback(_client_logger[0])
        return conf

    def security_summary(self) -> str:
        """How this process authenticates, for logs and status lines: never a secret."""
        if self.security_protocol.startswith("SASL_"):
            return f"{self.security_protocol} {self.sasl_mechanism} as {self.sasl_username}"
        if self.ssl_cert_file is not None:
            return f"{self.security_protocol} with client certificate {self.ssl_cert_file}"
        return self.security_protocol

    @property
    def commands_topic(self) -> str:
        """The topic services write commands to."""
        return f"{self.namespace}.commands"

    @property
    def events_topic(self) -> str:
        """The topic only partition owners write events to: the audit history."""
        return f"{self.namespace}.events"

    @property
    def tenants_topic(self) -> str:
        """The compacted topic of tenant configuration."""
        return f"{self.namespace}.tenants"

    @property
    def schemas_topic(self) -> str:
        """``<ns>.schemas``: every writer schema of the namespace's topics, by fingerprint (compacted)."""
        return f"{self.namespace}.schemas"

    def require_bootstrap(self) -> str:
        """The bootstrap address: configured, or the running local broker's."""
        if self.bootstrap:
            return self.bootstrap
        from engine.broker import bootstrap_from_state, secure_dir_from_state

        found = bootstrap_from_state()
        if not found:
            raise ConfigError(
                "bootstrap: EPOCHQ_BOOTSTRAP is not set and no local broker is running "
                "(start one with `epochq broker start`, or pass --bootstrap HOST:PORT)"
            )
        secure = secure_dir_from_state()
        if secure is not None and self.security_protocol == "PLAINTEXT":
            raise ConfigError(f"security_protocol: the local broker is secure (SASL_SSL); load a user's settings "
                              f"first, e.g. `set -a; . {secure / 'users' / 'admin.env'}; set +a` (docs/security.md)")
        return found


def load_settings(**overrides: Any) -> Settings:
    """Settings from flags (``overrides``, ``None`` meaning unset) over ``EPOCHQ_*`` over defaults."""
    values: dict[str, Any] = {}
    for name in ENV_FIELDS:
        env = os.environ.get(ENV_PREFIX + name.upper())
        if env not in (None, ""):
            values[name] = env
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**values)
    except ValidationError as e:
        raise ConfigError(_describe(e)) from e


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    name = ".".join(str(p) for p in first["loc"]) or "settings"
    if name == "settings":  # a rule across settings: its input is every value, passwords too
        return f"invalid settings: {first['msg'].removeprefix('Value error, ')}"
    env = ENV_PREFIX + name.upper() if name in ENV_FIELDS else name
    shown = "" if "password" in name else f" (got {first.get('input')!r})"
    return f"invalid setting {name} ({env}): {first['msg']}{shown}"
