"""Security A6: every application's Spark RPC is authenticated with its own secret.

The chart's NetworkPolicy admits any Pod of a driver's namespace labelled
``sparkglass.io/application`` (whatever the value) to the driver's RPC and block-manager
ports, so another application's executors could reach them. The operator therefore sets
``spark.authenticate=true`` for every application, after ``sparkConf``, which may not set
it (nor a fixed ``spark.authenticate.secret``, which would sit in a ConfigMap the view role
reads). With a ``k8s://`` master Spark generates the secret in the driver and puts it into
the executor Pods it creates; the last test checks that the bundled Spark still does.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from sparkglass.operator import children
from sparkglass.operator.spark_conf import DriverEnvironment, spark_properties
from sparkglass.operator.specs import OPERATOR_OWNED_CONF_KEYS, SparkApplicationSpec

REPO = Path(__file__).resolve().parents[2]


def example() -> dict[str, Any]:
    app = yaml.safe_load((REPO / "examples" / "flights-sparkapplication.yaml").read_text())
    return dict(app["spec"])


def conf_of(spec: SparkApplicationSpec) -> dict[str, str]:
    return spark_properties(spec, app="flights", namespace="spark-jobs", env=DriverEnvironment())


def test_the_rendered_driver_conf_turns_authentication_on() -> None:
    spec = SparkApplicationSpec.parse(example())
    assert conf_of(spec)["spark.authenticate"] == "true"
    assert "spark.authenticate.secret" not in conf_of(spec)
    cm = children.config_map(
        "flights", "spark-jobs", "uid-1", spec, resolved={}, env=DriverEnvironment()
    )
    lines = cm["data"]["spark-defaults.conf"].splitlines()
    assert "spark.authenticate=true" in lines
    # The master is Kubernetes': the mode in which Spark generates and distributes the secret.
    assert any(re.fullmatch(r"spark\.master=k8s://https://.+", line) for line in lines)


@pytest.mark.parametrize(
    ("key", "value"),
    [("spark.authenticate", "false"), ("spark.authenticate.secret", "shared-by-everyone")],
)
def test_spark_conf_cannot_turn_it_off_or_fix_the_secret(key: str, value: str) -> None:
    assert key in OPERATOR_OWNED_CONF_KEYS  # and so refused by the CRD's CEL (test_cel.py)
    spec = example()
    spec["sparkConf"] = {**spec.get("sparkConf", {}), key: value}
    with pytest.raises(
        ValidationError, match=rf"sparkConf: {re.escape(key)} is set by the operator"
    ):
        SparkApplicationSpec.parse(spec)
    # A spec that got past validation (stored before the key became the operator's, or an
    # API server without the CRD's rules) still gets authentication on and no fixed secret.
    parsed = SparkApplicationSpec.parse(example())
    parsed.spark_conf[key] = value
    conf = conf_of(parsed)
    assert conf["spark.authenticate"] == "true"
    assert conf.get("spark.authenticate.secret") is None


def test_a_user_mounted_secret_file_stays_possible() -> None:
    """Spark's other way on Kubernetes (both files, from a Secret the user mounts) is the
    user's to choose: it is still authentication."""
    spec = example()
    spec["sparkConf"] = {
        **spec.get("sparkConf", {}),
        "spark.authenticate.secret.driver.file": "/mnt/rpc/secret",
        "spark.authenticate.secret.executor.file": "/mnt/rpc/secret",
    }
    conf = conf_of(SparkApplicationSpec.parse(spec))
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.authenticate.secret.executor.file"] == "/mnt/rpc/secret"


def _class_text(jar_glob: str, member: str) -> bytes:
    pyspark = pytest.importorskip("pyspark")
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob(jar_glob))
    if not jars:
        pytest.skip(f"pyspark ships no {jar_glob}")
    with zipfile.ZipFile(jars[-1]) as jar:
        return jar.read(member)


def test_the_bundled_spark_hands_the_generated_secret_to_its_executor_pods() -> None:
    """What the rule relies on, read from the Spark classes the image ships: the driver's
    SecurityManager treats a Kubernetes master as one where it generates the secret itself
    (``KUBERNETES_REGEX`` next to ``createSecret``), and the executor Pod builder puts the
    secret into each executor (``ENV_AUTH_SECRET``) unless secret files are configured."""
    security = _class_text("spark-core_*.jar", "org/apache/spark/SecurityManager.class")
    assert b"KUBERNETES_REGEX" in security and b"createSecret" in security
    executor = _class_text(
        "spark-kubernetes_*.jar",
        "org/apache/spark/deploy/k8s/features/BasicExecutorFeatureStep.class",
    )
    assert b"ENV_AUTH_SECRET" in executor and b"AUTH_SECRET_FILE_EXECUTOR" in executor
