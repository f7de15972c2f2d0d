"""Where applications come from.

- Local mode: applications are registered (by the demo, ``sparkglass serve --driver`` or
  ``PUT /api/v1/namespaces/local/applications/{app}``) with their driver control URL and
  token; the pipeline and sampling settings are read from the driver.
- Kubernetes mode: applications are ``SparkApplication`` resources; the vertices come from
  their ``spec.pipeline`` and are mirrored into the store. With the settings
  ``kubeflow_applications`` / ``apache_spark_applications``, also the sampling-enabled
  SparkApplications of the Kubeflow and Apache Spark operators, their vertices from what the
  operator published (:mod:`.foreign_apps`); sparkglass's own wins a name both hold. The
  ``status`` is never a source of what exists or where anything is: anyone granted
  ``patch sparkapplications/status`` can write it (review item A9). Only ``status.progress``
  is read, as display data (numbers and the vertices of the spec's pipeline; see
  :func:`published_progress`).
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker
from urllib3.exceptions import HTTPError

from sparkglass.crds.sparkapplication import PipelineSpec
from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.sampling_settings import SamplingSettings, SamplingSettingsError
from sparkglass.runtime.control.client import (
    ControlClient,
    ControlError,
    ControlTLS,
    ControlUntrusted,
)

from .driver_trust import driver_location
from .foreign_apps import (
    ForeignKind,
    PublishedPipeline,
    pipeline_configmap_name,
    published_description,
    sampling_requested,
)
from .graph import Graph, graph_of
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
            log.info(
                "reading the pipeline of the driver at %s failed: %s (HTTP %s)",
                driver_location(driver_url),
                type(exc).__name__,
                exc.status,
            )
            raise CatalogError(_failure(driver_url, exc, tls)) from None


def _settings_or_empty(driver: ControlClient) -> dict[str, Any]:
    try:
        return driver.settings()
    except ControlError as exc:
        if exc.status is None:
            raise
        # The pipeline is what registering needs; the settings are shown when readable.
        return {}


#: httpx's class of a transport failure, as the control client words it
#: (``... unreachable: ConnectError: ...``).
_TRANSPORT = re.compile(r"unreachable: (\w+):")


def _failure(driver_url: str, exc: ControlError, tls: ControlTLS | None) -> str:
    """What went wrong, in words of our own. The driver's words are not passed on: its body
    is whatever the URL's server sent (a page, an echo of the request), and the client's text
    quotes the URL, which may hold credentials, or a refused header, which holds the token."""
    where = f"driver at {driver_location(driver_url)}"
    if isinstance(exc, ControlUntrusted):
        anchor = tls.anchor if tls is not None else "the system's CAs"
        return (
            f"{where}: its TLS certificate failed verification against {anchor}; the token "
            "was not sent"
        )
    if exc.status is None:
        kind = _TRANSPORT.search(str(exc))
        name = kind.group(1) if kind else ""
        if name.endswith("Timeout"):
            return f"{where} did not answer in time"
        if name == "ConnectError":
            return f"{where} cannot be reached (connection refused, or the host is unknown)"
        return f"{where} cannot be reached or sent no readable answer"
    if 200 <= exc.status < 300:
        return f"{where} answered GET /api/v1/pipeline with something else than a pipeline"
    return f"{where} answered GET /api/v1/pipeline with HTTP {exc.status}"


@dataclass(frozen=True)
class Forgotten:
    """A row the catalog deleted, or replaced by another kind's application of its name."""

    application_id: int
    namespace: str
    name: str
    api_version: str | None


@dataclass(frozen=True)
class Registration:
    """What registering a local application did: the application's id, its current run,
    and whether that run began with this registration (another driver than before)."""

    application_id: int
    run: int
    new_run: bool


def _same_driver(
    session: Session,
    app: Application,
    driver_url: str,
    driver_token: str,
    driver_started_at: int | None,
) -> bool:
    """Whether ``app``'s stored driver is the one being registered. A restarted driver
    listens on another port and holds another token unless both were configured; its
    start (``driver_started_at``, when both registrations stated one) tells it apart then."""
    if app.driver_url is None:
        return True  # no driver before (rounds saved by the operator only): nothing to end
    if app.driver_url != driver_url:
        return False
    try:
        stored = repository.driver_token(session, app)
    except ValueError:  # the store key cannot open it: it cannot be told to be the same
        return False
    if stored is None or not hmac.compare_digest(stored.encode(), driver_token.encode()):
        return False
    return (
        driver_started_at is None
        or app.driver_started_at is None
        or driver_started_at == app.driver_started_at
    )


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
    driver_started_at: int | None = None,
) -> Registration:
    """Store a local application; reads its pipeline from the driver unless given
    (``tls``: the certificate to pin for an ``https://`` driver).

    Registering it with another driver than before (another URL or token, or another
    ``driver_started_at``: the driver's SparkContext start, ms, when the caller knows it)
    begins a new run: the earlier run's rounds stay in the history but no longer answer a
    poll (:func:`~.store.repository.note_driver`). Raises ``ValueError`` naming
    ``driver_started_at`` for a negative one."""
    if driver_started_at is not None and driver_started_at < 0:
        raise ValueError(
            f"driver_started_at: expected ms since the epoch (>= 0), got {driver_started_at}"
        )
    if description is None:
        description, sampling = fetch_driver_pipeline(driver_url, driver_token, tls=tls)
    graph = graph_of(description)
    with sessions.begin() as session:
        before = repository.get_application(session, namespace, name)
        # Read before the upsert overwrites the stored driver with the new one.
        new_run = before is not None and not _same_driver(
            session, before, driver_url, driver_token, driver_started_at
        )
        app = repository.upsert_application(
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
        run = repository.note_driver(
            session,
            app,
            new_run=new_run,
            driver_started_at=driver_started_at,
            at=repository.now_ms(),
        )
        if new_run:
            log.info("application %s/%s: another driver registered, run %d", namespace, name, run)
        return Registration(app.id, run, new_run)


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


def _conf_sampling(obj: dict[str, Any]) -> dict[str, Any]:
    """The sampling settings another operator's application states in ``spec.sparkConf``
    (``spark.sparkglass.sampling.*``), in :class:`SamplingSettings`' own JSON (what
    :func:`~sparkglass.runtime.contract.sampling_settings.settings_from_spec` reads), only
    those stated; ``{}`` when one is invalid (its DataSamples then fail naming it)."""
    conf = (obj.get("spec") or {}).get("sparkConf")
    if not isinstance(conf, dict):
        return {}
    try:
        settings = SamplingSettings.from_conf(
            {k: str(v) for k, v in conf.items() if isinstance(k, str) and v is not None}
        )
    except SamplingSettingsError:
        return {}
    return settings.model_dump(mode="json", by_alias=True, exclude_unset=True)


#: Reads of names a namespace does not have, within the catalog's TTL, before an unknown name
#: there is answered by one list of the namespace instead (see :class:`KubernetesCatalog`).
UNKNOWN_GETS_BEFORE_LIST = 8

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

    Callers choose the names they ask about, including ones that do not exist, so what the
    catalog remembers and what it asks the API server are both bounded:

    * it remembers when it last read at most ``max_names`` (namespace, name) keys, and at
      most as many names the API server answered 404 for (each for ``ttl_s``): a name asked
      again within that time costs no read, whether it exists or not. The least recently
      asked are forgotten first;
    * per namespace, after :data:`UNKNOWN_GETS_BEFORE_LIST` reads of names that did not
      exist within ``ttl_s``, an unknown name is answered by one list of the namespace
      instead, which then answers every name there for ``ttl_s``. A flood of distinct made-up
      names in a namespace thus costs at most that many GETs and one LIST per ``ttl_s``;
      asking in many namespaces costs a SubjectAccessReview per namespace first (the caller
      must be allowed to read there), and the per-namespace counts are bounded like the
      names.

    A SparkApplication created after its name was asked for is found within ``ttl_s``; one
    created after a listing of its namespace is found at once (outside a flood).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        sessions: sessionmaker[Session],
        ttl_s: float = 15.0,
        *,
        max_names: int = 10_000,
        foreign: tuple[ForeignKind, ...] = (),
    ) -> None:
        if max_names < 1:
            raise ValueError(f"max_names must be at least 1, got {max_names}")
        self._api = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)
        #: Other operators' kinds listed too, in order of precedence after sparkglass's own.
        self._foreign = foreign
        self._sessions = sessions
        self._ttl = ttl_s
        self._max_names = max_names
        #: (namespace, name or "*") -> when it was last read (monotonic s).
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        #: (namespace, name) -> when the API server last answered 404 for it.
        self._absent: OrderedDict[tuple[str, str], float] = OrderedDict()
        #: namespace -> (start of the current ttl_s window, reads of absent names in it).
        self._misses: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._seen_lock = threading.Lock()
        #: namespace -> set when the read of it in flight ends.
        self._reading: dict[str, threading.Event] = {}
        #: Called (after the commit) with each row a read deleted or replaced by an
        #: application of another kind: the service forgets what it caches of that row
        #: (answers, bodies, progress), which another application must never be served.
        self.forgotten: Callable[[Forgotten], None] | None = None

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
        """How many (namespace, name) keys the catalog currently remembers (read or absent)."""
        with self._seen_lock:
            return len(self._seen) + len(self._absent)

    def refresh(self, namespace: str, name: str | None = None) -> None:
        """Re-read one application (or all in ``namespace``) unless read recently.

        An application deleted in Kubernetes is deleted from the store. Raises
        :class:`CatalogError` when the API server cannot be read.
        """
        asked = name
        while True:
            now, name = time.monotonic(), asked
            with self._seen_lock:
                if name is not None:
                    if self._fresh(self._seen, (namespace, name), now) or self._fresh(
                        self._absent, (namespace, name), now
                    ):
                        return
                    start, misses = self._misses.get(namespace, (now, 0))
                    if now - start < self._ttl and misses >= UNKNOWN_GETS_BEFORE_LIST:
                        # A flood of unknown names: a recent listing answers them all, or one
                        # listing replaces one more GET. Outside a flood a name the listing
                        # did not hold is read, so an application created since is found.
                        if self._fresh(self._seen, (namespace, "*"), now):
                            return
                        name = None
                elif self._fresh(self._seen, (namespace, "*"), now):
                    return
                # One read of a namespace at a time: callers at once would each pass the
                # checks above before any read counted, and the bound would hold per thread.
                pending = self._reading.get(namespace)
                if pending is None:
                    mine = self._reading[namespace] = threading.Event()
                    break
            pending.wait(timeout=self._ttl)
        try:
            self._read(namespace, name)
        finally:
            with self._seen_lock:
                self._reading.pop(namespace, None)
            mine.set()

    def _fresh(
        self, memory: OrderedDict[tuple[str, str], float], key: tuple[str, str], now: float
    ) -> bool:
        """Whether ``key`` was read less than ``ttl_s`` ago (caller holds the lock)."""
        at = memory.get(key)
        if at is None:
            return False
        memory.move_to_end(key)
        return now - at < self._ttl

    def _remember(
        self, memory: OrderedDict[tuple[str, str], float], key: tuple[str, str], at: float
    ) -> None:
        """Note ``key`` read at ``at``, forgetting the least recently asked past the bound
        (caller holds the lock)."""
        memory[key] = at
        memory.move_to_end(key)
        while len(memory) > self._max_names:
            memory.popitem(last=False)

    def _missed(self, namespace: str, at: float) -> None:
        """Count a read of a name ``namespace`` does not have (caller holds the lock)."""
        start, misses = self._misses.get(namespace, (at, 0))
        if at - start >= self._ttl:
            start, misses = at, 0
        self._misses[namespace] = (start, misses + 1)
        self._misses.move_to_end(namespace)
        while len(self._misses) > self._max_names:
            self._misses.popitem(last=False)

    def _read_foreign(
        self, kind: ForeignKind, namespace: str, name: str | None
    ) -> list[dict[str, Any]]:
        """The sampling-enabled applications of ``kind`` in ``namespace`` (``name`` only, when
        given). A 404 (the kind's CRD is not installed) or 403 (the chart does not let the
        service read it) is none; other failures raise ``ApiException``."""
        try:
            if name is None:
                listing: dict[str, Any] = self._api.list_namespaced_custom_object(  # type: ignore[assignment]
                    kind.group, kind.version, namespace, kind.plural, _request_timeout=10
                )
                found = listing.get("items", [])
            else:
                found = [
                    self._api.get_namespaced_custom_object(  # type: ignore[list-item]
                        kind.group, kind.version, namespace, kind.plural, name, _request_timeout=10
                    )
                ]
        except ApiException as exc:
            if exc.status in (403, 404):
                log.debug("%s in %s not readable: HTTP %s", kind.api_version, namespace, exc.status)
                return []
            raise
        return [o for o in found if isinstance(o, dict) and sampling_requested(o)]

    def _published(self, namespace: str, app: str) -> tuple[dict[str, Any] | None, str | None]:
        """The ConfigMap ``app``'s pipeline is published in (:mod:`.foreign_apps`), read by
        its name: ``(configmap, None)``, ``(None, None)`` when there is none yet, or
        ``(None, why)`` when it cannot be read. Never a list of the namespace's ConfigMaps:
        whoever may create ConfigMaps there could make that list as large as they like, and
        the service may only ``get`` them (the chart's RBAC). A failure concerns this
        application only."""
        configmap = pipeline_configmap_name(app)
        try:
            found = self._core.read_namespaced_config_map(configmap, namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            log.info("ConfigMap %s/%s not readable: HTTP %s", namespace, configmap, exc.status)
            return None, (
                f"pipeline not resolvable: ConfigMap {configmap} cannot be read (HTTP {exc.status})"
            )
        except (HTTPError, OSError, ValueError) as exc:
            log.info("ConfigMap %s/%s not readable: %s", namespace, configmap, type(exc).__name__)
            return None, f"pipeline not resolvable: ConfigMap {configmap} cannot be read"
        read: dict[str, Any] = self._core.api_client.sanitize_for_serialization(found)
        return read, None

    def _foreign_description(
        self, obj: dict[str, Any], kind: ForeignKind, namespace: str
    ) -> tuple[PublishedPipeline, Graph]:
        """The pipeline of another operator's application ``obj`` (none, with the reason,
        when it cannot be used) and its graph. Whatever goes wrong with one application's
        published pipeline leaves the other applications of the namespace listed: an
        exception here would fail the whole listing."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        empty = PipelineDescription(name=name, vertices=[])
        configmap, problem = self._published(namespace, name)
        if problem is not None:
            return PublishedPipeline(empty, problem), graph_of(empty)
        try:
            published = published_description(obj, configmap, kind)
            return published, graph_of(published.description)
        except Exception:
            log.exception("the published pipeline of %s/%s", namespace, name)
            problem = "pipeline not resolvable: its published pipeline could not be read"
            return PublishedPipeline(empty, problem), graph_of(empty)

    @staticmethod
    def _rows(session: Session, namespace: str, name: str | None) -> list[Application]:
        """The store's rows of ``namespace`` (of ``name`` only, when given)."""
        if name is None:
            return list(repository.list_applications(session, namespace))
        return [a for a in [repository.get_application(session, namespace, name)] if a]

    def _read(self, namespace: str, name: str | None) -> None:
        """Read one application (or all of ``namespace``) and mirror it into the store; the
        rows it replaced (another kind under the same name) or deleted are handed to
        :attr:`forgotten`."""
        items: list[dict[str, Any]]
        foreign: list[tuple[dict[str, Any], ForeignKind]] = []
        described: dict[str, tuple[PublishedPipeline, Graph]] = {}
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
            # sparkglass's own application wins a name another operator's also holds; of the
            # others, the first kind listed in ``foreign``.
            taken = {str((o.get("metadata") or {}).get("name")) for o in items}
            for kind in self._foreign:
                if name is not None and name in taken:
                    break
                for obj in self._read_foreign(kind, namespace, name):
                    other = str((obj.get("metadata") or {}).get("name"))
                    if other not in taken:
                        taken.add(other)
                        foreign.append((obj, kind))
            for obj, kind in foreign:
                other = str((obj.get("metadata") or {}).get("name"))
                described[other] = self._foreign_description(obj, kind, namespace)
        except (ApiException, HTTPError, OSError) as exc:
            raise CatalogError(
                f"cannot read SparkApplications (HTTP {getattr(exc, 'status', None) or 'error'})"
            ) from None
        gone: list[Forgotten] = []
        with self._sessions.begin() as session:
            present: set[str] = set()
            # The rows this read may replace or delete, by id: what is cached of one of them
            # must go with it (:attr:`forgotten`).
            before = [
                Forgotten(a.id, a.namespace, a.name, a.api_version)
                for a in self._rows(session, namespace, name)
            ]
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
                present.add(meta["name"])
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
            for obj, kind in foreign:
                meta = obj.get("metadata") or {}
                if meta.get("namespace", namespace) != namespace or not meta.get("name"):
                    continue
                if name is not None and meta.get("name") != name:
                    continue
                present.add(meta["name"])
                published, graph = described[meta["name"]]
                repository.upsert_application(
                    session,
                    namespace,
                    meta["name"],
                    description=published.description,
                    edges=graph.edges,
                    vertex_plan=graph.vertex_plan,
                    plan_error=published.problem or graph.error,
                    sampling=_conf_sampling(obj),
                    api_version=kind.api_version,
                )
            for app in self._rows(session, namespace, name):
                if app.name not in present:
                    repository.delete_application(session, namespace, app.name)
            kept = {
                Forgotten(a.id, a.namespace, a.name, a.api_version)
                for a in self._rows(session, namespace, name)
            }
            gone = [row for row in before if row not in kept]
        if gone and self.forgotten is not None:
            # After the commit: a poll that reads the store from now on finds the new row.
            for row in gone:
                self.forgotten(row)
        at = time.monotonic()
        with self._seen_lock:
            if name is not None and not present:
                self._remember(self._absent, (namespace, name), at)
                self._missed(namespace, at)
            else:
                self._remember(self._seen, (namespace, name or "*"), at)
                for found in present:
                    self._remember(self._seen, (namespace, found), at)
                    self._absent.pop((namespace, found), None)
