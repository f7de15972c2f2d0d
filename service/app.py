"""The FastAPI application factory (OpenAPI at ``/docs``, the page at ``/ui/``).

``create_app(settings)`` opens the store (applying migrations), builds the authenticator,
the round executor and the coordinator for the configured modes, and wires the routers.
Background threads (audit flusher, retention sweep) run inside the app's lifespan.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from kubernetes import client
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkglass import __version__

from . import foreign_apps
from .audit import AuditWriter, audit_denials
from .auth import Authenticator
from .auth.kubernetes import KubernetesAuthenticator
from .auth.local import LocalAuthenticator
from .catalog import Forgotten, KubernetesCatalog
from .content_coding import NegotiatedGZipMiddleware
from .driver_trust import DriverTrust
from .execution import RoundExecutor
from .execution.kubernetes import DataSampleExecutor, store_lookup
from .execution.local import LocalDriverExecutor
from .fresh_poll import FreshPollMiddleware
from .kube import make_api_client
from .lookups import forget_application
from .metrics import ServiceMetrics
from .pipeline_progress import PipelineProgressReader
from .result_body import GZIP_LEVEL
from .retention import RetentionSweeper
from .routers import applications, audit, operations, progress, results, samples
from .schemas import FieldError, ValidationErrorBody
from .security import (
    AuthFailureLimiter,
    BodyLimit,
    BodyLimitMiddleware,
    SecurityHeadersMiddleware,
)
from .settings import AuthMode, ExecutionMode, Settings
from .shared_rounds import SharedRounds
from .state import ServiceState
from .store import open_store, repository
from .store.cipher import SETTING as STORE_KEY_SETTING
from .store.cipher import attach, store_cipher

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"


def _validation_message(errors: list[dict[str, Any]]) -> str:
    """One readable line naming each bad parameter and its allowed range."""
    parts = []
    for err in errors:
        loc = err.get("loc", ())
        name = str(loc[-1]) if loc else "request"
        bounds = samples.PARAMETER_RANGES.get(name)
        got = err.get("input")
        if bounds is not None:
            parts.append(f"{name} must be an integer in {bounds[0]}..{bounds[1]}, got {got!r}")
        else:
            parts.append(f"{name}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


async def _on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    """The 422 body, :class:`~.schemas.ValidationErrorBody` (what the OpenAPI document says,
    :func:`_document_validation_errors`). The value given is left out of ``errors``
    (``input``, and ``ctx``, which may quote it): it may be a token or a URL with a password,
    and the caller has it."""
    assert isinstance(exc, RequestValidationError)
    raw = list(exc.errors())
    body = ValidationErrorBody(
        detail=_validation_message(raw),
        errors=[
            FieldError(
                loc=[p if isinstance(p, int) else str(p) for p in e.get("loc", ())],
                msg=str(e.get("msg", "invalid")),
                type=str(e.get("type", "value_error")),
            )
            for e in raw
        ],
    )
    return JSONResponse(status_code=422, content=body.model_dump(mode="json"))


#: The OpenAPI name of the 422 body.
VALIDATION_ERROR_SCHEMA = "ValidationErrorBody"


def _document_validation_errors(app: FastAPI) -> None:
    """Make every 422 the OpenAPI document lists the body :func:`_on_validation_error`
    serves. FastAPI documents its own default (``{"detail": [...]}``) wherever a route takes
    parameters; this handler answers another shape."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        components = document.setdefault("components", {}).setdefault("schemas", {})
        body = ValidationErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(body.pop("$defs", {}))
        components[VALIDATION_ERROR_SCHEMA] = body
        for path_item in document.get("paths", {}).values():
            for operation in path_item.values():
                responses = operation.get("responses", {})
                if "422" in responses:
                    responses["422"] = {
                        "description": "A parameter or the body is invalid: each is named "
                        "with its allowed range",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "$ref": f"#/components/schemas/{VALIDATION_ERROR_SCHEMA}"
                                }
                            }
                        },
                    }
        # FastAPI's own 422 models, now referenced by nothing.
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


class _MetricsMiddleware:
    """ASGI middleware adapter for :meth:`ServiceMetrics.asgi` (``app.add_middleware``)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self._app = metrics.asgi(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def build_state(
    settings: Settings,
    *,
    authenticator: Authenticator | None = None,
    executor: RoundExecutor | None = None,
) -> ServiceState:
    """Open the store and build the per-mode components (overridable for tests)."""
    sessions = open_store(settings.resolved_database_url)
    _encrypt_driver_tokens(sessions, settings)
    metrics = ServiceMetrics()
    api_client = None
    needs_kube = (
        settings.auth_mode is AuthMode.KUBERNETES
        or settings.execution_mode is ExecutionMode.KUBERNETES
    )
    if needs_kube and (
        authenticator is None
        or executor is None
        or settings.execution_mode is ExecutionMode.KUBERNETES
    ):
        api_client = make_api_client(settings)
    if authenticator is None:
        if settings.auth_mode is AuthMode.KUBERNETES:
            assert api_client is not None
            authenticator = KubernetesAuthenticator(api_client, settings)
        else:
            authenticator = LocalAuthenticator(sessions, settings.tokens_file)
    catalog = None
    trust = DriverTrust()
    if executor is None:
        if settings.execution_mode is ExecutionMode.KUBERNETES:
            assert api_client is not None
            executor = DataSampleExecutor(
                api_client,
                store_lookup(sessions),
                ttl_seconds=settings.datasample_ttl_seconds,
            )
        else:
            executor = LocalDriverExecutor(trust=trust)
    if settings.execution_mode is ExecutionMode.KUBERNETES and api_client is not None:
        foreign = tuple(
            kind
            for on, kind in (
                (settings.kubeflow_applications, foreign_apps.KUBEFLOW),
                (settings.apache_spark_applications, foreign_apps.APACHE_SPARK),
            )
            if on
        )
        catalog = KubernetesCatalog(
            api_client, sessions, max_names=settings.catalog_max_names, foreign=foreign
        )
    coordinator = SharedRounds(sessions, executor, settings, metrics)
    state = ServiceState(
        settings=settings,
        sessions=sessions,
        authenticator=authenticator,
        coordinator=coordinator,
        audit=AuditWriter(
            sessions,
            settings.audit_flush_seconds,
            settings.audit_buffer_events,
            registry=metrics.registry,
            read_window_seconds=settings.audit_read_window_seconds,
            read_buffer_bytes=settings.audit_read_buffer_bytes,
        ),
        metrics=metrics,
        catalog=catalog,
        datasamples=None if api_client is None else client.CustomObjectsApi(api_client),
        driver_trust=trust,
        progress=PipelineProgressReader(published=catalog.progress if catalog else None),
    )
    if catalog is not None:
        catalog.forgotten = functools.partial(_forget_row, state)
    return state


def _forget_row(state: ServiceState, row: Forgotten) -> None:
    forget_application(state, row.application_id, row.namespace, row.name)


def _encrypt_driver_tokens(sessions: sessionmaker[Session], settings: Settings) -> None:
    """Attach the store's cipher to ``sessions`` and encrypt driver tokens an older version
    stored in plaintext (or under a key no longer first): done here rather than in a
    migration, because migrations do not hold the key."""
    key = settings.store_key.get_secret_value() if settings.store_key is not None else None
    cipher = store_cipher(key, settings.resolved_database_url)
    attach(sessions, cipher)
    with sessions.begin() as session:
        rewritten, left = repository.encrypt_driver_tokens(session)
    if rewritten:
        log.info("encrypted %d stored driver tokens with the store key", rewritten)
    if left:
        log.warning(
            "%d stored driver tokens could not be encrypted or opened: set %s (see "
            "docs/security.md)",
            left,
            STORE_KEY_SETTING,
        )


def create_app(
    settings: Settings | None = None,
    *,
    authenticator: Authenticator | None = None,
    executor: RoundExecutor | None = None,
) -> FastAPI:
    """The service as an ASGI app. ``authenticator``/``executor`` replace the per-mode
    defaults (tests). Raises whatever the store raises when the database is unreachable."""
    settings = settings or Settings()
    state = build_state(settings, authenticator=authenticator, executor=executor)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sweeper = RetentionSweeper(
            state.sessions, settings.retention_seconds, settings.retention_check_seconds
        )
        state.audit.start()
        sweeper.start()
        try:
            yield
        finally:
            try:
                sweeper.stop()
                state.coordinator.close()
                state.progress.close()
            finally:
                state.audit.stop()  # the open read windows are written whatever failed above

    app = FastAPI(
        title="sparkglass",
        version=__version__,
        description="Sample the records leaving any step of a running Spark pipeline.",
        lifespan=lifespan,
        # Swagger UI loads its scripts from a CDN: off unless asked for; ReDoc never.
        docs_url="/docs" if settings.docs_enabled else None,
        redoc_url=None,
    )
    app.state.sparkglass = state
    if not settings.docs_enabled:

        @app.get("/docs", include_in_schema=False, status_code=404)
        def docs_off() -> JSONResponse:
            # A bare 404 left users guessing whether the service was the right one.
            return JSONResponse(
                {
                    "detail": "the API docs page is off (Swagger UI loads its scripts from a "
                    "CDN): set SPARKGLASS_DOCS_ENABLED=true to serve it; the schema is at "
                    "/openapi.json"
                },
                status_code=404,
            )

    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, audit_denials)
    # Outermost last: metrics see every answer, headers go on 413/429 too, and the body
    # limit wraps the application's own receive.
    # Innermost: a data-sample body (~100 KB of JSON for the demo) shrinks about tenfold;
    # 304s and small answers are sent as they are.
    app.add_middleware(
        NegotiatedGZipMiddleware,
        minimum_size=settings.gzip_min_bytes,
        compresslevel=GZIP_LEVEL,
    )
    # Inside the security middlewares: a fresh, unchanged poll answered 304 from memory
    # (fresh_poll.py); everything else goes on to the routes.
    app.add_middleware(FreshPollMiddleware, state=state, routes=samples.router.routes)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        routes=(
            BodyLimit(
                "PUT",
                re.compile(results.RESULT_PATH),
                settings.max_result_bytes,
                "max_result_bytes",
            ),
        ),
    )
    app.add_middleware(
        AuthFailureLimiter,
        limit=settings.auth_failure_limit,
        window_s=settings.auth_failure_window_seconds,
        token_limit=settings.auth_failure_token_limit,
        known_s=settings.auth_known_token_seconds,
        trusted_proxies=settings.trusted_proxy_networks,
    )
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(_MetricsMiddleware, metrics=state.metrics)
    app.include_router(applications.router)
    app.include_router(samples.router)
    app.include_router(progress.router)
    app.include_router(audit.router)
    app.include_router(operations.router)
    app.include_router(results.router)
    _document_validation_errors(app)
    app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="ui")
    return app
