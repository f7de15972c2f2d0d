"""The chart's Argo CD health checks (Lua), run with a real Lua interpreter (lupa) against
statuses the operator writes, as Argo CD runs them: the object in the global ``obj``, the
script's return value a table with ``status`` and ``message``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

lupa = pytest.importorskip("lupa")

ARGOCD = Path(__file__).resolve().parents[2] / "charts" / "sparkglass" / "argocd"


def health(script: str, obj: dict[str, Any]) -> tuple[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)

    def table(value: Any) -> Any:
        if isinstance(value, dict):
            return lua.table_from({k: table(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([table(v) for v in value])
        return value

    lua.globals().obj = table(obj)
    result = lua.execute((ARGOCD / script).read_text())
    return str(result["status"]), str(result["message"])


def app(
    state: str | None, *, generation: int = 1, observed: int = 1, **extra: Any
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "SparkApplication",
        "metadata": {"name": "flights", "generation": generation},
        "spec": extra.pop("spec", {}),
    }
    if state is not None:
        obj["status"] = {
            "applicationState": {"state": state, **extra},
            "observedGeneration": observed,
        }
    return obj


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("RUNNING", "Healthy"),
        ("COMPLETED", "Healthy"),
        ("", "Progressing"),
        ("SUBMITTED", "Progressing"),
        ("PENDING_RERUN", "Progressing"),
        ("SUCCEEDING", "Progressing"),
        ("INVALIDATING", "Progressing"),
        ("FAILING", "Degraded"),
        ("FAILED", "Degraded"),
        ("SUBMISSION_FAILED", "Degraded"),
        ("SOMETHING_NEW", "Unknown"),
    ],
)
def test_sparkapplication_health_follows_the_application_state(state: str, expected: str) -> None:
    status, message = health("sparkapplication-health.lua", app(state))
    assert status == expected
    assert message


def test_sparkapplication_failure_message_is_the_operators_error_message() -> None:
    status, message = health(
        "sparkapplication-health.lua",
        app("SUBMISSION_FAILED", errorMessage="driver image: ErrImagePull"),
    )
    assert (status, message) == ("Degraded", "driver image: ErrImagePull")


def test_sparkapplication_without_status_or_with_a_stale_one_is_progressing() -> None:
    assert health("sparkapplication-health.lua", app(None))[0] == "Progressing"
    # A spec edit the operator has not acted on yet: the old RUNNING says nothing about it.
    stale = app("RUNNING", generation=3, observed=2)
    assert health("sparkapplication-health.lua", stale)[0] == "Progressing"


def test_suspended_sparkapplication_is_suspended() -> None:
    obj = app("RUNNING", spec={"suspend": True})
    assert health("sparkapplication-health.lua", obj)[0] == "Suspended"
    # The state the operator writes once it deleted the driver.
    assert health("sparkapplication-health.lua", app("SUSPENDED"))[0] == "Suspended"


def sample(phase: str | None, message: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "DataSample", "metadata": {"name": "s", "generation": 1}}
    if phase is not None:
        obj["status"] = {"phase": phase, "message": message}
    return obj


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("Complete", "Healthy"),
        ("NoData", "Healthy"),
        ("Disabled", "Healthy"),
        ("Partial", "Healthy"),
        ("Failed", "Degraded"),
        ("Abandoned", "Degraded"),
        ("Pending", "Progressing"),
        ("InProgress", "Progressing"),
        ("Exotic", "Unknown"),
    ],
)
def test_datasample_health_follows_the_phase(phase: str, expected: str) -> None:
    assert health("datasample-health.lua", sample(phase, "why"))[0] == expected


def test_datasample_messages_reach_argocd() -> None:
    assert health("datasample-health.lua", sample("Failed", "unknown vertex 'x'")) == (
        "Degraded",
        "unknown vertex 'x'",
    )
    assert health("datasample-health.lua", sample("Partial", "1 of 2 subtasks")) == (
        "Healthy",
        "Partial result: 1 of 2 subtasks",
    )
    assert health("datasample-health.lua", sample(None))[0] == "Progressing"


def test_every_phase_the_operator_writes_has_a_health() -> None:
    """The Lua knows every final phase the operator can write (a new phase must be mapped)."""
    from sparkglass.operator.datasample import FINAL, IN_PROGRESS, PENDING

    for phase in sorted(FINAL | {PENDING, IN_PROGRESS}):
        assert health("datasample-health.lua", sample(phase, "m"))[0] != "Unknown", phase


def test_every_application_state_the_operator_writes_has_a_health() -> None:
    from sparkglass.operator.driver_state import AppState

    for state in AppState:
        if state is AppState.UNKNOWN:
            continue
        assert health("sparkapplication-health.lua", app(state.value))[0] != "Unknown", state
