"""The DataSample validating admission webhook: what the CRD schema cannot check.

The CRD's schema and CEL rules check a DataSample's shape; they cannot know the
application: whether ``spec.vertex`` is one of its steps, whether ``spec.samplingWindow``
fits its window, whether ``spec.filter`` parses and names columns the vertex has, whether
``spec.columns`` exist and ``spec.expectation`` is declared there. This webhook answers
those at ``kubectl apply``, naming the field (:class:`DataSampleReviewer`); what cannot be
checked then is admitted with a warning. It runs in every operator replica and cannot tell
the API server from another caller that reaches its port, so it holds little
(:func:`build_app`) and answers no lists (:func:`_public`). Docs: docs/architecture.md,
"Admission: what the CRD cannot check"; docs/security.md, "The admission webhook".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp.web
import structlog

# kopf's own matcher of --namespace patterns (globs, '!' exclusions), so that the webhook
# and the watches agree on which namespaces are this operator's.
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.round_request import RoundRequest
from sparkglass.runtime.control.client import (
    AsyncControlClient,
    ControlError,
    ControlRejected,
)

from . import foreign_apps, names, sample_fit
from .context import OperatorContext
from .driver_access import DriverAccess, driver_access
from .kube.cluster import APPS, ApiError
from .settings import WebhookConfig
from .specs import DataSampleSpec

log = structlog.get_logger(__name__)

#: The path the ValidatingWebhookConfiguration calls (chart: ``webhook.path``).
PATH = "/validate/datasamples"
#: Largest AdmissionReview read (bytes). A DataSample's review is a few KiB (its spec is
#: small; kubectl's last-applied annotation doubles it); 512 KiB leaves room for long
#: annotations and labels. A larger body is refused unread (413).
MAX_REVIEW_BYTES = 512 * 1024
#: Seconds a caller has to send the whole body once its headers arrived (the API server sends
#: it at once); a slower one gets 408, so no connection holds a buffer for long.
REVIEW_READ_SECONDS = 5.0
#: Reviews being read or answered at once per replica; past that, 503 at once (the API
#: server then applies the failurePolicy). With the two bounds above a flood holds at most
#: 32 × 512 KiB of bodies.
MAX_REVIEWS_IN_FLIGHT = 32
#: How long the driver may take to check a round (seconds). The API server waits for the
#: webhook at most its ``timeoutSeconds`` (the chart sets 10): the answer must come first.
DRIVER_CHECK_SECONDS = 5.0
#: Driver checks under way at once in one replica; past that a DataSample is admitted with a
#: warning (a flood of reviews must not become a flood of calls to drivers).
MAX_CONCURRENT_DRIVER_CHECKS = 8
#: How often the certificate files are looked at for a renewal (seconds).
CERT_RELOAD_SECONDS = 60.0

#: The driver's names of a round's parameters → the DataSample field that carries each.
_SPEC_FIELDS = {
    "kind": "spec.kind",
    "filter": "spec.filter",
    "columns": "spec.columns",
    "expectation": "spec.expectation",
    "samplingWindow": "spec.samplingWindow",
}


# --------------------------------------------------------------------------- the contract
class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class _GroupVersionKind(_Model):
    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(_Model):
    """The part of ``AdmissionReview.request`` (admission.k8s.io/v1) this webhook reads."""

    uid: str = Field(min_length=1, max_length=128)
    kind: _GroupVersionKind
    namespace: str = ""
    operation: str
    object: dict[str, Any] | None = None


class AdmissionReview(_Model):
    """An ``admission.k8s.io/v1`` AdmissionReview as the API server sends it."""

    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


@dataclass(frozen=True)
class Verdict:
    """The webhook's answer: ``denied`` (the message, ``spec.<field>: why``) or None, and
    the warnings ``kubectl`` prints on an admitted object."""

    denied: str | None = None
    warnings: tuple[str, ...] = ()

    def review(self, uid: str) -> dict[str, Any]:
        """The AdmissionReview response body for the request ``uid``."""
        response: dict[str, Any] = {"uid": uid, "allowed": self.denied is None}
        if self.denied is not None:
            response["status"] = {"code": 403, "reason": "Forbidden", "message": self.denied}
        if self.warnings:
            # AdmissionResponse.warnings: "Warnings over 256 characters ... may be truncated"
            # (admission.k8s.io/v1 API reference); cut here so the cut is ours.
            response["warnings"] = [w[:256] for w in self.warnings]
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }


def _allowed(*warnings: str) -> Verdict:
    return Verdict(warnings=warnings)


def _denied(message: str) -> Verdict:
    return Verdict(denied=message)


# --------------------------------------------------------------------------- the checks
class DataSampleReviewer:
    """Reviews DataSample creations for one operator process (``ctx``: its configuration and
    API client). Holds the semaphore bounding the driver checks under way.

    How each is checked:

    * ``spec.vertex`` against the application's declared ``pipeline.vertices`` (when it
      declares them), ``spec.samplingWindow`` against its window and whether it samples at
      all, from the application (:mod:`.sample_fit`, the rules the DataSample's reconcile
      applies too, for both kinds of application);
    * kind, filter, columns and expectation, and the vertex of an application that declares
      no pipeline, by asking its running driver (``GET /api/v1/vertices/{vertex}/round-check``):
      Spark's own parser and analyzer against the vertex's schema, the words of a refused
      open. The driver is found only as the DataSample reconcile finds it
      (:mod:`.driver_access`): never from a field a user can write. Another operator's
      application's driver (Kubeflow's, Apache Spark's) is not asked (reaching it needs the
      control Secret the operator creates at the first round, and a review has no side
      effects): its name, sampling settings, window and sampling switch are checked, the rest
      when the round opens.

    When a check cannot be made (the application is not there or not running yet, its driver
    does not answer within :data:`DRIVER_CHECK_SECONDS`, or more than
    :data:`MAX_CONCURRENT_DRIVER_CHECKS` are under way) the DataSample is admitted with a
    warning saying what was not checked: the driver checks the round again when it opens,
    and a refusal then ends the DataSample ``Failed`` (``RoundRejected``) with the same
    message. A review for a namespace the operator does not watch reads nothing, and one
    whose object claims another namespace than the request is denied.
    """

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self._checks = asyncio.Semaphore(MAX_CONCURRENT_DRIVER_CHECKS)

    async def review(self, request: AdmissionRequest) -> Verdict:
        """The verdict on one admission request. Never raises: what cannot be checked is
        admitted with a warning saying so (the driver checks it again when the round opens).
        """
        gvk = request.kind
        if (gvk.group, gvk.kind) != (names.GROUP, "DataSample") or request.operation != "CREATE":
            # The spec is immutable (a CEL rule): only a creation carries a request to check.
            return _allowed()
        body = request.object or {}
        try:
            spec = DataSampleSpec.parse(body.get("spec"))
            round_request = spec.round_request()
        except (ValidationError, InvalidParameterError) as exc:
            return _denied(f"spec: {_first_error(exc)}")
        # The namespace the API server reviews for; it has set the object's to the same.
        namespace = request.namespace
        if (body.get("metadata") or {}).get("namespace") not in (None, namespace):
            return _denied("metadata.namespace: differs from the namespace of the request")
        if not self.ctx.config.watches(namespace):
            return _allowed()  # not a namespace this operator watches: not its business
        try:
            if (apps := sample_fit.foreign(spec)) is not None:
                return await self._review_foreign(apps, namespace, spec)
            return await self._review_sparkglass(namespace, spec, round_request)
        except ApiError as exc:
            return _allowed(f"not checked: reading the application failed ({exc.status})")

    async def _review_sparkglass(
        self, namespace: str, spec: DataSampleSpec, request: RoundRequest
    ) -> Verdict:
        app_name = spec.application_ref.name
        app = await self.ctx.cluster.find(APPS, namespace, app_name)
        if app is None:
            return _allowed(
                f"SparkApplication {app_name!r} is not in namespace {namespace!r} yet; the "
                "DataSample waits for it and is checked when its round opens"
            )
        fit = sample_fit.check(spec, app)
        if isinstance(fit, sample_fit.Misfit):
            return _misfit(fit)
        if request.is_plain() and fit.vertices:
            return _allowed()  # nothing left that only the driver knows
        access = await driver_access(self.ctx, app)
        return await self._ask_driver(access, spec, request, app_name)

    async def _review_foreign(
        self, apps: foreign_apps.ForeignApps, namespace: str, spec: DataSampleSpec
    ) -> Verdict:
        app_name = spec.application_ref.name
        try:
            app = await apps.read_application(self.ctx.cluster, namespace, app_name)
        except foreign_apps.NotEnabled as exc:
            return _misfit(sample_fit.not_enabled(apps, exc))
        if app is None:
            return _allowed(
                f"{apps.kind_title} {app_name!r} is not in namespace {namespace!r} yet; the "
                "DataSample waits for it and is checked when its round opens"
            )
        fit = sample_fit.check(spec, app)
        if isinstance(fit, sample_fit.Misfit):
            return _misfit(fit)
        # Its driver is not asked: reaching it needs the control Secret the operator creates
        # at the first round (ForeignApps.driver_access), and a review must have no side effect.
        return _not_checked(f"the driver of {apps.title}s is asked only when the round opens")

    async def _ask_driver(
        self,
        access: DriverAccess | str,
        spec: DataSampleSpec,
        request: RoundRequest,
        app_name: str,
    ) -> Verdict:
        """The driver's answer to the round this DataSample asks for (opening nothing)."""
        if isinstance(access, str):
            return _not_checked(access)
        if not access.token or access.refusal:
            return _not_checked(f"the driver of {app_name!r} cannot be asked safely")
        if self._checks.locked():
            return _not_checked("the operator is checking many DataSamples at once")
        async with self._checks:
            try:
                async with AsyncControlClient(
                    access.endpoint,
                    access.token,
                    timeout_s=min(self.ctx.config.control_timeout_seconds, DRIVER_CHECK_SECONDS),
                    tls=access.tls,
                ) as client:
                    accepted = await asyncio.wait_for(
                        client.check_round(
                            spec.vertex,
                            spec.sampling_window,
                            request=None if request.is_plain() else request,
                        ),
                        DRIVER_CHECK_SECONDS,
                    )
            except ControlRejected as exc:
                return _refused_by_driver(exc, app_name, spec.vertex)
            except (ControlError, TimeoutError) as exc:
                # The details (the Pod's address, the driver's own words) go to the log only.
                log.info("round check not answered", application=app_name, error=str(exc))
                return _not_checked(f"the driver of {app_name!r} did not answer in time")
        if not accepted:
            return _allowed(
                f"sampling is off at vertex {spec.vertex!r} on the driver of {app_name!r}: "
                "the DataSample will end Disabled"
            )
        return _allowed()


def _misfit(misfit: sample_fit.Misfit) -> Verdict:
    """A DataSample that does not fit its application (:mod:`.sample_fit`): denied naming
    its field, or admitted with a warning when the fault is the application's."""
    return _denied(misfit.review) if misfit.denies else _allowed(misfit.review)


def _not_checked(why: str) -> Verdict:
    return _allowed(
        f"kind, filter, columns and vertex not checked yet: {why}; the driver checks them "
        "when the round opens"
    )


def _refused_by_driver(exc: ControlRejected, app_name: str, vertex: str) -> Verdict:
    """The driver's refusal of the request as a denial naming the DataSample's field; any
    other 4xx (a token the driver does not take yet, a route it lacks) is no verdict on the
    DataSample: admitted with a warning."""
    field = _SPEC_FIELDS.get(exc.field or "")
    message = str(exc)
    if exc.status == 400 and field is not None:
        prefix = f"{exc.field}: "
        if message.startswith(prefix):
            message = message[len(prefix) :]
        return _denied(f"{field}: {_public(message, vertex)}")
    if exc.status == 404 and "no route" in message:
        return _not_checked(f"the driver of {app_name!r} is older than the round check")
    if exc.status == 404:
        return _denied(f"spec.vertex: {_public(message, vertex)}")
    log.info("round check not answered", application=app_name, status=exc.status, error=message)
    return _not_checked(f"the driver of {app_name!r} could not check it (HTTP {exc.status})")


# What a refusal relayed to the reviewer leaves out. The webhook cannot tell the API server
# from another caller on the Pod network (module docstring), so a denial says which field is
# wrong and why in words that hold nothing of the schema. The driver's full words reach
# only those who may sample: the DataSample's status when a round is refused after
# admission, the 422 of a local-mode service.

#: The driver's and Spark's enumerations: ``; columns: ...``, ``Did you mean one of the
#: following? [...]``.
_ENUMERATION = re.compile(
    r"(;\s*(columns|vertices|expectations):.*$)|(\s*Did you mean one of the following\?.*$)",
    re.IGNORECASE,
)
#: Spark's error class at the start of its message (``[DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES]
#: Cannot resolve ... ("INT" and "DATE")``). The words after it describe the plan and the
#: schema (types, a struct's fields, the analyzed plan), so none of them is relayed.
_SPARK_CLASS = re.compile(r"^\[([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_]+)*\]")
#: Classes of a message that depends on the filter's text only (the parser knows no schema).
_PARSER_CLASSES = ("PARSE_", "INVALID_IDENTIFIER", "UNCLOSED_BRACKETED_COMMENT")
#: Classes of a name the vertex does not have (or not unambiguously).
_UNRESOLVED_CLASSES = (
    "UNRESOLVED_COLUMN",
    "UNRESOLVED_FIELD",
    "UNRESOLVED_MAP_KEY",
    "FIELD_NOT_FOUND",
    "AMBIGUOUS_REFERENCE",
    "AMBIGUOUS_COLUMN_OR_FIELD",
)
#: The name as the request wrote it (``with name `carier```): the caller's own text.
_ASKED_NAME = re.compile(r"with name (`[^`\n]{1,200}`(?:\.`[^`\n]{1,200}`)*)")
#: Words that describe types or list a schema, in messages without an error class (older
#: Spark: ``cannot resolve ... due to data type mismatch ... (int and date)``, ``given input
#: columns: [...]``): such a message is replaced, whoever wrote it.
_SCHEMA_WORDS = re.compile(
    r"data ?type|\btypes?\b|struct<|array<|map<|input columns|struct field|SQLSTATE",
    re.IGNORECASE,
)


def _public(message: str, vertex: str) -> str:
    """The driver's refusal reduced to what a forged review may learn.

    A denial names the field and what is wrong with the given value in the webhook's own
    words, never a list of the vertex's columns, the application's vertices or its
    expectations, nor a column's type or a struct's fields: a forged review learns whether a
    guessed name exists, not the schema. The chart's ``networkPolicy.webhookFrom`` admits the
    port only from the API servers' addresses.
    """
    first = message.strip().splitlines()[0].strip() if message.strip() else ""
    spark = _SPARK_CLASS.match(first)
    if spark is not None:
        error_class = spark.group(1)
        if error_class.startswith(_PARSER_CLASSES):
            return _without_sqlstate(first)
        if error_class in _UNRESOLVED_CLASSES:
            asked = _ASKED_NAME.search(first)
            if asked is not None:
                return f"unknown column {asked.group(1)} at vertex {vertex!r}"
            return f"names a column or field that vertex {vertex!r} does not have"
        return _refused_by_analysis(vertex)
    # A name the request gave is quoted ('type', `type`): the caller's word, not the schema's.
    if _SCHEMA_WORDS.search(re.sub(r"'[\w.-]{1,200}'|`[^`\n]{1,200}`", "", first)):
        return _refused_by_analysis(vertex)
    return _ENUMERATION.sub("", first).rstrip(" .;") or "refused by the driver"


def _without_sqlstate(first: str) -> str:
    # "... SQLSTATE: 42601 (line 1, pos 19)": the position helps, the state does not.
    return re.sub(r"\s*SQLSTATE: \w+", "", first).rstrip(" .;")


def _refused_by_analysis(vertex: str) -> str:
    return (
        f"not valid at vertex {vertex!r}: Spark's analyzer refused it (a column used with a "
        "type or in a way it does not take); its reason describes the vertex's schema, which "
        "the webhook does not relay"
    )


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(exc)


# --------------------------------------------------------------------------- the server
def _ssl_context(config: WebhookConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.cert_file, config.key_file)
    return context


def build_app(reviewer: DataSampleReviewer) -> aiohttp.web.Application:
    """The aiohttp application serving :data:`PATH` (POST only).

    Like every admission webhook it cannot tell the API server from another caller that
    reaches its port (the API server presents no client certificate by default), so it holds
    little for anyone: a body up to :data:`MAX_REVIEW_BYTES`, arriving within
    :data:`REVIEW_READ_SECONDS`, at most :data:`MAX_REVIEWS_IN_FLIGHT` reviews at once (413,
    408, 503 otherwise), parsed off the event loop the Lease renewal shares.
    """
    in_flight = asyncio.Semaphore(MAX_REVIEWS_IN_FLIGHT)

    async def validate(http: aiohttp.web.Request) -> aiohttp.web.Response:
        length = http.content_length
        if length is not None and length > MAX_REVIEW_BYTES:
            raise aiohttp.web.HTTPRequestEntityTooLarge(
                max_size=MAX_REVIEW_BYTES, actual_size=length
            )
        if http.content_type != "application/json":
            raise aiohttp.web.HTTPUnsupportedMediaType(text="send application/json")
        if in_flight.locked():
            raise aiohttp.web.HTTPServiceUnavailable(text="too many reviews at once")
        async with in_flight:
            try:
                async with asyncio.timeout(REVIEW_READ_SECONDS):
                    raw = await http.read()  # bounded by client_max_size (413 past it)
            except TimeoutError:
                raise aiohttp.web.HTTPRequestTimeout(text="the body came too slowly") from None
            try:
                # Off the event loop: the Lease renewal and kopf share it.
                review = await asyncio.to_thread(AdmissionReview.model_validate_json, raw)
            except ValidationError as exc:
                raise aiohttp.web.HTTPBadRequest(
                    text=f"not an admission.k8s.io/v1 AdmissionReview: {_first_error(exc)}"
                ) from None
            try:
                verdict = await reviewer.review(review.request)
            except Exception:  # a bug here must not refuse DataSamples: the driver checks again
                log.exception("admission review failed", namespace=review.request.namespace)
                verdict = _allowed(
                    "not checked: the operator's admission review failed (see its log)"
                )
        log.info(
            "admission review",
            namespace=review.request.namespace,
            name=((review.request.object or {}).get("metadata") or {}).get("name"),
            allowed=verdict.denied is None,
            message=verdict.denied,
        )
        return aiohttp.web.json_response(verdict.review(review.request.uid))

    app = aiohttp.web.Application(client_max_size=MAX_REVIEW_BYTES)
    app.router.add_post(PATH, validate)
    return app


@contextlib.asynccontextmanager
async def serve(ctx: OperatorContext, config: WebhookConfig) -> AsyncIterator[int]:
    """Serve the webhook over HTTPS until the block ends; yields the port listened on.
    Raises ``OSError`` when the port is taken or a TLS file cannot be read, ``ssl.SSLError``
    when they hold no matching certificate and key.

    It runs in every operator replica, leader or not (the API server may call any of them
    through the Service), with the certificate and key files the chart mounts, read again
    when they change."""
    context = _ssl_context(config)
    runner = aiohttp.web.AppRunner(build_app(DataSampleReviewer(ctx)), access_log=None)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, config.address, config.port, ssl_context=context)
    reloading = asyncio.create_task(_reload_on_change(context, config))
    try:
        await site.start()
        log.info("admission webhook listening", address=config.address, port=config.port)
        yield config.port
    finally:
        reloading.cancel()
        await runner.cleanup()


async def _reload_on_change(context: ssl.SSLContext, config: WebhookConfig) -> None:
    """Load the certificate and key again when their files change (a renewal by
    cert-manager, or a Secret update the kubelet syncs): new handshakes use them."""

    def stamp() -> tuple[float, float] | None:
        try:
            return os.stat(config.cert_file).st_mtime, os.stat(config.key_file).st_mtime
        except OSError:  # mid-swap (the kubelet replaces a Secret volume's files): next time
            return None

    seen = stamp()
    while True:
        await asyncio.sleep(CERT_RELOAD_SECONDS)
        now = stamp()
        if now is None or now == seen:
            continue
        try:
            context.load_cert_chain(config.cert_file, config.key_file)
        except (OSError, ssl.SSLError) as exc:  # half-written: try again next time
            log.warning("admission webhook certificate not reloaded", error=str(exc))
            continue
        seen = now
        log.info("admission webhook certificate reloaded")


__all__ = [
    "DRIVER_CHECK_SECONDS",
    "MAX_CONCURRENT_DRIVER_CHECKS",
    "MAX_REVIEWS_IN_FLIGHT",
    "MAX_REVIEW_BYTES",
    "PATH",
    "REVIEW_READ_SECONDS",
    "AdmissionRequest",
    "AdmissionReview",
    "DataSampleReviewer",
    "Verdict",
    "build_app",
    "serve",
]
