"""Kubernetes mode: a round is a ``DataSample`` custom resource the operator runs.

The service creates a ``DataSample`` in the application's namespace, binds the round to the
``metadata.uid`` the API server gave it, then watches it until the round ends
(:class:`DataSampleExecutor`). The records come from the store only, saved there by the
operator in the round bound to that uid; a DataSample's ``status``, writable by anyone
granted ``patch datasamples/status``, can only tell that a round ended without records
(docs/security.md, "The trust boundary").
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from sqlalchemy.orm import Session, sessionmaker
from urllib3.exceptions import HTTPError, ProtocolError, ReadTimeoutError

from sparkglass.runtime.contract.datasample_status import decode
from sparkglass.runtime.contract.sample_result import (
    MAX_RECORDS_PER_RESPONSE,
    DataSampleResult,
    ErrorCode,
    SampleStatus,
)

from ..store import repository
from ..store.orm import Application
from .base import RoundOutcome, RoundRefused, RoundRequest, failed

log = logging.getLogger(__name__)

GROUP = "sparkglass.io"
VERSION = "v1alpha1"
PLURAL = "datasamples"
REQUESTED_BY_ANNOTATION = "sparkglass.io/requested-by"
RESULTS_URL_ANNOTATION = "sparkglass.io/results-url"
APPLICATION_LABEL = "sparkglass.io/application"
#: Longest watch of a DataSample, seconds: the API server ends it then, and the service reads
#: the object once and watches on (a stream quiet for that long may be a dead one).
WATCH_SECONDS = 60
VERTEX_LABEL = "sparkglass.io/vertex"
#: How long the dry run of a narrowed round's DataSample may take, seconds: the admission
#: webhook answers within 5 (past that it admits with a warning), the chart lets the API
#: server wait 10 for it.
CHECK_TIMEOUT_S = 10
#: The DataSample fields a client sets through the data-sample endpoint → its parameter.
_PARAMETER_OF_FIELD = re.compile(r"^spec\.(kind|filter|columns|expectation)(?:\[\d+\])?(?=$|: )")
#: How the API server words a validating admission webhook's denial
#: (apiserver/pkg/admission/plugin/webhook/errors: ``admission webhook %q denied the
#: request: <the webhook's message>``).
_WEBHOOK_DENIAL = re.compile(r'^admission webhook "[^"]*" denied the request: (?P<why>.+)$', re.S)
#: Longest message of a refusal relayed to the client, characters.
MAX_REFUSAL_CHARS = 1000


@dataclass(frozen=True)
class StoredRound:
    """A finished round row: its outcome without records (they stay in the store), whose
    it is, and the uid of the DataSample it is bound to, if any."""

    head: DataSampleResult
    namespace: str
    application: str
    vertex: str
    datasample_uid: str | None = None


class StoredRounds(Protocol):
    """The store as the executor needs it: finished rounds, and binding a round to the uid
    of the DataSample the service created for it."""

    def lookup(self, round_id: str) -> StoredRound | None:
        """The finished round the store holds under ``round_id``, if any."""
        ...

    def bind(self, round_id: str, uid: str) -> bool:
        """Record ``uid`` as round ``round_id``'s DataSample (first binding wins; a result
        the operator saved before is moved in); False when the round is missing or bound
        to another uid."""
        ...


class SessionStoredRounds:
    """:class:`StoredRounds` over a SQLAlchemy store (one short session per call)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def lookup(self, round_id: str) -> StoredRound | None:
        # The operator saved the records; the round's outcome is all the service needs,
        # not up to ~50 MB of records.
        with self._sessions() as session:
            row = repository.get_round(session, round_id)
            if row is None or row.status == SampleStatus.PENDING.value:
                return None
            app = session.get(Application, row.application_id)
            if app is None:
                return None
            return StoredRound(
                repository.round_head(row),
                app.namespace,
                app.name,
                row.vertex,
                row.datasample_uid,
            )

    def bind(self, round_id: str, uid: str) -> bool:
        with self._sessions.begin() as session:
            return repository.adopt_datasample_round(session, round_id, uid)


def store_lookup(sessions: sessionmaker[Session]) -> SessionStoredRounds:
    """The executor's :class:`StoredRounds` on ``sessions``' store."""
    return SessionStoredRounds(sessions)


class _NotOurs(Exception):
    """What the service reads is not (or no longer) the round it asked for; the message
    says why."""


def datasample_name(application: str, vertex: str, round_id: str) -> str:
    """A DNS-1123 subdomain name for the round's DataSample (≤ 253 characters)."""
    raw = f"{application}-{vertex}"[:240].lower()
    raw = re.sub(r"[^a-z0-9.-]", "-", raw).strip("-.")
    return f"{raw}-{round_id[:12]}"


def datasample_body(request: RoundRequest, ttl_seconds: int) -> dict[str, Any]:
    """The ``DataSample`` object the service creates for ``request``."""
    name = datasample_name(request.application, request.vertex, request.round_id)
    annotations: dict[str, str] = {}
    if request.results_url:
        # For whoever reads the DataSample (kubectl): where the service serves the full
        # result. The operator does not copy it into status.resultsURL, which it builds from
        # its own --service-url: an annotation is user-writable and must not pick a link.
        annotations[RESULTS_URL_ANNOTATION] = request.results_url
    if request.requested_by:
        annotations[REQUESTED_BY_ANNOTATION] = request.requested_by[:253]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DataSample",
        "metadata": {
            "name": name,
            "namespace": request.namespace,
            "labels": {
                APPLICATION_LABEL: request.application[:63],
                VERTEX_LABEL: request.vertex,
            },
            "annotations": annotations,
        },
        "spec": {
            "applicationRef": _application_ref(request),
            "vertex": request.vertex,
            "maxRecords": MAX_RECORDS_PER_RESPONSE,
            **({"samplingWindow": request.sampling_window} if request.sampling_window else {}),
            "ttlSecondsAfterFinished": ttl_seconds,
            **_narrowing_spec(request),
        },
    }


def _application_ref(request: RoundRequest) -> dict[str, Any]:
    """``spec.applicationRef``: the name, and for another operator's application its
    ``apiVersion`` and kind (sparkglass's own is the CRD's default)."""
    if request.application_api_version is None:
        return {"name": request.application}
    return {
        "apiVersion": request.application_api_version,
        "kind": "SparkApplication",
        "name": request.application,
    }


def _narrowing_spec(request: RoundRequest) -> dict[str, Any]:
    """``spec.kind``, ``filter``, ``columns`` and ``expectation`` of a narrowed round (the
    DataSample's own fields, which its admission webhook checks against the step)."""
    narrowing = request.narrowing
    if narrowing is None or narrowing.is_plain():
        return {}
    spec: dict[str, Any] = {"kind": narrowing.kind.value}
    if narrowing.filter is not None:
        spec["filter"] = narrowing.filter
    if narrowing.columns is not None:
        spec["columns"] = list(narrowing.columns)
    if narrowing.expectation is not None:
        spec["expectation"] = narrowing.expectation
    return spec


class DataSampleExecutor:
    """Creates DataSamples and waits for the operator to finish them; the result is what the
    operator saved in the store.

    The service creates ``sparkglass.io/v1alpha1`` ``DataSample`` ``{app}-{vertex}-{id}`` in
    the application's namespace (spec: ``applicationRef.name``, ``vertex``, ``maxRecords``,
    ``samplingWindow``, ``ttlSecondsAfterFinished``; annotation ``sparkglass.io/results-url``
    = where the service serves the full result, when ``public_url`` is set), binds the round
    to the ``metadata.uid`` the API server gave it, then watches it (the API server's events,
    not a poll) until the round ends.

    The records come from the store only: the operator saves the whole result through the
    service (``PUT .../datasamples/{name}/result``, :mod:`sparkglass.service.routers.results`)
    in the round bound to the DataSample's uid. A uid is the API server's, never a client's: a
    DataSample deleted and created again under the name has another uid, and its result never
    lands in this round. A DataSample's ``status`` can be written by anyone granted ``patch
    datasamples/status``, so it only ever tells that a round ended without records
    (``NoData``, ``Disabled``, ``Failed``, ``Abandoned``); a status claiming records the store
    does not hold fails the round.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        stored: StoredRounds,
        *,
        ttl_seconds: int = 600,
    ) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._stored = stored
        self._ttl = ttl_seconds

    def check(self, request: RoundRequest) -> None:
        """Create the narrowed round's DataSample with ``dryRun=All``: the API server
        validates it against the CRD's schema and rules and runs its admission webhook (which
        asks the driver), and stores nothing. A refusal naming ``spec.kind``, ``filter``,
        ``columns`` or ``expectation`` raises :class:`RoundRefused` naming the parameter, in
        the API server's words; anything else (a field the client did not set, RBAC, a
        throttled or failing API server, no answer) returns, and the round starts and
        records it."""
        if request.narrowing is None or request.narrowing.is_plain():
            return
        body = datasample_body(request, self._ttl)
        try:
            self._api.create_namespaced_custom_object(
                GROUP,
                VERSION,
                request.namespace,
                PLURAL,
                body,
                dry_run="All",
                _request_timeout=CHECK_TIMEOUT_S,
            )
        except ApiException as exc:
            refusal = _refusal(exc)
            if refusal is not None:
                raise refusal from None
            log.info(
                "dry run of DataSample %s/%s: API error %s; the round starts",
                request.namespace,
                body["metadata"]["name"],
                exc.status,
            )
        except (HTTPError, OSError, ValueError) as exc:
            log.info(
                "dry run of DataSample %s/%s failed (%s); the round starts",
                request.namespace,
                body["metadata"]["name"],
                type(exc).__name__,
            )

    def run(self, request: RoundRequest) -> RoundOutcome:
        """Create the DataSample and watch it until its status is final or ``timeout_s``
        passed; the outcome is what the operator saved (see the class)."""
        body = datasample_body(request, self._ttl)
        name = body["metadata"]["name"]
        deadline = time.monotonic() + request.timeout_s
        try:
            created: dict[str, Any] = self._api.create_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, request.namespace, PLURAL, body, _request_timeout=10
            )
            uid = _uid(created)
            if uid is None:
                # The client decodes only a 201 answer (the API server's); for a 200 it
                # hands back nothing, so the uid is read back at once.
                created = self._read(request, name) or {}
                uid = _uid(created)
            self._bind(request, name, uid)
            outcome = self._judge(request, name, uid, created)
            version = _resource_version(created)
            while outcome is None and time.monotonic() < deadline:
                outcome, version = self._watch(request, name, uid, version, deadline)
            if outcome is not None:
                return outcome
            return RoundOutcome(failed(ErrorCode.TIMEOUT, request.round_id), external_ref=name)
        except _NotOurs as exc:
            log.warning("DataSample %s/%s: %s; the round fails", request.namespace, name, exc)
            # Not saved: the service stores the failure under its round id, over anything
            # written there for another DataSample.
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), name)
        except (ApiException, HTTPError, OSError) as exc:
            log.warning(
                "DataSample %s/%s: API error %s",
                request.namespace,
                name,
                getattr(exc, "status", ""),
            )
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), name)

    def _watch(
        self,
        request: RoundRequest,
        name: str,
        uid: str | None,
        version: str | None,
        deadline: float,
    ) -> tuple[RoundOutcome | None, str | None]:
        """Watch the DataSample from ``version`` until its status is final, the watch ends
        (the server's timeout, a dropped stream, 410 Gone) or ``deadline``; then read it once
        (what changed while no watch ran) and hand back where to watch on from. The service
        learns of a round's end from the API server's event, not by polling it."""
        left = max(1, min(WATCH_SECONDS, int(deadline - time.monotonic()) + 1))
        stream = watch.Watch()
        try:
            for event in stream.stream(
                self._api.list_namespaced_custom_object,
                GROUP,
                VERSION,
                request.namespace,
                PLURAL,
                field_selector=f"metadata.name={name}",
                resource_version=version,
                timeout_seconds=left,
                _request_timeout=left + 5,
            ):
                obj = event.get("object")
                if event.get("type") == "ERROR" or not isinstance(obj, dict):
                    break  # 410 Gone and the like: read it again, watch from there
                if event.get("type") == "DELETED":
                    raise _NotOurs("it was deleted before its result was read")
                version = _resource_version(obj) or version
                outcome = self._judge(request, name, uid, obj)
                if outcome is not None:
                    return outcome, version
                if time.monotonic() >= deadline:
                    break
        except ApiException as exc:
            if exc.status != 410:
                raise
        except (ProtocolError, ReadTimeoutError):
            pass  # the stream went quiet or dropped: read, then watch again
        finally:
            stream.stop()
        obj = self._read(request, name)
        return self._judge(request, name, uid, obj), _resource_version(obj)

    def _judge(
        self, request: RoundRequest, name: str, uid: str | None, obj: dict[str, Any] | None
    ) -> RoundOutcome | None:
        """The round's outcome once the DataSample's status is final (the result the
        operator saved, which it saves before it writes the status; else only an outcome
        without records); ``None`` while it runs."""
        self._check_ours(request, name, uid, obj)
        result = decode((obj or {}).get("status") or {}, request.round_id)
        if result is None:
            return None
        saved = self._saved(request, name, uid)
        if saved is not None:
            return saved
        return RoundOutcome(_outcome_only(result, request, name), external_ref=name)

    def _bind(self, request: RoundRequest, name: str, uid: str | None) -> None:
        """Bind the round to the uid of the DataSample just created: the operator saves its
        result in the round bound to it. Without a uid (an API server that gives none) no
        result reaches the round from the store: said so rather than left to a timeout
        nobody can explain."""
        if uid is None:
            log.warning(
                "DataSample %s/%s has no metadata.uid: the operator cannot save its result "
                "in round %s",
                request.namespace,
                name,
                request.round_id,
            )
            return
        if not self._stored.bind(request.round_id, uid):
            raise _NotOurs(f"round {request.round_id} is gone or bound to another DataSample")

    def _read(self, request: RoundRequest, name: str) -> dict[str, Any] | None:
        """The DataSample ``name``, or ``None`` when it is gone (404)."""
        return read_datasample(self._api, request.namespace, name)

    @staticmethod
    def _check_ours(
        request: RoundRequest, name: str, uid: str | None, obj: dict[str, Any] | None
    ) -> None:
        """:class:`_NotOurs` unless ``obj`` is the DataSample the service created (its uid;
        without one from the API server, its name is all there is to check)."""
        if obj is None:
            raise _NotOurs("it was deleted before its result was read")
        if uid is not None and _uid(obj) != uid:
            raise _NotOurs(
                "it was deleted and created again by someone else (another uid) before its "
                "result was read"
            )

    def _saved(self, request: RoundRequest, name: str, uid: str | None) -> RoundOutcome | None:
        """The outcome the operator saved for this round: the row is of this (namespace,
        application, vertex) and bound to this DataSample's uid. ``None`` while there is
        none."""
        stored = self._stored.lookup(request.round_id)
        if stored is None:
            return None
        owner = (stored.namespace, stored.application, stored.vertex)
        if owner != (request.namespace, request.application, request.vertex):
            raise _NotOurs(f"the stored round belongs to {'/'.join(owner)}")
        if uid is not None and stored.datasample_uid != uid:
            raise _NotOurs("the stored round is bound to another DataSample (uid)")
        return RoundOutcome(stored.head, external_ref=name, saved=True)


def read_datasample(
    api: client.CustomObjectsApi, namespace: str, name: str
) -> dict[str, Any] | None:
    """The DataSample ``namespace/name`` as the API server has it, ``None`` when there is none
    (404); raises ``ApiException`` for any other answer, urllib3's errors when unreachable."""
    try:
        obj: dict[str, Any] = api.get_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=10
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


def _refusal(exc: ApiException) -> RoundRefused | None:
    """The API server's refusal of a DataSample as one of the client's parameters: a
    validating admission webhook's denial (``spec.<field>: why``, the sparkglass webhook's
    words) or a 422 ``Invalid`` whose ``details.causes[].field`` is the field. ``None`` for
    any other answer (RBAC's 403, quota, 429, 5xx), or a refusal of a field the client did
    not set (the vertex and sampling window are the service's own)."""
    status = exc.status or 0
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        return None
    if not isinstance(body, dict) or not 400 <= status < 500:
        return None
    denial = _WEBHOOK_DENIAL.match(str(body.get("message") or ""))
    if denial is not None:
        why = denial.group("why")
        field = _PARAMETER_OF_FIELD.match(why)
        if field is None:
            return None
        return RoundRefused(field.group(1), _bounded(why[field.end() :].removeprefix(": ")))
    if status != 422 or body.get("reason") != "Invalid":
        return None
    causes = (body.get("details") or {}).get("causes") or []
    for cause in causes if isinstance(causes, list) else []:
        if not isinstance(cause, dict):
            continue
        field = _PARAMETER_OF_FIELD.match(str(cause.get("field") or ""))
        if field is not None:
            return RoundRefused(field.group(1), _bounded(str(cause.get("message") or "invalid")))
    return None


def _bounded(message: str) -> str:
    """``message`` cut to :data:`MAX_REFUSAL_CHARS` (the API server may quote a value)."""
    if len(message) <= MAX_REFUSAL_CHARS:
        return message
    return message[: MAX_REFUSAL_CHARS - 1] + "…"


def _resource_version(obj: dict[str, Any] | None) -> str | None:
    """``metadata.resourceVersion`` of ``obj``, ``None`` without one."""
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "") or None


def _uid(obj: dict[str, Any] | None) -> str | None:
    """``metadata.uid`` of ``obj``, ``None`` without one."""
    return str(((obj or {}).get("metadata") or {}).get("uid") or "") or None


def _outcome_only(result: DataSampleResult, request: RoundRequest, name: str) -> DataSampleResult:
    """What a status may say without the store: that the round ended without records (no
    record, no counter is taken from it). A status claiming records the operator did not
    save fails the round: someone else wrote it."""
    if result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL):
        log.warning(
            "DataSample %s/%s is %s in its status but no result of it is in the store; "
            "records are taken from the store only: the status was written by someone else "
            "than the operator, or the operator cannot reach the service (its "
            "--service-internal-url)",
            request.namespace,
            name,
            result.status.value,
        )
        return failed(ErrorCode.INTERNAL_ERROR, request.round_id)
    return DataSampleResult(
        status=result.status,
        error_code=result.error_code,
        no_data_reason=result.no_data_reason,
        round_id=request.round_id,
        end_timestamp=repository.now_ms(),
    )
