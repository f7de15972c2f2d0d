"""Reading a pipeline's live metrics from its Spark driver, for the page's graph.

Local mode: ``GET {driver}/api/v1/progress`` through
:class:`~sparkglass.runtime.control.client.ControlClient` (the driver URL and token the
application was registered with). Answers are remembered per application for
:data:`CACHE_TTL_S`, so many open pages cost the driver one request per second at most.
Kubernetes mode: the service holds no driver token (the operator does); the operator copies
the driver's metrics into the SparkApplication's ``status.progress`` (at most every
``--progress-seconds``, 60 s by default, when they changed), and the service reads them from
there. Their last minutes (``history``) are asked of the driver with ``?history=true`` in
local mode only: ``status.progress`` holds none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from pydantic import ValidationError

from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics
from sparkglass.runtime.control.client import ControlClient, ControlError, ControlTLS

from .auth.cache import TTLCache
from .store.orm import Application

#: Seconds an answer is reused for every caller of the same application.
CACHE_TTL_S = 1.0
#: Per-request timeouts towards a driver, seconds: a page refresh must not hang on a dead one.
REQUEST_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0


class ProgressUnavailable(Exception):
    """The metrics cannot be read; the message is safe to show (no URL credentials, no
    token)."""


class PipelineProgressReader:
    """Reads and briefly caches :class:`PipelineMetrics` per application (thread-safe)."""

    def __init__(
        self,
        http: httpx.Client | None = None,
        max_entries: int = 10_000,
        *,
        published: Callable[[str, str], dict[str, Any] | None] | None = None,
    ) -> None:
        self._http = http or httpx.Client()
        self._cache: TTLCache[PipelineMetrics] = TTLCache(max_entries)
        #: Kubernetes mode: reads ``status.progress`` of a SparkApplication (namespace, name).
        self.published = published

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def read(
        self,
        app: Application,
        tls: ControlTLS | None = None,
        token: Callable[[], str | None] | None = None,
        *,
        history: bool = False,
    ) -> PipelineMetrics:
        """The metrics of ``app``'s pipeline, at most :data:`CACHE_TTL_S` old; ``history``:
        with their last minutes as the driver keeps them (local mode; Kubernetes mode has
        none, ``history`` stays ``None``).

        ``tls``: the certificate pinned for the app's ``https://`` driver (see
        :mod:`sparkglass.service.driver_trust`); such a driver gets a connection of its own
        that trusts only it, as for rounds. ``token``: gives the driver token in clear (it is
        stored encrypted; called only when the driver is asked, not on a cache hit). Raises
        :class:`ProgressUnavailable` when ``app`` has no driver endpoint and no published
        metrics, or its driver cannot be read.
        """
        # The kind too: another operator's application under the same name is another one.
        key = (app.namespace, app.name, app.api_version, history)
        hit, cached = self._cache.get(key)
        if hit and cached is not None:
            return cached
        if not app.driver_url and self.published is not None:
            metrics = self._read_published(app)
            self._cache.set(key, metrics, CACHE_TTL_S)
            return metrics
        if not app.driver_url:
            raise ProgressUnavailable(
                f"no live metrics for {app.namespace}/{app.name}: the service reads them from "
                "a driver control endpoint, known in local mode only"
            )
        failed = f"the driver of {app.namespace}/{app.name} did not answer its progress"
        try:
            driver = ControlClient(
                app.driver_url,
                (token() if token is not None else None) or "",
                timeout_s=REQUEST_TIMEOUT_S,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                http=None if tls else self._http,
                tls=tls,
            )
        except ValueError as exc:  # a pinned certificate for a URL that is not https://
            raise ProgressUnavailable(f"{failed}: {exc}") from None
        try:
            with driver:
                metrics = driver.progress(history=history)
        except ControlError as exc:
            raise ProgressUnavailable(f"{failed}: {exc}") from None
        self._cache.set(key, metrics, CACHE_TTL_S)
        return metrics

    def forget(self, namespace: str, name: str) -> None:
        """Drop the cached metrics of ``namespace/name``, of every kind (it was deleted or
        replaced)."""
        self._cache.discard_where(
            lambda key: isinstance(key, tuple) and key[:2] == (namespace, name)
        )

    def _read_published(self, app: Application) -> PipelineMetrics:
        assert self.published is not None
        where = f"{app.namespace}/{app.name}"
        if app.api_version is not None:
            # ``published`` reads sparkglass's own SparkApplication of that name: never the
            # metrics of another operator's application, for which none are published.
            raise ProgressUnavailable(
                f"no live metrics for {where}: the operator publishes them for sparkglass's "
                "own SparkApplications only"
            )
        try:
            raw = self.published(app.namespace, app.name)
        except Exception as exc:  # CatalogError and the client's own; the message is ours
            raise ProgressUnavailable(
                f"no live metrics for {where}: the SparkApplication could not be read "
                f"({type(exc).__name__})"
            ) from None
        if raw is None:
            raise ProgressUnavailable(
                f"no live metrics for {where} yet: the operator publishes them in the "
                "SparkApplication's status.progress while its driver runs"
            )
        try:
            return PipelineMetrics.model_validate(raw)
        except ValidationError:
            raise ProgressUnavailable(
                f"no live metrics for {where}: status.progress is not in the expected shape"
            ) from None
