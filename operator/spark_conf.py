"""The Spark configuration of a SparkApplication's driver (``spark-defaults.conf``).

The operator translates the spec (spark-operator v1beta2 field names) into Spark properties
for ``spark-submit --deploy-mode client`` against the Kubernetes master, adds the sparkglass
plugin and sampling settings, then applies ``spec.sparkConf`` on top, keeping the keys the
operator owns (:func:`spark_properties`). The file is a ConfigMap anyone who may read
ConfigMaps reads, so the redaction key never goes into it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkglass.runtime.contract.attributes import OVERRIDES_CONF
from sparkglass.runtime.contract.expectations import EXPECTATIONS_CONF, expectations_conf
from sparkglass.runtime.contract.redaction import KEY_CONF, REDACT_CONF

from . import names
from .certificates import CERT_KEY, KEY_KEY
from .pod_customization import EXECUTOR_CONTAINER, EXECUTOR_TEMPLATE_KEY
from .specs import SparkApplicationSpec, operator_owned

#: Spark plugin class of the sparkglass sampling runtime (``runtime/jvm``).
PLUGIN_CLASS = "io.sparkglass.sampling.SamplingPlugin"

#: Properties only the operator sets: where the driver finds the control endpoint's
#: certificate and key (mounted from the Secret the operator owns). A user value could make
#: the driver serve a certificate the operator does not pin, or no TLS at all.
CONTROL_TLS_CERT_FILE = "spark.sparkglass.control.tls.cert-file"
CONTROL_TLS_KEY_FILE = "spark.sparkglass.control.tls.key-file"
#: Spark's RPC authentication, always on (see ``specs.OPERATOR_OWNED_CONF_KEYS``).
AUTHENTICATE = "spark.authenticate"


@dataclass(frozen=True)
class DriverEnvironment:
    """Cluster-level facts the operator knows and the spec does not.

    ``kubernetes_master`` is Spark's master URL for the cluster API server;
    ``runtime_jar`` the sparkglass plugin jar inside the image (``sparkglass jar build``).
    """

    kubernetes_master: str = "k8s://https://kubernetes.default.svc"
    runtime_jar: str = "local:///opt/sparkglass/sparkglass-tap.jar"
    spark_submit: str = "spark-submit"


def spark_properties(
    spec: SparkApplicationSpec, *, app: str, namespace: str, env: DriverEnvironment
) -> dict[str, str]:
    """The driver's Spark properties, ordered (operator-set first, user overrides last).

    ``spec.sparkConf`` goes on top, so users can override anything but the plugin and jar
    lists, which are merged rather than replaced, and the keys the operator owns
    (``specs.operator_owned``: master, deploy mode, namespace, driver Pod name, host and
    ports, executor Pod template, the control endpoint's address, token and TLS files, the
    ServiceAccounts and ``spark.authenticate``), which the CRD and the spec's validation
    refuse and which are set again after the user's properties anyway. The control
    endpoint's tuning knobs (``specs.USER_CONTROL_CONF_KEYS``: ``max-body-bytes``,
    ``connection-timeout``, ``max-connections``, ``max-connections-per-address``) are the
    user's: the operator sets none of them, so the driver's defaults apply unless
    ``sparkConf`` names them. ``spec.hadoopConf`` entries become ``spark.hadoop.<key>``,
    before ``spec.sparkConf``.

    The redaction key (``spark.sparkglass.sampling.redact.secret``) is never a property here:
    this file is a ConfigMap anyone who may read ConfigMaps reads. The driver Pod gets it
    from the Secret on ``spark-submit``'s command line (``children.driver_pod``); a
    ``sparkConf`` entry for it is dropped.
    """
    conf: dict[str, str] = {
        "spark.master": env.kubernetes_master,
        "spark.submit.deployMode": "client",
        "spark.app.name": app,
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.container.image": spec.executor.image or spec.image,
        "spark.kubernetes.driver.pod.name": names.driver_pod_name(app),
        "spark.kubernetes.executor.podNamePrefix": app,
        # Client mode: executors dial the driver through its headless Service.
        "spark.driver.host": f"{names.service_name(app)}.{namespace}.svc",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(names.DRIVER_PORT),
        "spark.driver.blockManager.port": str(names.BLOCK_MANAGER_PORT),
        "spark.ui.port": str(names.UI_PORT),
        f"spark.kubernetes.executor.label.{names.LABEL_APP}": app,
        # Restricted security defaults and spec.executor's Pod settings (pod_customization).
        "spark.kubernetes.executor.podTemplateFile": f"{names.CONFIG_DIR}/{EXECUTOR_TEMPLATE_KEY}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
    }
    if spec.image_pull_policy:
        conf["spark.kubernetes.container.image.pullPolicy"] = spec.image_pull_policy
    if spec.image_pull_secrets:
        conf["spark.kubernetes.container.image.pullSecrets"] = ",".join(spec.image_pull_secrets)
    d, x = spec.driver, spec.executor
    _put(conf, "spark.driver.cores", d.cores)
    _put(conf, "spark.driver.memory", d.memory)
    _put(conf, "spark.driver.memoryOverhead", d.memory_overhead)
    _put(conf, "spark.executor.instances", x.instances)
    _put(conf, "spark.executor.cores", x.cores)
    _put(conf, "spark.executor.memory", x.memory)
    _put(conf, "spark.executor.memoryOverhead", x.memory_overhead)
    _put(conf, "spark.kubernetes.executor.limit.cores", x.core_limit)
    _put(conf, "spark.kubernetes.authenticate.executor.serviceAccountName", x.service_account)
    for k, v in x.labels.items():
        conf[f"spark.kubernetes.executor.label.{k}"] = v
    for k, v in x.annotations.items():
        conf[f"spark.kubernetes.executor.annotation.{k}"] = v
    for k, v in x.node_selector.items():
        conf[f"spark.kubernetes.executor.node.selector.{k}"] = v
    for e in x.env:
        conf[f"spark.executorEnv.{e.name}"] = e.value
    da = spec.dynamic_allocation
    if da.enabled:
        conf["spark.dynamicAllocation.enabled"] = "true"
        # No external shuffle service on Kubernetes: shuffle tracking keeps executors alive.
        conf["spark.dynamicAllocation.shuffleTracking.enabled"] = "true"
        _put(conf, "spark.dynamicAllocation.initialExecutors", da.initial_executors)
        _put(conf, "spark.dynamicAllocation.minExecutors", da.min_executors)
        _put(conf, "spark.dynamicAllocation.maxExecutors", da.max_executors)
        if da.shuffle_tracking_timeout is not None:
            conf["spark.dynamicAllocation.shuffleTracking.timeout"] = (
                f"{da.shuffle_tracking_timeout}ms"
            )
    deps = spec.deps
    _put_list(conf, "spark.files", deps.files)
    _put_list(conf, "spark.submit.pyFiles", deps.py_files)
    _put_list(conf, "spark.jars.packages", deps.packages)
    _put_list(conf, "spark.jars.repositories", deps.repositories)
    _put_list(conf, "spark.jars.excludes", deps.exclude_packages)
    s = spec.sampling
    conf.update(
        {
            "spark.sparkglass.sampling.enabled": "true" if s.enabled else "false",
            "spark.sparkglass.sampling.max-sample-rate": str(s.max_sample_rate),
            "spark.sparkglass.sampling.max-record-length": str(s.max_record_length),
            "spark.sparkglass.sampling.sampling-window": s.sampling_window,
            "spark.sparkglass.sampling.refresh-interval": s.refresh_interval,
            "spark.sparkglass.sampling.timeout": s.timeout,
            "spark.sparkglass.control.port": str(s.control_port),
            # The operator dials the Pod IP; the endpoint binds to loopback by default.
            "spark.sparkglass.control.host": "0.0.0.0",
            "spark.sparkglass.control.enabled": "true",
        }
    )
    overrides = [
        {
            "name": v.name,
            "attributes": v.attributes.model_dump(mode="json", by_alias=True, exclude_unset=True),
        }
        for v in spec.pipeline.vertices
        if v.attributes.model_fields_set
    ]
    if overrides:
        # Only the attributes the spec sets: unset ones keep the job's decorators.
        conf[OVERRIDES_CONF] = json.dumps(overrides, separators=(",", ":"), sort_keys=True)
    expectations = [
        (v.name, v.expectations) for v in spec.pipeline.vertices if v.expectations is not None
    ]
    if expectations:
        # Added to (or replacing by name) the job's own expect* decorators.
        conf[EXPECTATIONS_CONF] = expectations_conf(expectations)
    for k, v in spec.hadoop_conf.items():
        conf[f"spark.hadoop.{k}"] = v
    user = dict(spec.spark_conf)
    # The application's key comes from its Secret (children.driver_pod); a value here would
    # be a key in plain text in the ConfigMap, and the command line replaces it anyway.
    user.pop(KEY_CONF, None)
    # Merged, not replaced: the plugin and its jar must stay whatever the user adds.
    plugins = _split(user.pop("spark.plugins", ""))
    jars = [*deps.jars, *_split(user.pop("spark.jars", ""))]
    conf["spark.plugins"] = ",".join(_unique([*plugins, PLUGIN_CLASS]))
    conf["spark.jars"] = ",".join(_unique([*jars, env.runtime_jar]))
    # Dropped, not applied, should an owned key get here (a CRD without the rules, a spec
    # stored before a key became owned): the spec's validation refuses them first.
    conf.update({k: v for k, v in user.items() if not operator_owned(k)})
    if s.redact:
        # After sparkConf: spec.sampling.redact is the application's rule, and a sparkConf
        # entry cannot replace it with a weaker one.
        conf[REDACT_CONF] = json.dumps(
            [r.to_json_dict() for r in s.redact], separators=(",", ":"), sort_keys=True
        )
    # Always, after sparkConf (which may not set it): the driver's RPC and block manager
    # accept only peers holding this application's secret. With a k8s:// master Spark makes
    # the secret in the driver (SecurityManager.initializeAuth) and puts it into each
    # executor Pod it creates (BasicExecutorFeatureStep), or reads it from the files named by
    # spark.authenticate.secret.{driver,executor}.file when the user mounts a Secret there.
    conf[AUTHENTICATE] = "true"
    conf[CONTROL_TLS_CERT_FILE] = f"{names.CONTROL_TLS_DIR}/{CERT_KEY}"
    conf[CONTROL_TLS_KEY_FILE] = f"{names.CONTROL_TLS_DIR}/{KEY_KEY}"
    return conf


def render_properties(conf: dict[str, str]) -> str:
    """``conf`` as a Java properties file (``key=value`` lines, escaped)."""
    return "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n" for k, v in conf.items())


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch in "=:#!" and (key or i == 0):
            out.append("\\" + ch)
        elif ch == " " and (key or i == 0):
            out.append("\\ ")
        else:
            out.append(ch)
    return "".join(out)


def _put(conf: dict[str, str], key: str, value: object) -> None:
    if value is not None and value != "":
        conf[key] = str(value)


def _put_list(conf: dict[str, str], key: str, values: list[str]) -> None:
    if values:
        conf[key] = ",".join(values)


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
