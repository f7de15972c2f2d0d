"""The ``SparkApplication`` custom resource: a PySpark job the operator runs, with its pipeline.

The spec uses the field names of the Kubeflow spark-operator's ``sparkoperator.k8s.io/v1beta2``
SparkApplication where they overlap, plus ``pipeline`` (the declared vertices and their
attributes) and ``sampling``. The operator runs the driver as a Pod in client mode; executors
are Spark's own. The models parse stored objects (the operator and the admission webhook add
their own checks in :mod:`sparkglass.operator.specs`) and generate
``crds/sparkapplication.yaml`` (``make crds``).

Defaults are the models' own, and the CRD's where it has one: the operator must also work
where the API server did no defaulting (the loopback emulator in tests, or an object written
before a default was added).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from sparkglass.runtime.contract.description import (
    IdempotentAttribute,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
)
from sparkglass.runtime.contract.durations import format_duration_ms
from sparkglass.runtime.contract.expectations import (
    MAX_CONDITION_LENGTH,
    MAX_EXPECTATIONS_PER_VERTEX,
    NAME_PATTERN,
    Expectation,
    ExpectationAction,
)
from sparkglass.runtime.contract.redaction import MAX_RULES, RedactionAction, RedactionRule
from sparkglass.runtime.contract.sampling_settings import RANGES, SamplingSettings
from sparkglass.runtime.control import endpoint

from . import core
from .datasample import GROUP, VERSION
from .fields import (
    DNS1123_LABEL_PATTERN,
    Annotations,
    AsWritten,
    Conditions,
    Duration,
    DurationRange,
    Int32,
    Int64,
    Labels,
    Metadata,
    no_schema_default,
)
from .schema import CustomResource, PrinterColumn, ResourceModel, Rule, Schema, rules

#: Longest application name: the driver Service ``<name>-driver`` is a DNS-1035 label and
#: ``<name>-control-token`` a valid Secret name.
MAX_NAME_LENGTH = 56
DNS1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: Suffix of the Secrets holding applications' control tokens (``<name>-control-token``).
CONTROL_TOKEN_SUFFIX = "-control-token"
#: Most steps of a pipeline.
MAX_VERTICES = 64
#: The driver's ports the operator serves on its Service (name → port): no other port of the
#: driver may take one.
DRIVER_PORTS = {"spark-ui": 4040, "driver": 7078, "block-manager": 7079}


def _free_port(port: int) -> int:
    taken = {p: name for name, p in DRIVER_PORTS.items()}
    if port in taken:
        raise ValueError(f"{port} is the driver's {taken[port]} port; choose another")
    return port
CPU_PATTERN = r"^[0-9]+(\.[0-9]+)?m?$"
MEMORY_PATTERN = r"^[1-9][0-9]*([kKmMgGtT][bB]?)$"

#: A Kubernetes object (``core/v1`` shape: a Volume, VolumeMount, Toleration, Container...)
#: kept as the user wrote it; its CRD schema is the :mod:`.core` model it is annotated with.
KubernetesObject = dict[str, Any]


# ------------------------------------------------------------------------ Spark conf contract

#: ``spec.sparkConf`` keys only the operator sets, in the order the CRD lists them. Each would
#: break the driver: the master and deploy mode make ``spark-submit`` start something else;
#: the namespace, Pod name, host and ports are what the driver's headless Service and the
#: executors rely on; the executor Pod template carries the restricted security defaults and
#: ``spec.executor``'s Pod settings; the control endpoint's address, token and TLS files are
#: what the operator pins; the ServiceAccount properties and Spark's Pod feature steps would
#: go around the operator's allowlist.
_OPERATOR_OWNED_KEYS: Final = (
    "spark.master",
    "spark.submit.deployMode",
    "spark.kubernetes.namespace",
    "spark.kubernetes.driver.pod.name",
    "spark.driver.host",
    "spark.driver.bindAddress",
    "spark.driver.port",
    "spark.driver.blockManager.port",
    "spark.ui.port",
    "spark.kubernetes.executor.podTemplateFile",
    "spark.kubernetes.executor.podTemplateContainerName",
    "spark.kubernetes.executor.label.sparkglass.io/application",
    # The accounts the Pods run as: spec.driver/executor.serviceAccount, checked against the
    # operator's allowlist (pod_privileges), are the only way to choose them.
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.kubernetes.authenticate.executor.serviceAccountName",
    # Spark's RPC authentication: the chart's NetworkPolicy admits every Pod of the namespace
    # labelled as some application's executor to the driver's RPC and block-manager ports, so
    # only the application's own secret keeps another application's executors out. On
    # Kubernetes Spark generates the secret per application and hands it to its executors
    # itself; a fixed spark.authenticate.secret would sit in the ConfigMap that the
    # namespace's view role reads.
    "spark.authenticate",
    "spark.authenticate.secret",
    # Spark on Kubernetes loads these classes (from the user's jar) to rewrite the driver and
    # executor Pods it builds: one could set any ServiceAccount or mount any Secret, around
    # the allowlist and the control-token rule of pod_privileges, which check the spec only.
    # The operator sets neither; no application may.
    "spark.kubernetes.driver.pod.featureSteps",
    "spark.kubernetes.executor.pod.featureSteps",
)
OPERATOR_OWNED_CONF_KEYS = frozenset(_OPERATOR_OWNED_KEYS)
#: The driver's control endpoint's settings (:mod:`sparkglass.runtime.control.endpoint`).
CONTROL_CONF_PREFIX: Final = endpoint.CONF_PREFIX
#: Prefixes of operator-owned keys: the control endpoint (port, host, token, TLS files)...
OPERATOR_OWNED_CONF_PREFIXES = (CONTROL_CONF_PREFIX,)
#: ...except its tuning knobs, which change no address or credential (runtime ``endpoint``).
_USER_CONTROL_KNOBS: Final = (
    "max-body-bytes",
    "connection-timeout",
    "max-connections",
    "max-connections-per-address",
)
_USER_CONTROL_KEYS: Final = tuple(CONTROL_CONF_PREFIX + k for k in _USER_CONTROL_KNOBS)
USER_CONTROL_CONF_KEYS = frozenset(_USER_CONTROL_KEYS)
_PER_ADDRESS_KEY: Final = CONTROL_CONF_PREFIX + "max-connections-per-address"


def operator_owned(key: str) -> bool:
    """Whether the operator alone sets Spark property ``key`` (see the constants above)."""
    if key in OPERATOR_OWNED_CONF_KEYS:
        return True
    return key.startswith(OPERATOR_OWNED_CONF_PREFIXES) and key not in USER_CONTROL_CONF_KEYS


def _user_spark_conf(value: dict[str, str]) -> dict[str, str]:
    owned = sorted(k for k in value if operator_owned(k))
    if owned:
        raise ValueError(
            f"sparkConf: {', '.join(owned)} is set by the operator and cannot be overridden"
        )
    return value


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _prose(items: tuple[str, ...]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1]


_NO_OPERATOR_KEY = Rule(
    f"!{_cel_list(_OPERATOR_OWNED_KEYS)}.exists(k, k in self)",
    f"{_prose(_OPERATOR_OWNED_KEYS)} are set by the operator (choose the accounts with "
    "driver/executor serviceAccount; RPC authentication is always on, with a secret Spark "
    "makes per application; Pod feature steps would rewrite the Pods around the operator's "
    "checks)",
)
_SPARK_ROLES = ("spark.kubernetes.driver.", "spark.kubernetes.executor.")


def _key_starts(suffix: str) -> str:
    return "(" + " || ".join(f"k.startsWith('{role}{suffix}')" for role in _SPARK_ROLES) + ")"


# startsWith, endsWith and contains, not matches: a regex over every key and value priced
# past the API server's per-call cost limit at 512 entries of 4096 characters. A secretKeyRef
# value is NAME:KEY and a Secret key has no ':', so NAME ends with the suffix exactly when the
# value has no ':' and ends with it, or holds it followed by ':'.
_NO_CONTROL_TOKEN_SECRET = Rule(
    f"self.all(k, !({_key_starts('secrets.')} && k.endsWith('{CONTROL_TOKEN_SUFFIX}'))"
    f" && !({_key_starts('secretKeyRef.')}"
    f" && (self[k].endsWith('{CONTROL_TOKEN_SUFFIX}') && !self[k].contains(':')"
    f" || self[k].contains('{CONTROL_TOKEN_SUFFIX}:'))))",
    "spark.kubernetes.driver/executor.secrets.NAME and .secretKeyRef.VAR=NAME:KEY may not "
    f"name a control-token Secret (*{CONTROL_TOKEN_SUFFIX}): the operator creates those for "
    "applications",
)
_NO_CONTROL_KEY = Rule(
    "self.all(k, "
    + " && ".join(f"!k.startsWith('{p}')" for p in OPERATOR_OWNED_CONF_PREFIXES)
    + f" || k in {_cel_list(_USER_CONTROL_KEYS)})",
    f"{CONTROL_CONF_PREFIX}* is set by the operator (the control endpoint's address, token and "
    f"TLS certificate), except {_prose(_USER_CONTROL_KNOBS)}",
)
# At most as many digits as the limit, so that int() in the rule cannot overflow.
_PER_ADDRESS_DIGITS = f"^[0-9]{{1,{len(str(endpoint.MAX_CONNECTIONS_PER_ADDRESS_LIMIT))}}}$"
_PER_ADDRESS_RANGE = Rule(
    f"!('{_PER_ADDRESS_KEY}' in self) || ("
    f"self['{_PER_ADDRESS_KEY}'].matches('{_PER_ADDRESS_DIGITS}')"
    f" && int(self['{_PER_ADDRESS_KEY}']) >= 1"
    f" && int(self['{_PER_ADDRESS_KEY}']) <= {endpoint.MAX_CONNECTIONS_PER_ADDRESS_LIMIT})",
    f"{_PER_ADDRESS_KEY} must be an integer in 1-{endpoint.MAX_CONNECTIONS_PER_ADDRESS_LIMIT} "
    "(connections one peer address may hold on the driver's control endpoint; default half "
    "of max-connections)",
)


# ------------------------------------------------------------------------------------ helpers


@dataclass(frozen=True)
class _CheckedAs:
    """An annotation for a field whose type is a runtime model (the planner's, the driver's):
    the CRD's schema comes from ``model``, a subclass of it that documents and bounds it as
    the CRD does. On parse the value is checked against ``model`` and then parsed by the
    field's own type, so the readers keep the runtime's class (its equality, its dumps)."""

    model: type[BaseModel]

    def _check(self, value: Any) -> Any:
        if isinstance(value, dict):
            self.model.model_validate(value)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


def _duration_text(ms: int) -> str:
    # The largest exact unit: the CRD's rules and messages read 24h, not 86400s.
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _driver_range(name: str, field: str) -> DurationRange:
    """The driver's range of setting ``name`` (:data:`RANGES`) as a CRD rule on ``field``; the
    driver checks it again when it starts, naming its conf key."""
    low, high = RANGES[name].low, RANGES[name].high
    return DurationRange(_duration_text(low), _duration_text(high), field, on_parse=False)


_DRIVER_DEFAULTS: Final = SamplingSettings()


# ---------------------------------------------------------------------------- Pod settings

_Cores = Annotated[Int32, Field(ge=1, le=256)]
_CpuLimit = Annotated[str, Field(max_length=32), Schema(pattern=CPU_PATTERN)]
_Memory = Annotated[str, Field(max_length=32), Schema(pattern=MEMORY_PATTERN)]
_Image = Annotated[str, Field(max_length=1024)]
_Name = Annotated[str, Field(max_length=253)]
_NodeSelector = Annotated[
    dict[str, Annotated[str, Schema(description="A node label value.")]], Field(max_length=32)
]
_EnvFrom = Annotated[
    list[Annotated[KubernetesObject, AsWritten(core.EnvFromSource)]], Field(max_length=32)
]
_VolumeMounts = Annotated[
    list[Annotated[KubernetesObject, AsWritten(core.VolumeMount)]], Field(max_length=64)
]
_Tolerations = Annotated[
    list[Annotated[KubernetesObject, AsWritten(core.Toleration)]], Field(max_length=32)
]
_Affinity = Annotated[KubernetesObject, AsWritten(core.Affinity)]
_PodSecurityContext = Annotated[KubernetesObject, AsWritten(core.PodSecurityContext)]
_SecurityContext = Annotated[KubernetesObject, AsWritten(core.SecurityContext)]
_CONTAINER = " ".join((core.Container.__doc__ or "").split())
_InitContainers = Annotated[
    list[
        Annotated[
            KubernetesObject,
            AsWritten(core.Container),
            Schema(description=f"One init container. {_CONTAINER}"),
        ]
    ],
    Field(max_length=16),
]
_Sidecars = Annotated[
    list[
        Annotated[
            KubernetesObject,
            AsWritten(core.Container),
            Schema(description=f"One sidecar. {_CONTAINER}"),
        ]
    ],
    Field(max_length=16),
]


class EnvVar(ResourceModel):
    """One environment variable."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule("!has(self.value) || !has(self.valueFrom)", "set value or valueFrom, not both")
        )
    }

    name: Annotated[str, Field(min_length=1, max_length=256)]
    """Variable name."""
    value: str = Field(default="", json_schema_extra=no_schema_default)
    """Variable value."""
    value_from: Annotated[KubernetesObject, AsWritten(core.EnvVarSource)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: Any) -> Any:
        # Before the fields, so that a value next to an incomplete valueFrom is refused for
        # what the user meant, not for the valueFrom's missing key.
        if isinstance(data, dict):
            source = data.get("valueFrom", data.get("value_from"))
            if data.get("value") and source is not None:
                raise ValueError(f"env {data.get('name')}: set value or valueFrom, not both")
        return data

    def manifest(self) -> dict[str, Any]:
        """The container ``env`` entry."""
        if self.value_from is not None:
            return {"name": self.name, "valueFrom": self.value_from}
        return {"name": self.name, "value": self.value}


_Env = Annotated[list[EnvVar], Field(max_length=128)]


class PodSettings(ResourceModel):
    """``spec.driver`` / ``spec.executor``: the Kubeflow spark-operator v1beta2 SparkPodSpec
    subset, with DriverSpec/ExecutorSpec's priorityClassName. The Kubernetes objects are
    ``core/v1`` shapes, merged by the operator under its own."""

    # DriverSettings and ExecutorSettings redeclare the fields whose description names their
    # Pods, so that ``kubectl explain`` says which Pod a field changes.
    cores: _Cores | None = None
    core_limit: _CpuLimit | None = None
    memory: _Memory | None = None
    memory_overhead: _Memory | None = None
    image: _Image | None = None
    labels: Labels = Field(default_factory=dict)
    annotations: Annotations = Field(default_factory=dict)
    env: _Env = Field(default_factory=list)
    env_from: _EnvFrom = Field(default_factory=list)
    volume_mounts: _VolumeMounts = Field(default_factory=list)
    tolerations: _Tolerations = Field(default_factory=list)
    affinity: _Affinity | None = None
    pod_security_context: _PodSecurityContext | None = None
    security_context: _SecurityContext | None = None
    init_containers: _InitContainers = Field(default_factory=list)
    sidecars: _Sidecars = Field(default_factory=list)
    priority_class_name: _Name | None = None
    scheduler_name: _Name | None = None
    service_account: _Name | None = None
    node_selector: _NodeSelector = Field(default_factory=dict)


class DriverSettings(PodSettings):
    """The driver Pod."""

    cores: _Cores | None = None
    """CPU cores of the driver (spark.driver.cores; the Pod's CPU request)."""
    core_limit: _CpuLimit | None = None
    """CPU limit of the driver container, e.g. 1200m."""
    memory: _Memory | None = None
    """Driver heap (spark.driver.memory), e.g. 2g or 512m."""
    memory_overhead: _Memory | None = None
    """Non-heap memory added to the Pod's memory request, e.g. 512m. Default: 10% of memory,
    at least 384m."""
    image: _Image | None = None
    """Image of the driver container, overriding spec.image."""
    labels: Labels = Field(default_factory=dict)
    """Labels added to the driver Pod."""
    annotations: Annotations = Field(default_factory=dict)
    """Annotations added to the driver Pod."""
    env: _Env = Field(default_factory=list)
    """Environment variables of the driver container."""
    env_from: _EnvFrom = Field(default_factory=list)
    """Sources of environment variables of the driver container (ConfigMaps, Secrets)."""
    volume_mounts: _VolumeMounts = Field(default_factory=list)
    """Volume mounts of the driver container; each names a volume of spec.volumes."""
    tolerations: _Tolerations = Field(default_factory=list)
    """Tolerations of the driver Pods."""
    init_containers: _InitContainers = Field(default_factory=list)
    """Init containers of the driver Pods."""
    sidecars: _Sidecars = Field(default_factory=list)
    """Containers run next to the driver container. The driver Pod ends when all its
    containers have: a sidecar must exit with the driver, or be a native sidecar instead (an
    initContainers entry with restartPolicy Always, Kubernetes 1.29+), which Kubernetes stops
    once the driver ended."""
    priority_class_name: _Name | None = None
    """PriorityClass of the driver Pods."""
    scheduler_name: _Name | None = None
    """Scheduler of the driver Pods (default: the cluster's)."""
    service_account: _Name | None = None
    """Service account of the driver Pod; it must be allowed to create executor Pods and their
    Services in this namespace. Unset or default, or one of the operator's allowed accounts
    (chart value operator.allowedServiceAccounts, by default the chart's spark-driver); any
    other is refused (state SUBMISSION_FAILED naming the allowed ones)."""
    node_selector: _NodeSelector = Field(default_factory=dict)
    """Node labels the driver Pod must run on."""


class ExecutorSettings(PodSettings):
    """The executors (created by Spark itself from the driver)."""

    instances: Annotated[Int32, Field(ge=0, le=10000)] | None = None
    """Number of executors (spark.executor.instances)."""
    cores: _Cores | None = None
    """CPU cores per executor (spark.executor.cores)."""
    core_limit: _CpuLimit | None = None
    """CPU limit per executor container, e.g. 1200m."""
    memory: _Memory | None = None
    """Executor heap (spark.executor.memory), e.g. 4g."""
    memory_overhead: _Memory | None = None
    """Non-heap memory per executor (spark.executor.memoryOverhead)."""
    image: _Image | None = None
    """Image of the executor containers, overriding spec.image."""
    labels: Labels = Field(default_factory=dict)
    """Labels added to executor Pods."""
    annotations: Annotations = Field(default_factory=dict)
    """Annotations added to executor Pods."""
    env: _Env = Field(default_factory=list)
    """Environment variables of the executors (spark.executorEnv.*)."""
    env_from: _EnvFrom = Field(default_factory=list)
    """Sources of environment variables of the executor container (ConfigMaps, Secrets)."""
    volume_mounts: _VolumeMounts = Field(default_factory=list)
    """Volume mounts of the executor container; each names a volume of spec.volumes."""
    tolerations: _Tolerations = Field(default_factory=list)
    """Tolerations of the executor Pods."""
    init_containers: _InitContainers = Field(default_factory=list)
    """Init containers of the executor Pods."""
    sidecars: _Sidecars = Field(default_factory=list)
    """Containers run next to the executor container."""
    priority_class_name: _Name | None = None
    """PriorityClass of the executor Pods."""
    scheduler_name: _Name | None = None
    """Scheduler of the executor Pods (default: the cluster's)."""
    service_account: _Name | None = None
    """Service account of the executor Pods: unset or default, or one of the operator's
    allowed accounts (as for the driver); any other is refused."""
    node_selector: _NodeSelector = Field(default_factory=dict)
    """Node labels the executor Pods must run on."""


# ------------------------------------------------------------------------- the other parts


class SparkUIOptions(ResourceModel):
    """The Spark UI's Service. The UI is served by the driver's headless Service <name>-driver
    (port spark-ui, 4040); these add to that Service. spark-operator's servicePort,
    serviceType and ingress settings are not supported."""

    service_annotations: Annotations = Field(default_factory=dict)
    """Annotations added to the driver Service."""
    service_labels: Labels = Field(default_factory=dict)
    """Labels added to the driver Service (the operator's own labels win)."""


_Jars = Annotated[
    list[Annotated[str, Field(max_length=2048), Schema(description="A jar URI.")]],
    Field(max_length=128),
]
_Files = Annotated[
    list[Annotated[str, Field(max_length=2048), Schema(description="A file URI.")]],
    Field(max_length=128),
]
_Coordinates = Annotated[
    list[Annotated[str, Field(max_length=512), Schema(description="A Maven coordinate.")]],
    Field(max_length=128),
]
_Repositories = Annotated[
    list[Annotated[str, Field(max_length=2048), Schema(description="A repository URL.")]],
    Field(max_length=16),
]
_Exclusions = Annotated[
    list[Annotated[str, Field(max_length=512), Schema(description="A Maven groupId:artifactId.")]],
    Field(max_length=128),
]


class Dependencies(ResourceModel):
    """Dependencies downloaded or shipped by spark-submit."""

    jars: _Jars = Field(default_factory=list)
    """Jars for the driver and executor classpaths (spark.jars)."""
    files: _Files = Field(default_factory=list)
    """Files placed in each executor's working directory (spark.files)."""
    py_files: _Files = Field(default_factory=list)
    """.py, .zip or .egg files on the Python path (spark.submit.pyFiles)."""
    packages: _Coordinates = Field(default_factory=list)
    """Maven coordinates groupId:artifactId:version (spark.jars.packages)."""
    repositories: _Repositories = Field(default_factory=list)
    """Extra Maven repositories (spark.jars.repositories)."""
    exclude_packages: _Exclusions = Field(default_factory=list)
    """groupId:artifactId to exclude (spark.jars.excludes)."""


class DynamicAllocation(ResourceModel):
    """Spark dynamic allocation of executors (with shuffle tracking, as Kubernetes has no
    external shuffle service)."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule(
                "!has(self.minExecutors) || !has(self.maxExecutors)"
                " || self.minExecutors <= self.maxExecutors",
                "minExecutors must not exceed maxExecutors",
            )
        )
    }

    enabled: bool = Field(default=False, json_schema_extra=no_schema_default)
    """Turn dynamic allocation on."""
    initial_executors: Annotated[Int32, Field(ge=0)] | None = None
    """Executors at start."""
    min_executors: Annotated[Int32, Field(ge=0)] | None = None
    """Fewest executors kept."""
    max_executors: Annotated[Int32, Field(ge=1)] | None = None
    """Most executors allowed."""
    shuffle_tracking_timeout: Annotated[Int64, Field(ge=0)] | None = None
    """Milliseconds an executor holding shuffle data is kept idle."""


class RestartType(StrEnum):
    NEVER = "Never"
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"


_Retries = Annotated[Int32, Field(ge=0, le=100)]
_RetryInterval = Annotated[Int64, Field(ge=1, le=3600)]


class RestartPolicy(ResourceModel):
    """When the operator re-runs the driver. Re-runs back off exponentially: the n-th waits
    interval x 2^(n-1) seconds, at most 10 minutes."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule(
                f"self.type == '{RestartType.ON_FAILURE}' || !has(self.onFailureRetries)",
                f"onFailureRetries applies only with type {RestartType.ON_FAILURE}",
            ),
            Rule(
                f"self.type != '{RestartType.NEVER}' || !has(self.onSubmissionFailureRetries)",
                "onSubmissionFailureRetries applies only with type "
                f"{RestartType.ON_FAILURE} or {RestartType.ALWAYS}",
            ),
        )
    }

    type: RestartType = RestartType.NEVER
    """Never (default), Always (re-run after any end) or OnFailure (re-run after a failure, up
    to the retry counts)."""
    on_failure_retries: _Retries | None = None
    """Re-runs after the driver failed (type OnFailure; default 3)."""
    on_failure_retry_interval: _RetryInterval = Field(
        default=5, json_schema_extra=no_schema_default
    )
    """Seconds before the first re-run after a failure (default 5)."""
    on_submission_failure_retries: _Retries | None = None
    """Re-tries when the driver Pod could not be created (type OnFailure or Always; default
    3)."""
    on_submission_failure_retry_interval: _RetryInterval = Field(
        default=5, json_schema_extra=no_schema_default
    )
    """Seconds before the first re-try after a submission failure (default 5)."""


# -------------------------------------------------------------------------------- pipeline

_DnsLabel = Annotated[
    str, Field(min_length=1, max_length=63), Schema(pattern=DNS1123_LABEL_PATTERN)
]
_ColumnName = Annotated[str, Field(max_length=256), Schema(description="A column name.")]


class _Idempotent(IdempotentAttribute):
    """Each output is the final result for its key at that time; the runtime may emit only the
    latest output per key per micro-batch."""

    model_config = IdempotentAttribute.model_config | ConfigDict(use_attribute_docstrings=True)

    key: Annotated[list[_ColumnName], Field(min_length=1, max_length=32)]
    """Columns that identify a result."""
    order_by: Annotated[str, Field(max_length=256)] | None = None
    """Column whose largest value marks the latest output of a key within a micro-batch (event
    time or sequence number); unset: the last row a task emitted."""


class _Attributes(VertexAttributes):
    """Declared behaviour, overriding the job's decorators attribute by attribute: an
    attribute left unset keeps what the code declares, one set (true or false) wins."""

    model_config = VertexAttributes.model_config | ConfigDict(use_attribute_docstrings=True)

    # No CRD defaults: an attribute the spec leaves unset is the code's to declare.
    no_output_until_end_of_input: bool = Field(default=False, json_schema_extra=no_schema_default)
    """The step emits only after all its input ended; its outgoing edges become blocking.
    Every input must be bounded."""
    idempotent: _Idempotent | None = None
    not_cache_record: bool = Field(default=False, json_schema_extra=no_schema_default)
    """The function keeps no reference to its input or output; adjacent Python steps that both
    declare it are fused."""


class ExpectationSpec(Expectation):
    """One named condition."""

    model_config = Expectation.model_config | ConfigDict(use_attribute_docstrings=True)

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    """A DNS-1123 label naming the expectation."""
    condition: str = Field(min_length=1, max_length=MAX_CONDITION_LENGTH)
    """Spark SQL boolean expression over the step's output columns; a row passes when it is
    true (false and NULL fail)."""
    action: ExpectationAction = ExpectationAction.WARN
    """warn counts failing rows and keeps them, drop drops them, fail fails the micro-batch
    naming the expectation and a row."""


_SOURCE, _VERTEX = VertexKind.SOURCE.value, VertexKind.VERTEX.value


class VertexSpec(ResourceModel):
    """One named step."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule(
                f"self.kind == '{_SOURCE}' ? size(self.inputs) == 0 : size(self.inputs) > 0",
                "a source has no inputs; every other step needs at least one",
            ),
            Rule(
                f"self.kind != '{_SOURCE}' || !has(self.attributes)"
                " || !has(self.attributes.noOutputUntilEndOfInput)"
                " || !self.attributes.noOutputUntilEndOfInput",
                "noOutputUntilEndOfInput applies to vertices with inputs, not sources",
            ),
            Rule(
                f"self.kind == '{_VERTEX}' || !has(self.expectations)"
                " || size(self.expectations) == 0",
                f"expectations apply to vertices (kind {_VERTEX}), not to sources or sinks",
            ),
        )
    }

    name: _DnsLabel
    """Step name: a DNS-1123 label (it appears in REST URLs and labels), matching the name the
    job gives the step."""
    kind: VertexKind = VertexKind.VERTEX
    """source (reads data), vertex (transforms) or sink (writes)."""
    inputs: Annotated[
        list[Annotated[str, Field(max_length=63), Schema(description="A step name.")]],
        Field(max_length=16),
        Schema(default=[]),
    ] = Field(default_factory=list)
    """Names of the steps this one reads (empty for a source)."""
    bounded: bool = True
    """For a source: true when its data ends (a batch read), false for a stream. Ignored on
    other steps (derived from their inputs). Needed to check noOutputUntilEndOfInput, which
    requires bounded inputs."""
    python: bool = False
    """True when the step runs Python code on the executors (a pandas or Arrow function);
    needed to fuse notCacheRecord neighbours."""
    attributes: Annotated[VertexAttributes, _CheckedAs(_Attributes)] = Field(
        default_factory=VertexAttributes
    )
    expectations: (
        Annotated[
            list[ExpectationSpec],
            Field(max_length=MAX_EXPECTATIONS_PER_VERTEX),
            Schema(x_kubernetes_list_type="map", x_kubernetes_list_map_keys=["name"]),
        ]
        | None
    ) = None
    """Data-quality expectations on the step's output rows, added to the job's
    expect/expect_or_drop/expect_or_fail decorators (an entry replaces a declared one of the
    same name). Vertices only."""

    @model_validator(mode="after")
    def _expectations_on_vertices_only(self) -> Self:
        # The CRD's CEL rule says the same; the driver would refuse them when it plans.
        if self.expectations and self.kind is not VertexKind.VERTEX:
            raise ValueError(
                f"pipeline.vertices[{self.name}].expectations: expectations apply to vertices "
                f"(kind vertex), not to a {self.kind.value}"
            )
        return self


class PipelineSpec(ResourceModel):
    """The pipeline's named steps as the job declares them, with per-vertex attribute
    overrides. The operator validates and plans it before starting the driver (errors become a
    Ready=False condition) and passes it to the job."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": {
            # Required of a pipeline the API server stores; a reader takes a pipeline without
            # steps (one an old object has) as none declared.
            "required": ["vertices"],
            **rules(
                Rule(
                    "self.vertices.all(v, v.inputs.all(i, self.vertices.exists(w, w.name == i)))",
                    "every input must name a vertex of the pipeline",
                )
            ),
        }
    }

    name: Annotated[str, Field(max_length=63), Schema(pattern=DNS1123_LABEL_PATTERN)] | None = None
    """Pipeline name (defaults to the SparkApplication's name)."""
    vertices: Annotated[
        list[VertexSpec],
        Field(min_length=1, max_length=MAX_VERTICES),
        Schema(x_kubernetes_list_type="map", x_kubernetes_list_map_keys=["name"]),
    ] = Field(default_factory=list)
    """The steps (sources, vertices, sinks), names unique."""

    def description(self, app_name: str) -> PipelineDescription:
        """The declared pipeline as the runtime's :class:`PipelineDescription` (unchecked),
        named ``name`` or else ``app_name``."""
        return PipelineDescription(
            name=self.name or app_name,
            vertices=[
                VertexDescription(
                    name=v.name,
                    kind=v.kind,
                    inputs=list(v.inputs),
                    bounded=v.bounded,
                    python=v.python,
                    attributes=v.attributes,
                )
                for v in self.vertices
            ],
        )


# -------------------------------------------------------------------------------- sampling


class _Redaction(RedactionRule):
    """Columns and what happens to them."""

    model_config = RedactionRule.model_config | ConfigDict(use_attribute_docstrings=True)

    columns: Annotated[
        list[
            Annotated[
                str,
                Field(min_length=1, max_length=256),
                Schema(pattern=r".*\S.*", description="A column name or pattern."),
            ]
        ],
        Field(min_length=1, max_length=100),
    ]
    """Top-level column names or patterns (*, ?, [..])."""
    action: RedactionAction
    """drop, mask or hash."""


def _driver_bounds(name: str) -> Any:
    return Field(ge=RANGES[name].low, le=RANGES[name].high)


class SamplingSpec(ResourceModel):
    """Live sampling settings (spark.sparkglass.sampling.*); DataSample and REST parameters
    are bounded by them."""

    # Defaults and bounds are the driver's (SamplingSettings): what the operator hands to
    # Spark when the spec says nothing is what the driver would use anyway. Durations stay the
    # strings the user wrote (Spark reads them as such); their range is the API server's and
    # the driver's to check.
    enabled: bool = _DRIVER_DEFAULTS.enabled
    """Install the taps; off means DataSamples end Disabled."""
    max_sample_rate: Annotated[Int32, _driver_bounds("max_sample_rate")] = (
        _DRIVER_DEFAULTS.max_sample_rate
    )
    """Records per second captured per subtask (1-10000)."""
    max_record_length: Annotated[Int32, _driver_bounds("max_record_length")] = (
        _DRIVER_DEFAULTS.max_record_length
    )
    """Characters of one rendered record kept (longer ones are cut)."""
    sampling_window: Annotated[Duration, _driver_range("sampling_window_ms", "samplingWindow")] = (
        format_duration_ms(_DRIVER_DEFAULTS.sampling_window_ms)
    )
    """Default capture window of a round, 1s-30s (e.g. 3s)."""
    refresh_interval: Annotated[
        Duration, _driver_range("refresh_interval_ms", "refreshInterval")
    ] = format_duration_ms(_DRIVER_DEFAULTS.refresh_interval_ms)
    """How long a round's result is served from cache (e.g. 60s)."""
    timeout: Annotated[Duration, _driver_range("timeout_ms", "timeout")] = format_duration_ms(
        _DRIVER_DEFAULTS.timeout_ms
    )
    """How long a round may take before it ends with TIMEOUT (e.g. 30s)."""
    control_port: Annotated[
        Int32,
        Field(ge=1024, le=65535),
        AfterValidator(_free_port),
        Rule(
            f"!(self in {sorted(DRIVER_PORTS.values())})",
            "controlPort may not be one of the driver's other ports: "
            + ", ".join(f"{p} ({n})" for n, p in DRIVER_PORTS.items()),
        ),
    ] = 4045
    """TCP port of the driver's control endpoint (the HTTP server that opens sampling rounds;
    its bearer token is in the Secret <name>-control-token); not 4040, 7078 or 7079, the
    driver's other ports."""
    redact: Annotated[
        list[Annotated[RedactionRule, _CheckedAs(_Redaction)]], Field(max_length=MAX_RULES)
    ] = Field(default_factory=list)
    """Redaction of sampled rows, applied on the executors before a row leaves them: drop
    removes the columns, mask replaces non-null values by ***, hash by their HMAC-SHA-256
    under the application's key (in its control-token Secret). Top-level column names or
    shell patterns, case-insensitive (a name with a dot in backticks); the strongest action
    wins. No round request can lower it."""


# ------------------------------------------------------------------------------------ spec

#: Seconds a driver Pod may stay Pending (pulling its image, waiting for a node) before the
#: start counts as a failed submission. 10 minutes covers a cold pull of a multi-GB Spark
#: image on a slow registry; a smaller value fails faster on a broken cluster.
DEFAULT_DRIVER_START_TIMEOUT_SECONDS = 600
MIN_DRIVER_START_TIMEOUT_SECONDS = 30
MAX_DRIVER_START_TIMEOUT_SECONDS = 86400

#: Bounds of a sparkConf / hadoopConf entry. A rule reads every value (a regex over each), and
#: the API server prices a rule by the longest value the schema allows: unbounded values made
#: the sparkConf rules cost more than 100 times its limit, so the CRD could not be applied.
#: Spark's longest everyday values (extraJavaOptions, a classpath) fit 4096 characters.
MAX_CONF_KEY_LENGTH = 256
MAX_CONF_VALUE_LENGTH = 4096
MAX_CONF_ENTRIES = 512
#: Longest ``status.applicationState.errorMessage``: writers cut theirs to it.
MAX_MESSAGE_LENGTH = 4096


def _short_keys(value: dict[str, str]) -> dict[str, str]:
    long = sorted(k for k in value if len(k) > MAX_CONF_KEY_LENGTH)
    if long:
        raise ValueError(
            f"{long[0][:40]}...: a key is {len(long[0])} characters, allowed 1-"
            f"{MAX_CONF_KEY_LENGTH}"
        )
    return value


# A key's length cannot be bounded by the schema (JSON Schema's propertyNames is not
# structural); this rule does it, at the cost of a size() per key.
_CONF_KEY_LENGTH = Rule(
    f"self.all(k, size(k) <= {MAX_CONF_KEY_LENGTH})",
    f"keys are at most {MAX_CONF_KEY_LENGTH} characters",
)
_SparkConfValue = Annotated[
    str,
    Field(max_length=MAX_CONF_VALUE_LENGTH),
    Schema(description="A Spark configuration value."),
]
_HadoopConfValue = Annotated[
    str,
    Field(max_length=MAX_CONF_VALUE_LENGTH),
    Schema(description="A Hadoop configuration value."),
]
_Volumes = Annotated[
    list[Annotated[KubernetesObject, AsWritten(core.Volume)]],
    Field(max_length=64),
    Schema(x_kubernetes_list_type="map", x_kubernetes_list_map_keys=["name"]),
]


class SparkApplicationSpec(ResourceModel):
    """The Spark job and its pipeline. A change restarts the driver, except of
    timeToLiveSeconds, restartPolicy, startTimeoutSeconds and suspend, which apply in
    place."""

    type: Literal["Python", "Scala", "Java", "R"] = "Python"
    """Language of the main application (as in spark-operator v1beta2)."""
    mode: Literal["client"] = "client"
    """Deploy mode. Only client is supported: the operator runs the driver as a Pod and
    spark-submit starts it in client mode against the Kubernetes master."""
    spark_version: Annotated[str, Field(max_length=32)] | None = None
    """Spark version of the image, informational (e.g. 4.0.1)."""
    image: Annotated[str, Field(min_length=1, max_length=1024)]
    """Container image of the driver and executors: Spark, Python, sparkglass and the
    sparkglass plugin jar (built by `sparkglass jar build`)."""
    image_pull_policy: core.PullPolicy | None = None
    """Image pull policy of the driver and executor containers."""
    image_pull_secrets: Annotated[
        list[Annotated[str, Field(max_length=253), Schema(description="A Secret name.")]],
        Field(max_length=16),
    ] = Field(default_factory=list)
    """Names of Secrets in this namespace used to pull the image."""
    main_application_file: Annotated[str, Field(min_length=1, max_length=2048)]
    """The application's main file (a .py for Python), e.g. local:///opt/app/flights.py."""
    main_class: Annotated[str, Field(max_length=512)] | None = None
    """Main class for Java and Scala applications."""
    arguments: Annotated[
        list[Annotated[str, Field(max_length=4096), Schema(description="One argument.")]],
        Field(max_length=256),
    ] = Field(default_factory=list)
    """Arguments passed to the main application."""
    spark_conf: Annotated[
        dict[str, _SparkConfValue],
        Field(max_length=MAX_CONF_ENTRIES),
        AfterValidator(_short_keys),
        AfterValidator(_user_spark_conf),
        _CONF_KEY_LENGTH,
        _NO_OPERATOR_KEY,
        _NO_CONTROL_TOKEN_SECRET,
        _NO_CONTROL_KEY,
        _PER_ADDRESS_RANGE,
    ] = Field(default_factory=dict)
    """Extra Spark configuration (spark-defaults style); a spark.plugins or spark.jars value
    is extended with the sparkglass plugin and its jar. The operator owns, and refuses here,
    spark.master, spark.submit.deployMode, spark.kubernetes.namespace,
    spark.kubernetes.driver.pod.name, spark.driver.host, spark.driver.bindAddress,
    spark.driver.port, spark.driver.blockManager.port, spark.ui.port,
    spark.kubernetes.executor.podTemplateFile,
    spark.kubernetes.executor.podTemplateContainerName,
    spark.kubernetes.executor.label.sparkglass.io/application,
    spark.kubernetes.authenticate.driver.serviceAccountName,
    spark.kubernetes.authenticate.executor.serviceAccountName (use driver/executor
    serviceAccount), spark.authenticate and spark.authenticate.secret (RPC authentication is
    always on, with a secret Spark generates per application),
    spark.kubernetes.driver.pod.featureSteps and spark.kubernetes.executor.pod.featureSteps
    (user classes that rewrite the Pods, around the ServiceAccount and Secret checks) and
    spark.sparkglass.control.* (but max-body-bytes, connection-timeout, max-connections and
    max-connections-per-address, an integer in 1-1024); Spark's secret properties
    (spark.kubernetes.driver/executor.secrets.NAME and .secretKeyRef.VAR=NAME:KEY) may not name
    a control-token Secret (*-control-token). Keys are at most 256 characters, values 4096.
    Values are stored in a ConfigMap that the view role can read: pass credentials through
    driver/executor env valueFrom or envFrom with a Secret instead."""
    hadoop_conf: Annotated[
        dict[str, _HadoopConfValue],
        Field(max_length=MAX_CONF_ENTRIES),
        AfterValidator(_short_keys),
        _CONF_KEY_LENGTH,
    ] = Field(default_factory=dict)
    """Hadoop configuration; each key k becomes the Spark property spark.hadoop.k (before
    sparkConf). Keys are at most 256 characters, values 4096."""
    # Before driver and executor: their operator checks read the volumes.
    volumes: _Volumes = Field(default_factory=list)
    """Volumes the driver and executor containers mount (by spec.driver / spec.executor
    volumeMounts); each Pod gets those it mounts."""
    spark_ui_options: SparkUIOptions = Field(default_factory=SparkUIOptions, alias="sparkUIOptions")
    suspend: bool = False
    """Stop the application: the driver Pod is deleted and none is created (state SUSPENDED)
    until suspend is false again, which starts a new driver. Applies in place."""
    deps: Dependencies = Field(default_factory=Dependencies)
    driver: DriverSettings = Field(default_factory=DriverSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    dynamic_allocation: DynamicAllocation = Field(default_factory=DynamicAllocation)
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    time_to_live_seconds: Annotated[Int64, Field(ge=1)] | None = None
    """Delete the SparkApplication (and, through owner references, its driver Pod, Service,
    ConfigMap and Secret) this many seconds after it terminated."""
    start_timeout_seconds: Annotated[
        Int64,
        Field(ge=MIN_DRIVER_START_TIMEOUT_SECONDS, le=MAX_DRIVER_START_TIMEOUT_SECONDS),
    ] = DEFAULT_DRIVER_START_TIMEOUT_SECONDS
    """Seconds the driver Pod may stay Pending (image pull, scheduling) before the start counts
    as a failed submission (state SUBMISSION_FAILED, or a re-try under
    restartPolicy.onSubmissionFailureRetries), with the scheduler's or kubelet's reason in
    applicationState.errorMessage and an Event. A container that cannot start (ErrImagePull,
    ImagePullBackOff, InvalidImageName, ErrImageNeverPull, CreateContainerConfigError,
    CreateContainerError) fails at once; an Unschedulable Pod waits up to this timeout, since
    a cluster autoscaler may be adding a node for it."""
    pipeline: PipelineSpec = Field(default_factory=PipelineSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)

    @classmethod
    def parse(cls, spec: Any) -> Self:
        """Parse a stored spec dict; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(dict(spec or {}))

    def pipeline_description(self, app_name: str) -> PipelineDescription:
        """The declared pipeline as the runtime's :class:`PipelineDescription` (unchecked)."""
        return self.pipeline.description(app_name)


# ---------------------------------------------------------------------------------- status


class ApplicationStateName(StrEnum):
    """The application's state, with the Kubeflow spark-operator's names."""

    NEW = ""
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBMISSION_FAILED = "SUBMISSION_FAILED"
    PENDING_RERUN = "PENDING_RERUN"
    INVALIDATING = "INVALIDATING"
    SUCCEEDING = "SUCCEEDING"
    FAILING = "FAILING"
    SUSPENDED = "SUSPENDED"
    UNKNOWN = "UNKNOWN"


class ApplicationState(ResourceModel):
    """The application state, with the spark-operator's state names."""

    state: ApplicationStateName | None = None
    """SUBMITTED (driver Pod created), RUNNING, SUCCEEDING / COMPLETED, FAILING / FAILED,
    SUBMISSION_FAILED, PENDING_RERUN (waiting to re-run), INVALIDATING (spec changed, driver
    being replaced), SUSPENDED (spec.suspend: no driver Pod), UNKNOWN."""
    error_message: Annotated[str, Field(max_length=MAX_MESSAGE_LENGTH)] | None = None
    """Why the application failed, when it did."""


_Count = Annotated[Int64, Field(ge=0)]
_NullableCount = Annotated[Int64, Field(ge=0), Schema(nullable=True)]


class ExpectationProgress(ResourceModel):
    """The counts of one expectation."""

    action: ExpectationAction
    """What a failing row does: warn (counted only), drop (dropped from the vertex's output)
    or fail (the micro-batch fails)."""
    passed_last_micro_batch: _Count | None = None
    """Rows that passed, in the last micro-batch that ran the vertex."""
    failed_last_micro_batch: _Count | None = None
    """Rows that failed, in the last micro-batch that ran the vertex."""
    passed_total: _Count | None = None
    """Rows that passed since the driver started."""
    failed_total: _Count | None = None
    """Rows that failed since the driver started."""


class VertexProgress(ResourceModel):
    """The metrics of one vertex."""

    rows_last_micro_batch: _Count | None = None
    """Rows through the vertex in the last micro-batch."""
    rows_per_second: float | None = None
    """Rows per second through the vertex (last micro-batch)."""
    rows_total: _Count | None = None
    """Rows through the vertex since the driver started."""
    processed_rows_per_second: Annotated[float, Schema(nullable=True)] | None = None
    """The vertex's rows per second of its queries' micro-batch durations (null: unknown)."""
    batch_duration_ms: _NullableCount | None = None
    """Duration of the latest micro-batch that ran the vertex, ms (the longest of its
    queries'; null: unknown)."""
    latency_ms: _NullableCount | None = None
    """From the previous micro-batch's trigger to the latest one's end, ms: the longest a row
    waited for its sink (null: unknown)."""
    event_time_watermark: Annotated[Int64, Schema(nullable=True)] | None = None
    """The earliest event-time watermark of the vertex's queries (ms since the epoch; null:
    none has one)."""
    state_rows: _NullableCount | None = None
    """Rows in state of the vertex's queries (null: unknown or stateless)."""
    expectations: (
        Annotated[dict[str, ExpectationProgress], Field(max_length=MAX_EXPECTATIONS_PER_VERTEX)]
        | None
    ) = None
    """Rows that passed and failed each expectation of the vertex, by expectation name (a
    DNS-1123 label), at most 32. Counted on streaming vertices only (a bounded vertex's stay
    0); a row that fails several expectations counts as failed for each."""


class Progress(ResourceModel):
    """The running driver's live pipeline metrics, read by the operator every
    --progress-seconds (default 60 s) and copied when they changed: query state, micro-batches,
    rows and rows/s per vertex, batch duration, latency, watermark, rows in state, and the pass
    and fail counts of each expectation. observedAt is the driver's clock (ms), publishedAt
    when the operator last published a change. The page's graph shows them in Kubernetes mode.
    Bounded by the operator: at most 64 vertices (the pipeline's, in spec order), 32
    expectations each and 64 KiB as compact JSON; what does not fit is left out and truncated
    is true."""

    truncated: bool | None = None
    """True when the operator left metrics out to keep status.progress within its bounds
    (vertices past 64, expectations past 32 per vertex, or past 64 KiB in all, expectations
    going first); the driver's GET /api/v1/progress has them all."""
    state: Literal["NOT_STARTED", "ACTIVE", "STOPPED", "FAILED"] | None = None
    """Query state: NOT_STARTED, ACTIVE, STOPPED or FAILED."""
    active_queries: Annotated[int, Field(ge=0)] | None = None
    """Streaming queries running now."""
    failed: Annotated[str, Field(max_length=1000), Schema(nullable=True)] | None = None
    """Why a query failed (cut to 1,000 characters); null when none failed."""
    micro_batches: _Count | None = None
    """Micro-batches completed since the driver started."""
    input_rows_per_second: float | None = None
    """Rows per second arriving at the sources (last micro-batch)."""
    processed_rows_per_second: float | None = None
    """Rows per second processed (last micro-batch)."""
    batch_duration_ms: _NullableCount | None = None
    """Duration of the latest micro-batch, ms (the longest over the queries; null: unknown)."""
    latency_ms: _NullableCount | None = None
    """From the previous micro-batch's trigger to the latest one's end, ms (the longest over
    the queries; null: unknown)."""
    event_time_watermark: Annotated[Int64, Schema(nullable=True)] | None = None
    """The earliest event-time watermark over the queries (ms since the epoch; null: none
    has one)."""
    state_rows: _NullableCount | None = None
    """Rows in state over all the queries (null: unknown or stateless)."""
    last_micro_batch_timestamp: Annotated[Int64, Schema(nullable=True)] | None = None
    """When the last micro-batch ended (ms since the epoch, driver clock)."""
    observed_at: Int64 | None = None
    """When the driver took these metrics (ms since the epoch, driver clock)."""
    published_at: Annotated[str, Schema(format="date-time")] | None = None
    """When the operator last published a change read from the driver (RFC 3339)."""
    vertices: Annotated[dict[str, VertexProgress], Field(max_length=1000)] | None = None
    """Metrics per vertex name."""


class DriverInfo(ResourceModel):
    """The current driver."""

    pod_name: str | None = None
    """Name of the driver Pod."""
    pod_ip: str | None = Field(default=None, alias="podIP")
    """IP address of the driver Pod, once running."""
    service_name: str | None = None
    """The driver's headless Service (executors connect through it)."""
    control_endpoint: str | None = None
    """Base URL of the driver's control endpoint, once running."""
    control_secret_name: str | None = None
    """Secret holding the control endpoint's bearer token (key token)."""
    web_ui_address: str | None = Field(default=None, alias="webUIAddress")
    """host:port of the Spark UI, once running."""


class PlannedIdempotent(ResourceModel):
    """Only the latest output per key matters."""

    key: list[Annotated[str, Schema(description="A column name.")]] | None = None
    """Columns that identify a result."""
    order_by: str | None = None
    """Column whose largest value marks the latest output."""


class PlannedAttributes(ResourceModel):
    """A step's attributes."""

    no_output_until_end_of_input: bool | None = None
    """Emits only after all its input ended."""
    idempotent: PlannedIdempotent | None = None
    not_cache_record: bool | None = None
    """Keeps no reference to input or output records."""


class PlannedVertex(ResourceModel):
    """One planned step."""

    name: str | None = None
    """Step name."""
    kind: str | None = None
    """source, vertex or sink."""
    inputs: list[Annotated[str, Schema(description="A step name.")]] | None = None
    """Names of the steps it reads."""
    bounded: bool | None = None
    """Whether its output ends."""
    python: bool | None = None
    """Whether it runs Python code on the executors."""
    declared: PlannedAttributes | None = None
    """Attributes as declared (after spec overrides)."""
    adjusted: PlannedAttributes | None = None
    """Attributes after propagation and checks (what runs)."""
    inherited_from: str | None = None
    """The end-of-input vertex whose attribute this one inherited."""
    phase: Int32 | None = None
    """Execution phase: steps of phase n start after the blocking outputs of earlier phases
    finished (0 runs first)."""
    materialize: bool | None = None
    """Its output is written once and read back downstream."""
    latest_per_key: bool | None = None
    """Only its latest row per key per micro-batch goes downstream."""
    fusion_group: str | None = None
    """The fused Python pass it runs in, if any."""
    tap: str | None = None
    """Where its sampling tap sits (output, materialized-output, latest-per-key-output,
    none)."""


class PlannedEdge(ResourceModel):
    """One input edge upstream -> downstream."""

    upstream: str | None = None
    """The step read."""
    downstream: str | None = None
    """The step reading it."""
    kind: Literal["pipelined", "blocking"] | None = None
    """pipelined (records flow as produced) or blocking (the upstream output is materialized;
    downstream starts after it finished)."""
    fused: bool | None = None
    """Both ends run in one fused Python pass (batches not copied)."""


_Attempts = Annotated[Int32, Field(ge=0)]
_Time = Annotated[str, Schema(format="date-time")]


class SparkApplicationStatus(ResourceModel):
    """What the operator observed; written only by the operator."""

    application_state: ApplicationState | None = None
    progress: Progress | None = None
    driver_info: DriverInfo | None = None
    spark_application_id: Annotated[str, Field(max_length=253)] | None = None
    """Spark's application id of the current driver run: the driver Pod's spark-app-selector
    label, else the one Spark puts on the run's executor Pods. Cleared when a new driver run
    starts."""
    executor_state: (
        Annotated[
            dict[
                str,
                Annotated[
                    Literal["PENDING", "RUNNING", "COMPLETED", "FAILED", "UNKNOWN"],
                    Schema(description="PENDING, RUNNING, COMPLETED, FAILED or UNKNOWN."),
                ],
            ],
            Field(max_length=500),
        ]
        | None
    ) = None
    """Executor Pod name -> state, for the executor Pods the current driver Pod owns (as the
    Kubeflow spark-operator reports them): the Pod's phase, or its ended executor container.
    An executor whose Pod is gone keeps its end state; one that had not ended is UNKNOWN while
    the driver runs, else COMPLETED after a driver that succeeded and FAILED otherwise.
    Emptied when a new driver run starts; at most 500 entries (ended, gone ones dropped
    first)."""
    execution_attempts: _Attempts | None = None
    """Driver runs so far (restarts included)."""
    submission_attempts: _Attempts | None = None
    """Driver Pod creations so far."""
    last_submission_attempt_time: _Time | None = None
    """When the last driver Pod was created."""
    termination_time: _Time | None = None
    """When the application reached COMPLETED or FAILED."""
    next_rerun_time: _Time | None = None
    """When a PENDING_RERUN application re-runs."""
    restarts: _Attempts | None = None
    """Re-runs done under restartPolicy since the last spec change."""
    spec_hash: str | None = None
    """Hash of the spec the current driver runs."""
    vertices: list[PlannedVertex] | None = None
    """The planned pipeline (the planner's resolution of spec.pipeline): every step with its
    declared and adjusted attributes, in topological order."""
    edges: list[PlannedEdge] | None = None
    """The planned edges and their kinds."""
    observed_generation: Int64 | None = None
    """The metadata.generation this status describes."""
    conditions: Conditions | None = None
    """Standard conditions. Ready: the application does what its spec asks (True with reason
    Running, or Completed for a finished batch application; False with reason InvalidPipeline,
    DriverPending, Failed...)."""


# -------------------------------------------------------------------------------- resource


class SparkApplication(ResourceModel):
    """SparkApplication runs a PySpark pipeline whose steps can be sampled live with
    DataSample resources."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule(
                f"self.metadata.name.matches('{DNS1035_LABEL_PATTERN}')"
                f" && size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                f"metadata.name must be a DNS-1035 label of at most {MAX_NAME_LENGTH} "
                "characters (lower-case letters, digits and '-', starting with a letter): the "
                "driver Service <name>-driver and the label values are made from it",
            )
        )
    }

    api_version: str | None = None
    """APIVersion of this object (sparkglass.io/v1alpha1)."""
    kind: str | None = None
    """Kind of this object (SparkApplication)."""
    metadata: Metadata | None = None
    spec: SparkApplicationSpec
    status: SparkApplicationStatus | None = None


RESOURCE = CustomResource(
    group=GROUP,
    version=VERSION,
    kind="SparkApplication",
    plural="sparkapplications",
    singular="sparkapplication",
    model=SparkApplication,
    short_names=("sgapp",),
    categories=("sparkglass",),
    labels={"app.kubernetes.io/name": "sparkglass", "app.kubernetes.io/component": "crd"},
    columns=(
        PrinterColumn(
            "State",
            "string",
            ".status.applicationState.state",
            "The application state (spark-operator state names).",
        ),
        PrinterColumn(
            "Attempts",
            "integer",
            ".status.executionAttempts",
            "Driver runs so far (restarts included).",
        ),
        PrinterColumn(
            "Ready",
            "string",
            '.status.conditions[?(@.type=="Ready")].status',
            "Whether the spec is valid and the driver is running.",
            priority=1,
        ),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
    comment=(
        "SparkApplication: a PySpark job run by the sparkglass operator. The spec uses the "
        "field names of the Kubeflow spark-operator's sparkoperator.k8s.io/v1beta2 "
        "SparkApplication where they overlap, plus `pipeline` (the declared vertices and their "
        "attributes) and `sampling`. The operator runs the driver as a Pod in client mode "
        "against the Kubernetes master; executors are Spark's own."
    ),
)
