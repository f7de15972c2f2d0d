"""Kubernetes mode: TokenReview for authentication, SubjectAccessReview for authorization.

A request's bearer token is sent in a ``TokenReview`` (``authentication.k8s.io/v1``); the
user and groups it returns are checked with a ``SubjectAccessReview``
(``authorization.k8s.io/v1``) for the verb the request needs on ``datasamples.sparkglass.io``
in the application's namespace (and, for another operator's application, ``get`` on its
kind). Decisions are cached briefly (settings ``authn_cache_seconds``,
``authz_allow_cache_seconds``, ``authz_deny_cache_seconds``), like kube-rbac-proxy. The
service account needs the ``system:auth-delegator`` ClusterRole.
"""

from __future__ import annotations

import hashlib

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ..settings import Settings
from .cache import TTLCache
from .principal import AuthBackendError, Permission, Principal

GROUP = "sparkglass.io"

#: (verb, API group, resource) of the SubjectAccessReview for each permission.
RBAC_RULES: dict[Permission, tuple[str, str, str]] = {
    Permission.READ: ("get", GROUP, "datasamples"),
    Permission.TRIGGER: ("create", GROUP, "datasamples"),
    Permission.ADMIN: ("update", GROUP, "sparkapplications"),
    # Another operator's application is shown only to whoever may read it in Kubernetes:
    # the service must not widen who sees its spec or samples its driver.
    Permission.READ_KUBEFLOW_APPLICATIONS: ("get", "sparkoperator.k8s.io", "sparkapplications"),
    Permission.READ_APACHE_SPARK_APPLICATIONS: ("get", "spark.apache.org", "sparkapplications"),
}

_REVIEW_TIMEOUT_S = 5.0


class KubernetesAuthenticator:
    """TokenReview + SubjectAccessReview with TTL caches."""

    def __init__(self, api_client: client.ApiClient, settings: Settings) -> None:
        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._settings = settings
        self._authn_cache: TTLCache[Principal | None] = TTLCache()
        self._authz_cache: TTLCache[bool] = TTLCache()

    def authenticate(self, token: str, audiences: tuple[str, ...] = ()) -> Principal | None:
        """Ask the API server who owns ``token`` (cached; the cache key is a hash). With
        ``audiences``, the token must be bound to one of them: the API server says which in
        ``status.audiences``, and a token of another audience (the API server's own, say) is
        refused."""
        key = (hashlib.sha256(token.encode()).hexdigest(), audiences)
        hit, cached = self._authn_cache.get(key)
        if hit:
            return cached
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=list(audiences) or None)
        )
        try:
            answer = self._authn.create_token_review(review, _request_timeout=_REVIEW_TIMEOUT_S)
        except (ApiException, HTTPError, OSError) as exc:
            # Say what failed without the request body: it holds the token.
            status = getattr(exc, "status", None)
            raise AuthBackendError(f"TokenReview failed (HTTP {status or 'error'})") from None
        st = answer.status
        principal: Principal | None = None
        bound = not audiences or bool(set(audiences) & set((st.audiences if st else None) or ()))
        if (
            st is not None
            and st.authenticated
            and st.user is not None
            and st.user.username
            and bound
        ):
            principal = Principal(
                user=st.user.username,
                groups=tuple(st.user.groups or ()),
                uid=st.user.uid or "",
                extra={k: list(v) for k, v in (st.user.extra or {}).items()},
            )
        self._authn_cache.set(key, principal, self._settings.authn_cache_seconds)
        return principal

    def authorize(self, principal: Principal, namespace: str, permission: Permission) -> bool:
        """SubjectAccessReview for ``permission`` (:data:`RBAC_RULES`) in ``namespace``."""
        verb, group, resource = RBAC_RULES[permission]
        key = (principal.user, principal.groups, principal.uid, namespace, verb, group, resource)
        hit, cached = self._authz_cache.get(key)
        if hit:
            return bool(cached)
        sar = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=principal.user,
                groups=list(principal.groups) or None,
                uid=principal.uid or None,
                extra=principal.extra or None,
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=verb, group=group, resource=resource
                ),
            )
        )
        try:
            answer = self._authz.create_subject_access_review(
                sar, _request_timeout=_REVIEW_TIMEOUT_S
            )
        except (ApiException, HTTPError, OSError) as exc:
            status = getattr(exc, "status", None)
            raise AuthBackendError(
                f"SubjectAccessReview failed (HTTP {status or 'error'})"
            ) from None
        allowed = bool(answer.status is not None and answer.status.allowed)
        ttl = (
            self._settings.authz_allow_cache_seconds
            if allowed
            else self._settings.authz_deny_cache_seconds
        )
        self._authz_cache.set(key, allowed, ttl)
        return allowed
