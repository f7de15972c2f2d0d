"""The test Kubernetes API server: kmock's emulator held to a real API server's rules.

kmock (by kopf's author) serves an in-memory Kubernetes API on 127.0.0.1. On its own it is far
more lenient than a real cluster, and a feature that works only because of that does not work.
:class:`StrictApiServer` adds what a real kube-apiserver does, each from its upstream rule:

* objects get ``uid``, ``resourceVersion``, ``generation`` (bumped when anything but metadata
  and a subresource status changes), ``creationTimestamp``, ``generateName`` names;
* a CustomResourceDefinition is checked as the API server checks it (structural schema,
  defaults, list-map keys, the estimated cost of its CEL rules: :mod:`.structural`,
  :mod:`.cel_cost`), refused with 422, then served (kopf and kubectl discover it);
* every custom resource is pruned, defaulted and validated against its CRD's schema and CEL
  rules (with cel-go's runtime cost limits) before it is stored: 422 ``Invalid`` with the field
  errors a real server gives;
* ``/status`` writes change only ``status``; main-resource writes leave ``status`` alone;
* every object's metadata: name, labels, at most 256 KiB of annotations (422); bodies over
  3 MiB are refused unread (413); objects over etcd's 1.5 MiB are not stored (500
  ``etcdserver: request is too large``);
* a write naming a stale ``metadata.resourceVersion`` gets 409 ``Conflict``;
* Pods are admitted by Pod Security ``restricted`` in namespaces labelled
  ``pod-security.kubernetes.io/enforce: restricted`` (403, :mod:`.pod_security`);
* validating admission webhooks a test registers (:meth:`StrictApiServer.register_webhook`)
  review every create of their resource after the schema, as the API server calls them last;
  a denial is the API server's ``admission webhook "<name>" denied the request: ...``;
* ``dryRun=All`` on a create: named, defaulted, validated and admitted as a create, answered
  201 with the object as it would be, and nothing stored, no watch event, no resourceVersion
  used; another ``dryRun`` value is 422, as the API server validates its options;
* label and field selectors on list and watch; list replies carry ``kind``;
* the garbage collector: objects whose every owner is gone are deleted;
* TokenReview and SubjectAccessReview are answered, never stored (scripted by tests);
* errors carry the API server's reasons (``NotFound``, ``AlreadyExists``, ``Conflict``).

One kmock behaviour is turned off: it keeps every request it served and matches each new one
against all of them, so a long session grew slower with every request; a served request is
forgotten (:meth:`StrictApiServer.forget`). Where the stand-in still differs from a real API
server, docs/api-server-rules.md lists it.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
from kmock._internal import dicts as kmock_dicts
from kmock._internal import enums as kmock_enums
from kmock._internal import k8s as kmock_k8s

from . import pod_security, structural
from .crd_schema import yaml_documents

#: Namespace label that turns on Pod Security enforcement (and its level).
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
RESTRICTED = {ENFORCE_LABEL: "restricted", f"{ENFORCE_LABEL}-version": "latest"}
_REVIEWS = ("tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews")
#: The options a write's query is decoded into, by HTTP method (their ``dryRun`` validated).
_OPTIONS_KIND = {
    "POST": "CreateOptions",
    "PUT": "UpdateOptions",
    "PATCH": "PatchOptions",
    "DELETE": "DeleteOptions",
}
#: A validating admission webhook as the stand-in calls it: ``AdmissionReview.request`` in,
#: ``AdmissionReview.response`` out.
AdmissionReviewer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class ApiError(kmock_k8s.KubernetesError):
    """An answer with a real API server's Status body."""


def _status_error(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> ApiError:
    return ApiError(status=code, reason=reason, message=message, details=details or {})


def _invalid(error: structural.Invalid, resource: Any) -> ApiError:
    return _status_error(
        422,
        "Invalid",
        str(error),
        {
            "name": error.name,
            "group": resource.group,
            "kind": error.kind.split(".", 1)[0],
            "causes": [e.cause() for e in error.errors],
        },
    )


def label_selected(obj: Any, selector: str | None) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``."""
    if not selector:
        return True
    labels = dict((obj.get("metadata") or {}).get("labels") or {})
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_selected(obj: Any, selector: str | None) -> bool:
    """Field selectors on ``metadata.name`` / ``metadata.namespace`` (what clients use)."""
    if not selector:
        return True
    meta = (obj.get("metadata") or {}) if obj else {}
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "=" not in term:
            continue
        k, v = term.replace("==", "=").split("=", 1)
        if k in ("metadata.name", "metadata.namespace") and meta.get(k.split(".")[1]) != v:
            return False
    return True


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


@attrs.frozen
class CustomResourceInfo:
    """What the server keeps of an established CRD version."""

    kind: str
    group: str
    plural: str
    schema: dict[str, Any]
    status_subresource: bool


@attrs.frozen
class ValidatingWebhook:
    """A validating admission webhook registered for one resource (CREATE only, as the chart's
    for DataSamples; ``sideEffects: None``, so dry runs are reviewed too)."""

    name: str
    review: AdmissionReviewer
    failure_policy: Literal["Fail", "Ignore"]


@attrs.define(kw_only=True)
class StrictApiServer(kmock.KubernetesEmulator):
    """kmock's emulator with the API server's rules listed in the module docstring."""

    #: Namespaces (name → labels) served at ``/api/v1/namespaces``.
    namespaces: dict[str, dict[str, str]] = attrs.field(
        factory=lambda: {"default": {}, "spark-jobs": dict(RESTRICTED)}
    )
    _rv: int = attrs.field(default=1000, init=False)
    #: Requests served, by (method, path without query): bounded by the distinct paths.
    served: collections.Counter[tuple[str, str]] = attrs.field(
        factory=collections.Counter, init=False
    )
    #: Established custom resources, by ``group/version/plural``.
    custom: dict[str, CustomResourceInfo] = attrs.field(factory=dict, init=False)
    #: Uids the server will give objects of these names (else random): lets a test know a
    #: uid before the object exists, as a seed makes randomness repeatable.
    uids: dict[str, str] = attrs.field(factory=dict, init=False)
    #: Writes refused with a 4xx/5xx Status, as (method, path, code, message): tests assert a
    #: client never sends what a real server refuses.
    refused: list[tuple[str, str, int, str]] = attrs.field(factory=list, init=False)
    #: The TokenReviews and SubjectAccessReviews asked, in order (other requests are not kept).
    reviews: list[Any] = attrs.field(factory=list, init=False)
    #: API Priority and Fairness, scripted: (method, path) → [answers left, Retry-After s];
    #: those requests are answered 429 until none are left (see :meth:`throttle`).
    throttled: dict[tuple[str, str], list[int]] = attrs.field(factory=dict, init=False)
    #: Server errors, scripted: (method, path) → [answers left, status code] (see :meth:`fail`).
    failing: dict[tuple[str, str], list[int]] = attrs.field(factory=dict, init=False)
    #: Slow answers, scripted: (method, path) → [answers left, delay in seconds] (:meth:`slow`).
    slowed: dict[tuple[str, str], list[float]] = attrs.field(factory=dict, init=False)
    #: A ResourceQuota on Pods per namespace (``count/pods`` as ``hard: {pods: N}``): a Pod
    #: created past it is refused with the quota admission plugin's 403.
    pod_quota: dict[str, int] = attrs.field(factory=dict, init=False)
    #: Validating admission webhooks, by ``group/version/plural`` (:meth:`register_webhook`).
    webhooks: dict[str, ValidatingWebhook] = attrs.field(factory=dict, init=False)

    def register_webhook(
        self,
        resource: str,
        name: str,
        review: AdmissionReviewer,
        *,
        failure_policy: Literal["Fail", "Ignore"] = "Fail",
    ) -> None:
        """Have ``review`` (a webhook's logic, called in-process) admit every create of
        ``resource`` (``group/version/plural``), as a ValidatingWebhookConfiguration named
        ``name`` does; ``failure_policy``: what a webhook that raises means (Fail: 500)."""
        self.webhooks[resource] = ValidatingWebhook(name, review, failure_policy)

    def throttle(self, method: str, path: str, *, times: int, retry_after: int = 1) -> None:
        """Answer the next ``times`` ``method`` requests of ``path`` with a 429 and a
        ``Retry-After`` of ``retry_after`` seconds, as APF does for a flow over its share."""
        self.throttled[method.upper(), path] = [times, retry_after]

    def fail(self, method: str, path: str, *, times: int, code: int = 503) -> None:
        """Answer the next ``times`` ``method`` requests of ``path`` with ``code`` (500, 503,
        504: an API server restarting, etcd leader election, a timeout) and do nothing."""
        self.failing[method.upper(), path] = [times, code]

    def slow(self, method: str, path: str, *, times: int, seconds: float) -> None:
        """Answer the next ``times`` ``method`` requests of ``path`` only after ``seconds``
        (an overloaded API server or etcd); the request is served after the delay."""
        self.slowed[method.upper(), path] = [times, seconds]

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # ------------------------------------------------------------------ entry point
    async def __call__(self, raw_request: Any) -> Any:
        self.served[raw_request.method, raw_request.path] += 1
        # aiohttp reads at most 1 MiB of a body by default; the API server takes 3 MiB.
        raw_request._client_max_size = structural.MAX_REQUEST_BYTES
        if raw_request.content_length and raw_request.content_length > structural.MAX_REQUEST_BYTES:
            return self._status_response(
                413,
                "RequestEntityTooLarge",
                f"Request entity too large: limit is {structural.MAX_REQUEST_BYTES}",
            )
        rule = self.throttled.get((raw_request.method, raw_request.path))
        if rule is not None and rule[0] > 0:
            rule[0] -= 1
            response = self._status_response(
                429, "TooManyRequests", "Too many requests, please try again later."
            )
            response.headers["Retry-After"] = str(rule[1])
            return response
        failing = self.failing.get((raw_request.method, raw_request.path))
        if failing is not None and failing[0] > 0:
            failing[0] -= 1
            reasons = {500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
            return self._status_response(
                failing[1], reasons.get(failing[1], "InternalError"), "etcdserver: leader changed"
            )
        slowed = self.slowed.get((raw_request.method, raw_request.path))
        if slowed is not None and slowed[0] > 0:
            slowed[0] -= 1
            await asyncio.sleep(slowed[1])
        refused = await self._over_pod_quota(raw_request)
        if refused is not None:
            return refused
        if raw_request.path.rstrip("/").startswith("/api/v1/namespaces") and (
            raw_request.path.rstrip("/").count("/") <= 4
        ):
            return await self._serve_namespaces(raw_request)
        return await super().__call__(raw_request)

    async def _over_pod_quota(self, raw_request: Any) -> Any:
        """The quota plugin's 403 for a Pod create past the namespace's ``pod_quota``
        (Pods that ended, Succeeded or Failed, no longer count, as in the real plugin)."""
        parts = raw_request.path.strip("/").split("/")
        if raw_request.method != "POST" or len(parts) != 5 or parts[4] != "pods":
            return None
        namespace = parts[3]
        hard = self.pod_quota.get(namespace)
        if hard is None:
            return None
        used = 0
        for name in self.names("v1/pods", namespace):
            pod = self.stored("v1/pods", namespace, name) or {}
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                used += 1
        if used < hard:
            return None
        body = await raw_request.json()
        name = str((body.get("metadata") or {}).get("name") or "")
        return self._status_response(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: exceeded quota: compute, requested: pods=1, '
            f"used: pods={used}, limited: pods={hard}",
        )

    @staticmethod
    def _status_response(code: int, reason: str, message: str) -> Any:
        return aiohttp.web.json_response(
            {
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Failure",
                "code": code,
                "reason": reason,
                "message": message,
            },
            status=code,
        )

    async def _serve_namespaces(self, raw_request: Any) -> Any:
        await raw_request.read()
        parts = raw_request.path.rstrip("/").split("/")
        if len(parts) == 5:  # /api/v1/namespaces/<name>
            name = parts[4]
            if name not in self.namespaces:
                return self._status_response(404, "NotFound", f'namespaces "{name}" not found')
            return aiohttp.web.json_response(self._namespace(name))
        if raw_request.query.get("watch") == "true":
            response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(raw_request)
            await asyncio.sleep(float(raw_request.query.get("timeoutSeconds") or 3600))
            return response
        return aiohttp.web.json_response(
            {
                "apiVersion": "v1",
                "kind": "NamespaceList",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": [self._namespace(ns) for ns in self.namespaces],
            }
        )

    def _namespace(self, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "uid": name,
                "resourceVersion": "1",
                "labels": {"kubernetes.io/metadata.name": name, **self.namespaces[name]},
            },
        }

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        # The API server's reasons: clients (kubectl, kopf, the kubernetes client) read them.
        if isinstance(exc, ApiError):
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "metadata": {},
                    "status": "Failure",
                    "code": exc.status,
                    "reason": exc.reason,
                    "message": exc.message,
                    "details": exc.details or {},
                },
                status=exc.status,
            )
        if isinstance(exc, kmock_k8s.KubernetesObjectConflictError):
            return self._status_response(409, "AlreadyExists", "the object already exists")
        if isinstance(exc, kmock_k8s.KubernetesNotFoundError):
            return self._status_response(404, "NotFound", exc.message or "not found")
        return await super()._render_error(exc)

    async def _handle(self, request: Any) -> Any:
        try:
            resource = request.resource
            if resource is not None and resource.plural in _REVIEWS:
                # Reviews are answers, not stored objects (kmock would 409 a second one).
                self.reviews.append(request)
                return await kmock.KubernetesScaffold._handle(self, request)
            return await self._handle_kept(request)
        except ApiError as exc:
            self.refused.append(
                (str(request.method), request.url.path, exc.status, exc.message or "")
            )
            raise
        finally:
            self.forget(request)

    def forget(self, request: Any) -> None:
        """Drop a served request from kmock's request log (see the module docstring).

        kmock matches a request by finding it in that log (by identity), so only a request
        that has been handled may go; watch streams stay in the log while they stream."""
        for i in range(len(self._requests) - 1, -1, -1):
            if self._requests[i] is request:
                del self._requests[i]
                return

    async def _handle_kept(self, request: Any) -> Any:
        dry_run = self._dry_run(request)
        if dry_run:
            return await self._dry_run_create(request)
        if request.resource is not None and (
            isinstance(request.data, dict | list) or request.action == kmock_enums.action.DELETE
        ):
            self._check_precondition(request)
            await self._admit(request)
        response = await super()._handle(request)
        if request.action == kmock_enums.action.CREATE and getattr(response, "status", 0) == 200:
            # The API server answers a create 201 Created (clients decode only that answer).
            response.set_status(201)
        if request.resource is not None:
            if request.resource.plural == "customresourcedefinitions" and request.action in (
                kmock_enums.action.CREATE,
                kmock_enums.action.UPDATE,
            ):
                key = self._key(request)
                if key is not None and key in self._objects and not self._objects[key].deleted:
                    self.register_crd(copy.deepcopy(self._objects[key].raw))
            # Like the real garbage collector, also catch objects created for an owner that
            # is already gone. Only requests that can orphan something pay for the sweep.
            owned = isinstance(request.data, dict) and (request.data.get("metadata") or {}).get(
                "ownerReferences"
            )
            action = kmock_enums.action
            read = request.action in (action.FETCH, action.LIST, action.WATCH)
            if owned if request.action == action.CREATE else not read:
                await self._collect_garbage()
        return response

    def _key(self, request: Any) -> Any:
        if request.action == kmock_enums.action.CREATE:
            meta = (request.data or {}).get("metadata") or {}
            return (request.resource, request.namespace or meta.get("namespace"), meta.get("name"))
        return (request.resource, request.namespace, request.name)

    # ------------------------------------------------------------------ the rules
    def _check_precondition(self, request: Any) -> None:
        """A write naming ``metadata.resourceVersion`` applies only to that version (409)."""
        if request.action != kmock_enums.action.UPDATE or not request.name:
            return
        data = request.data if isinstance(request.data, dict) else {}
        wanted = (data.get("metadata") or {}).get("resourceVersion")
        key = (request.resource, request.namespace, request.name)
        if wanted is None or key not in self._objects or self._objects[key].deleted:
            return
        current = (self._objects[key].raw.get("metadata") or {}).get("resourceVersion")
        if str(wanted) != str(current):
            resource = request.resource
            qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            raise _status_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {qualified} "{request.name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                {"name": request.name, "group": resource.group, "kind": resource.plural},
            )

    async def _admit(self, request: Any) -> None:
        action = kmock_enums.action
        if request.action == action.CREATE and isinstance(request.data, dict):
            await self._admit_create(request)
        elif request.action == action.DELETE and request.name:
            # kmock marks an object with finalizers as deleting by patching it in place; give
            # that version a new resourceVersion too (kopf skips versions it has seen).
            key = (request.resource, request.namespace, request.name)
            if key in self._objects and not self._objects[key].deleted:
                self._objects[key].last.raw["metadata"]["resourceVersion"] = self.next_rv()
        elif request.action == action.UPDATE and request.name:
            self._admit_update(request)

    def _info(self, resource: Any) -> CustomResourceInfo | None:
        return self.custom.get(f"{resource.group}/{resource.version}/{resource.plural}")

    def _dry_run(self, request: Any) -> bool:
        """Whether a write asks for ``dryRun=All``. The API server validates a write's options
        before anything else: another value is 422 ``Invalid`` (apiserver's
        ``ValidateDryRun``). A dry run of anything but a create is refused with 400: the
        stand-in does not implement it, and must not write what a client meant to try."""
        values: list[str] = request.url.query.getall("dryRun", [])
        kind = _OPTIONS_KIND.get(str(getattr(request.method, "value", request.method)).upper())
        if not values or request.resource is None or kind is None:
            return False
        unknown = [v for v in values if v != "All"]
        if unknown:
            given = "[]string{" + ", ".join(json.dumps(v) for v in values) + "}"
            why = f'Unsupported value: {given}: supported values: "All"'
            raise _status_error(
                422,
                "Invalid",
                f'{kind}.meta.k8s.io "" is invalid: dryRun: {why}',
                {
                    "group": "meta.k8s.io",
                    "kind": kind,
                    "causes": [
                        {"reason": "FieldValueNotSupported", "message": why, "field": "dryRun"}
                    ],
                },
            )
        if request.action != kmock_enums.action.CREATE or not isinstance(request.data, dict):
            raise _status_error(
                400,
                "BadRequest",
                "the test API server implements dryRun on create only "
                "(tests/support/kube_apiserver.py)",
            )
        return True

    async def _dry_run_create(self, request: Any) -> Any:
        """A create with ``dryRun=All``: named, defaulted, validated and admitted by the code
        of a create, then answered 201 with the object as it would be stored (its uid a
        throwaway one, no resourceVersion). Nothing is stored, no watch event is sent, no
        resourceVersion is used: the API server's dry-run storage answers without etcd, and
        only an existing name fails it (409), after admission (apiserver's
        ``registry/generic/registry/dryrun.go``)."""
        final = self._created(request, copy.deepcopy(request.data), dry_run=True)
        await self._review(request, final, dry_run=True)
        meta = final["metadata"]
        key = (request.resource, meta.get("namespace"), meta.get("name"))
        async with self._lock:
            exists = key in self._objects and not self._objects[key].deleted
        if exists:
            resource = request.resource
            qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            raise _status_error(
                409,
                "AlreadyExists",
                f'{qualified} "{meta.get("name")}" already exists',
                {"name": meta.get("name"), "group": resource.group, "kind": resource.plural},
            )
        return aiohttp.web.json_response(final, status=201)

    async def _review(self, request: Any, obj: dict[str, Any], *, dry_run: bool) -> None:
        """The registered validating webhook of the resource reviews a create: after the
        schema and metadata checks (the API server calls validating admission last), with
        the AdmissionReview request it would send. A denial is the API server's answer
        (apiserver's ``admission/plugin/webhook/errors.ToStatusErr``): the webhook's code
        (at least 400) and reason, its message after ``admission webhook "<name>" denied the
        request: ``."""
        resource = request.resource
        hook = self.webhooks.get(f"{resource.group}/{resource.version}/{resource.plural}")
        if hook is None:
            return
        info = self._info(resource)
        meta = obj.get("metadata") or {}
        review = {
            "uid": str(uuid.uuid4()),
            "kind": {
                "group": resource.group,
                "version": resource.version,
                "kind": info.kind if info is not None else "",
            },
            "resource": {
                "group": resource.group,
                "version": resource.version,
                "resource": resource.plural,
            },
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace") or request.namespace or "",
            "operation": "CREATE",
            "object": copy.deepcopy(obj),
            "oldObject": None,
            "dryRun": dry_run,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "CreateOptions",
                **({"dryRun": ["All"]} if dry_run else {}),
            },
        }
        try:
            response = await hook.review(review)
        except Exception as exc:  # an unreachable or broken webhook: its failurePolicy
            if hook.failure_policy == "Ignore":
                return
            raise _status_error(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{hook.name}": {exc}',
            ) from None
        if response.get("allowed"):
            return
        status = response.get("status") or {}
        why = status.get("message") or status.get("reason")
        denied = f'admission webhook "{hook.name}" denied the request'
        raise _status_error(
            max(400, int(status.get("code") or 400)),
            str(status.get("reason") or ""),
            f"{denied}: {why}" if why else f"{denied} without explanation",
        )

    async def _admit_create(self, request: Any) -> None:
        data: dict[str, Any] = request.data
        final = self._created(request, data, dry_run=False)
        await self._review(request, final, dry_run=False)
        # Only an admitted object takes its uid and a version (etcd gives it the version).
        meta = final["metadata"]
        self.uids.pop(meta.get("name", ""), None)
        meta["resourceVersion"] = self.next_rv()
        data.clear()
        data.update(final)

    def _created(self, request: Any, data: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        """``data`` as a create would store it (named, pruned, defaulted, validated), without
        its resourceVersion, or the API server's refusal; ``dry_run``: with a throwaway uid
        (else the one :attr:`uids` scripts for its name)."""
        meta = data.setdefault("metadata", {})
        namespace = request.namespace or meta.get("namespace")
        if namespace and namespace not in self.namespaces:
            raise _status_error(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"][:58] + uuid.uuid4().hex[:5]
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        if request.resource.plural == "customresourcedefinitions":
            self._check_crd(request, data)
        info = self._info(request.resource)
        final = dict(data)
        if request.resource.group == "" and request.resource.plural == "pods":
            final["status"] = {"phase": "Pending"}  # the API server's, whatever was sent
        if info is not None:
            if info.status_subresource:
                final.pop("status", None)
            final = self._validated(info, final, None, request.resource)
        meta = final["metadata"] = {**final.get("metadata", {})}
        if meta.get("resourceVersion"):
            raise _status_error(
                500, "", "resourceVersion should not be set on objects to be created"
            )
        # The server's own: a client's uid or creation time is overwritten, never kept.
        scripted = None if dry_run else self.uids.get(meta.get("name", ""))
        meta["uid"] = scripted or str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._check_object(request, final, stored=not dry_run)
        return final

    def _admit_update(self, request: Any) -> None:
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            return
        old = copy.deepcopy(self._objects[key].raw)
        info = self._info(request.resource)
        status_sub = info.status_subresource if info is not None else self._has_status(request)
        try:
            new = copy.deepcopy(dict(kmock_dicts.patch_dict(old, request.data)))
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            # A JSON patch whose test or path fails: the API server's generic 422 (kopf's
            # optimistic-concurrency patches rely on it to retry on the next cycle).
            raise _status_error(
                422, "Invalid", "the server rejected our request due to an error in our request"
            ) from None
        if request.subresource == "status":
            # A /status write takes only status from the request (spec, metadata ignored).
            new = {**old, "status": new.get("status")}
            if new["status"] is None:
                new.pop("status")
        elif status_sub:
            new.pop("status", None)
            if "status" in old:
                new["status"] = old["status"]
        if info is not None:
            new = self._validated(info, new, old, request.resource)
        if request.resource.plural == "customresourcedefinitions":
            self._check_crd(request, new)
        meta = new.setdefault("metadata", {})
        meta["resourceVersion"] = self.next_rv()
        generation = int((old.get("metadata") or {}).get("generation") or 1)
        ignored = {"metadata", "status"} if status_sub else {"metadata"}
        if {k: v for k, v in new.items() if k not in ignored} != {
            k: v for k, v in old.items() if k not in ignored
        }:
            generation += 1
        meta["generation"] = generation
        self._check_object(request, new)
        object.__setattr__(request, "data", merge_patch(old, new))

    def _check_crd(self, request: Any, crd: dict[str, Any]) -> None:
        """A CRD is checked on every write, create and update alike (422 as the server)."""
        errors = [structural.FieldError(*e.split(": ", 1)) for e in structural.crd_errors(crd)]
        if errors:
            name = (crd.get("metadata") or {}).get("name", "")
            kind = "CustomResourceDefinition.apiextensions.k8s.io"
            raise _invalid(structural.Invalid(kind, name, errors), request.resource)

    def _has_status(self, request: Any) -> bool:
        known = self.resources.get(request.resource) if request.resource in self.resources else None
        return "status" in ((known.subresources if known else None) or set())

    def _validated(
        self,
        info: CustomResourceInfo,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        resource: Any,
    ) -> dict[str, Any]:
        try:
            return structural.admit(info.schema, obj, old, kind=info.kind, group=info.group)
        except structural.Invalid as exc:
            raise _invalid(exc, resource) from None

    def _check_object(self, request: Any, obj: dict[str, Any], *, stored: bool = True) -> None:
        """Metadata, etcd's size limit (only for what reaches etcd: ``stored``) and Pod
        Security: what every object gets."""
        resource = request.resource
        meta = obj.get("metadata") or {}
        errors = structural.metadata_errors(meta)
        if errors:
            kind = self.resources[resource].kind if resource in self.resources else resource.plural
            raise _invalid(structural.Invalid(kind or "", meta.get("name", ""), errors), resource)
        if resource.group == "" and resource.plural in ("configmaps", "secrets"):
            # core/v1 validation: a ConfigMap's or Secret's values hold at most 1 MiB together.
            size = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values()) + sum(
                len(str(v).encode()) for v in (obj.get("binaryData") or {}).values()
            )
            if size > structural.MAX_CONFIG_BYTES:
                field = "data" if resource.plural == "secrets" else "<root>"
                kind = "Secret" if resource.plural == "secrets" else "ConfigMap"
                error = structural.FieldError(
                    field,
                    "Too long",
                    f"may not be more than {structural.MAX_CONFIG_BYTES} bytes",
                    "FieldValueTooLong",
                )
                raise _invalid(structural.Invalid(kind, meta.get("name", ""), [error]), resource)
        if resource.group == "" and resource.plural == "services":
            # core/v1 validation of a Service: each port (with its protocol) and name once.
            seen: set[Any] = set()
            for i, port in enumerate((obj.get("spec") or {}).get("ports") or []):
                for key in ((port.get("port"), port.get("protocol", "TCP")), port.get("name")):
                    if key is not None and key in seen:
                        error = structural.FieldError(
                            f"spec.ports[{i}]",
                            "Duplicate value",
                            json.dumps(port),
                            "FieldValueDuplicate",
                        )
                        raise _invalid(
                            structural.Invalid("Service", meta.get("name", ""), [error]), resource
                        )
                    seen.add(key)
        if stored and structural.object_too_large(obj):
            raise _status_error(500, "", "etcdserver: request is too large")
        if (
            resource.plural == "pods"
            and resource.group == ""
            and request.action == kmock_enums.action.CREATE
        ):
            namespace = meta.get("namespace") or request.namespace
            if (self.namespaces.get(namespace) or {}).get(ENFORCE_LABEL) == "restricted":
                violations = pod_security.restricted_violations(obj)
                if violations:
                    raise _status_error(
                        403,
                        "Forbidden",
                        f'pods "{meta.get("name")}" is forbidden: violates PodSecurity '
                        f'"restricted:latest": {", ".join(violations)}',
                        {"name": meta.get("name"), "kind": "pods"},
                    )

    # ------------------------------------------------------------------ CRDs
    def register_crd(self, crd: dict[str, Any]) -> None:
        """Establish a CRD: its resource is discoverable and its schema enforced."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            key = f"{spec['group']}/{version['name']}/{names['plural']}"
            subresources = set((version.get("subresources") or {}).keys())
            self.resources[key] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=spec.get("scope") == "Namespaced",
                shortnames=set(names.get("shortNames") or []),
                categories=set(names.get("categories") or []),
                subresources=subresources,
                verbs={"get", "list", "watch", "create", "patch", "delete"},
            )
            self.custom[key] = CustomResourceInfo(
                kind=names["kind"],
                group=spec["group"],
                plural=names["plural"],
                schema=version["schema"]["openAPIV3Schema"],
                status_subresource="status" in subresources,
            )

    def declare_crds(self, paths: Iterable[Path]) -> None:
        """Establish the CRDs of these files without a client (as if applied before)."""
        for path in paths:
            for crd in yaml_documents(Path(path)):
                errors = structural.crd_errors(crd)
                assert not errors, f"{path}: the API server would refuse this CRD: {errors}"
                self.register_crd(crd)

    # ------------------------------------------------------------------ lists, watches, GC
    async def _serve_list(self, request: Any) -> Any:
        payload = await super()._serve_list(request)
        items = [
            i
            for i in payload["items"]
            if label_selected(i, request.params.get("labelSelector"))
            and field_selected(i, request.params.get("fieldSelector"))
        ]
        info = self.resources[request.resource]
        group, version = request.resource.group, request.resource.version
        return {
            "apiVersion": f"{group}/{version}" if group else version,
            "kind": f"{info.kind or 'Object'}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        labels = request.params.get("labelSelector")
        fields = request.params.get("fieldSelector")
        async for event in super()._serve_watch(request):
            if isinstance(event, dict):
                obj = event.get("object") or {}
                if not (label_selected(obj, labels) and field_selected(obj, fields)):
                    continue
            yield event

    async def _collect_garbage(self) -> None:
        async with self._lock:
            while True:
                live = {
                    obj.raw.get("metadata", {}).get("uid")
                    for obj in self._objects.values()
                    if not obj.deleted
                }
                orphans = [
                    (key, obj)
                    for key, obj in self._objects.items()
                    if not obj.deleted
                    and (refs := obj.raw.get("metadata", {}).get("ownerReferences"))
                    and not any(r.get("uid") in live for r in refs)
                ]
                if not orphans:
                    return
                for (resource, _, _), obj in orphans:
                    raw = obj.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})

    # ------------------------------------------------------------------ test conveniences
    async def store_unchecked(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as an object written before its CRD had the rule that now refuses
        it: a real cluster keeps such objects (validation applies to writes), so readers
        must cope with them. Watchers see it ``ADDED``; returns what was stored."""
        res = kmock.resource(resource)
        obj = copy.deepcopy(obj)
        info = self.custom.get(resource)
        if info is not None:
            # Reads from etcd are pruned and defaulted with the current schema, validated never.
            obj = structural.default(
                info.schema, structural.drop_nulls(info.schema, structural.prune(info.schema, obj))
            )
        meta = obj.setdefault("metadata", {})
        meta.update(
            uid=str(uuid.uuid4()),
            resourceVersion=self.next_rv(),
            generation=1,
            creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        async with self._lock:
            self._objects[res, meta.get("namespace"), meta["name"]] = obj
            await self._buses[res].put({"type": "ADDED", "object": obj})
        return obj

    def stored(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object as a plain dict, or None when absent/deleted."""
        try:
            obj = self._objects[resource, namespace, name]
        except KeyError:
            return None
        return None if obj.deleted else copy.deepcopy(obj.raw)

    def vanish(self, resource: str, namespace: str, name: str) -> None:
        """Remove an object without a watch event: what a client sees of a delete that
        happened while its watch was away (after a 410 Gone, a relist never reports it)."""
        del self._objects[kmock.resource(resource), namespace, name]

    def names(self, resource: str, namespace: str) -> set[str]:
        """Names of the live objects of ``resource`` in ``namespace``."""
        res = kmock.resource(resource)
        return {
            name
            for (r, ns, name), obj in self._objects.items()
            if r == res and ns == namespace and not obj.deleted
        }

    def size_of(self, obj: dict[str, Any]) -> int:
        """Bytes of ``obj``'s JSON (what etcd's limit counts)."""
        return len(json.dumps(obj, separators=(",", ":")).encode())
