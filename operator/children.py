"""Manifests of a SparkApplication's child objects (see ``names`` for the table).

Pure functions from the application (name, namespace, uid, parsed spec) to plain dicts, so
tests can compare them and the reconcile loop stays small. Every child carries an owner
reference to the application (deletion cascades through Kubernetes' garbage collector) and
the ``sparkglass.io/application`` label.

The control token only ever appears in the Secret; the driver gets it through a
``secretKeyRef``, never a literal, and the ConfigMap never holds it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from . import names
from .spark_conf import DriverEnvironment, render_properties, spark_properties
from .specs import SparkApplicationSpec

_MEMORY = re.compile(r"^([0-9]+)([kKmMgGtT])[bB]?$")
_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
#: Spark's default memory overhead: 10% of the heap, at least 384 MiB.
_MIN_OVERHEAD_MIB = 384
_DEFAULT_DRIVER_MEMORY_MIB = 1024


def spec_hash(spec: dict[str, Any]) -> str:
    """A short stable hash of a spec dict (16 hex digits); changes restart the driver."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def memory_mib(text: str | None) -> int | None:
    """MiB in a Spark memory string (``512m``, ``2g``, ``2gb``); None for None.

    Raises ``ValueError`` for other text (the CRD's pattern already rejects it).
    """
    if text is None:
        return None
    m = _MEMORY.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a Spark memory size like 512m or 2g")
    return max(1, int(int(m.group(1)) * _MIB[m.group(2).lower()]))


def owner_reference(app: str, uid: str) -> dict[str, Any]:
    """The owner reference every child gets (controller: only this operator manages it)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.APP_KIND,
        "name": app,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(app: str, namespace: str, uid: str, name: str, role: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            names.LABEL_APP: app,
            names.LABEL_ROLE: role,
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
        },
        "ownerReferences": [owner_reference(app, uid)],
    }


def config_map(
    app: str,
    namespace: str,
    uid: str,
    spec: SparkApplicationSpec,
    *,
    resolved: dict[str, Any],
    env: DriverEnvironment,
) -> dict[str, Any]:
    """ConfigMap ``<app>-sparkglass``: pipeline, plan, sampling settings, spark-defaults.conf."""
    pipeline = spec.pipeline_description(app).to_json_dict()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(app, namespace, uid, names.config_map_name(app), "config"),
        "data": {
            "pipeline.json": json.dumps(pipeline, indent=2, sort_keys=True),
            "plan.json": json.dumps(resolved, indent=2, sort_keys=True),
            "sampling.json": json.dumps(
                spec.sampling.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True
            ),
            "spark-defaults.conf": render_properties(
                spark_properties(spec, app=app, namespace=namespace, env=env)
            ),
        },
    }


def secret(app: str, namespace: str, uid: str, token: str) -> dict[str, Any]:
    """Secret ``<app>-control-token`` with the control endpoint's bearer token (key ``token``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(
            app, namespace, uid, names.secret_name(app), names.ROLE_CONTROL_TOKEN
        ),
        "data": {names.TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def secret_token(secret_body: dict[str, Any]) -> str | None:
    """The token stored in a control-token Secret (``data`` base64, or ``stringData``)."""
    data = secret_body.get("data") or {}
    if names.TOKEN_KEY in data:
        return base64.b64decode(data[names.TOKEN_KEY]).decode()
    string_data = secret_body.get("stringData") or {}
    value = string_data.get(names.TOKEN_KEY)
    return str(value) if value else None


def service(app: str, namespace: str, uid: str, spec: SparkApplicationSpec) -> dict[str, Any]:
    """Headless Service ``<app>-driver`` selecting the driver Pod (RPC, blocks, UI, control)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(app, namespace, uid, names.service_name(app), "driver-service"),
        "spec": {
            "clusterIP": "None",
            # Executors resolve the driver while it starts, before it reports ready.
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_APP: app, names.LABEL_ROLE: names.ROLE_DRIVER},
            "ports": [
                {"name": "driver-rpc", "port": names.DRIVER_PORT, "targetPort": names.DRIVER_PORT},
                {
                    "name": "blockmanager",
                    "port": names.BLOCK_MANAGER_PORT,
                    "targetPort": names.BLOCK_MANAGER_PORT,
                },
                {"name": "spark-ui", "port": names.UI_PORT, "targetPort": names.UI_PORT},
                {
                    "name": "control",
                    "port": spec.sampling.control_port,
                    "targetPort": spec.sampling.control_port,
                },
            ],
        },
    }


def driver_pod(
    app: str,
    namespace: str,
    uid: str,
    spec: SparkApplicationSpec,
    *,
    hash: str,
    attempt: int,
    env: DriverEnvironment,
) -> dict[str, Any]:
    """Driver Pod ``<app>-driver`` running ``spark-submit --deploy-mode client``.

    ``attempt`` (1-based) is recorded as an annotation so a restarted driver is told apart.
    The Pod never restarts itself (``restartPolicy: Never``): re-runs follow the
    application's restartPolicy, with back-off, under the operator's control.
    """
    d = spec.driver
    meta = _metadata(app, namespace, uid, names.driver_pod_name(app), names.ROLE_DRIVER)
    meta["labels"] = {**d.labels, **meta["labels"], "spark-role": "driver"}
    meta["annotations"] = {
        **d.annotations,
        names.ANNOTATION_SPEC_HASH: hash,
        "sparkglass.io/attempt": str(attempt),
    }
    heap = memory_mib(d.memory) or _DEFAULT_DRIVER_MEMORY_MIB
    overhead = memory_mib(d.memory_overhead) or max(_MIN_OVERHEAD_MIB, heap // 10)
    resources: dict[str, Any] = {
        "requests": {"cpu": str(d.cores or 1), "memory": f"{heap + overhead}Mi"},
        "limits": {"memory": f"{heap + overhead}Mi"},
    }
    if d.core_limit:
        resources["limits"]["cpu"] = d.core_limit
    args = [
        "--master",
        env.kubernetes_master,
        "--deploy-mode",
        "client",
        "--properties-file",
        f"{names.CONFIG_DIR}/spark-defaults.conf",
    ]
    if spec.main_class:
        args += ["--class", spec.main_class]
    args += [spec.main_application_file, *spec.arguments]
    container_env: list[dict[str, Any]] = [{"name": e.name, "value": e.value} for e in d.env]
    container_env += [
        {
            "name": names.ENV_CONTROL_TOKEN,
            "valueFrom": {"secretKeyRef": {"name": names.secret_name(app), "key": names.TOKEN_KEY}},
        },
        {"name": names.ENV_CONTROL_PORT, "value": str(spec.sampling.control_port)},
        {"name": names.ENV_PIPELINE_FILE, "value": f"{names.CONFIG_DIR}/pipeline.json"},
        {"name": names.ENV_APPLICATION, "value": app},
        {"name": names.ENV_NAMESPACE, "value": namespace},
        {"name": "SPARK_CONF_DIR", "value": names.CONFIG_DIR},
    ]
    container: dict[str, Any] = {
        "name": "spark-driver",
        "image": d.image or spec.image,
        "command": [env.spark_submit],
        "args": args,
        "env": container_env,
        "ports": [
            {"name": "driver-rpc", "containerPort": names.DRIVER_PORT},
            {"name": "blockmanager", "containerPort": names.BLOCK_MANAGER_PORT},
            {"name": "spark-ui", "containerPort": names.UI_PORT},
            {"name": "control", "containerPort": spec.sampling.control_port},
        ],
        "resources": resources,
        "volumeMounts": [{"name": "sparkglass-config", "mountPath": names.CONFIG_DIR}],
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            {"name": "sparkglass-config", "configMap": {"name": names.config_map_name(app)}}
        ],
    }
    if d.service_account:
        pod_spec["serviceAccountName"] = d.service_account
    if d.node_selector:
        pod_spec["nodeSelector"] = dict(d.node_selector)
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
