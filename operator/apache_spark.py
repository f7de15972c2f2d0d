"""Apache Spark Kubernetes operator applications (``spark.apache.org/v1``) as DataSample targets.

A DataSample whose ``spec.applicationRef.apiVersion`` is ``spark.apache.org/v1`` samples a
``SparkApplication`` of the Apache Spark Kubernetes operator (apache/spark-kubernetes-operator;
``sparkapp`` is its short name). That operator, not sparkglass, creates the driver Pod, so
the rule is :mod:`.foreign_apps`'s, as for Kubeflow's applications (:mod:`.kubeflow`): the
application is read from the API, its driver Pod must carry Spark's ``spark-role=driver``
label, the operator's ``spark.operator/spark-app-name=<name>`` label and an owner reference
to the application's uid, and the token and the pinned certificate come only from the Secret
this operator creates. One difference: the Apache operator writes that owner reference
without ``controller: true``, so a controller reference is not required here. The trust rule
and its limits: docs/pipelines.md, "Apache Spark Kubernetes operator applications".
"""

from __future__ import annotations

from typing import Any

from .foreign_apps import ForeignApps

GROUP = "spark.apache.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SparkApplication"
PLURAL = "sparkapplications"
#: The label the Apache operator puts on every resource of an application (its driver Pod
#: too), valued with the application's name.
LABEL_APP_NAME = "spark.operator/spark-app-name"

#: ``status.currentState.currentStateSummary`` values in which the driver Pod runs (from
#: DriverStarted until the application starts stopping).
RUNNING = frozenset(
    {
        "DriverStarted",
        "DriverReady",
        "InitializedBelowThresholdExecutors",
        "RunningHealthy",
        "RunningWithBelowThresholdExecutors",
    }
)
#: The states after which nothing more happens to the application (the operator's own
#: "terminated"). The stopping ones before them (Succeeded, Failed, DriverEvicted, the
#: time-outs...) may still lead to ScheduledToRestart and a new driver, so they are waited
#: out, like the states before the driver starts.
OVER = frozenset({"ResourceReleased", "TerminatedWithoutReleaseResources"})


def application_state(app: dict[str, Any]) -> str:
    """``status.currentState.currentStateSummary``: only ever used to decide whether to
    wait."""
    current = ((app.get("status") or {}).get("currentState") or {}).get("currentStateSummary")
    return current if isinstance(current, str) else ""


APACHE_SPARK = ForeignApps(
    group=GROUP,
    version=VERSION,
    kind=KIND,
    plural=PLURAL,
    owner="Apache Spark operator",
    app_label=LABEL_APP_NAME,
    controller_owner=False,
    state=application_state,
    running=RUNNING,
    over=OVER,
    ports_field="spec.driverSpec.podTemplateSpec container ports",
    chart_value="apacheSparkOperator.enabled",
    log_name="apache spark",
)
APPS = APACHE_SPARK.apps

__all__ = [
    "APACHE_SPARK",
    "API_VERSION",
    "APPS",
    "GROUP",
    "KIND",
    "LABEL_APP_NAME",
    "OVER",
    "PLURAL",
    "RUNNING",
    "VERSION",
    "application_state",
]
