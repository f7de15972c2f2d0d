"""Where applications come from.

- Local mode: applications are registered (by the demo, ``sparkglass serve --driver`` or
  ``PUT /api/v1/namespaces/local/applications/{app}``) with their driver control URL and
  token; the pipeline and sampling settings are read from the driver.
- Kubernetes mode: applications are ``SparkApplication`` resources; the vertices come from
  their ``spec.pipeline`` and are mirrored into the store. The ``status`` is never a source
  of what exists or where anything is: anyone granted ``patch sparkapplications/status``
  can write it (review item A9). Only ``status.progress`` is read, as display data (numbers
  and the vertices of the spec's pipeline; see :func:`published_progress`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker
from urllib3.exceptions import HTTPError

from sparkglass.crds.sparkapplication import PipelineSpec
from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.control.client import ControlClient, ControlError, ControlTLS

from .graph import graph_of
from .store import repository
from .store.orm import Application

log = logging.getLogger(__name__)


class CatalogError(Exception):
    """The application could not be read from its source (message safe to show)."""


def fetch_driver_pipeline(
    driver_url: str,
    token: str,
    *,
    http: httpx.Client | None = None,
    tls: ControlTLS | None = None,
) -> tuple[PipelineDescription, dict[str, Any]]:
    """``GET /api/v1/pipeline`` and ``/api/v1/settings`` of a driver control endpoint.

    Returns the pipeline and the sampling settings as the driver sent them (``{}`` when the
    driver answers the settings with an error). ``http`` is a pool to use (not closed; not
    with ``tls``, the certificate to pin for an ``https://`` driver). Raises
    :class:`CatalogError` when the driver is unreachable, its certificate fails
    verification (then no token was sent), or it answers badly.
    """
    with ControlClient(driver_url, token, http=None if tls else http, tls=tls) as driver:
        try:
            return driver.pipeline(), _settings_or_empty(driver)
        except ControlError as exc:
            raise CatalogError(_failure(driver.base_url, exc)) from None


def _settings_or_empty(driver: ControlClient) -> dict[str, Any]:
    try:
        return driver.settings()
    except ControlError as exc:
        if exc.status is None:
            raise
        # The pipeline is what registering needs; the settings are shown when readable.
        return {}


def _failure(base: str, exc: ControlError) -> str:
    if exc.status is None:
        return f"driver at {base}: {exc}"
    if 200 <= exc.status < 300:
        return f"driver at {base} sent an invalid pipeline: {exc}"
    return f"driver at {base} answered HTTP {exc.status}"


def register_local_application(
    sessions: sessionmaker[Session],
    name: str,
    driver_url: str,
    driver_token: str,
    *,
    namespace: str = "local",
    description: PipelineDescription | None = None,
    sampling: dict[str, Any] | None = None,
    tls: ControlTLS | None = None,
) -> None:
    """Store a local application; reads its pipeline from the driver unless given
    (``tls``: the certificate to pin for an ``https://`` driver)."""
    if description is None:
        description, sampling = fetch_driver_pipeline(driver_url, driver_token, tls=tls)
    graph = graph_of(description)
    with sessions.begin() as session:
        repository.upsert_application(
            session,
            namespace,
            name,
            description=description,
            edges=graph.edges,
            vertex_plan=graph.vertex_plan,
            plan_error=graph.error,
            driver_url=driver_url,
            driver_token=driver_token,
            sampling=sampling or {},
        )


SPARKAPP_GROUP = "sparkglass.io"
SPARKAPP_VERSION = "v1alpha1"
SPARKAPP_PLURAL = "sparkapplications"


def description_from_sparkapplication(obj: dict[str, Any]) -> PipelineDescription:
    """The pipeline of a ``SparkApplication``: ``spec.pipeline``, parsed with the resource's
    own model (:class:`sparkglass.crds.sparkapplication.PipelineSpec`, what the CRD and the
    operator validate). ``status.vertices`` is not read: it is the operator's view of the same
    spec, and anyone who may patch the status could plant vertices there. Raises
    ``pydantic.ValidationError`` for a pipeline the model refuses."""
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    return PipelineSpec.model_validate(spec.get("pipeline") or {}).description(name)


#: Longest ``failed`` text of published progress passed on (the operator writes
#: ``"<sink>: <exception>"``; the page shows it).
MAX_FAILED_CHARS = 1024


def published_progress(obj: dict[str, Any]) -> dict[str, Any] | None:
    """``status.progress`` of a SparkApplication as display data, or ``None`` when it has
    none: the operator copies the driver's metrics there, but anyone who may patch the
    status can write it too. So only the spec's pipeline vertices are kept (a planted name
    does not reach the page), and ``failed`` is cut to :data:`MAX_FAILED_CHARS`; the shape
    is checked by the reader (:class:`~sparkglass.runtime.contract.pipeline_metrics.PipelineMetrics`
    keeps numbers and known fields only)."""
    progress = (obj.get("status") or {}).get("progress")
    if not isinstance(progress, dict):
        return None
    names = {
        v["name"]
        for v in ((obj.get("spec") or {}).get("pipeline") or {}).get("vertices") or []
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    }
    shown = dict(progress)
    vertices = progress.get("vertices")
    shown["vertices"] = (
        {k: v for k, v in vertices.items() if k in names} if isinstance(vertices, dict) else {}
    )
    failed = progress.get("failed")
    if isinstance(failed, str) and len(failed) > MAX_FAILED_CHARS:
        shown["failed"] = failed[: MAX_FAILED_CHARS - 1] + "…"
    return shown


class KubernetesCatalog:
    """Mirrors ``SparkApplication`` resources into the store, re-reading each at most every
    ``ttl_s`` seconds (the API server is the source of truth).

    It remembers when it last read at most ``max_names`` (namespace, name) keys, the least
    recently asked forgotten first: callers choose the names (including ones that do not
    exist), so an unbounded memory would grow with every name asked about.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        sessions: sessionmaker[Session],
        ttl_s: float = 15.0,
        *,
        max_names: int = 10_000,
    ) -> None:
        if max_names < 1:
            raise ValueError(f"max_names must be at least 1, got {max_names}")
        self._api = client.CustomObjectsApi(api_client)
        self._sessions = sessions
        self._ttl = ttl_s
        self._max_names = max_names
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._seen_lock = threading.Lock()

    def progress(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``status.progress`` of SparkApplication ``namespace/name`` (the operator copies the
        driver's live metrics there), or None when it has none or does not exist. One API
        read; callers cache. Raises :class:`CatalogError` when the API server cannot be read."""
        try:
            obj: dict[str, Any] = self._api.get_namespaced_custom_object(  # type: ignore[assignment]
                SPARKAPP_GROUP,
                SPARKAPP_VERSION,
                namespace,
                SPARKAPP_PLURAL,
                name,
                _request_timeout=10,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise CatalogError(
                f"cannot read SparkApplication {namespace}/{name} (HTTP {exc.status})"
            ) from None
        except (HTTPError, OSError):
            raise CatalogError(f"cannot read SparkApplication {namespace}/{name}") from None
        return published_progress(obj)

    def remembered(self) -> int:
        """How many (namespace, name) keys the catalog currently remembers."""
        with self._seen_lock:
            return len(self._seen)

    def refresh(self, namespace: str, name: str | None = None) -> None:
        """Re-read one application (or all in ``namespace``) unless read recently.

        An application deleted in Kubernetes is deleted from the store. Raises
        :class:`CatalogError` when the API server cannot be read.
        """
        key = (namespace, name or "*")
        with self._seen_lock:
            last = self._seen.get(key)
            if last is not None:
                self._seen.move_to_end(key)
        if last is not None and time.monotonic() - last < self._ttl:
            return
        items: list[dict[str, Any]]
        try:
            if name is None:
                listing: dict[str, Any] = self._api.list_namespaced_custom_object(  # type: ignore[assignment]
                    SPARKAPP_GROUP,
                    SPARKAPP_VERSION,
                    namespace,
                    SPARKAPP_PLURAL,
                    _request_timeout=10,
                )
                items = listing.get("items", [])
            else:
                try:
                    items = [
                        self._api.get_namespaced_custom_object(  # type: ignore[list-item]
                            SPARKAPP_GROUP,
                            SPARKAPP_VERSION,
                            namespace,
                            SPARKAPP_PLURAL,
                            name,
                            _request_timeout=10,
                        )
                    ]
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    items = []
        except (ApiException, HTTPError, OSError) as exc:
            raise CatalogError(
                f"cannot read SparkApplications (HTTP {getattr(exc, 'status', None) or 'error'})"
            ) from None
        with self._sessions.begin() as session:
            present = set()
            for obj in items:
                meta = obj.get("metadata") or {}
                # kmock (and some proxies) ignore field selectors: filter here.
                if meta.get("namespace", namespace) != namespace:
                    continue
                if name is not None and meta.get("name") != name:
                    continue
                try:
                    description = description_from_sparkapplication(obj)
                except ValidationError as exc:
                    log.warning(
                        "SparkApplication %s/%s: bad vertices: %s",
                        namespace,
                        meta.get("name"),
                        exc.error_count(),
                    )
                    continue
                present.add(meta.get("name"))
                graph = graph_of(description)
                repository.upsert_application(
                    session,
                    namespace,
                    meta["name"],
                    description=description,
                    edges=graph.edges,
                    vertex_plan=graph.vertex_plan,
                    plan_error=graph.error,
                    sampling=(obj.get("spec") or {}).get("sampling") or {},
                )
            known: list[Application] = (
                list(repository.list_applications(session, namespace))
                if name is None
                else [a for a in [repository.get_application(session, namespace, name)] if a]
            )
            for app in known:
                if app.name not in present:
                    repository.delete_application(session, namespace, app.name)
        with self._seen_lock:
            self._seen[key] = time.monotonic()
            self._seen.move_to_end(key)
            while len(self._seen) > self._max_names:
                self._seen.popitem(last=False)
