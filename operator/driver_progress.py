"""A running driver's live pipeline metrics, published in ``SparkApplication.status.progress``.

In Kubernetes execution mode the service holds no driver token (the operator does), so the
page's graph reads the metrics from the application's status. The operator asks the driver
(``GET /api/v1/progress``, through the same owned-objects-only access and pinned TLS as for
rounds: :mod:`.driver_access`) at most every ``progress_seconds`` (operator option
``--progress-seconds``, default 10 s; 0 turns it off) and writes the answer, in the
:class:`~sparkglass.runtime.contract.pipeline_metrics.PipelineMetrics` shape (its
``observedAt``: the driver's clock, ms), plus ``publishedAt`` (RFC 3339, the operator's clock,
when it was read). ``failed`` (a failed query's message) is cut to
:data:`MAX_FAILED_CHARS`; ``vertices`` keeps only the vertices of the pipeline in the
application's spec.

A driver that does not answer costs the reconcile pass at most ``PROGRESS_TIMEOUT_S`` and
leaves the last published metrics in place (their ``observedAt`` says how old they are).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import structlog

from sparkglass.runtime.control.client import AsyncControlClient, ControlError

from .context import OperatorContext
from .driver_access import DriverAccess, driver_access

log = structlog.get_logger(__name__)

#: Per-request timeout towards the driver, seconds: the pass holds the application's lock.
PROGRESS_TIMEOUT_S = 3.0
#: Longest failed-query message kept in status (etcd objects are small; the driver log has
#: the whole exception).
MAX_FAILED_CHARS = 1000


def _published_at(status: dict[str, Any]) -> float:
    text = ((status.get("progress") or {}).get("publishedAt")) or ""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def progress_due(status: dict[str, Any], now: float, interval_s: float) -> bool:
    """Whether the published metrics (``status.progress.publishedAt``) are at least
    ``interval_s`` old at ``now`` (epoch seconds); never when ``interval_s`` is 0."""
    return interval_s > 0 and now - _published_at(status) >= interval_s


async def read_progress(ctx: OperatorContext, app: dict[str, Any]) -> dict[str, Any] | None:
    """The driver's metrics as a status entry, or None when there is none to publish (no
    running driver of the application's own, no token, a refused or untrusted driver, no
    answer). Never raises for the driver's failures; ``ApiError`` from the API server does."""
    access = await driver_access(ctx, app)
    if not isinstance(access, DriverAccess) or access.refusal or not access.token:
        return None
    meta = app["metadata"]
    try:
        async with AsyncControlClient(
            access.endpoint, access.token, timeout_s=PROGRESS_TIMEOUT_S, tls=access.tls
        ) as driver:
            metrics = await driver.progress()
    except (ControlError, ValueError) as exc:
        log.info(
            "driver progress unavailable",
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            reason=type(exc).__name__,
        )
        return None
    entry = metrics.model_dump(mode="json", by_alias=True)
    # The driver is the application's own code: publish only the vertices of the pipeline
    # the spec declares (what the page can draw), so the status stays the pipeline's size
    # whatever names a driver sends.
    declared = {
        str(v.get("name"))
        for v in ((app.get("spec") or {}).get("pipeline") or {}).get("vertices") or []
        if isinstance(v, dict)
    }
    entry["vertices"] = {k: v for k, v in (entry.get("vertices") or {}).items() if k in declared}
    if entry.get("failed"):
        entry["failed"] = str(entry["failed"])[:MAX_FAILED_CHARS]
    entry["publishedAt"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return entry
