"""Reconciling a ``DataSample``: one sampling round, Pending → InProgress → a final phase.

A timer runs :func:`reconcile` every ``poll_seconds`` for each DataSample. Each pass reads
the DataSample fresh and takes one step; every fact it needs later (``roundId``,
``retries``, ``nextAttemptTime``) is in the status, so a restarted operator continues the
same round instead of opening a second one, and saving the result is keyed by the round id
(saving twice replaces). Final phases and their causes:

===========  ================================================================================
Complete     the round ended and every subtask answered
Partial      some subtasks did not answer (``failedSubtasks``, ``errorCode``)
NoData       no record passed the vertex during the window
Disabled     the application's ``spec.sampling.enabled`` is false (or the driver says so)
Failed       invalid spec; unknown vertex (the message lists the vertices); a samplingWindow
             longer than the application's; the driver refused
             the round; the round failed on the driver (``errorCode``); a transient failure
             outlived ``backoffLimit`` retries (``ApplicationNotFound``, driver unreachable,
             ``TOO_MANY_CONCURRENT_ROUNDS``); no result before the deadline (``TIMEOUT``)
Abandoned    the application is not running (over, or never came up within the retries),
             or the driver run holding the open round ended, whichever the operator sees
             first: the application's state, the driver Pod, or a driver that no longer
             knows the round (``RoundLost``); an open round is never reopened (README.md)
===========  ================================================================================

Transient failures are retried with exponential back-off (1 s, 2 s, 4 s... at most 60 s)
up to ``spec.backoffLimit`` times. Finished DataSamples are deleted
``ttlSecondsAfterFinished`` after ``completionTime``.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import structlog
from pydantic import ValidationError

from sparkglass.runtime.contract.datasample_status import encode, phase_of
from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus
from sparkglass.runtime.contract.sampling_settings import client_deadline_ms
from sparkglass.runtime.control.client import (
    AsyncControlClient,
    ControlRejected,
    ControlUnavailable,
)

from . import children, names
from .cluster import APPS, PODS, SAMPLES, ApiError
from .conditions import now_rfc3339, set_condition
from .context import OperatorContext
from .driver_access import driver_access
from .driver_state import TERMINAL, run_end
from .metrics import RECONCILES, ROUND_SECONDS, SAMPLE_RETRIES, SAMPLES_FINISHED
from .results import ROUND_ID_ANNOTATION, RoundIdConflict, SampleIdentity, results_url
from .specs import DataSampleSpec, SparkApplicationSpec, parse_duration

log = structlog.get_logger(__name__)

PENDING, IN_PROGRESS = "Pending", "InProgress"
FINAL = frozenset({"Complete", "Partial", "NoData", "Failed", "Disabled", "Abandoned"})
#: Phases whose Ready condition is True (a result exists).
_SUCCESS = frozenset({"Complete", "Partial", "NoData"})
#: Extra seconds past the application's timeout before the operator gives up on a round the
#: driver never finished (the rule is ``client_deadline_ms``, shared with the service; the
#: driver ends every round within its timeout, the grace covers the operator's own steps).
_DEADLINE_GRACE_SECONDS = 30.0
MAX_RETRY_DELAY_SECONDS = 60.0


def register(registry: kopf.OperatorRegistry, poll_seconds: float) -> None:
    """Register the DataSample handlers on ``registry``."""
    res = (names.GROUP, names.VERSION, names.SAMPLES)
    kopf.timer(*res, interval=poll_seconds, registry=registry, id="round")(on_sample)


async def on_sample(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    """Timer tick: one step of the round."""
    if namespace:
        await reconcile(memo, namespace, name)


async def reconcile(ctx: OperatorContext, namespace: str, name: str) -> None:
    """One step for ``namespace/name``; API failures raise ``kopf.TemporaryError``."""
    async with ctx.lock(names.SAMPLE_KIND, namespace, name):
        try:
            await _Step(ctx, namespace, name).run()
        except ApiError as exc:
            RECONCILES.labels(names.SAMPLE_KIND, "error").inc()
            raise kopf.TemporaryError(f"Kubernetes API call failed: {exc}", delay=2) from None
        RECONCILES.labels(names.SAMPLE_KIND, "ok").inc()


def _parse_time(text: str | None) -> float:
    """An RFC 3339 timestamp as epoch seconds (0 when absent)."""
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _rfc3339(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


class _Step:
    """One reconcile step of one DataSample (holds what the step read)."""

    def __init__(self, ctx: OperatorContext, namespace: str, name: str) -> None:
        self.ctx, self.namespace, self.name = ctx, namespace, name
        self.body: dict[str, Any] = {}
        self.status: dict[str, Any] = {}
        self.spec: DataSampleSpec | None = None

    async def run(self) -> None:
        body = await self.ctx.cluster.find(SAMPLES, self.namespace, self.name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            self.ctx.forget(names.SAMPLE_KIND, self.namespace, self.name)
            return
        self.body, self.status = body, body.get("status") or {}
        phase = self.status.get("phase")
        if phase in FINAL:
            await self._expire()
            return
        try:
            self.spec = DataSampleSpec.parse(body.get("spec"))
        except ValidationError as exc:
            await self._finish("Failed", "InvalidSpec", f"invalid spec: {exc.errors()[0]['msg']}")
            return
        if phase is None:
            await self._patch({"phase": PENDING, "message": "accepted", "retries": 0}, PENDING)
        if time.time() < _parse_time(self.status.get("nextAttemptTime")):
            return
        await self._advance()

    # ------------------------------------------------------------------ the step
    async def _advance(self) -> None:
        spec = self._spec
        app_name = spec.application_ref.name
        app = await self.ctx.cluster.find(APPS, self.namespace, app_name)
        if app is None:
            await self._transient(
                "ApplicationNotFound",
                f"SparkApplication {app_name!r} not found in namespace {self.namespace!r}",
                final="Failed",
            )
            return
        try:
            app_spec = SparkApplicationSpec.parse(app.get("spec"))
        except ValidationError:
            await self._finish("Failed", "InvalidApplication", f"{app_name!r} has an invalid spec")
            return
        vertices = [v.name for v in app_spec.pipeline.vertices]
        if vertices and spec.vertex not in vertices:
            await self._finish(
                "Failed",
                "UnknownVertex",
                f"vertex {spec.vertex!r} is not in application {app_name!r}; "
                f"vertices: {', '.join(vertices)}",
            )
            return
        if spec.sampling_window and parse_duration(spec.sampling_window) > parse_duration(
            app_spec.sampling.sampling_window
        ):
            await self._finish(
                "Failed",
                "InvalidSamplingWindow",
                f"samplingWindow {spec.sampling_window} exceeds the application's "
                f"{app_spec.sampling.sampling_window} (spec.sampling.samplingWindow)",
            )
            return
        if not app_spec.sampling.enabled:
            await self._finish(
                "Disabled",
                "SamplingDisabled",
                f"sampling is disabled for {app_name!r} (spec.sampling.enabled is false)",
            )
            return
        # Where the driver is and its token come only from objects this operator created
        # for this application (see ``driver_access``), never from the application's status:
        # whoever may patch a status must not pick where the token goes.
        access = await driver_access(self.ctx, app)
        if isinstance(access, str):
            state = ((app.get("status") or {}).get("applicationState") or {}).get("state") or ""
            if state in TERMINAL or self.status.get("roundId"):
                await self._finish("Abandoned", "ApplicationNotRunning", access)
            else:  # still starting: worth waiting for, within the retries
                await self._transient("ApplicationNotRunning", access, final="Abandoned")
            return
        if round_id := self.status.get("roundId"):
            # A round dies with its driver run, and the Pod shows that before the application's
            # status may (operator/README.md, "When the driver dies mid-round").
            pod = await self.ctx.cluster.find(PODS, self.namespace, names.driver_pod_name(app_name))
            if ended := run_end(pod):
                message = f"round {round_id} was lost with the driver of {app_name!r}: {ended}"
                await self._finish("Abandoned", "ApplicationNotRunning", message)
                return
        endpoint, secret = access
        token = children.secret_token(secret) if secret else None
        if not token:
            await self._transient(
                "ControlTokenMissing",
                f"the control token Secret {names.secret_name(app_name)!r} of {app_name!r} is "
                "missing or was not created by the operator for this application",
                final="Failed",
            )
            return
        async with AsyncControlClient(
            endpoint, token, timeout_s=self.ctx.config.control_timeout_seconds
        ) as client:
            if self.status.get("roundId"):
                await self._poll(client, app_spec)
            else:
                await self._open(client)

    async def _open(self, client: AsyncControlClient) -> None:
        spec = self._spec
        try:
            result = await client.open_round(spec.vertex, sampling_window=spec.sampling_window)
        except ControlUnavailable as exc:
            reason = "TooManyConcurrentRounds" if exc.error_code else "DriverUnavailable"
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
            await self._record(result)
            return
        await self._patch(
            {
                "phase": IN_PROGRESS,
                "roundId": result.round_id,
                "startTime": _rfc3339(time.time()),
                "message": f"round {result.round_id} open on the driver",
                "nextAttemptTime": None,
            },
            IN_PROGRESS,
        )
        self._event("Normal", "RoundStarted", f"round {result.round_id} opened at {spec.vertex}")
        log.info("round opened", namespace=self.namespace, name=self.name, round=result.round_id)

    async def _poll(self, client: AsyncControlClient, app_spec: SparkApplicationSpec) -> None:
        spec = self._spec
        round_id = str(self.status["roundId"])
        try:
            result = await client.get_round(
                round_id, max_records=spec.max_records, subtask_index=spec.subtask_index
            )
        except ControlUnavailable as exc:
            await self._transient("DriverUnavailable", str(exc), final="Failed")
            return
        except ControlRejected as exc:
            if exc.status == 404:  # a later driver run (or an evicted result): never reopened
                await self._finish("Abandoned", "RoundLost", f"the driver lost round {round_id}")
            else:
                await self._finish("Failed", "RoundRejected", f"reading the round failed: {exc}")
            return
        if result.status is SampleStatus.PENDING:
            limit = (
                client_deadline_ms(
                    round(parse_duration(app_spec.sampling.timeout) * 1000),
                    round(_DEADLINE_GRACE_SECONDS * 1000),
                )
                / 1000
            )
            if time.time() > _parse_time(self.status.get("startTime")) + limit:
                await self._finish(
                    "Failed",
                    "Timeout",
                    f"round {round_id} did not end within {limit:.0f}s",
                    extra={"errorCode": ErrorCode.TIMEOUT.value},
                )
            return
        await self._record(result)

    async def _record(self, result: DataSampleResult) -> None:
        """Save the full result, then write its bounded form (the order makes a crash in
        between harmless: the next step reads the same round and saves it again)."""
        spec, meta = self._spec, self.body["metadata"]
        claimed = (meta.get("annotations") or {}).get(ROUND_ID_ANNOTATION)
        # Without a store the claim only names a link (the service saves its own copy).
        round_id = str(claimed or result.round_id or meta.get("uid") or self.name)
        extra = encode(result, self.ctx.config.status_record_bytes)
        if self.ctx.store is not None:
            try:
                round_id = await self.ctx.store.save(
                    namespace=self.namespace,
                    application=spec.application_ref.name,
                    vertex=spec.vertex,
                    result=result,
                    claimed_round_id=str(claimed) if claimed else None,
                    sample=SampleIdentity(
                        name=self.name,
                        uid=str(meta.get("uid") or self.name),
                        created_ms=int(_parse_time(meta.get("creationTimestamp")) * 1000),
                    ),
                    started_at_ms=int(_parse_time(self.status.get("startTime")) * 1000) or None,
                )
            except RoundIdConflict as exc:
                await self._finish("Failed", "RoundIdConflict", f"saving the result: {exc}")
                return
            except Exception as exc:  # the database's trouble: transient by nature
                await self._transient(
                    "StoreUnavailable", f"saving the result failed: {exc}", final="Failed"
                )
                return
        if self.ctx.config.service_url:
            extra["resultsURL"] = results_url(
                self.ctx.config.service_url, self.namespace, spec.application_ref.name, round_id
            )
        phase = phase_of(result)
        started = _parse_time(self.status.get("startTime"))
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
        retries = int(self.status.get("retries") or 0) + 1
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
        phase = (extra or {}).get("phase") or self.status.get("phase") or PENDING
        await self._patch(
            {
                **(extra or {}),
                "retries": retries,
                "nextAttemptTime": _rfc3339(time.time() + delay),
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
        await self._patch(fields, phase, condition=(phase in _SUCCESS, reason, message))
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
        # Labels first: whoever sees the new phase in status also finds it in the labels.
        await self._mirror_labels(phase)
        cluster = self.ctx.cluster
        self.body = await cluster.patch_status(SAMPLES, self.namespace, self.name, fields)
        self.status = self.body.get("status") or {**self.status, **fields}

    async def _mirror_labels(self, phase: str) -> None:
        spec = self._spec if self.spec else None
        want = {names.LABEL_PHASE: phase}
        if spec is not None:
            want[names.LABEL_APP] = spec.application_ref.name[:63]
            want[names.LABEL_VERTEX] = spec.vertex
        have = self.body.get("metadata", {}).get("labels") or {}
        if any(have.get(k) != v for k, v in want.items()):
            await self.ctx.cluster.patch(
                SAMPLES, self.namespace, self.name, {"metadata": {"labels": want}}
            )

    async def _expire(self) -> None:
        try:
            ttl = DataSampleSpec.parse(self.body.get("spec")).ttl_seconds_after_finished
        except ValidationError:
            return
        if ttl is None:  # kubectl-made samples too: records must not stay in etcd forever
            ttl = self.ctx.config.default_ttl_seconds_after_finished
        done = _parse_time(self.status.get("completionTime"))
        if ttl is None or not done or time.time() < done + ttl:
            return
        log.info("datasample expired", namespace=self.namespace, name=self.name, ttl=ttl)
        await self.ctx.cluster.delete(SAMPLES, self.namespace, self.name)

    def _event(self, type: str, reason: str, message: str) -> None:
        # Outside a kopf handler (unit tests) there is no event queue: nothing to post to.
        with contextlib.suppress(LookupError):
            kopf.event(
                kopf.Body(cast(kopf.RawBody, self.body)),
                type=type,
                reason=reason,
                message=message[:1024],
            )
