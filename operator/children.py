"""Manifests of a SparkApplication's child objects (see ``names`` for the table).

Pure functions from the application (name, namespace, uid, parsed spec) to plain dicts, so
tests can compare them and the reconcile loop stays small. Every child carries an owner
reference to the application (deletion cascades through Kubernetes' garbage collector) and
the ``sparkglass.io/application`` label.

The control token only ever appears in the Secret; the driver gets it through a
``secretKeyRef``, never a literal, and the ConfigMap never holds it. The same Secret holds
the control endpoint's TLS certificate and key (``certificates``), mounted read-only into
the driver Pod (mode 0440, group ``names.CONTROL_TLS_FS_GROUP``), and the key of the ``hash``
redaction (``names.REDACTION_KEY_KEY``, 32 random bytes as hex, generated with the Secret and
kept like the token): the driver gets it as the token, an environment variable from a
``secretKeyRef``, and its ``spark-submit`` gets ``--conf
spark.sparkglass.sampling.redact.secret=$(SPARKGLASS_REDACTION_KEY)``, which the kubelet
expands when the container starts. So the key is in no object the API serves but the Secret
(the Pod spec holds the reference), and it reaches the executors as the driver's Spark conf,
over Spark's authenticated RPC, under a name Spark's UI and event log redact.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from typing import Any

import yaml

from sparkglass.runtime.contract.redaction import KEY_BYTES, KEY_CONF

from . import names
from . import pod_customization as custom
from .certificates import CERT_KEY, KEY_KEY, ControlCertificate
from .spark_conf import DriverEnvironment, render_properties, spark_properties
from .specs import SparkApplicationSpec

_MEMORY = re.compile(r"^([0-9]+)([kKmMgGtT])[bB]?$")
_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
#: Spark's default memory overhead: 10% of the heap, at least 384 MiB.
_MIN_OVERHEAD_MIB = 384
_DEFAULT_DRIVER_MEMORY_MIB = 1024


#: Top-level spec fields the running driver does not depend on: the operator applies a
#: change to them in place (a new TTL, restart policy or start timeout must not kill a
#: streaming job). ``suspend`` is acted on by the reconcile loop itself (it deletes the
#: driver, or starts one), so toggling it is no spec change. Every other field shapes the
#: driver Pod or its Spark conf.
IN_PLACE_FIELDS = frozenset(
    {"restartPolicy", "timeToLiveSeconds", "startTimeoutSeconds", "suspend"}
)


def _hash(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def spec_hash(spec: dict[str, Any]) -> str:
    """A short stable hash (16 hex digits) of what in ``spec`` the driver depends on: all
    fields but :data:`IN_PLACE_FIELDS`. A change of it replaces the driver."""
    return _hash({k: v for k, v in spec.items() if k not in IN_PLACE_FIELDS})


def runs_spec(stored_hash: str | None, spec: dict[str, Any]) -> bool:
    """Whether a driver started with ``stored_hash`` (Pod annotation or ``status.specHash``)
    runs ``spec``. Also accepts the hash of the whole spec, which operators before in-place
    fields wrote, so that upgrading the operator restarts no running driver."""
    if not stored_hash:
        return False
    return stored_hash in (spec_hash(spec), _hash(spec))


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


#: ``sparkglass.io/role`` of the ConfigMap and of the headless Service (the Secret's and the
#: driver Pod's are in ``names``). The operator watches these two kinds with a server-side
#: selector on the role and ``app.kubernetes.io/managed-by`` (:data:`WATCH_SELECTORS`).
ROLE_CONFIG = "config"
ROLE_SERVICE = "driver-service"
#: The label selector of the operator's ConfigMap and Service watches, by plural: its own
#: children only, not every ConfigMap and Service of a namespace. Secrets are not watched
#: (a Role that may list Secrets may read every Secret of the namespace).
WATCH_SELECTORS = {
    plural: f"{names.LABEL_ROLE}={role},{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
    for plural, role in (("configmaps", ROLE_CONFIG), ("services", ROLE_SERVICE))
}


#: What the API server lets a ConfigMap's values hold together (core/v1 ``MaxSecretSize``).
MAX_CONFIG_MAP_BYTES = 1024 * 1024


class ConfigTooLarge(ValueError):
    """The spec makes a ConfigMap larger than the API server stores; the message says which
    part and what to shorten."""


def config_map(
    app: str,
    namespace: str,
    uid: str,
    spec: SparkApplicationSpec,
    *,
    resolved: dict[str, Any],
    env: DriverEnvironment,
) -> dict[str, Any]:
    """ConfigMap ``<app>-sparkglass``: pipeline, plan, sampling settings, spark-defaults.conf
    and the executor Pod template (``pod_customization.executor_pod_template``)."""
    pipeline = spec.pipeline_description(app).to_json_dict()
    data = {
        "pipeline.json": json.dumps(pipeline, indent=2, sort_keys=True),
        "plan.json": json.dumps(resolved, indent=2, sort_keys=True),
        "sampling.json": json.dumps(
            spec.sampling.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True
        ),
        "spark-defaults.conf": render_properties(
            spark_properties(spec, app=app, namespace=namespace, env=env)
        ),
        custom.EXECUTOR_TEMPLATE_KEY: yaml.safe_dump(
            custom.executor_pod_template(spec), sort_keys=False
        ),
    }
    size = sum(len(v.encode()) for v in data.values())
    if size > MAX_CONFIG_MAP_BYTES:
        largest = max(data, key=lambda k: len(data[k].encode()))
        raise ConfigTooLarge(
            f"spec: the application's ConfigMap {names.config_map_name(app)} would hold {size} "
            f"bytes ({largest}: {len(data[largest].encode())}), and a ConfigMap holds at most "
            f"{MAX_CONFIG_MAP_BYTES}: shorten spec.sparkConf and spec.hadoopConf"
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(app, namespace, uid, names.config_map_name(app), ROLE_CONFIG),
        "data": data,
    }


def secret(
    app: str,
    namespace: str,
    uid: str,
    token: str,
    certificate: ControlCertificate,
    *,
    redaction_key: str | None = None,
) -> dict[str, Any]:
    """Secret ``<app>-control-token``: the control endpoint's bearer token (key ``token``),
    its TLS certificate and key (keys ``tls.crt``, ``tls.key``) and the redaction key (key
    ``redaction-key``; ``redaction_key`` hex text, else :func:`new_redaction_key`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(
            app, namespace, uid, names.secret_name(app), names.ROLE_CONTROL_TOKEN
        ),
        "data": {
            names.TOKEN_KEY: base64.b64encode(token.encode()).decode(),
            **certificate_data(certificate),
            **redaction_key_data(redaction_key or new_redaction_key()),
        },
    }


def new_redaction_key() -> str:
    """A new redaction key: ``KEY_BYTES`` (32) random bytes as 64 lowercase hex digits."""
    return secrets.token_hex(KEY_BYTES)


def redaction_key_data(key: str) -> dict[str, str]:
    """The ``data`` entry (base64) of the redaction key ``key`` (hex text) in the Secret."""
    return {names.REDACTION_KEY_KEY: base64.b64encode(key.encode()).decode()}


def missing_redaction_key(secret_body: dict[str, Any]) -> dict[str, str] | None:
    """For a control Secret without a usable redaction key (made before the Secret held
    one): the ``data`` patch adding a new one; ``None`` when it has one, which is kept (a
    new key would stop hashes from linking to the ones sampled before). Apply it only with
    no driver running: a running driver keeps the key it started with."""
    if _is_key(secret_value(secret_body, names.REDACTION_KEY_KEY)):
        return None
    return redaction_key_data(new_redaction_key())


def _is_key(text: str | None) -> bool:
    if text is None or len(text.strip()) < 2 * KEY_BYTES or len(text.strip()) % 2:
        return False
    try:
        bytes.fromhex(text.strip())
    except ValueError:
        return False
    return True


def certificate_data(certificate: ControlCertificate) -> dict[str, str]:
    """The ``data`` entries (base64) of ``certificate`` in the control Secret."""
    return {k: base64.b64encode(v.encode()).decode() for k, v in certificate.secret_data().items()}


def secret_value(secret_body: dict[str, Any], key: str) -> str | None:
    """The text stored under ``key`` in a Secret (``data`` base64, or ``stringData``);
    None when absent, empty or not base64 of UTF-8."""
    data = secret_body.get("data") or {}
    if data.get(key):
        try:
            return base64.b64decode(data[key], validate=True).decode()
        except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
            return None
    value = (secret_body.get("stringData") or {}).get(key)
    return str(value) if value else None


def secret_token(secret_body: dict[str, Any]) -> str | None:
    """The token stored in a control-token Secret (``data`` base64, or ``stringData``)."""
    return secret_value(secret_body, names.TOKEN_KEY)


def secret_tls_data(secret_body: dict[str, Any]) -> dict[str, str | None]:
    """The certificate entries of a control Secret, decoded: ``{"tls.crt": ..., "tls.key": ...}``
    (None for a missing one)."""
    return {k: secret_value(secret_body, k) for k in (CERT_KEY, KEY_KEY)}


def service(app: str, namespace: str, uid: str, spec: SparkApplicationSpec) -> dict[str, Any]:
    """Headless Service ``<app>-driver`` selecting the driver Pod (RPC, blocks, UI, control),
    with ``spec.sparkUIOptions``' labels (under the operator's) and annotations."""
    meta = _metadata(app, namespace, uid, names.service_name(app), ROLE_SERVICE)
    ui = spec.spark_ui_options
    meta["labels"] = {**ui.service_labels, **meta["labels"]}  # ours win
    if ui.service_annotations:
        meta["annotations"] = dict(ui.service_annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
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


def service_patch(existing: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that brings the Service ``existing`` in line with ``desired`` (its
    ports; the labels and annotations ``desired`` sets, added or changed only: others may
    label and annotate it too); empty when it is."""
    patch: dict[str, Any] = {}
    if (existing.get("spec") or {}).get("ports") != desired["spec"]["ports"]:
        patch["spec"] = {"ports": desired["spec"]["ports"]}
    for key in ("labels", "annotations"):
        have = (existing.get("metadata") or {}).get(key) or {}
        want = desired["metadata"].get(key) or {}
        if any(have.get(k) != v for k, v in want.items()):
            patch.setdefault("metadata", {})[key] = want
    return patch


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
    application's restartPolicy, with back-off, under the operator's control. The user's
    ``spec.driver`` Pod settings come after the operator's own parts (``pod_customization``
    refused any that collide) and under the restricted security defaults.
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
        # The kubelet expands the reference from the container's environment (the Secret):
        # the key is in neither the Pod spec nor the ConfigMap, and a command-line conf wins
        # over the properties file.
        "--conf",
        f"{KEY_CONF}=$({names.ENV_REDACTION_KEY})",
    ]
    if spec.main_class:
        args += ["--class", spec.main_class]
    args += [spec.main_application_file, *spec.arguments]
    container_env: list[dict[str, Any]] = [e.manifest() for e in d.env]
    container_env += [
        {
            "name": names.ENV_CONTROL_TOKEN,
            "valueFrom": {"secretKeyRef": {"name": names.secret_name(app), "key": names.TOKEN_KEY}},
        },
        {
            # Optional: a Secret made before it held a key still starts the driver, which
            # then refuses hash rules naming the missing key instead of failing to start.
            "name": names.ENV_REDACTION_KEY,
            "valueFrom": {
                "secretKeyRef": {
                    "name": names.secret_name(app),
                    "key": names.REDACTION_KEY_KEY,
                    "optional": True,
                }
            },
        },
        {"name": names.ENV_CONTROL_PORT, "value": str(spec.sampling.control_port)},
        {"name": names.ENV_PIPELINE_FILE, "value": f"{names.CONFIG_DIR}/pipeline.json"},
        {"name": names.ENV_APPLICATION, "value": app},
        {"name": names.ENV_NAMESPACE, "value": namespace},
        {"name": "SPARK_CONF_DIR", "value": names.CONFIG_DIR},
    ]
    container: dict[str, Any] = {
        "name": custom.DRIVER_CONTAINER,
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
        "securityContext": custom.container_security_context(d.security_context),
        "volumeMounts": [
            {"name": custom.CONFIG_VOLUME, "mountPath": names.CONFIG_DIR},
            {
                "name": names.CONTROL_TLS_VOLUME,
                "mountPath": names.CONTROL_TLS_DIR,
                "readOnly": True,
            },
            *d.volume_mounts,
        ],
    }
    if d.env_from:
        container["envFrom"] = list(d.env_from)
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container, *(custom.extra_container(c) for c in d.sidecars)],
        # fsGroup: the key file's group, which the driver's processes get (module docstring).
        "securityContext": custom.pod_security_context(d, fsGroup=names.CONTROL_TLS_FS_GROUP),
        **custom.scheduling(d),
        "volumes": [
            {"name": custom.CONFIG_VOLUME, "configMap": {"name": names.config_map_name(app)}},
            {
                "name": names.CONTROL_TLS_VOLUME,
                "secret": {
                    "secretName": names.secret_name(app),
                    # Only the certificate and key: the token reaches the driver as before.
                    "items": [{"key": k, "path": k} for k in (CERT_KEY, KEY_KEY)],
                    "defaultMode": 0o440,
                },
            },
            *custom.user_volumes(spec, d),
        ],
    }
    if d.init_containers:
        pod_spec["initContainers"] = [custom.extra_container(c) for c in d.init_containers]
    if d.service_account:
        pod_spec["serviceAccountName"] = d.service_account
    if d.node_selector:
        pod_spec["nodeSelector"] = dict(d.node_selector)
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
