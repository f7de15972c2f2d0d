"""From the driver Pod to ``applicationState.state``, and the restart policy's decisions.

Pure functions (no API calls) so every transition is unit-testable. State names are the
spark-operator's (``sparkoperator.k8s.io/v1beta2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .specs import RestartPolicy, RestartType

#: Longest wait before a re-run, seconds.
MAX_BACKOFF_SECONDS = 600.0
#: Re-runs allowed under OnFailure when the spec leaves the count unset.
DEFAULT_RETRIES = 3


class AppState(StrEnum):
    NEW = ""
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBMISSION_FAILED = "SUBMISSION_FAILED"
    PENDING_RERUN = "PENDING_RERUN"
    INVALIDATING = "INVALIDATING"
    SUCCEEDING = "SUCCEEDING"
    FAILING = "FAILING"
    SUSPENDED = "SUSPENDED"  # spec.suspend: no driver Pod until it is false again
    UNKNOWN = "UNKNOWN"


#: States in which the application is over (until its spec changes).
TERMINAL = frozenset({AppState.COMPLETED, AppState.FAILED, AppState.SUBMISSION_FAILED})
#: States in which a driver Pod should exist and be watched.
ACTIVE = frozenset({AppState.SUBMITTED, AppState.RUNNING, AppState.UNKNOWN})


def state_of(pod: dict[str, Any]) -> AppState:
    """The state a driver Pod's ``status.phase`` means (ended Pods: SUCCEEDING / FAILING)."""
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return {
        "Pending": AppState.SUBMITTED,
        "Running": AppState.RUNNING,
        "Succeeded": AppState.SUCCEEDING,
        "Failed": AppState.FAILING,
    }.get(phase, AppState.UNKNOWN)


def run_end(pod: dict[str, Any] | None) -> str | None:
    """Why the driver run a round was opened on is over, judged by the driver Pod alone, or
    ``None`` while that Pod may still be the run (``Running``, or ``Unknown``: a node out of
    touch). A round lives only in its driver run's memory, so once this is not None the
    round is lost, whether or not the SparkApplication pass has recorded the end yet.

    A Pod that is ``Pending`` here is a later run's: a run's Pod never returns to Pending.
    """
    if pod is None:
        return "the driver Pod is gone"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "the driver Pod is being deleted"
    state = state_of(pod)
    if state in (AppState.RUNNING, AppState.UNKNOWN):
        return None
    if state is AppState.FAILING:
        return f"the driver Pod failed: {failure_message(pod)}"
    if state is AppState.SUCCEEDING:
        return "the driver Pod exited"
    return "the driver Pod is a new run's"


def failure_message(pod: dict[str, Any]) -> str:
    """Why the driver Pod failed, from its container status (or the Pod's own reason)."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            parts = [f"driver container exited with code {term.get('exitCode', '?')}"]
            if term.get("reason"):
                parts.append(f"reason {term['reason']}")
            if term.get("message"):
                parts.append(str(term["message"])[:1000])
            return "; ".join(parts)
    return str(status.get("message") or status.get("reason") or "driver Pod failed")


#: Container waiting reasons after which the kubelet will not start the driver without a
#: change elsewhere (an image name, a registry credential, a Secret or ConfigMap): waiting
#: out the start timeout would only hide them.
FATAL_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def _containers(status: dict[str, Any]) -> list[dict[str, Any]]:
    return list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )


def start_failure(pod: dict[str, Any]) -> str | None:
    """Why a ``Pending`` driver Pod can never start by itself, or None.

    A container waiting with one of :data:`FATAL_WAITING_REASONS` (init containers too);
    the message names the container, the reason and the kubelet's message (at most 1,000
    characters). Unschedulable is not fatal here: see :func:`start_waiting`.
    """
    status = pod.get("status") or {}
    if (status.get("phase") or "Pending") != "Pending":
        return None
    for cs in _containers(status):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in FATAL_WAITING_REASONS:
            detail = str(waiting.get("message") or "")[:1000]
            name = cs.get("name") or "driver"
            return f"container {name!r} cannot start: {reason}" + (f": {detail}" if detail else "")
    return None


def start_waiting(pod: dict[str, Any]) -> str | None:
    """What a ``Pending`` driver Pod waits for, from the scheduler or the kubelet, or None.

    ``Unschedulable`` (condition ``PodScheduled`` False) and any container waiting reason other
    than ``ContainerCreating``/``PodInitializing``. Shown while the Pod waits and used as the
    reason when :func:`start_timed_out` ends the wait (an autoscaler may still add a node, so
    Unschedulable alone does not fail the start).
    """
    status = pod.get("status") or {}
    if (status.get("phase") or "Pending") != "Pending":
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = cond.get("reason") or "not scheduled"
            message = str(cond.get("message") or "")[:1000]
            return f"{reason}: {message}" if message else str(reason)
    for cs in _containers(status):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason and reason not in ("ContainerCreating", "PodInitializing"):
            message = str(waiting.get("message") or "")[:1000]
            return f"{reason}: {message}" if message else str(reason)
    return None


def start_timed_out(submitted_at: float, now: float, timeout_seconds: float) -> bool:
    """Whether a driver Pod created at ``submitted_at`` (epoch seconds) has waited longer
    than ``timeout_seconds`` (``spec.startTimeoutSeconds``) to run."""
    return submitted_at > 0 and now - submitted_at > timeout_seconds


@dataclass(frozen=True)
class RerunDecision:
    """Whether to re-run the driver, and after how many seconds."""

    rerun: bool
    delay: float = 0.0


def backoff(interval: float, restarts: int) -> float:
    """Seconds before re-run number ``restarts + 1``: interval x 2^restarts, capped."""
    return float(min(MAX_BACKOFF_SECONDS, interval * (2 ** min(restarts, 20))))


def after_end(policy: RestartPolicy, *, succeeded: bool, restarts: int) -> RerunDecision:
    """What to do when the driver ended (``restarts`` re-runs done since the spec changed)."""
    if policy.type is RestartType.ALWAYS:
        return RerunDecision(True, backoff(policy.on_failure_retry_interval, restarts))
    if policy.type is RestartType.ON_FAILURE and not succeeded:
        limit = policy.on_failure_retries
        if restarts < (DEFAULT_RETRIES if limit is None else limit):
            return RerunDecision(True, backoff(policy.on_failure_retry_interval, restarts))
    return RerunDecision(False)


def after_submission_failure(policy: RestartPolicy, *, restarts: int) -> RerunDecision:
    """What to do when the driver Pod could not be created."""
    if policy.type is RestartType.NEVER:
        return RerunDecision(False)
    limit = policy.on_submission_failure_retries
    if restarts < (DEFAULT_RETRIES if limit is None else limit):
        return RerunDecision(True, backoff(policy.on_submission_failure_retry_interval, restarts))
    return RerunDecision(False)
