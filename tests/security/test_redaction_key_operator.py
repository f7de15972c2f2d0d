"""The operator's half of the keyed ``hash`` redaction: a key per application that never leaves
the cluster's Secret.

The attack this closes: ``hash`` was an unkeyed SHA-256, reversed by a table of the column's
possible values. A key stops that only while nobody who reads samples can read the key: so it
must not be in what the operator writes where others look (the ConfigMap with
``spark-defaults.conf``, which the ``view`` role reads; the Pod spec; a status), must differ
per application (a table built for one application must not open another), and must reach
the driver the way the control token does (an environment variable from a ``secretKeyRef``),
which turns it into the driver's Spark conf. The manifests are checked as the API server
would (``kubernetes_validate``, strict).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate

from sparkglass.operator import children, names, spark_conf
from sparkglass.operator.certificates import issue_control_certificate
from sparkglass.operator.specs import SparkApplicationSpec
from sparkglass.runtime.contract.redaction import KEY_CONF, KEY_ENV

SPEC: dict[str, Any] = {
    "image": "img:1",
    "mainApplicationFile": "local:///job.py",
    "arguments": ["--days", "7"],
    "sampling": {"redact": [{"columns": ["origin"], "action": "hash"}]},
}


def spec(**extra: Any) -> SparkApplicationSpec:
    return SparkApplicationSpec.parse({**SPEC, **extra})


def secret_key(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"][names.REDACTION_KEY_KEY]).decode()


def test_each_application_secret_holds_its_own_random_key() -> None:
    certificate = issue_control_certificate("a-driver", "ns")
    one = children.secret("a", "ns", "uid", "tok", certificate)
    other = children.secret("b", "ns", "uid2", "tok", certificate)
    key = secret_key(one)
    assert len(bytes.fromhex(key)) == 32 and key == key.lower()
    assert key != secret_key(other)
    kubernetes_validate.validate(one, "1.32", strict=True)


def test_the_driver_gets_the_key_from_the_secret_and_nothing_else_holds_it() -> None:
    certificate = issue_control_certificate("a-driver", "ns")
    secret = children.secret("a", "ns", "uid", "tok", certificate)
    key = secret_key(secret)
    env = spark_conf.DriverEnvironment()
    # A user who puts a key into sparkConf would publish it in the ConfigMap: dropped.
    app = spec(sparkConf={KEY_CONF: "ab" * 32, "spark.executor.memory": "2g"})
    pod = children.driver_pod("a", "ns", "uid", app, hash="h", attempt=1, env=env)
    cm = children.config_map("a", "ns", "uid", app, resolved={}, env=env)
    (container,) = pod["spec"]["containers"]
    by_name = {e["name"]: e for e in container["env"]}
    assert names.ENV_REDACTION_KEY == KEY_ENV
    assert by_name[KEY_ENV] == {
        "name": KEY_ENV,
        "valueFrom": {
            "secretKeyRef": {
                "name": names.secret_name("a"),
                "key": names.REDACTION_KEY_KEY,
                # A Secret of an older operator has no key: the driver still starts, and a
                # hash rule then fails naming the missing key.
                "optional": True,
            }
        },
    }
    # spark-submit gets the conf on its command line, expanded by the kubelet from that
    # variable; the Pod spec holds the reference only.
    args = container["args"]
    at = args.index("--conf")
    assert args[at + 1] == f"{KEY_CONF}=$({KEY_ENV})"
    assert args[:4] == ["--master", env.kubernetes_master, "--deploy-mode", "client"]
    assert args[-3:] == ["local:///job.py", "--days", "7"]
    conf = cm["data"]["spark-defaults.conf"]
    assert KEY_CONF not in conf and "spark.executor.memory=2g" in conf
    for blob in (json.dumps(pod), json.dumps(cm)):
        assert key not in blob and "ab" * 32 not in blob
    kubernetes_validate.validate(pod, "1.32", strict=True)


def test_a_secret_without_a_key_gets_one_and_a_kept_key_stays() -> None:
    certificate = issue_control_certificate("a-driver", "ns")
    secret = children.secret("a", "ns", "uid", "tok", certificate)
    assert children.missing_redaction_key(secret) is None  # kept: hashes keep linking
    older = {**secret, "data": {k: v for k, v in secret["data"].items() if k != "redaction-key"}}
    patch = children.missing_redaction_key(older)
    assert patch is not None and set(patch) == {names.REDACTION_KEY_KEY}
    assert len(bytes.fromhex(base64.b64decode(patch[names.REDACTION_KEY_KEY]).decode())) == 32
    short = base64.b64encode(b"abcd").decode()
    broken = {**secret, "data": {**secret["data"], names.REDACTION_KEY_KEY: short}}
    assert children.missing_redaction_key(broken) is not None
