"""Typed views of the two custom resources' specs (``sparkglass.io/v1alpha1``).

The CRDs in ``crds/`` are the contract; these models read a spec dict as the API server
stores it (camelCase keys) and apply the same defaults as the CRDs, because the operator must
also work where the server does no defaulting (the loopback emulator in tests, or an object
written before a default was added); ``tests/operator/test_units.py`` checks every default and
bound restated here against ``crds/*.yaml``. Durations are checked with the CRDs' own grammar
(:mod:`sparkglass.runtime.contract.durations`). Unknown keys are ignored so a newer CRD never
breaks an older operator.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.description import (
    IdempotentAttribute,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
)
from sparkglass.runtime.contract.durations import parse_duration_ms
from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.expectations import Expectation
from sparkglass.runtime.contract.redaction import RedactionRule
from sparkglass.runtime.contract.round_request import RoundKind, RoundRequest, round_request

from .pod_customization import check_pod_settings, check_volumes


def parse_duration(text: str, *, field: str = "duration") -> float:
    """Seconds (float) in a duration of the one grammar (``3s``, ``1500ms``, ``1m30s``).

    The grammar is :mod:`sparkglass.runtime.contract.durations`; this wrapper exists because
    the operator's deadlines are in seconds. Raises
    :class:`~sparkglass.runtime.contract.errors.SamplingSettingsError` (a ``ValueError``)
    naming ``field`` when ``text`` is not such a duration.
    """
    return parse_duration_ms(text, field=field) / 1000


def _duration(value: str, info: ValidationInfo) -> str:
    # Checked on parse, so a malformed duration fails the spec (InvalidSpec) where the API
    # server did not check it, instead of failing later in the driver.
    parse_duration(value, field=to_camel(info.field_name or "duration"))
    return value


#: ``spec.sparkConf`` keys only the operator sets; the CRD refuses them too (one CEL rule each
#: for the keys and the prefix, with messages naming them). Each would break the driver: the
#: master and deploy mode make ``spark-submit`` start something else; the namespace, Pod name,
#: host and ports are what the driver's headless Service and the executors rely on; the
#: executor Pod template carries the restricted security defaults and ``spec.executor``'s Pod
#: settings; the control endpoint's address, token and TLS files are what the operator pins;
#: the ServiceAccount properties and Spark's Pod feature steps would go around the operator's
#: allowlist.
OPERATOR_OWNED_CONF_KEYS = frozenset(
    {
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
        # The accounts the Pods run as: spec.driver/executor.serviceAccount, checked against
        # the operator's allowlist (pod_privileges), are the only way to choose them.
        "spark.kubernetes.authenticate.driver.serviceAccountName",
        "spark.kubernetes.authenticate.executor.serviceAccountName",
        # Spark's RPC authentication (security A6): the chart's NetworkPolicy admits every Pod
        # of the namespace labelled as some application's executor to the driver's RPC and
        # block-manager ports, so only the application's own secret keeps another
        # application's executors out. On Kubernetes Spark generates the secret per
        # application and hands it to its executors itself; a fixed spark.authenticate.secret
        # would sit in the ConfigMap that the namespace's view role reads.
        "spark.authenticate",
        "spark.authenticate.secret",
        # Spark on Kubernetes loads these classes (from the user's jar) to rewrite the driver
        # and executor Pods it builds: one could set any ServiceAccount or mount any Secret,
        # around the allowlist and the control-token rule of pod_privileges, which check the
        # spec only. The operator sets neither; no application may.
        "spark.kubernetes.driver.pod.featureSteps",
        "spark.kubernetes.executor.pod.featureSteps",
    }
)
#: Prefixes of operator-owned keys: the control endpoint (port, host, token, TLS files)...
OPERATOR_OWNED_CONF_PREFIXES = ("spark.sparkglass.control.",)
#: ...except its tuning knobs, which change no address or credential (runtime ``endpoint``).
USER_CONTROL_CONF_KEYS = frozenset(
    {
        "spark.sparkglass.control.max-body-bytes",
        "spark.sparkglass.control.connection-timeout",
        "spark.sparkglass.control.max-connections",
        "spark.sparkglass.control.max-connections-per-address",
    }
)


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


#: A duration kept as the string the user wrote (Spark reads it as such), checked on parse.
Duration = Annotated[str, AfterValidator(_duration)]


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


#: A Kubernetes object (``core/v1`` shape: a Volume, VolumeMount, Toleration, Container...)
#: kept as the user wrote it. The CRD validates its structure; the API server validates the
#: whole object when the operator creates the Pod; the operator reads only the names it must
#: check against what it owns (:mod:`pod_customization`).
KubernetesObject = dict[str, Any]


class EnvVar(_Spec):
    """One environment variable: ``value``, or ``valueFrom`` (a ``core/v1`` EnvVarSource:
    ``secretKeyRef``, ``configMapKeyRef``, ``fieldRef``, ``resourceFieldRef``)."""

    name: str
    value: str = ""
    value_from: KubernetesObject | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self

    def manifest(self) -> dict[str, Any]:
        """The container ``env`` entry."""
        if self.value_from is not None:
            return {"name": self.name, "valueFrom": self.value_from}
        return {"name": self.name, "value": self.value}


class PodSettings(_Spec):
    """``spec.driver`` / ``spec.executor`` (spark-operator v1beta2 ``SparkPodSpec`` subset,
    with ``DriverSpec``/``ExecutorSpec``'s ``priorityClassName``). The Kubernetes objects
    are ``core/v1`` shapes, merged by :mod:`pod_customization` under the operator's own."""

    cores: int | None = None
    core_limit: str | None = None
    memory: str | None = None
    memory_overhead: str | None = None
    image: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    env: list[EnvVar] = Field(default_factory=list)
    env_from: list[KubernetesObject] = Field(default_factory=list)
    volume_mounts: list[KubernetesObject] = Field(default_factory=list)
    tolerations: list[KubernetesObject] = Field(default_factory=list)
    affinity: KubernetesObject | None = None
    pod_security_context: KubernetesObject | None = None
    security_context: KubernetesObject | None = None
    init_containers: list[KubernetesObject] = Field(default_factory=list)
    sidecars: list[KubernetesObject] = Field(default_factory=list)
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    instances: int | None = None  # executors only


class SparkUIOptions(_Spec):
    """``spec.sparkUIOptions``: what applies without an Ingress. The UI is served on the
    driver's headless Service ``<app>-driver`` (port ``spark-ui``); these add labels and
    annotations to that Service (for a service mesh, an external-dns or a Prometheus
    scrape rule). spark-operator's ``servicePort``, ``serviceType`` and ``ingress*`` are not
    supported: the Service is headless, its ports are the operator's."""

    service_annotations: dict[str, str] = Field(default_factory=dict)
    service_labels: dict[str, str] = Field(default_factory=dict)


class Dependencies(_Spec):
    """``spec.deps``."""

    jars: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    py_files: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    repositories: list[str] = Field(default_factory=list)
    exclude_packages: list[str] = Field(default_factory=list)


class DynamicAllocation(_Spec):
    """``spec.dynamicAllocation``."""

    enabled: bool = False
    initial_executors: int | None = None
    min_executors: int | None = None
    max_executors: int | None = None
    shuffle_tracking_timeout: int | None = None  # ms


class RestartType(StrEnum):
    NEVER = "Never"
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"


class RestartPolicy(_Spec):
    """``spec.restartPolicy``; intervals in seconds."""

    type: RestartType = RestartType.NEVER
    on_failure_retries: int | None = None
    on_failure_retry_interval: int = 5
    on_submission_failure_retries: int | None = None
    on_submission_failure_retry_interval: int = 5


class ExpectationSpec(Expectation):
    """One entry of ``spec.pipeline.vertices[].expectations`` (the runtime's model)."""


class VertexSpec(_Spec):
    """One entry of ``spec.pipeline.vertices``."""

    name: str
    kind: VertexKind = VertexKind.VERTEX
    inputs: list[str] = Field(default_factory=list)
    bounded: bool = True
    python: bool = False
    attributes: VertexAttributes = Field(default_factory=VertexAttributes)
    expectations: list[ExpectationSpec] | None = None

    @model_validator(mode="after")
    def _expectations_on_vertices_only(self) -> VertexSpec:
        # The CRD's CEL rule says the same; the driver would refuse them when it plans.
        if self.expectations and self.kind is not VertexKind.VERTEX:
            raise ValueError(
                f"pipeline.vertices[{self.name}].expectations: expectations apply to vertices "
                f"(kind vertex), not to a {self.kind.value}"
            )
        return self


class PipelineSpec(_Spec):
    """``spec.pipeline``."""

    name: str | None = None
    vertices: list[VertexSpec] = Field(default_factory=list)


class SamplingSpec(_Spec):
    """``spec.sampling``; durations stay strings (Spark reads them as such)."""

    enabled: bool = False
    max_sample_rate: int = 100
    max_record_length: int = 10000
    sampling_window: Duration = "3s"
    refresh_interval: Duration = "60s"
    timeout: Duration = "30s"
    control_port: int = 4045
    redact: list[RedactionRule] = Field(default_factory=list)


#: Seconds a driver Pod may stay Pending (pulling its image, waiting for a node) before the
#: start counts as a failed submission. 10 minutes covers a cold pull of a multi-GB Spark
#: image on a slow registry; a smaller value fails faster on a broken cluster.
DEFAULT_DRIVER_START_TIMEOUT_SECONDS = 600
MIN_DRIVER_START_TIMEOUT_SECONDS = 30
MAX_DRIVER_START_TIMEOUT_SECONDS = 86400


class SparkApplicationSpec(_Spec):
    """``SparkApplication.spec``."""

    type: str = "Python"
    mode: str = "client"
    spark_version: str | None = None
    image: str
    image_pull_policy: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list)
    main_application_file: str
    main_class: str | None = None
    arguments: list[str] = Field(default_factory=list)
    spark_conf: Annotated[dict[str, str], AfterValidator(_user_spark_conf)] = Field(
        default_factory=dict
    )
    hadoop_conf: dict[str, str] = Field(default_factory=dict)
    volumes: list[KubernetesObject] = Field(default_factory=list)
    spark_ui_options: SparkUIOptions = Field(default_factory=SparkUIOptions, alias="sparkUIOptions")
    suspend: bool = False
    deps: Dependencies = Field(default_factory=Dependencies)
    driver: PodSettings = Field(default_factory=PodSettings)
    executor: PodSettings = Field(default_factory=PodSettings)
    dynamic_allocation: DynamicAllocation = Field(default_factory=DynamicAllocation)
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    time_to_live_seconds: int | None = None
    start_timeout_seconds: int = Field(
        default=DEFAULT_DRIVER_START_TIMEOUT_SECONDS,
        ge=MIN_DRIVER_START_TIMEOUT_SECONDS,
        le=MAX_DRIVER_START_TIMEOUT_SECONDS,
    )
    pipeline: PipelineSpec = Field(default_factory=PipelineSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)

    @field_validator("volumes")
    @classmethod
    def _no_reserved_volume(cls, value: list[KubernetesObject]) -> list[KubernetesObject]:
        check_volumes(value)
        return value

    @field_validator("driver", "executor")
    @classmethod
    def _no_collision(cls, value: PodSettings, info: ValidationInfo) -> PodSettings:
        # ``volumes`` is declared before ``driver``/``executor``, so it is in ``info.data``.
        check_pod_settings(value, info.data.get("volumes") or [], role=info.field_name or "")
        return value

    @classmethod
    def parse(cls, spec: Any) -> SparkApplicationSpec:
        """Parse a stored spec dict; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(dict(spec or {}))

    def pipeline_description(self, app_name: str) -> PipelineDescription:
        """The declared pipeline as the runtime's :class:`PipelineDescription` (unchecked)."""
        return PipelineDescription(
            name=self.pipeline.name or app_name,
            vertices=[
                VertexDescription(
                    name=v.name,
                    kind=v.kind,
                    inputs=list(v.inputs),
                    bounded=v.bounded,
                    python=v.python,
                    attributes=v.attributes,
                )
                for v in self.pipeline.vertices
            ],
        )


#: ``spec.applicationRef.apiVersion`` values: sparkglass's own SparkApplication (the default)
#: and the Kubeflow spark-operator's (:mod:`.kubeflow`). Both kinds are ``SparkApplication``.
SPARKGLASS_API_VERSION = "sparkglass.io/v1alpha1"
KUBEFLOW_API_VERSION = "sparkoperator.k8s.io/v1beta2"


class ApplicationApiVersion(StrEnum):
    SPARKGLASS = SPARKGLASS_API_VERSION
    KUBEFLOW = KUBEFLOW_API_VERSION


class ApplicationKind(StrEnum):
    SPARK_APPLICATION = "SparkApplication"


def _allowed(value: Any, allowed: type[StrEnum], field: str) -> Any:
    # Checked before pydantic's enum check so that the message names the field and the
    # allowed values (pydantic's names neither the field nor, for a DataSample, the path).
    if isinstance(value, str) and value not in {m.value for m in allowed}:
        raise InvalidParameterError(
            f"{field}={value!r} is not supported: allowed " + ", ".join(m.value for m in allowed),
            field=field,
        )
    return value


class ApplicationRef(_Spec):
    """``spec.applicationRef``: which application, always in the DataSample's own namespace.

    ``apiVersion`` picks the kind of application: ``sparkglass.io/v1alpha1`` (default; the
    operator created its driver) or ``sparkoperator.k8s.io/v1beta2`` (a Kubeflow
    spark-operator application; the operator finds its driver Pod by labels and owner
    reference, :mod:`.kubeflow`). There is no ``namespace``: the API server prunes one (the
    CRD has no such field); one that reaches the operator anyway (an API server that does not
    prune, a restored backup) is refused rather than ignored, so that nobody believes they
    sampled another namespace's application."""

    api_version: ApplicationApiVersion = ApplicationApiVersion.SPARKGLASS
    kind: ApplicationKind = ApplicationKind.SPARK_APPLICATION
    name: str

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("namespace") is not None:
                raise InvalidParameterError(
                    "applicationRef.namespace is not supported: a DataSample samples an "
                    "application in its own namespace",
                    field="applicationRef.namespace",
                )
            _allowed(data.get("apiVersion"), ApplicationApiVersion, "applicationRef.apiVersion")
            _allowed(data.get("kind"), ApplicationKind, "applicationRef.kind")
        return data

    @property
    def is_kubeflow(self) -> bool:
        """Whether this names a Kubeflow spark-operator SparkApplication."""
        return self.api_version is ApplicationApiVersion.KUBEFLOW


#: Longest ``applicationStartTimeout`` (the CRD's bound), seconds.
MAX_START_TIMEOUT_SECONDS = 3600.0


class DataSampleSpec(_Spec):
    """``DataSample.spec``."""

    application_ref: ApplicationRef
    vertex: str
    subtask_index: int | None = None
    max_records: int = Field(default=100, ge=1, le=5000)
    sampling_window: Duration | None = None
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    backoff_limit: int = Field(default=3, ge=0, le=10)
    kind: RoundKind = RoundKind.OUTPUT
    filter: str | None = None
    columns: list[str] | None = None
    expectation: str | None = None
    application_start_timeout: Duration = "5m"

    @field_validator("application_start_timeout")
    @classmethod
    def _start_timeout_range(cls, value: str) -> str:
        if parse_duration(value, field="applicationStartTimeout") > MAX_START_TIMEOUT_SECONDS:
            raise InvalidParameterError(
                f"applicationStartTimeout={value} is out of range: allowed 0s–1h",
                field="applicationStartTimeout",
            )
        return value

    def round_request(self) -> RoundRequest:
        """The round's kind, filter, columns and expectation; raises
        :class:`~sparkglass.runtime.contract.errors.InvalidParameterError` naming the field."""
        return round_request(self.kind.value, self.filter, self.columns, self.expectation)

    @classmethod
    def parse(cls, spec: Any) -> DataSampleSpec:
        """Parse a stored spec dict; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(dict(spec or {}))


__all__ = [
    "KUBEFLOW_API_VERSION",
    "SPARKGLASS_API_VERSION",
    "ApplicationApiVersion",
    "ApplicationKind",
    "ApplicationRef",
    "DataSampleSpec",
    "IdempotentAttribute",
    "RestartPolicy",
    "RestartType",
    "SamplingSpec",
    "SparkApplicationSpec",
    "parse_duration",
]
