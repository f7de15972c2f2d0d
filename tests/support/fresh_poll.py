"""Fixtures of the fresh poll's fast-path tests: which polls the route itself answered
(``route_calls``), the route layer's caches held for a test's length (``long_decisions``),
and the audit events a service records (:func:`recorded_audit`)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkglass.service import dependencies
from sparkglass.service.routers import samples
from sparkglass.service.state import ServiceState
from sparkglass.service.store.repository import AuditRecord


@pytest.fixture
def route_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The namespaces of the polls the route answered (the fast path answers without it)."""
    calls: list[str] = []
    real = samples.authorized_principal

    async def counting(*args: Any) -> Any:
        calls.append(args[2])
        return await real(*args)

    monkeypatch.setattr(samples, "authorized_principal", counting)
    return calls


@pytest.fixture
def long_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The route layer's caches hold for the test's length: a slow machine must not turn
    a fast-path poll into a slow one between two requests."""
    monkeypatch.setattr(dependencies, "DECISION_TTL_S", 60.0)


def recorded_audit(state: ServiceState) -> list[AuditRecord]:
    """Every audit event ``state`` records from now on (each still recorded as before)."""
    records: list[AuditRecord] = []
    real = state.audit.record

    def recording(event: AuditRecord) -> None:
        records.append(event)
        real(event)

    state.audit.record = recording  # type: ignore[method-assign]
    return records
