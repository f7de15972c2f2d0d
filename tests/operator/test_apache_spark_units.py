"""Apache Spark Kubernetes operator applications: the operator's rules, without a server,
where they are the Apache operator's alone.

What both operators' applications share (``applicationRef`` naming the operator, the CRD's
rules, the driver Pod's labels and owner reference, ``find_driver``, 403 from RBAC in
``read_application`` and ``readable``, the webhook's verdicts, the not-enabled reason, the
examples) is ``test_foreign_apps_units.py``'s. Here: the owner reference the Apache operator
writes without ``controller`` (Kubeflow's rule still requires one: ``test_kubeflow_units.py``),
the state reading, and where the example puts the tap jar.
"""

from __future__ import annotations

import yaml

from sparkglass.operator import apache_spark
from tests.support.foreign_apps import APACHE_SPARK

APPS = apache_spark.APACHE_SPARK
#: The minimal application and driver Pod the rule reads (``tests/support/foreign_apps.py``).
app = APACHE_SPARK.bare_app
pod = APACHE_SPARK.bare_pod


# --------------------------------------------------------------------------- the driver Pod
def test_the_driver_pod_reference_need_not_be_a_controller_one() -> None:
    """The Apache operator writes the driver Pod's owner reference with no ``controller``
    field, so requiring one would refuse every genuine driver."""
    a = app()
    own = pod()
    assert "controller" not in own["metadata"]["ownerReferences"][0]  # as the operator writes
    assert APPS.is_driver_pod(own, a)
    assert APPS.is_driver_pod(pod(controller=False), a)


def test_the_state_is_the_current_state_summary() -> None:
    assert apache_spark.application_state(app(state="DriverReady")) == "DriverReady"
    assert apache_spark.application_state({"status": {}}) == ""
    assert "RunningHealthy" in APPS.running and "DriverRequested" not in APPS.running
    # Stopping states may lead to a restart: only the terminated ones end the wait.
    assert APPS.over == {"ResourceReleased", "TerminatedWithoutReleaseResources"}
    assert "Failed" not in APPS.over


# --------------------------------------------------------------------------- the examples
def test_the_example_puts_the_tap_jar_in_spark_conf() -> None:
    """The jar goes in ``sparkConf``: a ``spec.jars`` entry would make the operator submit a
    JVM main jar, and the example is a Python application (the rest of the example's rule:
    ``test_foreign_apps_units.py``)."""
    docs = list(yaml.safe_load_all(APACHE_SPARK.example_file.read_text()))
    spec = docs[0]["spec"]
    assert spec["sparkConf"]["spark.jars"].endswith("sparkglass-tap.jar") and "jars" not in spec
    assert spec["pyFiles"].endswith(".py")
