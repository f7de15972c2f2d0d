"""Kubeflow spark-operator applications (``sparkoperator.k8s.io/v1beta2``) as DataSample targets.

A DataSample whose ``spec.applicationRef.apiVersion`` is ``sparkoperator.k8s.io/v1beta2``
samples a SparkApplication of the Kubeflow spark-operator. That operator, not sparkglass,
creates the driver Pod, so the rule of :mod:`.driver_access` ("only children we created")
cannot hold for the Pod. The operator still takes nothing a user can write as an address or
a Secret name: the application is read from the API (:func:`read_application`), its driver
Pod must carry the driver labels and a controller owner reference to the application's uid
(:func:`is_driver_pod`), and the token and the pinned certificate come only from the Secret
this operator creates (:func:`ensure_control_secret`). The trust rule, what it proves and its
limits: docs/pipelines.md, "Kubeflow spark-operator applications". The rule is
:mod:`.foreign_apps`'s, shared with the Apache Spark operator's applications
(:mod:`.apache_spark`); this module names what is Kubeflow's.
"""

from __future__ import annotations

from typing import Any

from .foreign_apps import (
    CONTROL_PORT_NAME,
    LABEL_SPARK_ROLE,
    MAX_APP_NAME,
    SAMPLING_ENABLED_KEY,
    SAMPLING_WINDOW_KEY,
    SECRET_SUFFIX,
    SPARK_ROLE_DRIVER,
    ForeignApps,
    NotEnabled,
    control_endpoint,
    control_port,
    sampling_requested,
    sampling_settings,
    secret_name,
    spark_conf,
    tls_server_name,
)

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SparkApplication"
PLURAL = "sparkapplications"
#: The spark-operator's application label on the driver Pod.
LABEL_APP_NAME = f"{GROUP}/app-name"

#: ``status.applicationState.state`` values: the one in which a driver is worth looking for,
#: and those after which none comes back (the spark-operator's end states).
RUNNING = "RUNNING"
OVER = frozenset({"COMPLETED", "FAILED", "SUBMISSION_FAILED"})


def application_state(app: dict[str, Any]) -> str:
    """``status.applicationState.state``: only ever used to decide whether to wait."""
    state = ((app.get("status") or {}).get("applicationState") or {}).get("state")
    return state if isinstance(state, str) else ""


KUBEFLOW = ForeignApps(
    group=GROUP,
    version=VERSION,
    kind=KIND,
    plural=PLURAL,
    owner="Kubeflow",
    app_label=LABEL_APP_NAME,
    controller_owner=True,
    state=application_state,
    running=frozenset({RUNNING}),
    over=OVER,
    ports_field="spec.driver.ports",
    chart_value="kubeflow.enabled",
    log_name="kubeflow",
)
APPS = KUBEFLOW.apps

# The rule, bound to Kubeflow's applications (the names callers and tests use).
app_name_problem = KUBEFLOW.app_name_problem
is_driver_pod = KUBEFLOW.is_driver_pod
running_driver = KUBEFLOW.running_driver
owner_reference = KUBEFLOW.owner_reference
owns_secret = KUBEFLOW.owns_secret
secret_manifest = KUBEFLOW.secret_manifest
read_application = KUBEFLOW.read_application
find_driver = KUBEFLOW.find_driver
ensure_control_secret = KUBEFLOW.ensure_control_secret
driver_access = KUBEFLOW.driver_access
readable = KUBEFLOW.readable

__all__ = [
    "API_VERSION",
    "APPS",
    "CONTROL_PORT_NAME",
    "GROUP",
    "KIND",
    "KUBEFLOW",
    "LABEL_APP_NAME",
    "LABEL_SPARK_ROLE",
    "MAX_APP_NAME",
    "OVER",
    "PLURAL",
    "RUNNING",
    "SAMPLING_ENABLED_KEY",
    "SAMPLING_WINDOW_KEY",
    "SECRET_SUFFIX",
    "SPARK_ROLE_DRIVER",
    "VERSION",
    "NotEnabled",
    "app_name_problem",
    "application_state",
    "control_endpoint",
    "control_port",
    "driver_access",
    "ensure_control_secret",
    "find_driver",
    "is_driver_pod",
    "owner_reference",
    "owns_secret",
    "read_application",
    "readable",
    "running_driver",
    "sampling_requested",
    "sampling_settings",
    "secret_manifest",
    "secret_name",
    "spark_conf",
    "tls_server_name",
]
