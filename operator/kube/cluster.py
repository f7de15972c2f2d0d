"""The operator's Kubernetes API client: plain JSON dicts in and out, awaitable.

kopf watches and patches the resources it handles; everything else (child objects, another
resource's status, Events) goes through :class:`Cluster`. It wraps the official ``kubernetes``
client, whose calls block, so each call runs in a worker thread. Objects stay plain dicts (no
generated models) so that what is sent is exactly what the manifests in ``names``/``children``
describe. It also paces the operator's requests and retries throttled ones
(docs/architecture.md, "Throttling and quota").
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import json
import math
import os
import re
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import kubernetes
from aiolimiter import AsyncLimiter
from kubernetes.client.exceptions import ApiException
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from urllib3.util.retry import Retry

from .. import names
from ..metrics import API_RATE_LIMIT_WAIT_SECONDS, API_REQUEST_SECONDS, API_REQUESTS

#: The quota admission plugin's refusals (plugin/pkg/admission/resourcequota), anchored
#: at the start: ``<resource> "<name>" is forbidden: exceeded quota: <quota>, requested:
#: <r>=<q>,…, used: …, limited: …``, and its wait for a quota's first status.
_QUOTA_EXCEEDED = re.compile(
    r'^\S+ "[^"]*" is forbidden: exceeded quota: [^,]+, requested: [^ ]+, '
    r"used: (?P<used>[^ ]+), limited: "
)
_QUOTA_UNKNOWN = re.compile(r'^\S+ "[^"]*" is forbidden: status unknown for quota: ')

#: Attempts of a call the API server throttles (429) before the caller sees the 429.
THROTTLED_ATTEMPTS = 5
#: The longest ``Retry-After`` honoured between two of them, seconds.
MAX_RETRY_AFTER_S = 10.0


class ApiError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0: no answer);
    ``retry_after`` the seconds of its ``Retry-After`` header, when it had one; ``verb`` and
    ``resource`` what was asked (as :func:`request_labels` names them), when known."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        retry_after: float | None = None,
        verb: str = "",
        resource: str = "",
    ) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.retry_after = retry_after
        self.verb = verb
        self.resource = resource

    @property
    def message(self) -> str:
        """The API server's own message (or the transport's), without the status."""
        return str(self).removeprefix(f"HTTP {self.status}: ")

    @property
    def transient(self) -> bool:
        """The API server's or the cluster's passing state, not a refusal of the request:
        no answer, a 5xx, throttling (429), or a ResourceQuota with no room yet (the quota
        plugin's 403 "exceeded quota" while other objects use some of it: room comes back as
        they end; or its "status unknown for quota" while the quota controller catches up).
        A request over the quota with nothing else using it can never fit: not transient."""
        if self.status == 0 or self.status == 429 or self.status >= 500:
            return True
        if self.status != 403:
            return False
        message = self.message
        if _QUOTA_UNKNOWN.search(message):
            return True
        exceeded = _QUOTA_EXCEEDED.search(message)
        if exceeded is None:
            return False
        used = [q.split("=", 1)[-1] for q in exceeded.group("used").split(",")]
        return any(q.strip() not in ("0", "") for q in used)


class NotFound(ApiError):
    """404: the object (or its resource) does not exist."""


class Conflict(ApiError):
    """409: the object already exists, or a precondition failed."""


@dataclass(frozen=True)
class Kind:
    """Where a namespaced resource lives in the API: ``/api/v1`` or ``/apis/<group>/<version>``."""

    prefix: str
    plural: str

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        path = f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        if name:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path


CONFIG_MAPS = Kind("/api/v1", "configmaps")
SECRETS = Kind("/api/v1", "secrets")
SERVICES = Kind("/api/v1", "services")
PODS = Kind("/api/v1", "pods")
EVENTS = Kind("/api/v1", "events")
APPS = Kind(f"/apis/{names.API_VERSION}", names.APPS)
SAMPLES = Kind(f"/apis/{names.API_VERSION}", names.SAMPLES)


def load_client_config() -> kubernetes.client.Configuration:
    """In-cluster credentials when running in a Pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    configuration = kubernetes.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    else:
        kubernetes.config.load_kube_config(client_configuration=configuration)
    return configuration


class Cluster:
    """Awaitable CRUD on namespaced objects as dicts. Patches are JSON merge patches
    (``None`` deletes a key).

    Errors: :class:`NotFound` (404), :class:`Conflict` (409) and :class:`ApiError` (anything
    else, with ``status``); network failures surface as :class:`ApiError` with status 0.

    A 429 (API Priority and Fairness throttling the operator's flow) is retried here, after
    the ``Retry-After`` the API server gives (capped at :data:`MAX_RETRY_AFTER_S`), up to
    :data:`THROTTLED_ATTEMPTS` times, waiting without holding a thread; past that the caller
    gets it, with :attr:`ApiError.transient` true, as for status 0, 5xx and a ResourceQuota's
    403.

    Requests start at most ``qps`` per second, in bursts of at most ``burst`` (client-go's
    token bucket: ``burst`` tokens, refilled at ``qps`` per second; a request takes one or
    waits). Every attempt is counted in ``sparkglass_operator_api_requests_total`` by verb,
    resource and the status code answered (:mod:`.metrics`). Background work (the periodic
    full resync of an application nothing changed) goes through :meth:`background`, which
    takes at most half of ``qps``: a DataSample's pickup or a change acted on never queues
    behind every running application's resync coming due at once.
    """

    def __init__(
        self,
        configuration: kubernetes.client.Configuration | None = None,
        *,
        executor: Executor | None = None,
        throttled_attempts: int = THROTTLED_ATTEMPTS,
        qps: float | None = None,
        burst: int | None = None,
    ) -> None:
        """``executor``: the threads the blocking calls run in (default: the event loop's
        pool); ``throttled_attempts``: tries of a call answered 429 (1: none retried here);
        ``qps``: the most requests started per second (``None``: no limit) and ``burst``
        how many may start at once (default: ``qps``, at least 1), as client-go's ``QPS``
        and ``Burst``."""
        configuration = configuration or load_client_config()
        # One retry policy, this class's: urllib3 would otherwise retry a 429 or 503 itself,
        # three times per call, asleep in a worker thread for each Retry-After.
        configuration.retries = Retry(
            total=3,
            connect=3,
            read=0,
            status=0,
            other=0,
            respect_retry_after_header=False,
            raise_on_status=False,
        )
        self._api = kubernetes.client.ApiClient(configuration)
        self._executor = executor
        self._throttled_attempts = max(1, throttled_attempts)
        self._limiter = None
        self._background_limiter: AsyncLimiter | None = None
        self._background = False
        if qps:
            bucket = max(1, burst if burst is not None else math.ceil(qps))
            # aiolimiter allows max_rate acquisitions per time_period, all at once if the
            # bucket is full, and drains it evenly: a bucket of ``bucket`` tokens drained
            # over bucket/qps seconds refills at qps per second.
            self._limiter = AsyncLimiter(bucket, bucket / qps)
            half = max(1, bucket // 2)
            self._background_limiter = AsyncLimiter(half, half / (qps / 2))

    def background(self) -> Cluster:
        """This client for background work: each request first waits for a token of a
        bucket of half the size refilled at half ``qps``, then for one of the shared
        bucket, so background requests never take more than half the rate. Without a
        ``qps`` limit, the client itself."""
        if self._background_limiter is None or self._background:
            return self
        view = copy.copy(self)  # the same API client, threads and buckets
        view._background = True
        return view

    def close(self) -> None:
        self._api.close()

    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        """The object; raises :class:`NotFound`."""
        return await self._call("GET", kind.path(namespace, name))

    async def find(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return await self.get(kind, namespace, name)
        except NotFound:
            return None

    async def list_objects(
        self, kind: Kind, namespace: str, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects in ``namespace`` carrying all ``labels`` (filtered here too, to be safe)."""
        query = []
        if labels:
            query.append(("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items())))
        data = await self._call("GET", kind.path(namespace), query=query)
        items: list[dict[str, Any]] = data.get("items") or []
        want = labels or {}
        return [
            i
            for i in items
            if all((i.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in want.items())
        ]

    async def get_path(self, path: str) -> dict[str, Any]:
        """GET any API path (a cluster-scoped object too); raises like :meth:`get`."""
        return await self._call("GET", path)

    async def apply(self, path: str, body: dict[str, Any], *, field_manager: str) -> dict[str, Any]:
        """Server-side apply ``body`` at ``path`` (created when missing), taking over fields
        other managers own (``force``): the CRD upgrade hook's way, as ``kubectl apply
        --server-side --force-conflicts`` does."""
        return await self._call(
            "PATCH",
            path,
            body=body,
            query=[("fieldManager", field_manager), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )

    async def create(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create ``body``; raises :class:`Conflict` when it exists."""
        return await self._call("POST", kind.path(namespace), body=body)

    async def patch(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Apply a JSON merge patch; raises :class:`NotFound`."""
        return await self._call(
            "PATCH",
            kind.path(namespace, name, subresource),
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def patch_status(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge ``status`` into the object's status subresource. With ``resource_version``
        the write applies to that version only: :class:`Conflict` when the object changed
        since (whoever wrote, a new leader included, is never overwritten blind)."""
        patch: dict[str, Any] = {"status": status}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        return await self.patch(kind, namespace, name, patch, subresource="status")

    async def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Delete in the background (dependents via owner references); False if already gone."""
        try:
            await self._call(
                "DELETE",
                kind.path(namespace, name),
                body={
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "propagationPolicy": "Background",
                },
            )
        except NotFound:
            return False
        return True

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        # The caller's context variables travel with the call, as asyncio.to_thread does.
        call = functools.partial(
            contextvars.copy_context().run,
            self._call_sync,
            method,
            path,
            body,
            query,
            content_type,
        )
        loop = asyncio.get_running_loop()
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, ApiError) and e.status == 429),
            wait=_retry_after,
            stop=stop_after_attempt(self._throttled_attempts),
            reraise=True,
        ):
            with attempt:
                if self._limiter is not None:
                    if self._background and self._background_limiter is not None:
                        await self._background_limiter.acquire()
                    waiting = time.monotonic()  # the shared bucket's wait: what all work sees
                    await self._limiter.acquire()
                    API_RATE_LIMIT_WAIT_SECONDS.observe(time.monotonic() - waiting)
                return await loop.run_in_executor(self._executor, call)
        raise AssertionError("unreachable: AsyncRetrying re-raises the last error")

    def _call_sync(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        query: list[tuple[str, str]] | None,
        content_type: str,
    ) -> dict[str, Any]:
        verb, resource = request_labels(method, path, query)
        started = time.monotonic()
        code = 0
        try:
            request = self._api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*request, _request_timeout=30)
            response.read()
            code = int(response.status)
        except ApiException as exc:  # the client raises these for transport failures
            code = int(exc.status or 0)
            raise ApiError(
                code, f"{method} {path}: {exc.reason}", verb=verb, resource=resource
            ) from None
        except OSError as exc:  # connection refused, DNS, TLS: the API server is unreachable
            raise ApiError(0, f"{method} {path}: {exc}", verb=verb, resource=resource) from None
        except Exception as exc:  # urllib3 wraps network errors in its own (non-OSError) types
            if type(exc).__module__.startswith("urllib3"):
                raise ApiError(0, f"{method} {path}: {exc}", verb=verb, resource=resource) from None
            raise
        finally:
            API_REQUESTS.labels(verb, resource, str(code)).inc()
            API_REQUEST_SECONDS.labels(verb).observe(time.monotonic() - started)
        status = code
        if status >= 400:
            message = _status_message(response.data) or str(response.reason)
            if status == 404:
                raise NotFound(status, message, verb=verb, resource=resource)
            if status == 409:
                raise Conflict(status, message, verb=verb, resource=resource)
            raise ApiError(
                status,
                message,
                retry_after=_seconds(response.getheader("Retry-After")),
                verb=verb,
                resource=resource,
            )
        raw = response.data
        if not raw:
            return {}
        data = json.loads(raw)
        return data if isinstance(data, dict) else {}


def request_labels(
    method: str, path: str, query: list[tuple[str, str]] | None = None
) -> tuple[str, str]:
    """``(verb, resource)`` of a request, as the API server names them in its audit log:
    ``get``/``list``/``watch``/``create``/``patch``/``update``/``delete``, and the plural
    with its subresource (``datasamples/status``)."""
    parts = [p for p in path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...; then namespaces/<ns>/<plural>[/<name>[/sub]]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    plural = rest[0] if rest else ""
    named = len(rest) >= 2
    resource = f"{plural}/{rest[2]}" if len(rest) >= 3 else plural
    watching = any(k == "watch" and v in ("true", "1") for k, v in query or [])
    verb = {
        "GET": "watch" if watching else ("get" if named else "list"),
        "POST": "create",
        "PATCH": "patch",
        "PUT": "update",
        "DELETE": "delete",
    }.get(method, method.lower())
    return verb, resource


def _seconds(header: str | None) -> float | None:
    """A ``Retry-After`` in seconds, within 0 to :data:`MAX_RETRY_AFTER_S` (the API server
    sends whole seconds; an HTTP date, garbage, ``inf`` or ``nan`` count as none)."""
    try:
        value = float(header) if header else None
    except ValueError:
        return None
    if value is None or not math.isfinite(value):
        return None
    return min(max(0.0, value), MAX_RETRY_AFTER_S)


def _retry_after(state: RetryCallState) -> float:
    """Wait before retrying a 429: its ``Retry-After`` (capped), else 1 s doubling."""
    exc = state.outcome.exception() if state.outcome else None
    given = exc.retry_after if isinstance(exc, ApiError) else None
    if given is not None:
        return min(max(given, 0.5), MAX_RETRY_AFTER_S)  # never a burst of instant retries
    return min(2.0 ** (state.attempt_number - 1), MAX_RETRY_AFTER_S)


def _status_message(body: object) -> str | None:
    """The ``message`` of a Kubernetes ``Status`` error body, if there is one."""
    if isinstance(body, bytes | str):
        try:
            data = json.loads(body)
        except ValueError:
            return None
        if isinstance(data, dict):
            message = data.get("message")
            return str(message) if message else None
    return None
