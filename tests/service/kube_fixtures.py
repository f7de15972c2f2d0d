"""The Kubernetes API on loopback (kmock's KubernetesEmulator) answering TokenReview and
SubjectAccessReview from a small RBAC table, with the sparkglass CRDs declared."""

from __future__ import annotations

from typing import Any

import kmock

from tests.support.kube_apiserver import StrictApiServer
from tests.support.kube_fixtures import CRD_DIR

OPERATOR = "system:serviceaccount:sparkglass-system:sparkglass-operator"
API_AUDIENCE = "https://kubernetes.default.svc"

#: token -> (username, groups)
USERS: dict[str, tuple[str, list[str]]] = {
    "alice-token": ("alice", ["team-a"]),  # may trigger in team-a (via her group)
    "bob-token": ("bob", []),  # may only read in team-a
    "eve-token": ("eve", []),  # may do nothing
    # The operator: its projected token for the service, and its token for the API server.
    "operator-token": (OPERATOR, ["system:serviceaccounts"]),
    "operator-api-token": (OPERATOR, ["system:serviceaccounts"]),
    "mallory-service-token": ("mallory", []),
}
#: token -> the audiences it is bound to (others: the API server's own, API_AUDIENCE).
AUDIENCES: dict[str, list[str]] = {
    "operator-token": ["sparkglass-service"],
    "mallory-service-token": ["sparkglass-service"],
}
#: (user or group, namespace, verb, resource) granted.
GRANTS: set[tuple[str, str, str, str]] = {
    ("team-a", "team-a", "get", "datasamples"),
    ("team-a", "team-a", "create", "datasamples"),
    ("bob", "team-a", "get", "datasamples"),
    ("team-a", "local", "get", "datasamples"),
    ("team-a", "local", "create", "datasamples"),
    ("bob", "local", "get", "datasamples"),
}


def token_review(request: kmock.Request) -> dict[str, Any]:
    token = request.data["spec"]["token"]
    # As the API server: a token is valid only for the audiences asked (its own if none),
    # and the answer names those it is valid for.
    asked = request.data["spec"].get("audiences") or [API_AUDIENCE]
    bound = [a for a in asked if a in AUDIENCES.get(token, [API_AUDIENCE])]
    if token not in USERS or not bound:
        status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
    else:
        name, groups = USERS[token]
        status = {
            "authenticated": True,
            "user": {"username": name, "uid": f"uid-{name}", "groups": groups},
            "audiences": bound,
        }
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": request.data["spec"],
        "status": status,
    }


def subject_access_review(request: kmock.Request) -> dict[str, Any]:
    spec = request.data["spec"]
    attrs = spec["resourceAttributes"]
    assert attrs["group"] == "sparkglass.io"
    subjects = [spec.get("user"), *(spec.get("groups") or [])]
    allowed = any(
        (s, attrs["namespace"], attrs["verb"], attrs["resource"]) in GRANTS for s in subjects
    )
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
        "status": {"allowed": allowed},
    }


#: The tests' API server (tests/support/kube_apiserver.py): reviews are answered, never
#: stored; the sparkglass resources are enforced by their CRDs' schemas and rules.
ReviewingEmulator = StrictApiServer


def install(k: kmock.KubernetesEmulator) -> None:
    """Script the reviews and establish the sparkglass CRDs on ``k``."""
    k.resources.load_bundled()
    assert isinstance(k, StrictApiServer), "use pytest.mark.kmock(cls=ReviewingEmulator)"
    k.declare_crds(sorted(CRD_DIR.glob("*.yaml")))
    for namespace in ("team-a", "team-b", "local"):
        k.namespaces.setdefault(namespace, {})
    k["post authentication.k8s.io/v1/tokenreviews"] << token_review
    k["post authorization.k8s.io/v1/subjectaccessreviews"] << subject_access_review
