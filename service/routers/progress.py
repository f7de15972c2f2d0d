"""Live metrics of an application's pipeline (the page's graph refreshes them)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, status

from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics

from ..dependencies import ReaderDep, StateDep
from ..lookups import application_or_404
from ..pipeline_progress import ProgressUnavailable
from ..schemas import ErrorBody
from ..store import repository

router = APIRouter(prefix="/api/v1", tags=["applications"])


@router.get(
    "/namespaces/{namespace}/applications/{application}/progress",
    response_model=PipelineMetrics,
    responses={
        401: {"model": ErrorBody},
        403: {"model": ErrorBody},
        404: {"model": ErrorBody},
        502: {"model": ErrorBody},
    },
)
def get_progress(
    namespace: str,
    application: str,
    state: StateDep,
    principal: ReaderDep,
    history: bool = Query(
        False,
        description="also the last minutes of the metrics (`history`), as the driver keeps "
        "them; local mode only (Kubernetes mode answers `history: null`)",
    ),
) -> PipelineMetrics:
    """The whole pipeline's metrics in one answer (read permission): query state,
    micro-batch count, input and processed rows/s, batch duration, latency, event-time
    watermark and rows in state, and per vertex the rows in the last micro-batch, rows/s and
    rows in all (since the pipeline started), the same figures of the queries that run it,
    and per expectation of the vertex the rows that passed and failed it (last micro-batch and
    in all; ``/metrics`` exports the latest reading). With ``history=true``, their last
    minutes (local mode). Local mode: read from the driver, at most one second old.
    Kubernetes mode: read from the SparkApplication's ``status.progress``, which the operator
    refreshes from the driver every ``--progress-seconds`` (60 s by default) when they changed.

    404 for an unknown application; 502 when the driver cannot be read, or the operator has
    published no metrics (yet), with the reason in ``detail``."""
    app = application_or_404(state, namespace, application, principal=principal)

    def token() -> str | None:
        # Stored encrypted (store key): opened only when the driver is actually asked.
        with state.sessions() as session:
            return repository.driver_token(session, app)

    try:
        metrics = state.progress.read(
            app, state.driver_trust.get(namespace, application), token, history=history
        )
    except ProgressUnavailable as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=str(exc)) from None
    # /metrics exports this latest reading (vertex names and series bounded there).
    vertices = {v.name for v in app.vertices}
    state.metrics.expectations.record(namespace, application, vertices, metrics)
    state.metrics.progress.record(namespace, application, vertices, metrics)
    return metrics
