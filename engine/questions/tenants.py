"""The tenants table as it stands: each tenant's weight, queue limit, product and keys (``<ns>.tenants``)."""

from __future__ import annotations

from engine.config import Settings
from engine.contract.messages import TenantConfig
from engine.runtime.tenants import LOAD_TIMEOUT_S, TenantDirectory


def tenant_table(settings: Settings, timeout: float = LOAD_TIMEOUT_S) -> dict[str, TenantConfig]:
    """Every tenant configured, read whole from the compacted tenants topic (within ``timeout`` s)."""
    with TenantDirectory(settings, timeout=timeout) as directory:
        return directory.all()
