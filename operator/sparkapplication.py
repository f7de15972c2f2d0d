"""Reconciling a ``SparkApplication``: children, driver Pod, state, re-runs, TTL.

One idempotent pass, :func:`reconcile`, reads the application and its driver Pod fresh from
the API and moves the world one step towards the spec; all state lives in the status (none
in this process), so any pass, in any process, continues where the last one stopped. It runs
on create/resume/spec change, on every driver Pod event, on an event of its ConfigMap or
Service that shows it gone or changed, and on a resync timer (which makes re-runs after
their back-off, start timeouts and TTL deletion happen).

Cost follows live work. A full pass reads the application, its ConfigMap, Secret, Service
and driver Pod (and each Secret the spec references) from the API. Resyncs and the events
of driver and executor Pods (kopf's index holds the event's Pod before the handler runs)
first run a *memory pass*: the same steps over what the watches hold (the application and
its driver and executor Pods from kopf's indexes, the Secrets as the last full pass read
them; the ConfigMap and Service are left to their own watch events) through a read-only
view of the API, :class:`_MemoryView`. When that pass finds nothing to do, no request is
made; the only writes it makes itself are what the driver and the executor Pods report
(``progress``, ``executorState``, ``sparkApplicationId``), fenced by the application's
``resourceVersion``; any other step that would act (a state to write, a Pod to create or
delete, a read the watches cannot answer) stops it, and a full pass decides from fresh
reads instead, at once. A full pass also runs when the last one is
``full_resync_seconds`` old (``--full-resync-seconds``, default 300; 0: every resync), so
what no watch shows (the Secret, which the operator may not list; an event lost in a
watch's gap) is seen within that. A running application then costs no request per
resync, and 5 per full resync.

Steps of a pass:

1. validate the spec and plan the pipeline; an invalid one sets ``Ready=False`` with the
   reason (``InvalidSpec``, ``InvalidPipeline``, ``InvalidAttributes``) and state ``FAILED``,
   and stops any driver (no crash loop: nothing is retried until the spec changes);
2. ensure the ConfigMap, Secret (control token, TLS certificate and key) and headless
   Service (owned by the application);
3. a driver Pod running an older spec is deleted (state ``INVALIDATING``); a missing one is
   created (``SUBMITTED``), unless the application is over or waits for its re-run time;
   before that, a missing, unreadable or expiring (30 days) certificate in the Secret is
   replaced, never under a running driver;
4. the Pod's phase becomes the state; an ended driver becomes ``COMPLETED`` / ``FAILED`` or,
   under the restart policy, ``PENDING_RERUN`` with exponential back-off;
5. ``timeToLiveSeconds`` after ``COMPLETED`` / ``FAILED`` the application is deleted (its
   children follow through owner references).

Steps 3 to 5 are a dispatch on the state, one function per state or group of states
(:data:`_BY_STATE`), after the gates that hold in any state (``spec.suspend``, a driver Pod
of an older spec, one being deleted).

A driver Pod the API server cannot create yet (a ResourceQuota without room, throttling past
the client's retries, no answer or a 5xx) leaves the state as it was: the ``Submitted`` and
``Ready`` conditions say why, with the API server's message, and the create is retried until
``startTimeoutSeconds`` have passed since the first refusal; then the submission failed.

A 403 the operator cannot fix itself (its RBAC lacks a verb, an admission webhook refuses a
child) sets ``Ready=False`` reason ``Forbidden`` naming the verb and resource, and the
application's passes back off (5 s doubling to 5 min) instead of repeating the refused
requests every few seconds. That back-off is the one state kept in this process: a restarted
operator tries at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import kopf
import structlog
from pydantic import ValidationError

from sparkglass.crds.sparkapplication import MAX_MESSAGE_LENGTH

from . import children, executors, names
from .certificates import CERT_KEY, ControlCertificate, issue_control_certificate, reissue_reason
from .conditions import get_condition, set_condition
from .context import ApplicationRecord, OperatorContext
from .driver_access import control_endpoint, owned_by
from .driver_progress import progress_due, read_progress
from .driver_state import (
    ACTIVE,
    TERMINAL,
    AppState,
    after_end,
    after_submission_failure,
    failure_message,
    start_failure,
    start_timed_out,
    start_waiting,
    state_of,
)
from .kube.cluster import (
    APPS,
    CONFIG_MAPS,
    PODS,
    SECRETS,
    SERVICES,
    ApiError,
    Cluster,
    Conflict,
    Kind,
)
from .kube.indexes import indexed
from .kube.object_cache import newer
from .metrics import (
    APPLICATION_TRANSITIONS,
    DRIVER_PODS_CREATED,
    RECONCILES,
    SUBMISSION_SECONDS,
)
from .pipeline_status import InvalidPipeline, resolve
from .pod_privileges import (
    PodPrivilegeRefused,
    check_secret_names,
    check_service_accounts,
    is_operator_secret,
    refuse_secret,
)
from .specs import SparkApplicationSpec
from .timestamps import epoch_or_zero, now_rfc3339, rfc3339

log = structlog.get_logger(__name__)

#: Ready condition (status, reason) per state.
_READY: dict[AppState, tuple[bool | None, str, str]] = {
    AppState.RUNNING: (True, "Running", "the driver is running"),
    AppState.SUBMITTED: (False, "DriverPending", "the driver Pod is starting"),
    AppState.UNKNOWN: (None, "DriverUnknown", "the driver Pod's state is unknown"),
    AppState.COMPLETED: (True, "Completed", "the application completed"),
    AppState.FAILED: (False, "Failed", "the application failed"),
    AppState.SUBMISSION_FAILED: (False, "SubmissionFailed", "the driver Pod could not be created"),
    AppState.PENDING_RERUN: (False, "PendingRerun", "waiting to re-run the driver"),
    AppState.INVALIDATING: (False, "SpecChanged", "replacing the driver after a spec change"),
    AppState.SUSPENDED: (True, "Suspended", "suspended by spec.suspend"),
}

#: The Submitted condition: True once the current run's driver Pod was created; False while
#: the API server cannot create it yet (a reason of :data:`WAITING_REASONS`), or once the
#: submission failed (``SubmissionFailed``).
SUBMITTED = "Submitted"
#: Why a driver Pod create waits, from the API server's answer, and what that means.
WAITING_REASONS: dict[str, str] = {
    "QuotaExceeded": "a ResourceQuota of the namespace has no room for it yet",
    "Throttled": "the API server throttles the operator (429 Too Many Requests)",
    "ApiUnavailable": "the API server did not answer or failed",
}

#: The first and the longest wait before another pass of an application whose pass got a
#: 403 the operator cannot fix (doubling in between): a Role is fixed by a person, in
#: minutes, and every pass before that only repeats the refused requests.
FORBIDDEN_FIRST_DELAY_S = 5.0
FORBIDDEN_MAX_DELAY_S = 300.0
#: The RBAC authorizer's refusal: ``User "…" cannot <verb> resource "<resource>" …``.
_RBAC_REFUSAL = re.compile(r'\bcannot [a-z]+ resource "')


@dataclass
class _Refused:
    """Consecutive forbidden passes of one application, and when the next one may run
    (``time.monotonic()``)."""

    passes: int
    retry_at: float


#: Applications whose last pass was forbidden, by ``(namespace, name)``.
_forbidden: dict[tuple[str, str], _Refused] = {}


def register(registry: kopf.OperatorRegistry, resync_seconds: float) -> None:
    """Register the SparkApplication handlers on ``registry``."""
    res = (names.GROUP, names.VERSION, names.APPS)
    # A restarted operator resumes live applications only: one that ended with its spec
    # observed has nothing a pass would change (a spec change while the operator was down
    # is kopf's update cause, and moves observedGeneration), and 1,000 kept runs cost 5,000
    # requests at the client's QPS before anything else moved.
    kopf.on.resume(*res, registry=registry, id="reconcile", when=_unsettled)(on_application)
    kopf.on.create(*res, registry=registry, id="reconcile")(on_application)
    kopf.on.update(*res, field="spec", registry=registry, id="reconcile")(on_application)
    kopf.timer(*res, interval=resync_seconds, registry=registry, id="resync")(on_resync)
    kopf.on.event(*res, registry=registry, id="forget-application")(on_application_event)
    kopf.on.event(
        "",
        "v1",
        "pods",
        labels={names.LABEL_ROLE: names.ROLE_DRIVER, names.LABEL_MANAGED_BY: names.MANAGED_BY},
        registry=registry,
        id="driver-pod",
    )(on_driver_pod)
    # Executor Pods (Spark's, labelled with the application): an index for the status, and
    # an event handler that brings a change of state into it without waiting for the resync.
    executor_labels = {**executors.EXECUTOR_POD_LABELS, names.LABEL_APP: kopf.PRESENT}
    kopf.index("", "v1", "pods", labels=executor_labels, registry=registry, id="sg_executor_pods")(
        index_executor_pod
    )
    kopf.on.event("", "v1", "pods", labels=executor_labels, registry=registry, id="executor-pod")(
        on_executor_pod
    )
    # The ConfigMaps and Services the operator created: watched (selected by the API server,
    # see ``children.WATCH_SELECTORS``) so that one deleted or changed by someone is put back
    # at once, without reading them on every resync. Event handlers only: kopf writes
    # nothing to them (no finalizer, no annotation).
    kopf.on.startup(registry=registry, id="child-watch-selectors")(select_children)
    for plural in children.WATCH_SELECTORS:
        kopf.on.event(
            "",
            "v1",
            plural,
            labels={names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_APP: kopf.PRESENT},
            registry=registry,
            id=f"child-{plural}",
        )(on_child)


def select_children(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf startup handler (before any watch starts): the API server selects the ConfigMaps
    and Services the operator watches by its labels (``children.WATCH_SELECTORS``). kopf
    matches a key by its parts: ``("v1", "configmaps")`` is core ConfigMaps."""
    for plural, selector in children.WATCH_SELECTORS.items():
        settings.watching.label_selectors["v1", plural] = selector


def _adopt_indexes(ctx: OperatorContext, kwargs: dict[str, Any]) -> None:
    # kopf hands its indexes to handlers only; reconcile passes read them through ``ctx``.
    # ``sg_applications`` and ``sg_driver_pods`` are the DataSample engine's (datasample.py):
    # the same objects whichever handler hands them over first.
    if ctx.executor_pods is None and "sg_executor_pods" in kwargs:
        ctx.executor_pods = kwargs["sg_executor_pods"]
    if ctx.applications is None and "sg_applications" in kwargs:
        ctx.applications = kwargs["sg_applications"]
    if ctx.driver_pods is None and "sg_driver_pods" in kwargs:
        ctx.driver_pods = kwargs["sg_driver_pods"]


def index_executor_pod(namespace: str | None, labels: Any, body: kopf.Body, **_: Any) -> Any:
    """kopf index ``sg_executor_pods``: ``(namespace, application)`` → the executor Pods
    (their :func:`executors.summary`)."""
    return {(namespace, labels.get(names.LABEL_APP)): executors.summary(dict(body))}


async def on_application(
    body: kopf.Body, reason: Any, namespace: str | None, name: str, memo: Any, **kwargs: Any
) -> None:
    """Create / resume / spec change: one full reconcile pass. A create's pass is memory
    first: kopf runs the resync timer at an object's first sight too, often before the
    create handler, and a full pass that timer just made needs no second one."""
    _adopt_indexes(memo, kwargs)
    if namespace:
        created = reason == kopf.Reason.CREATE
        await reconcile(memo, namespace, name, memory_first=created, known=dict(body))


async def on_application_event(
    event: Any, namespace: str | None, name: str, memo: Any, **kwargs: Any
) -> None:
    """Every event of an application: when it is gone, drop what this process kept of it."""
    if (event or {}).get("type") == "DELETED" and namespace:
        memo.app_records.pop((namespace, name), None)
        _forbidden.pop((namespace, name), None)


async def on_resync(
    body: kopf.Body, namespace: str | None, name: str, memo: Any, **kwargs: Any
) -> None:
    """The resync timer: for a live application a memory pass (no API request when nothing
    is due), a full pass when it finds something to do or the last full one is
    ``full_resync_seconds`` old; nothing, and no API request, for one that ended and has
    nothing due (see :func:`settled`). Its events still bring passes: a spec change (the
    update handler), its driver or executor Pods, ConfigMap or Service changing or going."""
    if settled(dict(body), time.time()):
        return
    _adopt_indexes(memo, kwargs)
    if namespace:
        await reconcile(
            memo,
            namespace,
            name,
            resync=True,
            memory_first=True,
            known=dict(body),
            background=True,
        )


def _unsettled(body: kopf.Body, **_: Any) -> bool:
    """kopf filter of the resume handler: not :func:`settled` now."""
    return not settled(dict(body), time.time())


def settled(app: dict[str, Any], now: float) -> bool:
    """True for an application whose run ended (``COMPLETED``, ``FAILED``,
    ``SUBMISSION_FAILED``) with its current spec observed, and whose ``timeToLiveSeconds``
    (if any) is not yet due at ``now`` (epoch seconds): a pass would change nothing. Without
    this, every ended application kept by a batch platform cost the same API requests per
    resync as a running one."""
    status = app.get("status") or {}
    if AppState(_state(status)) not in TERMINAL:
        return False
    if status.get("observedGeneration") != (app.get("metadata") or {}).get("generation"):
        return False
    ttl = (app.get("spec") or {}).get("timeToLiveSeconds")
    if ttl is None:
        return True
    ended = epoch_or_zero(status.get("terminationTime"))
    return bool(ended) and now < ended + float(ttl)


async def on_driver_pod(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    """Any event of a driver Pod: a pass of its application (named by the Pod's label),
    memory first. kopf updates its index with the event before it calls handlers, so the
    memory pass sees what changed and hands over to a full pass at once when the state, the
    driver's address or its start must be written; an event that changes nothing the
    status says (a watch that lists or replays the Pod again, a condition of no
    consequence) then costs no request."""
    _adopt_indexes(memo, kwargs)
    app = (body.metadata.labels or {}).get(names.LABEL_APP)
    if app and body.metadata.namespace:
        await reconcile(memo, body.metadata.namespace, app, memory_first=True)


async def on_executor_pod(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    """An executor Pod changed: a memory pass of its application when the status shows
    another state for it (most events of a Pod change nothing the status says; the resync
    timer records the rest, e.g. a Pod gone). What executors show is written from memory;
    a full pass only when the pass finds more to do."""
    _adopt_indexes(memo, kwargs)
    namespace, app = body.metadata.namespace, (body.metadata.labels or {}).get(names.LABEL_APP)
    if not namespace or not app:
        return
    known = indexed(kwargs.get("sg_applications"), (namespace, app))
    status = (known or {}).get("status") or {}
    shown = (status.get("executorState") or {}).get(body.metadata.name)
    if (
        known is not None
        and shown == executors.pod_state(dict(body))
        and status.get("sparkApplicationId")
    ):
        return
    await reconcile(memo, namespace, app, memory_first=True)


async def on_child(event: Any, body: kopf.Body, resource: Any, memo: Any, **kwargs: Any) -> None:
    """An event of a ConfigMap or Service the operator created: a full pass of its
    application when it is gone, or no longer what the application wants (someone changed
    it); nothing for the events of the operator's own writes, nor for an application that
    is gone, being deleted or :func:`settled` (a finished run needs its children no more)."""
    ctx: OperatorContext = memo
    _adopt_indexes(ctx, kwargs)
    namespace = body.metadata.namespace
    app_name = (body.metadata.labels or {}).get(names.LABEL_APP)
    plural = getattr(resource, "plural", "")
    if not namespace or not app_name or body.metadata.name != _child_name(plural, app_name):
        return
    app = _known_app(ctx, namespace, app_name)
    if app is None or app["metadata"].get("deletionTimestamp") or settled(app, time.time()):
        return
    gone = (event or {}).get("type") == "DELETED"
    if not gone and _child_current(ctx, app, plural, dict(body)):
        return
    await reconcile(ctx, namespace, app_name)


def _child_name(plural: str, app: str) -> str | None:
    if plural == "configmaps":
        return names.config_map_name(app)
    if plural == "services":
        return names.service_name(app)
    return None


def _child_current(
    ctx: OperatorContext, app: dict[str, Any], plural: str, child: dict[str, Any]
) -> bool:
    """Whether ``child`` (the application's ConfigMap or Service, as a watch delivered it)
    is the application's own and what its spec makes it (as :func:`_ensure_children`
    compares); False when that cannot be told without a full pass (the spec does not parse:
    the pass reports it)."""
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    uid = app["metadata"].get("uid") or ""
    try:
        spec = SparkApplicationSpec.parse(app.get("spec"))
        if plural == "configmaps":
            desired = children.config_map(
                name,
                namespace,
                uid,
                spec,
                resolved=_resolved(ctx, app, spec),
                env=ctx.config.driver,
            )
            return owned_by(child, app, children.ROLE_CONFIG) and (
                child.get("data") == desired["data"]
            )
        desired = children.service(name, namespace, uid, spec)
        return owned_by(child, app, children.ROLE_SERVICE) and not children.service_patch(
            child, desired
        )
    except (ValidationError, InvalidPipeline, children.ConfigTooLarge):
        return False


async def reconcile(
    ctx: OperatorContext,
    namespace: str,
    name: str,
    *,
    resync: bool = False,
    memory_first: bool = False,
    known: dict[str, Any] | None = None,
    background: bool = False,
) -> None:
    """One pass for ``namespace/name``; API failures raise ``kopf.TemporaryError``. After a
    forbidden pass, passes until its back-off ends return at once (no request). A
    ``resync`` pass stops after reading the application when it is :func:`settled`.
    ``memory_first``: a memory pass first (``known``: a version of the application the
    caller holds, e.g. the timer's), and a full pass only when it cannot settle the
    application (module docstring, "Cost follows live work"). ``background``: the caller is
    the timer, so a full pass that runs only because the last one is ``full_resync_seconds``
    old (the memory pass finds no step to take) takes at most half the client's rate
    (:meth:`~.kube.cluster.Cluster.background`), leaving the rest to work someone waits on
    (a submission, a change, a DataSample)."""
    key = (namespace, name)
    if background and _full_resync_due(ctx, key):
        # Its turn among a few other periodic resyncs first, then the lock: a pass of the
        # same application someone waits on never queues behind its background tokens.
        async with _background_passes(ctx):
            await _locked_pass(ctx, key, resync, memory_first, known, background=True)
    else:
        await _locked_pass(ctx, key, resync, memory_first, known, background=False)


def _with_cluster(ctx: OperatorContext, cluster: Cluster) -> OperatorContext:
    """``ctx`` with another API client (a memory view, the background client): every other
    field is shared, so what a pass records is seen by the next."""
    view = copy.copy(ctx)
    view.cluster = cluster
    return view


def _full_resync_due(ctx: OperatorContext, key: tuple[str, str]) -> bool:
    """Whether this process made a full pass of ``key`` and it is ``full_resync_seconds``
    old (the first pass of an application, e.g. its submission, is never background)."""
    record = ctx.app_records.get(key)
    if record is None or not record.checked_at:
        return False
    return time.monotonic() - record.checked_at >= ctx.config.full_resync_seconds


#: Requests a full pass makes (the application and four children): with half the client's
#: rate for background passes, this many of them at once keep it busy.
_REQUESTS_PER_FULL_PASS = 5


def _background_passes(ctx: OperatorContext) -> asyncio.Semaphore:
    """The periodic resyncs that may run at once: as many as half the client's rate keeps
    busy (``api_qps / 2 / 5``, at least 1), so each holds its application's lock about a
    second rather than as long as the whole backlog of due resyncs takes."""
    if ctx.background_passes is None:
        ctx.background_passes = asyncio.Semaphore(
            max(1, int(ctx.config.api_qps / 2 / _REQUESTS_PER_FULL_PASS))
        )
    return ctx.background_passes


async def _locked_pass(
    ctx: OperatorContext,
    key: tuple[str, str],
    resync: bool,
    memory_first: bool,
    known: dict[str, Any] | None,
    *,
    background: bool,
) -> None:
    """:func:`reconcile`'s pass under the application's lock. ``background``: its full
    resync is due; a memory pass still runs first, and the full pass is background work
    only when that one would have settled the application (no step to take)."""
    namespace, name = key
    async with ctx.lock(names.APP_KIND, namespace, name):
        refused = _forbidden.get(key)
        if refused is not None and time.monotonic() < refused.retry_at:
            return
        try:
            full = ctx
            if background:
                if refused is None and await _memory_pass(ctx, key, known, any_age=True):
                    full = _with_cluster(ctx, ctx.cluster.background())
            elif memory_first and refused is None and await _memory_pass(ctx, key, known):
                return
            for attempt in range(CONFLICT_ATTEMPTS):
                try:
                    await _reconcile(full, namespace, name, resync=resync)
                    break
                except Conflict:
                    # The application changed since this pass read it (its status write is
                    # fenced): the next pass reads it again.
                    if attempt + 1 == CONFLICT_ATTEMPTS:
                        raise
                    await asyncio.sleep(CONFLICT_RETRY_SECONDS)
        except ApiError as exc:
            RECONCILES.labels(names.APP_KIND, "error").inc()
            if exc.status == 403 and not exc.transient:
                delay = await _forbidden_pass(ctx, namespace, name, exc)
                raise kopf.TemporaryError(f"forbidden: {exc}", delay=delay) from None
            raise kopf.TemporaryError(f"Kubernetes API call failed: {exc}", delay=5) from None
        _forbidden.pop(key, None)
        record = ctx.app_records.get(key)
        if record is not None:  # None: the application is gone
            record.checked_at = time.monotonic()
        RECONCILES.labels(names.APP_KIND, "ok").inc()


#: A pass whose status write found the application changed (409) runs again at once, after
#: this pause (s), up to this many passes in all; then kopf retries it later.
CONFLICT_RETRY_SECONDS = 0.2
CONFLICT_ATTEMPTS = 3


# ---------------------------------------------------------------------------- memory passes
class _Stale(Exception):
    """A memory pass reached a step that acts, or a read the watches cannot answer: a full
    pass decides instead."""


#: Status fields a memory pass writes itself: what the driver (``progress``) and the
#: executor Pods' watch (``executorState``, ``sparkApplicationId``) report, display only.
_MEMORY_WRITES = frozenset({"progress", "executorState", "sparkApplicationId"})
#: Entries of the control Secret a memory pass reads (``driver_access``: the token to send,
#: the certificate to pin); its private key and the redaction key are never kept.
_KEPT_SECRET_KEYS = (names.TOKEN_KEY, CERT_KEY)
_KEPT_SECRET_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences")


class _MemoryView:
    """The API client of a memory pass: reads answered from memory, no request. The
    application is the newest version known (``app``); its driver Pod comes from kopf's
    index (watched: an absent entry means no such Pod, or one the watch has not delivered
    yet, which a full pass then confirms); the Secrets as the application's last full pass
    read them (``record``). Any other read, and every write but a status patch of
    :data:`_MEMORY_WRITES` only, raises :class:`_Stale`; that patch carries the
    application's ``resourceVersion``, so it never lands on a version it was not computed
    from (a ``409`` is :class:`_Stale` too)."""

    def __init__(
        self,
        ctx: OperatorContext,
        app: dict[str, Any],
        record: ApplicationRecord,
        *,
        driver_pod: dict[str, Any] | None = None,
    ) -> None:
        self._ctx, self._app, self._record = ctx, app, record
        #: The driver Pod a full pass just read (for its progress read), instead of the index.
        self._driver_pod = driver_pod

    async def find(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        app_name = self._app["metadata"]["name"]
        if namespace != self._app["metadata"]["namespace"]:
            raise _Stale(f"{kind.plural} {namespace}/{name}: another namespace")
        if kind == APPS and name == app_name:
            return copy.deepcopy(self._app)
        if kind == PODS and name == names.driver_pod_name(app_name):
            if self._driver_pod is not None:
                return copy.deepcopy(self._driver_pod)
            return indexed(self._ctx.driver_pods, (namespace, name))
        if kind == SECRETS and name in self._record.secrets:
            kept = self._record.secrets[name]
            return copy.deepcopy(kept) if kept is not None else None
        raise _Stale(f"{kind.plural} {name}: not known from memory")

    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        found = await self.find(kind, namespace, name)
        if found is None:
            raise _Stale(f"{kind.plural} {name}: absent")
        return found

    async def patch_status(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        if kind != APPS or not set(status) <= _MEMORY_WRITES:
            raise _Stale(f"a status change of {sorted(status)}")
        fence = resource_version or self._app["metadata"].get("resourceVersion")
        try:
            return await self._ctx.cluster.patch_status(
                kind, namespace, name, status, resource_version=fence
            )
        except Conflict:
            raise _Stale("the application changed since it was read") from None

    async def list_objects(self, kind: Kind, *_: Any, **__: Any) -> list[dict[str, Any]]:
        raise _Stale(f"a list of {kind.plural}")

    async def create(self, kind: Kind, *_: Any, **__: Any) -> dict[str, Any]:
        raise _Stale(f"a create of {kind.plural}")

    async def patch(self, kind: Kind, *_: Any, **__: Any) -> dict[str, Any]:
        raise _Stale(f"a patch of {kind.plural}")

    async def delete(self, kind: Kind, *_: Any, **__: Any) -> bool:
        raise _Stale(f"a delete of {kind.plural}")


def _in_memory(ctx: OperatorContext) -> bool:
    return isinstance(ctx.cluster, _MemoryView)


def _act(ctx: OperatorContext, what: str) -> None:
    """Before a step that acts (Events, logs and writes that must not run twice): a memory
    pass stops here, for a full pass to do it from fresh reads."""
    if _in_memory(ctx):
        raise _Stale(what)


async def _memory_pass(
    ctx: OperatorContext,
    key: tuple[str, str],
    known: dict[str, Any] | None,
    *,
    any_age: bool = False,
) -> bool:
    """A memory pass of application ``key``: True when it settled the application (nothing
    to do, or only what :data:`_MEMORY_WRITES` says), False when a full pass must run: the
    last one is ``full_resync_seconds`` old (unless ``any_age``) or there was none in this
    process, kopf's indexes are not handed over yet, or the pass found a step to take."""
    if ctx.applications is None or ctx.driver_pods is None or ctx.executor_pods is None:
        return False
    app = _known_app(ctx, *key, known)
    if app is None:
        return False
    record = ctx.app_records.get(key)
    if not settled(app, time.time()):
        if record is None or not record.checked_at:
            return False
        if not any_age and _full_resync_due(ctx, key):
            return False
    elif record is None:
        # An ended application needs no full pass of this process first (a restarted one
        # resumes none): its Pods' events, e.g. the first listing's, are settled from the
        # watches, and a step to take (a referenced Secret to check, TTL) still hands over.
        record = ApplicationRecord()
    view = _with_cluster(ctx, cast(Cluster, _MemoryView(ctx, app, record)))
    try:
        await _reconcile(view, *key, resync=True)
    except _Stale as exc:
        log.debug("full pass due", namespace=key[0], name=key[1], why=str(exc))
        return False
    return True


async def _read_progress(
    ctx: OperatorContext, app: dict[str, Any], pod: dict[str, Any]
) -> dict[str, Any] | None:
    """:func:`read_progress` of ``app``'s running driver ``pod``. A full pass hands it the
    Pod and the control Secret it has just read (no second read of either); a memory pass
    its own view."""
    record = ctx.app_records.get((app["metadata"]["namespace"], app["metadata"]["name"]))
    if _in_memory(ctx) or record is None:
        return await read_progress(ctx, app)
    view = _with_cluster(ctx, cast(Cluster, _MemoryView(ctx, app, record, driver_pod=pod)))
    try:
        return await read_progress(view, app)
    except _Stale:  # the Secret was not read by this pass (another made it): read it
        return await read_progress(ctx, app)


def _known_app(
    ctx: OperatorContext, namespace: str, name: str, *candidates: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The newest version of the application this process knows, without a request: kopf's
    index, ``candidates``, what a full pass read or a status write answered. The latter is
    dropped once the index has caught up with it."""
    record = ctx.app_records.get((namespace, name))
    in_index = indexed(ctx.applications, (namespace, name))
    best: dict[str, Any] | None = None
    for candidate in (in_index, *candidates, record.app if record is not None else None):
        if candidate is not None and (best is None or newer(candidate, best)):
            best = candidate
    kept = record.app if record is not None else None
    if (
        record is not None
        and kept is not None
        and in_index is not None
        and not newer(kept, in_index)
    ):
        record.app = None
    return best


def _record(ctx: OperatorContext, app: dict[str, Any]) -> ApplicationRecord:
    key = (app["metadata"]["namespace"], app["metadata"]["name"])
    record = ctx.app_records.get(key)
    if record is None:
        record = ctx.app_records[key] = ApplicationRecord()
    return record


def _remember_app(ctx: OperatorContext, app: Any) -> None:
    """Keep ``app`` (read or written) as the newest version known, when it is."""
    if not isinstance(app, dict) or not (app.get("metadata") or {}).get("name"):
        return
    record = _record(ctx, app)
    if record.app is None or newer(app, record.app):
        record.app = copy.deepcopy(app)


def _remember_secret(
    ctx: OperatorContext, app: dict[str, Any], name: str, secret: dict[str, Any] | None
) -> None:
    """Keep what a full pass read (or wrote) of Secret ``name``, for memory passes: its
    metadata, and of the application's own control Secret the token and certificate."""
    if _in_memory(ctx):
        return
    kept: dict[str, Any] | None = None
    if secret is not None:
        meta = secret.get("metadata") or {}
        kept = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {k: copy.deepcopy(meta[k]) for k in _KEPT_SECRET_METADATA if k in meta},
        }
        if name == names.secret_name(app["metadata"]["name"]):
            data = secret.get("data") or {}
            kept["data"] = {k: data[k] for k in _KEPT_SECRET_KEYS if k in data}
    _record(ctx, app).secrets[name] = kept


def _resolved(
    ctx: OperatorContext, app: dict[str, Any], spec: SparkApplicationSpec
) -> dict[str, Any]:
    """The resolved pipeline of ``app``'s spec, planned once per ``(uid, generation)``.
    Raises ``InvalidPipeline``."""
    meta = app["metadata"]
    version = (str(meta.get("uid") or ""), meta.get("generation"))
    record = ctx.app_records.get((meta["namespace"], meta["name"]))
    if record is not None and record.resolved is not None and record.resolved[0] == version:
        return record.resolved[1]
    resolved = resolve(spec.pipeline_description(meta["name"]))
    if record is not None and version[1] is not None:
        record.resolved = (version, resolved)
    return resolved


async def _forbidden_pass(ctx: OperatorContext, namespace: str, name: str, exc: ApiError) -> float:
    """A pass got a 403 that waiting will not fix: back off (returns the delay) and say in
    ``Ready`` (reason ``Forbidden``) which verb on which resource was refused. The
    application is read again for that (its status write may be forbidden too: then the
    log and the back-off are all there is)."""
    key = (namespace, name)
    previous = _forbidden.get(key)
    passes = previous.passes + 1 if previous is not None else 1
    delay = min(FORBIDDEN_FIRST_DELAY_S * 2 ** min(passes - 1, 16), FORBIDDEN_MAX_DELAY_S)
    _forbidden[key] = _Refused(passes, time.monotonic() + delay)
    message = f"{forbidden_message(exc, namespace)}; next attempt in {delay:.0f} s"
    if passes == 1:
        log.warning("forbidden", namespace=namespace, name=name, error=str(exc))
    with contextlib.suppress(ApiError):
        app = await ctx.cluster.find(APPS, namespace, name)
        if app is None:
            _forbidden.pop(key, None)
            return delay
        if passes == 1:
            _event(app, "Warning", "Forbidden", message)
        conditions = set_condition(
            (app.get("status") or {}).get("conditions"),
            type="Ready",
            status=False,
            reason="Forbidden",
            message=message,
            generation=app["metadata"].get("generation"),
        )
        await _patch_if_changed(ctx, app, {"conditions": conditions})
    return delay


def forbidden_message(exc: ApiError, namespace: str) -> str:
    """What a 403 that is no quota's means, naming the verb and resource refused."""
    what = f"{exc.verb or 'call'} {exc.resource or 'an object'} in namespace {namespace!r}"
    if rbac_refusal(exc):
        return (
            f"the operator may not {what}: its ServiceAccount's Role or ClusterRole lacks "
            f"that verb (RBAC); the API server said: {exc.message}"
        )
    return f"the API server forbade the operator to {what}: {exc.message}"


def rbac_refusal(exc: ApiError) -> bool:
    """Whether ``exc`` is the RBAC authorizer refusing the operator's own request."""
    return exc.status == 403 and _RBAC_REFUSAL.search(exc.message) is not None


async def _reconcile(ctx: OperatorContext, namespace: str, name: str, *, resync: bool) -> None:
    """The pass; a memory pass when ``ctx.cluster`` is a :class:`_MemoryView`."""
    cluster = ctx.cluster
    memory = _in_memory(ctx)
    app = await cluster.find(APPS, namespace, name)
    if app is None or app["metadata"].get("deletionTimestamp"):
        _act(ctx, "the application is gone or going")
        ctx.forget(names.APP_KIND, namespace, name)
        ctx.app_records.pop((namespace, name), None)
        _forbidden.pop((namespace, name), None)
        return
    if not memory:
        _remember_app(ctx, app)
        _record(ctx, app).secrets.clear()  # this pass reads again the ones the spec names
    if resync and settled(app, time.time()):
        # The timer saw the application before the pass that ended it (it waited for that
        # pass's lock): the rest of this pass would read four children for nothing.
        return
    meta = app["metadata"]
    status: dict[str, Any] = app.get("status") or {}
    generation = meta.get("generation")
    pod_name = names.driver_pod_name(name)

    problem = names.app_name_problem(name)
    if problem is not None:
        await _invalid(ctx, app, "InvalidName", problem, has_children=False)
        return
    try:
        spec = SparkApplicationSpec.parse(app.get("spec"))
        resolved = _resolved(ctx, app, spec)
    except ValidationError as exc:
        await _invalid(ctx, app, "InvalidSpec", _validation_message(exc))
        return
    except InvalidPipeline as exc:
        await _invalid(ctx, app, exc.reason, exc.message)
        return

    try:
        await _check_pod_privileges(ctx, app, spec)
    except PodPrivilegeRefused as exc:
        await _refused(ctx, app, resolved, str(exc))
        await _expire(ctx, app, spec, status)  # timeToLiveSeconds still counts from its end
        return

    uid = meta.get("uid") or ""
    hash = children.spec_hash(app.get("spec") or {})
    control_secret: dict[str, Any] | None = None
    try:
        if not memory:
            # A memory pass leaves them to their watch events (on_child), and the Secret,
            # which is not watched, to the next full pass.
            control_secret = await _ensure_children(ctx, app, spec, resolved)
        pod = await cluster.find(PODS, namespace, pod_name)
        _must_own(
            app, pod, {"kind": "Pod", "metadata": {"labels": {names.LABEL_ROLE: names.ROLE_DRIVER}}}
        )
    except ChildNotOwned as exc:
        # Checked on every pass: once the object is gone, the next pass goes on as usual.
        await _invalid(ctx, app, "ChildNotOwned", str(exc), has_children=False)
        return
    except children.ConfigTooLarge as exc:
        # The API server would refuse the ConfigMap on every pass: say so, retry nothing.
        await _invalid(ctx, app, "InvalidSpec", str(exc))
        return
    except ApiError as exc:
        if exc.status not in (400, 422):
            raise
        # The spec made a child the API server refuses (a label or annotation it rejects,
        # annotations past 256 KiB): it would refuse it on every pass, until the spec changes.
        await _invalid(
            ctx, app, "InvalidSpec", f"spec: the API server refused an object made from it: {exc}"
        )
        return
    state = AppState(_state(status))
    same_spec = children.runs_spec(status.get("specHash"), app.get("spec") or {})
    now = time.time()
    new: dict[str, Any] = {
        "vertices": resolved["vertices"],
        "edges": resolved["edges"],
        "observedGeneration": generation,
        **await _executor_fields(ctx, app, pod, state),
    }
    p = _Pass(
        ctx=ctx,
        app=app,
        spec=spec,
        status=status,
        pod=pod,
        new=new,
        state=state,
        same_spec=same_spec,
        now=now,
        hash=hash,
        uid=uid,
        control_secret=control_secret,
        name=name,
        namespace=namespace,
    )

    # Gates that hold in any state, then the state's own handler.
    if spec.suspend:
        await _suspend(p)
    elif pod is not None and not children.runs_spec(
        (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_SPEC_HASH),
        app.get("spec") or {},
    ):
        await _invalidate(p)
    elif pod is not None and pod["metadata"].get("deletionTimestamp"):
        await _write(ctx, app, new, state)  # wait for the old driver to go
    else:
        await _BY_STATE.get(state, _new_run)(p)


@dataclass(frozen=True)
class _Pass:
    """What a pass knows once the children are in place and the driver Pod is read: the
    input of a state's handler. ``new`` is the status the handler completes and writes."""

    ctx: OperatorContext
    app: dict[str, Any]
    spec: SparkApplicationSpec
    status: dict[str, Any]
    pod: dict[str, Any] | None  # the driver Pod
    new: dict[str, Any]
    state: AppState  # as the status says, before this pass
    same_spec: bool  # the status's run (specHash) is of the current spec
    now: float
    hash: str
    uid: str
    control_secret: dict[str, Any] | None
    name: str
    namespace: str

    @property
    def pod_name(self) -> str:
        return names.driver_pod_name(self.name)


async def _suspend(p: _Pass) -> None:
    """``spec.suspend``: no driver. Once it is false again, the state (neither terminal nor
    active) makes a pass submit a new one."""
    if p.pod is not None and not p.pod["metadata"].get("deletionTimestamp"):
        await p.ctx.cluster.delete(PODS, p.namespace, p.pod_name)
    p.new.update(
        applicationState={"state": AppState.SUSPENDED.value, "errorMessage": None},
        driverInfo=_driver_info(p.name, None, ended=True),
    )
    await _write(p.ctx, p.app, p.new, AppState.SUSPENDED, "suspended by spec.suspend")


async def _invalidate(p: _Pass) -> None:
    """The spec changed under a running (or ended) driver: delete it (``INVALIDATING``);
    a later pass submits the new spec's driver once it is gone."""
    await p.ctx.cluster.delete(PODS, p.namespace, p.pod_name)
    p.new.update(applicationState={"state": AppState.INVALIDATING.value}, restarts=0)
    await _write(p.ctx, p.app, p.new, AppState.INVALIDATING, "spec changed; replacing the driver")


async def _new_run(p: _Pass) -> None:
    """No run of this spec under way (``NEW``, ``INVALIDATING``, ``SUSPENDED``, any state
    without a handler of its own): submit the driver, or follow the one already there."""
    if p.pod is None:
        await _submit_driver(p, rerun=False)
    else:
        await _follow_driver(p, p.pod)


async def _active(p: _Pass) -> None:
    """``SUBMITTED``, ``RUNNING``, ``UNKNOWN``: follow the driver Pod. One that vanished
    (deleted by hand, evicted) failed the run; none after a spec change: submit its driver."""
    if p.pod is not None:
        await _follow_driver(p, p.pod)
    elif p.same_spec:
        _ended(
            p.name, p.new, p.spec, p.status, succeeded=False, message="the driver Pod disappeared"
        )
        await _write(p.ctx, p.app, p.new, AppState(p.new["applicationState"]["state"]))
    else:
        await _submit_driver(p, rerun=False)


async def _pending_rerun(p: _Pass) -> None:
    """``PENDING_RERUN``: at ``nextRerunTime`` delete the ended driver Pod, then create the
    next run's (a changed spec's at once, as a first run)."""
    rerun_at = epoch_or_zero(p.status.get("nextRerunTime"))
    if p.pod is not None:
        if p.now >= rerun_at:
            await p.ctx.cluster.delete(PODS, p.namespace, p.pod_name)  # recreated once it is gone
        await _write(p.ctx, p.app, p.new, p.state)
    elif p.same_spec and p.now < rerun_at:
        await _write(p.ctx, p.app, p.new, p.state)
    else:
        await _submit_driver(p, rerun=p.same_spec)


async def _terminal(p: _Pass) -> None:
    """``COMPLETED``, ``FAILED``, ``SUBMISSION_FAILED``: over until the spec changes (then
    the new spec's driver is submitted); deleted ``timeToLiveSeconds`` after its end."""
    if p.pod is None and not p.same_spec:
        await _submit_driver(p, rerun=False)
        return
    await _write(p.ctx, p.app, p.new, p.state)
    await _expire(p.ctx, p.app, p.spec, p.status)


#: The handler of each state that has one; any other state: :func:`_new_run`.
_BY_STATE: dict[AppState, Callable[[_Pass], Awaitable[None]]] = {
    **dict.fromkeys(ACTIVE, _active),
    AppState.PENDING_RERUN: _pending_rerun,
    **dict.fromkeys(TERMINAL, _terminal),
}


async def _submit_driver(p: _Pass, *, rerun: bool) -> None:
    """Create this spec's driver Pod (:func:`_submit`)."""
    await _submit(
        p.ctx,
        p.app,
        p.spec,
        p.new,
        hash=p.hash,
        uid=p.uid,
        rerun=rerun,
        secret=p.control_secret,
    )


async def _follow_driver(p: _Pass, pod: dict[str, Any]) -> None:
    """A driver Pod runs this spec: its phase becomes the state. An ended one ends the run
    (or re-runs it, under the restart policy); a Pending one that cannot start, or did not
    within ``startTimeoutSeconds``, is deleted and the submission failed."""
    ctx, app, spec, status, new, now = p.ctx, p.app, p.spec, p.status, p.new, p.now
    pod_state = state_of(pod)
    if pod_state in (AppState.SUCCEEDING, AppState.FAILING):
        succeeded = pod_state is AppState.SUCCEEDING
        _ended(
            p.name,
            new,
            spec,
            status,
            succeeded=succeeded,
            message=None if succeeded else (failure_message(pod)),
        )
        await _write(ctx, app, new, AppState(new["applicationState"]["state"]))
        return
    waiting = None
    if pod_state is AppState.SUBMITTED:
        failure = start_failure(pod)
        waiting = start_waiting(pod)
        if failure is None and start_timed_out(
            epoch_or_zero(status.get("lastSubmissionAttemptTime")), now, spec.start_timeout_seconds
        ):
            failure = f"the driver Pod did not start within {spec.start_timeout_seconds} s" + (
                f" ({waiting})" if waiting else ""
            )
        if failure is not None:
            # A Pending Pod never starts by itself once this is known: free its node request
            # and let the restart policy decide, as for a Pod the API server refused.
            await ctx.cluster.delete(PODS, p.namespace, p.pod_name)
            new["driverInfo"] = _driver_info(p.name, None, ended=True)
            await _submission_failed(ctx, app, spec, new, failure)
            return
    new.update(applicationState={"state": pod_state.value}, driverInfo=_driver_info(p.name, pod))
    record = ctx.app_records.get((p.namespace, p.name))
    read_at = record.progress_read_at if record is not None else 0.0
    if pod_state is AppState.RUNNING and progress_due(
        status, now, ctx.config.progress_seconds, read_at
    ):
        progress = await _read_progress(ctx, app, pod)
        if progress is not None:
            new["progress"] = progress  # its publishedAt dates the read once written
            failed = progress.get("failed")
            if failed and failed != (status.get("progress") or {}).get("failed"):
                # One Event per new reason (a failing Python vertex's names its row).
                _event(app, "Warning", "PipelineFailed", str(failed))
        elif record is not None:
            # Nothing written (no change, no answer): the interval still counts from here.
            record.progress_read_at = now
    await _write(
        ctx, app, new, pod_state, f"waiting for the driver Pod: {waiting}" if waiting else None
    )
    first_run = int(status.get("executionAttempts") or 0) == 1
    if pod_state is AppState.RUNNING and p.state is AppState.SUBMITTED and first_run:
        created = epoch_or_zero(app["metadata"].get("creationTimestamp"))
        if created:
            SUBMISSION_SECONDS.observe(max(0.0, now - created))


def _driver_info(app: str, pod: dict[str, Any] | None, *, ended: bool = False) -> dict[str, Any]:
    """``status.driverInfo`` from what the operator knows: its child names, the Secret's
    name until the driver ended, the address while ``pod`` runs; every other key None, so
    the merge patch also removes what anyone else wrote there. Output for humans only: the
    operator never reads it back (``driver_access`` finds the driver from the Pod)."""
    endpoint = control_endpoint(pod) if pod is not None else None
    ip = (pod.get("status") or {}).get("podIP") if pod is not None and endpoint else None
    return {
        "podName": names.driver_pod_name(app),
        "serviceName": names.service_name(app),
        "controlSecretName": None if ended else names.secret_name(app),
        "podIP": ip,
        "controlEndpoint": endpoint,
        "webUIAddress": f"{ip}:{names.UI_PORT}" if ip else None,
    }


def _state(status: dict[str, Any]) -> str:
    value = (status.get("applicationState") or {}).get("state") or ""
    return value if value in AppState._value2member_map_ else AppState.UNKNOWN.value


def _ended(
    app: str,
    new: dict[str, Any],
    spec: SparkApplicationSpec,
    status: dict[str, Any],
    *,
    succeeded: bool,
    message: str | None,
) -> None:
    """Fill ``new`` for a driver that ended: re-run later, or the final state."""
    restarts = int(status.get("restarts") or 0)
    decision = after_end(spec.restart_policy, succeeded=succeeded, restarts=restarts)
    new["driverInfo"] = _driver_info(app, None, ended=True)
    if decision.rerun:
        new["applicationState"] = {"state": AppState.PENDING_RERUN.value, "errorMessage": message}
        new["nextRerunTime"] = rfc3339(time.time() + decision.delay)
    else:
        final = AppState.COMPLETED if succeeded else AppState.FAILED
        new["applicationState"] = {"state": final.value, "errorMessage": message}
        new["terminationTime"] = now_rfc3339()


async def _submit(
    ctx: OperatorContext,
    app: dict[str, Any],
    spec: SparkApplicationSpec,
    new: dict[str, Any],
    *,
    hash: str,
    uid: str,
    rerun: bool,
    secret: dict[str, Any] | None = None,
) -> None:
    """Create the driver Pod (a first run, a re-run, or the run of a changed spec).
    ``secret``: the control Secret as this pass read or created it (None: read it)."""
    _act(ctx, "a driver Pod to create")
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    status: dict[str, Any] = app.get("status") or {}
    restarts = int(status.get("restarts") or 0) + 1 if rerun else 0
    attempt = int(status.get("executionAttempts") or 0) + 1
    pod = children.driver_pod(
        name, namespace, uid, spec, hash=hash, attempt=attempt, env=ctx.config.driver
    )
    unsubmitted = dict(new)  # what a pass that could not create the Pod writes
    new.update(
        # A new run: its executors and Spark application id are new too.
        executorState=None,
        sparkApplicationId=None,
        specHash=hash,
        restarts=restarts,
        submissionAttempts=int(status.get("submissionAttempts") or 0) + 1,
        lastSubmissionAttemptTime=now_rfc3339(),
        nextRerunTime=None,
        terminationTime=None,
    )
    await _ensure_certificate(ctx, app, secret)  # the new driver serves HTTPS with it
    try:
        await ctx.cluster.create(PODS, namespace, pod)
    except Conflict:
        return  # another pass created it; its Pod event brings us back
    except ApiError as exc:
        if exc.transient:
            # The API server's trouble or the namespace's quota, not the Pod's: retried (a
            # batch platform queues on its quota; failing the run would lose it).
            await _wait_to_submit(ctx, app, spec, unsubmitted, new, exc, restarts=restarts)
            return
        if rbac_refusal(exc):
            raise  # the operator's own rights, not the application's: reconcile backs off
        await _submission_failed(
            ctx, app, spec, new, f"could not create the driver Pod: {exc}", restarts=restarts
        )
        return
    DRIVER_PODS_CREATED.inc()
    created = f"driver Pod created (attempt {attempt})"
    new.update(
        applicationState={"state": AppState.SUBMITTED.value, "errorMessage": None},
        executionAttempts=attempt,
        driverInfo=_driver_info(name, None),
        conditions=_with_submitted(app, new, True, "DriverPodCreated", created),
    )
    # Ready gets the message every later pass of a starting driver writes: one naming the
    # attempt would change at the Pod's first event, which only a full pass may write (a
    # second full pass per submission); the attempt is in Submitted and the Event.
    await _write(ctx, app, new, AppState.SUBMITTED, event_message=created)


async def _wait_to_submit(
    ctx: OperatorContext,
    app: dict[str, Any],
    spec: SparkApplicationSpec,
    unsubmitted: dict[str, Any],
    new: dict[str, Any],
    exc: ApiError,
    *,
    restarts: int,
) -> None:
    """The API server cannot create the driver Pod yet (``exc`` is transient): write why in
    the ``Submitted`` and ``Ready`` conditions (its message included), leave the state as
    it is, and raise ``kopf.TemporaryError`` to try again. Once ``startTimeoutSeconds``
    have passed since the first refusal, the submission failed (``restartPolicy`` decides,
    as for any failed submission).

    The wait is counted from the Submitted condition's ``lastTransitionTime``: in the
    status, so a restarted operator or a new leader counts from the same moment. A new
    spec (generation) is a new submission, with a wait of its own."""
    status: dict[str, Any] = app.get("status") or {}
    generation = app["metadata"].get("generation")
    now = time.time()
    timeout = spec.start_timeout_seconds
    previous = get_condition(status.get("conditions"), SUBMITTED)
    since = _waiting_since(previous, generation, now)
    if since is not None and now - since > timeout:
        message = f"could not create the driver Pod within startTimeoutSeconds ({timeout} s): {exc}"
        await _submission_failed(ctx, app, spec, new, message, restarts=restarts)
        return
    reason = "Throttled" if exc.status == 429 else "ApiUnavailable"
    if exc.status == 403:
        reason = "QuotaExceeded"
    until = rfc3339((since or now) + timeout)
    message = (
        f"the driver Pod cannot be created yet: {WAITING_REASONS[reason]}; retrying until "
        f"{until} (startTimeoutSeconds): {exc}"
    )
    conditions = status.get("conditions") or []
    if since is None:  # a new wait: its lastTransitionTime is now
        conditions = [c for c in conditions if c.get("type") != SUBMITTED]
        log.warning(
            "driver Pod create refused for now",
            namespace=app["metadata"]["namespace"],
            name=app["metadata"]["name"],
            reason=reason,
            error=str(exc),
        )
        _event(app, "Warning", reason, message)
    for type in (SUBMITTED, "Ready"):
        conditions = set_condition(
            conditions,
            type=type,
            status=False,
            reason=reason,
            message=message,
            generation=generation,
        )
    await _patch_if_changed(ctx, app, {**unsubmitted, "conditions": conditions})
    raise kopf.TemporaryError(
        f"could not create the driver Pod yet: {exc}",
        delay=max(exc.retry_after or 0.0, ctx.config.resync_seconds),
    )


def _waiting_since(previous: dict[str, Any] | None, generation: Any, now: float) -> float | None:
    """When the current wait for the driver Pod's create began (epoch seconds, at most
    ``now``), from the Submitted condition; None when none is under way for this spec."""
    if (
        previous is None
        or previous.get("status") != "False"
        or previous.get("reason") not in WAITING_REASONS
        or previous.get("observedGeneration") != generation
    ):
        return None
    since = epoch_or_zero(previous.get("lastTransitionTime"))
    return min(since, now) if since else None


def _with_submitted(
    app: dict[str, Any], new: dict[str, Any], status: bool, reason: str, message: str
) -> list[dict[str, Any]]:
    """The conditions ``new`` will write (else the stored ones) with Submitted set."""
    return set_condition(
        new.get("conditions", (app.get("status") or {}).get("conditions")),
        type=SUBMITTED,
        status=status,
        reason=reason,
        message=message,
        generation=app["metadata"].get("generation"),
    )


async def _submission_failed(
    ctx: OperatorContext,
    app: dict[str, Any],
    spec: SparkApplicationSpec,
    new: dict[str, Any],
    message: str,
    *,
    restarts: int | None = None,
) -> None:
    """The driver could not be started: re-try later (``restartPolicy``'s submission-failure
    retries) or end as ``SUBMISSION_FAILED``, with ``message`` in ``errorMessage``, the Ready
    condition and a Warning Event."""
    status: dict[str, Any] = app.get("status") or {}
    if restarts is None:
        restarts = int(status.get("restarts") or 0)
    decision = after_submission_failure(spec.restart_policy, restarts=restarts)
    new["conditions"] = _with_submitted(app, new, False, "SubmissionFailed", message)
    if decision.rerun:
        new["applicationState"] = {"state": AppState.PENDING_RERUN.value, "errorMessage": message}
        new["nextRerunTime"] = rfc3339(time.time() + decision.delay)
        await _write(ctx, app, new, AppState.PENDING_RERUN, message)
    else:
        new["applicationState"] = {
            "state": AppState.SUBMISSION_FAILED.value,
            "errorMessage": message,
        }
        new["terminationTime"] = now_rfc3339()
        await _write(ctx, app, new, AppState.SUBMISSION_FAILED, message)


async def _ensure_children(
    ctx: OperatorContext,
    app: dict[str, Any],
    spec: SparkApplicationSpec,
    resolved: dict[str, Any],
) -> dict[str, Any] | None:
    """Create the ConfigMap, Secret and Service when missing; keep the ConfigMap current.
    Returns the control Secret as read or created (None: another pass created it just now),
    so that a driver Pod created by the same pass does not read it again."""
    cluster, name = ctx.cluster, app["metadata"]["name"]
    namespace, uid = app["metadata"]["namespace"], app["metadata"].get("uid") or ""
    desired_cm = children.config_map(
        name, namespace, uid, spec, resolved=resolved, env=ctx.config.driver
    )
    existing = await cluster.find(CONFIG_MAPS, namespace, names.config_map_name(name))
    _must_own(app, existing, desired_cm)
    if existing is None:
        await _create(ctx, CONFIG_MAPS, namespace, desired_cm)
    elif existing.get("data") != desired_cm["data"]:
        await cluster.patch(
            CONFIG_MAPS, namespace, names.config_map_name(name), {"data": desired_cm["data"]}
        )
    secret = await cluster.find(SECRETS, namespace, names.secret_name(name))
    _must_own(
        app,
        secret,
        {"kind": "Secret", "metadata": {"labels": {names.LABEL_ROLE: names.ROLE_CONTROL_TOKEN}}},
    )
    if secret is None:
        # Generated once and kept: rotating it would cut a running driver off.
        token = secrets.token_urlsafe(32)
        certificate = issue_control_certificate(names.service_name(name), namespace)
        body = children.secret(name, namespace, uid, token, certificate)
        if await _create(ctx, SECRETS, namespace, body):
            _log_issued(app, certificate, "new application")
            secret = body
        else:  # another pass made it: the next full pass reads it
            secret = None
    if secret is not None:
        _remember_secret(ctx, app, names.secret_name(name), secret)
    desired_svc = children.service(name, namespace, uid, spec)
    svc = await cluster.find(SERVICES, namespace, names.service_name(name))
    _must_own(app, svc, desired_svc)
    if svc is None:
        await _create(ctx, SERVICES, namespace, desired_svc)
    else:
        # Labels and annotations added or changed only (spec.sparkUIOptions): others may
        # annotate it too.
        svc_patch = children.service_patch(svc, desired_svc)
        if svc_patch:
            await cluster.patch(SERVICES, namespace, names.service_name(name), svc_patch)
    return secret


async def _check_pod_privileges(
    ctx: OperatorContext, app: dict[str, Any], spec: SparkApplicationSpec
) -> None:
    """Raise :class:`PodPrivilegeRefused` when the Pods would run as a ServiceAccount outside
    the allowlist or reach a Secret the operator created for an application (by name, then
    by the labels of each other referenced Secret, read from the API)."""
    check_service_accounts(spec, ctx.config.allowed_service_accounts)
    namespace = app["metadata"]["namespace"]
    seen: set[str] = set()
    for field, name in check_secret_names(spec):
        if name in seen:
            continue
        seen.add(name)
        secret = await ctx.cluster.find(SECRETS, namespace, name)
        _remember_secret(ctx, app, name, secret)
        if secret is not None and is_operator_secret(secret):
            raise refuse_secret(field, name, "carries the labels of the operator's Secrets")


async def _refused(
    ctx: OperatorContext, app: dict[str, Any], resolved: dict[str, Any], message: str
) -> None:
    """The Pods would get rights the user may not hand out: stop the driver if one runs (it
    was started before the rule, or under a wider allowlist), create nothing, and report
    ``SUBMISSION_FAILED`` naming the field. ``specHash`` is cleared, so that once the spec or
    the allowlist changes, the next pass submits again."""
    _act(ctx, "a refused submission")
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    pod = await ctx.cluster.find(PODS, namespace, names.driver_pod_name(name))
    owned = pod is not None and owned_by(pod, app, names.ROLE_DRIVER)
    if owned and pod is not None and not pod["metadata"].get("deletionTimestamp"):
        await ctx.cluster.delete(PODS, namespace, names.driver_pod_name(name))
    new: dict[str, Any] = {
        "vertices": resolved["vertices"],
        "edges": resolved["edges"],
        "observedGeneration": app["metadata"].get("generation"),
        "applicationState": {"state": AppState.SUBMISSION_FAILED.value, "errorMessage": message},
        "driverInfo": _driver_info(name, None, ended=True),
        "specHash": None,
    }
    if _state(app.get("status") or {}) != AppState.SUBMISSION_FAILED.value:
        log.warning("submission refused", namespace=namespace, name=name, reason=message)
    await _write(ctx, app, new, AppState.SUBMISSION_FAILED, message)


async def _executor_fields(
    ctx: OperatorContext, app: dict[str, Any], pod: dict[str, Any] | None, state: AppState
) -> dict[str, Any]:
    """``executorState`` and ``sparkApplicationId`` for the status (:mod:`.executors`): the
    executor Pods of the current driver Pod, from kopf's index (the API without one). Keys
    are left out when there is nothing to say, so a pass writes nothing new."""
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    pods: list[dict[str, Any]] = []
    if pod is not None:
        if ctx.executor_pods is not None:
            pods = [copy.deepcopy(p) for p in ctx.executor_pods.get((namespace, name)) or []]
        else:
            labels = {names.LABEL_APP: name, executors.LABEL_SPARK_ROLE: executors.ROLE_EXECUTOR}
            pods = await ctx.cluster.list_objects(PODS, namespace, labels=labels)
    own = executors.of_driver(pods, pod)
    status = app.get("status") or {}
    if pod is not None:
        driver_state = state_of(pod).value
    else:
        driver_state = "SUCCEEDING" if state is AppState.COMPLETED else "FAILING"
    out: dict[str, Any] = {}
    previous = status.get("executorState")
    shown = executors.executor_state(
        own, previous if isinstance(previous, dict) else None, driver_state=driver_state
    )
    if shown:
        out["executorState"] = shown
    app_id = executors.application_id(pod, own)
    if app_id:
        out["sparkApplicationId"] = app_id
    return out


class ChildNotOwned(Exception):
    """An object already holds a child's name but is not this application's (a squatter, or
    a leftover of another application): the operator neither uses, changes nor deletes it."""


def _must_own(
    app: dict[str, Any], existing: dict[str, Any] | None, desired: dict[str, Any]
) -> None:
    """Raise :class:`ChildNotOwned` when ``existing`` is not the child ``desired`` describes
    (our labels and a controller owner reference to the application's uid)."""
    if existing is None:
        return
    role = ((desired.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ROLE, "")
    if not owned_by(existing, app, role):
        kind = existing.get("kind") or desired.get("kind") or "object"
        raise ChildNotOwned(
            f"a {kind} named {existing['metadata'].get('name')!r} exists in namespace "
            f"{app['metadata']['namespace']!r} and was not created by the operator for this "
            f"application: it is neither used, changed nor deleted; delete or rename it (or "
            f"rename the application)"
        )


async def _create(ctx: OperatorContext, kind: Any, namespace: str, body: dict[str, Any]) -> bool:
    """Create ``body``; False when it exists already (another pass made it: fine)."""
    try:
        await ctx.cluster.create(kind, namespace, body)
    except Conflict:
        return False
    return True


async def _ensure_certificate(
    ctx: OperatorContext, app: dict[str, Any], secret: dict[str, Any] | None = None
) -> None:
    """Before a driver Pod is created: make the owned control Secret hold a certificate and
    key for the driver Service that is valid for more than ``RENEWAL_MARGIN`` (30 days), and
    a redaction key (a Secret made before it held one gets one).

    Only here, with no driver running: a running driver loaded its certificate and key when
    it started, and the operator pins the certificate in the Secret, so replacing either under
    a running driver would cut it off or change its hashes. A Secret that already holds a good
    certificate or key keeps it; one not owned by the application is left alone
    (``driver_access`` ignores it). ``secret``: the Secret as the calling pass just read or
    created it, instead of a second read; None: read from the API.
    """
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    if secret is None:
        secret = await ctx.cluster.find(SECRETS, namespace, names.secret_name(name))
    if secret is None or not owned_by(secret, app, names.ROLE_CONTROL_TOKEN):
        return
    data = children.missing_redaction_key(secret) or {}
    service = names.service_name(name)
    reason = reissue_reason(children.secret_tls_data(secret), service, namespace)
    certificate = None if reason is None else issue_control_certificate(service, namespace)
    if certificate is not None:
        data.update(children.certificate_data(certificate))
    if not data:
        return
    patched = await ctx.cluster.patch(SECRETS, namespace, names.secret_name(name), {"data": data})
    if isinstance(patched, dict):
        _remember_secret(ctx, app, names.secret_name(name), patched)
    if certificate is not None and reason is not None:
        _log_issued(app, certificate, reason)
    if names.REDACTION_KEY_KEY in data:
        log.info("redaction key added to the control secret", namespace=namespace, name=name)


def _log_issued(app: dict[str, Any], certificate: ControlCertificate, reason: str) -> None:
    # The fingerprint and expiry only: the key never reaches a log, an Event or a status.
    log.info(
        "control certificate issued",
        namespace=app["metadata"]["namespace"],
        name=app["metadata"]["name"],
        reason=reason,
        fingerprint_sha256=certificate.fingerprint_sha256,
        not_after=certificate.not_after.isoformat(),
    )


async def _invalid(
    ctx: OperatorContext,
    app: dict[str, Any],
    reason: str,
    message: str,
    *,
    has_children: bool = True,
) -> None:
    """An invalid spec: stop the driver, report why, retry nothing until the spec changes.
    ``has_children`` False: the name cannot have any (no API call about them)."""
    _act(ctx, f"an invalid application ({reason})")
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    if has_children:
        await ctx.cluster.delete(PODS, namespace, names.driver_pod_name(name))
    status = app.get("status") or {}
    new = {
        "applicationState": {"state": AppState.FAILED.value, "errorMessage": message},
        "observedGeneration": app["metadata"].get("generation"),
        "vertices": [],
        "edges": [],
        "conditions": set_condition(
            status.get("conditions"),
            type="Ready",
            status=False,
            reason=reason,
            message=message,
            generation=app["metadata"].get("generation"),
        ),
    }
    ready = get_condition(status.get("conditions"), "Ready") or {}
    if _state(status) != AppState.FAILED.value or ready.get("reason") != reason:
        _event(app, "Warning", reason, message)
        log.warning("invalid application", namespace=namespace, name=name, reason=reason)
    await _patch_if_changed(ctx, app, new)


async def _write(
    ctx: OperatorContext,
    app: dict[str, Any],
    new: dict[str, Any],
    state: AppState,
    message: str | None = None,
    *,
    event_message: str | None = None,
) -> None:
    """Patch the status with ``new`` plus the Ready condition for ``state``; announce changes
    (with ``event_message``, when given, instead of the Ready message)."""
    status = app.get("status") or {}
    new.setdefault("applicationState", {"state": state.value})
    ready, reason, default_message = _READY.get(state, (None, "Unknown", "unknown state"))
    written = new.get("applicationState") or {}
    if "errorMessage" in written:
        error = written.get("errorMessage")
    else:
        # A pass that leaves the state as it was keeps its reason (the merge patch keeps
        # errorMessage), so the Ready message must not fall back to the generic text.
        kept = status.get("applicationState") or {}
        error = kept.get("errorMessage") if _state(status) == state.value else None
    new["conditions"] = set_condition(
        new.get("conditions", status.get("conditions")),
        type="Ready",
        status=ready,
        reason=reason,
        message=error or message or default_message,
        generation=app["metadata"].get("generation"),
    )
    previous = _state(status)
    # Written first, announced after: a memory pass stops at the write (_MemoryView), before
    # an Event or a log line a full pass would repeat.
    await _patch_if_changed(ctx, app, new)
    if previous != state.value:
        APPLICATION_TRANSITIONS.labels(state.value).inc()
        log.info(
            "application state",
            namespace=app["metadata"]["namespace"],
            name=app["metadata"]["name"],
            previous=previous,
            state=state.value,
        )
        failing = state in (AppState.FAILED, AppState.SUBMISSION_FAILED, AppState.PENDING_RERUN)
        _event(
            app,
            "Warning" if failing else "Normal",
            f"State{state.value.title().replace('_', '')}",
            event_message or message or error or default_message,
        )


async def _patch_if_changed(ctx: OperatorContext, app: dict[str, Any], new: dict[str, Any]) -> None:
    status = app.get("status") or {}
    state = new.get("applicationState")
    if isinstance(state, dict) and isinstance(state.get("errorMessage"), str):
        # Messages quote what the user wrote (a mount path of up to 4096 characters...): one
        # past the CRD's bound would make every status write of the application a 422.
        new["applicationState"] = {**state, "errorMessage": _cut(state["errorMessage"])}
    changed = {k: v for k, v in new.items() if _pruned(status.get(k)) != _pruned(v)}
    # A Ready condition that differs only in its timestamp is no change.
    if set(changed) == {"conditions"} and _same_conditions(
        status.get("conditions"), new["conditions"]
    ):
        return
    if changed:
        # Fenced by the version the pass decided from: a write computed from an older
        # version (another process's pass, a leader that lost its Lease mid-call) gets a 409
        # instead of overwriting a newer status, and the pass runs again from fresh reads.
        meta = app["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            written = await ctx.cluster.patch_status(
                APPS, namespace, name, changed, resource_version=meta.get("resourceVersion")
            )
        except Conflict:
            # Only another status fences this one out: a change of metadata alone (kopf's
            # own annotations, a label) leaves what the pass decided from, and what it did
            # (a driver Pod created) must still be written.
            written = await _patch_after_conflict(ctx, app, status, changed)
        # A second write of the same pass is fenced by this one's version.
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            meta["resourceVersion"] = version
        _remember_app(ctx, written)


async def _patch_after_conflict(
    ctx: OperatorContext, app: dict[str, Any], status: dict[str, Any], changed: dict[str, Any]
) -> dict[str, Any]:
    """The status write of a pass after its fenced write got a 409: again, fenced by a newer
    version whose status is still the one the pass decided from; raises ``Conflict`` when
    it is not. That version is first the watch's (kopf's first change of a new application,
    its finalizer, races with the first pass's write, and the watch has usually delivered
    it by then), then, when that one is outdated too, read from the API."""
    meta = app["metadata"]
    namespace, name = meta["namespace"], meta["name"]

    def same(fresh: dict[str, Any] | None) -> bool:
        return (
            fresh is not None
            and fresh["metadata"].get("uid") == meta.get("uid")
            and _pruned(fresh.get("status") or {}) == _pruned(status)
        )

    watched = _known_app(ctx, namespace, name)
    if watched is not None and newer(watched, app) and same(watched):
        with contextlib.suppress(Conflict):
            return await ctx.cluster.patch_status(
                APPS, namespace, name, changed,
                resource_version=watched["metadata"].get("resourceVersion"),
            )  # fmt: skip
    fresh = await ctx.cluster.find(APPS, namespace, name)
    if fresh is None or not same(fresh):
        raise Conflict(409, f"sparkapplications {namespace}/{name} changed since it was read")
    return await ctx.cluster.patch_status(
        APPS, namespace, name, changed, resource_version=fresh["metadata"].get("resourceVersion")
    )


def _cut(message: str) -> str:
    """``message`` within the CRD's bound of ``errorMessage``."""
    if len(message) <= MAX_MESSAGE_LENGTH:
        return message
    return message[: MAX_MESSAGE_LENGTH - 1] + "…"


def _pruned(value: Any) -> Any:
    """``value`` without None entries: a merge patch's None deletes, so None equals absent."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _same_conditions(old: Any, new: list[dict[str, Any]]) -> bool:
    def strip(cs: Any) -> list[dict[str, Any]]:
        # In any order: setting one condition moves it last, which is no change either.
        kept = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []]
        return sorted(kept, key=lambda c: str(c.get("type")))

    return strip(old) == strip(new)


async def _expire(
    ctx: OperatorContext, app: dict[str, Any], spec: SparkApplicationSpec, status: dict[str, Any]
) -> None:
    """Delete an application ``timeToLiveSeconds`` after it ended."""
    ttl = spec.time_to_live_seconds
    ended = epoch_or_zero(status.get("terminationTime"))
    if ttl is None or not ended or time.time() < ended + ttl:
        return
    _act(ctx, "timeToLiveSeconds is due")
    _event(app, "Normal", "Expired", f"deleting: ended more than {ttl}s ago (timeToLiveSeconds)")
    log.info(
        "application expired",
        namespace=app["metadata"]["namespace"],
        name=app["metadata"]["name"],
        ttl=ttl,
    )
    await ctx.cluster.delete(APPS, app["metadata"]["namespace"], app["metadata"]["name"])


def _event(app: dict[str, Any], type: str, reason: str, message: str) -> None:
    # Outside a kopf handler (unit tests) there is no event queue: nothing to post to.
    with contextlib.suppress(LookupError):
        kopf.event(
            kopf.Body(cast(kopf.RawBody, app)), type=type, reason=reason, message=message[:1024]
        )


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"spec.{where}: {err['msg']}")
    return "; ".join(parts)
