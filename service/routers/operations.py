"""Operations endpoints: health, Prometheus metrics, and the web page's entry redirect."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..dependencies import StateDep

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: ``{"status": "ok"}``."""
    return {"status": "ok"}


@router.get("/metrics", response_class=Response)
def metrics(state: StateDep) -> Response:
    """Prometheus text format (rounds by status, round latency, request counts/latency)."""
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/", include_in_schema=False)
def index() -> RedirectResponse:
    """The Data Sample page."""
    return RedirectResponse("/ui/")
