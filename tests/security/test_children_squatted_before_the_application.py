"""Attacks on the names of a SparkApplication's children, squatted before it exists.

The operator names every child after the application (``<app>-control-token``,
``<app>-driver``, ``<app>-sparkglass``) and, when an object of that name already exists,
treats it as its own without checking the owner reference. Whoever may create objects in the
namespace can create one first (only the name is needed, and the application's name is
known before it is applied: GitOps repositories, CI); whoever may create SparkApplications
can name one after an existing object. What the operator then does with its own rights:

a. **A Secret squatted before the application** (``create secrets``, no ``get``): the
   operator creates the driver Pod anyway, and the driver reads its control token and TLS key
   from the squatter's Secret, so the squatter knows the token every request to that driver
   is authorised with and holds the key the driver serves (the operator itself refuses to
   talk to such a driver: ``driver_access`` ignores a Secret it does not own). Expected: no
   driver Pod until the Secret at that name is the application's own, and a status saying
   why.
b. **A Pod that is not the application's** at ``<app>-driver`` is deleted by the operator
   (``create sparkapplications`` is enough to have the operator, with its cluster-wide
   ``delete pods``, delete any Pod whose name ends in ``-driver`` in the namespace).
   Expected: left alone, and the application reports the conflict.
c. **A ConfigMap that is not the application's** at ``<app>-sparkglass`` gets its ``data``
   overwritten by the operator. Expected: left alone.

Fixed in ``operator/sparkapplication.py``: every child found at its name must carry the
operator's labels and a controller owner reference to the application (``owned_by``), or the
application reports ``ChildNotOwned`` and the object is neither used, changed nor deleted.
The operator is the real process against the kmock API server.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sparkglass.operator.certificates import issue_control_certificate
from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from tests.support.datasamples import APPS, example, post
from tests.support.pod_security import restricted

pytestmark = pytest.mark.timeout(120)

operator = operator_tests.operator
operator_args = operator_tests.operator_args

SQUATTER_TOKEN = "token-the-squatter-knows"


async def create(kube: StrictApiServer, plural: str, body: dict[str, Any]) -> None:
    resp = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/{plural}", json=body)
    assert resp.status in (200, 201), await resp.text()


def app_status(kube: StrictApiServer, name: str = "flights") -> dict[str, Any]:
    return dict((kube.stored(APPS, NAMESPACE, name) or {}).get("status") or {})


async def apply_flights(kube: StrictApiServer, operator: OperatorProcess) -> None:
    """Apply the example application and wait until the operator has acted on it (its
    status says something), whatever it decided."""
    await post(kube, "sparkapplications", example("flights-sparkapplication.yaml"))
    await eventually(
        lambda: app_status(kube).get("observedGeneration") is not None,
        what="the operator to act on the application",
        operator=operator,
    )


def labels(role: str) -> dict[str, str]:
    # The operator's labels: anyone who creates an object may set them.
    return {
        "sparkglass.io/application": "flights",
        "sparkglass.io/role": role,
        "app.kubernetes.io/managed-by": "sparkglass-operator",
    }


async def test_a_secret_squatted_before_the_application_does_not_reach_a_driver(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    cert = issue_control_certificate("flights-driver", NAMESPACE)
    data = {"token": SQUATTER_TOKEN, **cert.secret_data()}
    await create(
        kube,
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "flights-control-token",
                "namespace": NAMESPACE,
                "labels": labels("control-token"),
            },
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )
    await apply_flights(kube, operator)
    # Give the operator the time it takes to create a driver Pod (it did so at once).
    await eventually(
        lambda: (
            kube.stored("v1/pods", NAMESPACE, "flights-driver") is not None
            or "control-token" in str(app_status(kube))
        ),
        what="a driver Pod or a status naming the Secret",
        operator=operator,
    )
    assert kube.stored("v1/pods", NAMESPACE, "flights-driver") is None, (
        "the driver Pod was created with the squatter's Secret"
    )
    assert not_owned_reported(kube, "flights-control-token")


async def test_a_pod_not_created_for_the_application_is_not_deleted(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    await create(
        kube,
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "flights-driver", "namespace": NAMESPACE},
            "spec": restricted({"containers": [{"name": "billing", "image": "billing:1"}]}),
        },
    )
    await apply_flights(kube, operator)
    pod = kube.stored("v1/pods", NAMESPACE, "flights-driver")
    # The operator decides at once (same pass as the Service): it deleted the Pod then.
    assert pod is not None and not pod["metadata"].get("deletionTimestamp"), (
        "the operator deleted a Pod that is not the application's"
    )
    assert pod["spec"]["containers"][0]["name"] == "billing"
    assert not_owned_reported(kube, "flights-driver")


async def test_a_config_map_not_created_for_the_application_is_not_overwritten(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    await create(
        kube,
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "flights-sparkglass", "namespace": NAMESPACE},
            "data": {"team-settings.yaml": "owner: billing"},
        },
    )
    await apply_flights(kube, operator)
    cm = kube.stored("v1/configmaps", NAMESPACE, "flights-sparkglass")
    assert cm is not None and cm["data"] == {"team-settings.yaml": "owner: billing"}, (
        "the operator overwrote a ConfigMap that is not the application's"
    )
    assert not_owned_reported(kube, "flights-sparkglass")


def not_owned_reported(kube: StrictApiServer, child: str) -> bool:
    """The application's Ready condition names the conflict and the object."""
    ready = next(
        (c for c in app_status(kube).get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    return ready.get("reason") == "ChildNotOwned" and child in ready.get("message", "")
