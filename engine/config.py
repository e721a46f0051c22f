"""Settings of an epochq process: the one place that reads ``EPOCHQ_*`` variables.

Flags override the environment, the environment overrides defaults. Every value is typed
and validated; a bad one raises ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engine.errors import ConfigError

ENV_PREFIX = "EPOCHQ_"
ENV_FIELDS = ("bootstrap", "namespace", "state_dir", "owner_id", "max_payload_bytes")


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

    def require_bootstrap(self) -> str:
        """The bootstrap address: configured, or the running local broker's."""
        if self.bootstrap:
            return self.bootstrap
        from engine.broker import bootstrap_from_state

        found = bootstrap_from_state()
        if not found:
            raise ConfigError(
                "bootstrap: EPOCHQ_BOOTSTRAP is not set and no local broker is running "
                "(start one with `epochq broker start`, or pass --bootstrap HOST:PORT)"
            )
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
    env = ENV_PREFIX + name.upper() if name in ENV_FIELDS else name
    return f"invalid setting {name} ({env}): {first['msg']} (got {first.get('input')!r})"
