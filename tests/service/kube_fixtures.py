"""The Kubernetes API on loopback (kmock's KubernetesEmulator) answering TokenReview and
SubjectAccessReview from a small RBAC table, with the sparkglass CRDs declared; the operator's
DataSample admission webhook as its admission step, and a driver for it to ask."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import kmock
import kubernetes

from sparkglass.operator import names
from sparkglass.operator.admission import AdmissionReview, DataSampleReviewer
from sparkglass.operator.context import OperatorContext
from sparkglass.operator.kube.cluster import Cluster
from sparkglass.operator.settings import OperatorConfig
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


#: The chart's name of the DataSample webhook (its ValidatingWebhookConfiguration).
WEBHOOK = "datasamples.sparkglass.io"


def admit_datasamples_by_the_webhook(k: StrictApiServer, namespace: str) -> Cluster:
    """Make the operator's DataSample admission webhook (``operator/admission.py``, its
    reviewer called in-process) the stand-in's admission step for DataSamples, as the chart
    has the API server call it (creates only, ``failurePolicy: Ignore``, dry runs included).
    It reads the application, driver Pod and Secret through the stand-in's API, as the
    operator does, and asks the driver's round check. Returns its API client (close it)."""
    configuration = kubernetes.client.Configuration()
    configuration.host = str(k.url).rstrip("/")
    cluster = Cluster(configuration)
    # The stand-in driver (fake_driver.py) serves plain HTTP, as a driver Pod without the
    # control TLS volume does: the operator sends it the token only when allowed to.
    config = OperatorConfig(namespaces=(namespace,), allow_cleartext_control=True)
    reviewer = DataSampleReviewer(OperatorContext(config=config, cluster=cluster))

    async def review(request: dict[str, Any]) -> dict[str, Any]:
        review = AdmissionReview.model_validate(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
        verdict = await reviewer.review(review.request)
        response: dict[str, Any] = verdict.review(review.request.uid)["response"]
        return response

    k.register_webhook(
        f"{names.API_VERSION}/{names.SAMPLES}", WEBHOOK, review, failure_policy="Ignore"
    )
    return cluster


async def run_driver(
    k: StrictApiServer, namespace: str, application: str, driver_url: str, token: str
) -> None:
    """The application's driver Pod, Running at ``driver_url``'s address, and its control
    Secret holding ``token``, each with the labels and controller reference the operator
    gives them: the only driver the webhook will ask (``operator/driver_access.py``)."""
    app = k.stored(f"{names.API_VERSION}/{names.APPS}", namespace, application)
    assert app is not None, f"no SparkApplication {namespace}/{application}"

    def metadata(name: str, role: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": namespace,
            "labels": {
                names.LABEL_APP: application,
                names.LABEL_ROLE: role,
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
            },
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": names.APP_KIND,
                    "name": application,
                    "uid": app["metadata"]["uid"],
                    "controller": True,
                }
            ],
        }

    url = httpx.URL(driver_url)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(names.driver_pod_name(application), names.ROLE_DRIVER),
        "spec": {
            "containers": [
                {
                    "name": "spark-kubernetes-driver",
                    "image": "registry.example.com/flights:1",
                    "ports": [{"name": "control", "containerPort": url.port}],
                }
            ]
        },
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(names.secret_name(application), names.ROLE_CONTROL_TOKEN),
        "data": {names.TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }
    core = f"/api/v1/namespaces/{namespace}"
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        for path, body in ((f"{core}/pods", pod), (f"{core}/secrets", secret)):
            r = await kube.post(path, json=body)
            assert r.status_code == 201, r.text
        r = await kube.patch(
            f"{core}/pods/{pod['metadata']['name']}/status",
            json={"status": {"phase": "Running", "podIP": url.host}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
