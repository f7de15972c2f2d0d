"""Kubeflow spark-operator SparkApplications on the test API server, under the names
``tests/security/test_operator_kubeflow_trust.py`` imports. Everything is
``tests/support/foreign_apps.py``'s (:data:`~tests.support.foreign_apps.KUBEFLOW` and the
helpers shared with the Apache operator's applications); new tests use that module.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.operator.conftest import Kubectl, StrictApiServer
from tests.support.foreign_apps import (
    KUBEFLOW,
    apply_crds,
    control_secret,
    post_sample,
    ready,
    serve_as_driver,
    start_pod,
)

KF_GROUP, KF_VERSION = KUBEFLOW.rule.group, KUBEFLOW.rule.version
KF_APPS = KUBEFLOW.stored_as
APP = KUBEFLOW.app
#: The spark-operator's SparkApplication, its whole object kept as sent.
KUBEFLOW_CRD = KUBEFLOW.crd


@pytest.fixture()
async def crds_applied(kubectl: Kubectl, kube: StrictApiServer) -> None:
    """sparkglass's CRDs and the Kubeflow one, before the operator starts (it checks once,
    at start, whether it may list Kubeflow applications)."""
    await apply_crds(kubectl, kube, KUBEFLOW)


kubeflow_example = KUBEFLOW.example
kubeflow_app = KUBEFLOW.example_app
create_kubeflow_app = KUBEFLOW.create_app
set_state = KUBEFLOW.set_state
running_kubeflow_app = KUBEFLOW.running_app
kubeflow_sample = KUBEFLOW.sample


def driver_pod(
    app: dict[str, Any],
    port: int | None,
    *,
    name: str | None = None,
    owner: str = "controller",
    other_uid: str = "",
) -> dict[str, Any]:
    """:meth:`ForeignOperator.driver_pod` of Kubeflow; ``owner`` ``controller`` is what the
    spark-operator sets (``own`` there)."""
    own = "own" if owner == "controller" else owner
    return KUBEFLOW.driver_pod(app, port, name=name, owner=own, other_uid=other_uid)


__all__ = [
    "APP",
    "KF_APPS",
    "KF_GROUP",
    "KF_VERSION",
    "KUBEFLOW_CRD",
    "control_secret",
    "crds_applied",
    "create_kubeflow_app",
    "driver_pod",
    "kubeflow_app",
    "kubeflow_example",
    "kubeflow_sample",
    "post_sample",
    "ready",
    "running_kubeflow_app",
    "serve_as_driver",
    "set_state",
    "start_pod",
]
