"""Reconciling a ``DataSample``: one sampling round, Pending → InProgress → a final phase.

Event-driven: kopf's watch feeds every DataSample event into ``ctx.samples``
(:mod:`.object_cache`) and queues a step when it is news (:mod:`.work_queue`); events of its
SparkApplication and driver Pod wake the DataSamples of that application. A queue worker runs
:func:`reconcile`, one step, which returns when the DataSample next needs one. Status is
output: the operator keeps its own record per DataSample uid (:meth:`_Step.record`), and the
driver binds the round to that uid, so a process meeting a DataSample mid-flight adopts it
within bounds (:meth:`_Step._adopt`, :meth:`_Step._relearn`). The rules: operator/README.md
("When the driver dies mid-round", "When the operator restarts mid-round", "The DataSample
engine"); the phases: docs/architecture.md, "DataSample".
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import kopf
import structlog
from pydantic import ValidationError

from sparkglass.crds.datasample import MAX_MESSAGE_LENGTH
from sparkglass.runtime.contract.datasample_status import encode, phase_of
from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.result_caps import ResultCaps, ResultRejected
from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus
from sparkglass.runtime.contract.sampling_settings import client_deadline_ms
from sparkglass.runtime.control.client import (
    AsyncControlClient,
    ControlRejected,
    ControlUnavailable,
    ControlUntrusted,
)

from . import apache_spark, children, foreign_apps, foreign_pipeline, kubeflow, names, sample_fit
from .certificates import RENEWAL_MARGIN, read_stored_certificate
from .conditions import set_condition
from .context import OperatorContext, SampleRecord
from .driver_access import UNREAD, DriverAccess, control_endpoint, driver_access
from .driver_state import TERMINAL, run_end
from .kube.cluster import APPS, PODS, SAMPLES, ApiError, Conflict, NotFound
from .kube.indexes import indexed
from .kube.work_queue import WorkQueue
from .metrics import (
    PICKUP_SECONDS,
    RECONCILES,
    ROUND_SECONDS,
    ROUND_START_SECONDS,
    SAMPLE_RETRIES,
    SAMPLES_FINISHED,
)
from .results import (
    ResultRefused,
    ResultServiceUnavailable,
    RoundIdConflict,
    results_url,
)
from .specs import DataSampleSpec, parse_duration
from .timestamps import epoch_of, epoch_or_zero, now_rfc3339, rfc3339

log = structlog.get_logger(__name__)

PENDING, IN_PROGRESS = "Pending", "InProgress"
FINAL = frozenset({"Complete", "Partial", "NoData", "Failed", "Disabled", "Abandoned"})
#: Phases whose Ready condition is True: the DataSample did what its spec asks (a result
#: exists, or sampling is off for the application, which is a finished answer, not a fault,
#: so condition-based GitOps health does not show it as Degraded).
_SUCCESS = frozenset({"Complete", "Partial", "NoData", "Disabled"})
#: Extra seconds past the application's timeout before the operator gives up on a round the
#: driver never finished (the rule is ``client_deadline_ms``, shared with the service; the
#: driver ends every round within its timeout, the grace covers the operator's own steps).
_DEADLINE_GRACE_SECONDS = 30.0
MAX_RETRY_DELAY_SECONDS = 60.0


#: Labels of the driver Pods the operator created; the index and handlers filter on them
#: within the Pod watch, which the API server already narrows to Pods labelled with an
#: application (``executors.POD_WATCH_SELECTOR``), not every Pod of the namespace.
DRIVER_POD_LABELS = {names.LABEL_ROLE: names.ROLE_DRIVER, names.LABEL_MANAGED_BY: names.MANAGED_BY}
#: Seconds between checks of a DataSample waiting for its application to start (events of
#: the application and its driver Pod wake it sooner).
WAIT_RECHECK_SECONDS = 5.0
#: Seconds before a step that failed on the API server is tried again.
API_RETRY_SECONDS = 2.0
#: A status write refused because the object changed since it was read: retried at once
#: from the object as it now is.
CONFLICT_RETRY_SECONDS = 0.2
#: Queue workers: steps mostly wait on the network (driver, API server, store).
ENGINE_WORKERS = 16


def register(
    registry: kopf.OperatorRegistry,
    *,
    kubeflow_applications: bool = False,
    apache_spark_applications: bool = False,
) -> None:
    """Register the DataSample handlers and indexes on ``registry`` (the engine reads
    ``poll_seconds`` from the config). ``kubeflow_applications``: also watch Kubeflow
    spark-operator SparkApplications (only when the operator may: :func:`kubeflow.readable`),
    to create the control Secret of those that enable sampling before their driver starts;
    ``apache_spark_applications``: the same for the Apache Spark operator's."""
    res = (names.GROUP, names.VERSION, names.SAMPLES)
    kopf.index(names.GROUP, names.VERSION, names.APPS, registry=registry, id="sg_applications")(
        index_application
    )
    kopf.index("", "v1", "pods", labels=DRIVER_POD_LABELS, registry=registry, id="sg_driver_pods")(
        index_driver_pod
    )
    kopf.on.cleanup(registry=registry, id="datasample-engine")(on_cleanup)
    kopf.on.event(*res, registry=registry, id="datasample")(on_sample_event)
    kopf.on.event(names.GROUP, names.VERSION, names.APPS, registry=registry, id="wake-samples")(
        on_application_event
    )
    kopf.on.event(
        "", "v1", "pods", labels=DRIVER_POD_LABELS, registry=registry, id="wake-samples-pod"
    )(on_driver_pod_event)
    watched = [(kubeflow_applications, kubeflow.KUBEFLOW, "kubeflow-applications")]
    watched.append((apache_spark_applications, apache_spark.APACHE_SPARK, "apache-spark-apps"))
    for enabled, apps, handler_id in watched:
        if not enabled:
            continue
        # An event handler only: no finalizer, no annotation, nothing written to another
        # operator's resource (the operator may only read it).
        kopf.on.event(apps.group, apps.version, apps.plural, registry=registry, id=handler_id)(
            functools.partial(on_foreign_application_event, apps=apps)
        )


def index_application(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    """kopf index ``sg_applications``: ``(namespace, name)`` → the SparkApplication."""
    return {(namespace, name): copy.deepcopy(dict(body))}


def index_driver_pod(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    """kopf index ``sg_driver_pods``: ``(namespace, name)`` → the driver Pod."""
    return {(namespace, name): copy.deepcopy(dict(body))}


def _adopt_indexes(ctx: OperatorContext, kwargs: dict[str, Any]) -> None:
    # kopf hands its indexes to handlers only; the queue workers read them through ``ctx``.
    if ctx.applications is None and "sg_applications" in kwargs:
        ctx.applications = kwargs["sg_applications"]
        ctx.driver_pods = kwargs["sg_driver_pods"]


async def on_sample_event(event: Any, body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    """Every DataSample watch event: keep the newest version; queue a step when it is news
    (an event of the operator's own write is not: the write already updated the cache)."""
    ctx: OperatorContext = memo
    _adopt_indexes(ctx, kwargs)
    if ctx.queue is None:
        # Started from a handler, not at startup: kopf sets its Event posting queue in the
        # context of the tasks that process objects, and a task inherits the context of the
        # code creating it, so the workers' ``kopf.event`` calls find that queue.
        ctx.engine_task = start_engine(ctx)
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    if event.get("type") == "DELETED":
        _forget_sample(ctx, namespace, name, body.metadata.uid)
        return
    if ctx.samples.observe(dict(body)) and ctx.queue is not None:
        ctx.queue.add((namespace, name))


async def on_application_event(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    """A SparkApplication changed: wake its unfinished DataSamples (one may be waiting for it
    to start, or its round may have lost its driver)."""
    _adopt_indexes(memo, kwargs)
    wake_application(memo, body.metadata.namespace or "", body.metadata.name or "")


async def on_driver_pod_event(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
    """A driver Pod changed: wake the unfinished DataSamples of its application."""
    _adopt_indexes(memo, kwargs)
    app = (body.metadata.labels or {}).get(names.LABEL_APP)
    if app:
        wake_application(memo, body.metadata.namespace or "", app)


async def on_kubeflow_application_event(
    event: Any, body: kopf.Body, memo: Any, **kwargs: Any
) -> None:
    """:func:`on_foreign_application_event` for a Kubeflow SparkApplication."""
    await on_foreign_application_event(event, body, memo, apps=kubeflow.KUBEFLOW, **kwargs)


async def on_foreign_application_event(
    event: Any, body: kopf.Body, memo: Any, apps: foreign_apps.ForeignApps, **kwargs: Any
) -> None:
    """Another operator's SparkApplication (Kubeflow's, Apache Spark's) changed: when its
    ``sparkConf`` enables sampling, make sure its control Secret exists (so that its driver,
    which reads the token from it, can start) and holds a usable certificate; then wake its
    unfinished DataSamples.

    The Secret is checked once per application uid and again only when its certificate
    nears renewal, not on each of the other operator's many status writes. A failure is
    logged and tried again on the next event (a DataSample that needs the Secret also
    creates it). ``ctx.kubeflow_secrets`` keeps the due times of both operators'
    applications: it is keyed by uid, unique across kinds."""
    ctx: OperatorContext = memo
    _adopt_indexes(ctx, kwargs)
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    uid = str(body.metadata.uid or "")
    if event.get("type") == "DELETED":
        ctx.kubeflow_secrets.pop(uid, None)  # the Secret goes with it (owner reference)
        ctx.foreign_pipelines.pop(uid, None)  # and the published pipeline
        return
    app = copy.deepcopy(dict(body))
    due = ctx.kubeflow_secrets.get(uid)
    if foreign_apps.sampling_requested(app) and (due is None or time.time() >= due):
        await _ensure_foreign_secret(ctx, apps, app)
    publishing = ctx.config.publish_foreign_pipelines
    if publishing and foreign_apps.sampling_requested(app) and apps.state(app) in apps.running:
        await _publish_foreign_pipeline(ctx, apps, app)
    wake_application(ctx, namespace, name)


async def _publish_foreign_pipeline(
    ctx: OperatorContext, apps: foreign_apps.ForeignApps, app: dict[str, Any]
) -> None:
    """Publish the running driver's pipeline for the service (:mod:`.foreign_pipeline`),
    unless that driver Pod's is published already. A failure is logged; the application's
    next event tries again."""
    meta = app["metadata"]
    uid = str(meta.get("uid") or "")
    if apps.app_name_problem(meta["name"]) is not None:
        return
    try:
        if ctx.foreign_pipelines.get(uid):
            pod = await apps.find_driver(ctx.cluster, app)
            published = (pod.get("metadata") or {}).get("uid") if isinstance(pod, dict) else None
            if published in (None, ctx.foreign_pipelines[uid]):
                return  # published for this driver, or none runs now
        pod_uid = await foreign_pipeline.publish_from_driver(ctx.cluster, apps, app)
    except ApiError as exc:
        log.warning(
            f"{apps.log_name} pipeline not published",
            namespace=meta["namespace"],
            application=meta["name"],
            error=str(exc),
        )
        return
    if pod_uid:
        ctx.foreign_pipelines[uid] = pod_uid


async def _ensure_foreign_secret(
    ctx: OperatorContext, apps: foreign_apps.ForeignApps, app: dict[str, Any]
) -> None:
    meta = app["metadata"]
    if problem := apps.app_name_problem(meta["name"]):
        log.warning(
            f"{apps.log_name} application not sampleable", namespace=meta["namespace"], why=problem
        )
        ctx.kubeflow_secrets[str(meta["uid"])] = float("inf")
        return
    try:
        secret = await apps.ensure_control_secret(ctx.cluster, app, renew=True)
    except ApiError as exc:
        log.warning(
            f"{apps.log_name} control secret not ensured",
            namespace=meta["namespace"],
            application=meta["name"],
            error=str(exc),
        )
        return
    if secret is None:
        message = (
            f"a Secret the operator did not create holds the name "
            f"{foreign_apps.secret_name(meta['name'])!r}: it is never read, and DataSamples of "
            "this application fail until it is deleted (the operator then creates its own)"
        )
        with contextlib.suppress(LookupError):
            kopf.event(
                kopf.Body(cast(kopf.RawBody, app)),
                type="Warning",
                reason="ControlSecretNotOwned",
                message=message,
            )
        ctx.kubeflow_secrets[str(meta["uid"])] = time.time() + MAX_RETRY_DELAY_SECONDS
        return
    try:
        stored = read_stored_certificate(children.secret_tls_data(secret))
    except ValueError:
        stored = None
    # Looked at again once the certificate is due for renewal (or at once, if unusable).
    due = (stored.not_after - RENEWAL_MARGIN).timestamp() if stored is not None else 0.0
    ctx.kubeflow_secrets[str(meta["uid"])] = max(due, time.time() + MAX_RETRY_DELAY_SECONDS)


def _forget_sample(ctx: OperatorContext, namespace: str, name: str, uid: object) -> None:
    """Drop everything kept for a deleted DataSample (cache, driver access, record, queue)."""
    ctx.samples.remove(namespace, name)
    ctx.driver_access.pop((namespace, name), None)
    ctx.records.pop(str(uid), None)
    if ctx.queue is not None:
        ctx.queue.forget((namespace, name))


async def _deleted(ctx: OperatorContext, namespace: str, name: str) -> bool:
    """True when the API server says the DataSample no longer exists (not when it cannot
    say: an error then is no proof)."""
    try:
        return await ctx.cluster.find(SAMPLES, namespace, name) is None
    except ApiError:
        return False


def wake_application(ctx: OperatorContext, namespace: str, app: str) -> int:
    """Queue a step now for every unfinished DataSample of ``namespace/app``; how many."""
    if ctx.queue is None:
        return 0
    woken = 0
    for (ns, name), obj in ctx.samples.items():
        if ns != namespace:
            continue
        # Finished by the operator's own record where it has one (the status is not input).
        own = ctx.records.get(str((obj.get("metadata") or {}).get("uid")))
        phase = (obj.get("status") or {}).get("phase")
        if (own.finished_at is not None) if own is not None else phase in FINAL:
            continue
        if ((obj.get("spec") or {}).get("applicationRef") or {}).get("name") == app:
            ctx.queue.add((ns, name))
            woken += 1
    return woken


async def on_cleanup(memo: Any, **_: Any) -> None:
    """Stop the engine's workers (a step in flight is cancelled; its state is in status)."""
    task = getattr(memo, "engine_task", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def start_engine(ctx: OperatorContext) -> asyncio.Task[None]:
    """Create the DataSample work queue on ``ctx`` and run its workers (a task to cancel)."""

    async def handle(key: Any) -> float | None:
        namespace, name = key
        try:
            return await reconcile(ctx, namespace, name)
        except kopf.TemporaryError as exc:
            return exc.delay if exc.delay is not None else API_RETRY_SECONDS

    ctx.queue = WorkQueue(handle, workers=ENGINE_WORKERS, error_delay=API_RETRY_SECONDS)
    return asyncio.create_task(ctx.queue.run(), name="sparkglass-datasample-engine")


async def reconcile(ctx: OperatorContext, namespace: str, name: str) -> float | None:
    """One step for ``namespace/name``; the seconds until it needs the next (None: only
    when something changes). API failures raise ``kopf.TemporaryError``."""
    async with ctx.lock(names.SAMPLE_KIND, namespace, name):
        step = _Step(ctx, namespace, name)
        try:
            await step.run()
        except ApiError as exc:
            # Deleted while the watch was away (a 410 Gone relist never reports what went in
            # the gap): a ghost in the cache, whose every write is a 404. Asked once, forgotten.
            if isinstance(exc, NotFound) and await _deleted(ctx, namespace, name):
                uid = (ctx.samples.get(namespace, name) or {}).get("metadata", {}).get("uid")
                _forget_sample(ctx, namespace, name, uid)
                ctx.forget(names.SAMPLE_KIND, namespace, name)
                log.info("datasample gone", namespace=namespace, name=name)
                return None
            RECONCILES.labels(names.SAMPLE_KIND, "error").inc()
            # A write that lost a race is retried soon, from the object as it now is.
            delay = CONFLICT_RETRY_SECONDS if isinstance(exc, Conflict) else 2
            raise kopf.TemporaryError(f"Kubernetes API call failed: {exc}", delay=delay) from None
        RECONCILES.labels(names.SAMPLE_KIND, "ok").inc()
        return step.next_step_in()


def _within(value: Any, low: float, high: float) -> float:
    """The timestamp ``value`` clamped to ``[low, high]``; ``high`` when it is not one."""
    at = epoch_or_zero(value)
    return min(max(at, low), high) if at else high


async def confirmed_run_end(
    indexed: dict[str, Any] | None,
    read_live: Callable[[], Awaitable[dict[str, Any] | None]] | None,
) -> str | None:
    """:func:`run_end` of the driver Pod as kopf's index holds it, confirmed from the API
    (``read_live``) before a round is given up. The index follows a watch, which lags behind
    the API on a loaded operator: it can still show the Pod as it was created (``Pending``,
    read as a new run's), or not yet at all, after the Pod ran and the round was opened on
    it. The API read costs one GET only when the index says the run ended."""
    ended = run_end(indexed)
    if ended is None or read_live is None:
        return ended
    return run_end(await read_live())


def _unavailable(exc: ControlUnavailable) -> str:
    """The condition reason of a driver that did not answer: ``DriverUntrusted`` when its
    certificate failed verification (the token was not sent), else ``DriverUnavailable``."""
    return "DriverUntrusted" if isinstance(exc, ControlUntrusted) else "DriverUnavailable"


@dataclass(frozen=True)
class _Limits:
    """What a round's client side needs of the application's sampling settings: its
    ``timeout`` (ms; the driver ends every round within it) and ``max-record-length``."""

    timeout_ms: int
    max_record_length: int


@dataclass(frozen=True)
class _Target:
    """A driver found for this DataSample's application: how to reach it, the limits of its
    rounds, and what to say when its control Secret holds no token of the operator's."""

    access: DriverAccess
    limits: _Limits
    token_missing: str


class _Step:
    """One reconcile step of one DataSample (holds what the step read)."""

    def __init__(self, ctx: OperatorContext, namespace: str, name: str) -> None:
        self.ctx, self.namespace, self.name = ctx, namespace, name
        self.body: dict[str, Any] = {}
        self.status: dict[str, Any] = {}
        self.spec: DataSampleSpec | None = None
        #: The DataSample is gone (deleted, or being deleted): no further step.
        self.gone = False
        #: Seconds until the next check of a DataSample waiting for its application.
        self.wait_for: float | None = None
        self._own: SampleRecord | None = None

    @property
    def record(self) -> SampleRecord:
        """The operator's own record of this DataSample (by uid): made at first sight, from
        the status within bounds (:meth:`_adopt`), and kept by this process from then on."""
        if self._own is None:
            meta = self.body.get("metadata") or {}
            key = str(meta.get("uid") or f"{self.namespace}/{self.name}")
            found = self.ctx.records.get(key)
            if found is None:
                found = self.ctx.records[key] = self._adopt()
            self._own = found
        return self._own

    def _adopt(self) -> SampleRecord:
        """A record for a DataSample this process meets for the first time: a new one (empty
        status), or one a predecessor worked on (a restart, a failover). The predecessor's
        bookkeeping is in the status, which whoever may patch ``datasamples/status`` can
        write, so it is taken once and only within bounds where a false value can end this
        DataSample sooner but never keep it, or anything, longer, nor pick another round:

        * ``completionTime``: not before the DataSample's creation and not after now (missing:
          now), so the TTL ends at the latest ``ttlSecondsAfterFinished`` from now;
        * ``retries`` as written (more only gives up sooner); ``nextAttemptTime`` at most the
          longest back-off (60 s) from now;
        * ``roundId`` only as the claim that a round was opened: the round read is the one the
          driver gives for this DataSample's uid (:meth:`_relearn`); ``startTime`` within
          creation and now (the round's deadline can only come sooner).
        """
        status, now = self.status, time.time()
        created = epoch_of((self.body.get("metadata") or {}).get("creationTimestamp"))
        record = SampleRecord()
        if status.get("phase") in FINAL:
            record.finished_at = _within(status.get("completionTime"), created, now)
            return record
        retries = status.get("retries")
        record.retries = retries if isinstance(retries, int) and retries > 0 else 0
        record.next_attempt_at = min(
            epoch_or_zero(status.get("nextAttemptTime")), now + MAX_RETRY_DELAY_SECONDS
        )
        claimed = status.get("roundId")
        if isinstance(claimed, str) and claimed:
            record.claimed_round_id = claimed
            record.opened_at = _within(status.get("startTime"), created, now)
        return record

    async def _read(self) -> dict[str, Any] | None:
        """The DataSample from the engine's cache; from the API when the cache lacks it
        (unit tests, or a step queued before its first watch event was seen)."""
        body = self.ctx.samples.get(self.namespace, self.name)
        if body is None:
            body = await self.ctx.cluster.find(SAMPLES, self.namespace, self.name)
            if body is not None:
                self.ctx.samples.observe(body)
        return copy.deepcopy(body) if body is not None else None

    def next_step_in(self) -> float | None:
        """Seconds until this DataSample needs its next step; None when only an event can
        give it work: at once on create and resume, every ``poll_seconds`` only while a round
        is in flight, at ``nextAttemptTime`` after a transient failure (exponential back-off,
        1 s, 2 s, 4 s... at most 60 s, up to ``spec.backoffLimit`` times), and once
        ``ttlSecondsAfterFinished`` after the operator's record of the completion for a
        finished one (its deletion). Nothing else runs for a finished DataSample, and steps
        read the DataSample, its application and driver Pod from memory, not from the API."""
        if self.gone or not self.status:
            return None
        now = time.time()
        if self.record.finished_at is not None:
            at = self._expires_at()
            return None if at is None else max(0.0, at - now)
        retry_at = self.record.next_attempt_at
        if retry_at > now:
            return retry_at - now
        if self.wait_for is not None:
            return self.wait_for
        return self.ctx.config.poll_seconds

    async def run(self) -> None:
        body = await self._read()
        if body is None or body["metadata"].get("deletionTimestamp"):
            self.ctx.forget(names.SAMPLE_KIND, self.namespace, self.name)
            self.ctx.driver_access.pop((self.namespace, self.name), None)
            if body is not None:
                self.ctx.records.pop(str(body["metadata"].get("uid")), None)
            self.gone = True
            return
        self.body, self.status = body, body.get("status") or {}
        phase = self.status.get("phase")
        # Finished by the operator's own record, not by the phase in status: a phase written
        # by someone else neither stops a round in flight nor reopens a finished one.
        if self.record.finished_at is not None:
            await self._expire()
            return
        if phase in FINAL:
            log.warning(
                "status.phase was written by someone else; the round goes on",
                namespace=self.namespace,
                name=self.name,
                phase=phase,
            )
        try:
            self.spec = DataSampleSpec.parse(body.get("spec"))
        except ValidationError as exc:
            await self._finish("Failed", "InvalidSpec", f"invalid spec: {exc.errors()[0]['msg']}")
            return
        try:
            self.spec.round_request()
        except InvalidParameterError as exc:
            await self._finish("Failed", "InvalidSpec", f"invalid spec.{exc.field}: {exc}")
            return
        if (ending := self.record.ending) is not None:
            phase, reason, message, extra = ending
            await self._finish(phase, reason, message, extra=extra)
            return
        if phase is None:
            await self._patch({"phase": PENDING, "message": "accepted", "retries": 0}, PENDING)
        if time.time() < self.record.next_attempt_at:
            return
        await self._advance()

    # ------------------------------------------------------------------ the step
    async def _advance(self) -> None:
        # Find the application's driver (each kind of application by its own trust rule),
        # then run the round the same way for both.
        if (apps := sample_fit.foreign(self._spec)) is not None:
            target = await self._foreign_target(apps)
        else:
            target = await self._sparkglass_target()
        if target is not None:
            await self._talk(target)

    async def _sparkglass_target(self) -> _Target | None:
        """The driver of a sparkglass SparkApplication, or None when this step ended here
        (finished, waiting, or a retry counted)."""
        spec = self._spec
        app_name = spec.application_ref.name
        app = await self._application(app_name)
        if app is None:
            await self._transient(
                "ApplicationNotFound",
                f"SparkApplication {app_name!r} not found in namespace {self.namespace!r}",
                final="Failed",
            )
            return None
        fit = await self._fit(app)
        if fit is None:
            return None
        # Where the driver is and its token come only from objects this operator created
        # for this application (see ``driver_access``), never from the application's status:
        # whoever may patch a status must not pick where the token goes.
        access = await self._driver_access(app)
        record = self.record
        opened = record.round_id or record.claimed_round_id
        if isinstance(access, str):
            state = ((app.get("status") or {}).get("applicationState") or {}).get("state") or ""
            if state in TERMINAL or opened:
                await self._finish("Abandoned", "ApplicationNotRunning", access)
            else:  # still starting: worth waiting for, up to applicationStartTimeout
                await self._wait_for_start(app_name, state, access)
            return None
        if round_id := opened:
            # A round dies with its driver run, and the Pod shows that before the application's
            # status may (operator/README.md, "When the driver dies mid-round").
            pod = await self._driver_pod(app_name)
            live = None
            if self.ctx.driver_pods is not None:  # without an index, the Pod came from the API
                live = functools.partial(
                    self.ctx.cluster.find, PODS, self.namespace, names.driver_pod_name(app_name)
                )
            if ended := await confirmed_run_end(pod, live):
                message = f"round {round_id} was lost with the driver of {app_name!r}: {ended}"
                await self._finish("Abandoned", "ApplicationNotRunning", message)
                return None
        return _Target(
            access=access,
            limits=_Limits(timeout_ms=fit.timeout_ms, max_record_length=fit.max_record_length),
            token_missing=(
                f"the control token Secret {names.secret_name(app_name)!r} of {app_name!r} is "
                "missing or was not created by the operator for this application"
            ),
        )

    async def _foreign_target(self, apps: foreign_apps.ForeignApps) -> _Target | None:
        """The driver of another operator's SparkApplication (Kubeflow's, Apache Spark's;
        :mod:`.foreign_apps`: the Pod it owns, the Secret the operator created for it), or
        None when this step ended here. The application's state says only whether to wait;
        never where to connect."""
        spec = self._spec
        app_name = spec.application_ref.name
        try:
            app = await apps.read_application(self.ctx.cluster, self.namespace, app_name)
        except foreign_apps.NotEnabled as exc:
            await self._misfit(sample_fit.not_enabled(apps, exc))
            return None
        if app is None:
            await self._transient(
                "ApplicationNotFound",
                f"{apps.kind_title} {app_name!r} ({apps.api_version}) not found in "
                f"namespace {self.namespace!r}",
                final="Failed",
            )
            return None
        fit = await self._fit(app)
        if fit is None:
            return None
        record = self.record
        opened = record.round_id or record.claimed_round_id
        state = apps.state(app)
        pod: dict[str, Any] | str = (
            f"{apps.title} {app_name!r} is not running (state {state or 'not set yet'})"
        )
        if state in apps.running:
            pod = await apps.find_driver(self.ctx.cluster, app)
        if isinstance(pod, str):
            if state in apps.over or opened:
                prefix = f"round {opened} was lost: " if opened else ""
                await self._finish("Abandoned", "ApplicationNotRunning", prefix + pod)
            else:
                await self._wait_for_start(app_name, state, pod)
            return None
        access = await self._foreign_access(apps, app, pod, opened)
        if access is None:
            return None
        return _Target(
            access=access,
            limits=_Limits(timeout_ms=fit.timeout_ms, max_record_length=fit.max_record_length),
            token_missing=(
                f"the Secret {foreign_apps.secret_name(app_name)!r} at the name of the control "
                f"Secret of {apps.title} {app_name!r} was not created by the operator "
                "for it (its token is never used): if the other operator (Kubeflow's or "
                "Apache Spark's) has an application of the same name with sampling on in this "
                "namespace, the Secret is that one's, so rename one of the two; otherwise "
                "delete it so that the operator creates its own"
            ),
        )

    async def _fit(self, app: dict[str, Any]) -> sample_fit.Fit | None:
        """What the round takes from ``app`` when this DataSample fits it (the rules the
        admission webhook applies too: :mod:`.sample_fit`); else None, the DataSample ended
        ``Failed`` or ``Disabled`` saying why."""
        fit = sample_fit.check(self._spec, app)
        if isinstance(fit, sample_fit.Misfit):
            await self._misfit(fit)
            return None
        return fit

    async def _misfit(self, misfit: sample_fit.Misfit) -> None:
        await self._finish(misfit.phase, misfit.reason.value, misfit.message)

    async def _foreign_access(
        self,
        apps: foreign_apps.ForeignApps,
        app: dict[str, Any],
        pod: dict[str, Any],
        opened: str | None,
    ) -> DriverAccess | None:
        """The access to the other operator's driver ``pod``, read once per driver Pod (uid and
        endpoint; the Secret is not read again for every poll). A round opened on another
        driver Pod was lost with it: ``Abandoned``. None when this step ended here."""
        key = (self.namespace, self.name)
        version = ((pod.get("metadata") or {}).get("uid"), foreign_apps.control_endpoint(pod))
        cached = self.ctx.driver_access.get(key)
        if opened and cached is not None and cached[0][0] != version[0]:
            await self._finish(
                "Abandoned",
                "ApplicationNotRunning",
                f"round {opened} was lost with the driver of {app['metadata']['name']!r}: "
                "a new driver Pod runs",
            )
            return None
        if cached is not None and cached[0] == version:
            access: DriverAccess = cached[1]
            return access
        try:
            access = await apps.driver_access(self.ctx.cluster, app, pod)
        except ValueError as exc:  # no control port on the Pod: only a new spec fixes that
            await self._finish("Failed", "ControlPortMissing", str(exc))
            return None
        if access.token and not access.refusal:
            self.ctx.driver_access[key] = (version, access)
        else:  # read again next step: the Secret may be fixed meanwhile (deleted, re-created)
            self.ctx.driver_access.pop(key, None)
        return access

    async def _talk(self, target: _Target) -> None:
        """Open, re-learn or poll the round on the driver ``target`` found."""
        access, record = target.access, self.record
        token = access.token
        if not token:
            await self._transient("ControlTokenMissing", target.token_missing, final="Failed")
            return
        if access.refusal:  # no TLS to this driver, or none we can verify: no token sent
            await self._finish("Failed", "ControlNotEncrypted", access.refusal)
            return
        async with AsyncControlClient(
            access.endpoint,
            token,
            timeout_s=self.ctx.config.control_timeout_seconds,
            tls=access.tls,
        ) as client:
            claimed = record.claimed_round_id
            if record.round_id is None and claimed and not await self._relearn(client, claimed):
                return
            if record.round_id is not None:
                await self._poll(client, target.limits)
            else:
                await self._open(client, target.limits)

    # ------------------------------------------------------------------ reads (cached)
    async def _application(self, app_name: str) -> dict[str, Any] | None:
        """The SparkApplication from kopf's index; from the API when the index does not
        have it (not seen yet: created a moment ago) or there is no index (unit tests)."""
        found = indexed(self.ctx.applications, (self.namespace, app_name))
        if found is None:
            found = await self.ctx.cluster.find(APPS, self.namespace, app_name)
        return found

    async def _driver_pod(self, app_name: str) -> dict[str, Any] | None:
        """The driver Pod from kopf's index (watched with a label selector, so an absent
        entry means no such Pod); from the API without an index (unit tests)."""
        pod_name = names.driver_pod_name(app_name)
        if self.ctx.driver_pods is None:
            return await self.ctx.cluster.find(PODS, self.namespace, pod_name)
        return indexed(self.ctx.driver_pods, (self.namespace, pod_name))

    async def _driver_access(self, app: dict[str, Any]) -> Any:
        """``driver_access`` for ``app``, read once per driver Pod version: while the indexed
        driver Pod keeps its uid and control endpoint, polls reuse what the open read."""
        key = (self.namespace, self.name)
        pod = None
        if self.ctx.driver_pods is not None:
            pod = await self._driver_pod(app["metadata"]["name"])
        version = ((pod.get("metadata") or {}).get("uid"), control_endpoint(pod)) if pod else None
        cached = self.ctx.driver_access.get(key)
        if version is not None and version[1] and cached is not None and cached[0] == version:
            return cached[1]
        # With the index, the Pod it holds (None: none) is the one the access is made from.
        access = await driver_access(
            self.ctx, app, pod=pod if self.ctx.driver_pods is not None else UNREAD
        )
        if version is not None and version[1] and not isinstance(access, str):
            self.ctx.driver_access[key] = (version, access)
        else:
            self.ctx.driver_access.pop(key, None)
        return access

    async def _wait_for_start(self, app_name: str, state: str, why: str) -> None:
        """The application is starting: wait (no retry spent) until ``applicationStartTimeout``
        after the DataSample's creation, then end ``Abandoned``."""
        timeout = self._spec.application_start_timeout
        created = epoch_of(self.body["metadata"].get("creationTimestamp")) or time.time()
        deadline = created + parse_duration(timeout, field="applicationStartTimeout")
        now = time.time()
        if now >= deadline:
            await self._finish(
                "Abandoned",
                "ApplicationNotRunning",
                f"{why}; it did not start within {timeout} (spec.applicationStartTimeout)",
            )
            return
        self.wait_for = min(WAIT_RECHECK_SECONDS, deadline - now)
        message = (
            f"waiting up to {timeout} for application {app_name!r} to start "
            f"(state {state or 'not set yet'}): {why}"
        )
        if self.status.get("message") != message or self.status.get("phase") != PENDING:
            await self._patch(
                {"phase": PENDING, "message": message},
                PENDING,
                condition=(None, "WaitingForApplication", message),
            )

    async def _open(self, client: AsyncControlClient, limits: _Limits) -> None:
        spec = self._spec
        uid = self.body["metadata"].get("uid")
        try:
            request = spec.round_request()
            # The uid as idempotency key: if this process dies before roundId is written, the
            # next step (here or in the other replica) gets the same round back.
            result = await client.open_round(
                spec.vertex,
                sampling_window=spec.sampling_window,
                request=None if request.is_plain() else request,
                idempotency_key=str(uid) if uid else None,
            )
        except ControlUnavailable as exc:
            reason = "TooManyConcurrentRounds" if exc.error_code else _unavailable(exc)
            await self._transient(reason, str(exc), final="Failed", error_code=exc.error_code)
            return
        except ControlRejected as exc:
            reason = "UnknownVertex" if exc.status == 404 else "RoundRejected"
            await self._finish("Failed", reason, f"the driver refused the round: {exc}")
            return
        if result.status is SampleStatus.DISABLED:
            await self._finish("Disabled", "SamplingDisabled", "the driver has sampling disabled")
            return
        if result.status is not SampleStatus.PENDING or not result.round_id:
            await self._record(result, limits.max_record_length)
            return
        self.record.round_id, self.record.opened_at = result.round_id, time.time()
        await self._patch(
            {
                "phase": IN_PROGRESS,
                "roundId": result.round_id,
                "startTime": rfc3339(precision="milliseconds"),
                "message": f"round {result.round_id} open on the driver",
                "nextAttemptTime": None,
            },
            IN_PROGRESS,
        )
        created = epoch_of(self.body["metadata"].get("creationTimestamp"))
        if created:
            ROUND_START_SECONDS.observe(max(0.0, time.time() - created))
        self._event("Normal", "RoundStarted", f"round {result.round_id} opened at {spec.vertex}")
        log.info("round opened", namespace=self.namespace, name=self.name, round=result.round_id)

    async def _relearn(self, client: AsyncControlClient, claimed: str) -> bool:
        """After a restart: which round did this DataSample open? Asked of the driver with the
        same idempotency key as the open (the DataSample's uid, set by the API server): a
        driver run that opened a round for it answers that round and opens nothing. The
        status' ``roundId`` is only the claim that one was opened; when the driver's answer
        is another round (a later driver run, which does not know the key, or a status
        written by someone else), that round is not read and the DataSample ends
        ``Abandoned`` (``RoundLost``). True when the round is known again."""
        spec, uid = self._spec, self.body["metadata"].get("uid")
        request = spec.round_request()
        try:
            result = await client.open_round(
                spec.vertex,
                sampling_window=spec.sampling_window,
                request=None if request.is_plain() else request,
                idempotency_key=str(uid) if uid else None,
            )
        except ControlUnavailable as exc:
            await self._transient(_unavailable(exc), str(exc), final="Failed")
            return False
        except ControlRejected as exc:
            await self._finish(
                "Abandoned", "RoundLost", f"the driver refused round {claimed}: {exc}"
            )
            return False
        if result.status is SampleStatus.PENDING and result.round_id == claimed:
            self.record.round_id = claimed
            log.info("round re-learned", namespace=self.namespace, name=self.name, round=claimed)
            return True
        await self._finish(
            "Abandoned",
            "RoundLost",
            f"the driver does not know round {claimed[:128]} as this DataSample's (it answered "
            f"{result.round_id or result.status.value}): a later driver run, or a status "
            "written by someone else; that round is not read",
        )
        return False

    async def _poll(self, client: AsyncControlClient, limits: _Limits) -> None:
        spec = self._spec
        round_id = str(self.record.round_id)
        try:
            result = await client.get_round(
                round_id, max_records=spec.max_records, subtask_index=spec.subtask_index
            )
        except ControlUnavailable as exc:
            await self._transient(_unavailable(exc), str(exc), final="Failed")
            return
        except ControlRejected as exc:
            if exc.status == 404:  # a later driver run (or an evicted result): never reopened
                await self._finish("Abandoned", "RoundLost", f"the driver lost round {round_id}")
            else:
                await self._finish("Failed", "RoundRejected", f"reading the round failed: {exc}")
            return
        if result.status is SampleStatus.PENDING:
            limit = (
                client_deadline_ms(limits.timeout_ms, round(_DEADLINE_GRACE_SECONDS * 1000)) / 1000
            )
            if time.time() > (self.record.opened_at or time.time()) + limit:
                await self._finish(
                    "Failed",
                    "Timeout",
                    f"round {round_id} did not end within {limit:.0f}s",
                    extra={"errorCode": ErrorCode.TIMEOUT.value},
                )
            return
        await self._record(result, limits.max_record_length)

    async def _record(self, result: DataSampleResult, max_record_length: int) -> None:
        """Save the full result, then write its bounded form (the order makes a crash in
        between harmless: the next step reads the same round and saves it again).

        A result past the contract's caps (:mod:`~sparkglass.runtime.contract.result_caps`;
        the driver is the application's own code) fails the DataSample and nothing of it is
        stored or written to status."""
        spec, meta = self._spec, self.body["metadata"]
        caps = ResultCaps(max_record_length)
        try:
            for sub in result.samples:
                caps.check(sub)
        except ResultRejected as exc:
            await self._finish(
                "Failed", "ResultPastCaps", f"the driver's result broke the contract: {exc}"
            )
            return
        uid = str(meta.get("uid") or "")
        # Without a service this only names a link.
        round_id = uid or str(result.round_id or self.name)
        extra = encode(result, self.ctx.config.status_record_bytes)
        if self.record.round_id:
            # Written again with the result: status is output, and a value someone else put
            # there since the open is replaced by the round the records come from.
            extra["roundId"] = self.record.round_id
        if self.ctx.results is not None:
            try:
                round_id = await self.ctx.results.save(
                    namespace=self.namespace,
                    name=self.name,
                    uid=uid or self.name,
                    application=spec.application_ref.name,
                    vertex=spec.vertex,
                    result=result,
                    started_at_ms=int((self.record.opened_at or 0) * 1000) or None,
                    request_key=spec.round_request().key(),
                    max_record_length=max_record_length,
                )
            except RoundIdConflict as exc:
                await self._finish("Failed", "RoundIdConflict", f"saving the result: {exc}")
                return
            except ResultRefused as exc:
                await self._finish("Failed", "ResultRefused", f"saving the result: {exc}")
                return
            except ResultServiceUnavailable as exc:
                await self._transient(
                    "ServiceUnavailable", f"saving the result: {exc}", final="Failed"
                )
                return
            except Exception as exc:  # a body the contract refuses, an answer that is not one
                # Counted like an outage, so that it ends (backoffLimit), never retried forever.
                await self._transient(
                    "ResultNotSaved",
                    f"saving the result: {type(exc).__name__}: {str(exc)[:300]}",
                    final="Failed",
                )
                return
        if self.ctx.config.service_url:
            extra["resultsURL"] = results_url(
                self.ctx.config.service_url, self.namespace, spec.application_ref.name, round_id
            )
        phase = phase_of(result)
        started = self.record.opened_at
        if started:
            ROUND_SECONDS.observe(max(0.0, time.time() - started))
        message = {
            "Complete": f"{result.total_record_count} records from every subtask",
            "Partial": f"{result.total_record_count} records; subtasks "
            f"{result.failed_subtasks} did not answer ({result.error_code})",
            "NoData": "no record passed the vertex during the window",
            "Failed": f"the round failed on the driver ({result.error_code})",
            "Disabled": "the driver has sampling disabled",
        }[phase]
        await self._finish(phase, f"Round{phase}", message, extra=extra)

    # ------------------------------------------------------------------ status writes
    @property
    def _spec(self) -> DataSampleSpec:
        assert self.spec is not None  # set before any step that needs it
        return self.spec

    async def _transient(
        self,
        reason: str,
        message: str,
        *,
        final: str,
        error_code: ErrorCode | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Count a transient failure: retry later with back-off, or end in ``final``."""
        limit = self.spec.backoff_limit if self.spec else 0
        retries = self.record.retries + 1
        self.record.retries = retries
        SAMPLE_RETRIES.labels(reason).inc()
        codes = {"errorCode": error_code.value} if error_code else {}
        if retries > limit:
            await self._finish(
                final,
                reason,
                f"{message} (gave up after {limit} retries)",
                extra={**codes, **(extra or {}), "retries": retries - 1},
            )
            return
        delay = min(MAX_RETRY_DELAY_SECONDS, 2.0 ** (retries - 1))
        self.record.next_attempt_at = time.time() + delay
        phase = (extra or {}).get("phase") or (
            IN_PROGRESS if self.record.round_id or self.record.claimed_round_id else PENDING
        )
        await self._patch(
            {
                **(extra or {}),
                "retries": retries,
                "nextAttemptTime": rfc3339(self.record.next_attempt_at, "milliseconds"),
                "message": f"retry {retries}/{limit} in {delay:.0f}s: {message}",
            },
            phase,
            condition=(None, reason, message),
        )
        self._event("Warning", reason, f"{message}; retry {retries}/{limit} in {delay:.0f}s")

    async def _finish(
        self, phase: str, reason: str, message: str, *, extra: dict[str, Any] | None = None
    ) -> None:
        fields = {
            **(extra or {}),
            "phase": phase,
            "message": message[:4096],
            "completionTime": now_rfc3339(),
            "nextAttemptTime": None,
        }
        # Decided: a failed write is written again by the next step, never decided anew.
        self.record.ending = (phase, reason, message, extra)
        await self._patch(fields, phase, condition=(phase in _SUCCESS, reason, message))
        self.record.finished_at = epoch_of(fields["completionTime"]) or time.time()
        self.record.ending = None
        self.ctx.driver_access.pop((self.namespace, self.name), None)
        SAMPLES_FINISHED.labels(phase).inc()
        normal = phase in ("Complete", "NoData", "Disabled")
        self._event("Normal" if normal else "Warning", reason, message)
        log.info(
            "datasample finished",
            namespace=self.namespace,
            name=self.name,
            phase=phase,
            reason=reason,
        )

    async def _patch(
        self,
        fields: dict[str, Any],
        phase: str,
        *,
        condition: tuple[bool | None, str, str] | None = None,
    ) -> None:
        """Patch the status (with Ready and observedGeneration) and mirror the labels."""
        generation = self.body["metadata"].get("generation")
        if isinstance(fields.get("message"), str) and len(fields["message"]) > MAX_MESSAGE_LENGTH:
            # Messages quote the application and the driver: one past the CRD's bound would
            # make every status write of this DataSample a 422.
            fields = {**fields, "message": fields["message"][: MAX_MESSAGE_LENGTH - 1] + "…"}
        ready, reason, message = condition or (None, phase, fields.get("message") or phase)
        fields = {
            **fields,
            "observedGeneration": generation,
            "conditions": set_condition(
                self.status.get("conditions"),
                type="Ready",
                status=ready,
                reason=reason,
                message=message,
                generation=generation,
            ),
        }
        first = not self.status.get("phase")
        # Labels first: whoever sees the new phase in status also finds it in the labels.
        await self._mirror_labels(phase)
        cluster = self.ctx.cluster
        try:
            # Fenced by the version this step read: an operator that lost its Lease in the
            # middle of a write (its call in flight past the new leader's start) cannot
            # overwrite what the new leader wrote since.
            self.body = await cluster.patch_status(
                SAMPLES,
                self.namespace,
                self.name,
                fields,
                resource_version=self.body["metadata"].get("resourceVersion"),
            )
        except Conflict:
            # Written since (a new leader, or someone patching the status): the next step
            # starts from the object as it is now, not from the cache's copy.
            fresh = await cluster.find(SAMPLES, self.namespace, self.name)
            if fresh is not None:
                self.ctx.samples.observe(fresh)
            raise
        self.status = self.body.get("status") or {**self.status, **fields}
        # The answer is the object as written: newer than any watch event still on its way.
        self.ctx.samples.observe(self.body)
        created = epoch_of(self.body.get("metadata", {}).get("creationTimestamp"))
        if first and created:
            PICKUP_SECONDS.observe(max(0.0, time.time() - created))

    async def _mirror_labels(self, phase: str) -> None:
        spec = self._spec if self.spec else None
        want = {names.LABEL_PHASE: phase}
        if spec is not None:
            want[names.LABEL_APP] = spec.application_ref.name[:63]
            want[names.LABEL_VERTEX] = spec.vertex
        have = self.body.get("metadata", {}).get("labels") or {}
        if any(have.get(k) != v for k, v in want.items()):
            body = await self.ctx.cluster.patch(
                SAMPLES, self.namespace, self.name, {"metadata": {"labels": want}}
            )
            if body.get("metadata"):
                self.body = body
                self.ctx.samples.observe(body)

    def _expires_at(self) -> float | None:
        """Epoch seconds when this finished DataSample is deleted (None: never)."""
        try:
            ttl = DataSampleSpec.parse(self.body.get("spec")).ttl_seconds_after_finished
        except ValidationError:
            return None
        if ttl is None:  # kubectl-made samples too: records must not stay in etcd forever
            ttl = self.ctx.config.default_ttl_seconds_after_finished
        done = self.record.finished_at
        return done + ttl if done is not None else None

    async def _expire(self) -> None:
        at = self._expires_at()
        if at is None or time.time() < at:
            return
        log.info("datasample expired", namespace=self.namespace, name=self.name)
        await self.ctx.cluster.delete(SAMPLES, self.namespace, self.name)
        self.gone = True

    def _event(self, type: str, reason: str, message: str) -> None:
        # Outside a kopf handler (unit tests) there is no event queue: nothing to post to.
        with contextlib.suppress(LookupError):
            kopf.event(
                kopf.Body(cast(kopf.RawBody, self.body)),
                type=type,
                reason=reason,
                message=message[:1024],
            )
